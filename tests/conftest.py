"""Shared test configuration: one compute thread per test process, where the real MLPerf logs
(``tests/data/mlperf-logs``, see ``tests/data/NOTICE``) are, and the report's results tree
(:mod:`tests.report.support.report_tree`: tests/report/ and tests/cli/test_report.py use it)."""

import os
from pathlib import Path

import pytest

from tests.report.support.report_tree import tree  # noqa: F401 - the fixture

# The suite runs as two pytest-xdist workers on two cores, and every process a test starts (a
# `harness run`, its worker, torchrun's ranks) inherits this. With torch's default of one
# thread per core, the two workers' OpenMP threads oversubscribe the cores and spin: two
# concurrent `harness run`s of the default benchmark took 85.8 s against 23.0 s with one
# thread each (2026-12-02, this machine). torchrun gives its ranks one thread for the same reason.
os.environ["OMP_NUM_THREADS"] = "1"


# The real MLPerf logs the suite checks the harness against (copies of public results, in the
# repository so that every checkout tests agreement with the official tools).
REPO_LOGS = Path(__file__).resolve().parent / "data" / "mlperf-logs"


def find_shared_logs() -> Path:
    """``$HARNESS_MLPERF_LOGS`` when set (another copy of the same tree), else the repository's
    ``tests/data/mlperf-logs``. Where the logs are is fixed, not searched for: a missing folder
    is reported by the ``shared_logs`` fixture, never silently skipped."""
    env = os.environ.get("HARNESS_MLPERF_LOGS")
    return Path(env) if env else REPO_LOGS


SHARED_LOGS = find_shared_logs()


def require_shared_logs() -> Path:
    """:data:`SHARED_LOGS`, or an error naming the folder when its README.md (the table of the
    expected scores) is not there: the tests that read real logs are part of the suite, and a
    checkout without them would pass without checking agreement with MLPerf's tools."""
    if not (SHARED_LOGS / "README.md").is_file():
        source = "$HARNESS_MLPERF_LOGS" if os.environ.get("HARNESS_MLPERF_LOGS") else "the repository"
        raise FileNotFoundError(
            f"the real MLPerf logs are missing: no {SHARED_LOGS / 'README.md'} ({source}; "
            "they are committed as tests/data/mlperf-logs, see tests/data/NOTICE)")
    return SHARED_LOGS


@pytest.fixture(scope="session")
def shared_logs() -> Path:
    """The real MLPerf logs (``tests/data/mlperf-logs`` or ``$HARNESS_MLPERF_LOGS``); an error,
    not a skip, where they are missing."""
    return require_shared_logs()


def pytest_collection_finish(session) -> None:
    """Freeze what collection made (torch's and every test module's objects) for the garbage
    collector, as the fork server does for its workers (harness.reference.forkserver_last):
    the full collections a test's training loop sets off do not walk them again and again
    (``HARNESS_TEST_NO_GC_FREEZE=1`` leaves them unfrozen, to measure the difference: three files
    of in-process training tests took 12.5 s unfrozen, 10.1 s frozen)."""
    if not os.environ.get("HARNESS_TEST_NO_GC_FREEZE"):
        import gc

        gc.freeze()
