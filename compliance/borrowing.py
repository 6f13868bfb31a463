"""Verifying a claimed hyperparameter borrow against the lender's own logs.

A run set whose logs carry ``harness_borrowed_from: {lender, lender_fingerprint}`` claims it
took the lender's hyperparameters as a group (MLPerf's borrowing rule): only the global batch
size may differ. The check finds the lender's run set (``--lender DIR``, or in the results
tree around the checked one), and compares every hyperparameter the benchmark names, as
logged by both, and the lender's fingerprint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.mllog import keys
from harness.mllog.reader import ParsedLog, parse_log
from harness.rules.specs import load_benchmark
from harness.submitters.borrowing import lender_from_logs

BATCH_SIZE = keys.GLOBAL_BATCH_SIZE  # the one logged hyperparameter a borrower may change
_MAX_CANDIDATES = 2000


def _candidate_dirs(lenders: list[Path], search_root: Path | None, benchmark: str) -> list[Path]:
    """Run-set directories that may hold the lender's logs."""
    out: list[Path] = []
    roots = list(lenders) + ([search_root] if search_root is not None else [])
    patterns = ["", f"*/{benchmark}", f"results/*/{benchmark}", f"*/results/*/{benchmark}"]
    for root in roots:
        for pattern in patterns:
            try:
                found = [root] if not pattern else sorted(root.glob(pattern))
                out.extend(p for p in found if p.is_dir() and any(p.glob("result_*.txt")))
            except OSError:
                continue
            if len(out) > _MAX_CANDIDATES:
                return out
    return list(dict.fromkeys(out))


def verify_borrow(claim: dict[str, Any], logs: list[ParsedLog], *, lenders: list[Path],
                  search_root: Path | None) -> list[str]:
    """Why the claim does not hold (empty when it does)."""
    lender, lender_fp = claim.get("lender"), claim.get("lender_fingerprint")
    if not isinstance(lender, str) or not isinstance(lender_fp, str):
        return ["harness_borrowed_from must name the lender and the lender's fingerprint"]
    benchmark = logs[0].first(keys.SUBMISSION_BENCHMARK)
    try:
        spec = load_benchmark(str(benchmark))
    except HarnessError as err:
        return [f"cannot verify the borrow: {err}"]
    mine_dir = logs[0].path.parent.resolve()
    for cand in _candidate_dirs(lenders, search_root, spec.name):
        if cand.resolve() == mine_dir:
            continue
        sample = parse_log(sorted(cand.glob("result_*.txt"))[0])
        if f"{sample.first(keys.SUBMISSION_ORG)}/{sample.first(keys.SUBMISSION_PLATFORM)}" != lender:
            continue
        try:
            _bench, _lender, fp, lent = lender_from_logs(cand)
        except HarnessError as err:
            return [f"the lender's logs in {cand} cannot be read: {err}"]
        problems = []
        if fp != lender_fp:
            problems.append(f"the lender's logs in {cand} have fingerprint {fp}, not the claimed {lender_fp}")
        named = set(spec.reference_hyperparameters) | set(spec.tunable_hyperparameters)
        for key in sorted(named - {BATCH_SIZE}):
            for log in logs:
                mine = log.first(key)
                if key in lent and mine != lent[key]:
                    problems.append(f"{log.path.name} logs {key}={mine!r}, but the lender {lender} logged {lent[key]!r}; "
                                    "a borrowed group may differ only in global_batch_size")
                    break
        return problems
    where = ", ".join(str(p) for p in lenders) or str(search_root)
    return [f"cannot verify the borrow from {lender}: its {spec.name} result logs are not in {where}; "
            "give the lender's results directory with --lender"]
