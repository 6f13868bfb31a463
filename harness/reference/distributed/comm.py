"""The collectives of the sharded DLRM, over ``torch.distributed``, with codecs and byte counters.

Every payload travels as a flat tensor through ``all_to_all_single`` (gloo on the CPU, NCCL
on GPUs): the embedding ids (int64), the pooled embeddings and their gradients (encoded by
a :mod:`~harness.reference.comm_codecs` codec into ``uint8`` bytes), and the dense gradients.

The dense all-reduce is a quantized reduce-scatter followed by an all-gather, both as
all-to-alls of encoded bytes: each rank receives every rank's encoded copy of its chunk,
decodes them and sums them in rank order (so the sum is the same on every run), encodes the
sum and sends it to every rank. Every rank, itself included, then holds the *decoded* sums,
so all replicas stay identical. A rank sends ``2 (W - 1) / W`` of the tensor's encoded size,
the traffic of a ring all-reduce, at the codec's precision.

Bytes are counted where they are sent: :class:`CommStats` holds, per kind of collective, the
bytes this rank put on the wire to other ranks (its chunk to itself is not counted), the
number of collectives and the seconds spent waiting in them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from harness.reference.comm_codecs import Codec, decode, encode, wire_bytes

# kinds of collectives, as logged
INPUT = "input_all_to_all"  # embedding ids to the ranks that hold their rows
FORWARD = "forward_all_to_all"  # pooled embeddings back to the ranks of their samples
BACKWARD = "backward_all_to_all"  # their gradients to the ranks that hold the rows
DENSE = "dense_all_reduce"  # gradients of the dense part (DDP), averaged
REPLICA = "replica_all_reduce"  # gradients of the data-parallel tables, summed
KINDS = (INPUT, FORWARD, BACKWARD, DENSE, REPLICA)

ALL_REDUCE_ROW = 256  # values per codec row in the all-reduce (the fp8/int8 scale's granularity)


@dataclass
class CommStats:
    """Bytes sent to other ranks, collectives and seconds waited, per kind."""

    bytes_sent: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    calls: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(KINDS, 0.0))

    def add(self, kind: str, nbytes: int, seconds: float = 0.0, calls: int = 1) -> None:
        self.bytes_sent[kind] += int(nbytes)
        self.calls[kind] += calls
        self.seconds[kind] += seconds

    def to_dict(self) -> dict[str, dict[str, float]]:
        return {
            kind: {"bytes": self.bytes_sent[kind], "calls": self.calls[kind], "seconds": round(self.seconds[kind], 6)}
            for kind in KINDS
        }


class PendingAllToAll:
    """An all-to-all in flight: :meth:`wait` returns the chunk received from each rank."""

    def __init__(self, work, out: torch.Tensor, recv_sizes: list[int], stats: CommStats, kind: str):
        self._work, self._out, self._sizes = work, out, recv_sizes
        self._stats, self._kind = stats, kind
        self._chunks: list[torch.Tensor] | None = None

    def wait(self) -> list[torch.Tensor]:
        if self._chunks is None:
            t0 = time.perf_counter()
            if self._work is not None:
                self._work.wait()
            self._stats.seconds[self._kind] += time.perf_counter() - t0
            self._chunks = list(self._out.split(self._sizes))
        return self._chunks


class Comm:
    """All-to-alls and all-reduces on one process group, counted in ``stats``."""

    def __init__(self, group: dist.ProcessGroup | None, stats: CommStats):
        self.group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self.stats = stats

    def all_to_all_start(
        self, chunks: Sequence[torch.Tensor], recv_sizes: Sequence[int], kind: str
    ) -> PendingAllToAll:
        """Send ``chunks[p]`` (1-D, one dtype) to rank ``p``; receive ``recv_sizes[q]`` elements from ``q``."""
        if len(chunks) != self.world_size or len(recv_sizes) != self.world_size:
            raise ValueError(f"all-to-all needs one chunk and one size per rank ({self.world_size})")
        send = torch.cat([c.reshape(-1) for c in chunks])
        out = send.new_empty(sum(recv_sizes))
        send_sizes = [c.numel() for c in chunks]
        others = sum(send_sizes) - send_sizes[self.rank]
        self.stats.add(kind, others * send.element_size())
        work = dist.all_to_all_single(out, send, list(recv_sizes), send_sizes, group=self.group, async_op=True)
        return PendingAllToAll(work, out, list(recv_sizes), self.stats, kind)

    def all_to_all(self, chunks: Sequence[torch.Tensor], recv_sizes: Sequence[int], kind: str) -> list[torch.Tensor]:
        return self.all_to_all_start(chunks, recv_sizes, kind).wait()

    def all_reduce(self, flat: torch.Tensor, codec: Codec, kind: str, *, average: bool) -> torch.Tensor:
        """Sum (or average) a 1-D float32 tensor over the ranks, sent as ``codec``; a new tensor."""
        w = self.world_size
        n = flat.numel()
        rows_per_rank = max(1, math.ceil(math.ceil(n / ALL_REDUCE_ROW) / w))
        padded = flat.new_zeros(w * rows_per_rank * ALL_REDUCE_ROW)
        padded[:n] = flat
        blocks = padded.view(w, rows_per_rank, ALL_REDUCE_ROW)
        size = wire_bytes(codec, rows_per_rank, ALL_REDUCE_ROW)
        # reduce-scatter: my chunk of every rank's tensor, summed in rank order
        got = self.all_to_all([encode(blocks[p], codec) for p in range(w)], [size] * w, kind)
        total = decode(got[0], codec, rows_per_rank, ALL_REDUCE_ROW)
        for chunk in got[1:]:
            total += decode(chunk, codec, rows_per_rank, ALL_REDUCE_ROW)
        if average:
            total /= w
        # all-gather: every rank's sum, decoded from the same bytes everywhere
        mine = encode(total, codec)
        got = self.all_to_all([mine] * w, [size] * w, kind)
        self.stats.calls[kind] -= 1  # one all-reduce, made of two all-to-alls
        out = torch.cat([decode(c, codec, rows_per_rank, ALL_REDUCE_ROW).reshape(-1) for c in got])
        return out[:n]

    def barrier(self) -> None:
        dist.barrier(group=self.group)


def ddp_comm_hook(state, bucket):  # no annotations: DDP checks them, and they are strings here
    """DDP communication hook: average the bucket's gradients with :meth:`Comm.all_reduce`.

    Registered with ``DistributedDataParallel.register_comm_hook((comm, codec), ddp_comm_hook)``,
    so the dense all-reduce uses the chosen codec and is counted like every other collective.
    """
    comm, codec = state
    buffer = bucket.buffer()
    reduced = comm.all_reduce(buffer.float(), codec, DENSE, average=True).to(buffer.dtype)
    fut = torch.futures.Future()
    fut.set_result(reduced)
    return fut
