"""`harness run` end to end, in real subprocesses: logs, layout, score, seeds, Ctrl-C and resume."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.processes import ranks_below

FIXTURE = Path(__file__).parent / "fixtures" / "tiny_benchmark.yaml"


def harness(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def start_harness(*args: str, cwd: Path) -> subprocess.Popen:
    """`harness ...` as a background process, for tests that signal it while it runs."""
    return subprocess.Popen(
        [sys.executable, "-m", "harness", *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def records(path: Path) -> list[dict]:
    out = []
    for line in path.read_text().splitlines():
        if ":::MLLOG " in line:
            out.append(json.loads(line.split(":::MLLOG ", 1)[1]))
    return out


def result_dir(root: Path, benchmark: str = "tiny_synthetic") -> Path:
    dirs = list((root / "results" / "reference" / "results").glob(f"*/{benchmark}"))
    assert len(dirs) == 1, dirs
    return dirs[0]


def wait_for_run_start(root: Path, benchmark: str = "tiny_synthetic", timeout: float = 240) -> Path:
    """Wait until run 0 of a set under ``root`` has logged ``run_start``; return the staging folder."""
    staging = root / "results" / ".harness" / "reference"
    deadline = time.time() + timeout
    while time.time() < deadline:
        staged = list(staging.glob(f"*/{benchmark}/result_0.txt"))
        if staged and "run_start" in staged[0].read_text():
            break
        time.sleep(0.2)
    return staging


def write_spec(tmp_path: Path, **changes) -> Path:
    spec = yaml.safe_load(FIXTURE.read_text())
    for dotted, value in changes.items():
        node = spec
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node[p]
        node[leaf] = value
    path = tmp_path / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.fixture(scope="module")
def run_set(tmp_path_factory):
    """One real run set of three runs with chosen seeds."""
    root = tmp_path_factory.mktemp("runset")
    proc = harness("run", "--benchmark", str(FIXTURE), "--seed", "100", "--threads", "1", cwd=root)
    assert proc.returncode == 0, proc.stderr
    return root, proc


@pytest.mark.slow
def test_run_set_writes_the_mlperf_layout(run_set):
    root, _ = run_set
    package = root / "results" / "reference"
    systems = list((package / "systems").glob("*.json"))
    assert len(systems) == 1
    desc = json.loads(systems[0].read_text())
    assert len(desc) == 33 and desc["submitter"] == "reference"
    rdir = result_dir(root)
    assert rdir.parent.name == systems[0].stem
    assert sorted(p.name for p in rdir.iterdir()) == ["result_0.txt", "result_1.txt", "result_2.txt"]


@pytest.mark.slow
def test_printed_score_equals_recomputation_from_log_timestamps(run_set):
    root, proc = run_set
    minutes = []
    for path in sorted(result_dir(root).glob("result_*.txt")):
        recs = records(path)
        start = [r["time_ms"] for r in recs if r["key"] == "run_start"]
        stop = [r for r in recs if r["key"] == "run_stop"]
        assert len(start) == 1 and len(stop) == 1 and stop[0]["metadata"]["status"] == "success"
        minutes.append((stop[0]["time_ms"] - start[0]) / 60000)
    expected = sorted(minutes)[1:-1]
    expected_score = sum(expected) / len(expected)
    score_line = [line for line in proc.stdout.splitlines() if line.startswith("score:")]
    assert len(score_line) == 1
    assert float(score_line[0].split()[1]) == pytest.approx(expected_score, abs=5e-7)
    spread = [line for line in proc.stdout.splitlines() if line.startswith("spread:")]
    assert len(spread) == 1 and "CV" in spread[0] and "bootstrap 95% interval" in spread[0]


@pytest.mark.slow
def test_every_log_carries_the_keys_mlperf_6_0_0_requires(run_set):
    import mlperf_logging

    rules_dir = Path(mlperf_logging.__file__).parent / "compliance_checker" / "training_6.0.0"
    required: list[tuple[str, str | None]] = []
    for name in ("common.yaml", "closed_common.yaml", "closed_dlrm_dcnv2.yaml"):
        for rule in yaml.safe_load((rules_dir / name).read_text()):
            key = rule.get("KEY")
            if not key:
                continue
            req = str(key.get("REQ", "OPTIONAL"))
            if req in ("EXACTLY_ONE", "AT_LEAST_ONE"):
                required.append((key["NAME"], None))
            elif req.startswith("AT_LEAST_ONE_OR("):
                required.append((key["NAME"], req[len("AT_LEAST_ONE_OR(") : -1]))
    assert len(required) >= 25  # the rule files were really read
    root, _ = run_set
    for path in sorted(result_dir(root).glob("result_*.txt")):
        keys = [r["key"] for r in records(path)]
        for key, alternative in required:
            assert key in keys or (alternative and alternative in keys), f"{path.name} lacks {key}"
        for key in ("init_stop", "run_start", "run_stop", "train_samples", "eval_samples", "submission_org"):
            assert keys.count(key) == 1, key
        assert keys.index("init_stop") < keys.index("run_start") < keys.index("eval_accuracy") < keys.index("run_stop")
        for key in ("lowest_numerical_precision_in_linear", "config_filename", "harness_fingerprint", "tracked_stats"):
            assert key in keys


@pytest.mark.slow
def test_the_set_runs_and_logs_the_native_precision_of_this_cpu(run_set):
    from harness.hw_profiles import detect, load_profile, native_precision
    from harness.reference.engine.trainer import EMBEDDING_PRECISION
    from harness.rules.precision import Precision

    detected = detect()
    name, reason = native_precision(load_profile("local", detected=detected), detected)
    root, proc = run_set
    assert f"precision {name} ({reason})" in proc.stdout.splitlines()
    mlperf_name = {"fp32": "fp32", "bf16": "bfloat16"}[name]  # a CPU's native precision is one of these
    reduced = Precision(name).reduced
    for path in sorted(result_dir(root).glob("result_*.txt")):
        values = {r["key"]: r["value"] for r in records(path)}
        assert values["lowest_numerical_precision_in_linear"] == mlperf_name
        assert values["lowest_numerical_precision_in_comm"] == "fp32"  # one rank: nothing of the tables is sent
        assert values[EMBEDDING_PRECISION] == {"tables": name, "optimizer_state": "fp32", "loss_scaling": False,
                                               "rounding": "stochastic" if reduced else "none"}
    # (harness check of these records under harness_1.0.0: tests/compliance/test_check_e2e.py, on dlrm_synthetic)


@pytest.mark.slow
def test_chosen_seeds_are_recorded_as_chosen(run_set):
    root, _ = run_set
    for i, path in enumerate(sorted(result_dir(root).glob("result_*.txt"))):
        seed = [r for r in records(path) if r["key"] == "seed"]
        assert seed[0]["value"] == 100 + i and seed[0]["metadata"]["seed_source"] == "user_chosen"


@pytest.mark.slow
def test_same_seed_list_gives_identical_eval_accuracy_sequences(tmp_path):
    spec = write_spec(tmp_path, **{"quality.target": 0.99})  # run the whole epoch: 4 evaluations
    curves = []
    for attempt in ("a", "b"):
        root = tmp_path / attempt
        root.mkdir()
        proc = harness("run", "--benchmark", str(spec), "--runs", "2", "--seed", "41", "--seed", "42", cwd=root)
        assert proc.returncode == 0, proc.stderr  # two runs: no score, but not a failure
        curves.append([
            [r["value"] for r in records(p) if r["key"] == "eval_accuracy"]
            for p in sorted(result_dir(root).glob("result_*.txt"))
        ])
    assert curves[0] == curves[1]
    assert len(curves[0]) == 2 and all(len(c) == 4 for c in curves[0])
    assert curves[0][0] != curves[0][1]  # different seeds, different curves


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "code", "said"), [(signal.SIGINT, 130, "interrupted"),
                                                      (signal.SIGTERM, 143, "interrupted by SIGTERM")])
def test_ctrl_c_or_sigterm_keeps_finished_runs_and_resume_completes_the_set(tmp_path, signum, code, said):
    """Ctrl-C, or the SIGTERM that a batch scheduler, ``timeout`` or a container stop sends."""
    # run 0 converges at once; run 1 is long enough to be interrupted
    spec = write_spec(tmp_path, **{"dataset.train_samples": 2_000_000, "quality.target": 0.51})
    root = tmp_path / "root"
    root.mkdir()
    proc = start_harness("run", "--benchmark", str(spec), "--runs", "2", "--seed", "1", cwd=root)
    staging = root / "results" / ".harness" / "reference"
    deadline = time.time() + 240
    staged_run_1 = None
    while time.time() < deadline and proc.poll() is None:
        candidates = list(staging.glob("*/tiny_synthetic/result_1.txt"))
        if candidates and "run_start" in candidates[0].read_text():
            staged_run_1 = candidates[0]
            break
        time.sleep(0.2)
    assert staged_run_1 is not None, f"run 1 never started: {proc.poll()} {proc.stderr.read() if proc.poll() is not None else ''}"
    # let it train a little, then press Ctrl-C (or send SIGTERM)
    time.sleep(1.0)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    assert "Traceback" not in err and f"{said} during run 2 (result_1.txt)" in err and "--resume" in err
    assert "the 1 finished run(s) are in" in err
    assert err.strip().splitlines()[-1].startswith(f"harness: error: {said} during run 2"), err
    assert not list(root.rglob("*.tmp-*"))
    rdir = result_dir(root)
    assert [p.name for p in rdir.glob("result_*.txt")] == ["result_0.txt"]
    interrupted = list(staged_run_1.parent.glob("result_1.interrupted-*.txt"))
    assert len(interrupted) == 1
    stops = [r for r in records(interrupted[0]) if r["key"] == "run_stop"]
    assert len(stops) == 1 and stops[0]["metadata"] == {**stops[0]["metadata"], "status": "aborted", "reason": said}
    if signum == signal.SIGINT:  # the resume below is the same after either
        return
    # the finished run is untouched by the resume
    before = (rdir / "result_0.txt").read_bytes()
    # without --resume the existing results are refused, and nothing changes
    refused = harness("run", "--benchmark", str(spec), "--runs", "2", cwd=root)
    assert refused.returncode == 2 and "--resume" in refused.stderr and "Traceback" not in refused.stderr
    resumed = harness("run", "--benchmark", str(spec), "--runs", "2", "--resume", "--seed", "1",
                      cwd=root, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    assert sorted(p.name for p in rdir.glob("result_*.txt")) == ["result_0.txt", "result_1.txt"]
    assert (rdir / "result_0.txt").read_bytes() == before
    stops = [r for r in records(rdir / "result_1.txt") if r["key"] == "run_stop"]
    assert len(stops) == 1 and stops[0]["metadata"]["status"] == "success"
    assert "score:" in resumed.stdout


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


RESUME_CHANGES = {  # the setting a resume changes -> the options that change it
    "division": ["--division", "open"],
    "status": ["--status", "Preview"],
    "seeds": ["--seed", "7"],
    "threads": ["--threads", "1"],
    "overlap": ["--no-overlap"],
    "embedding tier": ["--embedding-tier", "ssd"],
    "precision": ["--precision", "fp16"],  # never the native precision of a CPU (bf16 or fp32)
}


def test_a_resume_that_changes_a_setting_is_refused_naming_it_and_changes_nothing(tmp_path):
    spec = write_spec(tmp_path)
    root = tmp_path / "root"
    root.mkdir()
    first = harness("run", "--benchmark", str(spec), "--runs", "1", "--seed", "3", cwd=root)
    assert first.returncode == 0, first.stderr
    before = _tree(root / "results")
    for setting, options in RESUME_CHANGES.items():
        refused = harness("run", "--benchmark", str(spec), "--runs", "2", "--resume", "--seed", "3", *options,
                          cwd=root)
        assert refused.returncode == 2, (setting, refused.stderr)
        assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr, refused.stderr
        assert f"the set began with {setting} " in refused.stderr, (setting, refused.stderr)
        assert _tree(root / "results") == before, setting


def test_a_set_begun_before_precision_was_kept_resumes_only_in_fp32():
    from harness.errors import HarnessError
    from harness.runsets.manifest import check_resume_settings as _check_resume_settings

    began = {"division": "closed", "threads": None}  # a manifest written before precision was a setting
    _check_resume_settings(began, {"division": "closed", "threads": None, "precision": "fp32"})
    with pytest.raises(HarnessError, match=r"^--resume: the set began with precision fp32, this command has bf16;"):
        _check_resume_settings(began, {"division": "closed", "threads": None, "precision": "bf16"})


def test_a_manifest_written_with_names_resumes_a_set_planned_with_enums(tmp_path):
    """The request's closed choices are enums; the manifest keeps their names (as every set began
    before they were enums did), so a set's settings read back compare equal, and a changed one is
    still named. A name where an enum belongs is refused in one line."""
    from harness.errors import HarnessError
    from harness.reference.planner.codecs import CommConfig
    from harness.reference.planner.types import CachePolicy, CommPrecision
    from harness.rules.precision import Precision
    from harness.runsets.manifest import check_resume_settings as _check_resume_settings
    from harness.runsets.manifest import set_settings
    from harness.runsets.plan import plan_run_set
    from harness.runsets.request import EmbeddingTierChoice, RunSetRequest

    written = {  # a manifest's settings, as JSON kept them before the request held enums
        "communication codecs": {"allreduce": "fp32", "backward": "fp32", "forward": "fp32"}, "division": "closed",
        "embedding tier": {"cache_fraction": 0.05, "cache_policy": "lfu", "ssd_tables": [0, 3], "tier": "ssd"},
        "emulate": False, "overlap": True, "precision": "fp16", "seeds": "drawn",
        "status": "Research, Development, or Internal (RDI)", "submitter": "reference", "threads": None}
    request = RunSetRequest(benchmark=str(FIXTURE), profile="local", results_dir=tmp_path / "r",
                            embedding_tier=EmbeddingTierChoice.SSD, ssd_tables=(0, 3), cache_policy=CachePolicy.LFU,
                            precision=Precision.FP16)
    now = set_settings(plan_run_set(request))
    assert now == written and json.loads(json.dumps(now)) == now
    _check_resume_settings(json.loads(json.dumps(written)), now)
    lru = set_settings(plan_run_set(dataclasses.replace(request, cache_policy=CachePolicy.LRU)))
    with pytest.raises(HarnessError, match=r"^--resume: the set began with embedding tier .*cache_policy lfu.*, "
                                           r"this command has .*cache_policy lru"):
        _check_resume_settings(written, lru)
    codecs = CommConfig(forward=CommPrecision.FP16, backward=CommPrecision.INT8, allreduce=CommPrecision.BF16)
    sharded = set_settings(plan_run_set(RunSetRequest(benchmark=str(FIXTURE), profile="zionex-8gpu", emulate=True,
                                                      results_dir=tmp_path / "r", comm=codecs)))
    assert sharded["communication codecs"] == {"forward": "fp16", "backward": "int8", "allreduce": "bf16"}
    assert sharded["embedding tier"]["tier"] == "memory" and sharded["embedding tier"]["cache_policy"] == "lru"
    for slip in ({"embedding_tier": "ssd"}, {"cache_policy": "lfu"}, {"precision": "bf16"},
                 {"comm": (("forward", "fp16"),)}):
        with pytest.raises(HarnessError, match=f"^RunSetRequest.{next(iter(slip))} must be a ") as info:
            plan_run_set(dataclasses.replace(request, **slip))
        assert "\n" not in str(info.value)
    assert not (tmp_path / "r").exists()


@pytest.fixture
def submitters(tmp_path, monkeypatch):
    """A folder of submitter configs in place of the shipped one; write(org, precision) adds one."""
    import harness.submitters as subs

    root = tmp_path / "submitters"
    monkeypatch.setattr(subs, "submitters_root", lambda: root)

    def write(org: str, precision: dict) -> Path:
        path = root / org / "tiny_synthetic.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump({"submitter": org, "benchmark": "tiny_synthetic", "hyperparameters": {},
                                        "precision": precision}))
        return path

    return write


def test_the_precision_is_the_option_else_the_submitters_choice_for_the_system_else_native(tmp_path, submitters):
    from harness.hw_profiles import detect, load_profile, native_precision
    from harness.rules.precision import Precision
    from harness.rules.seeds import Seed, SeedSource
    from harness.runsets.manifest import set_settings
    from harness.runsets.plan import plan_run_set
    from harness.runsets.request import RunSetRequest
    from harness.runsets.workers import worker_config as _worker_config

    def plan(**request):
        return plan_run_set(RunSetRequest(**{"benchmark": str(FIXTURE), "profile": "local",
                                             "results_dir": tmp_path / "r", **request}))

    submitters("acme", {"local": "fp16", "*": "fp32"})
    chosen = plan(submitter="acme")
    assert (chosen.precision, chosen.precision_reason) == (
        Precision.FP16, "acme's choice for local in acme/tiny_synthetic.yaml")
    emulated = plan(submitter="acme", profile="zionex-8gpu", emulate=True)
    assert (emulated.precision, emulated.precision_reason) == (
        Precision.FP32, "acme's choice for every system in acme/tiny_synthetic.yaml")
    explicit = plan(submitter="acme", precision=Precision.BF16)
    assert (explicit.precision, explicit.precision_reason) == (Precision.BF16, "--precision")
    detected = detect()
    native = plan()  # the reference submitter has no config
    name, reason = native_precision(load_profile("local", detected=detected), detected)
    assert (native.precision.value, native.precision_reason) == (name, reason)
    for p in (chosen, emulated, explicit, native):
        config = _worker_config(p, 0, Seed(1, SeedSource.USER), tmp_path / "log.txt", None)
        assert config.precision == set_settings(p)["precision"] == p.precision.value
    assert len({chosen.fingerprint, explicit.fingerprint, plan(precision=Precision.FP32).fingerprint}) == 3


def test_16_bit_tables_behind_caches_keep_their_precision_and_the_plans_count_their_bytes(tmp_path):
    """Tables on the SSD tier (one rank) and DDR shards behind HBM caches (sharded) run in the
    precision asked, and the plans count their weights in its bytes (half of fp32's)."""
    from harness.rules.precision import Precision
    from harness.runsets.plan import plan_run_set
    from harness.runsets.request import EmbeddingTierChoice, RunSetRequest

    def ssd(**request):
        return plan_run_set(RunSetRequest(benchmark=str(FIXTURE), profile="local", results_dir=tmp_path / "r",
                                          embedding_tier=EmbeddingTierChoice.SSD, ssd_tables=(0, 3), **request))

    def small_hbm(**request):  # its HBM cannot hold the default benchmark: DDR shards behind caches
        return plan_run_set(RunSetRequest(benchmark="dlrm_synthetic", profile=str(FIXTURE.parent / "small_hbm_4gpu.yaml"),
                                          emulate=True, results_dir=tmp_path / "r", **request))

    def bytes_per_value(plan):
        """Each shard's bytes per weight value (the plans of two precisions may shard differently)."""
        plan = (plan.tier_plan or plan.sharding_plan).to_dict()
        return {s["storage_bytes"] / (s["rows"] * s["cols"]) for t in plan["tables"] for s in t["shards"]}

    def tiers(plan):
        return {s["tier"] for t in (plan.tier_plan or plan.sharding_plan).to_dict()["tables"] for s in t["shards"]}

    for make, slow in ((ssd, "ssd"), (small_hbm, "ddr")):
        full, half = make(precision=Precision.FP32), make(precision=Precision.FP16)
        assert (full.precision, half.precision) == (Precision.FP32, Precision.FP16)
        assert slow in tiers(full) and slow in tiers(half)
        # Adagrad: 2 + 4 bytes per value (fp16 weights, fp32 state) against 4 + 4
        assert (bytes_per_value(half), bytes_per_value(full)) == ({6.0}, {8.0})
    assert not (tmp_path / "r").exists()


def test_a_submitter_config_with_an_unknown_precision_is_refused_in_one_line(tmp_path, submitters, capsys):
    from harness.cli import main

    submitters("acme", {"local": "bf17"})
    code = main(["run", "--benchmark", str(FIXTURE), "--submitter", "acme", "--results", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert "submitter config acme/tiny_synthetic.yaml is invalid: precision/local: 'bf17' is not one of" in err
    assert not (tmp_path / "r").exists()
    assert main(["run", "--precision", "fp8"]) == 2
    assert "Invalid value for '--precision'" in capsys.readouterr().err


def test_unknown_benchmark_is_one_line_and_exit_2(tmp_path):
    proc = harness("run", "--benchmark", "no_such_benchmark", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "unknown benchmark 'no_such_benchmark'" in proc.stderr
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("benchmark", ["dlrm_dcnv2", "dlrmv4"])
def test_a_real_data_benchmark_without_its_data_is_refused_clearly(tmp_path, benchmark):
    proc = harness("run", "--benchmark", benchmark, cwd=tmp_path)
    assert proc.returncode == 2 and "give the dataset's folder with --data PATH" in proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr
    assert not (tmp_path / "results").exists()


@pytest.mark.slow
def test_a_killed_worker_leaves_its_log_ending_aborted_and_a_one_line_error(tmp_path):
    spec = write_spec(tmp_path, **{"dataset.train_samples": 2_000_000, "quality.target": 0.99})
    root = tmp_path / "root"
    root.mkdir()
    proc = start_harness("run", "--benchmark", str(spec), "--runs", "3", cwd=root)
    staging = wait_for_run_start(root)
    workers = ranks_below(proc.pid)  # forked from the set's fork server (harness.reference.forked)
    assert len(workers) == 1
    os.kill(int(workers[0]), signal.SIGKILL)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1
    error_lines = [line for line in err.splitlines() if line.startswith("harness: error:")]
    assert len(error_lines) == 1 and "run 1 (result_0.txt) failed" in error_lines[0] and "Traceback" not in err
    failed = list(staging.glob("*/tiny_synthetic/result_0.failed-*.txt"))
    assert len(failed) == 1
    recs = records(failed[0])
    assert recs[-1]["key"] == "run_stop" and recs[-1]["metadata"]["status"] == "aborted"
    assert not list((root / "results" / "reference" / "results").glob("*/tiny_synthetic/result_*.txt"))


def test_a_set_that_fails_compliance_exits_1(tmp_path):
    # results under a v6.0 round folder are judged by MLPerf's v6.0 rules, of which the tiny
    # benchmark is not part: a scored set that fails its compliance check
    spec = write_spec(tmp_path)
    root = tmp_path / "root"
    root.mkdir()
    proc = harness("run", "--benchmark", str(spec), "--results", "v6.0", cwd=root)
    assert "run set FAIL" in proc.stdout and "score:" in proc.stdout, proc.stdout + proc.stderr
    assert proc.returncode == 1, proc.stderr


def _reference_set(dst: Path, runs: int) -> Path:
    src = Path(__file__).resolve().parents[1] / "harness" / "rules" / "reference_runs" / "dlrm_synthetic"
    dst.mkdir(parents=True)
    for i, log in enumerate(sorted(src.glob("result_*.txt"))[:runs]):
        (dst / f"result_{i}.txt").write_text(log.read_text().replace('"status": "aborted"', '"status": "success"'))
    return dst


def test_a_set_asked_to_be_short_is_incomplete_not_failed(tmp_path, capsys):
    from harness.cli.run import _compliance

    short = _reference_set(tmp_path / "short" / "dlrm_synthetic", runs=2)
    assert _compliance(short, short_by_request=True).acceptable is True
    assert "run set incomplete (fewer runs than the benchmark requires, as asked)" in capsys.readouterr().out
    assert _compliance(short, short_by_request=False).acceptable is False  # not asked: a set that fails
    assert "run set FAIL" in capsys.readouterr().out
    full = _reference_set(tmp_path / "full" / "dlrm_synthetic", runs=5)
    assert _compliance(full, short_by_request=False).acceptable is True


def _fail_log(log: Path) -> None:
    """The log's run never reaches the target (every eval_accuracy 0.5): it fails its own check."""
    log.write_text(re.sub(r'("key": "eval_accuracy", "value": )[0-9.e-]+', r"\g<1>0.5", log.read_text()))


def test_one_failing_log_of_a_full_set_is_accepted_and_of_a_short_set_is_not(tmp_path, capsys):
    """As MLPerf's package checker: a full set with one log that fails is accepted under olympic
    scoring (said on the compliance line), two are not; a set asked to be short with a failing
    log fails (the acceptance is a full set's)."""
    from harness.cli.run import _compliance

    full = _reference_set(tmp_path / "full" / "dlrm_synthetic", runs=5)
    _fail_log(full / "result_0.txt")
    v = _compliance(full, short_by_request=False)
    out = capsys.readouterr().out
    assert v.acceptable and (v.passing_logs, v.logs) == (4, 5) and v.first_error is None
    assert "4/5 logs pass; run set pass (1 log does not comply (result_0.txt): accepted under olympic scoring" in out
    _fail_log(full / "result_1.txt")
    assert _compliance(full, short_by_request=False).acceptable is False
    assert "3/5 logs pass; run set FAIL" in capsys.readouterr().out
    short = _reference_set(tmp_path / "short" / "dlrm_synthetic", runs=2)
    _fail_log(short / "result_1.txt")
    assert _compliance(short, short_by_request=True).acceptable is False
    assert "1/2 logs pass; run set FAIL: no eval_accuracy record" in capsys.readouterr().out


def test_harness_run_exits_1_when_the_set_fails_its_check_or_has_runs_enough_and_no_score(tmp_path):
    from harness.rules.scoring import Score
    from harness.rules.seeds import Seed, SeedSource
    from harness.runsets.score import RunOutcome, RunSetOutcome
    from harness.runsets.verdict import ComplianceVerdict, SetVerdict, compliance_verdict, run_set_fails

    short = _reference_set(tmp_path / "short" / "dlrm_synthetic", runs=2)
    v = compliance_verdict(short, short_by_request=True)
    assert (v.verdict, v.passing_logs, v.logs) == (SetVerdict.INCOMPLETE, 2, 2) and "run set" in v.first_error
    assert compliance_verdict(short, short_by_request=False).verdict is SetVerdict.FAIL
    assert compliance_verdict(tmp_path / "nothing here", short_by_request=False).verdict is SetVerdict.NOT_CHECKED

    def outcome(runs: int, scored: bool) -> RunSetOutcome:
        return RunSetOutcome(runs=[RunOutcome(i, Seed(i, SeedSource.USER), tmp_path, 1.0, True, 0.8)
                                   for i in range(runs)],
                             score=Score(1.0, (1.0,), runs, 0) if scored else None)

    for verdict in (SetVerdict.PASS, SetVerdict.INCOMPLETE, SetVerdict.NOT_CHECKED):
        ok = ComplianceVerdict(verdict)
        assert not run_set_fails(outcome(5, True), ok)
        assert not run_set_fails(outcome(2, False), ok)  # too few runs for an olympic mean: no score, as expected
        assert run_set_fails(outcome(3, False), ok)  # runs enough, and still no score
    failed = ComplianceVerdict(SetVerdict.FAIL)
    assert run_set_fails(outcome(5, True), failed) and run_set_fails(outcome(1, False), failed)


def test_ctrl_c_before_any_run_finished_points_to_no_missing_folder(tmp_path):
    spec = write_spec(tmp_path, **{"dataset.train_samples": 2_000_000, "quality.target": 0.99})
    root = tmp_path / "root"
    root.mkdir()
    proc = start_harness("run", "--benchmark", str(spec), "--runs", "2", cwd=root)
    wait_for_run_start(root)
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    [line] = [line for line in err.splitlines() if line.startswith("harness: error:")]
    assert "interrupted during run 1 (result_0.txt)" in line
    assert "no run of the set had finished; the same command starts it again" in line
    assert "finished run(s) are in" not in line
    kept = line.split("is kept at ", 1)[1].split(";", 1)[0]
    assert Path(root, kept).is_file()  # every folder the message names exists
