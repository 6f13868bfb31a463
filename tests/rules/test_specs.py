"""Benchmark specs: schema, the official dlrm_dcnv2 values against mlperf_logging's own rules."""

import re
from pathlib import Path

import mlperf_logging
import pytest
import yaml

from harness.errors import ErrorCategory, HarnessError
from harness.reference.data.dlrmv3_streams import Split, StreamingGenerator, StreamingSpec
from harness.reference.models.from_spec import hstu_config
from harness.rules.specs import Suite, benchmark_names, load_benchmark, spec_from_dict

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


def test_dlrmv4_equals_the_official_rules_of_6_1_0():
    """Every value closed_dlrmv4.yaml fixes is the spec's, and the eval grid and first eval the spec
    derives are what the official POST code derives, at the RCPs' batch sizes and others."""
    import math

    rules_dir = Path(mlperf_logging.__file__).parent / "compliance_checker" / "training_6.1.0"
    raw_rules = yaml.safe_load((rules_dir / "closed_dlrmv4.yaml").read_text())
    rules = {r["KEY"]["NAME"]: r["KEY"] for r in raw_rules if "KEY" in r}
    spec = load_benchmark("dlrmv4")
    hp = {**spec.reference_hyperparameters, "opt_name": "Adam"}  # logged as MLPerf names it
    checked = 0
    for key, rule in rules.items():
        m = re.fullmatch(r"\s*v\['value'\] == (.+?)\s*", str(rule.get("CHECK", "")))
        if m is None or key in ("train_samples", "opt_sparse_base_learning_rate"):
            continue
        official = _literal(m.group(1))
        if key == "eval_samples":
            assert spec.dataset["eval_samples"] == official
        elif key == "max_sequence_length":
            assert spec.dataset["max_sequence_length"] == spec.raw["model"]["max_sequence_length"] == official
        elif key == "eval_every_data_pct":
            assert spec.eval_every_data_fraction == official
        else:
            assert hp[key] == official, key
        checked += 1
    assert checked >= 11
    begin = next(r["BEGIN"]["CODE"] for r in raw_rules if "BEGIN" in r)
    state: dict = {}
    exec(begin, {"s": state})  # noqa: S102  (the official rules' own code, from the installed package)
    assert spec.dataset["train_samples"] == state["train_samples"]
    assert spec.target_auc == state["target_accuracy"] == 0.75
    assert hp["opt_sparse_base_learning_rate"] == hp["opt_base_learning_rate"]
    assert spec.required_runs == 10 and spec.max_epochs == 1
    for gbs in (8192, 16384, 32768, 1000, 65536):
        s = dict(state)
        exec(rules["global_batch_size"]["POST"], {"s": s, "v": {"value": gbs}, "math": math})  # noqa: S102
        assert spec.eval_interval_samples(gbs) == s["eval_interval_samples"], gbs
        assert spec.first_eval_samples(gbs) == s["first_eval_samples"], gbs
    s = dict(state)
    exec(rules["global_batch_size"]["POST"], {"s": s, "v": {"value": 8192}, "math": math})  # noqa: S102
    assert s["lr_min"] <= hp["opt_base_learning_rate"] <= s["lr_max"]


# The reference's Yambda-5B tables, cross features and candidates, copied from mlcommons/training PR #889 (commit
# a67b8459467c551c08f8566d68a8e4e1659e6bd7), recommendation_v4/generative_recommenders/dlrm_v4/configs.py:
REFERENCE_TABLES = {
    "item_rows": 9_390_624,  # configs.py:765, get_embedding_table_config("yambda-5b"): item_id num_embeddings
    "artist_rows": 1_293_395,  # configs.py:772, artist_id
    "album_rows": 3_367_692,  # configs.py:779, album_id
    "users": 1_000_001,  # configs.py:786, uid
}
REFERENCE_CANDIDATES = 1  # configs.py:360, get_hstu_configs("yambda-5b"): hstu_config.max_num_candidates = 1
REFERENCE_CROSSES = [  # configs.py:44-52, YAMBDA_5B_CROSS_SPECS: (name, keys, num_embeddings, salt)
    ("user_x_artist", ("uid", "artist_id"), 100_000_000, 0),
    ("user_x_album", ("uid", "album_id"), 40_000_000, 0),
    ("user_x_hour", ("uid", "hour_of_day"), 24_000_000, 0),
    ("item_x_hour", ("item_id", "hour_of_day"), 40_000_000, 0),
    ("artist_x_hour", ("artist_id", "hour_of_day"), 32_000_000, 0),
    ("user_x_is_organic", ("uid", "is_organic"), 2_000_000, 0),
    ("user_x_artist_x_hour", ("uid", "artist_id", "hour_of_day"), 40_000_000, 0),
]


def test_dlrmv4_tables_crosses_and_candidates_equal_the_references():
    """The exact table sizes (Yambda's ids are one-based: the largest uid 1,000,000, item_id 9,390,623,
    artist_id 1,293,394, album_id 3,367,691 each fit, the table one row more), the 7 crosses (a spec
    without a salt means the reference's 0) and one candidate a sample; read at the 5b scale."""
    dataset = load_benchmark("dlrmv4").dataset
    assert {key: dataset[key] for key in REFERENCE_TABLES} == REFERENCE_TABLES
    assert dataset.get("candidates") == REFERENCE_CANDIDATES
    crosses = [(c["name"], tuple(c["keys"]), c["rows"], c.get("salt", 0)) for c in dataset["cross_features"]]
    assert crosses == REFERENCE_CROSSES
    assert dataset["scale"] == "5b" and dataset["kind"] == "yambda"


# The reference's model of its Yambda-5B run (the same commit): configs.py and the training config
# recommendation_v4/generative_recommenders/dlrm_v4/train/gin/yambda_5b.gin, and modules/dlrm_hstu.py
REFERENCE_MODEL = {
    "num_layers": 3,  # yambda_5b.gin:519-521, get_hstu_configs.hstu_attn_num_layers (env default 3)
    "max_sequence_length": 4096,  # yambda_5b.gin:509-511, get_hstu_configs.max_seq_len (env default 4096)
    "position_buckets": 8192,  # dlrm_hstu.py:209, HSTUPositionalEncoder(num_position_buckets=8192)
    "time_buckets": 2048,  # dlrm_hstu.py:210, num_time_buckets=2048
    "embedding_dim": 512, "num_heads": 4, "attention_dim": 128, "linear_dim": 128,  # configs.py:83-89
    "input_dropout": 0.2, "linear_dropout": 0.1, "preprocessor_hidden_dim": 256,  # configs.py:88-92
}
# configs.py:385-388, contextual_feature_to_max_length: uid, then the crosses in YAMBDA_5B_CROSS_SPECS' order
REFERENCE_CONTEXTUAL = ["uid"] + [name for name, *_ in REFERENCE_CROSSES]


def test_dlrmv4_model_equals_the_references_run():
    """3 STU layers and sequences of 4096 (the training config's, over configs.py's 5 and 8192), the
    positional encoder's 8192 position and 2048 time buckets, and uid then the 7 crosses as contextual
    tokens: the config the model is built from says the same."""
    spec = load_benchmark("dlrmv4")
    assert {key: spec.raw["model"][key] for key in REFERENCE_MODEL} == REFERENCE_MODEL
    assert spec.raw["model"]["contextual"] == REFERENCE_CONTEXTUAL
    config = hstu_config(spec)
    assert (config.num_layers, config.position_buckets, config.time_buckets) == (3, 8192, 2048)
    assert list(config.contextual) == REFERENCE_CONTEXTUAL
    assert config.contextual_rows == [1_000_001] + [rows for _, _, rows, _ in REFERENCE_CROSSES]


# MLPerf Inference dlrm-v3's reference (docs/dlrmv3.md; mlcommons/inference@b66003e1, recommendation/dlrm_v3/)
DLRMV3_TABLES = {
    "item_rows": 1_000_000_000,  # configs.py:131-155, item_id (HASH_SIZE): features item_id, item_candidate_id
    "artist_rows": 128,  # item_category_id: item_category_id, item_candidate_category_id
    "album_rows": 1,  # no third per-event feature: a one-row table in the ranker's album slot
    "users": 10_000_000,  # user_id, the contextual token
    "actions": 6,  # int(rating) 1..5, and 0 (unknown) on candidates
}
DLRMV3_MODEL = {  # configs.py:49-55; modules/dlrm_hstu.py:66 (max_seq_len)
    "num_heads": 4, "linear_dim": 128, "attention_dim": 128, "num_layers": 5, "embedding_dim": 512,
    "preprocessor_hidden_dim": 256, "max_sequence_length": 16384, "contextual": ["uid"],
}


def test_dlrm_v3_is_the_inference_references():
    """The generator's official parameters, the reference's tables, model and settings, and a request as the
    dataset makes it: 1 contextual token, 2048 candidates, and the history's mean over the inference timestamps
    (the base slot, then each training and earlier inference slot with probability 0.7, 100 items each)."""
    spec = load_benchmark("dlrm-v3")
    assert spec.suite is Suite.INFERENCE and spec.raw["official"] is True
    data = StreamingSpec.from_section(spec.dataset)
    assert data == StreamingSpec()
    settings = spec.inference
    assert settings["tables"] == DLRMV3_TABLES and settings["tables"]["item_rows"] == data.num_items
    assert {k: spec.raw["model"][k] for k in DLRMV3_MODEL} == DLRMV3_MODEL
    assert (settings["server_latency_ms"], settings["server_latency_percentile"], settings["scenarios"]) == (
        80, 99, ["Server", "Offline"])
    assert (settings["table_precision"], settings["dense_precision"], settings["requests_per_batch"]) == (
        "fp16", "bf16", 10)
    request = settings["request"]
    assert request["contextual"] == data.contextual_features == 1
    assert request["candidates"] == data.max_num_candidates_inference == data.num_inference_candidates == 2048
    inference_timestamps = data.num_timestamps - data.train_timestamps
    p, avg = data.user_sampling_ratio, data.avg_seq_len_per_timestamp
    expected = avg * (1 + p * data.train_timestamps + p * (inference_timestamps - 1) / 2)
    assert request["mean_history"] == pytest.approx(expected) and request["mean_history"] == 6715
    assert request["mean_history"] < data.max_history(Split.INFERENCE) == 14335


def test_dlrm_v3s_history_is_what_the_generator_makes():
    """40 users' requests at timestamp 95, k = 5 where the mean takes 4.5: the spec's mean history and 0.7 x 100
    x 0.5 more, 6,750 items (the users' spread, about 500, leaves a mean of 40 within 3% of it)."""
    spec = load_benchmark("dlrm-v3")
    data = StreamingSpec.from_section(spec.dataset)
    half_a_slot = data.user_sampling_ratio * data.avg_seq_len_per_timestamp * 0.5
    expected = spec.inference["request"]["mean_history"] + half_a_slot
    generator = StreamingGenerator(data)
    users = generator.active_users(95, 0, 200)[:40]
    assert len(users) == 40 and expected == pytest.approx(6750)
    assert generator.requests(users, 95).history_lengths.mean() == pytest.approx(expected, rel=0.03)


def test_an_inference_benchmark_is_refused_where_training_is_meant_in_one_line():
    spec = load_benchmark("dlrm-v3")
    assert "dlrm-v3" in benchmark_names() and "dlrm-v3" not in benchmark_names(Suite.TRAINING)
    assert benchmark_names(Suite.INFERENCE) == ["dlrm-v3"]
    for read in (lambda: spec.target_auc, lambda: spec.required_runs, lambda: spec.reference_hyperparameters,
                 lambda: spec.compliance_ruleset, lambda: spec.eval_batch_size, lambda: spec.max_epochs):
        with pytest.raises(HarnessError, match="^benchmark dlrm-v3 is an MLPerf Inference benchmark: it has no ") as e:
            read()
        assert e.value.category is ErrorCategory.BAD_INPUT and "\n" not in str(e.value)
    with pytest.raises(HarnessError, match="^harness run is for MLPerf Training benchmarks; dlrm-v3 is an MLPerf "):
        spec.for_training("harness run")
    assert load_benchmark("dlrmv4").for_training("harness run").suite is Suite.TRAINING
    with pytest.raises(HarnessError, match="dlrmv4 is an MLPerf Training benchmark: it has no inference section"):
        _ = load_benchmark("dlrmv4").inference


@pytest.mark.parametrize("benchmark, change, message", [
    ("dlrm-v3", {"required_runs": 10}, "'required_runs' should not be valid"),  # training's keys stay out
    ("dlrm-v3", {"suite": "training"}, "'ruleset' is a required property"),
    ("dlrm-v3", {"dataset": {"kind": "dlrmv3_streaming", "num_item": 5}}, "'num_item' is not one of"),
    ("dlrm_synthetic", {"name": "dlrm-synthetic"}, "does not match '^[a-z0-9_]+$'"),  # MLPerf Training's spelling
    ("dlrm_synthetic", {"inference": {}}, "'inference' should not be valid"),
])
def test_the_schema_keeps_training_and_inference_specs_apart(benchmark, change, message):
    raw = {**load_benchmark(benchmark).raw, **change}
    with pytest.raises(HarnessError, match=re.escape(message)) as err:
        spec_from_dict(raw, what="x.yaml")
    assert err.value.category is ErrorCategory.BAD_INPUT
