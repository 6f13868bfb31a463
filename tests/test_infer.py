"""``harness infer``: the default benchmark's model served from memory and from the SSD tier
under MLPerf's LoadGen (Offline and Server), end to end; its one-line errors; the summary
reader; and a model that fails mid-run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness.cli import main
from harness.errors import ErrorCategory, HarnessError
from harness.infer import (
    BatchingSut,
    SampleLibrary,
    Scenario,
    loadgen,
    parse_summary,
    run_loadgen,
)
from harness.reference import synthetic

REPO = Path(__file__).resolve().parents[1]

SERVER_SUMMARY = """================================================
MLPerf Results Summary
================================================
SUT name : PySUT
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
99.00 percentile latency (ns)   : 21842684
99.90 percentile latency (ns)   : 34381775
"""


def harness(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """``harness ARGS`` in a fresh process, as a user runs it."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)


# -- end to end -------------------------------------------------------------------------------


@pytest.mark.slow
def test_offline_and_server_complete_for_both_variants_and_the_model_is_reused(tmp_path):
    model_dir = tmp_path / "model"
    first = harness("infer", "--train-steps", "20", "--duration", "2", "--model-dir", str(model_dir), "--json")
    assert first.returncode == 0, first.stderr
    report = json.loads(first.stdout)
    assert not report["model"]["reused"] and report["model"]["steps"] == 20
    assert 0.5 < report["model"]["auc"] < 1
    assert (model_dir / "model.pt").is_file() and (model_dir / "model.json").is_file()
    assert report["identical_predictions_samples"] > 0
    assert report["loadgen_version"].startswith("6.")

    rows = {(r["variant"], r["scenario"]): r for r in report["results"]}
    assert set(rows) == {(v, s) for v in ("memory", "ssd") for s in ("offline", "server")}
    for (variant, scenario), r in rows.items():
        assert r["samples_per_s"] > 0 and r["p99_latency_ms"] > 0 and r["target_qps"] > 0
        summary = Path(r["path"])
        assert summary.is_file() and summary.parent == model_dir / "loadgen" / f"{variant}-{scenario}"
        assert (r["cache"] is None) == (variant == "memory")
    assert rows["memory", "server"]["target_qps"] == rows["ssd", "server"]["target_qps"]  # the same load
    assert rows["ssd", "server"]["scheduled_per_s"] > 0
    # batches of 2048 look up more distinct rows than a 5% cache holds: they bypass it;
    # the server's small batches go through it
    offline_cache, server_cache = rows["ssd", "offline"]["cache"], rows["ssd", "server"]["cache"]
    assert offline_cache["batches_bypassing"] > 0 and offline_cache["ssd_bytes_read"] > 0
    assert server_cache["batches_through_cache"] > 0 and 0 < server_cache["hit_rate"] <= 1

    memory = report["table_memory"]
    assert memory["cache_rows"] == round(memory["rows"] * 0.05)
    assert memory["memory_bytes"] == memory["rows"] * 16 * 4 == memory["ssd_file_bytes"]
    assert memory["row_map_bytes"] == memory["rows"] * 4  # int32 per row
    assert memory["saved_bytes"] > 0 and 0.5 < memory["saved_fraction"] < 1
    assert not list(model_dir.glob("ssd-tier-*"))  # the tier's file was temporary

    again = harness("infer", "--train-steps", "20", "--duration", "1", "--scenario", "offline",
                    "--model-dir", str(model_dir))
    assert again.returncode == 0, again.stderr
    assert f"reusing the model in {model_dir}" in again.stderr and "training" not in again.stderr
    assert "; reused: " in again.stdout and f"AUC {report['model']['auc']:.5f}" in again.stdout
    table = again.stdout.splitlines()
    header = next(i for i, line in enumerate(table) if line.startswith("VARIANT"))
    assert [line.split()[:2] for line in table[header + 1 : header + 3]] == [["memory", "offline"], ["ssd", "offline"]]
    assert any(line.startswith("memory saved: ") for line in table)


# -- errors -----------------------------------------------------------------------------------


def test_an_unknown_benchmark_is_one_line_and_exit_2(capsys):
    assert main(["infer", "--benchmark", "no_such_benchmark"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("harness: error: ") and "no_such_benchmark" in err


def test_a_bad_cache_fraction_is_refused_before_any_work(capsys):
    assert main(["infer", "--cache-fraction", "0"]) == 2
    err = capsys.readouterr().err
    assert "Invalid value for '--cache-fraction'" in err and "Traceback" not in err


def test_a_model_dir_holding_another_model_is_one_line(tmp_path, capsys):
    (tmp_path / "model.json").write_text(json.dumps({
        "benchmark": "dlrm_synthetic", "seed": 7, "train_steps_requested": None, "steps": 300, "epochs": 0.6,
        "auc": 0.75, "target_auc": 0.747, "train_s": 30.0,
    }))
    assert main(["infer", "--seed", "0", "--model-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "holds a model of dlrm_synthetic seed 7" in err and "--model-dir" in err


def test_a_damaged_saved_model_is_one_line(tmp_path, capsys):
    (tmp_path / "model.json").write_text(json.dumps({
        "benchmark": "dlrm_synthetic", "seed": 0, "train_steps_requested": 5, "steps": 5, "epochs": 0.01,
        "auc": 0.6, "target_auc": 0.747, "train_s": 1.0,
    }))
    (tmp_path / "model.pt").write_bytes(b"not a model")
    assert main(["infer", "--train-steps", "5", "--model-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "model.pt: not a saved model" in err


# -- pieces -----------------------------------------------------------------------------------


def test_the_summary_reader_takes_loadgens_figures_and_verdict(tmp_path):
    path = tmp_path / "mlperf_log_summary.txt"
    path.write_text(SERVER_SUMMARY)
    s = parse_summary(path, Scenario.SERVER)
    assert (s.samples_per_s, s.scheduled_per_s, s.p99_latency_ms, s.valid) == (1972.69, 1973.75, 21.842684, False)
    path.write_text(SERVER_SUMMARY.replace("Result is : INVALID", "Result is : VALID"))
    assert parse_summary(path, Scenario.SERVER).valid
    with pytest.raises(HarnessError, match="not a LoadGen summary of a offline run"):
        parse_summary(path, Scenario.OFFLINE)


class _FailingModel:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls > 1:
            raise RuntimeError("out of rows")
        return torch.zeros(dense.shape[0])


def test_a_model_failing_mid_run_is_one_error_after_loadgen_finishes(tmp_path):
    data = synthetic.SyntheticCriteo(synthetic.SyntheticSpec(seed=1, train_samples=8, eval_samples=256,
                                                             table_rows=(10,) * 26))
    library = SampleLibrary(data)
    lg = loadgen()
    sut = BatchingSut(_FailingModel(), library, 16, complete=lg.QuerySamplesComplete,  # type: ignore[arg-type]
                      response=lg.QuerySampleResponse)
    with pytest.raises(HarnessError, match="failed during the LoadGen offline run: RuntimeError: out of rows") as err:
        run_loadgen(sut, library, Scenario.OFFLINE, out_dir=tmp_path, duration_s=0.2, qps=1000, latency_ms=60)
    assert err.value.category is ErrorCategory.RUN_FAILED
    assert (tmp_path / "mlperf_log_summary.txt").is_file() and library.loaded.sum() == 0
