"""`harness run --data` (an exported copy: test_export_runs.py): the `dlrm` benchmark's
code path (SGD, warmup, polynomial decay) on Terabyte-format TSV; bad data refused before run_start."""

from __future__ import annotations

import copy
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from harness.reference.data import open_dataset
from harness.reference.engine.run_config import RunConfig
from harness.reference.engine.session import SessionHooks, TrainingSession
from harness.rules.specs import load_benchmark, spec_from_dict
from tests.reference.engine.test_schedules import ReferencePolicy

ROOT = Path(__file__).resolve().parents[3]
DAYS, LINES_PER_DAY, LAST_DAY = 24, 64, 200  # 23 x 64 training lines; the first 100 of day 23 eval
BATCH = 64


def harness(*args: str, cwd: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def records(log: Path) -> list[dict]:
    return [json.loads(line.split(":::MLLOG ", 1)[1]) for line in log.read_text().splitlines() if ":::MLLOG " in line]


# ------------------------------------------------------------------ the dlrm benchmark's code path
def write_terabyte_tsv(folder: Path, seed: int = 0) -> Path:
    """24 days of Criteo-format lines: labels, counts (some empty, some negative), 8-digit hex
    categoricals (some empty)."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for day in range(DAYS):
        lines = []
        for _ in range(LAST_DAY if day == DAYS - 1 else LINES_PER_DAY):
            counts = [("" if rng.random() < 0.1 else str(int(rng.integers(-2, 500)))) for _ in range(13)]
            cats = [("" if rng.random() < 0.05 else f"{int(rng.integers(0, 2**32)):08x}") for _ in range(26)]
            label = str(int(rng.random() < 0.3 + 0.4 * (cats[0][:1] in "01234567")))
            lines.append("\t".join([label, *counts, *cats]))
        (folder / f"day_{day}").write_text("\n".join(lines) + "\n")
    return folder


def tiny_dlrm_spec() -> dict:
    """MLPerf's dlrm benchmark (SGD; warmup, then polynomial decay, in dlrm's key names) at the size
    of the tiny TSV: 23 steps per epoch, warmup 6, decay from step 10 for 8 steps."""
    raw = copy.deepcopy(load_benchmark("dlrm").raw)
    raw["name"] = "tiny_dlrm"
    raw["dataset"].update(train_samples=(DAYS - 1) * LINES_PER_DAY, eval_samples=LAST_DAY // 2,
                          table_rows=[97, 13, 1000, 7, *([50] * 22)])
    raw["model"].update(embedding_dim=8, bottom_mlp=[16, 8], top_mlp=[16, 1])
    raw["eval"] = {"every_epoch_fraction": 0.25, "batch_size": 64}
    raw["quality"]["target"] = 0.99
    raw["reference_hyperparameters"].update(global_batch_size=BATCH, opt_base_learning_rate=0.5,
                                            opt_learning_rate_warmup_steps=6, lr_decay_start_steps=10,
                                            sgd_opt_learning_rate_decay_steps=8)
    return raw


class RatesSeen(SessionHooks):
    """Each step's rates as set on both optimizers, and whether SGD applied the dense one."""

    def __init__(self) -> None:
        self.dense: list[float] = []
        self.sparse: list[float] = []
        self.before: torch.Tensor | None = None

    def after_step(self, session, loss) -> bool:
        lr = session.dense_optimizer.param_groups[0]["lr"]
        self.dense.append(lr)
        self.sparse.append(session.model.sparse_arch.embeddings.optimizer.learning_rate)
        weight = session.model.dense_arch.mlp[0].weight
        if self.before is not None:  # torch's SGD: w <- w - lr * grad
            assert torch.equal(weight.detach(), self.before.add(weight.grad, alpha=-lr)), len(self.dense)
        self.before = weight.detach().clone()
        return False


def test_the_dlrm_code_path_applies_warmup_and_polynomial_decay_on_terabyte_tsv(tmp_path):
    data = write_terabyte_tsv(tmp_path / "terabyte")
    spec = spec_from_dict(tiny_dlrm_spec(), what="tiny dlrm")
    dataset = open_dataset(spec, data)
    assert (dataset.train_samples, dataset.eval_samples) == (1472, 100)
    session = TrainingSession(RunConfig.offline(spec.raw, spec.reference_hyperparameters, 3, who="test"),
                              dataset=dataset)
    assert session.steps_per_epoch == 23
    hooks = RatesSeen()
    outcome = session.train(hooks)
    assert outcome.steps == 23 and len(outcome.eval_accuracies) == 4
    reference = ReferencePolicy(torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.5), 6, 10, 8)
    expected = []
    for _ in range(23):
        expected.append(reference.get_last_lr()[0])
        reference.optimizer.step()
        reference.step()
    assert hooks.dense == pytest.approx(expected, rel=1e-12) and hooks.sparse == hooks.dense
    # the formula at chosen steps: warmup, the frozen last warmup rate, decay, frozen after it
    assert hooks.dense[0] == pytest.approx(0.5 * 1 / 6) and hooks.dense[4] == pytest.approx(0.5 * 5 / 6)
    assert hooks.dense[5] == hooks.dense[8] == pytest.approx(0.5 * 5 / 6)
    assert hooks.dense[9] == pytest.approx(0.5) and hooks.dense[12] == pytest.approx(0.5 * (5 / 8) ** 2)
    assert hooks.dense[20] == pytest.approx(0.5 * (1 / 8) ** 2)
    assert all(math.isfinite(a) for _, a in outcome.eval_accuracies)


def test_harness_run_trains_the_dlrm_code_path_on_tsv_and_logs_what_it_used(tmp_path):
    data = write_terabyte_tsv(tmp_path / "terabyte")
    spec_file = tmp_path / "tiny_dlrm.yaml"
    spec_file.write_text(yaml.safe_dump(tiny_dlrm_spec()))
    proc = harness("run", "--benchmark", str(spec_file), "--data", str(data), "--runs", "1", "--seed", "3",
                   "--results", "r", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [log] = (tmp_path / "r").glob("reference/results/*/tiny_dlrm/result_0.txt")
    first = {r["key"]: r["value"] for r in reversed(records(log))}
    assert first["opt_name"] == "sgd" and first["opt_learning_rate_warmup_steps"] == 6
    assert first["lr_decay_start_steps"] == 10 and first["sgd_opt_learning_rate_decay_poly_power"] == 2
    assert first["harness_dataset"]["layout"] == "terabyte" and first["train_samples"] == 1472
    assert first["eval_samples"] == 100


# ------------------------------------------------------------------ bad data, refused before run_start
@pytest.fixture
def spec_and_dataset(tmp_path) -> tuple[Path, Path]:
    data = write_terabyte_tsv(tmp_path / "terabyte")
    spec_file = tmp_path / "tiny_dlrm.yaml"
    spec_file.write_text(yaml.safe_dump(tiny_dlrm_spec()))
    return spec_file, data


def refused(tmp_path: Path, *args: str) -> str:
    proc = harness("run", *args, "--results", "r", cwd=tmp_path, timeout=300)
    assert proc.returncode == 2, (proc.stdout[-2000:], proc.stderr[-2000:])
    assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr
    assert not (tmp_path / "r").exists()  # nothing of a results tree was touched
    return proc.stderr


def test_a_malformed_line_is_refused_naming_file_and_line(tmp_path, spec_and_dataset):
    spec_file, data = spec_and_dataset
    lines = (data / "day_3").read_text().splitlines()
    lines[4] = lines[4].replace("\t", "\tx", 1)  # line 5's first count now starts with an x
    (data / "day_3").write_text("\n".join(lines) + "\n")
    err = refused(tmp_path, "--benchmark", str(spec_file), "--data", str(data))
    assert f"{data / 'day_3'}:5:" in err


def test_a_short_dataset_is_refused(tmp_path, spec_and_dataset):
    spec_file, data = spec_and_dataset
    (data / "day_23").unlink()
    err = refused(tmp_path, "--benchmark", str(spec_file), "--data", str(data))
    assert "tiny_dlrm needs 1472" in err or "needs 1,472" in err


def test_a_format_the_benchmark_does_not_accept_and_a_missing_path_are_refused(tmp_path, spec_and_dataset):
    _, data = spec_and_dataset
    assert "mlperf-npy" in refused(tmp_path, "--benchmark", "dlrm_dcnv2", "--data", str(data))
    assert "no-such-folder" in refused(tmp_path, "--benchmark", "dlrm_dcnv2", "--data", "no-such-folder")


def test_a_gzip_tsv_cannot_train_more_than_one_epoch(tmp_path, spec_and_dataset):
    import gzip

    spec_file, data = spec_and_dataset
    raw = yaml.safe_load(spec_file.read_text())
    raw["max_epochs"] = 2
    spec_file.write_text(yaml.safe_dump(raw))
    for day in data.glob("day_*"):
        (data / f"{day.name}.gz").write_bytes(gzip.compress(day.read_bytes()))
        day.unlink()
    assert "can only be read in order" in refused(tmp_path, "--benchmark", str(spec_file), "--data", str(data))
    shutil.rmtree(data)
