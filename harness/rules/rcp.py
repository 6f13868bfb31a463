"""Reference Convergence Points (RCPs), as MLPerf Training's ``rcp_checker`` does them.

An RCP is what the reference implementation needs to converge at one global batch size: the
epochs to converge of many reference runs. A submission's run set passes when its olympic mean
of epochs to converge is not significantly faster than the reference's: at or above the
*minimum acceptable mean*, the lowest mean a one-sided two-sample t-test (p = 0.05, equal
variances, the reference's stdev for both) does not tell apart from the RCP mean. A set that
converges faster than the RCP mean but within that bound gets its score multiplied by
``RCP mean / submission mean`` (``scaling.json``). RCPs that converge slower than the
interpolation of their neighbours are pruned; a batch size between two RCPs is checked against
their linear interpolation.

This mirrors ``mlperf_logging/rcp_checker/rcp_checker.py`` (4.1.68) step by step, including
its quirks (population stdev of all runs, the olympic mean of the runs, the t-test's sample
sizes, the binary search's tolerance, epochs rounded to 3 decimals; samples, for the benchmarks
that count convergence in samples such as dlrmv4, as logged). RCP files are MLPerf's
JSON: ``{"<benchmark>_ref_<bs>": {"Benchmark", "BS", "Hyperparams", "Epochs to converge", ...}}``.
"""

from __future__ import annotations

import datetime
import enum
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import scipy.stats
from mlperf_logging.rcp_checker.rcp_checker import submission_runs as official

from harness.errors import ErrorCategory, HarnessError
from harness.mllog import keys
from harness.rules.results import RESULT_GLOB, RunLog, read_run_log
from harness.rules.specs import load_benchmark

ALPHA = 0.05
TOLERANCE = 0.0001  # the binary search for the minimum acceptable mean stops at this width
EPOCH_DECIMALS = 3  # the checker rounds a submission's epoch_num to 3 decimals
NOT_CONVERGED = math.inf  # the checker's 1e9: sorts last, so the olympic mean drops it
RCP_DIR = resources.files("harness.rules").joinpath("rcps")
_MLPERF_RCP_DIR = resources.files("mlperf_logging.rcp_checker")
_OLYMPIC_DROP = {"unet3d": 4}  # runs dropped at each end of the sorted list; 1 otherwise
_MAX_NOT_CONVERGED = {"unet3d": 4}  # more non-converged runs than this fail the set; 1 otherwise
_STAT_KEYS = ("RCP Mean", "RCP Stdev", "Max Speedup", "Min Epochs")
# Benchmarks whose convergence the checker counts in samples: the samples_count of the last
# eval_accuracy before run_stop, as logged (not rounded), whatever the target (read_submission_file)
# (dlrmv4_synthetic is ours: dlrmv4's rules at laptop scale, counted as dlrmv4 is)
SAMPLES_BENCHMARKS = frozenset({"llama2_70b_lora", "flux1", "llama31_405b", "llama31_8b", "gpt_oss_20b",
                                "deepseekv3_671b", "qwen35_397b_grpo", "dlrmv4", "dlrmv4_synthetic"})


def convergence_unit(benchmark: str | None) -> str:
    """What a benchmark's RCPs count: ``"samples"`` or ``"epochs"``."""
    return "samples" if benchmark in SAMPLES_BENCHMARKS else "epochs"


def _samples_count(value: Any, run: RunLog, which: str) -> float:
    """A logged ``samples_count`` as a number; one line naming the log when it is not one."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise HarnessError(f"{run.path}: no samples_count on {which} ({run.benchmark} converges in samples)")
    return float(value)


class Verdict(enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    MISSING_RCP = "missing-rcp"


class RcpPass(enum.Enum):
    """Which RCPs a check looks in: the pruned ones (the checker's default) or all."""

    PRUNED = "pruned_rcps"
    FULL = "full_rcps"


@dataclass(frozen=True)
class Rcp:
    """One reference convergence point and its statistics.

    ``mean`` is the olympic mean of the epochs, ``stdev`` the population stdev of all of them,
    ``min_acceptable_mean`` the lowest submission mean the t-test accepts.
    """

    name: str
    benchmark: str
    batch_size: int
    epochs: tuple[float, ...]
    hyperparams: dict[str, Any]
    mean: float
    stdev: float
    min_acceptable_mean: float
    interpolated: bool = False
    extra: dict[str, Any] = field(default_factory=dict)  # Creator, When, Platform, Precision

    @property
    def max_speedup(self) -> float:
        return self.mean / self.min_acceptable_mean

    def to_json(self) -> dict[str, Any]:
        """The record in MLPerf's RCP file format, plus the checker's computed statistics."""
        return {
            "Benchmark": self.benchmark,
            **self.extra,
            "BS": self.batch_size,
            "Hyperparams": self.hyperparams,
            "Epochs to converge": list(self.epochs),
            "RCP Mean": self.mean,
            "RCP Stdev": self.stdev,
            "Max Speedup": self.max_speedup,
            "Min Epochs": self.min_acceptable_mean,
        }


@dataclass(frozen=True)
class RcpCheck:
    """The outcome of checking a run set against its benchmark's RCPs."""

    verdict: Verdict
    message: str  # the checker's own words: "RCP found", "RCP Interpolation", ...
    benchmark: str
    batch_size: int
    epochs: tuple[float, ...]  # per run, sorted; inf for a run that did not converge
    submission_mean: float | None  # olympic mean of epochs; None when too many runs failed
    rcp: Rcp | None  # the RCP used, interpolated or not
    normalization_factor: float  # what goes into scaling.json (1.0 = no scaling)

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict.value,
            "message": self.message,
            "benchmark": self.benchmark,
            "batch_size": self.batch_size,
            "epochs": [e if math.isfinite(e) else None for e in self.epochs],
            "submission_mean": self.submission_mean,
            "rcp": self.rcp.to_json() | {"name": self.rcp.name} if self.rcp else None,
            "normalization_factor": self.normalization_factor,
        }


# --- statistics ---------------------------------------------------------------------------


def olympic_drop(benchmark: str) -> int:
    return _OLYMPIC_DROP.get(benchmark, 1)


def olympic_mean(values: list[float] | tuple[float, ...], *, drop: int = 1) -> float:
    """Mean of the sorted values without the ``drop`` lowest and ``drop`` highest."""
    kept = sorted(values)[drop : len(values) - drop]
    if not kept:
        raise HarnessError(f"an olympic mean dropping {drop} at each end needs more than {2 * drop} values")
    return float(np.mean(kept))


def one_sided_p_value(subm_mean: float, subm_stdev: float, subm_n: int,
                      ref_mean: float, ref_stdev: float, ref_n: int) -> float:
    """P-value that the submission's mean is lower than the reference's (pooled t-test)."""
    t_stat, p_two_sided = scipy.stats.ttest_ind_from_stats(
        subm_mean, subm_stdev, subm_n, ref_mean, ref_stdev, ref_n, equal_var=True
    )
    return float(p_two_sided / 2 if t_stat < 0 else 1 - p_two_sided / 2)


def min_acceptable_mean(mean: float, stdev: float, *, ref_samples: int, submission_runs: int,
                        alpha: float = ALPHA, tolerance: float = TOLERANCE) -> float:
    """Binary search in [0, mean] for the lowest mean whose one-sided p-value exceeds alpha.

    As the checker does: the candidate mean gets ``ref_samples`` samples and the RCP mean the
    submission's ``submission_runs - 2`` (the olympic mean's), both with the RCP's stdev.
    """
    if stdev == 0:
        return mean
    low, high = 0.0, mean
    mid = (low + high) / 2
    while high - low > tolerance:
        p = one_sided_p_value(mid, stdev, ref_samples, mean, stdev, submission_runs - 2)
        if p > alpha:
            high = mid
        else:
            low = mid
        mid = (low + high) / 2
    return mid


def make_rcp(name: str, benchmark: str, batch_size: int, epochs: list[float] | tuple[float, ...], *,
             hyperparams: dict[str, Any], submission_runs: int, extra: dict[str, Any] | None = None) -> Rcp:
    """An RCP from reference epochs to converge, with the checker's statistics."""
    drop = olympic_drop(benchmark)
    mean = olympic_mean(epochs, drop=drop)
    stdev = float(np.std(sorted(epochs)))  # the checker sorts in place first: same summation order
    minimum = min_acceptable_mean(mean, stdev, ref_samples=len(epochs) - 2 * drop, submission_runs=submission_runs)
    return Rcp(name, benchmark, int(batch_size), tuple(epochs), dict(hyperparams), mean, stdev, minimum,
               extra=dict(extra or {}))


def interpolate(batch_size: int, low: Rcp, high: Rcp, *, submission_runs: int) -> Rcp:
    """The RCP at ``batch_size`` between ``low`` and ``high``: mean and stdev linear in batch size.

    The checker gives the interpolated point ``2 x submission_runs`` reference samples.
    """
    mean = _lerp(batch_size, low.batch_size, high.batch_size, low.mean, high.mean)
    stdev = _lerp(batch_size, low.batch_size, high.batch_size, low.stdev, high.stdev)
    minimum = min_acceptable_mean(mean, stdev, ref_samples=submission_runs * 2, submission_runs=submission_runs)
    return Rcp(f"{low.benchmark}_interp_{batch_size}", low.benchmark, batch_size, (), {}, mean, stdev, minimum,
               interpolated=True)


def _lerp(x: float, x0: float, x1: float, y0: float, y1: float) -> float:
    return float(np.interp(x, [x0, x1], [y0, y1]))


def prune(rcps: list[Rcp], *, submission_runs: int) -> list[Rcp]:
    """The checker's pruning, on RCPs sorted by batch size.

    Drop every RCP below the batch size of the fastest-converging one; then, left to right,
    drop each RCP that converges slower than the interpolation of its two neighbours.
    """
    if not rcps:
        return []
    fastest = min(rcps, key=lambda r: r.mean)
    kept = [r for r in rcps if r.batch_size >= fastest.batch_size]
    i = 1
    while i < len(kept) - 1:
        between = interpolate(kept[i].batch_size, kept[i - 1], kept[i + 1], submission_runs=submission_runs)
        if kept[i].mean > between.mean:
            del kept[i]
        else:
            i += 1
    return kept


def normalization_factor(rcp_mean: float, submission_mean: float) -> float:
    """``RCP mean / submission mean``, never below 1: faster-converging sets are scaled up."""
    factor = rcp_mean / submission_mean
    return 1.0 if factor < 1 else factor


# --- RCP files ----------------------------------------------------------------------------


def submission_runs(benchmark: str) -> int:
    """Runs in a submission's set: the checker's table where it knows the benchmark, else the spec's."""
    if benchmark in official["training"]:
        return int(official["training"][benchmark])
    return load_benchmark(benchmark).required_runs


def load_rcps(path: Path | Any, *, benchmark: str | None = None) -> list[Rcp]:
    """Read an RCP JSON file (MLPerf's format), sorted by batch size, with statistics computed."""
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise HarnessError(f"RCP file {path} does not exist", ErrorCategory.NOT_FOUND) from None
    except (OSError, ValueError) as err:
        raise HarnessError(f"RCP file {path} is not readable JSON: {err}") from None
    if not isinstance(raw, dict):
        raise HarnessError(f"RCP file {path} must hold an object of records")
    rcps = [_rcp_from_json(path, name, record) for name, record in raw.items()]
    names = {r.benchmark for r in rcps}
    if benchmark is not None and names - {benchmark}:
        raise HarnessError(f"RCP file {path} holds RCPs of {sorted(names)}, not only {benchmark!r}")
    return sorted(rcps, key=lambda r: r.batch_size)


def _rcp_from_json(path: Any, name: str, record: Any) -> Rcp:
    try:
        benchmark, bs, hyper = record["Benchmark"], record["BS"], record["Hyperparams"]
        epochs = record.get("Epochs to converge", record.get("samples to converge"))
    except (KeyError, TypeError):
        raise HarnessError(f"RCP file {path}: record {name!r} lacks Benchmark, BS or Hyperparams") from None
    if not isinstance(epochs, list) or not all(isinstance(e, (int, float)) for e in epochs):
        raise HarnessError(f"RCP file {path}: record {name!r} has no list of epochs to converge")
    extra = {k: v for k, v in record.items()
             if k not in ("Benchmark", "BS", "Hyperparams", "Epochs to converge", *_STAT_KEYS)}
    return make_rcp(name, benchmark, bs, [float(e) for e in epochs], hyperparams=hyper,
                    submission_runs=submission_runs(benchmark), extra=extra)


def rcp_file(benchmark: str, *, version: str | None = None) -> Any:
    """The RCP file of a benchmark: the harness's own, else mlperf_logging's for ``version``.

    ``version`` defaults to the benchmark's ruleset (``harness/rules/benchmarks/<name>.yaml``).
    """
    own = RCP_DIR.joinpath(f"rcps_{benchmark}.json")
    if own.is_file():
        return own
    if version is None:
        version = load_benchmark(benchmark).ruleset
    shipped = _MLPERF_RCP_DIR.joinpath(f"training_{version}", f"rcps_{benchmark}.json")
    if shipped.is_file():
        return shipped
    raise HarnessError(
        f"no RCPs for {benchmark!r} (looked for {own} and mlperf_logging's training_{version}); "
        f"generate them with `harness rcp generate --benchmark {benchmark}`",
        ErrorCategory.NOT_FOUND,
    )


# --- reading runs -------------------------------------------------------------------------


def reference_epochs(run: RunLog, target: float) -> float | None:
    """Epoch of the first evaluation reaching ``target`` (rounded as the checker rounds), or None;
    for a benchmark counted in samples, that evaluation's ``samples_count``."""
    samples = run.benchmark in SAMPLES_BENCHMARKS
    for i, (epoch, value) in enumerate(run.eval_accuracies):
        if value >= target:
            if not samples:
                return round(epoch, EPOCH_DECIMALS)
            count = run.eval_samples_counts[i] if i < len(run.eval_samples_counts) else None
            return _samples_count(count, run, f"the eval_accuracy reaching {target}")
    return None


def submission_epochs(run: RunLog, target: float | None) -> float:
    """Epochs to converge of a submission run; ``NOT_CONVERGED`` unless it stopped with success.

    The epoch is that of the first evaluation reaching ``target``; with no target, or none
    reaching it, the checker's rule: the last evaluation before ``run_stop``. For a benchmark
    counted in samples (``SAMPLES_BENCHMARKS``, e.g. dlrmv4) always the checker's rule: the
    ``samples_count`` of the last evaluation before ``run_stop``, unrounded.
    """
    if run.benchmark in SAMPLES_BENCHMARKS:
        if run.status != keys.SUCCESS:
            return NOT_CONVERGED
        return _samples_count(run.stop_samples_count, run, "the last eval_accuracy before run_stop")
    if run.status != keys.SUCCESS or not run.eval_accuracies:
        return NOT_CONVERGED
    reached = reference_epochs(run, target) if target is not None else None
    return reached if reached is not None else round(run.eval_accuracies[-1][0], EPOCH_DECIMALS)


def _run_paths(run_dir: Path) -> list[Path]:
    paths = sorted(p for p in Path(run_dir).glob(RESULT_GLOB) if p.is_file())
    if not paths:
        raise HarnessError(f"{run_dir}: no {RESULT_GLOB} files", ErrorCategory.NOT_FOUND)
    return paths


def _one_value(paths: list[Path], values: Sequence[Mapping[str, Any]], key: str) -> Any:
    seen = {json.dumps(v.get(key), sort_keys=True) for v in values}
    if len(seen) != 1:
        raise HarnessError(f"{paths[0].parent}: the logs disagree on {key} ({', '.join(sorted(seen))})")
    found = values[0].get(key)
    if found is None:
        raise HarnessError(f"{paths[0].parent}: the logs do not log {key}")
    return found


def _batch_size(paths: list[Path], values: Sequence[Mapping[str, Any]]) -> int:
    found = _one_value(paths, values, keys.GLOBAL_BATCH_SIZE)
    if isinstance(found, bool) or not isinstance(found, (int, float)) or not math.isfinite(found) \
            or found != int(found) or found < 1:
        raise HarnessError(f"{paths[0].parent}: global_batch_size {found!r} is not a positive integer")
    return int(found)


# --- generating ---------------------------------------------------------------------------


def generate_rcp(benchmark: str, logs_dir: Path, *, target: float | None = None) -> Rcp:
    """The RCP of reference runs in ``logs_dir``: epochs (samples, for a benchmark counted in
    samples) to first reach the benchmark's target.

    The runs may go on past the target: their curves are read up to the first evaluation at or
    above it. As many runs as the benchmark lets a run set leave unconverged
    (``max_non_converged_runs``) may never reach it: they are left out of the RCP, as MLPerf's RCP
    files hold converged runs only, and the record says how many there were; more is an error.
    """
    spec = load_benchmark(benchmark)
    target = spec.target_auc if target is None else target
    paths = _run_paths(logs_dir)
    runs = [read_run_log(p) for p in paths]
    values = [r.values for r in runs]
    logged = {r.benchmark for r in runs}
    if logged != {benchmark}:
        raise HarnessError(f"{logs_dir}: the logs are of {sorted(map(str, logged))}, not {benchmark!r}")
    epochs = [reference_epochs(r, target) for r in runs]
    short = [p.name for p, e in zip(paths, epochs) if e is None]
    if len(short) > spec.max_non_converged_runs:
        raise HarnessError(f"{logs_dir}: reference runs {', '.join(short)} never reach the target {target} "
                           f"(at most {spec.max_non_converged_runs} may not)")
    bs = _batch_size(paths, values)
    hyper = {k: _one_value(paths, values, k) for k in values[0] if k.startswith("opt_")}
    return make_rcp(f"{benchmark}_ref_{bs}", benchmark, bs, [e for e in epochs if e is not None],
                    hyperparams=hyper, submission_runs=submission_runs(benchmark),
                    extra=_provenance(values, runs, target, short=len(short)))


def _provenance(values: Sequence[Mapping[str, Any]], runs: list[RunLog], target: float, *,
                short: int = 0) -> dict[str, Any]:
    starts = [r.run_start_ms for r in runs if r.run_start_ms is not None]
    when = datetime.datetime.fromtimestamp(min(starts) / 1000, datetime.UTC).date().isoformat() if starts else ""
    reached = f" ({len(runs) - short} reached it, {short} left out)" if short else ""
    return {
        "Creator": str(values[0].get(keys.SUBMISSION_ORG) or ""),
        "When": f"{when}, {len(runs)} reference runs, target {target}{reached}".lstrip(", "),
        "Platform": str(values[0].get(keys.SUBMISSION_PLATFORM) or ""),
        "Precision": str(values[0].get(keys.LOWEST_NUMERICAL_PRECISION_IN_LINEAR) or "").upper(),
    }


def rcp_file_json(rcps: list[Rcp]) -> str:
    """The RCP file text: records by name, two-space indented, with a trailing newline."""
    return json.dumps({r.name: r.to_json() for r in rcps}, indent=2) + "\n"


# --- checking -----------------------------------------------------------------------------


def check_convergence(run_dir: Path, *, rcps: list[Rcp] | None = None, version: str | None = None,
                  rcp_pass: RcpPass = RcpPass.PRUNED) -> RcpCheck:
    """Check a run set (``results/<system>/<benchmark>/``) against its benchmark's RCPs."""
    paths = _run_paths(run_dir)
    runs = [read_run_log(p) for p in paths]
    values = [r.values for r in runs]
    benchmark = str(_one_value(paths, [{"b": r.benchmark} for r in runs], "b"))
    bs = _batch_size(paths, values)
    try:
        target: float | None = load_benchmark(benchmark).target_auc
    except HarnessError:
        target = None  # a benchmark the harness does not ship: the checker's rule alone
    runs_n = submission_runs(benchmark)
    all_rcps = rcps if rcps is not None else load_rcps(rcp_file(benchmark, version=version), benchmark=benchmark)
    usable = prune(all_rcps, submission_runs=runs_n) if rcp_pass is RcpPass.PRUNED else list(all_rcps)
    epochs = sorted(submission_epochs(r, target) for r in runs)
    return evaluate(benchmark, bs, epochs, usable, submission_runs=runs_n)


def evaluate(benchmark: str, batch_size: int, epochs: list[float], rcps: list[Rcp], *,
             submission_runs: int) -> RcpCheck:
    """The checker's decision for a set's epochs to converge, given the RCPs to use."""
    epochs = sorted(epochs)
    limit = _MAX_NOT_CONVERGED.get(benchmark, 1)
    if sum(not math.isfinite(e) for e in epochs) > limit:
        return RcpCheck(Verdict.FAIL, "Insufficient convergence", benchmark, batch_size, tuple(epochs), None, None, 1.0)
    mean = olympic_mean(epochs, drop=olympic_drop(benchmark))
    rcp, message = _rcp_for(batch_size, rcps, submission_runs=submission_runs)
    if rcp is None:
        return RcpCheck(Verdict.MISSING_RCP, message, benchmark, batch_size, tuple(epochs), mean, None, 1.0)
    passed = mean >= rcp.mean / rcp.max_speedup
    if rcp is rcps[0] and batch_size < rcp.batch_size:
        message = "RCP not found but slower convergence on smaller batch size" if passed else \
            f"Missing RCP, please submit RCP with BS = {batch_size}"
        verdict = Verdict.PASS if passed else Verdict.MISSING_RCP
    else:
        verdict = Verdict.PASS if passed else Verdict.FAIL
    factor = normalization_factor(rcp.mean, mean)
    return RcpCheck(verdict, message, benchmark, batch_size, tuple(epochs), mean, rcp, factor)


def _rcp_for(batch_size: int, rcps: list[Rcp], *, submission_runs: int) -> tuple[Rcp | None, str]:
    """The RCP to compare with: exact, interpolated, the smallest (below the range), or none."""
    if not rcps:
        return None, "Cannot find any RCPs"
    for r in rcps:
        if r.batch_size == batch_size:
            return r, "RCP found"
    below = [r for r in rcps if r.batch_size < batch_size]
    above = [r for r in rcps if r.batch_size > batch_size]
    if below and above:
        return interpolate(batch_size, below[-1], above[0], submission_runs=submission_runs), "RCP Interpolation"
    if below:
        return None, f"Missing RCP, please submit RCP with BS = {batch_size}"
    return rcps[0], "RCP not found, checked against the smallest batch size"


@dataclass(frozen=True)
class ConvergencePoint:
    """What a benchmark's reference needs to converge at one batch size: an RCP's mean (epochs as its
    logs count them, or samples) and stdev, and how it was found."""

    benchmark: str
    batch_size: int
    mean: float
    stdev: float
    unit: str  # "epochs" or "samples" (convergence_unit)
    how: str


def convergence_point(benchmark: str, batch_size: int, *, rcps: list[Rcp] | None = None) -> ConvergencePoint:
    """The reference's convergence at ``batch_size``, from the benchmark's pruned RCPs as the checker
    finds them: the RCP of that batch size, or the linear interpolation of its two neighbours; below the
    smallest, the smallest's (the checker's rule too); above the largest, where the checker has none,
    the largest's (its ``how`` says so)."""
    runs = submission_runs(benchmark)
    pruned = prune(rcps if rcps is not None else load_rcps(rcp_file(benchmark), benchmark=benchmark),
                   submission_runs=runs)
    if not pruned:
        raise HarnessError(f"no RCPs for {benchmark!r}", ErrorCategory.NOT_FOUND)
    unit = convergence_unit(benchmark)
    rcp, message = _rcp_for(batch_size, pruned, submission_runs=runs)
    if rcp is None:
        rcp, how = pruned[-1], f"beyond the RCPs: the largest's (batch {pruned[-1].batch_size})"
    elif rcp.interpolated:
        low = max(r.batch_size for r in pruned if r.batch_size < batch_size)
        high = min(r.batch_size for r in pruned if r.batch_size > batch_size)
        how = f"interpolated between the RCPs of batch {low} and {high}"
    elif rcp.batch_size == batch_size:
        how = f"the RCP of batch {batch_size} ({len(rcp.epochs)} reference runs)"
    else:
        how = f"below the RCPs: the smallest's (batch {rcp.batch_size})"
    return ConvergencePoint(benchmark, batch_size, rcp.mean, rcp.stdev, unit, how)


def write_scaling(run_dir: Path, check: RcpCheck) -> Path | None:
    """Write ``scaling.json`` as the checker does (only for a passing set scaled above 1), else remove it."""
    path = Path(run_dir) / "scaling.json"
    if path.exists():
        path.unlink()
    if check.verdict is not Verdict.PASS or check.rcp is None or check.submission_mean is None \
            or check.submission_mean >= check.rcp.mean:
        return None
    path.write_text(json.dumps({"scaling_factor": check.normalization_factor}))
    return path
