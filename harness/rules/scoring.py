"""Olympic scoring of a run set, as MLPerf's result summarizer computes it.

Each run's time to train is ``(run_stop - run_start) / 60000`` minutes. Runs are sorted;
the fastest ``d`` are dropped, and the slowest ``d`` less the number of non-converged runs
(which count as slower than every converged run and are already out); the rest are
averaged. ``d`` is 1 for DLRM. More non-converged runs than ``d`` invalidate the set.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness.errors import ErrorCategory, HarnessError

MS_PER_MINUTE = 60_000.0


@dataclass(frozen=True)
class RunTime:
    """One run's outcome: its clock and whether it reached the target."""

    run_start_ms: float
    run_stop_ms: float
    converged: bool

    @property
    def minutes(self) -> float:
        return (self.run_stop_ms - self.run_start_ms) / MS_PER_MINUTE


@dataclass(frozen=True)
class Score:
    minutes: float
    counted_minutes: tuple[float, ...]
    converged_runs: int
    non_converged_runs: int


def olympic_score(runs: Sequence[RunTime], *, max_dropped: int = 1, scaling_factor: float = 1.0) -> Score:
    """The olympic mean of the converged runs' minutes, times ``scaling_factor``.

    Raises HarnessError (RUN_FAILED) when more than ``max_dropped`` runs did not converge or
    nothing is left to average.
    """
    scores = sorted(r.minutes for r in runs if r.converged)
    dropped = sum(1 for r in runs if not r.converged)
    if dropped > max_dropped:
        raise HarnessError(
            f"{_runs(dropped)} did not reach the target; at most {max_dropped} may, so the set has no score",
            ErrorCategory.RUN_FAILED,
        )
    counted = scores[max_dropped : len(scores) - (max_dropped - dropped)]
    if not counted:
        raise HarnessError(
            f"{_runs(len(runs))} leave{'s' if len(runs) == 1 else ''} nothing to average after dropping the fastest "
            "and slowest",
            ErrorCategory.RUN_FAILED,
        )
    return Score(
        minutes=sum(counted) / len(counted) * scaling_factor,
        counted_minutes=tuple(counted),
        converged_runs=len(scores),
        non_converged_runs=dropped,
    )


def _runs(n: int) -> str:
    return f"{n} run" if n == 1 else f"{n} runs"
