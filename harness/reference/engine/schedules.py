"""The learning-rate schedule of MLPerf's DLRM references: linear warmup, then polynomial decay;
and the eval cadence (:func:`eval_steps`: every fraction of an epoch, or on dlrmv4's grid of samples).

Both references use one policy (``LRPolicyScheduler`` in facebookresearch/dlrm's
``dlrm_s_pytorch.py``, MLPerf ``dlrm`` v0.7-v2.1, and in mlcommons/training's
``recommendation_v2/torchrec_dlrm/dlrm_main.py``, ``dlrm_dcnv2``), a torch ``LRScheduler``
stepped after every optimizer step. The rate of the optimizer step ``s`` (0-based) is its
``get_lr()`` at ``c = s + 1`` (the scheduler's ``_step_count``; its constructor already took
one step), with ``W`` warmup steps, decay from step ``S`` for ``D`` steps, power ``p``::

    c < W:              base * (1 - (W - c) / W)                  (linear warmup)
    S <= c < S + D:     max(1e-7, base * ((D - (c - S)) / D) ** p)   (polynomial decay)
    otherwise, D > 0:   the last rate set above (frozen: between warmup and decay, and after decay)
    otherwise:          base

Two consequences of the reference worth knowing: between warmup and decay the rate stays at
the last warmup rate ``base * (W - 1) / W``, not ``base``; and after the decay it stays at
``base * (1 / D) ** p``. Where the reference has no "last rate" yet (no warmup, decay starting
after step 1, in which case its scheduler fails with an ``AttributeError``), this one uses
``base``. A decay that starts before the warmup ends is refused at load time
(:func:`harness.rules.hyperparameters.check_hyperparameters`), as the reference refuses it.

The tables may have a base rate of their own (``opt_sparse_base_learning_rate``, dlrmv4's recipe, where
it equals the dense one), on the same schedule.

Adagrad's own ``lr_decay`` (``opt_adagrad_learning_rate_decay``) divides the scheduled rate by
``1 + s * lr_decay`` at step ``s``, as ``torch.optim.Adagrad`` does for the dense parameters;
:meth:`LearningRatePolicy.sparse` applies the same to the fused embedding optimizer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.rules.hyperparameters import schedule_values
from harness.rules.specs import BenchmarkSpec

MIN_DECAY_LR = 1e-7  # the references' floor during the decay


@dataclass(frozen=True)
class LearningRatePolicy:
    base: float
    warmup_steps: int = 0
    decay_start_step: int = 0
    decay_steps: int = 0
    decay_power: float = 2.0
    adagrad_lr_decay: float = 0.0
    sparse_base: float | None = None  # the tables' base rate (None: ``base``), on the same schedule

    @classmethod
    def from_hyperparameters(cls, hp: Mapping[str, Any]) -> LearningRatePolicy:
        v = schedule_values(hp)
        return cls(base=v["base_learning_rate"], warmup_steps=v["warmup_steps"],
                   decay_start_step=v["decay_start_step"], decay_steps=v["decay_steps"],
                   decay_power=v["decay_power"], adagrad_lr_decay=v["adagrad_lr_decay"],
                   sparse_base=v["sparse_base_learning_rate"])

    @property
    def constant(self) -> bool:
        return self.warmup_steps <= 1 and self.decay_steps == 0

    def _warmup(self, c: int, base: float) -> float:
        w = self.warmup_steps
        return base * (1.0 - (w - c) / w)

    def _decay(self, c: int, base: float) -> float:
        d = self.decay_steps
        return max(MIN_DECAY_LR, base * ((d - (c - self.decay_start_step)) / d) ** self.decay_power)

    def at(self, step: int, base: float | None = None) -> float:
        """The scheduled rate of optimizer step ``step`` (0-based), from ``base`` (default: :attr:`base`)."""
        base = self.base if base is None else base
        c = step + 1
        w, s, d = self.warmup_steps, self.decay_start_step, self.decay_steps
        if c < w:
            return self._warmup(c, base)
        if s <= c < s + d:
            return self._decay(c, base)
        if d > 0:
            if c >= s + d:
                return self._decay(s + d - 1, base)
            return self._warmup(w - 1, base) if w >= 2 else base
        return base

    def dense(self, step: int) -> float:
        """The rate set on the dense optimizer (torch's Adagrad applies its ``lr_decay`` itself)."""
        return self.at(step)

    def sparse(self, step: int) -> float:
        """The rate of the fused embedding optimizer (from :attr:`sparse_base`), Adagrad's ``lr_decay`` included."""
        return self.at(step, self.sparse_base) / (1.0 + step * self.adagrad_lr_decay)


# --------------------------------------------------------------------------- the eval cadence
def step_limit(spec: BenchmarkSpec, steps_per_epoch: int) -> int:
    """The last step the benchmark's epoch limit allows."""
    return int(math.floor(spec.max_epochs * steps_per_epoch + 1e-9))


def eval_samples_grid(spec: BenchmarkSpec, steps_per_epoch: int, global_batch_size: int) -> list[int]:
    """The samples counts at which to evaluate (a benchmark that counts samples): from the first
    eval every ``eval_interval_samples`` (both whole global batches, as dlrmv4's rules derive
    them), up to the limit; no evaluation off the grid (dlrmv4's rules would refuse it)."""
    gbs = global_batch_size
    interval, first = spec.eval_interval_samples(gbs), spec.first_eval_samples(gbs)
    return list(range(first, step_limit(spec, steps_per_epoch) * gbs + 1, interval))


def eval_steps(spec: BenchmarkSpec, steps_per_epoch: int, global_batch_size: int) -> list[int]:
    """The steps after which to evaluate: every ``fraction`` of an epoch, up to the limit (and at
    it); or, when the benchmark counts samples, on its grid of samples (:func:`eval_samples_grid`)."""
    if spec.eval_in_samples:
        return [n // global_batch_size for n in eval_samples_grid(spec, steps_per_epoch, global_batch_size)]
    fraction, limit = spec.eval_every_epoch_fraction, spec.max_epochs
    count = int(math.floor(limit / fraction + 1e-9))
    steps = sorted({max(1, round(k * fraction * steps_per_epoch)) for k in range(1, count + 1)})
    last = step_limit(spec, steps_per_epoch)
    steps = [s for s in steps if s <= last]
    if not steps or steps[-1] != last:
        steps.append(last)
    return steps
