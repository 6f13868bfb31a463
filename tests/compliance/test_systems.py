"""compliance.systems: the 8 real system descriptions pass their round; each mutation gives its rule."""

from __future__ import annotations

import copy
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlperf_logging.system_desc_checker import system_desc_checker as official

from compliance.findings import Severity
from compliance.systems import (
    REQUIRED_FIELDS,
    STATUS_VALUES,
    _fields_data,
    check_system_desc,
    known_rounds,
    parse_ruleset,
    round_fields,
    validate_fields,
)
from harness.errors import HarnessError

ROUNDS = {
    "v0.7": "0.7.0",
    "v1.0": "1.0.0",
    "v2.1": "2.1.0",
    "v3.0": "3.0.0",
    "v3.1": "3.1.0",
    "v4.0": "4.0.0",
    "v4.1": "4.1.0",
    "v5.0": "5.0.0",
}


def real_system(shared_logs: Path, rnd: str) -> Path:
    found = sorted((shared_logs / rnd).glob("*/systems/*.json"))
    assert len(found) == 1, found
    return found[0]


def rules(findings, severity=None) -> list[str]:
    return [f.rule for f in findings if severity is None or f.severity is severity]


def official_valid(path: Path, ruleset: str) -> bool:
    logging.disable(logging.CRITICAL)
    try:
        return official.check_system_desc(str(path), "training", ruleset)[0]
    finally:
        logging.disable(logging.NOTSET)


@pytest.fixture
def dell(shared_logs: Path) -> dict:
    """The v4.1 Dell description (new status vocabulary, other_software_stack as a list)."""
    return json.loads(real_system(shared_logs, "v4.1").read_text())


def write(tmp_path: Path, contents, name: str = "XE9680x8H200-SXM-141GB") -> Path:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(contents, indent=2))
    return path


# -- the real submissions ----------------------------------------------------------------------


@pytest.mark.parametrize("rnd", sorted(ROUNDS))
def test_real_system_descs_pass_their_round(shared_logs, rnd):
    path = real_system(shared_logs, rnd)
    findings = check_system_desc(path, ROUNDS[rnd])
    assert rules(findings, Severity.ERROR) == []
    assert set(rules(findings)) <= {"system_desc.name_mismatch", "system_desc.status"}
    # every real file agrees with the official checker, except the documented v4.0 divergence
    if rnd != "v4.0":
        assert official_valid(path, ROUNDS[rnd])


def test_real_name_mismatches_are_warnings(shared_logs):
    path = real_system(shared_logs, "v3.0")  # system_name "G593-SD0" in G593-SD0_hugectr.json
    findings = check_system_desc(path, "3.0.0")
    assert [(f.rule, f.severity) for f in findings] == [("system_desc.name_mismatch", Severity.WARNING)]
    assert findings[0].line == 5


def test_v40_smc_status_cloud_is_a_warning_in_40_and_an_error_from_41(shared_logs):
    path = real_system(shared_logs, "v4.0")
    assert json.loads(path.read_text())["status"] == "cloud"
    in_40 = [f for f in check_system_desc(path, "4.0.0") if f.rule == "system_desc.status"]
    assert [f.severity for f in in_40] == [Severity.WARNING]
    assert in_40[0].line == 4
    assert not official_valid(path, "4.0.0")  # what the official code does (major >= 4)...
    for ruleset in ("4.1.0", "5.0.0", None):  # ...which we apply from 4.1.0 on
        assert rules(check_system_desc(path, ruleset), Severity.ERROR) == ["system_desc.status"]


@pytest.mark.parametrize("rnd", ["v0.7", "v1.0", "v2.1", "v3.0", "v3.1"])
def test_older_vocabulary_is_an_error_for_the_current_round(shared_logs, rnd):
    findings = check_system_desc(real_system(shared_logs, rnd), None)
    assert rules(findings, Severity.ERROR) == ["system_desc.status"]


# -- mutations ---------------------------------------------------------------------------------


@pytest.mark.parametrize("field", REQUIRED_FIELDS)
def test_each_missing_field_is_one_error(tmp_path, dell, field):
    del dell[field]
    path = write(tmp_path, dell)
    findings = check_system_desc(path, "4.1.0")
    assert [(f.rule, f.severity) for f in findings] == [("system_desc.missing_field", Severity.ERROR)]
    assert repr(field) in findings[0].message
    assert not official_valid(path, "4.1.0")


@pytest.mark.parametrize(
    ("status", "ruleset", "expected"),
    [
        ("cloud", "4.1.0", Severity.ERROR),
        ("available on-premise", "4.1.0", Severity.ERROR),  # case matters, as in the official checker
        ("Available on premise", "5.0.0", Severity.ERROR),
        ("bogus", None, Severity.ERROR),
        ("bogus", "3.1.0", Severity.WARNING),
        ("bogus", "4.0.0", Severity.WARNING),
        ("onprem", "4.0.0", Severity.WARNING),
        ("onprem", "0.7.0", None),
        ("Available on premise", "3.1.0", None),
        ("research", "2.1.0", None),
        ("Preview", "1.0.0", None),
        ("Available cloud", "4.1.0", None),
    ],
)
def test_status_vocabulary_by_round(tmp_path, dell, status, ruleset, expected):
    dell["status"] = status
    path = write(tmp_path, dell)
    findings = check_system_desc(path, ruleset)
    assert [f.severity for f in findings if f.rule == "system_desc.status"] == ([expected] if expected else [])
    assert len(findings) == (1 if expected else 0)
    if ruleset in ("4.1.0", "5.0.0"):
        assert official_valid(path, ruleset) == (expected is None)


def test_every_new_status_value_passes_41(tmp_path, dell):
    for status in STATUS_VALUES:
        dell["status"] = status
        assert check_system_desc(write(tmp_path, dell), "4.1.0") == []


@pytest.mark.parametrize("division", ["semi", "Closed", "", "open "])
def test_division_must_be_closed_or_open(tmp_path, dell, division):
    dell["division"] = division
    findings = check_system_desc(write(tmp_path, dell), "4.1.0")
    assert [(f.rule, f.severity) for f in findings] == [("system_desc.division", Severity.ERROR)]
    assert findings[0].line == 3


def test_open_division_passes(tmp_path, dell):
    dell["division"] = "open"
    assert check_system_desc(write(tmp_path, dell), "4.1.0") == []


@pytest.mark.parametrize("field", ["hw_notes", "number_of_nodes", "framework", "division", "status"])
@pytest.mark.parametrize("value", [["a"], {"a": "b"}])
def test_list_or_object_where_a_string_is_expected_is_an_error(tmp_path, dell, field, value):
    dell[field] = value
    findings = check_system_desc(write(tmp_path, dell), "4.1.0")
    assert [(f.rule, f.severity) for f in findings] == [("system_desc.type", Severity.ERROR)]
    assert repr(field) in findings[0].message


@pytest.mark.parametrize("value", ["cuda 12.0", "", {"cuda_version": "12.6"}, [{"cuda_version": "12.6"}]])
def test_other_software_stack_may_be_a_string_an_object_or_a_list(tmp_path, dell, value):
    dell["other_software_stack"] = value
    assert check_system_desc(write(tmp_path, dell), "4.1.0") == []


def test_other_software_stack_as_a_number_is_an_error(tmp_path, dell):
    dell["other_software_stack"] = 12
    assert rules(check_system_desc(write(tmp_path, dell), "4.1.0"), Severity.ERROR) == ["system_desc.type"]


def test_numbers_as_strings_or_json_numbers_are_fine_outside_the_summary_fields(tmp_path, dell):
    dell["number_of_nodes"] = 1
    dell["host_processors_per_node"] = 2.0
    dell["host_processor_vcpu_count"] = "112"
    path = write(tmp_path, dell)
    assert check_system_desc(path, "4.1.0") == []
    assert official_valid(path, "4.1.0")


def test_json_number_in_a_summary_field_is_an_error_because_the_official_checker_crashes(tmp_path, dell):
    dell["accelerators_per_node"] = 8
    path = write(tmp_path, dell)
    findings = check_system_desc(path, "4.1.0")
    assert [(f.rule, f.severity) for f in findings] == [("system_desc.type", Severity.ERROR)]
    with pytest.raises(TypeError):
        official_valid(path, "4.1.0")


def test_null_is_a_warning_except_in_summary_fields(tmp_path, dell):
    dell["hw_notes"] = None
    dell["cooling"] = True
    assert [(f.rule, f.severity) for f in check_system_desc(write(tmp_path, dell), "4.1.0")] == [
        ("system_desc.type", Severity.WARNING)
    ] * 2
    dell["submitter"] = None
    assert rules(check_system_desc(write(tmp_path, dell), "4.1.0"), Severity.ERROR) == ["system_desc.type"]


def test_name_mismatch_is_a_warning(tmp_path, dell):
    findings = check_system_desc(write(tmp_path, dell, name="another-name"), "4.1.0")
    assert [(f.rule, f.severity) for f in findings] == [("system_desc.name_mismatch", Severity.WARNING)]


def test_duplicate_key_is_a_warning_with_its_line(tmp_path, dell):
    path = write(tmp_path, dell)
    lines = path.read_text().splitlines()
    lines.insert(1, '  "cooling": "water",')
    path.write_text("\n".join(lines))
    findings = check_system_desc(path, "4.1.0")
    assert [(f.rule, f.severity, f.line) for f in findings] == [("system_desc.duplicate_key", Severity.WARNING, 2)]


def test_utf8_bom_and_extra_fields_are_accepted(tmp_path, dell):
    dell["framework_name"] = "hugectr"
    path = tmp_path / "XE9680x8H200-SXM-141GB.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(dell).encode())
    assert check_system_desc(path, "4.1.0") == []


# -- files that are not a JSON object: one error, never an exception -----------------------------


def _binary(p: Path) -> Path:
    p.write_bytes(bytes(range(256)) * 64)
    return p


def _directory(p: Path) -> Path:
    p.mkdir()
    return p


def _loop(p: Path) -> Path:
    other = p.with_name("other.json")
    p.symlink_to(other.name)
    other.symlink_to(p.name)
    return p


def _dangling(p: Path) -> Path:
    p.symlink_to("nowhere.json")
    return p


def _huge(p: Path) -> Path:
    with open(p, "wb") as f:  # sparse: instant to make
        f.truncate(11 * 1024 * 1024)
    return p


def _fifo(p: Path) -> Path:
    os.mkfifo(p)
    return p


def _text(content: str | bytes):
    def make(p: Path) -> Path:
        p.write_bytes(content if isinstance(content, bytes) else content.encode())
        return p

    return make


@pytest.mark.parametrize(
    ("make", "rule"),
    [
        (_binary, "system_desc.unreadable"),
        (_directory, "system_desc.unreadable"),
        (_loop, "system_desc.unreadable"),
        (_dangling, "system_desc.unreadable"),
        (_huge, "system_desc.unreadable"),
        (_fifo, "system_desc.unreadable"),
        (_text(""), "system_desc.unreadable"),
        (_text('{"submitter": '), "system_desc.unreadable"),
        (_text("[" * 100_000), "system_desc.unreadable"),
        (_text("1" * 10_000), "system_desc.unreadable"),
        (_text(b'{"submitter": "caf\xe9"}'), "system_desc.unreadable"),  # Latin-1, not UTF-8
        (_text("[]"), "system_desc.not_object"),
        (_text('"a string"'), "system_desc.not_object"),
        (_text("null"), "system_desc.not_object"),
    ],
    ids=lambda v: getattr(v, "__name__", None) if callable(v) else None,
)
def test_unusable_files_give_one_error(tmp_path, make, rule):
    path = make(tmp_path / "sys.json")
    findings = check_system_desc(path, "4.1.0")
    assert [(f.rule, f.severity) for f in findings] == [(rule, Severity.ERROR)]
    assert findings[0].path == path
    findings[0].human().encode("utf-8")


def test_missing_file(tmp_path):
    assert rules(check_system_desc(tmp_path / "absent.json", None)) == ["system_desc.unreadable"]


# -- rulesets ----------------------------------------------------------------------------------


def test_parse_ruleset():
    assert parse_ruleset(None) == (6, 0, 0)
    assert parse_ruleset("4.1.0") == parse_ruleset("4.1") == parse_ruleset("v4.1") == (4, 1, 0)
    assert parse_ruleset("training_0.7.0") == (0, 7, 0)
    with pytest.raises(ValueError):
        parse_ruleset("latest")


# -- the fields per round, against the official checker run in a subprocess --------------------

_OFFICIAL_DRIVER = r"""
import json, logging, sys
from mlperf_logging.system_desc_checker.system_desc_checker import check_system_desc
logging.disable(logging.CRITICAL)
for line in sys.stdin:
    job = json.loads(line)
    try:
        out = "pass" if check_system_desc(job["file"], "training", job["ruleset"])[0] else "fail"
    except Exception as err:  # the official checker crashing is a verdict (the file cannot be used)
        out = "crash:" + type(err).__name__
    print(json.dumps(out), flush=True)
"""


def official_verdicts(jobs: list[tuple[Path, str]]) -> list[str]:
    """The official system_desc_checker's verdict on each (file, ruleset), in one subprocess."""
    stdin = "".join(json.dumps({"file": str(f), "ruleset": r}) + "\n" for f, r in jobs)
    proc = subprocess.run([sys.executable, "-c", _OFFICIAL_DRIVER], input=stdin, capture_output=True, text=True,
                          timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(out) == len(jobs)
    return out


def ours_fails(path: Path, ruleset: str) -> bool:
    return any(f.is_error for f in check_system_desc(path, ruleset))


def data_rounds() -> list[str]:
    return [".".join(map(str, r)) for r in known_rounds()]


def test_the_fields_file_covers_every_official_training_round():
    from mlperf_logging.compliance_checker.mlp_compliance import rule_choices

    assert set(data_rounds()) == set(rule_choices())


def test_every_real_description_gets_the_official_verdict_in_every_round(shared_logs):
    files = [real_system(shared_logs, rnd) for rnd in sorted(ROUNDS)]
    jobs = [(f, r) for f in files for r in data_rounds()]
    official_says = official_verdicts(jobs)
    agreed = diverged = 0
    for (path, ruleset), verdict in zip(jobs, official_says):
        assert not verdict.startswith("crash"), (path, ruleset, verdict)
        ours = ours_fails(path, ruleset)
        status = json.loads(path.read_text())["status"]
        if ours == (verdict == "fail"):
            agreed += 1
        else:
            # the one documented divergence: the older status vocabulary under 4.0.0 (a warning here)
            assert ruleset == "4.0.0" and status not in STATUS_VALUES and not ours, (path, ruleset, verdict)
            diverged += 1
    assert agreed + diverged == len(jobs) and diverged == sum(
        json.loads(f.read_text())["status"] not in STATUS_VALUES for f in files)


def test_the_required_fields_of_every_round_are_the_official_ones(shared_logs, tmp_path, dell):
    """Removing any field we require fails the official checker too; a file with only those passes it."""
    jobs, ours = [], []
    for ruleset in data_rounds():
        fields = round_fields(ruleset).required_fields
        only = {k: dell[k] for k in fields}
        only_path = tmp_path / ruleset / "only.json"
        only_path.parent.mkdir()
        only_path.write_text(json.dumps(only))
        jobs.append((only_path, ruleset))
        ours.append(ours_fails(only_path, ruleset))
        for field in fields:
            path = tmp_path / ruleset / f"without-{field}.json"
            path.write_text(json.dumps({k: v for k, v in dell.items() if k != field}))
            jobs.append((path, ruleset))
            ours.append(ours_fails(path, ruleset))
    official_says = official_verdicts(jobs)
    assert [v == "fail" for v in official_says] == ours
    assert sum(ours) == len(jobs) - len(data_rounds())  # each removal fails, each "only" file passes


# (field, value, how ours relates to the official verdict)
TYPE_MUTATIONS = [
    ("accelerators_per_node", 8, "same"),  # the official checker crashes: an error here
    ("host_processor_core_count", 56, "same"),
    ("framework", None, "same"),
    ("submitter", True, "same"),
    ("number_of_nodes", 2, "same"),  # a number outside the summary fields is fine in both
    ("cooling", None, "same"),  # null outside them: a warning here, a pass there
    ("status", 4, "same"),
    ("other_software_stack", {"cuda": "12.6"}, "same"),
    ("hw_notes", ["a"], "stricter"),  # a list where a string is expected: the summarizer's join fails on it
    ("host_networking", {"a": "b"}, "stricter"),
    ("other_software_stack", 12, "stricter"),
]


def test_wrong_types_against_the_official_checker(tmp_path, dell):
    jobs = []
    for i, (field, value, _) in enumerate(TYPE_MUTATIONS):
        contents = dict(dell)
        contents[field] = value
        for ruleset in ("3.1.0", "4.1.0", "6.0.0"):
            path = tmp_path / f"{i}-{ruleset}" / "XE9680x8H200-SXM-141GB.json"
            path.parent.mkdir()
            path.write_text(json.dumps(contents))
            jobs.append((path, ruleset, field, value))
    official_says = official_verdicts([(p, r) for p, r, _, _ in jobs])
    relation = {(f, json.dumps(v)): rel for f, v, rel in TYPE_MUTATIONS}
    for (path, ruleset, field, value), verdict in zip(jobs, official_says):
        official_fails = verdict != "pass"  # a crash means the file cannot be used
        ours = ours_fails(path, ruleset)
        if relation[(field, json.dumps(value))] == "same":
            assert ours == official_fails, (field, value, ruleset, verdict)
        else:  # documented: ours rejects a value type no official tool can use; the checker itself lets it by
            assert ours and verdict == "pass", (field, value, ruleset, verdict)


@pytest.mark.parametrize("break_it", [
    lambda d: d["rounds"]["4.1.0"].pop("status"),
    lambda d: d["rounds"]["4.1.0"].update(status="lenient"),
    lambda d: d["rounds"].update({"4.2": d["rounds"]["4.1.0"]}),
    lambda d: d["rounds"]["5.0.0"].update(required_fields=["submitter", "submitter"]),
    lambda d: d["rounds"]["5.0.0"].update(summary_fields=["framework", "gpu_count"]),
    lambda d: d.update(status_values=[]),
])
def test_a_broken_fields_file_is_rejected(break_it):
    data = copy.deepcopy(_fields_data())
    validate_fields(data)  # the shipped file is valid
    break_it(data)
    with pytest.raises(HarnessError):
        validate_fields(data)
