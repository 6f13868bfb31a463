"""The dlrm-v3 twin served by ``harness infer``: requests in time order, the ranker's batches, the
inference attention (history once, candidates against it), a request's cost, the model kept, and the
SSD tier's predictions equal to memory's."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from harness.errors import HarnessError
from harness.inference import dlrmv3
from harness.inference.dlrmv3_serve import hot_rows, ssd_model
from harness.inference.storage import write_rows
from harness.reference.data.dlrmv3_streams import StreamingGenerator, StreamingSpec
from harness.reference.models.hstu import HSTURanker
from harness.reference.models.hstu_attention import jagged_attention
from harness.reference.planner.types import RowReader
from harness.reference.tiered import CachePolicy

# a micro twin: a few seconds to train and to serve
DATA = StreamingSpec(num_users=160, num_items=4_000, num_categories=8, num_timestamps=8, train_ratio=0.75,
                     avg_samples_per_item=2,
                     num_eval_candidates=4, num_inference_candidates=64, max_seq_len=512, max_num_candidates=4,
                     max_num_candidates_inference=64)
MODEL = {"embedding_dim": 16, "num_layers": 1, "num_heads": 2, "attention_dim": 8, "linear_dim": 8, "input_dropout": 0.0,
             "linear_dropout": 0.0, "time_buckets": 8, "preprocessor_hidden_dim": 16, "head_hidden_dim": 16}


@pytest.fixture(scope="module")
def config():
    return dlrmv3.model_config(DATA, MODEL)


@pytest.fixture(scope="module")
def log():
    return dlrmv3.RequestLog.generate(DATA, chunk=16)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, config):
    folder = tmp_path_factory.mktemp("dlrmv3-model")
    model, state, uses = dlrmv3.trained_model(folder, seed=3, steps=4, progress=lambda _m: None, data=DATA,
                                              config=config)
    return folder, model, state, uses


def test_requests_are_in_time_order_and_equal_the_generators(log):
    gen = StreamingGenerator(DATA)
    inference = range(DATA.train_timestamps, DATA.num_timestamps)
    assert np.all(np.diff(log.ts) >= 0) and set(log.ts.tolist()) == set(inference)
    for ts in inference:
        users = gen.active_users(ts)
        mine = log.ts == ts
        assert np.array_equal(log.users[mine], users)  # a timestamp's active users, in increasing id
        assert np.array_equal(log.query[mine], np.arange(users.size))
    r = int(np.flatnonzero(log.ts == DATA.num_timestamps - 1)[1])
    expected = dlrmv3.event_batch(gen.requests(log.users[r : r + 1], int(log.ts[r])))
    got = log.batch(np.array([r]))
    for f in ("uid", "history_lengths", "candidate_lengths", "item", "artist", "album", "action", "labels"):
        assert torch.equal(getattr(got, f), getattr(expected, f)), f


def test_event_batch_maps_the_tables_and_actions():
    gen = StreamingGenerator(DATA)
    rows = gen.requests(gen.active_users(DATA.train_timestamps)[:3], DATA.train_timestamps)
    batch = dlrmv3.event_batch(rows)
    batch.check()
    h, c = rows.history_offsets(), rows.candidate_offsets()
    start = int(rows.history_lengths[0] + rows.candidate_lengths[0])  # the second row's first event
    second = slice(start, start + int(rows.history_lengths[1]))
    assert torch.equal(batch.item[second], torch.from_numpy(rows.history_item_ids[h[1] : h[2]]))
    assert torch.equal(batch.artist[second], torch.from_numpy(rows.history_category_ids[h[1] : h[2]]))
    assert torch.equal(batch.action[second], torch.from_numpy(rows.history_ratings[h[1] : h[2]].astype(np.int64)))
    cands = batch.is_candidate()
    assert int(cands.sum()) == int(rows.candidate_lengths.sum())
    assert bool((batch.action[cands] == 0).all()) and bool((batch.album == 0).all())
    assert torch.equal(batch.item[cands], torch.from_numpy(rows.candidate_item_ids))
    assert torch.equal(batch.labels, torch.from_numpy(rows.candidate_labels.astype(np.float32)))
    assert c[-1] == batch.labels.numel()


def test_request_attention_is_the_jagged_path_and_target_aware():
    g = torch.Generator().manual_seed(0)
    offsets, candidates = torch.tensor([0, 40, 140]), torch.tensor([30, 60])
    q, k, v = (torch.randn(140, 2, 8, generator=g) for _ in range(3))
    with torch.no_grad():
        fast = dlrmv3.request_attention(q, k, v, offsets, candidates, 200)
        assert torch.allclose(fast, jagged_attention(q, k, v, offsets, candidates, 200), atol=1e-6, rtol=0)
        # a candidate's output depends on the history and itself only: served with no other candidate,
        # the same divisor, it is the same
        alone = torch.cat([torch.arange(40, 80), torch.tensor([100])])  # the 2nd user's history, its 21st candidate
        one = dlrmv3.request_attention(q[alone], k[alone], v[alone], torch.tensor([0, 41]), torch.tensor([1]), 200)
        assert torch.allclose(one[-1], fast[100], atol=1e-6, rtol=0)
        assert torch.allclose(one[:40], fast[40:80], atol=1e-6, rtol=0)


def test_request_cost_counts_what_the_model_computes(config, log):
    """The formula against torch's FLOP counter on one request through the inference model (a short
    history: the counter also counts the jagged path's masked blocks, which the formula does not)."""
    net = dlrmv3.inference_model(HSTURanker(config).state_dict(), config)
    r = int(np.argmin(log.history_lengths()))
    batch = log.batch(np.array([r]))
    cost = dlrmv3.request_cost(config, int(batch.history_lengths[0]), int(batch.candidate_lengths[0]), row_bytes=64)
    with FlopCounterMode(display=False) as counter:
        dlrmv3.score_request(net, batch)
    measured = counter.get_total_flops()
    assert abs(measured - cost.shared_flops) / measured < 0.1, (measured, cost.shared_flops)
    assert cost.per_candidate_flops > 5 * cost.shared_flops  # one sequence per candidate repeats the history
    assert cost.lookup_rows == 2 * int(batch.item.numel()) + 2
    official = dlrmv3.official_cost()
    assert 4e11 < official.shared_flops < 7e11  # ~550 GFLOP (275 G multiply-adds) a request at 6.7k history


def test_the_model_is_trained_kept_and_reused(trained, config):
    folder, model, state, uses = trained
    assert model.steps == 4 and not model.reused and 0.0 <= model.auc <= 1.0
    assert uses.shape == (DATA.num_items,) and uses.sum() > 0
    again, state2, uses2 = dlrmv3.trained_model(folder, seed=3, steps=4, progress=lambda _m: None, data=DATA,
                                                config=config)
    assert again.reused and again.steps == 4 and np.array_equal(uses, uses2)
    assert all(torch.equal(state[k], state2[k]) for k in state)
    with pytest.raises(HarnessError, match="not of seed 4"):
        dlrmv3.trained_model(folder, seed=4, steps=4, progress=lambda _m: None, data=DATA, config=config)


def test_ssd_tier_predictions_equal_memory_bit_for_bit(trained, config, log, tmp_path):
    _, _, state, uses = trained
    memory = dlrmv3.inference_model(state, config)
    weight = memory.embeddings.weight.detach()
    layout = write_rows(tmp_path / "rows", weight)
    warm = hot_rows(uses, 100, DATA)
    assert warm.size == 100 and uses[warm[warm < DATA.num_items]].min() >= np.sort(uses)[-100]
    model, tables = ssd_model(state, tmp_path / "rows", layout, cache_rows=100, policy=CachePolicy.LRU,
                              latency_us=0.0, queue_depth=8, reader=RowReader.AUTO, warm=warm, config=config)
    try:
        for r in range(4):
            batch = log.batch(np.array([r]))
            assert torch.equal(dlrmv3.score_request(model, batch), dlrmv3.score_request(memory, batch))
        assert tables.store.reads > 0 and tables.misses == tables.store.reads
    finally:
        tables.store.close()


def test_twin_keeps_the_official_candidates():
    assert dlrmv3.TWIN_DATA.num_inference_candidates == StreamingSpec().num_inference_candidates == 2048
    assert dataclasses.replace(dlrmv3.TWIN_DATA).max_history(dlrmv3.Split.INFERENCE) > 1000


@pytest.mark.slow
def test_the_micro_twin_is_served_through_loadgen_end_to_end(tmp_path):
    """Train, then Offline and Server, memory and SSD, each a performance, an accuracy and a TEST08 run
    through the real LoadGen, in the results tree the submission checker reads."""
    from harness.inference import dlrmv3_accuracy as acc
    from harness.inference.config import Scenario
    from harness.inference.dlrmv3_serve import STAGES, V3Config, run_dlrmv3

    results = tmp_path / "results"
    config = V3Config(quick=True, results=results, variant_kinds=("memory", "ssd"), data=DATA, model=MODEL,
                      train_steps=4, cache_fraction=0.1, storage_queue_depth=8, server_qps=400.0, dense_workers=2)
    report = run_dlrmv3(config, progress=lambda _m: None)
    assert [(r.variant.name, r.scenario) for r in report.runs] == [
        ("memory", Scenario.OFFLINE), ("ssd", Scenario.OFFLINE), ("memory", Scenario.SERVER), ("ssd", Scenario.SERVER)]
    assert report.identical_requests > 0 and report.model.steps == 4
    for r in report.runs:
        scenario = "Offline" if r.scenario is Scenario.OFFLINE else "Server"
        folder = results / r.variant.system / "dlrm-v3" / scenario
        assert (folder / "performance" / "run_1" / "mlperf_log_summary.txt").is_file()
        assert "dlrm-v3." in (folder / "user.conf").read_text()
        quality = acc.parse_accuracy_txt((folder / "accuracy" / "accuracy.txt").read_text())
        assert quality.ne == pytest.approx(report.reference.ne) and r.accuracy_passed  # the fp32 model's, served
        assert r.metrics.requests == 96 < len(dlrmv3.RequestLog.generate(DATA))  # the first 96 in time order
        assert "TEST PASS" in (folder / "TEST08" / "verify_accuracy.txt").read_text() and r.test08.passed
        assert r.test08.matched > 0
        # two dense workers: every request looked up is answered
        assert r.perf["answered"] == r.perf["requests"] > 0
        if r.scenario is Scenario.SERVER:
            stages = r.perf["stages_ms"]
            assert list(stages) == list(STAGES) and stages["total"][2] >= stages["dense"][2] > 0
        if r.variant.ssd:
            assert r.perf["reads"] > 0 and r.perf["reads"] == r.perf["misses"] and 0 < r.hit_rate < 1
    text = report.render()
    assert "not a valid MLPerf result" in text and "GFLOP computed once per request" in text
    assert "DEV QPS" in text and "x memory's requests/s" in text
    as_json = json.loads(json.dumps(report.to_dict()))
    assert [r["test08_passed"] for r in as_json["results"]] == [True] * 4 and as_json["benchmark"] == "dlrm-v3"
    again = run_dlrmv3(V3Config(**{**config.__dict__, "scenarios": (Scenario.OFFLINE,),
                                   "variant_kinds": ("memory",)}), progress=lambda _m: None)
    assert again.model.reused


def test_dlrm_v3_refuses_a_precision_it_does_not_serve(tmp_path, capsys):
    from harness.cli import main
    from harness.errors import EXIT_CODES, ErrorCategory

    code = main(["infer", "--benchmark", "dlrm-v3", "--precision", "bf16", "--results", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == EXIT_CODES[ErrorCategory.NOT_IMPLEMENTED] and len(err) == 1 and "not implemented" in err[0]
