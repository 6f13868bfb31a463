"""Every hyperparameter a spec or config names is one the engine applies, or it is refused at load time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.errors import ErrorCategory, HarnessError
from harness.rules.hyperparameters import VOCABULARY, check_hyperparameters, schedule_values
from harness.rules.specs import load_benchmark, spec_from_dict
from harness.submitters import effective_hyperparameters

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "tiny_benchmark.yaml"


def tiny(**hp) -> dict:
    raw = yaml.safe_load(FIXTURE.read_text())
    raw["reference_hyperparameters"].update(hp)
    return raw


def refused(raw: dict) -> str:
    with pytest.raises(HarnessError) as info:
        spec_from_dict(raw, what="benchmark file tiny.yaml")
    assert info.value.category is ErrorCategory.BAD_INPUT
    message = str(info.value)
    assert "\n" not in message and message.startswith("benchmark file tiny.yaml")
    return message


def test_the_shipped_benchmarks_name_only_what_the_engine_implements():
    for name in ("dlrm", "dlrm_dcnv2", "dlrm_synthetic"):
        hp = load_benchmark(name).reference_hyperparameters
        assert set(hp) <= set(VOCABULARY)
        check_hyperparameters(hp, what=name)


@pytest.mark.parametrize(("change", "why"), [
    ({"opt_lamb_beta1": 0.9}, "'opt_lamb_beta1' is not implemented by the reference engine"),
    ({"opt_weight_decay": 1e-5}, "only 0 is implemented"),
    ({"opt_learning_rate_warmup_steps": -1}, "must be an integer >= 0"),
    ({"opt_learning_rate_warmup_steps": 10, "opt_learning_rate_decay_start_step": 5,
      "opt_learning_rate_decay_steps": 5}, "decay starts at step 5, before the 10 warmup steps end"),
    ({"opt_learning_rate_decay_steps": 5, "sgd_opt_learning_rate_decay_steps": 6}, "name the same value but differ"),
    ({"opt_adagrad_epsilon": 0}, "must be > 0"),
])
def test_a_spec_naming_what_the_engine_does_not_do_is_refused(change, why):
    assert why in refused(tiny(**change))


def test_gradient_accumulation_other_than_one_is_refused():
    raw = tiny()
    raw["reference_hyperparameters"]["gradient_accumulation_steps"] = 2
    refused(raw)  # the schema's `const: 1`, then the vocabulary's own check
    with pytest.raises(HarnessError, match="every backward is a step"):
        check_hyperparameters({**raw["reference_hyperparameters"]}, what="x")


def test_adagrad_settings_are_refused_with_sgd():
    raw = tiny(opt_name="sgd")
    assert "opt_adagrad_epsilon applies to Adagrad, but opt_name is 'sgd'" in refused(raw)


def test_both_naming_families_give_the_same_schedule():
    dlrm = schedule_values(load_benchmark("dlrm").reference_hyperparameters)
    assert dlrm == {"base_learning_rate": 24.0, "warmup_steps": 2750, "decay_start_step": 49315,
                    "decay_steps": 27772, "decay_power": 2.0, "adagrad_lr_decay": 0.0,
                    "sparse_base_learning_rate": 24.0}
    dcn = schedule_values(load_benchmark("dlrm_dcnv2").reference_hyperparameters)
    assert (dcn["warmup_steps"], dcn["decay_start_step"], dcn["decay_steps"]) == (0, 0, 0)


def test_a_submitter_config_naming_an_unknown_hyperparameter_is_refused(tmp_path, monkeypatch):
    import harness.submitters as subs

    (tmp_path / "acme").mkdir()
    monkeypatch.setattr(subs, "submitters_root", lambda: tmp_path)
    (tmp_path / "acme" / "dlrm_synthetic.yaml").write_text(yaml.safe_dump({
        "submitter": "acme", "benchmark": "dlrm_synthetic", "hyperparameters": {"opt_momentum": 0.9},
    }))
    with pytest.raises(HarnessError, match="submitter config acme/dlrm_synthetic.yaml: hyperparameter 'opt_momentum'"):
        effective_hyperparameters(load_benchmark("dlrm_synthetic"), "acme", "open")


def test_harness_run_refuses_such_a_spec_in_one_line_before_writing_anything(tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text(yaml.safe_dump(tiny(opt_weight_decay=0.01)))
    proc = subprocess.run([sys.executable, "-m", "harness", "run", "--benchmark", str(spec)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "opt_weight_decay = 0.01: only 0 is implemented" in proc.stderr
    assert not (tmp_path / "results").exists()
