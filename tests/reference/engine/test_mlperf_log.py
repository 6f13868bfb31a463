"""The MLPerf log writer: mllog lines, schema-validated before writing, naming the caller."""

import json

import pytest

from harness.errors import HarnessError
from harness.reference.engine.mlperf_log import MLPerfLog, parse_records


def test_writes_mllog_lines_that_name_the_calling_line(tmp_path):
    log = MLPerfLog(tmp_path / "r.txt")
    log.event("submission_org", "acme"); line = __import__("inspect").currentframe().f_lineno  # noqa: E702
    log.close()
    text = (tmp_path / "r.txt").read_text()
    assert text.startswith(":::MLLOG {")
    rec = json.loads(text.split(":::MLLOG ", 1)[1])
    assert rec["key"] == "submission_org" and rec["value"] == "acme"
    assert rec["metadata"]["file"].endswith("test_mlperf_log.py") and rec["metadata"]["lineno"] == line


@pytest.mark.parametrize("key, value, metadata, message", [
    ("eval_accuracy", 0.8, None, "epoch_num"),
    ("eval_accuracy", 1.5, {"epoch_num": 0.1}, "maximum"),
    ("run_stop", None, None, "status"),
    ("submission_division", "closedish", None, "closed"),
    ("global_batch_size", 12.5, None, "integer"),
])
def test_an_invalid_record_is_refused_and_not_written(tmp_path, key, value, metadata, message):
    log = MLPerfLog(tmp_path / "r.txt")
    emit = log.end if key == "run_stop" else log.event
    with pytest.raises(HarnessError, match=message):
        emit(key, value, metadata)
    log.close()
    assert (tmp_path / "r.txt").read_text() == ""


def test_nan_is_refused(tmp_path):
    log = MLPerfLog(tmp_path / "r.txt")
    with pytest.raises(HarnessError, match="strict JSON|number"):
        log.event("tracked_stats", {"throughput": float("nan")})


def test_disabled_log_writes_nothing(tmp_path):
    log = MLPerfLog(tmp_path / "r.txt", enabled=False)
    log.event("submission_org", "acme")
    assert not (tmp_path / "r.txt").exists()


def test_parse_records_names_file_and_line_of_a_malformed_record(tmp_path):
    p = tmp_path / "r.txt"
    p.write_text('noise\n0: :::MLLOG {"key": "a", "value": 1}\n:::MLLOG {"key": \n')
    with pytest.raises(HarnessError, match=r"r.txt:3: malformed MLLOG line"):
        parse_records(p)
    p.write_text('noise\n0: :::MLLOG {"key": "a", "value": 1}\n')
    assert parse_records(p) == [{"key": "a", "value": 1}]
