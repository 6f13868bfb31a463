"""A hand-written leaderboard (``leaderboard.schema.json``) that exercises every case the renderers meet.

Two benchmarks; ranked and unranked entries, among them an emulated one, one that fails
compliance and one with too few runs (and so a null score); a submitter named like a
script tag and a system name full of HTML metacharacters; curves with points; one entry
with no accelerators; one benchmark with no target AUC and no required-run count; a projection
(``harness project``) on one entry, and on another none, with a reason named like a script tag.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from harness.leaderboard.labels import assign_labels

SCRIPT_SUBMITTER = "<script>alert(1)</script>"
TRICKY_SYSTEM = 'a&b "quoted" <i>x</i>'
BASELINE_SYSTEM = "zionex-8gpu"


def _curve(run: str, minutes: float, final_auc: float, *, converged: bool = True, evals: int = 8) -> dict[str, Any]:
    """A run's AUC rising from 0.5 towards ``final_auc`` over ``minutes``, one point per evaluation."""
    norm = 1 - math.exp(-3.0)
    points = [[round(minutes * i / evals, 4),
               round(0.5 + (final_auc - 0.5) * (1 - math.exp(-3.0 * i / evals)) / norm, 5)]
              for i in range(1, evals + 1)]
    return {"run": run, "converged": converged, "points": points}


def _stats(run_minutes: list[float]) -> dict[str, Any]:
    """Olympic score (drop the fastest and slowest), a rough 95% interval and the CV."""
    kept = sorted(run_minutes)[1:-1]
    score = statistics.fmean(kept)
    sd = statistics.stdev(run_minutes)
    half = 1.96 * sd / math.sqrt(len(kept))
    return {"score_minutes": round(score, 4),
            "score_interval_95": [round(score - half, 4), round(score + half, 4)],
            "coefficient_of_variation": round(sd / statistics.fmean(run_minutes), 4)}


def _entry(*, submitter: str, system: str, benchmark: str, model: str, count: int, host: str,
           run_minutes: list[float], ranked: bool, rank: int | None = None, reasons: list[str] | None = None,
           scored: bool = True, baseline_minutes: float | None = None, **fields: Any) -> dict[str, Any]:
    stats = _stats(run_minutes) if scored else {
        "score_minutes": None, "score_interval_95": None, "coefficient_of_variation": None}
    score = stats["score_minutes"]
    entry = {
        "rank": rank, "ranked": ranked, "reasons": reasons or [],
        "submitter": submitter, "system": system, "round": None,
        "source": f"results/{submitter}/results/{system}/{benchmark}",
        "accelerator_model": model, "accelerator_count": count, "nodes": 1, "host": host,
        "baseline": system == BASELINE_SYSTEM, "required_runs": None,
        "profile": system, "division": "closed", "availability": "available", "emulated": False,
        "runs": len(run_minutes), "converged_runs": len(run_minutes), "run_minutes": run_minutes,
        **stats,
        "rcp_verdict": "pass", "compliance_verdict": "pass", "throughput_samples_per_s": None,
        "accelerator_minutes": round(score * count, 4) if score is not None else None,
        "speedup_vs_baseline": (round(baseline_minutes / score, 4)
                                if score is not None and baseline_minutes is not None else None),
        "curves": [_curve(f"result_{i}", m, 0.8031) for i, m in enumerate(run_minutes[:3])],
    }
    entry.update(fields)
    return entry


def _dlrm_dcnv2() -> dict[str, Any]:
    bench = "dlrm_dcnv2"
    zionex_minutes = [12.1, 12.6, 11.9, 12.4, 12.2, 12.9, 12.0, 12.5, 12.3, 12.2]
    baseline = _stats(zionex_minutes)["score_minutes"]
    common = {"benchmark": bench, "baseline_minutes": baseline}
    entries = [
        _entry(submitter="NVIDIA", system="dgx-h100-8gpu", model="H100-SXM5-80GB", count=8,
               host="2x Xeon Platinum 8480C, 2 TiB DDR5", ranked=True, rank=1, round="v4.1",
               run_minutes=[3.71, 3.80, 3.92, 3.85, 3.77, 3.95, 3.88, 3.69, 3.83, 4.02],
               throughput_samples_per_s=3_350_000.0,
               projection={"minutes": 4.46, "band_minutes": [2.79, 7.14], "ratio": 1.17, "note": None}, **common),
        _entry(submitter=SCRIPT_SUBMITTER, system=BASELINE_SYSTEM, model="A100-SXM4-40GB", count=8,
               host="4x Xeon 8376H (ZionEX node)", ranked=True, rank=2, run_minutes=zionex_minutes,
               throughput_samples_per_s=1_040_000.0,
               projection={"minutes": None, "band_minutes": None, "ratio": None,
                           "note": f"accelerator {SCRIPT_SUBMITTER!r} is not in the table of devices"}, **common),
        _entry(submitter="Acme", system=TRICKY_SYSTEM, model="L40S", count=1, host="1x EPYC 9354",
               ranked=True, rank=3, profile=None, division="open", availability="preview",
               run_minutes=[58.2, 61.0, 59.4, 57.7, 60.3, 62.1, 58.8, 59.9, 60.6, 59.1], **common),
        _entry(submitter="harness", system="local-cpu-as-zionex", model="A100-SXM4-40GB", count=8,
               host="2-core CPU, 8 gloo ranks", ranked=False, emulated=True, profile=BASELINE_SYSTEM,
               availability="research", reasons=["emulated: 8 gloo CPU ranks stood in for 8 x A100-SXM4-40GB"],
               run_minutes=[44.0, 46.1, 45.3, 45.9, 44.8, 45.2, 46.4, 44.5, 45.0, 45.7], **common),
        _entry(submitter="BigCo", system="bigco-64gpu", model="MI300X", count=64, host="8x EPYC 9654 nodes",
               ranked=False, compliance_verdict="fail", rcp_verdict="fail: converged faster than the RCP allows",
               reasons=["compliance check failed: 2 errors (first: opt_base_learning_rate not allowed)",
                        "RCP check failed"],
               run_minutes=[1.02, 1.10, 1.05, 0.98, 1.07, 1.11, 1.04, 1.00, 1.06, 1.08],
               throughput_samples_per_s=12_400_000.0, **common),
        _entry(submitter="Solo", system="laptop-cpu", model="none (CPU only)", count=0,
               host="Intel Core i7-1185G7", ranked=False, scored=False, converged_runs=2,
               rcp_verdict="not checked", compliance_verdict="unchecked",
               reasons=["3 of 10 required runs (1 did not converge)"],
               run_minutes=[21.4, 23.0, 22.1],
               curves=[_curve("result_0", 21.4, 0.8031), _curve("result_1", 23.0, 0.8029),
                       _curve("result_2", 30.0, 0.7990, converged=False)],
               **common),
    ]
    return {"benchmark": bench, "target_auc": 0.80275, "required_runs": 10, "entries": entries}


def _synthetic_small() -> dict[str, Any]:
    bench = "synthetic_small"
    entries = [
        _entry(submitter="NVIDIA", system="dgx-h100-8gpu", model="H100-SXM5-80GB", count=8,
               host="2x Xeon Platinum 8480C, 2 TiB DDR5", ranked=True, rank=1,
               run_minutes=[0.41, 0.39, 0.44, 0.40, 0.42], throughput_samples_per_s=2_900_000.0, benchmark=bench),
        _entry(submitter="harness", system="local-1gpu", model="L4", count=1, host="8-core Xeon", ranked=True,
               rank=2, run_minutes=[2.2, 2.0, 2.1, 2.4, 2.1], throughput_samples_per_s=410_000.0, benchmark=bench),
        _entry(submitter="Acme", system=TRICKY_SYSTEM, model="L40S", count=1, host="1x EPYC 9354", ranked=False,
               rcp_verdict="fail", reasons=["RCP check failed: converged faster than the reference allows"],
               run_minutes=[1.5, 1.6, 1.4, 1.5, 1.7], benchmark=bench),
    ]
    return {"benchmark": bench, "target_auc": None, "required_runs": None, "entries": entries}


def sample_board() -> dict[str, Any]:
    """A fresh, schema-valid leaderboard with two benchmarks (6 + 3 entries), labelled as
    :func:`harness.leaderboard.collect.build_leaderboard` labels its entries (per benchmark)."""
    board = {
        "generated_at": "2025-01-15T12:00:00+00:00",
        "harness_version": "0.1.0",
        "baseline_system": BASELINE_SYSTEM,
        "roots": ["results", "tests/data/mlperf-logs"],
        "benchmarks": [_dlrm_dcnv2(), _synthetic_small()],
    }
    for bench in board["benchmarks"]:
        for e in bench["entries"]:
            e["required_runs"] = bench["required_runs"]
    for bench in board["benchmarks"]:
        assign_labels(bench["entries"])
    return board
