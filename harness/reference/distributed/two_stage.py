"""The two-stage (intra-node, then inter-node) distribution of table-row-wise and
table-column-wise tables' pooled vectors (TorchRec's TW-RW distribution).

**Two link classes** (a :class:`Hierarchy`: several nodes of ``L`` ranks; rank ``r`` on node
``r // L`` at local index ``r % L``). The shards of a table-row-wise or table-column-wise table
all live on the ranks of one node, and their outputs travel in two stages, as the planner's cost
model has them: first inside the node (an all-to-all on the node's group: local rank ``j``
receives every shard's partial vectors of the samples of the ranks of local index ``j`` on every
node, and sums the row shards' and places the column shards' side by side), then across nodes
(an all-to-all on the group of the ranks of local index ``j``, one per node): only the node's
finished vectors cross the slow links, once per sample. The backward pass runs the same stages
in reverse. Other types go through the flat all-to-all
(:class:`~harness.reference.distributed.output_dist.PooledOutputDist`). On one node there is no
second stage, and every type is flat. A sequence collection's two stages are
:class:`~harness.reference.distributed.two_stage_sequence.TwoStageSequence`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from harness.errors import ErrorCategory, HarnessError
from harness.reference.distributed.comm import BACKWARD, FORWARD, Comm, PendingAllToAll
from harness.reference.distributed.comm_codecs import decode, encode, wire_bytes
from harness.reference.distributed.layout import ShardLayout
from harness.reference.distributed.output_dist import WireCodecs, empty_bytes
from harness.reference.distributed.shardings import TableSharding
from harness.reference.planner.types import ShardingType

HIERARCHICAL_TYPES = (ShardingType.TABLE_ROW_WISE, ShardingType.TABLE_COLUMN_WISE)


@dataclass(frozen=True)
class Hierarchy:
    """The topology of a run over several nodes: ``ranks_per_node`` ranks per node, the collectives
    of this rank's node (``intra``) and of the ranks of its local index, one per node (``cross``)."""

    ranks_per_node: int
    intra: Comm
    cross: Comm

    @property
    def nodes(self) -> int:
        return self.cross.world_size


def two_stage_tables(shardings: Sequence[TableSharding], hierarchy: Hierarchy | None) -> frozenset[int]:
    """The tables whose vectors go through the two stages: the table-row-wise and
    table-column-wise ones, on several nodes (none on one node, ``hierarchy`` None). Each must
    have its shards on the ranks of one node."""
    if hierarchy is None:
        return frozenset()
    per_node, tables = hierarchy.ranks_per_node, set()
    for t, sh in enumerate(shardings):
        if sh.sharding_type in HIERARCHICAL_TYPES:
            if len({s.rank // per_node for s in sh.shards}) != 1:
                raise HarnessError(f"plan table {t}: a {sh.sharding_type.value} table must have all its "
                                   f"shards on the ranks of one node of {per_node}", ErrorCategory.BAD_INPUT)
            tables.add(t)
    return frozenset(tables)


@dataclass(frozen=True)
class NodeLayout:
    """This rank's place in a :class:`Hierarchy` (on ``node``, at index ``local``), and each
    node's two-stage tables in table order (``node_tables[m]``: the layout of a cross-node chunk
    to or from node ``m``)."""

    ranks_per_node: int
    nodes: int
    node: int
    local: int
    node_tables: tuple[tuple[int, ...], ...]

    @classmethod
    def of(cls, hierarchy: Hierarchy, layout: ShardLayout) -> NodeLayout:
        per_node, nodes = hierarchy.ranks_per_node, hierarchy.nodes
        node, local = divmod(layout.rank, per_node)
        node_tables = tuple(tuple(sorted({s.table for p in range(n * per_node, (n + 1) * per_node)
                                          for s in layout.two_stage_of[p]})) for n in range(nodes))
        return cls(per_node, nodes, node, local, node_tables)

    @property
    def any(self) -> bool:
        """Whether any node has two-stage tables (the same on every rank: the plan's)."""
        return any(self.node_tables)

    def node_ranks(self, node: int) -> range:
        return range(node * self.ranks_per_node, (node + 1) * self.ranks_per_node)


class TwoStagePooled:
    """The two stages of a pooled collection's two-stage tables (see the module docstring).

    Args:
        layout: the collection's; ``hierarchy``: the run's nodes and their process groups;
        nodes: ``NodeLayout.of(hierarchy, layout)``; ``codecs``: what vectors and gradients cross in.
    """

    def __init__(self, layout: ShardLayout, hierarchy: Hierarchy, nodes: NodeLayout, codecs: WireCodecs,
                 device: torch.device):
        self._layout, self._hier, self._nodes, self._codecs, self._device = layout, hierarchy, nodes, codecs, device
        self._rows_of_local: dict[tuple[int, ...], list[torch.Tensor]] = {}

    def local_rows(self, sizes: Sequence[int]) -> list[torch.Tensor]:
        """Per local index ``j``: the global batch's rows of the samples of the ranks of local
        index ``j`` (node by node), the rows a stage-one chunk to local rank ``j`` carries."""
        key = tuple(sizes)
        if key not in self._rows_of_local:
            per_node, nodes = self._nodes.ranks_per_node, self._nodes.nodes
            bounds = [0, *itertools.accumulate(sizes)]
            self._rows_of_local[key] = [
                torch.cat([torch.arange(bounds[m * per_node + j], bounds[m * per_node + j + 1])
                           for m in range(nodes)]).to(self._device)
                for j in range(per_node)
            ]
        return self._rows_of_local[key]

    def start(self, partials: Sequence[torch.Tensor], sizes: Sequence[int]) -> PendingAllToAll:
        """Stage one (inside the node, done when this returns) and the start of stage two (across
        nodes) of the two-stage shards' pooled vectors (``partials``: ``global batch x cols`` each,
        in ``two_stage_index`` order); ``sizes``: every rank's batch."""
        codec, per_node, nodes = self._codecs.forward, self._nodes.ranks_per_node, self._nodes.nodes
        summed = self._stage_one(partials, sizes)
        # stage two: to the rank of my local index on node m, the vectors of its samples
        tables = self._nodes.node_tables[self._nodes.node]
        seg = [sizes[m * per_node + self._nodes.local] for m in range(nodes)]
        parts = {t: summed[t].split(seg) for t in tables}
        send = [torch.cat([encode(parts[t][m], codec) for t in tables]) if tables else empty_bytes(self._device)
                for m in range(nodes)]
        dims = self._layout.tables.dims
        recv = [sum(wire_bytes(codec, sizes[self._layout.rank], dims[t]) for t in self._nodes.node_tables[m])
                for m in range(nodes)]
        return self._hier.cross.all_to_all_start(send, recv, FORWARD)

    def _stage_one(self, partials: Sequence[torch.Tensor], sizes: Sequence[int]) -> dict[int, torch.Tensor]:
        """Inside the node: per two-stage table of my node, its ``samples x dim`` vectors of the
        samples of my local index (node by node), the row shards' summed, the column shards' placed."""
        codec, per_node = self._codecs.forward, self._nodes.ranks_per_node
        two_stage_of = self._layout.two_stage_of
        rows = self.local_rows(sizes)
        chunks = [torch.cat([encode(p.index_select(0, rows[j]).float(), codec) for p in partials]) if partials
                  else empty_bytes(self._device) for j in range(per_node)]
        n_me = rows[self._nodes.local].numel()
        node_ranks = self._nodes.node_ranks(self._nodes.node)
        got = self._hier.intra.all_to_all(chunks, [sum(wire_bytes(codec, n_me, s.cols) for s in two_stage_of[p])
                                                   for p in node_ranks], FORWARD)
        dims = self._layout.tables.dims
        summed = {t: torch.zeros(n_me, dims[t], device=self._device) for t in self._nodes.node_tables[self._nodes.node]}
        for p, chunk in zip(node_ranks, got):
            at = 0
            for s in two_stage_of[p]:
                n = wire_bytes(codec, n_me, s.cols)
                summed[s.table][:, s.col_offset : s.col_offset + s.cols] += decode(chunk[at : at + n], codec,
                                                                                   n_me, s.cols)
                at += n
        return summed

    def place(self, out: torch.Tensor, got: Sequence[torch.Tensor], batch: int) -> None:
        """Stage two's vectors into this rank's ``batch x sum(dims)`` embeddings ``out``."""
        codec, dims, out_start = self._codecs.forward, self._layout.tables.dims, self._layout.tables.out_start
        for m, chunk in enumerate(got):
            at = 0
            for t in self._nodes.node_tables[m]:
                n = wire_bytes(codec, batch, dims[t])
                lo = out_start[t]
                out[:, lo : lo + dims[t]] = decode(chunk[at : at + n], codec, batch, dims[t])
                at += n

    def start_backward(self, grad: torch.Tensor, sizes: Sequence[int]) -> PendingAllToAll:
        """Stage two in reverse: to the rank of my local index on node ``m``, the gradients of my
        samples' vectors (``grad``: ``batch x sum(dims)`` fp32) of node ``m``'s two-stage tables."""
        codec, per_node, nodes = self._codecs.backward, self._nodes.ranks_per_node, self._nodes.nodes
        dims, out_start = self._layout.tables.dims, self._layout.tables.out_start

        def cols(t: int) -> torch.Tensor:
            return grad[:, out_start[t] : out_start[t] + dims[t]].contiguous()

        node_tables = self._nodes.node_tables
        send = [torch.cat([encode(cols(t), codec) for t in node_tables[m]]) if node_tables[m]
                else empty_bytes(self._device) for m in range(nodes)]
        tables = node_tables[self._nodes.node]
        recv = [sum(wire_bytes(codec, sizes[m * per_node + self._nodes.local], dims[t]) for t in tables)
                for m in range(nodes)]
        return self._hier.cross.all_to_all_start(send, recv, BACKWARD)

    def finish_backward(self, got: Sequence[torch.Tensor], sizes: Sequence[int]) -> dict[int, torch.Tensor]:
        """Stage one in reverse (inside the node): every two-stage shard ``i`` of this rank gets its
        columns' gradients of the whole global batch, in its order (``global batch x cols``)."""
        codec, per_node = self._codecs.backward, self._nodes.ranks_per_node
        shards, two_stage_of = self._layout.shards, self._layout.two_stage_of
        node_grad = self._node_grads(got, sizes)  # the samples of my local index, node by node
        send = [torch.cat([encode(node_grad[s.table][:, s.col_offset : s.col_offset + s.cols].contiguous(), codec)
                           for s in two_stage_of[p]]) if two_stage_of[p] else empty_bytes(self._device)
                for p in self._nodes.node_ranks(self._nodes.node)]
        rows = self.local_rows(sizes)
        recv = [sum(wire_bytes(codec, rows[j].numel(), shards[i].cols) for i in self._layout.two_stage_index)
                for j in range(per_node)]
        got = self._hier.intra.all_to_all(send, recv, BACKWARD)
        total, at, out = sum(sizes), [0] * per_node, {}
        for i in self._layout.two_stage_index:
            c = shards[i].cols
            full = torch.empty(total, c, device=self._device)
            for j in range(per_node):
                n = rows[j].numel()
                size = wire_bytes(codec, n, c)
                full.index_copy_(0, rows[j], decode(got[j][at[j] : at[j] + size], codec, n, c))
                at[j] += size
            out[i] = full
        return out

    def _node_grads(self, got: Sequence[torch.Tensor], sizes: Sequence[int]) -> dict[int, torch.Tensor]:
        """Per two-stage table of my node, the gradients of its vectors of the samples of my local
        index, node by node (stage two's chunks, decoded)."""
        codec, per_node, dims = self._codecs.backward, self._nodes.ranks_per_node, self._layout.tables.dims
        tables = self._nodes.node_tables[self._nodes.node]
        parts: dict[int, list[torch.Tensor]] = {t: [] for t in tables}
        for m, chunk in enumerate(got):
            n, at = sizes[m * per_node + self._nodes.local], 0
            for t in tables:
                size = wire_bytes(codec, n, dims[t])
                parts[t].append(decode(chunk[at : at + size], codec, n, dims[t]))
                at += size
        return {t: torch.cat(parts[t]) for t in tables}
