"""The two-stage distribution of a sequence collection's table-row-wise and table-column-wise
tables (TorchRec's ``EmbeddingCollection`` over TW-RW): one vector per event, nothing to sum.

A vector travels from the shard that holds its id only, through the rank of its sample's local
index on the shard's node (stage one, inside the node) to its sample's rank (stage two, across
nodes, as it came: encoded once, by its shard). First, inside the node, the shards tell the
node's ranks how many ids each holds of the samples of each local index and node
(:class:`StageCounts`: they size both stages, forward and backward). The backward pass runs the
stages in reverse. The pooled collections' two stages, and the topology, are in
:mod:`harness.reference.distributed.two_stage`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from harness.reference.distributed.comm import BACKWARD, FORWARD, INPUT, PendingAllToAll
from harness.reference.distributed.comm_codecs import Codec, decode, encode, wire_bytes
from harness.reference.distributed.input_dist import KeyedIds
from harness.reference.distributed.layout import ShardLayout
from harness.reference.distributed.output_dist import (
    WireCodecs,
    empty_bytes,
    sample_cuts,
)
from harness.reference.distributed.shardings import RowRange, ShardSpec
from harness.reference.distributed.two_stage import Hierarchy, NodeLayout


@dataclass(frozen=True)
class StageCounts:
    """What a forward's stage one learnt, for the backward's: ``counts[a][b][m]``, the ids that
    shard ``b`` of my node's rank ``a`` holds of the samples of the rank of my local index on
    node ``m``; ``cuts[i][q]``: where rank ``q``'s samples start in local shard ``i``'s vectors."""

    counts: list[list[list[int]]]
    cuts: dict[int, list[int]]


class TwoStageSequence:
    """The two stages of a sequence collection's two-stage tables (see the module docstring).

    Args: as :class:`~harness.reference.distributed.two_stage.TwoStagePooled` takes them.
    """

    def __init__(self, layout: ShardLayout, hierarchy: Hierarchy, nodes: NodeLayout, codecs: WireCodecs,
                 device: torch.device):
        self._layout, self._hier, self._nodes, self._codecs, self._device = layout, hierarchy, nodes, codecs, device

    def start(self, partials: Sequence[torch.Tensor], keyed: Sequence[KeyedIds], bounds: Sequence[int],
              present: dict[RowRange, torch.Tensor]) -> tuple[PendingAllToAll, StageCounts]:
        """Stage one (done when this returns) and the start of stage two of the two-stage shards'
        vectors (``partials[i]``: local shard ``i``'s, one per id it holds; ``bounds``: where each
        rank's samples start; ``present``: which of my rows have their id in each row range)."""
        codec, per_node, nodes = self._codecs.forward, self._nodes.ranks_per_node, self._nodes.nodes
        index, two_stage_of = self._layout.two_stage_index, self._layout.two_stage_of
        cuts = {i: sample_cuts(keyed[self._layout.key_index[i]], bounds, True) for i in index}
        counts = self._counts(cuts)

        def block(i: int, j: int, m: int) -> tuple[int, int]:  # shard i's ids of the samples of rank (m, j)
            q = m * per_node + j
            return cuts[i][q], cuts[i][q + 1]

        chunks = [torch.cat([encode(partials[i][lo:hi].float(), codec) for i in index for m in range(nodes)
                             for lo, hi in [block(i, j, m)]]) if index else empty_bytes(self._device)
                  for j in range(per_node)]
        node_ranks = self._nodes.node_ranks(self._nodes.node)
        got = self._hier.intra.all_to_all(chunks, [
            sum(wire_bytes(codec, counts[a][b][m], s.cols) for b, s in enumerate(two_stage_of[p]) for m in range(nodes))
            for a, p in enumerate(node_ranks)], FORWARD)
        # stage two: to the rank of my local index on node m, its samples' blocks, shard after shard
        send = self._regroup(got, counts, codec, by_node=True)
        recv = [sum(wire_bytes(codec, int(present[s.key].numel()), s.cols)
                    for p in self._nodes.node_ranks(m) for s in two_stage_of[p]) for m in range(nodes)]
        return self._hier.cross.all_to_all_start(send, recv, FORWARD), StageCounts(counts, cuts)

    def _counts(self, cuts: dict[int, list[int]]) -> list[list[list[int]]]:
        """:attr:`StageCounts.counts`, from every rank of the node (an all-to-all inside it):
        each tells each local index how many ids each of its shards holds of its samples."""
        per_node, nodes, two_stage_of = self._nodes.ranks_per_node, self._nodes.nodes, self._layout.two_stage_of
        send = [torch.tensor([cuts[i][m * per_node + j + 1] - cuts[i][m * per_node + j]
                              for i in self._layout.two_stage_index for m in range(nodes)],
                             dtype=torch.int64, device=self._device) for j in range(per_node)]
        node_ranks = self._nodes.node_ranks(self._nodes.node)
        got = self._hier.intra.all_to_all(send, [len(two_stage_of[p]) * nodes for p in node_ranks], INPUT)
        return [c.view(len(two_stage_of[p]), nodes).tolist() for p, c in zip(node_ranks, got)]

    def _regroup(self, got: Sequence[torch.Tensor], counts: list[list[list[int]]], codec: Codec, *,
                 by_node: bool) -> list[torch.Tensor]:
        """Stage one's encoded blocks, as the two stages pass them on: from the node's ranks
        (``got[a]``: each of its shards' blocks, node by node) to each node (``by_node``: the
        forward's stage two), or from the nodes (``got[m]``: each rank's shards' blocks, rank after
        rank) to each rank of the node (the backward's stage one)."""
        nodes, per_node, two_stage_of = self._nodes.nodes, self._nodes.ranks_per_node, self._layout.two_stage_of
        node_ranks = self._nodes.node_ranks(self._nodes.node)
        out: list[list[torch.Tensor]] = [[] for _ in range(nodes if by_node else per_node)]
        at = [0] * len(got)
        order = [(a, b, m) for a, p in enumerate(node_ranks) for b in range(len(two_stage_of[p])) for m in range(nodes)]
        if not by_node:  # the backward's chunks come node by node, each rank's shards in order
            order.sort(key=lambda abm: abm[2])
        for a, b, m in order:
            src = m if not by_node else a
            n = wire_bytes(codec, counts[a][b][m], two_stage_of[node_ranks[a]][b].cols)
            out[m if by_node else a].append(got[src][at[src] : at[src] + n])
            at[src] += n
        return [torch.cat(parts) if parts else empty_bytes(self._device) for parts in out]

    def place(self, out: torch.Tensor, got: Sequence[torch.Tensor], present: dict[RowRange, torch.Tensor]) -> None:
        """Stage two's vectors into this rank's ``events x sum(dims)`` embeddings ``out``, at the
        rows of their ids."""
        codec = self._codecs.forward
        for m, chunk in enumerate(got):
            at = 0
            for p in self._nodes.node_ranks(m):
                for s in self._layout.two_stage_of[p]:
                    rows = present[s.key]
                    n = wire_bytes(codec, rows.numel(), s.cols)
                    lo, hi = self._layout.out_columns(s)
                    out[:, lo:hi].index_copy_(0, rows, decode(chunk[at : at + n], codec, rows.numel(), s.cols))
                    at += n

    def start_backward(self, grad: torch.Tensor, present: dict[RowRange, torch.Tensor],
                       stage: StageCounts) -> PendingAllToAll:
        """Stage two in reverse: to the rank of my local index on node ``m``, the gradients
        (``grad``: ``events x sum(dims)`` fp32) of my vectors that its node's shards sent, shard
        after shard."""
        codec, nodes, two_stage_of = self._codecs.backward, self._nodes.nodes, self._layout.two_stage_of

        def block(s: ShardSpec) -> torch.Tensor:
            lo, hi = self._layout.out_columns(s)
            return grad[:, lo:hi].index_select(0, present[s.key])

        send = [torch.cat([encode(block(s), codec) for p in self._nodes.node_ranks(m) for s in two_stage_of[p]])
                if any(two_stage_of[p] for p in self._nodes.node_ranks(m)) else empty_bytes(self._device)
                for m in range(nodes)]
        counts, node_ranks = stage.counts, self._nodes.node_ranks(self._nodes.node)
        recv = [sum(wire_bytes(codec, counts[a][b][m], s.cols) for a, p in enumerate(node_ranks)
                    for b, s in enumerate(two_stage_of[p])) for m in range(nodes)]
        return self._hier.cross.all_to_all_start(send, recv, BACKWARD)

    def finish_backward(self, got: Sequence[torch.Tensor], stage: StageCounts) -> dict[int, torch.Tensor]:
        """Stage one in reverse: each block on to the shard that sent its vectors, which gets the
        gradients of its ids in the order of its ids (rank by rank of the samples): per two-stage
        local shard ``i``, ``ids x cols``."""
        codec, per_node, nodes = self._codecs.backward, self._nodes.ranks_per_node, self._nodes.nodes
        index, shards, cuts = self._layout.two_stage_index, self._layout.shards, stage.cuts
        send = self._regroup(got, stage.counts, codec, by_node=False)
        recv = [sum(wire_bytes(codec, cuts[i][m * per_node + j + 1] - cuts[i][m * per_node + j], shards[i].cols)
                    for m in range(nodes) for i in index) for j in range(per_node)]
        got = self._hier.intra.all_to_all(send, recv, BACKWARD)
        out = {i: torch.empty(cuts[i][-1], shards[i].cols, device=self._device) for i in index}
        for j, chunk in enumerate(got):
            at = 0
            for m in range(nodes):
                q = m * per_node + j
                for i in index:
                    c, (lo, hi) = shards[i].cols, (cuts[i][q], cuts[i][q + 1])
                    n = wire_bytes(codec, hi - lo, c)
                    out[i][lo:hi] = decode(chunk[at : at + n], codec, hi - lo, c)
                    at += n
        return out
