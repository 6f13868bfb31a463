"""Calibrate a synthetic benchmark's target AUC from reference runs.

    python tools/calibrate_target.py dlrm_synthetic --runs 10 --out calib/ [--parallel 2]

runs the reference ``--runs`` times through ``harness run`` (chosen seeds 1000, 1001, ...,
with the target set out of reach so every run trains to the epoch limit and logs its whole
AUC curve), then picks the target by one of two rules:

* ``--rule median`` (the default, ``dlrm_synthetic``'s): the highest AUC, on a 0.0005 grid, that
  at least ``ceil(0.9 * runs)`` runs reach and whose median first-reaching epoch is at most 0.7
  of the epoch limit;
* ``--rule every`` (``dlrmv4_synthetic``'s, whose closed rules require every log of a set to
  reach the target): the highest AUC on the grid that *every* run reaches by 0.7 of the epoch
  limit, so a run that learns slower than all the reference runs still has 0.3 of the epoch
  (several evaluations) to get there.

It prints the per-run epochs to reach that target, the median, and how far the
target sits below the planted teacher's best AUC, as YAML for the spec's
``quality.calibration`` block.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

import yaml

from harness.rules.specs import load_benchmark


def _curve(path: Path) -> tuple[list[tuple[float, float]], float | None]:
    curve, best = [], None
    for line in path.read_text().splitlines():
        if ":::MLLOG " not in line:
            continue
        r = json.loads(line.split(":::MLLOG ", 1)[1])
        if r["key"] == "eval_accuracy":
            curve.append((float(r["metadata"]["epoch_num"]), float(r["value"])))
        elif r["key"] == "harness_teacher_best_auc":
            best = float(r["value"])
    return curve, best


def first_epoch(curve: list[tuple[float, float]], target: float) -> float:
    return next((e for e, auc in curve if auc >= target), math.inf)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("benchmark")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--out", type=Path, default=Path("calibration"))
    ap.add_argument("--fraction", type=float, default=0.7, help="median epoch fraction to aim at")
    ap.add_argument("--rule", choices=("median", "every"), default="median",
                    help="median: >= 90%% of runs reach it, median epoch <= fraction; every: every run by fraction")
    ap.add_argument("--parallel", type=int, default=1,
                    help="run the reference runs as this many `harness run` processes at once, the cores shared "
                         "between them (torch's threads scale poorly on these small models: on 2 cores two "
                         "one-thread processes train about twice the runs of one two-thread process)")
    args = ap.parse_args()
    spec = load_benchmark(args.benchmark)
    raw = dict(spec.raw)
    raw["quality"] = {**raw["quality"], "target": 0.9999}
    args.out.mkdir(parents=True, exist_ok=True)
    spec_path = args.out / f"{spec.name}.yaml"
    spec_path.write_text(yaml.safe_dump(raw))
    # seeds 1000, 1001, ...: process k runs a contiguous share of them into results/<k>
    parallel = max(1, min(args.parallel, args.runs))
    shares = [args.runs // parallel + (k < args.runs % parallel) for k in range(parallel)]
    threads = max(1, (os.cpu_count() or 1) // parallel)
    procs, first = [], 1000
    for k, share in enumerate(shares):
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "harness", "run", "--benchmark", str(spec_path), "--runs", str(share),
             "--seed", str(first), "--results", str(args.out / "results" / str(k)), "--submitter", "calibration",
             *(["--threads", str(threads)] if parallel > 1 else [])]))
        first += share
    for proc in procs:
        proc.wait()  # no run reaches the unreachable target, so a set has no score: exit 1 is expected
    logs = [log for k in range(parallel) for log in sorted(
        (args.out / "results" / str(k) / "calibration" / "results").glob(f"*/{spec.name}/result_*.txt"),
        key=lambda p: int(p.stem.split("_")[-1]))]
    curves, best = zip(*(_curve(p) for p in logs))
    need = math.ceil(0.9 * len(curves)) if args.rule == "median" else len(curves)
    limit = args.fraction * spec.max_epochs
    chosen = None
    for k in range(1000, 2000):
        target = k * 0.0005
        epochs = [first_epoch(c, target) for c in curves]
        reached = [e for e in epochs if math.isfinite(e)]
        late = statistics.median(epochs) if args.rule == "median" else max(epochs)
        if len(reached) < need or late > limit:
            break
        chosen = (target, epochs)
    if chosen is None:
        print("no target satisfies the rule", file=sys.stderr)
        return 1
    target, epochs = chosen
    print(yaml.safe_dump({"quality": {"target": round(target, 4), "calibration": {
        "method": (f"highest AUC on a 0.0005 grid reached by >= {need} of {len(curves)} reference runs "
                   f"with median first-reaching epoch <= {args.fraction} of the limit" if args.rule == "median" else
                   f"highest AUC on a 0.0005 grid that every one of {len(curves)} reference runs reaches by "
                   f"{args.fraction} of the epoch limit") + " (tools/calibrate_target.py)",
        "reference_seeds": list(range(1000, 1000 + len(curves))),
        "epochs_to_target": [round(e, 4) if math.isfinite(e) else None for e in epochs],
        "median_epoch_to_target": round(statistics.median(epochs), 4),
        "latest_epoch_to_target": round(max(epochs), 4) if all(map(math.isfinite, epochs)) else None,
        "runs_reaching_target": sum(math.isfinite(e) for e in epochs),
        "final_auc": [round(c[-1][1], 5) for c in curves],
        "teacher_best_auc": round(best[0], 5),
        "gap_below_teacher_best_auc": round(best[0] - target, 5),
    }}}, sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
