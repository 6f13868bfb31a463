"""The system description file ``systems/<system>.json`` of an MLPerf Training submission.

:func:`check_system_desc` restates ``mlperf_logging.system_desc_checker`` (4.1.68) as findings,
never raising on a bad file, and adds the checks the official tools make implicitly (by
crashing) or that the rest of the pipeline relies on:

- the file must be a readable regular file of at most :data:`MAX_BYTES`, holding one JSON
  object (``system_desc.unreadable``, ``system_desc.not_object``);
- each field the official checker requires of the round must be present
  (``system_desc.missing_field``); extra fields are allowed, as there (real files carry
  ``hardware`` or ``framework_name``). The fields per round are data,
  ``compliance/system_fields/training.yaml`` (validated against ``system_fields.schema.json``
  beside it): the same 33 in every round so far, as in every version of the official checker;
- ``division`` is ``closed`` or ``open`` (``system_desc.division``): the package checker compares
  it with ``== 'closed'`` to decide whether the seed and RCP checks run, so ``Closed`` or
  ``semi`` would silently skip them;
- ``status`` comes from the round's vocabulary (``system_desc.status``, see
  :func:`_status_findings` for which rounds get which);
- field types (``system_desc.type``): a number written as a string (``"8"``) is what real
  submissions do and is fine; a JSON number is fine too, except in the seven fields the
  official checker joins into its summary CSV row, where it raises ``TypeError``; a list or an
  object where a string is expected is an error, except ``other_software_stack``, which real
  submissions give as a string (v3.0), an object (v0.7, v2.1, v4.0) or a list of objects
  (v4.1 Dell);
- ``system_name`` should equal the file's stem (``system_desc.name_mismatch``, a warning: four
  of the eight shared real submissions differ, e.g. v3.0 GIGABYTE's ``G593-SD0`` in
  ``G593-SD0_hugectr.json``, and the official checker never compares them);
- a key given twice (``system_desc.duplicate_key``, a warning: JSON keeps the last one).
"""

from __future__ import annotations

import functools
import json
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from compliance.findings import Finding, Severity
from harness.errors import ErrorCategory, HarnessError

MAX_BYTES = 10 * 1024 * 1024  # a system description is a few KiB; read no more than this

CURRENT_RULESET = "6.0.0"

FIELDS_FILE = "training.yaml"
FIELDS_SCHEMA = "system_fields.schema.json"


@dataclass(frozen=True)
class RoundFields:
    """What the official checker asks of a system description in one round."""

    round: tuple[int, int, int]
    required_fields: tuple[str, ...]  # in the official checker's order
    summary_fields: frozenset[str]  # joined into its summary row: a string or it raises TypeError
    status: str  # "legacy", "transitional" or "strict" (see _status_findings)


@functools.cache
def _fields_data() -> dict[str, Any]:
    """``compliance/system_fields/training.yaml``, validated against its schema (a broken file is a packaging bug)."""
    folder = resources.files("compliance").joinpath("system_fields")
    try:
        data = yaml.safe_load(folder.joinpath(FIELDS_FILE).read_text(encoding="utf-8"))
        schema = json.loads(folder.joinpath(FIELDS_SCHEMA).read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError) as err:
        raise HarnessError(f"compliance/system_fields: cannot read the system description fields: {err}",
                           ErrorCategory.NOT_FOUND) from None
    validate_fields(data, schema)
    return data


def validate_fields(data: Any, schema: dict[str, Any] | None = None) -> None:
    """Raise HarnessError unless ``data`` is a valid fields file (its schema, and every summary field required)."""
    if schema is None:
        folder = resources.files("compliance").joinpath("system_fields")
        schema = json.loads(folder.joinpath(FIELDS_SCHEMA).read_text(encoding="utf-8"))
    problems = sorted(jsonschema.Draft202012Validator(schema).iter_errors(data), key=lambda e: list(e.path))
    if problems:
        where = "/".join(str(p) for p in problems[0].path)
        raise HarnessError(f"compliance/system_fields/{FIELDS_FILE}: {where}: {problems[0].message}",
                           ErrorCategory.BAD_INPUT)
    for name, entry in data["rounds"].items():
        extra = sorted(set(entry["summary_fields"]) - set(entry["required_fields"]))
        if extra:
            raise HarnessError(f"compliance/system_fields/{FIELDS_FILE}: rounds/{name}: summary fields "
                               f"{extra} are not required fields", ErrorCategory.BAD_INPUT)


@functools.cache
def known_rounds() -> tuple[tuple[int, int, int], ...]:
    """The rounds the fields file describes, in order."""
    return tuple(sorted(parse_ruleset(r) for r in _fields_data()["rounds"]))


@functools.cache
def round_fields(ruleset: str | None) -> RoundFields:
    """The fields of round ``ruleset`` (None: the current round); a round the file does not list
    takes the latest listed round before it (the earliest listed, if it is older than all)."""
    version = parse_ruleset(ruleset)
    rounds = known_rounds()
    earlier = [r for r in rounds if r <= version]
    chosen = earlier[-1] if earlier else rounds[0]
    entry = _fields_data()["rounds"][".".join(map(str, chosen))]
    return RoundFields(chosen, tuple(entry["required_fields"]), frozenset(entry["summary_fields"]), entry["status"])


def status_values() -> tuple[str, ...]:
    return tuple(_fields_data()["status_values"])


_RULESET_RE = re.compile(r"^(?:training_|v)?(\d+)\.(\d+)(?:\.(\d+))?$")


def parse_ruleset(ruleset: str | None) -> tuple[int, int, int]:
    """``"4.1.0"`` (also ``"4.1"``, ``"v4.1"``, ``"training_4.1.0"``) as ``(4, 1, 0)``; None is the current round.

    A malformed ruleset is the caller's mistake, not the file's: it raises ValueError.
    """
    text = CURRENT_RULESET if ruleset is None else str(ruleset).strip()
    m = _RULESET_RE.match(text)
    if not m:
        raise ValueError(f"not a ruleset version: {ruleset!r} (expected e.g. '4.1.0')")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


# The current round's fields (the same 33 in every round so far), for callers that want a list.
REQUIRED_FIELDS: tuple[str, ...] = round_fields(None).required_fields
SUMMARY_FIELDS: frozenset[str] = round_fields(None).summary_fields

DIVISIONS = ("closed", "open")

# The values mlperf_logging's system_desc_checker accepts for training, exactly (case and all).
STATUS_VALUES: tuple[str, ...] = status_values()

# What rounds before 4.1 wrote, normalised by _normalise_status: the mllog constants
# (onprem, cloud, research), the keys of the result summarizer's availability map
# (mlcommons/logging result_summarizer/config.yaml), and the spellings of the shared real
# files (v1.0 "available", v3.1 "Available on premise").
LEGACY_STATUS_VALUES: frozenset[str] = frozenset(
    {
        "available on premise",
        "available onprem",
        "available",
        "onprem",
        "on premise",
        "available cloud",
        "cloud",
        "research, development, or internal (rdi)",
        "rdi",
        "research",
        "development",
        "internal",
        "preview",
    }
)

# The first round whose status vocabulary is enforced (the first "strict" round of the fields file).
STRICT_STATUS_FROM = min(r for r in known_rounds() if round_fields(".".join(map(str, r))).status == "strict")


def check_system_desc(path: Path, ruleset: str | None) -> list[Finding]:
    """Every finding about the system description ``path`` under training ruleset ``ruleset``.

    ``ruleset`` is a round's version (``"4.1.0"``), or None for the current round (6.0.0).
    Never raises on the file's account: a file that cannot be read as one JSON object gives a
    single ERROR finding.
    """
    fields = round_fields(ruleset)
    path = Path(path)
    text, problem = _read_text(path)
    if problem is not None:
        return [Finding("system_desc.unreadable", Severity.ERROR, problem, path)]
    assert text is not None  # _read_text gives the text or the problem
    duplicates: list[str] = []
    try:
        contents = json.loads(text, object_pairs_hook=_pairs_hook(duplicates))
    except RecursionError:
        return [Finding("system_desc.unreadable", Severity.ERROR, "not JSON: nested too deeply", path)]
    except ValueError as e:  # JSONDecodeError, and an integer too long to convert
        return [Finding("system_desc.unreadable", Severity.ERROR, f"not JSON: {_short(str(e))}", path)]
    if not isinstance(contents, dict):
        return [
            Finding(
                "system_desc.not_object",
                Severity.ERROR,
                f"a system description must be a JSON object, found {_json_type(contents)}",
                path,
            )
        ]

    findings: list[Finding] = []

    def add(rule: str, severity: Severity, message: str, key: str | None = None) -> None:
        line = _line_of(text, key) if key is not None else None
        findings.append(Finding(rule, severity, message, path, line))

    for key in sorted(set(duplicates)):
        add(
            "system_desc.duplicate_key",
            Severity.WARNING,
            f"key {key!r} appears twice in one object; the last wins",
            key,
        )

    for field in fields.required_fields:
        if field not in contents:
            add("system_desc.missing_field", Severity.ERROR, f"missing required field {field!r}")

    for field in fields.required_fields:
        if field in contents:
            problem_severity = _type_problem(field, contents[field], fields.summary_fields)
            if problem_severity is not None:
                severity, message = problem_severity
                add("system_desc.type", severity, message, field)

    division = contents.get("division")
    if isinstance(division, str) and division not in DIVISIONS:
        add(
            "system_desc.division",
            Severity.ERROR,
            f"division is {division!r}; it must be one of {list(DIVISIONS)} (exactly, in lower case)",
            "division",
        )

    status = contents.get("status")
    if "status" in contents and not isinstance(status, (list, dict)):  # (those are a type error already)
        # a number, a boolean or null is no status either: the official checker compares it as is
        shown = status if isinstance(status, str) else json.dumps(status)
        for severity, message in _status_findings(shown, fields.status):
            add("system_desc.status", severity, message, "status")

    name = contents.get("system_name")
    if isinstance(name, str) and name != path.stem:
        add(
            "system_desc.name_mismatch",
            Severity.WARNING,
            f"system_name {name!r} differs from the file name {path.name!r} (expected {path.stem!r})",
            "system_name",
        )
    return findings


def _status_findings(status: str, mode: str) -> list[tuple[Severity, str]]:
    """The status vocabulary, by round.

    mlperf_logging 4.1.68 tests ``major >= 4 or (major == 4 and minor >= 1)``: the second clause
    is subsumed by the first, so it enforces the four values from 4.0.0 on, and it fails the
    shared v4.0 smc submission (status ``"cloud"``), which the v4.0 round published after
    review: the check arrived after that round, and its second clause says 4.1 was meant. So:

    The fields file says which rounds get which (``status: strict | transitional | legacy``):

    - strict (>= 4.1.0): exactly one of :data:`STATUS_VALUES` (case-sensitive, as the official
      checker), else ERROR;
    - transitional (4.0.0): the older vocabulary is accepted (no error), with a WARNING that
      today's official checker would reject it under 4.0.0;
    - legacy (before 4.0.0): the older vocabulary (:data:`LEGACY_STATUS_VALUES`, compared ignoring
      case, hyphens, underscores and spacing) or the new values; anything else is a WARNING, not
      an error, since no checker of those rounds constrained the field.
    """
    if mode == "strict":
        if status in STATUS_VALUES:
            return []
        return [(Severity.ERROR, f"status {status!r} is not one of {list(STATUS_VALUES)}")]
    if status in STATUS_VALUES:
        return []
    if _normalise_status(status) not in LEGACY_STATUS_VALUES:
        return [(Severity.WARNING, f"status {status!r} is not a known availability (e.g. {list(STATUS_VALUES)})")]
    if mode == "transitional":
        return [
            (
                Severity.WARNING,
                (
                    f"status {status!r} is from the older vocabulary; mlperf_logging's checker rejects it "
                    f"for any ruleset >= 4.0.0 (the v4.0 round accepted it); use one of {list(STATUS_VALUES)}"
                ),
            )
        ]
    return []


def _normalise_status(status: str) -> str:
    return " ".join(re.sub(r"[-_]", " ", status).lower().split())


def _type_problem(field: str, value: Any, summary_fields: frozenset[str] = SUMMARY_FIELDS) -> tuple[Severity, str] | None:
    """What is wrong with the type of ``value`` in ``field``, if anything."""
    kind = _json_type(value)
    if field == "other_software_stack":
        if isinstance(value, (str, dict, list)):
            return None
        return Severity.ERROR, f"field {field!r} must be a string, an object or a list, found {kind}"
    if isinstance(value, str):
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if field in summary_fields:
            return (
                Severity.ERROR,
                (
                    f"field {field!r} is a JSON number; write it as a string ('{value}'): mlperf_logging's "
                    "system_desc_checker joins it into its summary row and raises TypeError on a number"
                ),
            )
        return None
    if isinstance(value, (list, dict)):
        return Severity.ERROR, f"field {field!r} must be a string (or a number), found {kind}"
    # null or a boolean: the official checker only crashes on them in the summary fields
    severity = Severity.ERROR if field in summary_fields else Severity.WARNING
    return severity, f"field {field!r} should be a string, found {kind}"


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _read_text(path: Path) -> tuple[str, None] | tuple[None, str]:
    """The file's text, or why it cannot be had; reads at most MAX_BYTES + 1 bytes, never blocks on a FIFO."""
    try:
        st = os.stat(path)  # follows symlinks; a loop raises ELOOP
    except OSError as e:
        return None, f"cannot read the file: {_os_reason(e)}"
    except ValueError as e:  # e.g. an embedded NUL in the path
        return None, f"cannot read the file: {e}"
    if stat.S_ISDIR(st.st_mode):
        return None, "is a directory, not a file"
    if not stat.S_ISREG(st.st_mode):
        return None, "is not a regular file"
    if st.st_size > MAX_BYTES:
        return None, f"is {st.st_size} bytes; a system description is at most {MAX_BYTES} bytes"
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as e:
        return None, f"cannot read the file: {_os_reason(e)}"
    if len(data) > MAX_BYTES:
        return None, f"is larger than {MAX_BYTES} bytes; a system description is a few KiB"
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as e:
        return None, f"not JSON: not UTF-8 text (byte {e.start})"


def _os_reason(e: OSError) -> str:
    return e.strerror or type(e).__name__


def _short(message: str, limit: int = 200) -> str:
    return message if len(message) <= limit else message[: limit - 3] + "..."


def _pairs_hook(duplicates: list[str]) -> Callable[[list[tuple[str, Any]]], dict[str, Any]]:
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in pairs:
            if k in out:
                duplicates.append(k)
            out[k] = v
        return out

    return hook


def _line_of(text: str, key: str) -> int | None:
    """The 1-based line where ``"key":`` first appears in ``text``, if it does."""
    m = re.search(re.escape(json.dumps(key, ensure_ascii=False)) + r"\s*:", text)
    return text.count("\n", 0, m.start()) + 1 if m else None
