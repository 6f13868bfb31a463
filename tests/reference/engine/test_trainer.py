"""The trainer in-process on a tiny benchmark: MLPerf events, eval cadence, stop conditions."""

import dataclasses
from pathlib import Path

import pytest
import yaml

from harness.hw_profiles.profiles import DeviceType, bare_cpu_profile
from harness.reference.engine.mlperf_log import parse_records
from harness.reference.engine.session import TrainingSession
from harness.reference.engine.trainer import RunConfig
from harness.reference.planner.codecs import CommConfig
from harness.reference.runs import run_from_config
from harness.rules.specs import spec_from_dict

FIXTURE = Path(__file__).parents[2] / "fixtures" / "tiny_benchmark.yaml"


def config(tmp_path, *, target=None, seed=3, **spec_changes) -> RunConfig:
    spec = yaml.safe_load(FIXTURE.read_text())
    if target is not None:
        spec["quality"]["target"] = target
    spec.update(spec_changes)
    return RunConfig(
        benchmark=spec_from_dict(spec, what="the tiny benchmark"), hyperparameters=spec["reference_hyperparameters"],
        profile=bare_cpu_profile(), seed=seed,
        seed_source="user_chosen", submitter="acme", division="closed", status="research", platform="box",
        log_path=str(tmp_path / f"log-{seed}.txt"), fingerprint="sha256:" + "ab" * 32, config_filename="tiny.yaml",
        threads=1,
    )


def test_eval_cadence_is_every_fraction_of_the_epoch(tmp_path):
    cfg = config(tmp_path)
    assert TrainingSession(cfg).eval_steps() == [8, 16, 24, 32]  # 32,768 samples, batch 1,024
    steps = TrainingSession(dataclasses.replace(cfg, hyperparameters={**cfg.hyperparameters,
                                                                      "global_batch_size": 64})).eval_steps()
    assert steps == [128, 256, 384, 512]


def test_run_to_the_epoch_limit_is_aborted_with_every_eval_logged(tmp_path):
    cfg = config(tmp_path, target=0.99)
    result = run_from_config(cfg)
    assert result.status == "aborted" and "epoch limit" in result.reason
    recs = parse_records(Path(cfg.log_path))
    evals = [r for r in recs if r["key"] == "eval_accuracy"]
    assert [r["metadata"]["epoch_num"] for r in evals] == [0.25, 0.5, 0.75, 1.0]
    assert [e for _, e in result.eval_accuracies] == [r["value"] for r in evals]
    stop = [r for r in recs if r["key"] == "run_stop"]
    assert len(stop) == 1 and stop[0]["metadata"]["status"] == "aborted"
    assert evals[-1]["value"] > 0.55  # it learned something


def test_reaching_the_target_stops_with_success_at_that_eval(tmp_path):
    cfg = config(tmp_path, target=0.52)
    result = run_from_config(cfg)
    assert result.status == "success"
    recs = parse_records(Path(cfg.log_path))
    keys = [r["key"] for r in recs]
    assert keys.index("run_stop") == keys.index("eval_stop") + 1
    assert recs[keys.index("run_stop")]["metadata"]["status"] == "success"
    assert recs[keys.index("eval_accuracy")]["value"] >= 0.52


def test_same_seed_same_curve_bit_for_bit(tmp_path):
    a = run_from_config(config(tmp_path, target=0.99, seed=9))
    Path(config(tmp_path, seed=9).log_path).rename(tmp_path / "first.txt")
    b = run_from_config(config(tmp_path, target=0.99, seed=9))
    assert a.eval_accuracies == b.eval_accuracies and len(a.eval_accuracies) == 4
    c = run_from_config(config(tmp_path, target=0.99, seed=10))
    assert c.eval_accuracies != a.eval_accuracies


def test_run_start_comes_before_any_sample_is_made(tmp_path, monkeypatch):
    from harness.reference.data import synthetic

    cfg = config(tmp_path, target=0.99)
    touched_after_run_start = []
    real = synthetic.SyntheticCriteo.samples

    def spy(self, idx):
        keys = [r["key"] for r in parse_records(Path(cfg.log_path))]
        touched_after_run_start.append("run_start" in keys)
        return real(self, idx)

    monkeypatch.setattr(synthetic.SyntheticCriteo, "samples", spy)
    run_from_config(cfg)
    assert touched_after_run_start and all(touched_after_run_start)


def test_interrupt_ends_the_log_aborted(tmp_path, monkeypatch):
    cfg = config(tmp_path, target=0.99)
    calls = {"n": 0}
    real_step = __import__("torch").optim.Adagrad.step

    def interrupting_step(self, *a, **k):
        calls["n"] += 1
        if calls["n"] == 5:
            raise KeyboardInterrupt
        return real_step(self, *a, **k)

    monkeypatch.setattr("torch.optim.Adagrad.step", interrupting_step)
    with pytest.raises(KeyboardInterrupt):
        run_from_config(cfg)
    stop = [r for r in parse_records(Path(cfg.log_path)) if r["key"] == "run_stop"]
    assert len(stop) == 1 and stop[0]["metadata"]["status"] == "aborted" and stop[0]["metadata"]["reason"] == "interrupted"


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA device (none in CI)")
def test_one_gpu_run_is_deterministic(tmp_path):
    runs = []
    for name in ("a", "b"):
        cfg = dataclasses.replace(config(tmp_path, target=0.99, seed=5), profile=dataclasses.replace(bare_cpu_profile(), device_type=DeviceType.CUDA),
                                  log_path=str(tmp_path / f"{name}.txt"))
        runs.append(run_from_config(cfg).eval_accuracies)
    assert runs[0] == runs[1] and len(runs[0]) == 4 and runs[0][-1][1] > 0.55


@pytest.mark.parametrize(("precision", "world_size", "comm", "linear", "wire", "tables"), [
    ("fp32", 1, {}, "fp32", "fp32", {"tables": "fp32", "rounding": "none", "loss_scaling": False}),
    ("bf16", 1, {}, "bfloat16", "fp32", {"tables": "bf16", "rounding": "stochastic", "loss_scaling": False}),
    ("fp16", 1, {}, "fp16", "fp32", {"tables": "fp16", "rounding": "stochastic", "loss_scaling": True}),
    # several ranks: the pooled embeddings cross in the tables' type, below an fp32 codec
    ("bf16", 2, {}, "bfloat16", "bfloat16", {"tables": "bf16", "rounding": "stochastic", "loss_scaling": False}),
    ("fp16", 2, {"allreduce": "bf16"}, "fp16", "fp16", {"tables": "fp16", "rounding": "stochastic", "loss_scaling": True}),
    ("bf16", 2, {"forward": "fp16"}, "bfloat16", "fp16", {"tables": "bf16", "rounding": "stochastic", "loss_scaling": False}),
    ("bf16", 2, {"backward": "int8"}, "bfloat16", "int8", {"tables": "bf16", "rounding": "stochastic", "loss_scaling": False}),
    ("fp32", 2, {"forward": "fp8"}, "fp32", "fp8", {"tables": "fp32", "rounding": "none", "loss_scaling": False}),
])
def test_the_log_states_the_runs_precision(tmp_path, precision, world_size, comm, linear, wire, tables):
    """MLPerf's two keys (as MLPerf spells them) and the tables' record, each validated by the
    record schema as it is written."""
    from harness.reference.engine.mlperf_log import MLPerfLog
    from harness.reference.engine.trainer import EMBEDDING_PRECISION, Trainer

    cfg = dataclasses.replace(config(tmp_path), precision=precision, world_size=world_size,
                              comm=CommConfig.from_names(comm))
    log = MLPerfLog(Path(cfg.log_path))
    Trainer(cfg, log)._log_init_start()
    log.close()
    values = {r["key"]: r["value"] for r in parse_records(Path(cfg.log_path))}
    assert values["lowest_numerical_precision_in_linear"] == linear
    assert values["lowest_numerical_precision_in_comm"] == wire
    assert values[EMBEDDING_PRECISION] == {**tables, "optimizer_state": "fp32"}


def test_a_run_config_of_an_unknown_precision_is_refused_in_one_line(tmp_path):
    from harness.errors import HarnessError
    from harness.reference.engine.trainer import Trainer

    with pytest.raises(HarnessError, match=r"^the run config's precision must be one of fp32, bf16, fp16, not 'fp8'$"):
        Trainer(dataclasses.replace(config(tmp_path), precision="fp8"))
