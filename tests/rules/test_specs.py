"""Benchmark specs: schema, the official dlrm_dcnv2 values against mlperf_logging's own rules."""

import re
from pathlib import Path

import mlperf_logging
import pytest
import yaml

from harness.errors import ErrorCategory, HarnessError
from harness.rules.specs import benchmark_names, load_benchmark, spec_from_dict

RULES = Path(mlperf_logging.__file__).parent / "compliance_checker" / "training_6.0.0"


def _official_rules() -> dict[str, dict]:
    rules = {}
    for name in ("common.yaml", "closed_common.yaml", "closed_dlrm_dcnv2.yaml"):
        for rule in yaml.safe_load((RULES / name).read_text()):
            if "KEY" in rule:
                rules.setdefault(rule["KEY"]["NAME"], {}).update(rule["KEY"])
    return rules


def _literal(text: str):
    """A Python literal from a rule's CHECK string: a number, or a quoted string."""
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return text.strip("'\"")


def test_every_shipped_benchmark_loads():
    assert {"dlrm_dcnv2", "dlrm_synthetic"} <= set(benchmark_names())
    for name in benchmark_names():
        assert load_benchmark(name).name == name


def test_dlrm_dcnv2_fixed_hyperparameters_equal_the_official_rules():
    spec = load_benchmark("dlrm_dcnv2")
    rules = _official_rules()
    checked = 0
    for key, value in spec.reference_hyperparameters.items():
        check = str(rules.get(key, {}).get("CHECK", ""))
        m = re.fullmatch(r"\s*v\['value'\] == (.+?)\s*", check)
        if m is None:
            continue
        official = _literal(m.group(1))
        assert value == official, key
        checked += 1
    assert checked >= 8  # opt_* and the rest really were compared
    assert spec.reference_hyperparameters["opt_name"] == "adagrad"


def test_dlrm_dcnv2_target_eval_samples_and_tunables_equal_the_official_rules():
    spec = load_benchmark("dlrm_dcnv2")
    rules = _official_rules()
    m = re.search(r"v\['value'\] >= ([0-9.]+)", rules["eval_accuracy"]["ATLEAST_ONE_CHECK"])
    assert spec.target_auc == float(m.group(1)) == 0.80275
    m = re.search(r"== ([0-9]+)", rules["eval_samples"]["CHECK"])
    assert spec.dataset["eval_samples"] == int(m.group(1))
    assert spec.required_runs == 10 and spec.max_epochs == 1 and spec.eval_every_epoch_fraction == 0.05
    assert spec.tunable_hyperparameters == {"global_batch_size", "opt_base_learning_rate"}
    # every hyperparameter the official rules require is in the spec
    for key, rule in rules.items():
        if (key.startswith("opt_") or key in ("global_batch_size", "gradient_accumulation_steps")) and rule.get("REQ") == "EXACTLY_ONE":
            assert key in spec.reference_hyperparameters, key


def test_synthetic_default_is_calibrated_below_the_teacher():
    spec = load_benchmark("dlrm_synthetic")
    cal = spec.raw["quality"]["calibration"]
    assert cal["runs_reaching_target"] >= 0.9 * len(cal["reference_seeds"])
    assert spec.target_auc < cal["teacher_best_auc"]
    assert spec.target_auc == pytest.approx(cal["teacher_best_auc"] - cal["gap_below_teacher_best_auc"], abs=1e-4)
    assert spec.raw["dataset"]["best_auc"] == pytest.approx(cal["teacher_best_auc"], abs=1e-4)


def test_a_spec_missing_a_field_is_refused_naming_it():
    raw = dict(load_benchmark("dlrm_synthetic").raw)
    del raw["required_runs"]
    with pytest.raises(HarnessError, match="'required_runs' is a required property") as err:
        spec_from_dict(raw, what="x.yaml")
    assert err.value.category is ErrorCategory.BAD_INPUT


def test_unknown_benchmark_lists_the_known_ones():
    with pytest.raises(HarnessError, match="known: .*dlrm_dcnv2") as err:
        load_benchmark("nope")
    assert err.value.category is ErrorCategory.NOT_FOUND
