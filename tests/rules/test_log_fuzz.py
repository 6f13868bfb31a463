"""Property-based: no input, however broken, makes the log readers raise anything but HarnessError."""

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.errors import HarnessError
from harness.reference.engine.mlperf_log import parse_records
from harness.rules.results import read_run_log, score_run_set
from tests.support.strategies import json_values

VALID = [
    {"namespace": "", "time_ms": 1000, "event_type": "INTERVAL_START", "key": "run_start", "value": None, "metadata": {}},
    {"namespace": "", "time_ms": 2000, "event_type": "POINT_IN_TIME", "key": "eval_accuracy", "value": 0.81,
     "metadata": {"epoch_num": 0.5}},
    {"namespace": "", "time_ms": 3000, "event_type": "INTERVAL_END", "key": "run_stop", "value": None,
     "metadata": {"status": "success"}},
]
BASE = "".join(f":::MLLOG {json.dumps(r)}\n" for r in VALID).encode()

@st.composite
def mutated_logs(draw) -> bytes:
    kind = draw(st.sampled_from(["bytes", "truncate", "splice", "record"]))
    if kind == "bytes":
        return draw(st.binary(max_size=400))
    if kind == "truncate":
        return BASE[: draw(st.integers(0, len(BASE)))]
    if kind == "splice":
        at = draw(st.integers(0, len(BASE)))
        return BASE[:at] + draw(st.binary(max_size=40)) + BASE[at:]
    record = dict(draw(st.sampled_from(VALID)))
    record[draw(st.sampled_from(["key", "value", "metadata", "time_ms", "event_type"]))] = draw(json_values)
    prefix = draw(st.sampled_from(["", "0: ", "[1,0]<stdout>: "]))
    return BASE + f"{prefix}:::MLLOG {json.dumps(record)}\n".encode()


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutated_logs())
def test_readers_raise_only_harness_errors(tmp_path, data):
    path = tmp_path / "result_0.txt"
    path.write_bytes(data)
    for read in (read_run_log, parse_records):
        try:
            read(path)
        except HarnessError as err:
            assert str(err).startswith(str(path)) and "\n" not in str(err)
    try:
        score_run_set(tmp_path)
    except HarnessError:
        pass
