"""Shared test configuration: one compute thread per test process, and where the real MLPerf logs
(``../shared/mlperf-logs``) are."""

import os
from pathlib import Path

import pytest

# The suite runs as two pytest-xdist workers on two cores, and every process a test starts (a
# `harness run`, its worker, torchrun's ranks) inherits this. With torch's default of one
# thread per core, the two workers' OpenMP threads oversubscribe the cores and spin: two
# concurrent `harness run`s of the default benchmark took 85.8 s against 23.0 s with one
# thread each (2026-12-02, this machine). torchrun gives its ranks one thread for the same reason.
os.environ["OMP_NUM_THREADS"] = "1"


def find_shared_logs() -> Path | None:
    """``$HARNESS_MLPERF_LOGS``, else ``shared/mlperf-logs`` beside the checkout (as in CI)."""
    env = os.environ.get("HARNESS_MLPERF_LOGS")
    candidates = [Path(env)] if env else []
    candidates.append(Path(__file__).resolve().parents[2] / "shared" / "mlperf-logs")
    return next((c for c in candidates if (c / "README.md").is_file()), None)


SHARED_LOGS = find_shared_logs()


@pytest.fixture(scope="session")
def shared_logs() -> Path:
    if SHARED_LOGS is None:
        pytest.skip("the real MLPerf logs (../shared/mlperf-logs) are not beside this checkout")
    return SHARED_LOGS


def pytest_collection_finish(session) -> None:
    """Freeze what collection made (torch's and every test module's objects) for the garbage
    collector, as the fork server does for its workers (harness.reference.engine.forkserver_last):
    the full collections a test's training loop sets off do not walk them again and again
    (``HARNESS_TEST_NO_GC_FREEZE=1`` leaves them unfrozen, to measure the difference: three files
    of in-process training tests took 12.5 s unfrozen, 10.1 s frozen)."""
    if not os.environ.get("HARNESS_TEST_NO_GC_FREEZE"):
        import gc

        gc.freeze()
