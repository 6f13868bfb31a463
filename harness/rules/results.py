"""Run sets in the MLPerf results layout, read and scored as the result summarizer does.

A run set is ``<package>/results/<system>/<benchmark>/`` holding ``result_*.txt`` logs (the
summarizer's own glob) and, where the review added one, ``scaling.json``. Logs are read
tolerantly, as real submissions need: lines that are not MLLOG records are skipped, and a
record may follow a rank prefix (``0: :::MLLOG {...}``).

Besides the olympic score this gives the spread of a set: mean, standard deviation and
coefficient of variation of the converged runs' minutes, and a bootstrap 95% interval of
the olympic score (seeded, so a set always gets the same interval).
"""

from __future__ import annotations

import json
import math
import random
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeGuard

from harness.errors import ErrorCategory, HarnessError
from harness.mllog import keys
from harness.mllog.reader import read_records
from harness.rules.scoring import RunTime, Score, olympic_score

RESULT_GLOB = "result_*.txt"


@dataclass(frozen=True)
class RunLog:
    """What scoring needs from one result log."""

    path: Path
    benchmark: str | None
    run_start_ms: float | None
    run_stop_ms: float | None
    status: str | None
    eval_accuracies: tuple[tuple[float, float], ...]  # (epoch_num, value)
    throughput: float | None
    eval_times_ms: tuple[float, ...] = ()  # time_ms of each eval_accuracy record
    values: Mapping[str, Any] = field(default_factory=dict, hash=False)  # last value of each key, as the checker keeps them
    # samples_count of the last eval_accuracy before run_stop: the rcp_checker's convergence for benchmarks counted in samples
    stop_samples_count: Any = None
    eval_samples_counts: tuple[Any, ...] = ()  # samples_count of each eval_accuracy (None where it has none)

    @property
    def eval_points(self) -> list[tuple[float, float, float]]:
        """``(epoch_num, AUC, time_ms)`` of each evaluation."""
        return [(e, v, t) for (e, v), t in zip(self.eval_accuracies, self.eval_times_ms)]

    def converged(self, target: float | None) -> bool:
        """Ended ``status=success`` (and, when the target is known, some eval reached it)."""
        if self.run_start_ms is None or self.run_stop_ms is None or self.status != keys.SUCCESS:
            return False
        return target is None or any(v >= target for _, v in self.eval_accuracies)

    def run_time(self, target: float | None) -> RunTime:
        start = self.run_start_ms if self.run_start_ms is not None else 0.0
        stop = self.run_stop_ms if self.run_stop_ms is not None else start
        return RunTime(start, stop, self.converged(target))


def read_run_log(path: Path) -> RunLog:
    """Read one result log (through :func:`harness.mllog.reader.read_records`, the one MLLOG reader).
    A malformed MLLOG record is an error naming file and line."""
    benchmark = start = stop = status = throughput = step_time = None
    evals: list[tuple[float, float]] = []
    eval_times: list[float] = []
    eval_samples: list[Any] = []
    values: dict[str, Any] = {}
    last_samples = stop_samples = None
    for lineno, record in read_records(path, what="MLLOG record"):
        if record["key"] in (keys.RUN_START, keys.RUN_STOP) and not _is_number(record.get("time_ms")):
            raise HarnessError(f"{path}:{lineno}: {record['key']} has no numeric time_ms")
        key, value, meta = record["key"], record.get("value"), record.get("metadata") or {}
        values[key] = value
        if key == keys.EVAL_ACCURACY and stop is None:
            last_samples = meta.get(keys.SAMPLES_COUNT) if isinstance(meta, dict) else None
        if key == keys.SUBMISSION_BENCHMARK:
            benchmark = str(value)
        elif key == keys.RUN_START and start is None:
            start = float(record["time_ms"])
        elif key == keys.RUN_STOP and stop is None:
            stop = float(record["time_ms"])
            status = meta.get(keys.STATUS) if isinstance(meta, dict) else None
            stop_samples = last_samples
        elif key == keys.EVAL_ACCURACY and _is_number(value):
            epoch = meta.get(keys.EPOCH_NUM, meta.get(keys.SAMPLES_COUNT, 0)) if isinstance(meta, dict) else 0
            evals.append((float(epoch) if _is_number(epoch) else 0.0, float(value)))
            eval_samples.append(meta.get(keys.SAMPLES_COUNT) if isinstance(meta, dict) else None)
            eval_times.append(float(record["time_ms"]) if _is_number(record.get("time_ms")) else 0.0)
        elif key == keys.TRACKED_STATS and isinstance(value, dict) and _is_number(value.get(keys.THROUGHPUT)):
            throughput = float(value[keys.THROUGHPUT])
        elif key == keys.TRACKED_STATS and isinstance(value, dict) and _is_number(value.get(keys.TRAIN_STEP_TIME)):
            step_time = float(value[keys.TRAIN_STEP_TIME])
        elif key == keys.TRAIN_STEP_TIME and _is_number(value):
            step_time = float(value)
    if throughput is None and step_time and step_time > 0 and _is_number(values.get(keys.GLOBAL_BATCH_SIZE)):
        # some submitters log only the time of a training step (seconds): samples/s is the batch over it
        throughput = float(values[keys.GLOBAL_BATCH_SIZE]) / step_time
    return RunLog(path, benchmark, start, stop, status, tuple(evals), throughput, tuple(eval_times), values,
                  stop_samples_count=stop_samples, eval_samples_counts=tuple(eval_samples))


def _is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def scaling_factor(run_set_dir: Path) -> float:
    """``scaling.json``'s ``scaling_factor``, 1.0 when the file is absent."""
    path = run_set_dir / "scaling.json"
    if not path.is_file():
        return 1.0
    try:
        factor = json.loads(path.read_text())["scaling_factor"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise HarnessError(f"{path}: no usable scaling_factor ({err})") from None
    if not isinstance(factor, (int, float)) or not math.isfinite(factor) or factor <= 0:
        raise HarnessError(f"{path}: scaling_factor must be a positive number")
    return float(factor)


@dataclass(frozen=True)
class RunSetStats:
    """A scored run set: the official score and the spread behind it."""

    runs: tuple[RunLog, ...]
    score: Score | None
    score_error: str | None
    scaling_factor: float
    mean_minutes: float | None
    stdev_minutes: float | None
    coefficient_of_variation: float | None
    bootstrap_95: tuple[float, float] | None


def bootstrap_interval(times: list[RunTime], *, max_dropped: int, scaling: float, resamples: int = 2000,
                       seed: int = 0) -> tuple[float, float] | None:
    """2.5th and 97.5th percentiles of the olympic score over resampled run sets."""
    rnd = random.Random(seed)
    scores = []
    for _ in range(resamples):
        sample = [rnd.choice(times) for _ in times]
        try:
            scores.append(olympic_score(sample, max_dropped=max_dropped, scaling_factor=scaling).minutes)
        except HarnessError:
            continue
    if len(scores) < resamples // 2:
        return None
    scores.sort()
    return scores[int(0.025 * (len(scores) - 1))], scores[int(math.ceil(0.975 * (len(scores) - 1)))]


def score_run_set(run_set_dir: Path, *, target: float | None = None, max_dropped: int = 1) -> RunSetStats:
    """Read and score ``<system>/<benchmark>/``: olympic score x scaling factor, and spread."""
    paths = sorted(p for p in Path(run_set_dir).glob(RESULT_GLOB) if p.is_file())
    if not paths:
        raise HarnessError(f"{run_set_dir}: no {RESULT_GLOB} files", ErrorCategory.NOT_FOUND)
    return run_set_stats(
        [read_run_log(p) for p in paths], scaling=scaling_factor(Path(run_set_dir)), target=target,
        max_dropped=max_dropped,
    )


def run_set_stats(runs: list[RunLog], *, scaling: float = 1.0, target: float | None = None,
                  max_dropped: int = 1, non_compliant: frozenset[Path] = frozenset()) -> RunSetStats:
    """The olympic score (or why there is none) and the spread of these runs. A run whose log is in
    ``non_compliant`` counts as one that did not converge, as MLPerf's results summarizer drops a
    log that fails the compliance checker."""
    times = [r.run_time(target) for r in runs]
    times = [replace(t, converged=False) if r.path in non_compliant else t for r, t in zip(runs, times)]
    score, error = None, None
    try:
        score = olympic_score(times, max_dropped=max_dropped, scaling_factor=scaling)
    except HarnessError as err:
        error = str(err)
    minutes = [t.minutes for t in times if t.converged]
    mean = statistics.fmean(minutes) if minutes else None
    stdev = statistics.stdev(minutes) if len(minutes) > 1 else None
    return RunSetStats(
        runs=tuple(runs),
        score=score,
        score_error=error,
        scaling_factor=scaling,
        mean_minutes=mean,
        stdev_minutes=stdev,
        coefficient_of_variation=(stdev / mean) if stdev is not None and mean else None,
        bootstrap_95=bootstrap_interval(times, max_dropped=max_dropped, scaling=scaling) if score else None,
    )
