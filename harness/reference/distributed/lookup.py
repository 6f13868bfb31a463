"""The lookup of this rank's shards and its backward: the fused update of the rows it read.

Forward (:func:`pool_shards`): each rank pools its shards' rows for the samples of *every* rank
(a sequence collection: one vector per id, not pooled). Backward (:func:`update_shards`): the
shards sum their rows' gradients and apply the fused optimizer to exactly those rows
(:func:`harness.reference.models.embeddings.update_from_bags`, the single-process update). A
:class:`~harness.reference.distributed.shard_storage.ShardGroup`'s shards are looked up by one
``embedding_bag`` and updated by one call, the same values bit for bit (each row's gradients are
summed in the same order).

:class:`ShardedLookup` is the autograd function that joins the two across the output
all-to-alls: the forward gives the pooled embeddings of a started lookup (:class:`PendingPooled`),
the backward sends their gradients back to the shards.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from harness.reference.distributed.input_dist import KeyedIds
from harness.reference.distributed.shard_storage import LocalShards, ShardGroup
from harness.reference.models.embeddings import (
    SparseOptimizerConfig,
    coalesce_bags,
    unscale,
    update_from_bags,
)
from harness.reference.timing import phases


@dataclass(frozen=True)
class SparseStep:
    """One step's fused update: the optimizer (its current learning rate), the step (its
    stochastic rounding's bits, :mod:`harness.reference.models.numerics`) and 1 / the loss
    scale (None: not scaled)."""

    optimizer: SparseOptimizerConfig | None
    step: int
    grad_unscale: float | None


def pool_shards(shards: LocalShards, keyed: Sequence[KeyedIds], key_index: Sequence[int], *, sequence: bool,
                training: bool) -> list[torch.Tensor]:
    """Per local shard ``i``, its vectors of the global batch: ``samples x cols`` pooled bags, or
    one row per id it holds (a bag of one id; every id of a ``sequence`` collection)."""
    partials: list[torch.Tensor | None] = [None] * len(shards.shards)
    if not sequence:
        for g in shards.groups:
            if len(g.members) > 1:
                _pool_group(g, keyed, key_index, partials)
    for i in range(len(shards.shards)):
        if partials[i] is not None:
            continue
        k = keyed[key_index[i]]
        weight, rows = shards.rows(i, k.values, training=training)
        if k.one_per_sample or sequence:  # a vector per id it holds
            partials[i] = weight.index_select(0, rows)
        else:
            partials[i] = torch.nn.functional.embedding_bag(rows, weight, k.offsets, mode="sum")
    return partials  # type: ignore[return-value]


def _pool_group(g: ShardGroup, keyed: Sequence[KeyedIds], key_index: Sequence[int],
                partials: list[torch.Tensor | None]) -> None:
    """The pooled vectors of a group's shards in one ``embedding_bag`` over the group's weight:
    each shard's ids shifted to its rows, its bags numbered on; each bag's rows summed in the
    same order as the shard's own lookup sums them (a one-id bag: its row)."""
    ids, offsets, counts, at = [], [], [], 0
    for i, base in zip(g.members, g.bases):
        k = keyed[key_index[i]]
        ids.append(k.values + base)
        offsets.append(k.offsets + at)
        counts.append(k.offsets.numel())
        at += k.values.numel()
    pooled = torch.nn.functional.embedding_bag(torch.cat(ids), g.weight, torch.cat(offsets), mode="sum")
    for i, part in zip(g.members, pooled.split(counts)):
        partials[i] = part


def update_shards(shards: LocalShards, keyed: Sequence[KeyedIds], key_index: Sequence[int],
                  pooled: dict[int, torch.Tensor], step: SparseStep, *, per_id: bool) -> None:
    """Apply every local shard's gradients ``pooled[i]`` (of its vectors, as :func:`pool_shards`
    gave them; ``per_id``: one per id it holds, a sequence collection's) to the rows it looked
    up: a group's shards in one update of the group's weight, the others one by one."""
    done: set[int] = set()
    for g in shards.groups:
        if len(g.members) > 1:
            _update_group(g, [keyed[key_index[i]] for i in g.members], pooled, step)
            done.update(g.members)
    for i in range(len(shards.shards)):
        if i not in done:
            _update_shard(shards, i, keyed[key_index[i]], pooled[i], step, per_id=per_id)


def _update_group(g: ShardGroup, members: Sequence[KeyedIds], pooled: dict[int, torch.Tensor],
                  step: SparseStep) -> None:
    """:func:`_update_shard` of a group's shards (``members``: their ids) at once: their ids
    shifted to their rows of the group's weight, their bags numbered on. Each row's gradients
    are summed in the same order and updated alike (fp32, no rounding): the same values, bit for
    bit."""
    grads = torch.cat([pooled[i] for i in g.members])  # the members' bags one after the other
    device = grads.device
    values = torch.cat([k.values for k in members])
    counts = torch.tensor([k.values.numel() for k in members], device=device)
    ids = values + torch.repeat_interleave(g.base_ids, counts)  # each id at its shard's rows
    if all(k.one_per_sample for k in members):
        bags = torch.arange(grads.shape[0], device=device)
    else:  # each id's bag, numbered on over the members (a member of one id per sample: lengths of ones)
        lengths = torch.cat([k.lengths for k in members])
        bags = torch.repeat_interleave(torch.arange(lengths.numel(), device=device), lengths)
    update_from_bags(g.weight, g.state, ids, bags, grads, step.optimizer, None, step.grad_unscale)


def _update_shard(shards: LocalShards, i: int, k: KeyedIds, pooled_grad: torch.Tensor, step: SparseStep, *,
                  per_id: bool) -> None:
    """Apply local shard ``i``'s gradients (``bags x cols``, the global batch's) to the rows it
    looked up."""
    # each id's bag: a segment sum of the bags' gradients, no copy per id
    bag = None if k.one_per_sample or per_id else torch.repeat_interleave(
        torch.arange(k.lengths.numel(), device=pooled_grad.device), k.lengths)
    rounding = (shards.layouts[i], step.step)
    if i not in shards.cached:
        update_from_bags(shards.weights[i], shards.states[i], k.values, bag, pooled_grad,  # type: ignore[arg-type]
                         step.optimizer, rounding, step.grad_unscale)
        return
    rows, summed = coalesce_bags(k.values, bag, pooled_grad, reuse=True)
    shards.cached[i].update(rows, unscale(summed, step.grad_unscale), step.optimizer, rounding)


class ShardedLookup(torch.autograd.Function):
    """The pooled embeddings of a started lookup (:class:`PendingPooled`); its backward sends
    the gradients to the shards and updates them (now, or in ``finish_backward`` with overlap)."""

    @staticmethod
    def forward(ctx, dummy: torch.Tensor, pending: PendingPooled) -> torch.Tensor:
        ctx.pending = pending
        return pending.finish()

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        # the pending lookup holds this function's output (``_out``), whose autograd node holds
        # ``ctx``: a cycle through the autograd graph that Python's collector cannot see. Kept, it
        # held every step's graph, ids and buffers (and with them the collection and its process
        # groups) for the life of the process (measured: docs/performance.md, "Figures behind the
        # code's choices")
        p, ctx.pending = ctx.pending, None
        p._out = None
        with phases.CLOCK.phase(phases.EMBEDDING_BACKWARD):
            p.backward(grad)
        return None, None


class PendingPooled:
    """A lookup whose output all-to-alls are on their way; :meth:`wait` gives the pooled
    embeddings (through :class:`ShardedLookup` when training, so that backward reaches the shards).

    Args:
        finish: waits for the all-to-alls and gives the ``B x sum(dims)`` embeddings.
        backward: sends a ``B x ...`` gradient of them to the shards (None: not training).
        dummy: the collection's empty tensor that requires a gradient (the autograd function's input).
        shape: ``(F, D)`` where the tables have one dimension (the output is then ``B x F x D``).
    """

    def __init__(self, finish: Callable[[], torch.Tensor], backward: Callable[[torch.Tensor], None] | None,
                 dummy: torch.Tensor, shape: tuple[int, int] | None):
        self._finish, self._backward, self._dummy, self._shape = finish, backward, dummy, shape
        self._out: torch.Tensor | None = None

    def finish(self) -> torch.Tensor:
        return self._finish()

    def backward(self, grad: torch.Tensor) -> None:
        assert self._backward is not None  # only a training lookup goes through ShardedLookup
        self._backward(grad)

    def wait(self) -> torch.Tensor:
        with phases.CLOCK.phase(phases.EMBEDDING_FORWARD):
            return self._wait()

    def _wait(self) -> torch.Tensor:
        if self._out is None:
            if self._backward is not None:
                out = ShardedLookup.apply(self._dummy, self)
            else:
                with torch.no_grad():
                    out = self.finish()
            self._out = out.view(out.shape[0], *self._shape) if self._shape is not None else out
        return self._out
