"""The learning-rate schedule against the references' stepping, and Adagrad's lr_decay against torch."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from harness.reference.engine.schedules import LearningRatePolicy
from harness.reference.models.embeddings import FusedEmbeddingCollection, SparseOptimizerConfig


class ReferencePolicy(torch.optim.lr_scheduler.LRScheduler):
    """The MLPerf references' scheduler as they use it, written for this test: a torch scheduler
    whose constructor takes the first step, stepped once after every optimizer step, keeping
    the last warmup or decay rate to freeze at (here starting from the base rate)."""

    def __init__(self, optimizer, warmup: int, decay_start: int, decay_steps: int, power: float = 2.0):
        self.w, self.s, self.d, self.p = warmup, decay_start, decay_steps, power
        self.frozen: list[float] | None = None
        super().__init__(optimizer)

    def get_lr(self) -> list[float]:
        c = self._step_count
        if c < self.w:
            self.frozen = [b * (1.0 - (self.w - c) / self.w) for b in self.base_lrs]
            return self.frozen
        if self.s <= c < self.s + self.d:
            self.frozen = [max(1e-7, b * ((self.d - (c - self.s)) / self.d) ** self.p) for b in self.base_lrs]
            return self.frozen
        if self.d > 0:
            return self.frozen if self.frozen is not None else list(self.base_lrs)
        return list(self.base_lrs)


@pytest.mark.parametrize(("warmup", "start", "steps"), [
    (0, 0, 0), (5, 0, 0), (5, 5, 10), (5, 12, 10), (1, 3, 4), (0, 4, 6), (2750, 49315, 27772),
])
def test_the_rate_of_every_step_is_the_references(warmup, start, steps):
    policy = LearningRatePolicy(base=24.0, warmup_steps=warmup, decay_start_step=start, decay_steps=steps)
    param = nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([param], lr=24.0)
    ref = ReferencePolicy(opt, warmup, start, steps)
    horizon = start + steps + 20
    for step in range(horizon):
        assert policy.at(step) == pytest.approx(opt.param_groups[0]["lr"], rel=1e-12, abs=0), step
        opt.step()
        ref.step()


def test_the_quirks_of_the_reference_are_kept():
    p = LearningRatePolicy(base=1.0, warmup_steps=4, decay_start_step=10, decay_steps=5)
    assert [p.at(s) for s in range(3)] == [0.25, 0.5, 0.75]
    assert p.at(3) == p.at(8) == 0.75  # between warmup and decay: the last warmup rate, not the base
    assert p.at(9) == 1.0 and p.at(10) == pytest.approx(0.64)  # decay: ((5 - k) / 5) ** 2
    assert p.at(13) == pytest.approx(0.04) and p.at(100) == pytest.approx(0.04)  # frozen after the decay
    assert LearningRatePolicy(base=1.0, warmup_steps=4).at(3) == 1.0  # no decay: the base after warmup


def test_adagrad_lr_decay_of_the_fused_embeddings_equals_torch_on_sparse_bags():
    torch.manual_seed(0)
    rows, dim, lr, decay = (7, 11), 4, 0.1, 0.3
    policy = LearningRatePolicy(base=lr, adagrad_lr_decay=decay)
    fused = FusedEmbeddingCollection(rows, dim, (2, 1), SparseOptimizerConfig(learning_rate=lr))
    bags = []
    for t, n in enumerate(rows):
        bag = nn.EmbeddingBag(n, dim, mode="sum", sparse=True)
        with torch.no_grad():
            bag.weight.copy_(fused.weight[sum(rows[:t]) : sum(rows[:t]) + n])
        bags.append(bag)
    opt = torch.optim.Adagrad([b.weight for b in bags], lr=lr, lr_decay=decay, eps=1e-8)
    for step in range(6):
        fused.set_learning_rate(policy.sparse(step))
        sparse = torch.cat([torch.randint(0, rows[0], (16, 2)), torch.randint(0, rows[1], (16, 1))], dim=1)
        target = torch.randn(16, 2, dim)
        ((fused(sparse) - target) ** 2).sum().backward()
        opt.zero_grad()
        ref = torch.stack([bags[0](sparse[:, :2]), bags[1](sparse[:, 2:])], dim=1)
        ((ref - target) ** 2).sum().backward()
        opt.step()
    assert torch.allclose(fused.weight, torch.cat([b.weight for b in bags]), atol=1e-6)
    # and without the decay the two would differ: the test sees the decay
    assert policy.sparse(5) < policy.at(5)
