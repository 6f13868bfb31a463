"""``harness infer`` as MLPerf Inference runs it: one ``--quick`` run of every variant and
scenario (performance and accuracy), then its labels, its results layout, its accuracy, its SDM
table; on the quick run's model, the Server target search and the added per-read latency inside
every query's LoadGen latency; the one-line errors; a full disk, a read-only results folder and
SIGTERM. The inference modules' own tests: tests/inference/."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from harness.cli import main
from harness.cli.infer import render
from harness.inference import mlperf
from harness.inference.config import (
    DEFAULT_PIN_FRACTION,
    QUICK_ACCURACY_SAMPLES,
    InferConfig,
    Scenario,
    default_model_dir,
)
from harness.inference.pipeline import run_inference, run_worker
from harness.inference.results import LoadgenSummary, parse_summary
from harness.inference.storage import write_rows
from tests.support.processes import alive, ranks_below

REPO = Path(__file__).resolve().parents[2]
LATENCY_US = 20.0
SYSTEMS = ("harness-memory", "harness-ssd", f"harness-ssd-{LATENCY_US:g}us")


def harness(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``harness ARGS`` in a fresh process, as a user runs it."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)


# -- one quick run, shared ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """``harness infer --quick`` (20 training steps, a third variant at +20 us per read), in
    process: the report, its text, its JSON, and the directories. The Server target is given
    (40 QPS), as ``--server-qps`` does: the default, a search over LoadGen runs per variant
    (``test_the_server_target_search_...``), costs about a minute, and nothing below asserts the
    rate it finds. Its Server runs take 100 queries, not --quick's 600 (which let LoadGen's early
    stopping judge a p99): nothing below asserts a Server verdict, and 600 cost 30 s more."""
    root = tmp_path_factory.mktemp("infer")
    config = InferConfig(quick=True, train_steps=20, storage_latency_us=LATENCY_US, results=root / "results",
                         server_qps=40.0, quick_server_queries=100)
    messages: list[str] = []
    report = run_inference(config, progress=messages.append)
    return {"report": report, "text": render(report), "json": report.to_dict(), "progress": messages,
            "results": root / "results",  # the model too, by default: under --results, not ./results
            "model": root / "results" / ".harness" / "models" / "dlrm_synthetic-seed0-steps20"}


@pytest.mark.slow
def test_quick_labels_every_output_not_a_valid_mlperf_result(quick):
    label = quick["report"].label
    assert label is not None and label.startswith(mlperf.NOT_VALID) and "--quick" in label
    text = quick["text"].splitlines()
    assert text[0] == f"*** {label} ***" and text[-1] == f"*** {label} ***"  # the terminal
    assert quick["progress"][0] == f"*** {label} ***"  # the progress lines
    js = quick["json"]
    assert js["label"] == label and js["valid_mlperf_result"] is False and js["settings"]["quick"] is True
    for system in SYSTEMS:  # every file the run wrote
        for scenario in ("Offline", "Server"):
            scen = quick["results"] / system / "dlrm-v2-99" / scenario
            for run in (scen / "performance" / "run_1", scen / "accuracy"):
                assert (run / mlperf.NOT_VALID_FILE).read_text().startswith(mlperf.NOT_VALID)
            assert label in (scen / "accuracy" / mlperf.ACCURACY_TXT).read_text()
            assert label in (scen / "user.conf").read_text()
    # the quick overrides are what LoadGen applied; the Server bound is mlperf.conf's
    for r in js["results"]:
        eff = r["effective_settings"]
        assert eff["effective_min_duration_ms"] == eff["requested_min_duration_ms"] == 2000
        # what the run asked for (--quick's Server count is 600: LoadGen's early stopping judges a
        # p99 from about 460 queries on; this shared run asks 100)
        assert eff["requested_min_query_count"] == 100
        assert f"(Server {quick['report'].config.quick_server_queries})" in label
        if r["scenario"] == "server":
            assert eff["effective_target_latency_ns"] == 60_000_000


@pytest.mark.slow
def test_the_report_states_the_precision_the_model_was_trained_in(quick):
    js = quick["json"]
    assert js["settings"]["precision"] == js["model"]["precision"] == "fp32"  # the default: fp32 on every machine
    assert quick["text"].splitlines()[2].startswith("model: dlrm_synthetic seed 0, 20 steps (") and \
        ") in fp32, AUC " in quick["text"].splitlines()[2]
    assert json.loads((quick["model"] / "model.json").read_text())["precision"] == "fp32"


@pytest.mark.slow
def test_the_results_layout_is_a_submissions(quick):
    results = quick["results"]
    # the systems' folders, and the harness's own (the model), hidden as harness run's staging is
    assert sorted(p.name for p in results.iterdir()) == sorted([".harness", *SYSTEMS])
    for system in SYSTEMS:
        assert [p.name for p in (results / system).iterdir()] == ["dlrm-v2-99"]
        assert sorted(p.name for p in (results / system / "dlrm-v2-99").iterdir()) == ["Offline", "Server"]
        for scenario in ("Offline", "Server"):
            scen = results / system / "dlrm-v2-99" / scenario
            perf, acc = scen / "performance" / "run_1", scen / "accuracy"
            for name in (mlperf.SUMMARY, mlperf.DETAIL):
                assert (perf / name).stat().st_size > 0 and (acc / name).stat().st_size > 0
            summary = (perf / mlperf.SUMMARY).read_text()
            assert f"Scenario : {scenario}" in summary and "Mode     : PerformanceOnly" in summary
            assert mlperf.detail_values(acc / mlperf.DETAIL)["effective_test_mode"] == "AccuracyOnly"
            records = json.loads((acc / mlperf.ACCURACY_LOG).read_text())
            assert len(records) == QUICK_ACCURACY_SAMPLES  # users, each its rows' (prediction, label) pairs
            trace = [tuple(map(int, x.split(", "))) for x in (acc / mlperf.AGGREGATION_TRACE).read_text().splitlines()]
            assert trace[0][0] == 0 and all(e - s == n and 1 <= n <= 700 for s, e, n in trace)
            rows = sum(len(r["data"]) // 16 for r in records)  # hex: 2 x 4 bytes a row
            assert rows == sum(trace[r["qsl_idx"]][2] for r in records)
            line = (acc / mlperf.ACCURACY_TXT).read_text().splitlines()[0]
            assert line.startswith("AUC=") and f"total={rows}, queries={QUICK_ACCURACY_SAMPLES}" in line
            conf = (scen / "user.conf").read_text()
            assert f"dlrm-v2.{scenario}.target_qps = " in conf
    assert not list(quick["model"].glob("ssd-tier-*"))  # the rows file was temporary


@pytest.mark.slow
def test_every_variant_scores_the_same_auc_and_passes_the_target(quick):
    report = quick["report"]
    for scenario in (Scenario.OFFLINE, Scenario.SERVER):  # identical: every variant, the same batches
        scores = [r.accuracy for r in report.results if r.scenario is scenario]
        assert len(scores) == 3 and len({(s.auc, s.good, s.total) for s in scores}) == 1
    for r in report.results:
        s = r.accuracy
        assert s.passed and s.required_auc == pytest.approx(0.99 * s.reference_auc)
        # the served model is the reference model (computed in other batch sizes: float32 rounding)
        assert s.auc == pytest.approx(s.reference_auc, abs=1e-6) and 0.5 < s.auc < 1
        assert f"AUC={100 * s.auc:.3f}%" in (r.summary.path.parents[2] / "accuracy" / "accuracy.txt").read_text()


@pytest.mark.slow
def test_the_sdm_table_counts_reads_per_query_as_cache_misses(quick):
    report, text = quick["report"], quick["text"]
    header = next(line for line in text.splitlines() if line.startswith("SYSTEM"))
    for col in ("READS/Q", "BYTES/Q", "HIT", "P50 ms", "P99 ms", "P99.9 ms", "RESIDENT"):
        assert col in header
    rows = {(r.variant.system, r.scenario.value): r for r in report.results}
    assert set(rows) == {(s, sc) for s in SYSTEMS for sc in ("offline", "server")}
    for (system, _scenario), r in rows.items():
        line = next(x for x in text.splitlines() if x.startswith(system + " ") and f" {r.scenario.value} " in x)
        if r.storage is None:
            assert system == "harness-memory" and line.split()[8] == "-"
            continue
        st = r.storage
        assert st.reads > 0 and st.reads == st.misses and st.reads_equal_misses_per_call
        assert st.bytes_read == st.reads * (512 if "direct" in st.mode else 64)
        assert line.split()[8] == f"{st.reads_per_sample:.2f}"
        assert len(st.table_hit_rates) == 26
        assert 100 <= st.rows / st.samples <= 700  # LoadGen's samples are users of 100 to 700 rows
    server = rows["harness-ssd", "server"].storage
    # a lookup call per query, or per queries that arrived together (their lookups share a call)
    assert 0 < server.model_calls <= server.samples
    # the whole cache pinned (the default): a call that misses reads rows outside it, nothing is admitted
    assert server.pinned_rows == report.cache_rows and 0 < server.hit_rate < 1
    assert 0 < server.bypass_calls <= server.model_calls and rows["harness-ssd", "offline"].storage.bypass_calls > 0
    # the memory each variant keeps: every row, or the cache (a fraction: 0.2 of the rows, 16 floats each)
    memory = rows["harness-memory", "server"].resident_table_bytes
    assert memory == report.table_rows * 16 * 4
    assert memory * 0.2 <= rows["harness-ssd", "server"].resident_table_bytes < memory / 2
    latency = rows[SYSTEMS[2], "server"].storage.added_latency_us
    assert LATENCY_US <= latency < LATENCY_US * 20  # a unit's mistake, not the machine's load (see below)
    # warm by default: the training data's hottest rows, the hottest 0.9 of the cache pinned; beside
    # each SSD result its reads a user, the device-bound rate they imply and the coalesced rows
    pinned = round(DEFAULT_PIN_FRACTION * report.cache_rows)
    assert f"cache {report.cache_rows} rows (0.2, lru; warm at start: the {report.cache_rows:,} rows the first " \
        f"262,144 training samples look up most, the hottest {pinned:,} pinned" in text
    probe = report.device_probe.reads_per_s
    for (system, scenario), r in rows.items():
        if r.storage is not None:
            st = r.storage
            assert st.pinned_rows == pinned and st.coalesced >= 0
            assert st.device_bound_qps == pytest.approx(probe / st.reads_per_sample)
            line = next(x for x in text.splitlines() if x.startswith(system + " ") and f" {scenario} " in x)
            assert line.split()[9] == f"{st.device_bound_qps:,.0f}"
            assert f"  {system} {scenario}: {st.reads:,} reads = misses, {st.coalesced:,} coalesced" in text


@pytest.mark.slow
def test_our_mlperf_conf_is_the_one_loadgen_compiled_in(quick):
    data = mlperf.MLPERF_CONF.read_bytes()
    assert hashlib.sha1(data).hexdigest() == mlperf.MLPERF_CONF_SHA1
    detail = quick["results"] / "harness-ssd" / "dlrm-v2-99" / "Server" / "performance" / "run_1" / mlperf.DETAIL
    assert mlperf.detail_values(detail)["loadgen_file_sha1"]["/mlperf.conf"] == mlperf.MLPERF_CONF_SHA1
    assert quick["json"]["settings"]["mlperf_conf_sha1_matches_loadgen"] is True


@pytest.mark.slow
def test_an_invalid_loadgen_run_fails_the_command_after_the_report(quick, monkeypatch, tmp_path, capsys):
    """Exit 1 and one line naming each INVALID run and LoadGen's reason, the report printed (and the
    results written) before it; every run VALID: exit 0. The quick run's report, its verdicts set."""
    from dataclasses import replace

    from harness.inference import pipeline

    report = quick["report"]
    yes = {"Min duration satisfied": "Yes", "Min queries satisfied": "Yes", "Early stopping satisfied": "Yes"}
    valid = replace(report, results=[replace(r, summary=replace(r.summary, valid=True, constraints=yes))
                                     for r in report.results])
    no = {"Performance constraints satisfied": "NO", **yes, "Early stopping satisfied": "NO"}  # LoadGen's order
    invalid = replace(valid, results=[
        replace(r, summary=replace(r.summary, valid=False, constraints=no,
                                   recommendations=("Reduce target QPS to improve latency.",)))
        if r.scenario is Scenario.SERVER and r.variant.ssd else r for r in valid.results])
    for served, code in ((valid, 0), (invalid, 1)):
        monkeypatch.setattr(pipeline, "run_inference", lambda config, progress, served=served: served)
        assert main(["infer", "--quick", "--results", str(tmp_path)]) == code
        out, err = capsys.readouterr()
        assert out.rstrip("\n") == render(served)
        assert err == ("" if code == 0 else
                       f"harness: error: 2 of 6 LoadGen runs INVALID (LoadGen's verdict on the --quick settings): "
                       f"{SYSTEMS[1]} server, {SYSTEMS[2]} server (performance constraints and early stopping not "
                       f"satisfied; reduce target QPS to improve latency); the results are written under "
                       f"{report.config.results}\n")


# -- the Server target search and the added latency, on the quick run's model ---------------------


def _server_run(tmp_path: Path, model_dir: Path, latency_us: float, qps: float) -> tuple[dict, LoadgenSummary]:
    from harness.inference.model import memory_model
    from harness.rules.specs import load_benchmark

    spec = load_benchmark("dlrm_synthetic")
    state = torch.load(model_dir / "model.pt", weights_only=True)
    weight = memory_model(spec, state).sparse_arch.embeddings.weight.detach()
    layout = write_rows(tmp_path / "rows.bin", weight)
    out = tmp_path / f"lat{latency_us:g}"
    conf = mlperf.write_user_conf(out / "user.conf", "server", target_qps=qps, note="test")
    job = {"benchmark": "dlrm_synthetic", "state": str(model_dir / "model.pt"), "variant": "ssd",
           "variant_name": f"lat{latency_us:g}", "rows_file": str(tmp_path / "rows.bin"), "layout": layout.to_dict(),
           "latency_us": latency_us, "queue_depth": 16, "cache_rows": 14918, "policy": "lru", "scenario": "server",
           "mode": "performance", "user_conf": str(conf), "quick": True, "quick_min_duration_ms": 2000,
           "quick_min_query_count": 100, "max_batch": 0, "threads": 1, "out_dir": str(out)}
    result = run_worker(job, tmp_path)
    assert result["reads"] == result["misses"] > 0
    return result, parse_summary(out / mlperf.SUMMARY, Scenario.SERVER)


@pytest.mark.slow
def test_the_server_target_search_doubles_while_runs_pass_then_bisects_and_stops_at_its_floor(quick, tmp_path):
    """The default Server target: real LoadGen Server runs in one worker, doubling from the start
    rate while a run passes (p99 within the margin of the bound, kept up with the schedule), then
    bisecting between the highest pass and the lowest failure; with nothing passing it halves down
    to its floor and stops there. Small runs (30 queries, 0.3 s) of the in-memory model."""
    from harness.inference.pipeline import run_worker

    def search(margin: float, floor: float, out: str, start: float = 40.0, probes: int = 3) -> dict:
        job = {"benchmark": "dlrm_synthetic", "state": str(quick["model"] / "model.pt"), "variant": "memory",
               "variant_name": out, "scenario": "server", "mode": "search", "max_batch": 0, "threads": 1,
               "out_dir": str(tmp_path / out), "search_start_qps": start, "search_bound_ns": 60_000_000,
               "search_margin": margin, "search_queries": 30, "search_ms": 300, "search_probes": probes,
               "search_floor_qps": floor}
        return run_worker(job, tmp_path)

    # from 160 one-user queries/s, which the in-memory model serves; by 640 (or 1,280) it cannot
    # keep up (it answers about 400 a second here) and a queue builds: both branches are taken
    found = search(0.8, 0.0, "a", start=160.0, probes=4)
    rates = [p["qps"] for p in found["probes"]]
    assert len(rates) == 4 and rates[0] == 160.0
    assert any(p["passed"] for p in found["probes"]) and not all(p["passed"] for p in found["probes"]), found
    for k in range(1, 4):
        passed = [p["qps"] for p in found["probes"][:k] if p["passed"]]
        failed = [p["qps"] for p in found["probes"][:k] if not p["passed"]]
        expect = (max(passed) + min(failed)) / 2 if passed and failed else \
            (2 * max(passed) if passed else min(failed) / 2)
        assert rates[k] == pytest.approx(expect), found["probes"]
    assert found["best_qps"] == max((p["qps"] for p in found["probes"] if p["passed"]), default=None)
    none = search(1e-6, 12.0, "b")  # no p99 is within a nanosecond of 0: every run fails
    assert [p["qps"] for p in none["probes"]] == [40.0, 20.0, 12.0] and none["best_qps"] is None
    assert not any(p["passed"] for p in none["probes"])


@pytest.mark.slow
def test_the_storage_latency_is_inside_every_querys_loadgen_latency(quick, tmp_path):
    """Server, 10 QPS, at least 100 one-user queries, 16 reads in flight, each read +1000 us: a
    query's LoadGen latency holds at least the device latencies its lookup call waited (busy
    waits of at least 1 ms each), so LoadGen's p50 and p99 are at least those of the waits.
    Load on the machine only adds to a latency, so this holds however busy it is; a fast/slow
    comparison of two runs did not (CI saw the +0 us run's p99 at 1.8 s under load)."""
    latency_us = 1000.0
    result, summary = _server_run(tmp_path, quick["model"], latency_us, 10.0)
    assert result["added_latency_us"] >= latency_us
    call_waits = np.array(result["call_latency_waits"])
    assert call_waits.size == result["model_calls"] and call_waits.sum() * 16 >= result["reads"]  # 16 in flight wait once
    # each query waited its lookup call's waits (queries that arrived together share a call)
    waits = np.sort(np.repeat(call_waits, result["call_users"]))
    assert waits.size == result["samples"] >= 100
    added_ms = waits * latency_us / 1000
    n = added_ms.size
    floor = {q: added_ms[max(0, int(q * n) - 1)] for q in (0.5, 0.99)}  # one rank below LoadGen's, to be safe
    assert floor[0.99] >= 10.0  # tens of waves: the bound means something
    assert summary.p50_latency_ms >= floor[0.5] and summary.p99_latency_ms >= floor[0.99], (summary, floor)


# -- errors -----------------------------------------------------------------------------------


def test_an_unknown_benchmark_is_one_line_and_exit_2(capsys):
    assert main(["infer", "--benchmark", "no_such_benchmark"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("harness: error: ") and "no_such_benchmark" in err


def test_the_ssd_caches_start_warm_with_pinned_hot_rows_unless_cold_is_asked(monkeypatch, capsys):
    """The SDM levers are the default: the SSD caches start warm, the hottest --pin-fraction of them
    pinned, misses coalesced; --cold-cache (nothing pinned), --pin-fraction and --no-coalesce change
    them. The options as the command hands them to the pipeline (stopped there)."""
    from harness.errors import ErrorCategory, HarnessError
    from harness.inference import pipeline
    from harness.inference.config import DEFAULT_PIN_FRACTION

    seen: list[InferConfig] = []

    def stop(config: InferConfig, progress: object) -> None:
        seen.append(config)
        raise HarnessError("stopped", ErrorCategory.BAD_INPUT)

    monkeypatch.setattr(pipeline, "run_inference", stop)
    for args in ([], ["--cold-cache"], ["--pin-fraction", "0.5", "--no-coalesce"], ["--warm-cache"]):
        assert main(["infer", "--quick", *args]) == 2
    capsys.readouterr()
    assert [(c.warm_cache, c.pin_fraction, c.coalesce) for c in seen] == [
        (True, DEFAULT_PIN_FRACTION, True), (False, DEFAULT_PIN_FRACTION, True), (True, 0.5, False),
        (True, DEFAULT_PIN_FRACTION, True)]
    assert InferConfig().warm_cache and 0 < DEFAULT_PIN_FRACTION <= 1
    assert main(["infer", "--pin-fraction", "1.5"]) == 2


def test_a_bad_cache_fraction_is_refused_before_any_work(capsys):
    assert main(["infer", "--cache-fraction", "0"]) == 2
    assert capsys.readouterr().err == ("harness: error: infer: --cache-fraction: 0.0 is not in the range 0.0<x<=1.0 "
                                       "(harness infer --help)\n")


def test_a_missing_user_conf_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["infer", "--user-conf", str(tmp_path / "nope.conf")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "nope.conf: no such user.conf" in err


def test_a_model_dir_holding_another_model_is_one_line(tmp_path, capsys):
    (tmp_path / "model.json").write_text(json.dumps({
        "benchmark": "dlrm_synthetic", "seed": 7, "train_steps_requested": None, "steps": 300, "epochs": 0.6,
        "auc": 0.75, "target_auc": 0.747, "train_s": 30.0,
    }))
    assert main(["infer", "--seed", "0", "--model-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "holds a model of dlrm_synthetic seed 7" in err and "--model-dir" in err


def test_a_model_of_another_precision_is_not_reused(tmp_path, capsys):
    (tmp_path / "model.json").write_text(json.dumps({  # written before the precision was kept: fp32
        "benchmark": "dlrm_synthetic", "seed": 0, "train_steps_requested": 5, "steps": 5, "epochs": 0.01,
        "auc": 0.6, "target_auc": 0.747, "train_s": 1.0,
    }))
    assert main(["infer", "--train-steps", "5", "--precision", "bf16", "--model-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "holds a model of dlrm_synthetic seed 0 (5 steps in fp32), not of " \
        "dlrm_synthetic seed 0 (5 steps in bf16)" in err
    assert main(["infer", "--precision", "fp8"]) == 2
    assert "harness: error: infer: --precision: 'fp8' is not one of 'fp32', 'bf16', 'fp16' (harness infer --help)" \
        in capsys.readouterr().err
    assert default_model_dir("dlrm_synthetic", 0, None) == default_model_dir("dlrm_synthetic", 0, None, "fp32")
    assert default_model_dir("dlrm_synthetic", 0, 5, "bf16").name == "dlrm_synthetic-seed0-steps5-bf16"
    # under the run's --results, not under ./results of wherever the command was started
    out = tmp_path / "elsewhere"
    assert default_model_dir("dlrm_synthetic", 0, None, "fp32", out).parent == out / ".harness" / "models"


def test_a_damaged_saved_model_is_one_line(tmp_path, capsys):
    (tmp_path / "model.json").write_text(json.dumps({
        "benchmark": "dlrm_synthetic", "seed": 0, "train_steps_requested": 5, "steps": 5, "epochs": 0.01,
        "auc": 0.6, "target_auc": 0.747, "train_s": 1.0,
    }))
    (tmp_path / "model.pt").write_bytes(b"not a model")
    assert main(["infer", "--train-steps", "5", "--model-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "model.pt: not a saved model" in err


# -- the machine's own faults, and SIGTERM (issue 25) --------------------------------------------
def _copy_model(quick, to: Path) -> Path:
    """The quick run's trained model (20 steps, fp32, seed 0) in ``to``, to be reused there."""
    to.mkdir(parents=True, exist_ok=True)
    for name in ("model.pt", "model.json"):
        (to / name).write_bytes((quick["model"] / name).read_bytes())
    return to


def _reuse(model_dir: Path, results: Path, *more: str) -> list[str]:
    return ["infer", "--quick", "--train-steps", "20", "--model-dir", str(model_dir), "--results", str(results),
            "--scenario", "offline", *more]


@pytest.mark.slow
def test_a_full_disk_under_the_ssd_tier_is_one_line_and_the_model_is_kept(quick, tmp_path):
    """The SSD tier's rows file on a disk that holds the model but not the rows: one line naming
    the file (exit 5), no tier folder left, the saved model unchanged and reused on the next try."""
    from tests.support.disks import tmpfs

    model_bytes = sum((quick["model"] / n).stat().st_size for n in ("model.pt", "model.json"))
    with tmpfs(tmp_path / "disk", f"size={model_bytes // 1024 + 64}k") as disk:
        model_dir = _copy_model(quick, disk / "model")
        before = {p.name: p.read_bytes() for p in model_dir.iterdir()}
        proc = harness(*_reuse(model_dir, tmp_path / "results", "--variant", "ssd"))
        assert proc.returncode == 5, proc.stderr[-3000:]
        last = proc.stderr.strip().splitlines()[-1]
        assert "Traceback" not in proc.stderr and last.startswith("harness: error: ") and \
            "tables.rows: No space left on device while writing the tables to the SSD tier; free space there, then " \
            "run the same command again" in last, last
        assert "reusing the model in" in proc.stderr
        assert {p.name: p.read_bytes() for p in model_dir.iterdir()} == before  # no ssd-tier-* folder either


@pytest.mark.slow
def test_a_read_only_results_folder_is_one_line_before_loadgen_runs(quick, tmp_path):
    from tests.support.disks import tmpfs

    model_dir = _copy_model(quick, tmp_path / "model")
    with tmpfs(tmp_path / "results", "size=1m", "ro") as results:
        proc = harness(*_reuse(model_dir, results, "--variant", "memory"))
        assert proc.returncode == 5, proc.stderr[-3000:]
        [line] = [x for x in proc.stderr.strip().splitlines() if x.startswith("harness:")]
        assert "Traceback" not in proc.stderr and line == proc.stderr.strip().splitlines()[-1]
        assert f"{results}/" in line and "Read-only file system" in line and "give a writable folder" in line
        assert not list(results.iterdir())
    assert sorted(p.name for p in model_dir.iterdir()) == ["model.json", "model.pt"]


def _stderr_until(proc: subprocess.Popen, needle: str, timeout: float) -> str:
    """``proc``'s stderr as it comes until it holds ``needle`` (or it ends, or time is up). Read
    from the pipe itself: ``select`` cannot see what ``proc.stderr``'s buffer holds, so a line read
    into it with the one before would wait there for the command's next write (the cause of this
    file's SIGTERM test failing at times: the line came after the run it announced had ended)."""
    import codecs
    import os
    import selectors
    import time

    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    seen, deadline, fd = "", time.time() + timeout, proc.stderr.fileno()
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while time.time() < deadline and needle not in seen:
            if sel.select(timeout=1.0):
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    break
                seen += decoder.decode(chunk)
    return seen


@pytest.mark.slow
def test_sigterm_stops_infer_and_its_loadgen_worker_and_keeps_the_model(quick, tmp_path):
    import signal

    model_dir = _copy_model(quick, tmp_path / "model")
    model_before = {p.name: p.read_bytes() for p in model_dir.iterdir()}
    proc = subprocess.Popen([sys.executable, "-m", "harness", *_reuse(model_dir, tmp_path / "results",
                                                                      "--variant", "memory")],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = _stderr_until(proc, "LoadGen offline performance", 300)
    assert "LoadGen offline performance" in seen, seen[-3000:]
    deadline = time.time() + 120  # the worker, forked from the command's fork server (harness.reference.forked)
    while not (workers := ranks_below(proc.pid)) and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)  # the worker is serving (the quick performance run: about 5 s)
    assert proc.poll() is None, "the command ended before the test signalled it: the test came late"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-3000:]
    assert "Traceback" not in err and err.strip().splitlines()[-1] == (
        "harness: error: interrupted by SIGTERM: a model already trained is kept and reused by the same command; "
        "the results of the LoadGen run it stopped are incomplete")
    # every worker went with it (the list may hold two: the previous LoadGen run's worker still
    # exiting as the next one starts, seen once in CI)
    assert workers and not alive(workers)
    assert {p.name: p.read_bytes() for p in model_dir.iterdir()} == model_before  # and its SSD-tier folder
