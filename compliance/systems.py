"""The system description file ``systems/<system>.json`` of an MLPerf Training submission.

:func:`check_system_desc` restates ``mlperf_logging.system_desc_checker`` (4.1.68) as findings,
never raising on a bad file, and adds the checks the official tools make implicitly (by
crashing) or that the rest of the pipeline relies on:

- the file must be a readable regular file of at most :data:`MAX_BYTES`, holding one JSON
  object (``system_desc.unreadable``, ``system_desc.not_object``);
- each of the 33 fields the official checker requires must be present
  (``system_desc.missing_field``); extra fields are allowed, as there (real files carry
  ``hardware`` or ``framework_name``);
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

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

from compliance.findings import Finding, Severity

MAX_BYTES = 10 * 1024 * 1024  # a system description is a few KiB; read no more than this

CURRENT_RULESET = "6.0.0"

# The 33 fields mlperf_logging's system_desc_checker requires, in its order.
REQUIRED_FIELDS: tuple[str, ...] = (
    "submitter",
    "division",
    "status",
    "system_name",
    "number_of_nodes",
    "host_processors_per_node",
    "host_processor_model_name",
    "host_processor_core_count",
    "host_processor_vcpu_count",
    "host_processor_frequency",
    "host_processor_caches",
    "host_processor_interconnect",
    "host_memory_capacity",
    "host_storage_type",
    "host_storage_capacity",
    "host_networking",
    "host_networking_topology",
    "host_memory_configuration",
    "accelerators_per_node",
    "accelerator_model_name",
    "accelerator_host_interconnect",
    "accelerator_frequency",
    "accelerator_on-chip_memories",
    "accelerator_memory_configuration",
    "accelerator_memory_capacity",
    "accelerator_interconnect",
    "accelerator_interconnect_topology",
    "cooling",
    "hw_notes",
    "framework",
    "other_software_stack",
    "operating_system",
    "sw_notes",
)

# The fields the official checker joins with ``",".join(...)`` into its summary row: anything
# but a string there (a JSON number included) makes it raise TypeError.
SUMMARY_FIELDS: frozenset[str] = frozenset(
    {
        "submitter",
        "system_name",
        "host_processor_model_name",
        "host_processor_core_count",
        "accelerator_model_name",
        "accelerators_per_node",
        "framework",
    }
)

DIVISIONS = ("closed", "open")

# The values mlperf_logging's system_desc_checker accepts for training, exactly (case and all).
STATUS_VALUES: tuple[str, ...] = (
    "Available on-premise",
    "Available cloud",
    "Research, Development, or Internal (RDI)",
    "Preview",
)

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

# The first round whose status vocabulary is enforced; see _status_findings.
STRICT_STATUS_FROM = (4, 1, 0)

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


def check_system_desc(path: Path, ruleset: str | None) -> list[Finding]:
    """Every finding about the system description ``path`` under training ruleset ``ruleset``.

    ``ruleset`` is a round's version (``"4.1.0"``), or None for the current round (6.0.0).
    Never raises on the file's account: a file that cannot be read as one JSON object gives a
    single ERROR finding.
    """
    version = parse_ruleset(ruleset)
    path = Path(path)
    text, problem = _read_text(path)
    if problem is not None:
        return [Finding("system_desc.unreadable", Severity.ERROR, problem, path)]
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

    for field in REQUIRED_FIELDS:
        if field not in contents:
            add("system_desc.missing_field", Severity.ERROR, f"missing required field {field!r}")

    for field in REQUIRED_FIELDS:
        if field in contents:
            problem_severity = _type_problem(field, contents[field])
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
    if isinstance(status, str):
        for severity, message in _status_findings(status, version):
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


def _status_findings(status: str, version: tuple[int, int, int]) -> list[tuple[Severity, str]]:
    """The status vocabulary, by round.

    mlperf_logging 4.1.68 tests ``major >= 4 or (major == 4 and minor >= 1)``: the second clause
    is subsumed by the first, so it enforces the four values from 4.0.0 on, and it fails the
    shared v4.0 smc submission (status ``"cloud"``), which the v4.0 round published after
    review: the check arrived after that round, and its second clause says 4.1 was meant. So:

    - ruleset >= 4.1.0: exactly one of :data:`STATUS_VALUES` (case-sensitive, as the official
      checker), else ERROR;
    - 4.0.0: the older vocabulary is accepted (no error), with a WARNING that today's official
      checker would reject it under 4.0.0;
    - before 4.0.0: the older vocabulary (:data:`LEGACY_STATUS_VALUES`, compared ignoring case,
      hyphens, underscores and spacing) or the new values; anything else is a WARNING, not an
      error, since no checker of those rounds constrained the field.
    """
    if version >= STRICT_STATUS_FROM:
        if status in STATUS_VALUES:
            return []
        return [(Severity.ERROR, f"status {status!r} is not one of {list(STATUS_VALUES)}")]
    if status in STATUS_VALUES:
        return []
    if _normalise_status(status) not in LEGACY_STATUS_VALUES:
        return [(Severity.WARNING, f"status {status!r} is not a known availability (e.g. {list(STATUS_VALUES)})")]
    if version[0] >= 4:
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


def _type_problem(field: str, value: Any) -> tuple[Severity, str] | None:
    """What is wrong with the type of ``value`` in ``field``, if anything."""
    kind = _json_type(value)
    if field == "other_software_stack":
        if isinstance(value, (str, dict, list)):
            return None
        return Severity.ERROR, f"field {field!r} must be a string, an object or a list, found {kind}"
    if isinstance(value, str):
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if field in SUMMARY_FIELDS:
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
    severity = Severity.ERROR if field in SUMMARY_FIELDS else Severity.WARNING
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


def _pairs_hook(duplicates: list[str]):
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
