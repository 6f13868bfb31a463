"""The rule sets are valid data, and agree with the benchmark specs they restate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compliance import engine
from compliance.engine import RULESETS, load_rule_file, ruleset_names
from harness.errors import HarnessError
from harness.rules.specs import load_benchmark


def test_every_rule_file_is_schema_valid_and_resolves():
    names = ruleset_names()
    assert {f"training_{v}" for v in ("0.7.0", "1.0.0", "1.1.0", "2.0.0", "2.1.0", "3.0.0", "3.1.0", "4.0.0", "4.1.0",
                                      "5.0.0", "5.1.0", "6.0.0", "6.1.0")} <= set(names)
    count = 0
    for name in names:
        for path in RULESETS.joinpath(name).iterdir():
            rules = load_rule_file(name, path.name.removesuffix(".yaml"))
            assert rules is not None and rules["keys"], path
            count += 1
    assert count >= 65
    # the record that lets `harness check` skip validating them again: every bundled file, as is
    # (in the files' order, which is the order derived quantities are evaluated in)
    recorded = json.loads(engine.VALIDATED.read_text())
    assert json.dumps(recorded) == json.dumps(engine.validated_digests()), "rule files changed: run python -m compliance.engine"


def test_a_bundled_rule_file_that_was_changed_is_validated_again(tmp_path, monkeypatch):
    """The record covers a file's exact content: an edited copy is checked against the schema."""
    bad = tmp_path / "training_4.1.0"
    bad.mkdir()
    (bad / "common.yaml").write_text(RULESETS.joinpath("training_4.1.0", "common.yaml").read_text()
                                     + "\nunknown_field: 1\n")
    monkeypatch.setattr(engine, "RULESETS", tmp_path)
    engine.load_rule_file.cache_clear()
    try:
        with pytest.raises(HarnessError, match="training_4.1.0/common.yaml is invalid"):
            engine.load_rule_file("training_4.1.0", "common")
    finally:
        engine.load_rule_file.cache_clear()


@pytest.mark.parametrize("benchmark, ruleset", [
    ("dlrm_synthetic", "harness_1.0.0"), ("dlrm_dcnv2", "training_6.0.0"), ("dlrm", "training_2.1.0"),
    ("dlrmv4_synthetic", "harness_1.0.0"),
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
    logged = {"opt_name": {"adam": "Adam"}}  # spec values logged as MLPerf names them
    for key, value in fixed.items():
        if key == "opt_sparse_base_learning_rate":  # the one tunable rate drives both channels
            assert value == {"derived": "opt_base_learning_rate"}
            assert spec.reference_hyperparameters[key] == spec.reference_hyperparameters["opt_base_learning_rate"]
            continue
        if isinstance(value, dict):  # a derived quantity: its initial value
            value = rules["derive"][value["derived"]]["initial"]
        if key in ("eval_samples", "train_samples", "max_sequence_length"):
            assert value == spec.dataset[key], key
        elif key == "eval_every_data_pct":
            assert value == spec.eval_every_data_fraction
        else:
            hp = spec.reference_hyperparameters[key]
            assert logged.get(key, {}).get(hp, hp) == value, key
    if spec.eval_in_samples:  # the grid and the learning-rate band the rules derive are the spec's
        derive = rules["derive"]
        gbs = spec.reference_hyperparameters["global_batch_size"]
        assert derive["train_samples"]["initial"] == spec.dataset["train_samples"]
        lr = spec.reference_hyperparameters["opt_base_learning_rate"]
        state = engine_derive(rules, gbs)
        assert state["eval_interval_samples"] == spec.eval_interval_samples(gbs)
        assert state["first_eval_samples"] == spec.first_eval_samples(gbs)
        assert state["lr_min"] == pytest.approx(lr / 2) and state["lr_max"] == pytest.approx(1.5 * lr)
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


def _bad_ruleset(tmp_path, monkeypatch, text: str, match: str) -> None:
    bad = tmp_path / "bad_1.0.0"
    bad.mkdir(exist_ok=True)
    (bad / "common.yaml").write_text(text)
    monkeypatch.setattr(engine, "RULESETS", tmp_path)
    engine.load_rule_file.cache_clear()
    try:
        with pytest.raises(HarnessError, match=match):
            engine.check_log(Path(__file__), "bad_1.0.0")
    finally:
        engine.load_rule_file.cache_clear()


@pytest.mark.parametrize("derive, keys, match", [
    ("x: {from: gbs, expr: {pow: [value, 2]}}", "gbs: {}", "is invalid"),  # no such operation
    ("x: {from: gbs, expr: {mul: [value, 1e-9]}}", "gbs: {}", "is invalid"),  # YAML's string 1e-9, not a number
    ("x: {from: gbs, expr: {mul: [value, y]}}", "gbs: {}", "refers to y, not derived quantities"),
    ("x: {from: nokey, expr: value}", "gbs: {}", "a key this file does not define"),
    ("x: {expr: value}", "gbs: {}", "needs both 'from' and 'expr'"),
    ("x: {initial: 1}", "gbs: {checks: [{value: {max: {derived: z}}}]}", "refer to z, not derived quantities"),
    ("x: {initial: 1}", "gbs: {at_least_one: {min: {derived: x}}}", "may not refer to a derived quantity"),
    ("x: {initial: '1'}", "gbs: {}", "is invalid"),
])
def test_derived_quantities_are_a_closed_vocabulary_too(tmp_path, monkeypatch, derive, keys, match):
    _bad_ruleset(tmp_path, monkeypatch, f"description: x\nderive:\n  {derive}\nkeys:\n  {keys}\n", match)


# MLPerf's own closed_dlrmv4 POST code, run as its checker runs it, against our derived quantities
GBS_VALUES = [8192, 12288, 16384, 32768, 65536, 1, 3, 100003, 8192.0, 8192.5, 0, -8192, True, "8192", None, 1e308,
              float("inf"), float("nan"), [8192]]


def _official_state(gbs) -> dict:
    import math

    import yaml
    from mlperf_logging.compliance_checker import mlp_compliance

    src = Path(mlp_compliance.__file__).with_name("training_6.1.0") / "closed_dlrmv4.yaml"
    blocks = yaml.load(src.read_text(), Loader=yaml.BaseLoader)
    begin = next(b["BEGIN"]["CODE"] for b in blocks if "BEGIN" in b)
    post = next(b["KEY"]["POST"] for b in blocks if "KEY" in b and b["KEY"]["NAME"] == "global_batch_size")
    state = {"s": {}, "math": math, "is_integer": mlp_compliance.is_integer}
    exec(begin.strip(), state, {})  # noqa: S102 - MLPerf's own code, run as its checker runs it
    try:
        exec(post.strip(), state, {"v": {"value": gbs}, "ll": None})  # noqa: S102
    except Exception:  # noqa: BLE001, S110 - as the checker: the state stays as far as the code got
        pass
    return state["s"]


@pytest.mark.parametrize("gbs", GBS_VALUES, ids=repr)
def test_derived_quantities_equal_what_mlperf_post_code_computes(gbs, tmp_path):
    import json

    from harness.mllog.reader import parse_log

    log = tmp_path / "result_0.txt"
    log.write_text(":::MLLOG " + json.dumps({"namespace": "", "time_ms": 1, "event_type": "POINT_IN_TIME",
                                             "key": "global_batch_size", "value": gbs, "metadata": {}}) + "\n")
    level = engine._Level("training_6.1.0", "closed_dlrmv4", load_rule_file("training_6.1.0", "closed_dlrmv4"),
                          parse_log(log))
    level.run()
    theirs = _official_state(gbs)
    for name in ("global_batch_size", "eval_interval_samples", "first_eval_samples", "lr_min", "lr_max"):
        assert repr(level.derived[name]) == repr(theirs[name]), name
    lo, hi = theirs["lr_min"], theirs["lr_max"]
    assert repr(level.derived["lr_low"]) == repr(lo * (1 - 1e-9) if lo is not None else None)
    assert repr(level.derived["lr_high"]) == repr(hi * (1 + 1e-9) if hi is not None else None)
    raised = theirs["lr_max"] is None
    assert any(f.rule.endswith("global_batch_size.derive") for f in level.findings) == raised


def engine_derive(rules: dict, gbs: int) -> dict:
    """The quantities a rule file derives after a ``global_batch_size`` record of ``gbs`` (as the
    engine derives them: in declaration order, from their initial values)."""
    state = {name: d["initial"] for name, d in rules["derive"].items() if "initial" in d}
    for name, d in rules["derive"].items():
        if d.get("from") == "global_batch_size":
            state[name] = engine.evaluate(d["expr"], gbs, state)
    return state
