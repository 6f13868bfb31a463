"""Hyperparameter borrowing: end to end on two submitter configs, from logs, and the refusals."""

from pathlib import Path

import pytest
import yaml

import harness.submitters as subs
from harness.cli import main
from harness.errors import HarnessError
from harness.rules.fingerprint import fingerprint
from harness.rules.specs import load_benchmark
from harness.submitters import effective_hyperparameters, load_submitter_config
from harness.submitters.borrowing import borrow, lender_from_logs

REFERENCE_RUNS = Path(__file__).parents[2] / "harness" / "rules" / "reference_runs" / "dlrm_synthetic"


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setattr(subs, "submitters_root", lambda: tmp_path)
    (tmp_path / "acme").mkdir()
    (tmp_path / "acme" / "dlrm_synthetic.yaml").write_text(yaml.safe_dump({
        "submitter": "acme", "benchmark": "dlrm_synthetic",
        "hyperparameters": {"global_batch_size": 4096, "opt_base_learning_rate": 0.03},
    }))
    return tmp_path


def test_borrow_between_two_submitter_configs_end_to_end(root, capsys):
    to = root / "beta" / "dlrm_synthetic.yaml"
    code = main(["borrow", "--from", str(root / "acme" / "dlrm_synthetic.yaml"), "--to", str(to),
                 "--submitter", "beta", "--batch-size", "8192"])
    assert code == 0, capsys.readouterr().err
    config = yaml.safe_load(to.read_text())
    assert config["submitter"] == "beta" and config["borrowed_from"]["lender"] == "acme"
    assert config["hyperparameters"]["opt_base_learning_rate"] == 0.03
    assert config["hyperparameters"]["global_batch_size"] == 8192
    assert config["borrowed_from"]["hyperparameters"]["global_batch_size"] == 4096
    spec = load_benchmark("dlrm_synthetic")
    lent = {**spec.reference_hyperparameters, "global_batch_size": 4096, "opt_base_learning_rate": 0.03}
    assert config["borrowed_from"]["lender_fingerprint"] == fingerprint({"benchmark": "dlrm_synthetic", "hyperparameters": lent})
    hp = effective_hyperparameters(spec, "beta", "closed")
    assert hp["opt_base_learning_rate"] == 0.03 and hp["global_batch_size"] == 8192
    assert subs.borrowing_provenance("beta", "dlrm_synthetic")["lender"] == "acme"


def test_borrowing_keeps_the_borrowers_own_precision_per_system(root):
    from harness.rules.precision import Precision
    from harness.submitters import submitter_precision

    to = root / "beta" / "dlrm_synthetic.yaml"
    to.parent.mkdir()
    to.write_text(yaml.safe_dump({"submitter": "beta", "benchmark": "dlrm_synthetic", "hyperparameters": {},
                                  "precision": {"zionex-8gpu": "fp16", "*": "fp32"}}))
    config = borrow(source=root / "acme" / "dlrm_synthetic.yaml", to=to)  # hyperparameters only are borrowed
    assert config["precision"] == yaml.safe_load(to.read_text())["precision"] == {"zionex-8gpu": "fp16", "*": "fp32"}
    assert submitter_precision("beta", "dlrm_synthetic", "zionex-8gpu")[0] is Precision.FP16
    assert submitter_precision("beta", "dlrm_synthetic", "local")[0] is Precision.FP32
    assert submitter_precision("acme", "dlrm_synthetic", "local") is None  # acme chose none


def test_borrow_from_a_lenders_result_logs_keeps_their_logged_fingerprint(root):
    benchmark, lender, fp, hp = lender_from_logs(REFERENCE_RUNS)
    assert benchmark == "dlrm_synthetic" and lender == "calibration/local-cpu-2c"
    assert fp.startswith("sha256:") and hp["opt_base_learning_rate"] == 0.015
    config = borrow(source=REFERENCE_RUNS, to=root / "beta" / "dlrm_synthetic.yaml", submitter="beta")
    assert config["borrowed_from"]["lender_fingerprint"] == fp


def test_a_run_set_plan_carries_the_provenance_into_the_logs(root, tmp_path):
    from harness.rules.seeds import Seed, SeedSource
    from harness.runsets.plan import plan_run_set
    from harness.runsets.request import RunSetRequest
    from harness.runsets.workers import worker_config as _worker_config

    borrow(source=root / "acme" / "dlrm_synthetic.yaml", to=root / "beta" / "dlrm_synthetic.yaml", submitter="beta")
    plan = plan_run_set(RunSetRequest(benchmark="dlrm_synthetic", profile="local", submitter="beta",
                                      results_dir=tmp_path / "results"))
    config = _worker_config(plan, 0, Seed(1, SeedSource.USER), tmp_path / "log.txt", None)
    assert config.extra_log["harness_borrowed_from"]["lender"] == "acme"
    from harness.reference.engine.mlperf_log import MLPerfLog, parse_records

    log = MLPerfLog(tmp_path / "log.txt")
    log.event("harness_borrowed_from", config.extra_log["harness_borrowed_from"])
    log.close()
    assert parse_records(tmp_path / "log.txt")[0]["value"]["lender"] == "acme"


def test_borrowing_a_value_the_closed_division_does_not_allow_is_refused(root, capsys):
    (root / "acme" / "open.yaml").write_text(yaml.safe_dump({
        "submitter": "acme", "benchmark": "dlrm_synthetic", "division": "open",
        "hyperparameters": {"opt_adagrad_epsilon": 1e-6},
    }))
    code = main(["borrow", "--from", str(root / "acme" / "open.yaml"), "--to", str(root / "beta" / "x.yaml"),
                 "--submitter", "beta"])
    err = capsys.readouterr().err
    assert code == 2 and "cannot borrow from acme: its opt_adagrad_epsilon differ" in err and err.count("\n") == 1
    assert not (root / "beta" / "x.yaml").exists()


def test_changing_more_than_the_batch_size_while_claiming_a_borrow_is_refused(root):
    to = root / "beta" / "dlrm_synthetic.yaml"
    borrow(source=root / "acme" / "dlrm_synthetic.yaml", to=to, submitter="beta")
    config = yaml.safe_load(to.read_text())
    config["hyperparameters"]["opt_base_learning_rate"] = 0.02
    to.write_text(yaml.safe_dump(config))
    with pytest.raises(HarnessError, match="claims to borrow from acme but changes opt_base_learning_rate"):
        load_submitter_config("beta", "dlrm_synthetic")
    config["hyperparameters"]["opt_base_learning_rate"] = 0.03
    config["hyperparameters"]["global_batch_size"] = 1024  # the batch size may differ
    to.write_text(yaml.safe_dump(config))
    assert load_submitter_config("beta", "dlrm_synthetic")["hyperparameters"]["global_batch_size"] == 1024


def test_a_missing_lender_is_one_clear_error(root, capsys):
    code = main(["borrow", "--from", str(root / "nobody.yaml"), "--to", str(root / "beta" / "x.yaml"), "--submitter", "b"])
    assert code == 2 and "does not exist" in capsys.readouterr().err
