"""The training engine: its loop over epochs, its state, its hooks."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
import yaml

from harness.errors import HarnessError
from harness.reference.data.datasets import SyntheticDataset
from harness.reference.engine.mlperf_log import parse_records
from harness.reference.engine.run_config import RunConfig
from harness.reference.engine.session import SessionHooks, TrainingSession
from harness.reference.runs import run_from_config

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "tiny_benchmark.yaml"


def tiny_spec(**changes) -> dict:
    raw = yaml.safe_load(FIXTURE.read_text())
    raw.update(changes)
    return raw


def offline(raw: dict, seed: int = 3) -> RunConfig:
    return RunConfig.offline(raw, raw["reference_hyperparameters"], seed, who="test", threads=1)


class Recorder(SessionHooks):
    def __init__(self) -> None:
        self.losses: list[float] = []
        self.boundaries: list[int] = []

    def after_step(self, session, loss) -> bool:
        self.losses.append(loss.item())
        return False

    def epoch_boundary(self, session, finished_epoch: int) -> None:
        self.boundaries.append((finished_epoch, session.step_count))


class EpochSpy(SyntheticDataset):
    """The synthetic data, recording which epochs and starting batches were asked for."""

    calls: list[tuple[int, int]]

    def train_batches(self, batch_size, *, epoch=0, seed=0, rank=0, world_size=1, start=0):
        self.calls.append((epoch, start))
        return super().train_batches(batch_size, epoch=epoch, seed=seed, rank=rank, world_size=world_size,
                                     start=start)


def spy(raw: dict) -> EpochSpy:
    data = EpochSpy(raw["dataset"])
    data.calls = []
    return data


def test_a_two_epoch_spec_trains_two_epochs_each_in_its_own_order(tmp_path):
    raw = tiny_spec(max_epochs=2)
    raw["quality"]["target"] = 0.99  # out of reach: train to the limit
    data = spy(raw)
    session = TrainingSession(offline(raw), dataset=data)
    hooks = Recorder()
    outcome = session.train(hooks)
    assert session.steps_per_epoch == 32 and outcome.steps == session.step_count == 64
    assert data.calls == [(0, 0), (1, 0)] and hooks.boundaries == [(0, 32)]
    assert [e for e, _ in outcome.eval_accuracies] == [0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0]
    assert outcome.status == "aborted" and "epoch limit" in outcome.reason
    # the second epoch saw the same batches in another order
    first = [b.labels for b in data.train_batches(1024, epoch=0, seed=3)]
    second = [b.labels for b in data.train_batches(1024, epoch=1, seed=3)]
    assert sorted(map(tuple, (t.tolist() for t in first))) == sorted(map(tuple, (t.tolist() for t in second)))
    assert [t.tolist() for t in first] != [t.tolist() for t in second]


def test_a_two_epoch_run_logs_both_epochs(tmp_path):
    raw = tiny_spec(max_epochs=2)
    raw["quality"]["target"] = 0.99
    cfg = dataclasses.replace(offline(raw), log_path=str(tmp_path / "log.txt"), fingerprint="sha256:" + "ab" * 32)
    result = run_from_config(cfg)
    records = parse_records(tmp_path / "log.txt")
    epochs = [(r["key"], r["metadata"]["epoch_num"]) for r in records if r["key"] in ("epoch_start", "epoch_stop")]
    assert epochs == [("epoch_start", 0), ("epoch_stop", 1), ("epoch_start", 1), ("epoch_stop", 2.0)]
    assert [r["metadata"]["epoch_num"] for r in records if r["key"] == "eval_accuracy"][-1] == 2.0
    assert result.status == "aborted" and len(result.eval_accuracies) == 8


@pytest.mark.parametrize("resume_at", [13, 32, 45])
def test_a_session_continued_from_its_state_trains_as_the_uninterrupted_one(resume_at):
    raw = tiny_spec(max_epochs=2)
    whole = Recorder()
    TrainingSession(offline(raw)).train(whole, eval_at=[], stop_at_target=False)
    first = TrainingSession(offline(raw))
    head = Recorder()
    first.train(head, eval_at=[], until=resume_at, stop_at_target=False)
    state = first.state_dict()
    second = TrainingSession(offline(raw))
    second.load_state_dict(state)
    tail = Recorder()
    second.train(tail, eval_at=[], stop_at_target=False)
    assert head.losses + tail.losses == whole.losses and len(whole.losses) == 64  # bit for bit


def test_a_state_of_another_model_is_refused():
    first = TrainingSession(offline(tiny_spec()))
    other = tiny_spec()
    other["model"] = {**other["model"], "bottom_mlp": [32, 8]}
    with pytest.raises(HarnessError, match="does not match this session's model"):
        TrainingSession(offline(other)).load_state_dict(first.state_dict())


def test_hooks_stop_the_loop_and_the_session_can_step_plain_batches():
    session = TrainingSession(offline(tiny_spec()))

    class StopAt5(SessionHooks):
        def after_step(self, s, loss) -> bool:
            return s.step_count == 5

    outcome = session.train(StopAt5())
    assert outcome.steps == 5 and outcome.status == "aborted" and "stopped after step 5" in outcome.reason
    batch = next(session.dataset.train_batches(1024, start=5))
    loss = session.step(batch)
    assert session.step_count == 6 and loss.requires_grad is False and torch.isfinite(loss)
