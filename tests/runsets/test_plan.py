"""Planning a run set: the precision (the option, else the submitter's choice for the system, else
the machine's native one) and an emulated multi-rank profile's plan (its sharding plan, codecs,
system name, fingerprint and torchrun command)."""

from __future__ import annotations

from pathlib import Path

from compliance.schemas import schema_errors
from harness.reference.planner.codecs import CommConfig
from harness.reference.planner.types import CommPrecision
from harness.runsets.launch import worker_command
from harness.runsets.plan import plan_run_set
from harness.runsets.request import RunSetRequest
from tests.support.runs import FIXTURE, submitters  # noqa: F401 - the fixture


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


def test_an_emulated_plan_has_a_sharding_plan_and_an_emulated_system(tmp_path):
    request = RunSetRequest(benchmark=str(FIXTURE), profile="zionex-8gpu", results_dir=tmp_path, emulate=True,
                            comm=CommConfig(forward=CommPrecision.FP16, backward=CommPrecision.BF16))
    plan = plan_run_set(request)
    assert plan.emulated and plan.world_size == 8 and plan.system == "zionex-8gpu-emulated"
    assert plan.comm.to_names() == {"forward": "fp16", "backward": "bf16", "allreduce": "fp32"}
    assert plan.sharding_plan is not None and plan.sharding_plan.to_dict()["world_size"] == 8
    assert schema_errors(plan.sharding_plan.to_dict(), "sharding_plan") == []
    # the codecs are part of what the run set's results depend on
    fp32 = plan_run_set(RunSetRequest(benchmark=str(FIXTURE), profile="zionex-8gpu", results_dir=tmp_path, emulate=True))
    assert fp32.fingerprint != plan.fingerprint
    cmd = worker_command(Path("c.json"), plan.world_size)
    assert cmd[1:5] == ["-m", "harness.runsets.torchrun", "--standalone", "--nproc-per-node=8"]


def test_harness_run_refuses_an_inference_benchmark_in_one_line(tmp_path, capsys):
    """dlrm-v3 is MLPerf Inference's: `harness run` trains MLPerf Training benchmarks only, and says what plans it."""
    from harness.cli import main

    code = main(["run", "--benchmark", "dlrm-v3", "--results", str(tmp_path / "results")])
    out = capsys.readouterr()
    assert (code, out.out, out.err.count("\n")) == (2, "", 1)
    assert out.err == ("harness: error: harness run is for MLPerf Training benchmarks; dlrm-v3 is an MLPerf Inference "
                       "benchmark (suite: inference): `harness plan --benchmark dlrm-v3 --profile P` places its tables "
                       "and projects its Server QPS bound\n")
    assert not (tmp_path / "results").exists()
