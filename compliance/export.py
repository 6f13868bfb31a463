"""Export a rule set as MLPerf compliance-checker YAML, for reviewers who trust only mlperf_logging.

``harness rules export-mlperf DIR`` writes, for each rule file of a rule set, the equivalent
``mlperf_logging`` config (``KEY``/``REQ``/``CHECK``/``POST``/``ATLEAST_ONE_CHECK``, ``BEGIN``
and ``END``), chained by absolute paths, so that::

    python -m mlperf_logging.compliance_checker --usage training --ruleset 6.0.0 \\
        --config DIR/common.yaml results/.../result_0.txt

checks a log with the official tool under our rules. The official format runs Python
expressions; they are generated here from the closed vocabulary, one construct per check,
so the exported files say exactly what the rule files say. (Move the directory and the
absolute chain paths break: export again.)

The translation keeps the engine's semantics. Where ``mlperf_logging`` would differ by
itself, the generated code compensates: ``repeat: fail`` becomes an END check on the count
(the official checker demotes a same-value repeat to a warning), and every comparison is
guarded by a type test (the official checker evaluates ``ATLEAST_ONE_CHECK`` outside any
``try`` and would crash on a string), and a ``chain`` enqueues only values its ``one_of`` admits.
Derived quantities (``derive:``) live in ``s['d']``: their initial values in ``BEGIN``, their
expressions as ``POST`` statements of the key they derive from (after the bookkeeping, so an
expression that raises stops only the derivations after it, as in the engine), each operand
tested to be a number; ``first_checks`` become ``FIRST_CHECK``. The state holds only JSON values
(no sets): the official checker prints it with ``json.dumps`` in each failure message.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from compliance.engine import ROOT_LEVEL, RULESETS, VALUE, load_rule_file
from harness.errors import ErrorCategory, HarnessError
from harness.files import write_atomic

_IS_NUM = "(isinstance({x}, (int, float)) and not isinstance({x}, bool))"
_NUM = "(isinstance({x}, (int, float)) and not isinstance({x}, bool) and {x} == {x})"  # a number, not NaN


def _ref(arg: Any) -> str | None:
    """The generated expression for ``{derived: NAME}``, else None."""
    if isinstance(arg, dict) and set(arg) == {"derived"}:
        return f"s['d'][{arg['derived']!r}]"
    return None


def _pred(pred: dict[str, Any], x: str) -> str:
    parts = []
    num = _NUM.format(x=x)
    for op, arg in pred.items():
        ref = _ref(arg)
        if ref is not None:  # compared as Python compares; an exception fails the CHECK, as in the engine
            parts.append({
                "equals": f"({x} == {ref})", "not_equals": f"({x} != {ref})",
                "min": f"({ref} <= {x})", "max": f"({x} <= {ref})", "above": f"({ref} < {x})",
                "below": f"({x} < {ref})",
                "multiple_of": f"(not isinstance({x}, str) and {ref} is not None and {x} % {ref} == 0)",
            }[op])
        elif op == "multiple_of":
            parts.append(f"(not isinstance({x}, str) and {x} % {arg!r} == 0)")
        elif op == "equals":
            parts.append(f"{x} == {arg!r}")
        elif op == "not_equals":
            parts.append(f"{x} != {arg!r}")
        elif op == "one_of":
            parts.append(f"{x} in {list(arg)!r}")
        elif op in ("min", "max", "above", "below"):
            sym = {"min": ">=", "max": "<=", "above": ">", "below": "<"}[op]
            parts.append(f"({num} and {x} {sym} {arg!r})")
        elif op == "integral":
            parts.append(f"({num} and abs({x}) != float('inf') and is_integer({x}))")
        elif op == "type":
            parts.append({
                "number": _IS_NUM.format(x=x),
                "integer": f"({_IS_NUM.format(x=x)} and float({x}).is_integer())",
                "string": f"isinstance({x}, str)",
                "boolean": f"isinstance({x}, bool)",
                "object": f"isinstance({x}, dict)",
            }[arg])
    return " and ".join(parts)


def _md_has(field: str) -> str:
    return f"(isinstance(v['metadata'], dict) and {field!r} in v['metadata'])"


def _check_exprs(check: dict[str, Any]) -> list[str]:
    (kind, arg), = check.items()
    if kind == "value":
        return [_pred(arg, "v['value']")]
    if kind == "metadata_has":
        return [_md_has(f) for f in arg]
    if kind == "metadata_has_any":
        return [" or ".join(_md_has(f) for f in arg)]
    if kind == "metadata_values":
        return [f"({_pred(p, f'v[{chr(39)}metadata{chr(39)}][{f!r}]')}) if {_md_has(f)} else "
                f"isinstance(v['metadata'], dict)" for f, p in arg.items()]
    if kind == "metadata_requires":
        # no comprehension: eval'd with separate locals, its scope could not see v
        return [f"({' and '.join(f'{g!r} in v[{chr(39)}metadata{chr(39)}]' for g in need) or 'True'}) if {_md_has(f)} "
                f"else isinstance(v['metadata'], dict)" for f, need in arg.items()]
    if kind == "after":
        return [f"{arg!r} in s['seen']"]
    if kind == "not_after":
        return [f"{arg!r} not in s['seen']"]
    if kind == "not_before_time":
        return [f"ll.timestamp >= s['first_time'].get({arg!r}, ll.timestamp)"]
    if kind == "within":
        since = f"s['earliest'].get({arg['since_earliest']!r}, 9e99)"
        m = arg["minutes"]
        if isinstance(m, (int, float)):
            limit = repr(float(m))
        else:
            by = f"s['first_value'].get({m['by']!r})"
            limit = (f"(({m['values']!r}.get({by}, {m['otherwise']!r}) if isinstance({by}, str) else {m['otherwise']!r}) "
                     f"if {m['by']!r} in s['first_value'] else {m['undeclared']!r})")
        return [f"ll.timestamp - {since} < {limit} * 60000"]
    raise AssertionError(kind)


_SYMBOL = {"add": "+", "sub": "-", "mul": "*", "div": "/"}


def _derive_code(name: str, expr: Any) -> list[str]:
    """Statements computing derived quantity ``name`` (compliance/engine.py's ``evaluate``): one
    temporary per operation, each operand tested to be a number (bool included), as the engine does."""
    stmts: list[str] = []

    def emit(e: Any) -> str:
        if isinstance(e, str):
            return "v['value']" if e == VALUE else f"s['d'][{e!r}]"
        if not isinstance(e, dict):
            return repr(e)
        (op, args), = e.items()
        xs = [emit(a) for a in (args if isinstance(args, list) else [args])]
        for x, a in zip(xs, args if isinstance(args, list) else [args]):
            if isinstance(a, str):  # a logged value or a derived quantity (which may hold one); the rest are numbers
                stmts.append(f"if not isinstance({x}, (int, float)): raise TypeError('not a number')")
        t = f"_t{len(stmts)}"
        if op in ("add", "sub", "mul", "div"):
            stmts.append(f"{t} = {xs[0]} {_SYMBOL[op]} {xs[1]}")
        elif op in ("floor", "ceil"):
            stmts.append(f"{t} = math.{op}({xs[0]})")
        else:
            stmts.append(f"{t} = {op}([{', '.join(xs)}])")
        return t

    result = emit(expr)
    return [*stmts, f"s['d'][{name!r}] = {result}"]


def _tracked(keys: dict[str, Any]) -> tuple[set[str], set[str], set[str]]:
    """Keys whose records the generated code must remember: (seen/first time, earliest time, first value)."""
    seen, earliest, first_value = set(), set(), set()
    for rule in keys.values():
        for check in [*rule.get("checks", []), *rule.get("first_checks", [])]:
            (kind, arg), = check.items()
            if kind in ("after", "not_after", "not_before_time"):
                seen.add(arg)
            elif kind == "within":
                earliest.add(arg["since_earliest"])
                if isinstance(arg["minutes"], dict):
                    first_value.add(arg["minutes"]["by"])
    return seen, earliest, first_value


def export_level(ruleset: str, level: str, out_dir: Path) -> dict[str, Any] | None:
    rules = load_rule_file(ruleset, level)
    if rules is None:
        return None
    keys = rules["keys"]
    seen, earliest, first_value = _tracked(keys)
    for tracked in seen | earliest | first_value:
        if tracked not in keys:
            raise HarnessError(f"cannot export {ruleset}/{level}: its checks refer to {tracked}, which that rule file "
                               "does not define (the official checker only runs code for a file's own keys)")
    initial = {name: spec.get("initial") for name, spec in rules["derive"].items()}
    out: list[dict[str, Any]] = [{"BEGIN": {"CODE": "s.update({'seen': {}, 'first_time': {}, 'earliest': {}, "
                                                   "'first_value': {}, 'count': {}, 'collected': {}, "
                                                   f"'d': {initial!r}}})"}}]
    derive_on: dict[str, list[tuple[str, Any]]] = {}
    for dname, spec in rules["derive"].items():
        if "from" in spec:
            derive_on.setdefault(spec["from"], []).append((dname, spec["expr"]))
    end_checks: list[str] = []
    for name, rule in keys.items():
        if ("submission_" in name) != bool(rule.get("first_only")):
            raise HarnessError(f"cannot export {ruleset}/{level}: the official checker runs checks on the first record "
                               f"only exactly for submission_* keys, and {name} says first_only={rule.get('first_only')}")
        record: dict[str, Any] = {"NAME": name}
        occurs = rule.get("occurs", "optional")
        if isinstance(occurs, dict) and "at_least" in occurs:
            record["REQ"] = f"AT_LEAST({occurs['at_least']})"
        elif isinstance(occurs, dict):
            record["REQ"] = f"AT_LEAST_ONE_OR({', '.join(occurs['at_least_one_of'])})"
        else:
            record["REQ"] = occurs.upper()
        checks = [e for c in rule.get("checks", []) for e in _check_exprs(c)]
        if checks:
            record["CHECK"] = checks
        post = []
        if name in seen:
            post.append(f"s['seen'][{name!r}] = True; s['first_time'].setdefault({name!r}, ll.timestamp)")
        if name in earliest:
            post.append(f"s['earliest'][{name!r}] = min(s['earliest'].get({name!r}, 9e99), ll.timestamp)")
        if name in first_value:
            post.append(f"s['first_value'].setdefault({name!r}, v['value'])")
        if rule.get("repeat") == "fail":
            post.append(f"s['count'][{name!r}] = s['count'].get({name!r}, 0) + 1")
            end_checks.append(f"s['count'].get({name!r}, 0) <= 1")
        if "collect" in rule:
            c = rule["collect"]
            post.append(f"s['collected'].setdefault({name!r}, []).extend([v['metadata'][{c!r}]] if "
                        f"isinstance(v['metadata'], dict) and {c!r} in v['metadata'] else [])")
        if "chain" in rule:
            target = os.path.join(str(out_dir.resolve()), rule["chain"].replace("{value}", "{}") + ".yaml")
            allowed = next((c["value"]["one_of"] for c in rule.get("checks", []) if "one_of" in c.get("value", {})),
                           None)
            # as the engine: a value outside the rule's one_of chains to nothing (MLPerf's own code would
            # enqueue a file that does not exist and crash)
            guard = f" if v['value'] in {list(allowed)!r} else None" if allowed is not None else ""
            post.append(f"enqueue_config({target!r}.format(v['value'])){guard}")
        # derived quantities last: the first that raises stops the rest, as in the engine
        post += [line for dname, expr in derive_on.get(name, []) for line in _derive_code(dname, expr)]
        if post:
            record["POST"] = "\n".join(post)
        first = [e for c in rule.get("first_checks", []) for e in _check_exprs(c)]
        if first:
            record["FIRST_CHECK"] = first
        if "at_least_one" in rule:
            record["ATLEAST_ONE_CHECK"] = _pred(rule["at_least_one"], "v['value']")
        out.append({"KEY": record})
    for check in rules["end"]:
        spec = check["collected"]
        end_checks.append(f"sorted(map(str, s['collected'].get({spec['key']!r}, []))) == {sorted(spec['equals'])!r}")
    if end_checks:
        out.append({"END": {"CHECK": end_checks}})
    return {"records": out}


def export_mlperf(ruleset: str, out_dir: Path) -> list[Path]:
    """Write every rule file of ``ruleset`` as an mlperf_logging config into ``out_dir``."""
    if load_rule_file(ruleset, ROOT_LEVEL) is None:
        raise HarnessError(f"no rule set named {ruleset!r}", ErrorCategory.NOT_FOUND)
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise HarnessError(f"{out_dir} exists and is not a directory")
    levels = sorted(p.name[: -len(".yaml")] for p in RULESETS.joinpath(ruleset).iterdir() if p.name.endswith(".yaml"))
    exported = {level: export_level(ruleset, level, out_dir) for level in levels}
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for level, doc in exported.items():
        assert doc is not None, level  # every level is a rule file of the folder just listed
        path = out_dir / f"{level}.yaml"
        header = (f"# mlperf_logging compliance config exported by `harness rules export-mlperf` from\n"
                  f"# compliance/rulesets/{ruleset}/{level}.yaml. Generated: edit the rule file, not this.\n")
        write_atomic(path, header + yaml.safe_dump(doc["records"], sort_keys=False, width=1000))
        written.append(path)
    return written
