"""The projection held against real results: every run set of a results tree projected from its own
system description, benchmark and batch size, beside the score its logs measure.

A run set is projected when its benchmark is one the harness knows (a DLRM), its system description
can be read and names devices of the table, and its logs give a global batch size; otherwise it is
listed with the reason and counted as not projected. A run set written by ``harness run`` on this
machine (its description's notes name the ``local`` profile and its processor is the one detected
here) is projected as the ``local`` system.

The summary compares projected and measured scores: the error of each is ``|projected / measured - 1|``
(its median over the run sets), the worst the largest of ``projected / measured`` and its inverse,
and the rank correlation Spearman's of projected against measured within each benchmark that has
three run sets or more, the lowest of them.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import scipy.stats

from compliance.tree import RunSetRef, find_run_sets
from harness.errors import HarnessError
from harness.hw_profiles.detection import DetectedHardware, detect
from harness.hw_profiles.from_system import profile_from_system, read_system_description
from harness.hw_profiles.profiles import local_profile
from harness.mllog import keys
from harness.projection.constants import Constants
from harness.projection.system import System, system_for_profile
from harness.projection.train_time import Projection, project
from harness.rules.results import (
    RESULT_GLOB,
    read_run_log,
    run_set_stats,
    scaling_factor,
)
from harness.rules.specs import BenchmarkSpec, Suite, benchmark_names, load_benchmark

MIN_RUN_SETS_FOR_RANKS = 3  # a rank correlation of two run sets is always +-1: not evidence
_PRECISIONS = {"fp32": "fp32", "float32": "fp32", "bf16": "bf16", "bfloat16": "bf16", "fp16": "fp16", "float16": "fp16"}


@dataclass(frozen=True)
class Comparison:
    """One run set: its measured score, and its projection or why there is none."""

    label: str  # <round>/<submitter>/<system>/<benchmark>, as the tree names them
    path: Path
    benchmark: str
    measured_minutes: float | None
    projection: Projection | None
    reason: str | None = None

    @property
    def projected_minutes(self) -> float | None:
        return self.projection.minutes if self.projection else None

    @property
    def ratio(self) -> float | None:
        """projected / measured."""
        if self.projection is None or not self.measured_minutes:
            return None
        return self.projection.minutes / self.measured_minutes

    def to_dict(self) -> dict[str, object]:
        return {"run_set": self.label, "benchmark": self.benchmark, "measured_minutes": self.measured_minutes,
                "projected_minutes": self.projected_minutes, "ratio": self.ratio,
                **({"band_minutes": list(self.projection.band_minutes), "system": self.projection.system.describe(),
                    "batch_size": self.projection.batch_size, "precision": self.projection.precision}
                   if self.projection else {"not_projected": self.reason})}


@dataclass(frozen=True)
class Summary:
    median_error: float
    worst: float
    rank_correlation: float | None  # the lowest per-benchmark Spearman correlation (None: no benchmark has 3 sets)
    rank_correlations: tuple[tuple[str, float], ...]
    projected: int
    not_projected: int

    def to_dict(self) -> dict[str, object]:
        return {"median_error": self.median_error, "worst": self.worst, "rank_correlation": self.rank_correlation,
                "rank_correlations": dict(self.rank_correlations), "projected": self.projected,
                "not_projected": self.not_projected}

    def line(self) -> str:
        """The summary line, exactly as the issue defines it."""
        rho = "n/a" if self.rank_correlation is None else f"{self.rank_correlation:.2f}"
        return (f"projected / measured: median |error| {self.median_error:.0%}, worst {self.worst:.2f}x, "
                f"rank correlation {rho} over {self.projected} run sets ({self.not_projected} not projected)")


def _label(ref: RunSetRef, root: Path) -> str:
    try:
        return str(ref.benchmark_dir.relative_to(root)).replace("/results/", "/")
    except ValueError:
        return str(ref.benchmark_dir)


def _precision(values: Mapping[str, Any]) -> str | None:
    """The precision a log states its dense layers computed in (the harness's logs do; MLPerf's rarely)."""
    stated = str(values.get(keys.LOWEST_NUMERICAL_PRECISION_IN_LINEAR) or "").lower()
    return _PRECISIONS.get(stated)


class ThisMachine:
    """The machine present as a system, made (detected, its memory measured) the first time a run
    set written on it is met: a `harness run` of the ``local`` profile (its description's notes say
    so) whose processor and cores are the ones detected here."""

    def __init__(self, detected: DetectedHardware | None = None, *, memory_bw_bytes_per_s: float | None = None,
                 input_cost: Callable[[BenchmarkSpec], float] | None = None):
        self._detected = detected
        self._bandwidth = memory_bw_bytes_per_s  # a copy's measured bandwidth (default: measured when needed)
        # one core's seconds to generate a sample of a synthetic benchmark here (measured by the caller,
        # which may load the generator; None: the data's generation is not counted)
        self.input_cost = input_cost
        self._system: System | None = None

    def wrote(self, desc: dict) -> bool:
        if not str(desc.get("hw_notes", "")).startswith("profile local"):
            return False
        if self._detected is None:
            self._detected = detect()
        return (str(desc.get("host_processor_model_name", "")).strip() == self._detected.cpu_model
                and str(desc.get("host_processor_core_count", "")).strip() == str(self._detected.physical_cores))

    def system(self) -> System:
        if self._system is None:
            self._system = system_for_profile(local_profile(self._detected), detected=self._detected,
                                              memory_bw_bytes_per_s=self._bandwidth)
        return self._system


def compare_run_set(ref: RunSetRef, root: Path, *, constants: Constants | None = None,
                    here: ThisMachine | None = None) -> Comparison:
    """One run set's measured score and projection (see the module)."""
    label = _label(ref, root)
    paths = sorted(p for p in ref.benchmark_dir.glob(RESULT_GLOB) if p.is_file())
    try:
        logs = [read_run_log(p) for p in paths]
    except HarnessError as err:
        return Comparison(label, ref.benchmark_dir, ref.benchmark_dir.name, None, None, f"unreadable log: {err}")
    benchmark = next((log.benchmark for log in logs if log.benchmark), None) or ref.benchmark_dir.name
    # a training benchmark's: an inference one (dlrm-v3) has no score to project
    spec: BenchmarkSpec | None = load_benchmark(benchmark) if benchmark in benchmark_names(Suite.TRAINING) else None
    if spec is None:
        return Comparison(label, ref.benchmark_dir, benchmark, None, None,
                          f"benchmark {benchmark!r} is not one the harness knows")
    try:
        stats = run_set_stats(logs, scaling=scaling_factor(ref.benchmark_dir), target=spec.target_auc,
                              max_dropped=spec.max_non_converged_runs)
    except HarnessError as err:
        return Comparison(label, ref.benchmark_dir, benchmark, None, None, f"no score: {err}")
    measured = stats.score.minutes if stats.score else None
    if measured is None:
        return Comparison(label, ref.benchmark_dir, benchmark, None, None, f"no score: {stats.score_error}")
    batches = {b for log in logs if (b := log.values.get(keys.GLOBAL_BATCH_SIZE)) is not None}
    if not batches:
        return Comparison(label, ref.benchmark_dir, benchmark, measured, None, "no global_batch_size in its logs")
    batch = int(statistics.median_low(sorted(int(b) for b in batches)))
    try:
        desc = read_system_description(ref.package / "systems" / f"{ref.system}.json")
        generation = 0.0
        if here is not None and here.wrote(desc):
            system = here.system()
            generation = here.input_cost(spec) if here.input_cost and spec.dataset["kind"] == "synthetic" else 0.0
        else:
            system = described_system(desc, ref.system)
        projection = project(spec, system, batch_size=batch, precision=_precision(logs[0].values),
                             constants=constants, input_seconds_per_sample=generation)
    except HarnessError as err:
        return Comparison(label, ref.benchmark_dir, benchmark, measured, None, str(err))
    return Comparison(label, ref.benchmark_dir, benchmark, measured, projection)


def described_system(desc: dict, name: str) -> System:
    """The system a description describes (its profile, and the device of its ranks)."""
    return system_for_profile(profile_from_system(desc, what=f"system description {name}.json"))


def compare_tree(root: Path, *, constants: Constants | None = None,
                 here: ThisMachine | None = None) -> list[Comparison]:
    """Every run set under ``root``, measured and projected (``here``: the machine present, for the
    run sets `harness run` wrote on it; default: a new :class:`ThisMachine`)."""
    root = Path(root)
    here = here or ThisMachine()
    return [compare_run_set(ref, root, constants=constants, here=here) for ref in find_run_sets(root)]


def summarize(comparisons: Sequence[Comparison]) -> Summary:
    """The errors, the worst ratio and the rank correlations of the projected run sets."""
    done = [c for c in comparisons if c.ratio is not None]
    if not done:
        return Summary(0.0, 1.0, None, (), 0, len(comparisons))
    ratios = [r for c in done if (r := c.ratio) is not None]
    correlations = []
    for benchmark in sorted({c.benchmark for c in done}):
        group = [c for c in done if c.benchmark == benchmark]
        if len(group) >= MIN_RUN_SETS_FOR_RANKS:
            rho = scipy.stats.spearmanr([c.projected_minutes for c in group], [c.measured_minutes for c in group])[0]
            correlations.append((benchmark, float(rho)))
    return Summary(
        median_error=float(statistics.median(abs(r - 1) for r in ratios)),
        worst=max(max(r, 1 / r) for r in ratios),
        rank_correlation=min((rho for _, rho in correlations), default=None),
        rank_correlations=tuple(correlations),
        projected=len(done),
        not_projected=len(comparisons) - len(done),
    )
