"""Systematic mutations of real MLPerf logs, for comparing our checker with MLPerf's.

Each mutation takes the log's lines (text, line endings kept) and returns the mutated text,
or None when it does not apply to that log (e.g. no fixed hyperparameter to change).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

TOKEN = ":::MLLOG "
_LINE = re.compile(r"^(?P<prefix>.*):::MLLOG (?P<json>.*?)\s*$", re.DOTALL)

# What the rules fix for each benchmark, and a value the rules reject.
FIXED = {"dlrm_dcnv2": ("opt_adagrad_epsilon", 1e-7), "dlrm": ("sgd_opt_learning_rate_decay_poly_power", 3)}
TARGET = {"dlrm_dcnv2": 0.80275, "dlrm": 0.8025}
INIT_LIMIT_MIN = 31  # over the closed limit of every round (20 min in 0.7, 30 after)


def _records(lines: list[str]) -> list[tuple[int, dict]]:
    out = []
    for i, line in enumerate(lines):
        if TOKEN in line:
            m = _LINE.match(line.rstrip("\r\n"))
            out.append((i, json.loads(m.group("json"))))
    return out


def _rewrite(lines: list[str], i: int, record: dict) -> None:
    m = _LINE.match(lines[i].rstrip("\r\n"))
    ending = lines[i][len(lines[i].rstrip("\r\n")):]
    lines[i] = f"{m.group('prefix')}{TOKEN}{json.dumps(record)}{ending}"


def _first(lines: list[str], key: str) -> tuple[int, dict] | None:
    return next(((i, r) for i, r in _records(lines) if r["key"] == key), None)


def _benchmark(lines: list[str]) -> str | None:
    found = _first(lines, "submission_benchmark")
    return found[1]["value"] if found else None


def remove_key(key: str) -> Callable[[list[str]], str | None]:
    """Remove every record of ``key``."""
    def mutate(lines: list[str]) -> str | None:
        drop = {i for i, r in _records(lines) if r["key"] == key}
        if not drop:
            return None
        return "".join(line for i, line in enumerate(lines) if i not in drop)
    mutate.__name__ = f"remove_{key}"
    return mutate


def duplicate_run_start(lines: list[str]) -> str | None:
    i, _ = _first(lines, "run_start")
    return "".join(lines[: i + 1] + [lines[i]] + lines[i + 1 :])


def change_fixed_hyperparameter(lines: list[str]) -> str | None:
    fixed = FIXED.get(_benchmark(lines))
    found = fixed and _first(lines, fixed[0])
    if not found:
        return None
    i, rec = found
    _rewrite(lines, i, {**rec, "value": fixed[1]})
    return "".join(lines)


def lower_last_auc_below_target(lines: list[str]) -> str | None:
    target = TARGET.get(_benchmark(lines))
    evals = [(i, r) for i, r in _records(lines) if r["key"] == "eval_accuracy"]
    if target is None or not evals:
        return None
    i, rec = evals[-1]
    _rewrite(lines, i, {**rec, "value": target - 0.001})
    return "".join(lines)


def truncate_mid_line(lines: list[str]) -> str | None:
    recs = _records(lines)
    i = recs[len(recs) * 2 // 3][0]
    return "".join(lines[:i]) + lines[i][: len(lines[i]) // 2]


def non_json_mllog_line(lines: list[str]) -> str | None:
    i = _records(lines)[1][0]
    return "".join(lines[:i] + [':::MLLOG {"namespace": "", "time_ms": 1, "key": oops}\n'] + lines[i:])


def run_stop_before_run_start(lines: list[str]) -> str | None:
    _, start = _first(lines, "run_start")
    i, stop = _first(lines, "run_stop")
    _rewrite(lines, i, {**stop, "time_ms": start["time_ms"] - 60_000})
    return "".join(lines)


def init_over_limit(lines: list[str]) -> str | None:
    _, stop = _first(lines, "init_stop")
    i, start = _first(lines, "init_start")
    _rewrite(lines, i, {**start, "time_ms": stop["time_ms"] - INIT_LIMIT_MIN * 60_000})
    return "".join(lines)


def division_unknown(lines: list[str]) -> str | None:
    i, rec = _first(lines, "submission_division")
    _rewrite(lines, i, {**rec, "value": "semi"})
    return "".join(lines)


def record_without_metadata(lines: list[str]) -> str | None:
    i, rec = _first(lines, "eval_start")
    _rewrite(lines, i, {k: v for k, v in rec.items() if k != "metadata"})
    return "".join(lines)


def auc_as_string(lines: list[str]) -> str | None:
    evals = [(i, r) for i, r in _records(lines) if r["key"] == "eval_accuracy"]
    i, rec = evals[-1]
    _rewrite(lines, i, {**rec, "value": str(rec["value"])})
    return "".join(lines)


def global_batch_size_twice_different(lines: list[str]) -> str | None:
    i, rec = _first(lines, "global_batch_size")
    lines.insert(i + 1, lines[i])
    _rewrite(lines, i + 1, {**rec, "value": rec["value"] * 2})
    return "".join(lines)


MUTATIONS: list[Callable[[list[str]], str | None]] = [
    remove_key("run_stop"),
    remove_key("eval_samples"),
    remove_key("init_stop"),
    remove_key("global_batch_size"),
    remove_key("submission_division"),
    remove_key("cache_clear"),
    duplicate_run_start,
    change_fixed_hyperparameter,
    lower_last_auc_below_target,
    truncate_mid_line,
    non_json_mllog_line,
    run_stop_before_run_start,
    init_over_limit,
    division_unknown,
    record_without_metadata,
    auc_as_string,
    global_batch_size_twice_different,
]

# Where MLPerf's checker is wrong, what each side says and why ours is right. Keyed by
# mutation name; "crash" means the official checker stops with a traceback (exit 1).
DIFFERENCES: dict[str, tuple[str, str, str]] = {
    "duplicate_run_start": (
        "pass", "fail",
        "its rules say EXACTLY_ONE run_start, but its code demotes a repeat with the same value "
        "(null) to a warning; a second run_start makes the timed region ambiguous",
    ),
    "run_stop_before_run_start": (
        "pass", "fail",
        "it checks the order of lines, never of time_ms: a run_stop timed before its run_start "
        "would score a negative time to train",
    ),
    "division_unknown": (
        "crash", "fail",
        "its POST code enqueues 'semi_common.yaml', which does not exist, and open() raises",
    ),
    "record_without_metadata": (
        "crash", "fail", "its parser indexes m['metadata'] and the KeyError is not caught",
    ),
    "auc_as_string": (
        "crash", "fail", "its ATLEAST_ONE_CHECK compares a str with a float outside any try",
    ),
}
