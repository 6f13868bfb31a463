"""Our own runs of one CPU machine, as ``harness run`` writes them, cut to the records the leaderboard
reads: the same system (``local-cpu-2c``, no accelerators) in two results folders, one per precision.

``results-bf16/reference``: ``tiny_synthetic`` in bf16 (3 runs) and ``solo_synthetic`` (3 runs, the
only entry of its benchmark); ``results-fp32/reference``: ``tiny_synthetic`` in fp32 (1 run). Neither
benchmark is one the harness ships, so the sets are ``unchecked`` and need no run count.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SYSTEM = "local-cpu-2c"
PROCESSOR = "Intel(R) Xeon(R) Processor"
START_MS = 1_736_942_400_000  # 2025-01-15 12:00 UTC

DESCRIPTION = {
    "submitter": "reference", "division": "closed", "status": "Research, Development, or Internal (RDI)",
    "system_name": SYSTEM, "number_of_nodes": "1", "host_processors_per_node": "1",
    "host_processor_model_name": PROCESSOR, "host_processor_core_count": "2", "host_processor_vcpu_count": "2",
    "accelerators_per_node": "0", "accelerator_model_name": "N/A", "accelerator_memory_capacity": "N/A",
    "hw_notes": "profile local: CPU only, 2 logical CPUs detected", "framework": "PyTorch",
}

MLPERF_PRECISION = {"bf16": "bfloat16", "fp32": "fp32"}


def _line(key: str, value: Any, time_ms: float, event: str = "POINT_IN_TIME", **metadata: Any) -> str:
    record = {"namespace": "", "time_ms": time_ms, "event_type": event, "key": key, "value": value,
              "metadata": {"file": "trainer.py", "lineno": 1, **metadata}}
    return ":::MLLOG " + json.dumps(record)


def _log(benchmark: str, precision: str, start_ms: float, minutes: float) -> str:
    stop_ms = start_ms + minutes * 60_000
    return "\n".join([
        _line("submission_benchmark", benchmark, start_ms - 50),
        _line("submission_org", "reference", start_ms - 50),
        _line("submission_platform", SYSTEM, start_ms - 50),
        _line("lowest_numerical_precision_in_linear", MLPERF_PRECISION[precision], start_ms - 40),
        _line("harness_profile", "local", start_ms - 40),
        _line("run_start", None, start_ms, "INTERVAL_START"),
        _line("eval_accuracy", 0.58, start_ms + (stop_ms - start_ms) / 2, epoch_num=0.5),
        _line("eval_accuracy", 0.61, stop_ms - 1, epoch_num=1.0),
        _line("run_stop", None, stop_ms, "INTERVAL_END", status="success"),
        _line("tracked_stats", {"throughput": 57252.8}, stop_ms + 1, step=32),
    ]) + "\n"


def write_run_set(package: Path, benchmark: str, precision: str, minutes: list[float]) -> Path:
    """``<package>/results/local-cpu-2c/<benchmark>/result_<i>.txt``, one per entry of ``minutes``."""
    (package / "systems").mkdir(parents=True, exist_ok=True)
    (package / "systems" / f"{SYSTEM}.json").write_text(json.dumps(DESCRIPTION, indent=1))
    run_set = package / "results" / SYSTEM / benchmark
    run_set.mkdir(parents=True, exist_ok=True)
    for i, m in enumerate(minutes):
        (run_set / f"result_{i}.txt").write_text(_log(benchmark, precision, START_MS + i * 600_000, m))
    return run_set


def cpu_tree(root: Path) -> Path:
    """The tree of the module under ``root`` (created): ``root/results-bf16``, ``root/results-fp32``."""
    write_run_set(root / "results-bf16" / "reference", "tiny_synthetic", "bf16", [0.31, 0.32, 0.33])
    write_run_set(root / "results-bf16" / "reference", "solo_synthetic", "bf16", [0.21, 0.22, 0.23])
    write_run_set(root / "results-fp32" / "reference", "tiny_synthetic", "fp32", [0.45])
    return root
