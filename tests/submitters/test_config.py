"""Submitter configs: the tunables they set apply; in the closed division nothing else may change."""

import pytest
import yaml

from harness.errors import HarnessError
from harness.rules.specs import load_benchmark
from harness.submitters import effective_hyperparameters


@pytest.fixture
def submitter_dir(tmp_path, monkeypatch):
    import harness.submitters as subs

    root = tmp_path / "submitters"
    (root / "acme").mkdir(parents=True)
    monkeypatch.setattr(subs, "submitters_root", lambda: root)
    return root / "acme"


def test_submitter_tunables_apply(submitter_dir):
    (submitter_dir / "dlrm_synthetic.yaml").write_text(yaml.safe_dump({
        "submitter": "acme", "benchmark": "dlrm_synthetic",
        "hyperparameters": {"global_batch_size": 4096, "opt_base_learning_rate": 0.03},
    }))
    hp = effective_hyperparameters(load_benchmark("dlrm_synthetic"), "acme", "closed")
    assert hp["global_batch_size"] == 4096 and hp["opt_base_learning_rate"] == 0.03
    assert hp["opt_adagrad_epsilon"] == 1e-8


def test_closed_division_refuses_a_non_tunable_change(submitter_dir):
    (submitter_dir / "dlrm_synthetic.yaml").write_text(yaml.safe_dump({
        "submitter": "acme", "benchmark": "dlrm_synthetic", "hyperparameters": {"opt_adagrad_epsilon": 1e-6},
    }))
    spec = load_benchmark("dlrm_synthetic")
    with pytest.raises(HarnessError, match="closed division: .* changes opt_adagrad_epsilon"):
        effective_hyperparameters(spec, "acme", "closed")
    assert effective_hyperparameters(spec, "acme", "open")["opt_adagrad_epsilon"] == 1e-6


def test_malformed_submitter_config_is_one_clear_error(submitter_dir):
    (submitter_dir / "dlrm_synthetic.yaml").write_text("submitter: acme\nbenchmark: dlrm_synthetic\n")
    with pytest.raises(HarnessError, match="'hyperparameters' is a required property"):
        effective_hyperparameters(load_benchmark("dlrm_synthetic"), "acme", "closed")
