"""Property-based: no input, however broken, makes the checker raise (beyond unusable-input errors)."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compliance.check import check_path
from compliance.engine import check_log
from harness.errors import HarnessError
from harness.mllog.reader import iter_lines
from tests.support.strategies import json_values

REFERENCE = Path(__file__).resolve().parents[2] / "harness" / "rules" / "reference_runs" / "dlrm_synthetic" / "result_0.txt"
LINES = REFERENCE.read_bytes().splitlines(keepends=True)


@st.composite
def broken_logs(draw) -> bytes:
    lines = list(LINES)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["bytes", "truncate", "splice", "field", "drop", "dup", "swap", "prefix"]))
        i = draw(st.integers(0, len(lines) - 1))
        if kind == "bytes":
            lines[i] = draw(st.binary(max_size=200))
        elif kind == "truncate":
            lines = lines[:i] + [lines[i][: draw(st.integers(0, len(lines[i])))]]
        elif kind == "splice":
            at = draw(st.integers(0, len(lines[i])))
            lines[i] = lines[i][:at] + draw(st.binary(max_size=30)) + lines[i][at:]
        elif kind == "field" and lines[i].startswith(b":::MLLOG {"):
            try:
                record = json.loads(lines[i].split(b":::MLLOG ", 1)[1])
            except ValueError:
                continue
            if not isinstance(record, dict):
                continue
            record[draw(st.sampled_from(["key", "value", "metadata", "time_ms", "event_type"]))] = draw(json_values)
            lines[i] = f":::MLLOG {json.dumps(record)}\n".encode()
        elif kind == "drop":
            del lines[i]
        elif kind == "dup":
            lines.insert(i, lines[i])
        elif kind == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif kind == "prefix":
            lines[i] = draw(st.sampled_from([b"0: ", b"[1,0]<stdout>: ", b"\r", b":::MLLOG "])) + lines[i]
        if not lines:
            lines = [b""]
    return b"".join(lines)


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=broken_logs())
def test_checker_never_raises_on_broken_logs(tmp_path, data):
    run_set = tmp_path / "results" / "sys" / "dlrm_synthetic"
    run_set.mkdir(parents=True, exist_ok=True)
    path = run_set / "result_0.txt"
    path.write_bytes(data)
    n_lines = len(data.splitlines()) + 1
    result = check_log(path, "harness_1.0.0")
    for f in result.findings:
        assert f.rule and f.message and "\n" not in f.message
        assert f.line is None or 1 <= f.line <= n_lines
    if data == REFERENCE.read_bytes():
        assert result.passed
    try:
        report = check_path(run_set)
    except HarnessError as err:  # "cannot tell which rule set" or "not an MLPerf log" may remain, as one line
        assert ("give --ruleset" in str(err) or "no MLLOG lines" in str(err)) and "\n" not in str(err)
    else:
        assert not report.passed  # one run of a five-run closed set never passes
        report.as_json()


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=80).map(lambda b: b.replace(b"x", b"\r").replace(b"y", b"\n")),
       chunk=st.sampled_from([1, 2, 3, 5, 1 << 20]))
def test_line_splitter_matches_pythons_universal_newlines(tmp_path, monkeypatch, data, chunk):
    from harness.mllog import reader as logread

    monkeypatch.setattr(logread, "_CHUNK", chunk)
    path = tmp_path / "log"
    path.write_bytes(data)
    with open(path, encoding="latin-1") as f:
        want = [line.rstrip("\r\n").encode("latin-1") for line in f]
    assert [line.data for line in iter_lines(path)] == want
