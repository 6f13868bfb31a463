"""harness.report.collect over real logs: two run sets `harness run` wrote and a real MLPerf log."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.errors import ErrorCategory, HarnessError
from harness.reference.timing import phases as engine_phases
from harness.report.collect import collect_report, read_run, read_run_set
from tests.report.support.report_tree import PHASES, Tree


def records(log: Path) -> dict[str, dict]:
    """The first record of each key, read here on its own (not through the code under test)."""
    out: dict[str, dict] = {}
    for line in log.read_text().splitlines():
        if ":::MLLOG " in line:
            rec = json.loads(line.split(":::MLLOG ", 1)[1])
            out.setdefault(rec["key"], rec)
    return out


@pytest.mark.slow
def test_the_tree_has_three_run_sets(tree: Tree) -> None:
    report = collect_report(tree.root)
    assert sorted(rs.path for rs in report.run_sets) == sorted([tree.sharded, tree.cached, tree.mlperf])


@pytest.mark.slow
def test_a_sharded_run_gives_phases_bytes_beside_the_projection_memory_and_what_it_was(tree: Tree) -> None:
    rs = read_run_set(tree.sharded)
    [run] = rs.runs
    assert rs.target_auc == 0.6 and "result_0.config.json" in rs.target_source
    phases = run.step_phases  # as every rank of the run measured them
    assert phases is not None and phases.phases == PHASES == engine_phases.PHASES
    assert [r.rank for r in phases.ranks] == [0, 1, 2, 3] and phases.warmup_steps == engine_phases.WARMUP_STEPS
    for r in phases.ranks:  # the phases cover the step (within 5%); each collective the run makes was waited for
        assert 0.95 * r.step_s.mean <= r.phase_mean_total_s <= 1.0001 * r.step_s.mean, r
        assert r.phase_s["dense_backward"].mean > 0, r
        sent = records(run.path)["harness_comm_stats"]["value"]["per_step"]
        for kind in engine_phases.COLLECTIVES:
            if kind == "dense_all_reduce":  # overlapped (the default): DDP waits for it inside dense_backward
                assert r.phase_s[kind].mean == 0, r
                continue
            moved = sent[kind]["intra_node_bytes"] + sent[kind]["inter_node_bytes"]
            assert (r.phase_s[kind].mean > 0) == (moved > 0), (kind, r)
        assert r.step_s.p50 <= r.step_s.p90 <= r.step_s.p99 and len(r.series_step) == len(r.series_step_s) > 0
    assert phases.eval_count == len(run.evals)
    assert run.setup["profiler trace"].startswith(str(tree.root / ".harness"))

    logged = records(run.path)
    measured = logged["harness_comm_stats"]["value"]["per_step"]
    projected = logged["harness_comm_projection"]["value"]["per_step"]
    by_kind = {c.kind: c for c in run.collectives}
    assert set(by_kind) == set(measured) | set(projected)
    for kind, c in by_kind.items():
        assert c.measured == {"intra_node": measured[kind]["intra_node_bytes"],
                              "inter_node": measured[kind]["inter_node_bytes"]}
        assert c.projected == {"intra_node": projected[kind]["intra_node_bytes"],
                               "inter_node": projected[kind]["inter_node_bytes"]}
    assert any(c.measured["inter_node"] > 0 for c in run.collectives)  # two nodes: both link classes carry bytes

    assert [m.rank for m in run.memory] == [0, 1, 2, 3] and all(m.planned.get("hbm", 0) > 0 for m in run.memory)
    assert run.setup["profile"] == "two-nodes-2gpu" and run.setup["emulated"].startswith("yes")
    assert run.setup["ranks (data parallelism)"] == "4" and "table_wise" in run.setup["sharding plan"]
    assert run.setup["communication codecs"] == "forward fp32, backward fp32, allreduce fp32"
    train = logged["train_samples"]["value"]
    assert [e.samples for e in run.evals] == pytest.approx([train * k / 4 for k in range(1, len(run.evals) + 1)])
    assert run.evals[-1].seconds <= run.run_seconds
    assert all("harness_step_phases" not in m and "harness_comm_stats" not in m for m in run.missing)


@pytest.mark.slow
def test_a_straggler_is_the_rank_over_10_percent_slower_than_the_median(tree: Tree, tmp_path: Path) -> None:
    """The sharded run's real record, its rank 3 made 1.6x slower in a copy of the log."""
    log = tmp_path / "result_0.txt"
    lines = []
    for line in (tree.sharded / "result_0.txt").read_text().splitlines():
        if '"key": "harness_step_phases"' in line:
            rec = json.loads(line.split(":::MLLOG ", 1)[1])
            slow = rec["value"]["ranks"][3]
            for stats in (slow["step_s"], *slow["phase_s"].values()):
                for k in stats:
                    stats[k] *= 1.6
            line = f":::MLLOG {json.dumps(rec)}"
        lines.append(line)
    log.write_text("\n".join(lines) + "\n")
    assert read_run(log).step_phases.straggler == 3


@pytest.mark.slow
def test_a_cached_run_gives_hit_rates_and_says_it_lacks_step_timing(tree: Tree) -> None:
    rs = read_run_set(tree.cached)
    assert [r.name for r in rs.runs] == ["result_0.txt", "result_1.txt"]
    for run in rs.runs:
        assert run.cache is not None and run.cache.tier == "ssd" and 0 < run.cache.hit_rate <= 1
        assert run.cache.hit_rate == records(run.path)["harness_embedding_cache"]["value"]["hit_rate"]
        assert run.step_phases is None
        assert any("harness_step_phases" in m for m in run.missing)


@pytest.mark.slow
def test_a_real_mlperf_log_gives_its_curve_blocks_and_throughput_and_names_what_it_lacks(tree: Tree) -> None:
    rs = read_run_set(tree.mlperf)
    [run] = rs.runs
    assert rs.benchmark == "dlrm_dcnv2" and rs.target_auc == 0.80275
    assert not run.harness_log and run.setup["platform"] == "1xXE9680x8H200-SXM-141GB"
    assert len(run.evals) == 15 and run.evals[-1].auc >= 0.80275 and run.converged(rs.target_auc)
    logged = records(run.path)
    assert run.evals[0].samples == pytest.approx(logged["eval_accuracy"]["metadata"]["epoch_num"]
                                                 * logged["train_samples"]["value"])
    assert run.samples_per_s == logged["tracked_stats"]["value"]["throughput"]
    kinds = [b.kind for b in run.blocks]
    assert kinds.count("init") == 1 and kinds.count("run") == 1 and kinds.count("eval") == 15
    init = next(b for b in run.blocks if b.kind == "init")
    assert init.stop_s - init.start_s == pytest.approx(
        (logged["init_stop"]["time_ms"] - logged["init_start"]["time_ms"]) / 1000)
    lacks = " ".join(run.missing)
    for record in ("harness_step_phases", "harness_comm_stats", "harness_memory", "harness_embedding_cache",
                   "no harness_* records"):
        assert record in lacks
    assert "one-rank" not in lacks  # a real log's world size is not known: no reason is made up


def test_a_path_without_logs_is_one_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "results" / "x").mkdir(parents=True)
    with pytest.raises(HarnessError) as err:
        collect_report(tmp_path)
    assert err.value.category is ErrorCategory.NOT_FOUND and str(tmp_path) in str(err.value)
    with pytest.raises(HarnessError) as err:
        collect_report(tmp_path / "nothing")
    assert err.value.category is ErrorCategory.NOT_FOUND


def test_staging_logs_are_not_run_sets(tmp_path: Path, shared_logs: Path) -> None:
    hidden = tmp_path / ".harness" / "x"
    hidden.mkdir(parents=True)
    shutil.copyfile(shared_logs / "v4.1/Dell/results/XE9680x8H200-SXM-141GB/dlrm_dcnv2/result_0.txt",
                    hidden / "result_0.txt")
    with pytest.raises(HarnessError):
        collect_report(tmp_path)


def test_a_broken_log_is_named_and_the_others_still_read(tmp_path: Path, shared_logs: Path) -> None:
    source = shared_logs / "v4.1/Dell/results/XE9680x8H200-SXM-141GB/dlrm_dcnv2"
    for name in ("result_0.txt", "result_1.txt"):
        shutil.copyfile(source / name, tmp_path / name)
    with (tmp_path / "result_1.txt").open("a") as f:
        f.write(':::MLLOG {"key": "eval_accuracy", broken\n')
    rs = read_run_set(tmp_path)
    assert [r.name for r in rs.runs] == ["result_0.txt"]
    [problem] = rs.problems
    assert "result_1.txt:" in problem and "malformed" in problem


def test_a_step_phases_record_of_another_form_is_said_not_drawn(tmp_path: Path, shared_logs: Path) -> None:
    log = tmp_path / "result_0.txt"
    shutil.copyfile(shared_logs / "v4.1/Dell/results/XE9680x8H200-SXM-141GB/dlrm_dcnv2/result_0.txt", log)
    bad = {"key": "harness_step_phases", "time_ms": 1, "value": {"steps": 3, "phases": ["a"], "ranks": [{"rank": 0}]},
           "metadata": {}}
    with log.open("a") as f:
        f.write(f":::MLLOG {json.dumps(bad)}\n")
    run = read_run(log)
    assert run.step_phases is None
    assert any("not of the expected form" in m for m in run.missing)


@pytest.mark.slow
def test_the_trace_is_one_chrome_trace_of_every_ranks_traced_steps(tree: Tree) -> None:
    """``harness run --trace`` on the 4-rank emulated run: the file its log names (and the report
    shows) loads as Chrome trace JSON, a process per rank, each with its profiled steps' ranges and
    the profiler's operator events, on one time base (the ranks' steps overlap in time)."""
    from harness.reference.engine.trace import TRACE_STEPS

    logged = records(tree.sharded / "result_0.txt")["harness_trace"]["value"]
    first, last = logged["steps"]
    assert logged["ranks"] == [0, 1, 2, 3] and last - first + 1 == TRACE_STEPS and first > engine_phases.WARMUP_STEPS
    trace = json.loads(Path(logged["file"]).read_text())
    events = trace["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    assert names == {r: f"rank {r}" for r in range(4)}
    spans: dict[int, dict[int, tuple[float, float]]] = {}
    for e in events:
        if e.get("ph") == "X" and e["name"].startswith("harness step "):
            spans.setdefault(e["pid"], {})[int(e["name"].split()[-1])] = (e["ts"], e["ts"] + e["dur"])
    assert {r: sorted(s) for r, s in spans.items()} == {r: list(range(first, last + 1)) for r in range(4)}
    for r in range(4):  # each rank's operators (its lookups, matrix multiplies, collectives) inside its steps
        ops = [e for e in events if e.get("pid") == r and e.get("ph") == "X" and e.get("cat") == "cpu_op"]
        assert len(ops) > 100 and any(e["name"] == "c10d::alltoall_base_" for e in ops), r
    starts = [spans[r][first][0] for r in range(4)]
    ends = [spans[r][last][1] for r in range(4)]
    assert max(starts) < min(ends)  # the same steps, at the same time, on every rank
