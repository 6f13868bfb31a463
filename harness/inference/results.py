"""What ``harness infer`` measured, as values: LoadGen's summary of a performance run
(:func:`parse_summary`), the SSD tier's reads during a run (:class:`SsdReads`), one
(variant, scenario) (:class:`LoadgenRun`) and the whole command (:class:`InferReport`), each
with the ``to_dict`` the ``--json`` report prints.

Torch-free at import (the model and the device probe are named in annotations only), so that
the command's text rendering loads no torch before it runs.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import ErrorCategory, HarnessError
from harness.inference import mlperf
from harness.inference.config import InferConfig, Scenario, Variant

if TYPE_CHECKING:  # annotations only: both modules load torch
    from harness.inference.model import TrainedModel
    from harness.reference.tiered.rowio import DeviceProbe

_LINE = re.compile(r"^\s*([^:]+?)\s*:\s*(.+?)\s*$")


@dataclass(frozen=True)
class LoadgenSummary:
    """What LoadGen's ``mlperf_log_summary.txt`` says about one PerformanceOnly run."""

    scenario: Scenario
    samples_per_s: float  # Offline: samples per second; Server: completed samples per second
    scheduled_per_s: float | None  # Server: the rate LoadGen scheduled queries at
    p50_latency_ms: float
    p99_latency_ms: float
    p999_latency_ms: float
    valid: bool
    constraints: dict[str, str]  # "Min duration satisfied": "Yes", ...
    path: Path
    recommendations: tuple[str, ...] = ()  # LoadGen's, under "Recommendations:" ("Reduce target QPS to ...")

    @property
    def invalid_reason(self) -> str:
        """Why LoadGen called the run INVALID, in its words: the constraints it found not satisfied
        and its recommendations (``performance constraints and early stopping not satisfied; reduce
        target QPS to improve latency``); empty for a VALID run."""
        if self.valid:
            return ""
        failed = [k.removesuffix(" satisfied").lower() for k, v in self.constraints.items() if v.lower() != "yes"]
        said = f"{', '.join(failed[:-1])} and {failed[-1]}" if len(failed) > 1 else "".join(failed)
        parts = [f"{said} not satisfied"] if failed else []
        parts += [r[:1].lower() + r[1:].rstrip(".") for r in self.recommendations]
        return "; ".join(parts) or "LoadGen gave no reason in its summary"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "scenario": self.scenario.value, "path": str(self.path),
                "recommendations": list(self.recommendations)}


def parse_summary(path: Path, scenario: Scenario) -> LoadgenSummary:
    """Read a LoadGen ``mlperf_log_summary.txt``: throughput, p50/p99/p99.9 latency, VALID or
    not, and the constraints it checked."""
    if not path.is_file():
        raise HarnessError(f"LoadGen wrote no summary at {path}", ErrorCategory.RUN_FAILED)
    fields: dict[str, str] = {}
    recommendations: list[str] = []
    section = ""
    for line in path.read_text().splitlines():
        if line.rstrip().endswith(":") and not line.startswith(" "):  # "Recommendations:", "Early Stopping Result:"
            section = line.rstrip()[:-1]
        elif section == "Recommendations" and line.startswith(" * "):
            recommendations.append(line[3:].strip())
        m = _LINE.match(line)
        if m and m.group(1) not in fields:
            fields[m.group(1)] = m.group(2)
    try:
        rate_key = "Samples per second" if scenario is Scenario.OFFLINE else "Completed samples per second"
        return LoadgenSummary(
            scenario=scenario,
            samples_per_s=float(fields[rate_key]),
            scheduled_per_s=float(fields["Scheduled samples per second"]) if scenario is Scenario.SERVER else None,
            p50_latency_ms=float(fields["50.00 percentile latency (ns)"]) / 1e6,
            p99_latency_ms=float(fields["99.00 percentile latency (ns)"]) / 1e6,
            p999_latency_ms=float(fields["99.90 percentile latency (ns)"]) / 1e6,
            valid=fields["Result is"] == "VALID",
            constraints={k: v for k, v in fields.items() if k.endswith("satisfied")},
            path=path,
            recommendations=tuple(recommendations),
        )
    except (KeyError, ValueError) as err:
        raise HarnessError(f"{path}: not a LoadGen summary of a {scenario.value} run (missing or bad {err})",
                           ErrorCategory.RUN_FAILED) from err


@dataclass(frozen=True)
class SsdReads:
    """An SSD variant's reads of its rows file during one run, and its cache's hits (from the
    worker's counts)."""

    mode: str  # direct (O_DIRECT ...) or buffered (why)
    reads: int
    bytes_read: int
    misses: int  # distinct rows of a model call that were not resident, summed
    samples: int  # LoadGen's samples answered: users
    rows: int  # their rows (user-item pairs)
    model_calls: int
    bypass_calls: int  # calls with more distinct rows than the cache holds (it keeps their hottest rows)
    reads_equal_misses_per_call: bool
    table_lookups: list[int]
    table_hits: list[int]
    added_latency_us: float  # the busy-wait of one latency, its median, measured at start
    read_s: float = 0.0  # time in the reads during the run (the added waits included)
    coalesced: int = 0  # distinct rows a call missed that another call in flight was reading: shared, not read
    pinned_rows: int = 0  # rows the cache held for good
    probe_reads_per_s: float = 0.0  # the device probe's random reads/s at the run's queue depth (0: none)

    @classmethod
    def from_worker(cls, counts: dict[str, Any], *, probe_reads_per_s: float = 0.0) -> SsdReads:
        """From a LoadGen worker's result (:mod:`harness.inference.worker`), beside the device probe's reads/s."""
        return cls(
            mode=counts["storage_mode"], reads=counts["reads"], bytes_read=counts["bytes_read"],
            misses=counts["misses"], samples=counts["samples"], rows=counts["rows"],
            model_calls=counts["model_calls"], bypass_calls=counts["bypass_calls"],
            reads_equal_misses_per_call=counts["reads_per_call_equal_misses"],
            table_lookups=counts["table_lookups"], table_hits=counts["table_hits"],
            added_latency_us=counts["added_latency_us"], read_s=counts["read_s"],
            coalesced=counts.get("coalesced", 0), pinned_rows=counts.get("pinned_rows", 0),
            probe_reads_per_s=probe_reads_per_s)

    @property
    def device_bound_qps(self) -> float | None:
        """The samples (users) per second the device allows at this run's reads per sample: the
        probe's random reads/s divided by them (None: no probe, or no reads)."""
        if self.probe_reads_per_s <= 0 or self.reads_per_sample <= 0:
            return None
        return self.probe_reads_per_s / self.reads_per_sample

    @property
    def read_us(self) -> float:
        """Time in the reads per read during the run: the device's, Python's and the added latency,
        divided by the reads in flight at once (at queue depth 1, each read's own time)."""
        return self.read_s / self.reads * 1e6 if self.reads else 0.0

    @property
    def reads_per_s(self) -> float:
        """Reads per second of time in the reads: what the device gave this run's calls."""
        return self.reads / self.read_s if self.read_s > 0 else 0.0

    @property
    def reads_per_sample(self) -> float:
        return self.reads / self.samples if self.samples else 0.0

    @property
    def bytes_per_sample(self) -> float:
        return self.bytes_read / self.samples if self.samples else 0.0

    @property
    def table_hit_rates(self) -> list[float | None]:
        return [h / n if n else None for h, n in zip(self.table_hits, self.table_lookups)]

    @property
    def hit_rate(self) -> float | None:
        n = sum(self.table_lookups)
        return sum(self.table_hits) / n if n else None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "reads_per_sample": round(self.reads_per_sample, 4),
                "bytes_per_sample": round(self.bytes_per_sample, 1),
                "hit_rate": None if self.hit_rate is None else round(self.hit_rate, 6), "read_us": round(self.read_us, 2),
                "reads_per_s": round(self.reads_per_s, 1),
                "device_bound_qps": None if self.device_bound_qps is None else round(self.device_bound_qps, 1),
                "table_hit_rates": [None if r is None else round(r, 4) for r in self.table_hit_rates]}


@dataclass(frozen=True)
class LoadgenRun:
    """One (variant, scenario): its performance run and its accuracy run."""

    variant: Variant
    scenario: Scenario
    target_qps: float
    qps_source: str  # calibrated, --offline-qps/--server-qps, --user-conf, or capped (why)
    user_conf: Path
    summary: LoadgenSummary
    storage: SsdReads | None  # None: the tables in memory
    accuracy: mlperf.AccuracyScore
    resident_table_bytes: int
    peak_rss_bytes: int
    performance_s: float  # the LoadGen test's wall time
    accuracy_s: float
    effective: dict[str, Any]  # LoadGen's effective settings, from its detail log
    loadgen_errors: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {
            "variant": self.variant.name, "system": self.variant.system, "scenario": self.scenario.value,
            "storage_latency_us": self.variant.latency_us, "target_qps": round(self.target_qps, 1),
            "qps_source": self.qps_source, "user_conf": str(self.user_conf), **self.summary.to_dict(),
            "storage": None if self.storage is None else self.storage.to_dict(),
            "accuracy": self.accuracy.to_dict(), "resident_table_bytes": self.resident_table_bytes,
            "peak_rss_bytes": self.peak_rss_bytes, "performance_s": round(self.performance_s, 2),
            "accuracy_s": round(self.accuracy_s, 2), "effective_settings": self.effective,
            "loadgen_errors": self.loadgen_errors,
        }


@dataclass(frozen=True)
class InferReport:
    """Everything ``harness infer`` ran: the model, the tables, the checks before timing, and
    each (variant, scenario)'s result."""

    config: InferConfig
    model: TrainedModel
    variants: tuple[Variant, ...]
    table_rows: int
    cache_rows: int
    memory_table_bytes: int
    ssd_file_bytes: int
    storage_mode: str
    identical_samples: int
    reference_auc: float
    results: list[LoadgenRun]
    loadgen_version: str
    mlperf_conf_sha1_matches: bool
    wall_s: float
    notes: list[str] = field(default_factory=list)
    reader: str = ""  # what read the SSD tier's rows (rowio.reader_name())
    device_probe: DeviceProbe | None = None  # the device's random reads/s at the run's queue depth
    warm_note: str = "cold at start"  # how the SSD variants' caches started (and what they pinned)

    @property
    def label(self) -> str | None:
        return self.config.label

    @property
    def all_valid(self) -> bool:
        return all(r.summary.valid for r in self.results)

    @property
    def accuracy_passed(self) -> bool:
        return all(r.accuracy.passed for r in self.results)

    def failure(self) -> str | None:
        """What makes the command fail (exit 1), in one line, once everything is written: the runs
        LoadGen called INVALID, each with LoadGen's reason, and the runs whose accuracy missed the
        target; None when every run is VALID and accurate. With ``--quick``, VALID is LoadGen's
        verdict on the quick settings (the shortened minimum duration and query count)."""
        invalid = [r for r in self.results if not r.summary.valid]
        inaccurate = [r for r in self.results if not r.accuracy.passed]
        if not invalid and not inaccurate:
            return None
        n = len(self.results)
        parts = []
        if invalid:
            settings = " (LoadGen's verdict on the --quick settings)" if self.config.quick else ""
            by_reason: dict[str, list[str]] = {}  # runs of the same reason named together, in the report's order
            for r in invalid:
                by_reason.setdefault(r.summary.invalid_reason, []).append(f"{r.variant.system} {r.scenario.value}")
            runs = "; ".join(f"{', '.join(names)} ({reason})" for reason, names in by_reason.items())
            parts.append(f"{len(invalid)} of {n} LoadGen runs INVALID{settings}: {runs}")
        if inaccurate:
            runs = ", ".join(f"{r.variant.system} {r.scenario.value} (AUC {r.accuracy.auc:.5f} < "
                             f"{r.accuracy.required_auc:.5f})" for r in inaccurate)
            parts.append(f"{len(inaccurate)} of {n} runs missed the accuracy target: {runs}")
        return "; ".join(parts) + f"; the results are written under {self.config.results}"

    def to_dict(self) -> dict[str, Any]:
        c = self.config
        return {
            "label": self.label,
            "valid_mlperf_result": self.label is None and self.all_valid and self.accuracy_passed,
            "benchmark": c.benchmark,
            "model_name": c.model_name,
            "results_dir": str(c.results),
            "settings": {
                "scenarios": [s.value for s in c.scenarios], "cache_fraction": c.cache_fraction,
                "cache_policy": c.cache_policy.value, "storage_latency_us": c.storage_latency_us,
                "storage_queue_depth": c.storage_queue_depth, "warm_cache": c.warm_cache,
                "pin_fraction": c.pin_fraction if c.warm_cache else 0.0, "coalesce": c.coalesce,
                "quick": c.quick, "max_batch": c.max_batch, "threads": c.threads, "precision": c.precision,
                "user_conf": None if c.user_conf is None else str(c.user_conf),
                "mlperf_conf": str(mlperf.MLPERF_CONF), "mlperf_conf_sha1": mlperf.MLPERF_CONF_SHA1,
                "mlperf_conf_sha1_matches_loadgen": self.mlperf_conf_sha1_matches,
            },
            "loadgen_version": self.loadgen_version,
            "model": self.model.to_dict(),
            "identical_predictions_samples": self.identical_samples,
            "reference_auc": self.reference_auc,
            "tables": {"rows": self.table_rows, "cache_rows": self.cache_rows,
                       "memory_table_bytes": self.memory_table_bytes, "ssd_file_bytes": self.ssd_file_bytes,
                       "storage_mode": self.storage_mode, "reader": self.reader},
            "device_probe": None if self.device_probe is None else {
                "reads": self.device_probe.reads, "seconds": round(self.device_probe.seconds, 4),
                "queue_depth": self.device_probe.depth, "slot_bytes": self.device_probe.slot_bytes,
                "reader": self.device_probe.reader, "reads_per_s": round(self.device_probe.reads_per_s, 1)},
            "results": [r.to_dict() for r in self.results],
            "all_valid": self.all_valid,
            "accuracy_passed": self.accuracy_passed,
            "notes": self.notes,
            "wall_s": round(self.wall_s, 2),
        }
