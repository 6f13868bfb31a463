"""The output distribution of the flat (one-stage) tables: pooled vectors to their samples' ranks,
and their gradients back to the shards (TorchRec's ``PooledEmbeddingsAllToAll``).

Forward: each rank sends each rank the pooled partial vectors of that rank's samples, encoded
with the forward codec. The receiver places column shards side by side and *sums* the partial
vectors of row shards (the reduction of row-wise sharding; for one-hot features only one shard's
partial is non-zero, so the sum is exact). A sequence collection's shards (one vector per event:
nothing to sum) send the vectors of the ids they hold only, which the receiver places at the
rows of those ids. Backward: the same chunks in reverse, with the backward codec.

**On the wire.** A pooled vector or its gradient crosses in the collective's codec, or, where
that is fp32, in the tables' own type (:func:`wire_codec`). Where the codec encodes each value
alone (fp32, fp16, bf16) and the batched paths are on, a rank's chunk is one matrix, its shards'
columns side by side (encoded at once, placed by one ``index_add_`` per rank): the same bytes as
shard after shard. The scaled codecs (fp8, int8) scale each shard's row of a sample on its own,
so their chunks go shard after shard.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from harness.reference.distributed.comm import BACKWARD, FORWARD, Comm, PendingAllToAll
from harness.reference.distributed.comm_codecs import (
    Codec,
    CommConfig,
    decode,
    encode,
    is_scaled,
    wire_bytes,
)
from harness.reference.distributed.input_dist import KeyedIds
from harness.reference.distributed.layout import ShardLayout
from harness.reference.distributed.shardings import RowRange, ShardSpec


def wire_codec(codec: Codec, table_dtype: torch.dtype) -> Codec:
    """What a pooled vector or its gradient crosses the wire in: the collective's ``codec``, or,
    where that is fp32, the tables' own type (a bf16 table's vectors are bf16 values, and their
    gradients come from bf16 layers: sending them in fp32 would only double the bytes)."""
    if codec is Codec.FP32 and table_dtype != torch.float32:
        return Codec.BF16 if table_dtype == torch.bfloat16 else Codec.FP16
    return codec


@dataclass(frozen=True)
class WireCodecs:
    """The codecs pooled vectors (``forward``) and their gradients (``backward``) cross in."""

    forward: Codec
    backward: Codec

    @classmethod
    def of(cls, codecs: CommConfig, table_dtype: torch.dtype) -> WireCodecs:
        return cls(wire_codec(codecs.forward, table_dtype), wire_codec(codecs.backward, table_dtype))


def empty_bytes(device: torch.device) -> torch.Tensor:
    """An empty chunk of an all-to-all."""
    return torch.empty(0, dtype=torch.uint8, device=device)


def sample_cuts(k: KeyedIds, bounds: Sequence[int], sequence: bool) -> list[int]:
    """Where each rank's samples' rows start in a shard's vectors (its ids ``k``): every
    sample's (``bounds``, rank ``q``'s samples ``bounds[q]:bounds[q + 1]``), or, in a sequence
    collection, only those of the ids the shard holds."""
    if not sequence:
        return list(bounds)
    ends = torch.cumsum(k.lengths, 0)
    return [0, *(int(ends[b - 1]) if b > 0 else 0 for b in bounds[1:])]


class PooledOutputDist:
    """The flat all-to-all of a collection's pooled vectors and of their gradients, on ``comm``.

    Args:
        layout: the collection's (its flat shards go through here).
        codecs: what the vectors and gradients cross in.
        comm: the process group of the forward and backward all-to-alls.
        device: where the chunks and embeddings are made.
        sequence: a sequence collection (a vector per id a shard holds; see the module docstring).
        batched: a rank's chunk as one matrix where the codec allows (False: shard after shard).
    """

    def __init__(self, layout: ShardLayout, codecs: WireCodecs, comm: Comm, device: torch.device, *,
                 sequence: bool, batched: bool):
        self._layout, self._codecs, self._comm, self._device = layout, codecs, comm, device
        self._sequence, self._batched = sequence, batched
        self._row_bytes_of: dict[tuple[str, int], int] = {}

    def side_by_side(self, codec: Codec) -> bool:
        """Whether a rank's chunk of pooled vectors (or their gradients) is one matrix whose rows
        are samples, the shards' columns side by side, rather than shard after shard (see the
        module docstring; a sequence collection's shards send the vectors of different rows)."""
        return not self._sequence and not is_scaled(codec) and self._batched

    # ------------------------------------------------------------------ forward
    def start(self, partials: Sequence[torch.Tensor], keyed: Sequence[KeyedIds], bounds: Sequence[int], batch: int,
              present: dict[RowRange, torch.Tensor]) -> PendingAllToAll:
        """Start sending the flat shards' vectors (``partials[i]``, of local shard ``i``) to their
        samples' ranks; ``bounds``: where each rank's samples start; ``batch``: this rank's."""
        flat = self._layout.flat_index
        flat_keyed = [keyed[self._layout.key_index[i]] for i in flat]
        return self._comm.all_to_all_start(self.encode_pooled([partials[i] for i in flat], bounds, flat_keyed),
                                           self.pooled_sizes(batch, present), FORWARD)

    def encode_pooled(self, partials: Sequence[torch.Tensor], bounds: Sequence[int],
                      keyed: Sequence[KeyedIds] | None = None) -> list[torch.Tensor]:
        """Per destination rank ``q``, this rank's shards' pooled vectors of ``q``'s samples
        (rows ``bounds[q]:bounds[q + 1]``; a sequence collection's, of its ids in the shard, with
        ``keyed``), encoded with the forward codec, shard after shard."""
        codec, world = self._codecs.forward, self._layout.world_size
        empty = empty_bytes(self._device)
        if self.side_by_side(codec):  # every shard's columns of a sample in one row: one encode
            if not partials:
                return [empty] * world
            block = torch.cat([p.float() for p in partials], dim=1) if len(partials) > 1 else partials[0].float()
            row = wire_bytes(codec, 1, block.shape[1])
            return list(encode(block, codec).split([(bounds[q + 1] - bounds[q]) * row for q in range(world)]))
        cuts = ([sample_cuts(k, bounds, self._sequence) for k in keyed] if keyed is not None
                else [list(bounds)] * len(partials))
        return [
            torch.cat([encode(p[c[q] : c[q + 1]].float(), codec) for p, c in zip(partials, cuts)]) if partials else empty
            for q in range(world)
        ]

    def rows_of(self, s: ShardSpec, batch: int, present: dict[RowRange, torch.Tensor]) -> int:
        """This rank's rows whose vectors shard ``s`` sends: every sample's, or, in a sequence
        collection, those whose id it holds."""
        return int(present[s.key].numel()) if self._sequence else batch

    def pooled_sizes(self, batch: int, present: dict[RowRange, torch.Tensor] | None = None) -> list[int]:
        """Bytes this rank receives from each rank for its ``batch`` samples."""
        codec = self._codecs.forward
        if not self._sequence:  # every shard sends one row per sample
            return [batch * self.row_bytes(codec, p) for p in range(self._layout.world_size)]
        return [sum(wire_bytes(codec, self.rows_of(s, batch, present or {}), s.cols) for s in shards)
                for shards in self._layout.flat_of]

    def row_bytes(self, codec: Codec, p: int) -> int:
        """Bytes on the wire of one sample's row of rank ``p``'s flat shards' vectors (or their
        gradients), shard after shard: a pooled collection's chunk is the batch's rows times this
        (``wire_bytes`` is linear in the rows), asked once per step and collective, summed once."""
        key = (codec.value, p)
        got = self._row_bytes_of.get(key)
        if got is None:
            got = self._row_bytes_of[key] = sum(int(wire_bytes(codec, 1, s.cols)) for s in self._layout.flat_of[p])
        return got

    def decode_pooled(self, got: Sequence[torch.Tensor], batch: int,
                      present: dict[RowRange, torch.Tensor] | None = None) -> torch.Tensor:
        """The ``batch x sum(dims)`` embeddings from every rank's chunk: column shards side by
        side, row shards summed (a sequence collection's placed at the rows of their ids;
        data-parallel and two-stage tables are left zero)."""
        codec, out_start = self._codecs.forward, self._layout.tables.out_start
        if self.side_by_side(codec):
            # transposed, so that each shard's column lands on a contiguous row; index_add_ adds the
            # ranks' chunks in rank order and each chunk's columns in its shards' order, as below
            out_t = torch.zeros(out_start[-1], batch, device=self._device)
            for p, chunk in enumerate(got):
                columns = self._layout.flat_columns[p]
                if columns.numel():
                    out_t.index_add_(0, columns, decode(chunk, codec, batch, columns.numel()).t())
            return out_t.t().contiguous()
        out = torch.zeros(batch, out_start[-1], device=self._device)
        for p, chunk in enumerate(got):
            at = 0
            for s in self._layout.flat_of[p]:
                rows = self.rows_of(s, batch, present or {})
                n = wire_bytes(codec, rows, s.cols)
                lo, hi = self._layout.out_columns(s)
                vectors = decode(chunk[at : at + n], codec, rows, s.cols)
                if self._sequence:
                    out[:, lo:hi].index_copy_(0, present[s.key], vectors)  # type: ignore[index]
                else:
                    out[:, lo:hi] += vectors
                at += n
        return out

    # ------------------------------------------------------------------ backward
    def grad_rows(self, keyed: Sequence[KeyedIds], bounds: Sequence[int]) -> dict[int, list[int]]:
        """Per flat local shard ``i``, the rows of each rank's samples it gets gradients for."""
        w, layout = self._layout.world_size, self._layout
        cuts = {i: sample_cuts(keyed[layout.key_index[i]], bounds, self._sequence) for i in layout.flat_index}
        return {i: [c[q + 1] - c[q] for q in range(w)] for i, c in cuts.items()}

    def start_backward(self, grad: torch.Tensor, sizes: Sequence[int], rows: dict[int, list[int]],
                       present: dict[RowRange, torch.Tensor]) -> PendingAllToAll:
        """Start sending the gradients (``B x sum(dims)`` fp32, this rank's samples) of the flat
        shards' vectors back to them; ``sizes``: every rank's batch; ``rows``: :meth:`grad_rows`."""
        codec, w, layout = self._codecs.backward, self._layout.world_size, self._layout

        def block(s: ShardSpec) -> torch.Tensor:
            lo, hi = layout.out_columns(s)
            if self._sequence:  # the gradients of the vectors the shard sent: of the ids it holds
                return grad[:, lo:hi].index_select(0, present[s.key])
            return grad[:, lo:hi].contiguous()

        empty = empty_bytes(self._device)
        if self.side_by_side(codec):  # each rank's shards' columns of a sample in one row, as they came
            chunks = [encode(grad.index_select(1, layout.flat_columns[p]), codec) if layout.flat_of[p]
                      else empty for p in range(w)]
        else:
            chunks = [torch.cat([encode(block(s), codec) for s in layout.flat_of[p]]) if layout.flat_of[p]
                      else empty for p in range(w)]
        if self._sequence:
            recv = [sum(wire_bytes(codec, rows[i][q], layout.shards[i].cols) for i in layout.flat_index)
                    for q in range(w)]
        else:  # each of my flat shards gets one row per sample of rank q
            recv = [sizes[q] * self.row_bytes(codec, layout.rank) for q in range(w)]
        return self._comm.all_to_all_start(chunks, recv, BACKWARD)

    def finish_backward(self, got: Sequence[torch.Tensor], sizes: Sequence[int], rows: dict[int, list[int]],
                        grouped: set[int]) -> dict[int, torch.Tensor]:
        """Per flat local shard ``i``, the gradients of its vectors (``rows x cols``, the global
        batch's, in its order), from every rank's chunk; ``grouped``: shards updated with their
        group (their gradients may be views, concatenated anyway)."""
        codec, layout = self._codecs.backward, self._layout
        width = sum(layout.shards[i].cols for i in layout.flat_index)
        if not self.side_by_side(codec):
            at = [0] * layout.world_size
            return {i: self._decode_shard(got, rows[i], layout.shards[i].cols, at) for i in layout.flat_index}
        pooled: dict[int, torch.Tensor] = {}
        if width:  # the global batch's rows, each my flat shards' columns side by side
            full = torch.cat([decode(chunk, codec, sizes[q], width) for q, chunk in enumerate(got)])
            lo = 0
            for i in layout.flat_index:
                cols = layout.shards[i].cols
                # a group's members are concatenated for its update (update_shards): views will do
                pooled[i] = full[:, lo : lo + cols] if cols == width or i in grouped else \
                    full[:, lo : lo + cols].contiguous()
                lo += cols
        return pooled

    def _decode_shard(self, got: Sequence[torch.Tensor], rows: Sequence[int], cols: int, at: list[int]) -> torch.Tensor:
        """One shard's gradients from every rank's chunk (``rows[q]`` of rank ``q``'s, from byte
        ``at[q]``, which moves past them), the ranks' one after the other."""
        codec, blocks = self._codecs.backward, []
        for q, n in enumerate(rows):
            size = wire_bytes(codec, n, cols)
            blocks.append(decode(got[q][at[q] : at[q] + size], codec, n, cols))
            at[q] += size
        return torch.cat(blocks)
