"""Training throughput and cache hit rate with the tables on the SSD tier, against all in memory.

    python bench/tiered_cache.py                     # 26 tables x 200k rows, Zipf 1.05 and 1.3, caches of 1%, 5%, 20%
    python bench/tiered_cache.py --zipf 1.2 --policy lfu --steps 300

Every configuration trains the same model from the same seed on the same batches (the
default benchmark's architecture and hyperparameters, larger tables so that a cache of a
few percent of the rows is still tens of thousands of rows), as ``harness run`` does it
(the trainer's own pieces, data generated in a background thread). The first
``--warmup`` steps fill the cache and are not timed. Printed per configuration: training
samples/s over the timed steps and its ratio to all-in-memory measured in the same run;
the hit rate (the share of the ids looked up whose row was resident: a cache's hit rate,
FBGEMM's per-index count); ``best static``, the hit rate of a cache that always held the
most popular rows, the bound no policy beats in the long run; the hit rate over the
distinct rows of each batch (what the cache saves in reads from the SSD: lower, because
popular rows repeat within a batch); and the bytes read from and written to the SSD tier.

The goal (issue 6): at 5%, hit rate >= 0.9 and throughput >= 0.7 of all in memory. A hit
rate is a property of the workload as much as of the cache: 0.9 at 5% needs a skew at
which the 5% most popular rows carry 90% of the lookups, and the bench prints the bound so
that one can tell. Two skews by default: Zipf 1.05, the default benchmark's (bound 0.82 at
5%: the goal is out of reach for any cache), and Zipf 1.3, the short-tail power law of
NVIDIA HugeCTR's data generator (``PowerLaw_t::Short``, alpha 1.3), the one its embedding
cache examples use (bound 0.97). The verdict is printed under each table.

The SSD tier is a memory-mapped file; on a machine whose page cache can hold it (as here)
its reads come from memory, so this measures the cache's own cost, not the drive's
latency. Absolute figures on a shared 2-core machine are noise; the ratios are the signal.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.reference.engine.run_config import RunConfig  # noqa: E402
from harness.reference.engine.session import SessionHooks, TrainingSession  # noqa: E402
from harness.rules.specs import load_benchmark  # noqa: E402


def spec_with(rows: int, zipf: float, samples: int) -> dict[str, Any]:
    spec = load_benchmark("dlrm_synthetic").raw
    spec = {**spec, "dataset": {**spec["dataset"], "table_rows": [rows] * 26, "zipf_exponent": zipf,
                                "train_samples": samples}}
    return spec


def best_static_hit_rate(rows: int, zipf: float, fraction: float) -> float:
    """The share of lookups that go to the ``fraction`` most popular rows of a table whose ids
    follow ``P(rank r) ~ (r + 1) ** -zipf``: what a cache that always held exactly those rows
    would serve; no policy can do better in the long run."""
    weights = (torch.arange(rows, dtype=torch.float64) + 1) ** -zipf
    return float(weights[: round(rows * fraction)].sum() / weights.sum())


class _Timing(SessionHooks):
    """Starts the clock and snapshots the cache's counters after ``warmup`` steps."""

    def __init__(self, warmup: int):
        self.warmup = warmup
        self.start: float | None = None
        self.before: Any = None

    def after_step(self, session: TrainingSession, loss: torch.Tensor) -> bool:
        if session.step_count == self.warmup:
            self.start = time.perf_counter()
            stats = session.cache_stats()
            self.before = dataclasses.replace(stats) if stats is not None else None
        return False


def measure(spec: dict[str, Any], batch: int, steps: int, warmup: int, tier: dict | None) -> dict[str, float]:
    hp = {**load_benchmark("dlrm_synthetic").reference_hyperparameters, "global_batch_size": batch}
    session = TrainingSession(RunConfig.offline(spec, hp, 1, who="bench", embedding_tier=tier))
    timing = _Timing(warmup)
    session.train(timing, eval_at=[], until=warmup + steps, stop_at_target=False)
    assert timing.start is not None
    elapsed = time.perf_counter() - timing.start
    out = {"samples_per_s": steps * batch / elapsed}
    s, b = session.cache_stats(), timing.before
    if s is not None:
        out["hit_rate"] = (s.hits - b.hits) / max(s.lookups - b.lookups, 1)
        out["unique_hit_rate"] = (s.unique_hits - b.unique_hits) / max(s.unique_lookups - b.unique_lookups, 1)
        out["read_mb_per_step"] = (s.bytes_read - b.bytes_read) / steps / 1e6
        out["written_mb_per_step"] = (s.bytes_written - b.bytes_written) / steps / 1e6
    session.close()
    return out


GOAL_FRACTION, GOAL_HIT_RATE, GOAL_THROUGHPUT = 0.05, 0.9, 0.7  # issue 6


def run_skew(args: argparse.Namespace, zipf: float, tmp: str) -> dict[str, list[dict[str, float]]]:
    """Every configuration at one skew, ``args.rounds`` alternating rounds."""
    spec = spec_with(args.rows, zipf, (args.warmup + args.steps + 2) * args.batch)
    results: dict[str, list[dict[str, float]]] = {}
    for r in range(args.rounds):
        configs: list[tuple[str, dict | None]] = [("memory", None)] + [
            (f"ssd {f:.0%}", {"tier": "ssd", "path": str(Path(tmp) / f"t{r}-{f}.bin"), "cache_fraction": f,
                              "policy": args.policy}) for f in args.fractions
        ]
        for name, tier in configs:
            results.setdefault(name, []).append(measure(spec, args.batch, args.steps, args.warmup, tier))
            if tier is not None:
                Path(tier["path"]).unlink(missing_ok=True)
            print(f"  Zipf {zipf}, round {r + 1}: {name} done", file=sys.stderr)
    return results


def report(args: argparse.Namespace, zipf: float, results: dict[str, list[dict[str, float]]]) -> bool | None:
    """Print one skew's table; whether the goal is met (None: the goal's cache size was not run)."""
    def med(name: str, key: str) -> float:
        return statistics.median(x[key] for x in results[name])

    rows = 26 * args.rows
    base = med("memory", "samples_per_s")
    print(f"\nZipf {zipf}, {args.policy}")
    print(f"{'tables':<10}{'cache rows':>12}{'samples/s':>12}{'x memory':>10}{'hit rate':>10}{'best static':>13}"
          f"{'distinct rows':>15}{'SSD read MB/step':>18}{'written MB/step':>17}")
    met = None
    for name in results:
        if name == "memory":
            print(f"{name:<10}{'-':>12}{base:>12,.0f}{1.0:>10.2f}{'-':>10}{'-':>13}{'-':>15}{'-':>18}{'-':>17}")
            continue
        frac = float(name.split()[1].rstrip("%")) / 100
        ratio = med(name, "samples_per_s") / base
        print(f"{name:<10}{round(rows * frac):>12,}{med(name, 'samples_per_s'):>12,.0f}{ratio:>10.2f}"
              f"{med(name, 'hit_rate'):>10.3f}{best_static_hit_rate(args.rows, zipf, frac):>13.3f}"
              f"{med(name, 'unique_hit_rate'):>15.3f}"
              f"{med(name, 'read_mb_per_step'):>18.2f}{med(name, 'written_mb_per_step'):>17.2f}")
        if abs(frac - GOAL_FRACTION) < 1e-9:
            met = med(name, "hit_rate") >= GOAL_HIT_RATE and ratio >= GOAL_THROUGHPUT
    if met is not None:
        bound = best_static_hit_rate(args.rows, zipf, GOAL_FRACTION)
        why = "" if bound >= GOAL_HIT_RATE else f" (no cache of 5% can: the best static hit rate is {bound:.3f})"
        print(f"goal at 5% (hit rate >= {GOAL_HIT_RATE}, >= {GOAL_THROUGHPUT} x memory): "
              f"{'MET' if met else 'NOT MET'}{why}")
    return met


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000, help="rows per table (26 tables)")
    parser.add_argument("--zipf", type=float, nargs="+", default=[1.05, 1.3],
                        help="Zipf exponents of the ids: the default benchmark's, and HugeCTR's short-tail power law")
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=150, help="timed steps per configuration")
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.01, 0.05, 0.20])
    parser.add_argument("--policy", choices=["lru", "lfu"], default="lru")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds; medians are printed")
    args = parser.parse_args()
    torch.set_num_threads(max(1, (os.cpu_count() or 2)))
    print(f"26 tables x {args.rows:,} rows (dim 16, Adagrad state), batch {args.batch}, {args.steps} timed steps "
          f"after {args.warmup}, {args.policy}, torch {torch.__version__}")
    with tempfile.TemporaryDirectory(prefix="harness-tiered-") as tmp:
        results = {zipf: run_skew(args, zipf, tmp) for zipf in args.zipf}
    for zipf, by_config in results.items():
        report(args, zipf, by_config)
    print("\nmedians over alternating rounds; absolute samples/s are noise here, the ratios are the signal")


if __name__ == "__main__":
    main()
