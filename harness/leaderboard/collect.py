"""Collect every run set under some roots into the leaderboard model (``leaderboard.schema.json``).

A root may be a submitter package (``<pkg>/systems``, ``<pkg>/results``), a folder of
packages (``results/``), or anything above them (``tests/data/mlperf-logs``); folders whose
names start with a dot (the harness's staging) are not entered, nor are symlinks followed.

Per run set: the score and spread (:mod:`harness.rules.results`); the system description;
the compliance verdict of MLPerf's own checker (``mlperf_logging``) for the official
benchmarks under the round's ruleset; for the other benchmarks the harness ships, the
per-log verdict of ``harness check`` (``compliance.engine``) under the spec's rule set;
``unchecked`` for a benchmark the harness does not know; the RCP verdict of :mod:`harness.rules.rcp` where the
benchmark has RCPs (a failed RCP check unranks the entry). An entry is ranked only when
it is compliant or unchecked, has the benchmark's required number of runs, has a score and
was not emulated; every other entry is kept with its reasons.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mlperf_logging.compliance_checker import mlp_compliance

from compliance.check import accepted_non_compliant
from compliance.engine import check_log
from compliance.schemas import validate
from compliance.tree import RunSetRef, find_log_folders, find_run_sets
from harness import __version__
from harness.errors import ErrorCategory, HarnessError
from harness.leaderboard.labels import assign_labels, plural, resolve_baseline, system_key
from harness.mllog import keys
from harness.rules.rcp import Verdict, check_convergence
from harness.rules.results import (
    RESULT_GLOB,
    RunLog,
    RunSetStats,
    read_run_log,
    run_set_stats,
    scaling_factor,
)
from harness.rules.specs import BenchmarkSpec, Suite, benchmark_names, load_benchmark

_ROUND = re.compile(r"^v(\d+)\.(\d+)$")
RCP_NOT_CHECKED = "not checked"


def _round_of(path: Path) -> str | None:
    return next((part for part in reversed(path.parts) if _ROUND.match(part)), None)


def _ruleset_of(round_name: str | None) -> str | None:
    m = _ROUND.match(round_name or "")
    return f"{m.group(1)}.{m.group(2)}.0" if m else None


def _int(value: Any) -> int:
    """MLPerf system files write numbers as numbers or strings ("8", "8 ")."""
    try:
        return int(float(str(value).strip()))
    except (TypeError, ValueError):
        return 0


def official_compliance(paths: Sequence[Path], ruleset: str) -> list[str]:
    """MLPerf's own compliance checker over each log: the names of the logs it fails."""
    failed = []
    for path in paths:
        sink = io.StringIO()
        try:
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                checker = mlp_compliance.make_checker(usage="training", ruleset=ruleset, quiet=True, werror=False)
                valid, *_ = mlp_compliance.main(str(path), f"training_{ruleset}/common.yaml", checker)
        except Exception:  # the official checker crashing on a log is a failed check of that log
            valid = False
        if not valid:
            failed.append(path.name)
    return failed


def host_text(desc: dict[str, Any]) -> str:
    """The host's processors from a system description: ``2 cores, Intel(R) Xeon(R) Processor``,
    ``112 cores, 2 x Intel(R) Xeon(R) Platinum 8480+``, ``4 nodes x 112 cores, 2 x ...``
    (``host_processor_core_count`` is per processor, as MLPerf's system descriptions give it)."""
    if not desc:
        return "unknown"
    processors = _int(desc.get("host_processors_per_node", 0))
    model = str(desc.get("host_processor_model_name") or "unknown processor").strip()
    cores = _int(desc.get("host_processor_core_count", 0)) * max(processors, 1)
    nodes = max(_int(desc.get("number_of_nodes", 1)), 1)
    processor = f"{processors} x {model}" if processors > 1 else model
    if not cores:
        return processor
    return f"{f'{nodes} nodes x ' if nodes > 1 else ''}{plural(cores, 'core')}, {processor}"


_PRECISIONS = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def label_facts(logs: Sequence[RunLog]) -> dict[str, str | None]:
    """What the logs of a run set say that tells it from another of the same system: the precision
    its dense layers computed in (``lowest_numerical_precision_in_linear``), and the date (and
    time, UTC) its first run started."""
    stated = {str(v).lower() for log in logs if (v := log.values.get(keys.LOWEST_NUMERICAL_PRECISION_IN_LINEAR))}
    precision = (_PRECISIONS.get(min(stated), min(stated)) if len(stated) == 1
                 else "mixed precision" if stated else None)
    starts = [log.run_start_ms for log in logs if log.run_start_ms is not None]
    start = dt.datetime.fromtimestamp(min(starts) / 1000, dt.UTC) if starts else None
    return {"precision": precision, "date": start.strftime("%Y-%m-%d") if start else None,
            "started": start.strftime("%Y-%m-%d %H:%M UTC") if start else None}


def _spec(benchmark: str) -> BenchmarkSpec | None:
    # training benchmarks only: the leaderboard scores time to train, which an inference benchmark has not
    return load_benchmark(benchmark) if benchmark in benchmark_names(Suite.TRAINING) else None


def build_entry(ref: RunSetRef) -> tuple[str, dict[str, Any], BenchmarkSpec | None, dict[str, str | None]]:
    """The leaderboard entry of one run set, its benchmark's name and spec, and what tells it apart
    from another set of its system (:func:`label_facts`)."""
    paths = sorted(p for p in ref.benchmark_dir.glob(RESULT_GLOB) if p.is_file())
    logs, unreadable = [], []
    for p in paths:
        try:
            logs.append(read_run_log(p))
        except HarnessError as err:
            unreadable.append(str(err))
    benchmark = next((log.benchmark for log in logs if log.benchmark), None) or ref.benchmark_dir.name
    spec = _spec(benchmark)
    target = spec.target_auc if spec else None
    max_dropped = spec.max_non_converged_runs if spec else 1
    reasons: list[str] = [f"unreadable log: {u}" for u in unreadable]
    try:
        factor = scaling_factor(ref.benchmark_dir)
    except HarnessError as err:
        reasons.append(str(err))
        factor = 1.0

    desc_path = ref.package / "systems" / f"{ref.system}.json"
    desc: dict[str, Any] = {}
    try:
        loaded = json.loads(desc_path.read_text(encoding="utf-8", errors="replace"))
        desc = loaded if isinstance(loaded, dict) else {}
        if not desc:
            reasons.append(f"system description {desc_path.name} is not a JSON object")
    except FileNotFoundError:
        reasons.append(f"no system description {desc_path.name}")
    except (OSError, ValueError) as err:
        reasons.append(f"unreadable system description {desc_path.name}: {err}")

    round_name = _round_of(ref.benchmark_dir)
    ruleset = _ruleset_of(round_name)
    failed: list[str] = []
    if spec is not None and spec.raw.get("official") and ruleset:
        failed = official_compliance(paths, ruleset)
        checker = f"MLPerf compliance checker ({ruleset})"
    elif spec is not None:
        failed = [p.name for p in paths if not check_log(p, spec.compliance_ruleset).passed]
        checker = f"harness check ({spec.compliance_ruleset})"
    # as MLPerf's package checker: a set with one non-compliant log (four for unet3d) is accepted under
    # olympic scoring, that log scored as a run that did not converge (the results summarizer drops it)
    if spec is None:
        verdict = "unchecked"
    elif len(failed) > accepted_non_compliant(ref.benchmark_dir.name):
        verdict = "fail"
        reasons.append(f"{checker} fails {plural(len(failed), 'log')}: {', '.join(failed[:5])}")
    else:
        verdict = "pass"
    stats: RunSetStats = run_set_stats(logs, scaling=factor, target=target, max_dropped=max_dropped,
                                       non_compliant=frozenset(ref.benchmark_dir / name for name in failed))

    rcp_checked = spec is not None and spec.raw.get("rcp_checked", True)
    rcp_verdict = rcp_verdict_of(ref.benchmark_dir, ruleset) if rcp_checked else RCP_NOT_CHECKED
    if rcp_verdict.startswith("fail"):
        reasons.append(f"RCP check failed: {rcp_verdict}")

    emulated = str(desc.get("hw_notes", "")).startswith("EMULATED") or "EMULATED" in str(desc.get("accelerator_model_name", ""))
    if emulated:
        reasons.append("emulated: the profile's hardware was not present; ranks ran as CPU processes")
    required = spec.required_runs if spec else None
    if required is not None and len(logs) < required:
        reasons.append(f"{plural(len(logs), 'run')}; the benchmark requires {required}")
    if stats.score is None:
        reasons.append(f"no score: {stats.score_error}")

    nodes = max(_int(desc.get("number_of_nodes", 1)), 1)
    count = nodes * _int(desc.get("accelerators_per_node", 0))
    score = stats.score.minutes if stats.score else None
    host = host_text(desc)
    throughputs = [log.throughput for log in logs if log.throughput is not None]
    logged_profile = logs[0].values.get(keys.HARNESS_PROFILE) if logs else None
    profile = str(logged_profile) if logged_profile else None
    entry = {
        "rank": None,
        "ranked": not reasons,
        "reasons": reasons,
        "submitter": str(desc.get("submitter") or ref.package.name),
        "system": str(desc.get("system_name") or ref.system),
        "round": round_name,
        "source": str(ref.benchmark_dir),
        "accelerator_model": str(desc.get("accelerator_model_name") or ("none" if desc else "unknown")),
        "accelerator_count": count,
        "nodes": nodes,
        "host": host,
        "profile": profile,
        "division": str(desc.get("division") or "unknown"),
        "availability": str(desc.get("status") or "unknown"),
        "emulated": emulated,
        "runs": len(logs),
        "required_runs": required,
        "converged_runs": stats.score.converged_runs if stats.score else sum(lg.converged(target) for lg in logs),
        "run_minutes": [lg.run_time(target).minutes * factor for lg in logs if lg.run_start_ms is not None and lg.run_stop_ms is not None],
        "score_minutes": score,
        "score_interval_95": list(stats.bootstrap_95) if stats.bootstrap_95 else None,
        "coefficient_of_variation": stats.coefficient_of_variation,
        "rcp_verdict": rcp_verdict,
        "compliance_verdict": verdict,
        "throughput_samples_per_s": sum(throughputs) / len(throughputs) if throughputs else None,
        "accelerator_minutes": score * count if score is not None and count > 0 else None,
        "speedup_vs_baseline": None,
        "curves": [_curve(lg, target) for lg in logs],
    }
    return benchmark, entry, spec, label_facts(logs)


def rcp_verdict_of(run_set_dir: Path, ruleset: str | None) -> str:
    """``pass``, ``fail: <why>``, ``missing RCP`` or ``not checked`` (no RCPs for the benchmark)."""
    try:
        check = check_convergence(run_set_dir, version=ruleset)
    except HarnessError:
        return RCP_NOT_CHECKED
    if check.verdict is Verdict.PASS:
        return "pass"
    if check.verdict is Verdict.MISSING_RCP:
        return "missing RCP"
    return f"fail: {check.message}"


def _curve(log: RunLog, target: float | None) -> dict[str, Any]:
    points: list[list[float]] = []
    if log.run_start_ms is not None:
        for _, auc, time_ms in log.eval_points:
            points.append([(time_ms - log.run_start_ms) / 60000.0, auc])
    return {"run": log.path.name, "converged": log.converged(target), "points": points}


Projector = Callable[[RunSetRef], dict[str, Any]]


def build_leaderboard(roots: Sequence[Path], *, baseline: str | None = None,
                      projector: Projector | None = None) -> dict[str, Any]:
    """The leaderboard model over every run set under ``roots``, validated against its schema.
    ``projector``: each run set's projection (``harness project``; the entry's ``projection``),
    given by the caller because the leaderboard never imports the reference's planner."""
    groups: dict[str, dict[str, Any]] = {}
    seen: set[Path] = set()
    facts: dict[int, dict[str, str | None]] = {}
    for root in roots:
        refs = list(find_run_sets(Path(root)))
        if not refs:
            raise no_logs_error(Path(root))
        for ref in refs:
            key = ref.benchmark_dir.resolve()
            if key in seen:
                continue
            seen.add(key)
            benchmark, entry, spec, facts[id(entry)] = build_entry(ref)
            if projector is not None:
                entry["projection"] = projector(ref)
            group = groups.setdefault(benchmark, {
                "benchmark": benchmark,
                "target_auc": spec.target_auc if spec else None,
                "required_runs": spec.required_runs if spec else None,
                "entries": [],
            })
            group["entries"].append(entry)
    for group in groups.values():  # a label tells an entry from the others of its benchmark
        assign_labels(group["entries"], lambda e: facts[id(e)])
    everything = [e for group in groups.values() for e in group["entries"]]
    base = resolve_baseline(everything, baseline) if baseline else None
    for group in groups.values():
        _rank(group["entries"], base)
    board = {
        "generated_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "harness_version": __version__,
        "baseline_system": baseline,
        "roots": [os.fspath(r) for r in roots],
        "benchmarks": [groups[name] for name in sorted(groups)],
    }
    validate(board, "leaderboard", what="the leaderboard")
    return board


def no_logs_error(root: Path) -> HarnessError:
    """A root without a run set: one line naming it (exit 2), and where logs lie outside the layout,
    the folder to give instead."""
    message = f"{root}: no MLPerf result logs found (result_*.txt under results/<system>/<benchmark>/)"
    found = next(find_log_folders(root), None)
    if found is not None:
        above = found.resolve().parent.parent
        if above.name == "results" and (above.parent / "systems").is_dir():
            package = above.parent if root.is_absolute() else os.path.relpath(above.parent)
            message += f"; {found} is a run set: give {package}, the folder that holds its results/"
        else:
            message += f"; {found} holds logs outside that layout"
    return HarnessError(message, ErrorCategory.NOT_FOUND)


def _rank(entries: list[dict[str, Any]], baseline: tuple[str, str] | None) -> None:
    ranked = sorted((e for e in entries if e["ranked"]), key=lambda e: e["score_minutes"])
    for i, e in enumerate(ranked, start=1):
        e["rank"] = i
    # the baseline system's entry of this benchmark (a benchmark it did not run has no speedups)
    base = next((e for e in entries if system_key(e) == baseline and e["score_minutes"]), None)
    for e in entries:
        e["baseline"] = baseline is not None and system_key(e) == baseline
        if base is not None and e["score_minutes"]:
            e["speedup_vs_baseline"] = base["score_minutes"] / e["score_minutes"]
    entries.sort(key=lambda e: (not e["ranked"], e["rank"] or 0, e["score_minutes"] is None, e["score_minutes"] or 0))
