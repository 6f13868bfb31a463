"""`harness run --data` on an exported copy of a synthetic benchmark: it trains exactly as the
generator."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.reference.data.test_criteo_runs import harness, records


def eval_accuracies(results: Path, benchmark: str) -> list[float]:
    [log] = results.glob(f"reference/results/*/{benchmark}/result_0.txt")
    return [r["value"] for r in records(log) if r["key"] == "eval_accuracy"]


# ------------------------------------------------------------------ an exported copy of a synthetic benchmark
# The tests' tiny benchmark (32,768 training samples; the default's 1,048,576 exported twice cost
# minutes of the suite and assert nothing more), trained through its whole epoch (a target it
# does not reach) with 8 evaluations, so every one of them is compared.
EXPORTED_SPEC = Path(__file__).parents[2] / "fixtures" / "tiny_benchmark.yaml"


@pytest.fixture(scope="module")
def exported_spec(tmp_path_factory) -> Path:
    raw = yaml.safe_load(EXPORTED_SPEC.read_text())
    raw["quality"]["target"] = 0.99
    raw["eval"]["every_epoch_fraction"] = 0.125
    path = tmp_path_factory.mktemp("spec") / "tiny_synthetic.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.fixture(scope="module")
def generator_run(tmp_path_factory, exported_spec) -> list[float]:
    cwd = tmp_path_factory.mktemp("generator")
    proc = harness("run", "--benchmark", str(exported_spec), "--runs", "1", "--seed", "7", "--results", "r", cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [log] = (cwd / "r").glob("reference/results/*/tiny_synthetic/result_0.txt")
    assert [r["key"] for r in records(log)].count("harness_teacher_best_auc") == 1  # the generator's teacher: known
    return eval_accuracies(cwd / "r", "tiny_synthetic")


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["mlperf-npy", "criteo-tsv"])
def test_an_exported_copy_trains_exactly_as_the_generator(generator_run, exported_spec, tmp_path, fmt):
    export = harness("data", "export", "--benchmark", str(exported_spec), "--format", fmt, "data", cwd=tmp_path)
    assert export.returncode == 0, export.stderr[-3000:]
    proc = harness("run", "--benchmark", str(exported_spec), "--data", "data", "--runs", "1", "--seed", "7",
                   "--results", "r", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"data: {fmt}" in proc.stdout and "32,768 training and 8,192 eval samples, validated" in proc.stdout
    assert eval_accuracies(tmp_path / "r", "tiny_synthetic") == generator_run and len(generator_run) >= 5
    [log] = (tmp_path / "r").glob("reference/results/*/tiny_synthetic/result_0.txt")
    [dataset] = [r["value"] for r in records(log) if r["key"] == "harness_dataset"]
    assert dataset["format"] == fmt and dataset["train_samples"] == 32768 and dataset["days"] == 24
    # files given with --data: the generator's teacher says nothing of them, and nothing is claimed
    assert "harness_teacher_best_auc" not in {r["key"] for r in records(log)}
    assert "teacher" not in proc.stdout
