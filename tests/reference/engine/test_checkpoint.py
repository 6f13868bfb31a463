"""kill -9 during training on the SSD tier, then resume from the last checkpoint: no row lost or corrupted."""

from __future__ import annotations

import json
import random
import signal
import time
from pathlib import Path

import pytest
import yaml

from harness.reference.engine import checkpoint
from harness.reference.engine.trainer import RunConfig
from harness.reference.forked import ForkedProcess
from harness.rules.specs import spec_from_dict

ROOT = Path(__file__).resolve().parents[3]
FIXTURE = ROOT / "tests" / "fixtures" / "tiny_benchmark.yaml"
STEPS, EVERY, BATCH = 32, 8, 256


# what the tier computes, not the drive's speed (tests/reference/conftest.py)


def job(tmp: Path, name: str) -> Path:
    spec = yaml.safe_load(FIXTURE.read_text())
    spec["dataset"]["table_rows"] = [10_000] * 26
    spec["dataset"]["train_samples"] = (STEPS + 1) * BATCH
    hp = dict(spec_from_dict(spec, what="test").reference_hyperparameters, global_batch_size=BATCH)
    folder = tmp / name
    folder.mkdir()
    config = RunConfig.offline(spec, hp, 11, who="test", embedding_tier={
        "tier": "ssd", "path": str(folder / "tables.bin"), "cache_fraction": 0.05, "policy": "lfu",
        "direct_io": False})  # what the tier computes, not the drive's speed
    path = folder / "job.json"
    path.write_text(json.dumps({
        "run_config": config.to_dict(), "checkpoints": str(folder / "checkpoints"), "tables": str(folder / "tables.bin"),
        "steps": STEPS, "every": EVERY, "result": str(folder / "result.json"),
    }))
    return path


def start(job_path: Path) -> ForkedProcess:
    """The job in a process of its own (``python -m harness.reference.engine.checkpoint JOB``),
    forked from a server that has imported torch once for the trials (its stdout a pipe here,
    its stderr ``stderr.txt`` beside the job)."""
    return ForkedProcess(checkpoint.cli, (str(job_path),), stderr_path=job_path.parent / "stderr.txt",
                         name=f"checkpoint job {job_path.parent.name}")


def run_to_end(job_path: Path, timeout: float) -> tuple[int, str]:
    """Start the job and wait for its end: its exit status and stderr."""
    proc = start(job_path)
    assert proc.stdout is not None
    proc.stdout.read()
    code = proc.wait(timeout=timeout)
    return code, (job_path.parent / "stderr.txt").read_text()


def finish(job_path: Path) -> dict:
    code, err = run_to_end(job_path, 300)
    assert code == 0, err[-3000:]
    return json.loads((job_path.parent / "result.json").read_text())


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict:
    return finish(job(tmp_path_factory.mktemp("reference"), "ref"))


@pytest.mark.slow
def test_kill_9_at_random_points_then_resume_gives_the_uninterrupted_tables(uninterrupted, tmp_path):
    assert uninterrupted["steps"] == STEPS and uninterrupted["resumed_from"] == 0
    rng = random.Random(20261130)
    kills = []
    for trial in range(10):
        path = job(tmp_path, f"trial{trial}")
        # a random step, or a random moment inside a checkpoint's writes
        if rng.random() < 0.4:
            event, delay = f"checkpoint {EVERY * rng.randint(1, STEPS // EVERY - 1)} begin", rng.uniform(0, 0.05)
        else:
            event, delay = f"step {rng.randint(2, STEPS - 1)}", 0.0
        proc = start(path)
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.strip() == event:
                time.sleep(delay)
                proc.send_signal(signal.SIGKILL)
                break
        proc.wait(timeout=60)
        assert proc.returncode == -signal.SIGKILL, f"trial {trial}: the job ended before {event!r}"
        result = finish(path)
        kills.append((event, result["resumed_from"]))
        assert result["steps"] == STEPS
        assert result["tables_sha256"] == uninterrupted["tables_sha256"], f"trial {trial}, killed at {event!r}"
    # most trials resumed from a checkpoint (not from the start)
    assert sum(resumed > 0 for _, resumed in kills) >= 5, kills


@pytest.mark.slow
def test_a_corrupted_checkpoint_is_refused_in_one_line(tmp_path):
    path = job(tmp_path, "corrupt")
    finish(path)
    checkpoints = path.parent / "checkpoints"
    manifest = json.loads((checkpoints / "checkpoint.json").read_text())
    tables = checkpoints / manifest["tables"]
    data = bytearray(tables.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit of one row
    tables.write_bytes(bytes(data))
    code, err = run_to_end(path, 120)
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "does not match its SHA-256" in lines[0], err
