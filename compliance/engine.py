"""The rules engine: versioned rule files (data, a closed vocabulary) applied to one MLLOG log.

A rule set is a directory ``compliance/rulesets/<name>/`` (``training_6.0.0``,
``harness_1.0.0``...) of rule files chained as MLPerf chains its YAML: ``common`` names, through
the first ``submission_division`` record, ``<division>_common``, which names, through
``submission_benchmark``, ``<division>_<benchmark>``. A rule file may ``inherit`` another
(``training_5.1.0/common``) and replace or remove keys, so each round states only what it
changed.

Every check is data from a closed vocabulary (see ``compliance/schemas/ruleset.schema.json``);
nothing is evaluated as code. The semantics follow ``mlperf_logging``'s checker so that the
verdicts agree on every real log:

- a key's checks run on each of its records in line order (on the first only, for
  ``first_only`` keys such as ``submission_*``);
- ``after``/``not_after`` refer to records on earlier lines;
- when a later file in the chain defines a key again, the earlier files' findings about that
  key are dropped (the more specific rule wins), but findings not tied to a key (an
  ``at_least_one`` value no record reached, alternatives, ``end`` checks, parse errors) stay;
- an ``exactly_one`` key repeated with the same value is a warning, as MLPerf's checker has it,
  unless the rule says ``repeat: fail`` (the clock keys ``run_start`` and ``run_stop``: two
  of them make the timed region ambiguous, which MLPerf's checker lets through).

Derived quantities (``derive:``, MLPerf's ``BEGIN`` state and ``POST`` code, as data): a rule
file may name quantities, each with an ``initial`` value (else undefined, MLPerf's ``None``)
and/or an expression recomputed ``from`` each record of one of the file's keys, after that
record's checks, in declaration order. An expression is a number, ``value`` (the record's
value), the name of a derived quantity, or one operation of a closed set (``add``, ``sub``,
``mul``, ``div``, ``floor``, ``ceil``, ``max``, ``min``) over expressions, computed with
Python's arithmetic as MLPerf's code does; an operation on a non-number, or one that raises
(a division by zero, ``ceil`` of NaN), is a finding on the key and leaves that quantity and
the ones after it unchanged for that record (MLPerf's ``POST`` stops at the exception). The
state is per rule file, as MLPerf's ``s``. Predicates ``equals``, ``not_equals``, ``min``,
``max``, ``above``, ``below`` and ``multiple_of`` may take ``{derived: NAME}``, the quantity's
value when the record is checked: so the rules run in log order (a learning rate logged
before the batch size its band is derived from fails), compared as Python compares (an
undefined quantity fails every comparison but ``equals``, where it is ``None``). A key's
``first_checks`` apply to its first record only (MLPerf's ``FIRST_CHECK``), after the derivations.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compliance.findings import Finding, Severity
from harness.errors import ErrorCategory, HarnessError
from harness.mllog import keys
from harness.mllog.reader import ParsedLog, Record, parse_log

RULESETS = Path(__file__).resolve().parent / "rulesets"  # a plain path: importlib.resources costs start-up
ROOT_LEVEL = "common"


VALIDATED = RULESETS / "validated.json"  # "<ruleset>/<level>.yaml" -> {sha256, rules} of a content validated


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def schema_errors(instance: Any, name: str) -> list[str]:
    """:func:`compliance.schemas.schema_errors`, imported when a rule file is validated at all."""
    # here: a check of bundled rule files validates nothing and skips this import (start-up)
    from compliance.schemas import schema_errors as errors_of

    return errors_of(instance, name)


def _parse_yaml(text: str) -> Any:
    import yaml  # here: a check of bundled rule files reads them from the record, without PyYAML's import

    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # libyaml's parser where present


@functools.cache
def _validated() -> dict[str, dict[str, Any]]:
    try:
        return json.loads(VALIDATED.read_text())
    except (OSError, ValueError):
        return {}


def validated_digests() -> dict[str, dict[str, Any]]:
    """Every bundled rule file validated against the rule-set schema, with its digest and its
    parsed rules (where JSON holds them exactly): what ``compliance/rulesets/validated.json``
    must hold (``python -m compliance.engine`` writes it; a test checks it). A check then takes a
    bundled file whose text has that digest as validated and parsed, without importing jsonschema
    or PyYAML (most of its start-up). Raises on the first invalid file."""
    out = {}
    for ruleset in ruleset_names():
        for path in sorted(RULESETS.joinpath(ruleset).iterdir(), key=lambda p: p.name):
            if path.name.endswith(".yaml"):
                text = path.read_text()
                raw = _parse_yaml(text)
                errors = schema_errors(raw, "ruleset")
                if errors:
                    raise HarnessError(f"rule file {ruleset}/{path.name} is invalid: {errors[0]}", ErrorCategory.BAD_INPUT)
                try:
                    exact = json.loads(json.dumps(raw)) == raw
                except (TypeError, ValueError):
                    exact = False
                out[f"{ruleset}/{path.name}"] = {"sha256": _digest(text), "rules": raw if exact else None}
    return out


def ruleset_names() -> list[str]:
    return sorted(p.name for p in RULESETS.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))


def _rules_path(ruleset: str, level: str) -> Path:
    return RULESETS.joinpath(ruleset).joinpath(f"{level}.yaml")


@functools.cache
def load_rule_file(ruleset: str, level: str) -> dict[str, Any] | None:
    """The resolved rule file ``<ruleset>/<level>`` (inheritance applied), None when absent."""
    if "/" in ruleset or "/" in level or ruleset.startswith(".") or level.startswith("."):
        return None
    path = _rules_path(ruleset, level)
    if not path.is_file():
        return None
    text = path.read_text()
    # a bundled file as the test suite validated it is neither parsed nor validated again
    # (PyYAML's and jsonschema's imports are most of a check's start-up); any other content is
    record = _validated().get(f"{ruleset}/{level}.yaml") or {}
    if record.get("sha256") == _digest(text) and record.get("rules") is not None:
        raw, errors = copy.deepcopy(record["rules"]), []
    else:
        raw = _parse_yaml(text)
        errors = schema_errors(raw, "ruleset")
    if errors:
        raise HarnessError(f"rule file {ruleset}/{level}.yaml is invalid: {errors[0]}", ErrorCategory.BAD_INPUT)
    keys: dict[str, Any] = {}
    end: list[Any] = []
    run_set: dict[str, Any] | None = None
    derive: dict[str, Any] = {}
    if "inherit" in raw:
        parent_set, _, parent_level = raw["inherit"].partition("/")
        parent = load_rule_file(parent_set, parent_level)
        if parent is None:
            raise HarnessError(f"rule file {ruleset}/{level}.yaml inherits {raw['inherit']}, which does not exist")
        keys, end, run_set = dict(parent["keys"]), list(parent["end"]), parent["run_set"]
        derive = dict(parent["derive"])
    for name in raw.get("remove_keys", []):
        keys.pop(name, None)
    keys.update(raw.get("keys", {}))
    derive.update(raw.get("derive", {}))
    if "end" in raw:
        end = raw["end"]
    if "run_set" in raw:
        run_set = raw["run_set"]
    resolved = {"keys": keys, "end": end, "run_set": run_set, "derive": derive}
    problem = _derive_problem(resolved)
    if problem:
        raise HarnessError(f"rule file {ruleset}/{level}.yaml is invalid: {problem}", ErrorCategory.BAD_INPUT)
    return resolved


# ---- derived quantities -------------------------------------------------------------------------

_BINARY = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
           "div": lambda a, b: a / b}
_UNARY = {"floor": math.floor, "ceil": math.ceil}
_VARIADIC = {"max": max, "min": min}
VALUE = "value"  # in an expression: the value of the record being processed


class DeriveError(Exception):
    """An expression that cannot be computed (MLPerf's POST code would raise)."""


def _expr_names(expr: Any) -> set[str]:
    if isinstance(expr, str):
        return {expr}
    if isinstance(expr, dict):
        (_, args), = expr.items()
        return set().union(*(_expr_names(a) for a in (args if isinstance(args, list) else [args])))
    return set()


def _derived_refs(pred: dict[str, Any]) -> set[str]:
    return {a["derived"] for a in pred.values() if isinstance(a, dict) and set(a) == {"derived"}}


def _derive_problem(rules: dict[str, Any]) -> str | None:
    """What is wrong with the file's derived quantities and references to them (None: nothing)."""
    derive, keys = rules["derive"], rules["keys"]
    for name, spec in derive.items():
        if name == VALUE:
            return f"a derived quantity may not be named {VALUE!r}"
        if ("from" in spec) != ("expr" in spec):
            return f"derived {name} needs both 'from' and 'expr', or neither"
        if "from" in spec and spec["from"] not in keys:
            return f"derived {name} is computed from {spec['from']} records, a key this file does not define"
        unknown = _expr_names(spec.get("expr")) - set(derive) - {VALUE}
        if unknown:
            return f"derived {name} refers to {', '.join(sorted(unknown))}, not derived quantities"
    for key, rule in keys.items():
        preds = [c[k] for c in [*rule.get("checks", []), *rule.get("first_checks", [])] for k in ("value",) if k in c]
        preds += [p for c in [*rule.get("checks", []), *rule.get("first_checks", [])]
                  for p in c.get("metadata_values", {}).values()]
        refs = set().union(*(_derived_refs(p) for p in preds)) if preds else set()
        if refs - set(derive):
            return f"{key}'s checks refer to {', '.join(sorted(refs - set(derive)))}, not derived quantities"
        if "at_least_one" in rule and _derived_refs(rule["at_least_one"]):
            return f"{key}'s at_least_one may not refer to a derived quantity (MLPerf evaluates it outside any try)"
    return None


def evaluate(expr: Any, value: Any, state: dict[str, Any]) -> Any:
    """The value of a ``derive`` expression, with Python's arithmetic; raises :class:`DeriveError`."""
    if isinstance(expr, str):
        return value if expr == VALUE else state[expr]
    if not isinstance(expr, dict):
        return expr
    (op, args), = expr.items()
    operands = [_operand(evaluate(a, value, state), a) for a in (args if isinstance(args, list) else [args])]
    try:
        if op in _BINARY:
            return _BINARY[op](*operands)
        if op in _UNARY:
            return _UNARY[op](*operands)
        return _VARIADIC[op](operands)
    except (ArithmeticError, ValueError, TypeError) as err:
        raise DeriveError(f"{op} of {', '.join(_show(o) for o in operands)} fails ({err})") from None


def _operand(x: Any, expr: Any) -> Any:
    if isinstance(x, (int, float)):  # bool included: Python's arithmetic takes it as 0 or 1
        return x
    what = "this record's value" if expr == VALUE else repr(expr) if isinstance(expr, str) else "a sub-expression"
    if x is None:
        raise DeriveError(f"{what} is undefined (no record it derives from came earlier)")
    raise DeriveError(f"{what} is {_show(x)}, not a number")


# ---- value predicates -------------------------------------------------------------------------

def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def predicate_failure(pred: dict[str, Any], v: Any, derived: dict[str, Any] | None = None) -> str | None:
    """Why ``v`` fails predicate ``pred`` (None when it holds). Equality is Python's, as MLPerf's.

    An argument ``{derived: NAME}`` is the current value of that derived quantity (``derived``).
    """
    for op, arg in pred.items():
        if isinstance(arg, dict) and set(arg) == {"derived"}:
            why = _derived_failure(op, arg["derived"], (derived or {}).get(arg["derived"]), v)
            if why:
                return why
            continue
        if op == "multiple_of":
            if not _is_multiple(v, arg):
                return f"is {_show(v)}, must be a multiple of {_show(arg)}"
        elif op == "equals":
            if not _safe_eq(v, arg):
                return f"is {_show(v)}, must equal {_show(arg)}"
        elif op == "not_equals":
            if _safe_eq(v, arg):
                return f"must not be {_show(arg)}"
        elif op == "one_of":
            if not any(_safe_eq(v, a) for a in arg):
                return f"is {_show(v)}, must be one of {', '.join(_show(a) for a in arg)}"
        elif op in ("min", "max", "above", "below"):
            if not _number(v) or math.isnan(v):
                return f"is {_show(v)}, must be a number"
            bad = {"min": v < arg, "max": v > arg, "above": v <= arg, "below": v >= arg}[op]
            if bad:
                word = {"min": "at least", "max": "at most", "above": "above", "below": "below"}[op]
                return f"is {_show(v)}, must be {word} {_show(arg)}"
        elif op == "integral":
            if not _number(v) or not math.isfinite(v) or abs(round(v) - v) >= 1e-5:
                return f"is {_show(v)}, must be an integer"
        elif op == "type":
            ok = {
                "number": _number(v),
                "integer": _number(v) and float(v).is_integer(),
                "string": isinstance(v, str),
                "boolean": isinstance(v, bool),
                "object": isinstance(v, dict),
            }[arg]
            if not ok:
                return f"is {_show(v)}, must be of type {arg}"
        else:  # the schema admits no other operator
            raise AssertionError(op)
    return None


_RELATIONS = {"min": (lambda v, a: a <= v, "at least"), "max": (lambda v, a: v <= a, "at most"),
              "above": (lambda v, a: a < v, "above"), "below": (lambda v, a: v < a, "below")}


def _is_multiple(v: Any, m: Any) -> bool:
    """MLPerf's ``v % m == 0``: Python's remainder, false where it raises (a str formats instead)."""
    if isinstance(v, str):
        return False
    try:
        return bool(v % m == 0)
    except Exception:  # noqa: BLE001 - MLPerf's try: a failed CHECK
        return False


def _derived_failure(op: str, name: str, arg: Any, v: Any) -> str | None:
    """``op`` against derived quantity ``name`` (value ``arg``), compared as MLPerf's Python compares."""
    shown = f"{name} ({_show(arg)})" if arg is not None else \
        f"{name}, which is undefined at this line (no earlier record it derives from gave it a value)"
    if op == "equals":
        return None if _safe_eq(v, arg) else f"is {_show(v)}, must equal {shown}"
    if op == "not_equals":
        return f"must not equal {shown}" if _safe_eq(v, arg) else None
    if op == "multiple_of":
        return None if arg is not None and _is_multiple(v, arg) else f"is {_show(v)}, must be a multiple of {shown}"
    test, word = _RELATIONS[op]
    try:
        ok = bool(test(v, arg))
    except Exception:  # noqa: BLE001 - a comparison MLPerf's code cannot make fails its CHECK
        ok = False
    return None if ok else f"is {_show(v)}, must be {word} {shown}"


def _safe_eq(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - exotic values (deeply nested) compare unequal
        return False


def _show(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


# ---- one log ----------------------------------------------------------------------------------

@dataclass
class LogCheck:
    """The verdict on one log under one rule set."""

    path: Path
    ruleset: str
    findings: list[Finding]
    levels: list[str]  # the rule files applied, in order
    log: ParsedLog

    @property
    def passed(self) -> bool:
        return not any(f.is_error for f in self.findings)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.is_error]


class _Level:
    """Applies one rule file to the records; collects its findings and the files it chains to."""

    def __init__(self, ruleset: str, level: str, rules: dict[str, Any], log: ParsedLog):
        self.id = f"{ruleset}/{level}"
        self.rules = rules
        self.log = log
        self.findings: list[Finding] = []
        self.chained: list[str] = []
        self.ruleset = ruleset
        self.not_in_ruleset: Finding | None = None  # the log names a division/benchmark this rule set lacks
        # MLPerf's per-file state ``s``: each derived quantity's current value (None: undefined)
        self.derived: dict[str, Any] = {n: d.get("initial") for n, d in rules["derive"].items()}
        self.derive_on: dict[str, list[tuple[str, Any]]] = {}
        for n, d in rules["derive"].items():
            if "from" in d:
                self.derive_on.setdefault(d["from"], []).append((n, d["expr"]))

    def _finding(self, rule: str, message: str, *, line: int | None = None, key: str | None = None,
                 severity: Severity = Severity.ERROR) -> None:
        self.findings.append(Finding(f"{self.id}:{rule}", severity, message, self.log.path, line, key))

    def _what_happened(self, name: str) -> str:
        """For a value no record reached: the best one logged, and how the run ended when it did
        not end well (``run_stop status=aborted``), each with its line."""
        numbers = [r for r in self.log.records if r.key == name and _number(r.value) and not math.isnan(r.value)]
        parts = []
        if numbers:
            best = max(numbers, key=lambda r: r.value)
            parts.append(f"the best is {best.value:.5g} at line {best.lineno} ({len(numbers)} logged)")
        stop = next((r for r in self.log.records if r.key == keys.RUN_STOP), None)
        status = stop.metadata.get(keys.STATUS) if stop is not None and isinstance(stop.metadata, dict) else None
        if stop is not None and status != keys.SUCCESS:
            parts.append(f"the run ended run_stop status={status} at line {stop.lineno}")
        return f": {'; '.join(parts)}" if parts else ""

    def run(self) -> None:
        keys = self.rules["keys"]
        records = self.log.records
        seen_before: set[str] = set()
        first_of: dict[str, Record] = {}
        earliest_time: dict[str, float] = {}
        checked_first: set[str] = set()
        first_checked: set[str] = set()
        reported: dict[str, list[Any]] = {k: [] for k in keys}
        satisfied: Counter[str] = Counter()
        collected: dict[str, list[Any]] = {}
        for rec in records:
            rule = keys.get(rec.key)
            if rule is not None:
                reported[rec.key].append(rec.value)
                if not (rule.get("first_only") and rec.key in checked_first):
                    checked_first.add(rec.key)
                    for check in rule.get("checks", []):
                        self._apply(check, rec, seen_before, first_of, earliest_time)
                    if "chain" in rule:
                        self._chain(rule["chain"], rec, rule)
                    self._derive(rec)
                if rule.get("first_checks") and rec.key not in first_checked:
                    first_checked.add(rec.key)
                    for check in rule["first_checks"]:
                        self._apply(check, rec, seen_before, first_of, earliest_time, rule_suffix="first")
                if "at_least_one" in rule and predicate_failure(rule["at_least_one"], rec.value) is None:
                    satisfied[rec.key] += 1
                if "collect" in rule and isinstance(rec.metadata, dict) and rule["collect"] in rec.metadata:
                    collected.setdefault(rec.key, []).append(rec.metadata[rule["collect"]])
            seen_before.add(rec.key)
            first_of.setdefault(rec.key, rec)
            if rec.key not in earliest_time or rec.time_ms < earliest_time[rec.key]:
                earliest_time[rec.key] = rec.time_ms
        self._occurrences(keys, reported)
        for name, rule in keys.items():
            if "at_least_one" in rule and reported[name] and not satisfied[name]:
                cond = ", ".join(f"{op} {_show(a)}" for op, a in rule["at_least_one"].items())
                self._finding(f"{name}.at_least_one",
                              f"no {name} record has a value with {cond}{self._what_happened(name)}")
        for check in self.rules["end"]:
            spec = check["collected"]
            got = sorted(map(str, collected.get(spec["key"], [])))
            want = sorted(map(str, spec["equals"]))
            if got != want:
                self._finding(f"{spec['key']}.collected",
                              f"{spec['key']} records name {got or 'nothing'} by {keys[spec['key']]['collect']}; "
                              f"the rules require exactly {want}")

    def _occurrences(self, keys: dict[str, Any], reported: dict[str, list[Any]]) -> None:
        counts = Counter(r.key for r in self.log.records)
        alternatives: set[frozenset[str]] = set()
        for name, rule in keys.items():
            occurs = rule.get("occurs", "optional")
            values = reported[name]
            n = len(values)
            if occurs == "exactly_one" and n != 1:
                same = n > 1 and all(_safe_eq(v, values[0]) for v in values)
                if same and rule.get("repeat", "warn") == "warn":
                    self._finding(f"{name}.occurs", f"{name} appears {n} times (with the same value); exactly one expected",
                                  key=name, severity=Severity.WARNING)
                else:
                    detail = " with different values" if n > 1 and not same else ""
                    self._finding(f"{name}.occurs", f"{name} appears {n} times{detail}; exactly one required", key=name)
            elif occurs == "at_least_one" and n < 1:
                self._finding(f"{name}.occurs", f"{name} is missing; at least one required", key=name)
            elif isinstance(occurs, dict) and "at_least" in occurs and n < occurs["at_least"]:
                self._finding(f"{name}.occurs", f"{name} appears {n} times; at least {occurs['at_least']} required", key=name)
            elif isinstance(occurs, dict) and "at_least_one_of" in occurs:
                alternatives.add(frozenset([name, *occurs["at_least_one_of"]]))
        for alts in sorted(alternatives, key=sorted):
            if not any(counts[k] for k in alts):
                names = " or ".join(sorted(alts))
                self._finding(f"{'|'.join(sorted(alts))}.occurs", f"none of {names} appears; at least one required")

    def _derive(self, rec: Record) -> None:
        """Recompute the quantities derived on this key, in order; stop at the first that fails."""
        for name, expr in self.derive_on.get(rec.key, []):
            try:
                self.derived[name] = evaluate(expr, rec.value, self.derived)
            except DeriveError as err:
                self._finding(f"{rec.key}.derive", f"{rec.key} cannot give {name}: {err}", line=rec.lineno, key=rec.key)
                return

    def _chain(self, template: str, rec: Record, rule: dict[str, Any]) -> None:
        value = rec.value
        allowed = next((c["value"]["one_of"] for c in rule.get("checks", []) if "one_of" in c.get("value", {})), None)
        if allowed is not None and not any(_safe_eq(value, a) for a in allowed):
            what = rec.key.removeprefix("submission_")
            self.not_in_ruleset = Finding(
                f"{self.id}:{rec.key}.not_in_ruleset", Severity.ERROR,
                f"{what} {_show(value)} is not part of ruleset {self.ruleset} (its {what}s: {', '.join(map(str, allowed))})",
                self.log.path, rec.lineno, None)
            return
        if not isinstance(value, str) or not value or not value.replace("_", "").replace(".", "").isalnum() \
                or ".." in value:
            self._finding(f"{rec.key}.chain", f"{rec.key} {_show(value)} names no rule file", line=rec.lineno)
            return
        self.chained.append(template.replace("{value}", value))

    def _apply(self, check: dict[str, Any], rec: Record, seen_before: set[str], first_of: dict[str, Record],
               earliest_time: dict[str, float], rule_suffix: str = "") -> None:
        (kind, arg), = check.items()
        key = rec.key
        rid = f"{key}.{rule_suffix + '.' if rule_suffix else ''}{kind}"
        md = rec.metadata

        def fail(message: str) -> None:
            self._finding(rid, f"{key} {message}", line=rec.lineno, key=key)

        if kind == "value":
            why = predicate_failure(arg, rec.value, self.derived)
            if why:
                fail(f"{'(first record) ' if rule_suffix else ''}value {why}")
        elif kind in ("metadata_has", "metadata_has_any", "metadata_values", "metadata_requires"):
            if not isinstance(md, dict):
                fail(f"metadata is {_show(md)}, not an object")
            elif kind == "metadata_has":
                missing = [f for f in arg if f not in md]
                if missing:
                    fail(f"metadata lacks {', '.join(missing)}")
            elif kind == "metadata_has_any":
                if not any(f in md for f in arg):
                    fail(f"metadata has none of {', '.join(arg)}")
            elif kind == "metadata_values":
                for fieldname, pred in arg.items():
                    if fieldname in md:
                        why = predicate_failure(pred, md[fieldname], self.derived)
                        if why:
                            fail(f"{'(first record) ' if rule_suffix else ''}metadata {fieldname} {why}")
            else:
                for fieldname, needed in arg.items():
                    if fieldname in md:
                        missing = [f for f in needed if f not in md]
                        if missing:
                            fail(f"metadata has {fieldname} but lacks {', '.join(missing)}")
        elif kind == "after":
            if arg not in seen_before:
                fail(f"comes before any {arg}")
        elif kind == "not_after":
            if arg in seen_before:
                fail(f"comes after {arg}")
        elif kind == "not_before_time":
            other = first_of.get(arg)
            if other is not None and rec.time_ms < other.time_ms:
                fail(f"time_ms {rec.time_ms:.0f} is before {arg}'s {other.time_ms:.0f}")
        elif kind == "within":
            since = earliest_time.get(arg["since_earliest"])
            minutes = self._limit_minutes(arg, first_of)
            if since is not None and not rec.time_ms - since < minutes * 60_000:
                fail(f"comes {(rec.time_ms - since) / 60_000:.2f} min after the first {arg['since_earliest']}; "
                     f"the limit is {minutes:g} min")
        else:  # the schema admits no other check
            raise AssertionError(kind)

    @staticmethod
    def _limit_minutes(arg: dict[str, Any], first_of: dict[str, Record]) -> float:
        m = arg["minutes"]
        if _number(m):
            return float(m)
        declared = first_of.get(m["by"])
        if declared is None:
            return float(m["undeclared"])
        return float(m["values"].get(declared.value, m["otherwise"])) if isinstance(declared.value, str) \
            else float(m["otherwise"])


def check_parsed(log: ParsedLog, ruleset: str) -> LogCheck:
    """Apply rule set ``ruleset`` to a parsed log: common, then the files it chains to."""
    if load_rule_file(ruleset, ROOT_LEVEL) is None:
        raise HarnessError(f"no rule set named {ruleset!r} (known: {', '.join(ruleset_names())})",
                           ErrorCategory.NOT_FOUND)
    findings: list[Finding] = []
    if log.unreadable:
        findings.append(Finding(f"{ruleset}/read", Severity.ERROR, f"cannot read the log: {log.unreadable}", log.path))
        return LogCheck(log.path, ruleset, findings, [], log)
    if not log.records and not log.problems:  # not a log at all: said once, not as every rule's absent key
        findings.append(Finding(f"{ruleset}/parse", Severity.ERROR, "no MLLOG lines (not an MLPerf log)", log.path))
        return LogCheck(log.path, ruleset, findings, [], log)
    for p in log.problems:
        findings.append(Finding(f"{ruleset}/parse", Severity.ERROR, f"malformed MLLOG line: {p.message}", log.path, p.lineno))
    if not log.records:
        findings.append(Finding(f"{ruleset}/parse", Severity.ERROR, "no MLLOG lines in the file", log.path))
    queue, done = [ROOT_LEVEL], []
    while queue:
        level = queue.pop(0)
        if level in done:
            continue
        rules = load_rule_file(ruleset, level)
        if rules is None:
            findings.append(Finding(f"{ruleset}/chain", Severity.ERROR,
                                    f"rule set {ruleset} has no rule file {level!r} (an unknown division or benchmark)",
                                    log.path))
            continue
        done.append(level)
        defined = set(rules["keys"])
        findings = [f for f in findings if f.key is None or f.key not in defined]
        lvl = _Level(ruleset, level, rules, log)
        lvl.run()
        if lvl.not_in_ruleset is not None:
            # a log of another round's benchmark (or an unknown division): one finding says so, rather
            # than a cascade of this round's rules that were never meant for it
            return LogCheck(log.path, ruleset, [lvl.not_in_ruleset], [*done], log)
        findings.extend(lvl.findings)
        queue.extend(lvl.chained)
    return LogCheck(log.path, ruleset, findings, done, log)


def check_log(path: Path, ruleset: str) -> LogCheck:
    """Parse and check one log file. Never raises for any content of the file."""
    return check_parsed(parse_log(Path(path)), ruleset)


def run_set_rules(ruleset: str, levels: list[str]) -> dict[str, Any] | None:
    """The ``run_set`` rules of the most specific rule file applied that has them."""
    for level in reversed(levels):
        rules = load_rule_file(ruleset, level)
        if rules is not None and rules["run_set"] is not None:
            return rules["run_set"]
    return None


if __name__ == "__main__":  # python -m compliance.engine: record the bundled rule files as validated
    # keys in the files' order: the order of derived quantities is their order of evaluation
    Path(str(VALIDATED)).write_text(json.dumps(validated_digests(), indent=1) + "\n")
