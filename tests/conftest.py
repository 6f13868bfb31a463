"""Shared test configuration: where the real MLPerf logs (``../shared/mlperf-logs``) are."""

import os
from pathlib import Path

import pytest


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
