"""Seeds (OS or chosen) and submitter configs (closed division: only tunables may change)."""

import pytest
import yaml

from harness.errors import HarnessError
from harness.rules.seeds import SeedSource, seeds_for_runs
from harness.rules.specs import load_benchmark
from harness.submitters import effective_hyperparameters


def test_os_seeds_are_fresh_and_marked():
    seeds = seeds_for_runs(range(10), ())
    assert len({s.value for s in seeds.values()}) == 10
    assert all(s.source is SeedSource.OS and 0 <= s.value < 2**31 for s in seeds.values())


def test_one_chosen_seed_numbers_the_runs():
    seeds = seeds_for_runs([2, 3], (40,))
    assert {i: s.value for i, s in seeds.items()} == {2: 42, 3: 43}
    assert all(s.source is SeedSource.USER for s in seeds.values())


def test_a_seed_list_needs_one_per_run():
    assert seeds_for_runs([0, 1], (7, 3))[1].value == 3
    with pytest.raises(HarnessError, match="2 seeds given but run 2"):
        seeds_for_runs([0, 1, 2], (7, 3))


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
