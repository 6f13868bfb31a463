"""Start-up and checking time of `harness check LOG` against MLPerf's official checker, one
process per log, side by side on the same logs.

    python bench/check_startup.py                 # every log of tests/data/mlperf-logs
    python bench/check_startup.py --logs DIR --rounds 3

For each log (``<round>/<submitter>/results/<system>/<benchmark>/result_*``), in alternation:

* **official**: ``python -m mlperf_logging.compliance_checker --usage training --ruleset R LOG``
  (mlperf-logging, R = the round's rule set, e.g. 4.1.0);
* **ours**: ``python -m harness check LOG`` (the rule set from the round folder, as there).

Each log is checked ``--rounds`` times by each, alternating (ours, official, ours, ...), so both
see the same machine noise; the figure per checker is the median over rounds of the total wall
time over the logs. The last line is ``ours / official X.XXx`` (below 1: ours is faster).
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROUND = re.compile(r"^v(\d+)\.(\d+)$")


def shared_logs() -> Path:
    """The real MLPerf logs committed with the test suite (``tests/data/mlperf-logs``)."""
    return Path(__file__).resolve().parents[1] / "tests" / "data" / "mlperf-logs"


def logs_under(root: Path) -> list[tuple[Path, str]]:
    """Every result log under ``root`` with its round's rule set (``4.1.0``)."""
    out = []
    for log in sorted(root.glob("*/*/results/*/*/result_*")):
        m = ROUND.match(log.parts[len(root.parts)])
        if m and log.is_file():
            out.append((log, f"{m.group(1)}.{m.group(2)}.0"))
    return out


def timed(cmd: list[str]) -> tuple[float, int]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    return time.perf_counter() - start, proc.returncode


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--logs", type=Path, default=shared_logs(), help="a tree of rounds [default: tests/data/mlperf-logs]")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    logs = logs_under(args.logs)
    if not logs:
        print(f"no result logs under {args.logs}", file=sys.stderr)
        return 2
    totals: dict[str, list[float]] = {"ours": [], "official": []}
    failures: dict[str, int] = {"ours": 0, "official": 0}
    for _ in range(args.rounds):
        spent = {"ours": 0.0, "official": 0.0}
        for log, ruleset in logs:
            for name, cmd in (
                ("ours", [sys.executable, "-m", "harness", "check", str(log)]),
                ("official", [sys.executable, "-m", "mlperf_logging.compliance_checker", "--usage", "training",
                              "--ruleset", ruleset, str(log)]),
            ):
                seconds, code = timed(cmd)
                spent[name] += seconds
                failures[name] += code != 0
        for name, s in spent.items():
            totals[name].append(s)
    n = len(logs)
    print(f"{n} logs under {args.logs}, {args.rounds} rounds, one process per log and checker")
    for name in ("official", "ours"):
        med = statistics.median(totals[name])
        print(f"{name:9s} {med:7.2f} s in all, {med / n * 1000:6.1f} ms per log (median of {args.rounds} rounds; "
              f"{failures[name]} non-zero exits)")
    compiled = any(Path(__file__).resolve().parents[1].joinpath("compliance", "__pycache__").glob("check.*.pyc"))
    if not compiled:  # pip compiled the official package at install; an editable install compiles at each start
        print("note: harness and compliance have no bytecode here (PYTHONDONTWRITEBYTECODE?): "
              "python -m compileall -q harness compliance, as the README's setup does, compares like with like")
    ratio = statistics.median(totals["ours"]) / statistics.median(totals["official"])
    print(f"ours / official {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
