"""The rule sets are valid data, and agree with the benchmark specs they restate."""

from __future__ import annotations

from pathlib import Path

import pytest

from compliance import engine
from compliance.engine import RULESETS, load_rule_file, ruleset_names
from harness.errors import HarnessError
from harness.rules.specs import load_benchmark


def test_every_rule_file_is_schema_valid_and_resolves():
    names = ruleset_names()
    assert {f"training_{v}" for v in ("0.7.0", "1.0.0", "1.1.0", "2.0.0", "2.1.0", "3.0.0", "3.1.0", "4.0.0", "4.1.0",
                                      "5.0.0", "5.1.0", "6.0.0")} <= set(names)
    count = 0
    for name in names:
        for path in RULESETS.joinpath(name).iterdir():
            rules = load_rule_file(name, path.name.removesuffix(".yaml"))
            assert rules is not None and rules["keys"], path
            count += 1
    assert count >= 60


@pytest.mark.parametrize("benchmark, ruleset", [
    ("dlrm_synthetic", "harness_1.0.0"), ("dlrm_dcnv2", "training_6.0.0"), ("dlrm", "training_2.1.0"),
])
def test_benchmark_rules_equal_the_spec(benchmark, ruleset):
    spec = load_benchmark(benchmark)
    assert spec.compliance_ruleset == ruleset
    rules = load_rule_file(ruleset, f"closed_{benchmark}")
    assert rules["keys"]["eval_accuracy"]["at_least_one"]["min"] == spec.target_auc
    assert rules["run_set"]["runs"] == spec.required_runs
    assert rules["run_set"]["max_non_converged"] == spec.max_non_converged_runs
    fixed = {k: c["value"]["equals"] for k, r in rules["keys"].items() for c in r.get("checks", [])
             if "value" in c and "equals" in c["value"]}
    for key, value in fixed.items():
        if key == "eval_samples":
            assert value == spec.dataset["eval_samples"]
        elif key == "train_samples":
            assert value == spec.dataset["train_samples"]
        else:
            assert spec.reference_hyperparameters[key] == value, key
    assert fixed  # something is fixed in every closed DLRM division


def test_a_check_outside_the_vocabulary_is_refused(tmp_path, monkeypatch):
    bad = tmp_path / "bad_1.0.0"
    bad.mkdir()
    (bad / "common.yaml").write_text(
        "description: x\nkeys:\n  run_start:\n    checks: [{python: \"__import__('os').system('true')\"}]\n")
    monkeypatch.setattr(engine, "RULESETS", tmp_path)
    engine.load_rule_file.cache_clear()
    try:
        with pytest.raises(HarnessError, match="bad_1.0.0/common.yaml is invalid"):
            engine.check_log(Path(__file__), "bad_1.0.0")
    finally:
        engine.load_rule_file.cache_clear()
