"""Scoring a run set: each finished run's clock and convergence, read from its log in the results
tree as the result summarizer reads them, and the set's score and spread over its runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.rules.results import RunLog, RunSetStats, read_run_log, run_set_stats
from harness.rules.scoring import Score
from harness.rules.seeds import Seed, SeedSource
from harness.runsets.plan import RunSetPlan


@dataclass(frozen=True)
class RunOutcome:
    """One finished run: its index in the set, its seed, its log, its time and final AUC, and the
    fraction of the epoch at whose evaluation it reached the target (None: it did not)."""

    index: int
    seed: Seed
    log_path: Path
    minutes: float
    converged: bool
    final_auc: float | None
    reached_at_epoch: float | None = None


@dataclass(frozen=True)
class RunSetOutcome:
    """A scored run set: its runs, its score (or why it has none) and where its files are."""

    runs: list[RunOutcome] = field(default_factory=list)
    score: Score | None = None
    score_error: str | None = None
    stats: RunSetStats | None = None
    system_json: Path | None = None
    results_dir: Path | None = None  # the set's folder
    results_root: Path | None = None  # the results tree it is in (``--results``, or the next free root beside it)


def run_outcome(index: int, seed: Seed, log: Path | RunLog, target_auc: float) -> RunOutcome:
    """Run ``index``'s outcome, read from its log: a run just finished (its path; a log without
    run_start or run_stop is refused), or one of a set being scored (the log as read)."""
    if isinstance(log, Path):
        log = read_run_log(log)
        if log.run_start_ms is None or log.run_stop_ms is None:
            raise HarnessError(f"{log.path}: the log lacks run_start or run_stop")
    run_time = log.run_time(target_auc)
    final = log.eval_accuracies[-1][1] if log.eval_accuracies else None
    reached = (next((epoch for epoch, auc in log.eval_accuracies if auc >= target_auc), None)
               if run_time.converged else None)
    return RunOutcome(index, seed, log.path, run_time.minutes, run_time.converged, final, reached)


def score_results(plan: RunSetPlan, manifest: dict[str, Any]) -> RunSetOutcome:
    """Score the set's runs ``0 .. runs-1`` from their logs in the results tree."""
    runs: list[RunOutcome] = []
    logs = [read_run_log(plan.result_path(index)) for index in range(plan.runs)]
    for index, log in enumerate(logs):
        info = manifest["runs"].get(str(index), {})
        seed = Seed(int(info.get("seed", -1)), SeedSource(info.get("seed_source", SeedSource.OS.value)))
        runs.append(run_outcome(index, seed, log, plan.spec.target_auc))
    stats = run_set_stats(logs, target=plan.spec.target_auc, max_dropped=plan.spec.max_non_converged_runs)
    return RunSetOutcome(runs=runs, score=stats.score, score_error=stats.score_error, stats=stats,
                         system_json=plan.system_json, results_dir=plan.results_dir,
                         results_root=plan.request.results_dir)
