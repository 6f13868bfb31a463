"""The LoadGen summary reader: its figures and its verdict."""

from __future__ import annotations

import pytest

from harness.errors import HarnessError
from harness.inference.config import Scenario
from harness.inference.results import parse_summary

SERVER_SUMMARY = """================================================
MLPerf Results Summary
================================================
SUT name : PyFastSUT
Scenario : Server
Mode     : PerformanceOnly
Completed samples per second    : 1972.69
Result is : INVALID
  Performance constraints satisfied : NO
  Min duration satisfied : Yes
  Min queries satisfied : Yes
  Early stopping satisfied: NO
Recommendations:
 * Reduce target QPS to improve latency.

================================================
Additional Stats
================================================
Scheduled samples per second : 1973.75
Min latency (ns)                : 599974
Max latency (ns)                : 34918631
Mean latency (ns)               : 3918631
50.00 percentile latency (ns)   : 1842684
90.00 percentile latency (ns)   : 9842684
99.00 percentile latency (ns)   : 21842684
99.90 percentile latency (ns)   : 34381775
"""


def test_the_summary_reader_takes_loadgens_figures_and_verdict(tmp_path):
    path = tmp_path / "mlperf_log_summary.txt"
    path.write_text(SERVER_SUMMARY)
    s = parse_summary(path, Scenario.SERVER)
    assert (s.samples_per_s, s.scheduled_per_s, s.valid) == (1972.69, 1973.75, False)
    assert (s.p50_latency_ms, s.p99_latency_ms, s.p999_latency_ms) == (1.842684, 21.842684, 34.381775)
    assert s.constraints["Early stopping satisfied"] == "NO" and s.constraints["Min duration satisfied"] == "Yes"
    path.write_text(SERVER_SUMMARY.replace("Result is : INVALID", "Result is : VALID"))
    assert parse_summary(path, Scenario.SERVER).valid
    with pytest.raises(HarnessError, match="not a LoadGen summary of a offline run"):
        parse_summary(path, Scenario.OFFLINE)
