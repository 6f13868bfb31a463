"""The collectives of the sharded DLRM, over ``torch.distributed``, with codecs and byte counters.

Every payload travels as a flat tensor through ``all_to_all_single`` (gloo on the CPU, NCCL
on GPUs): the embedding ids (int64), the pooled embeddings and their gradients (encoded by
a :mod:`~harness.reference.distributed.comm_codecs` codec into ``uint8`` bytes), and the dense gradients.

The dense all-reduce is a quantized reduce-scatter followed by an all-gather, both as
all-to-alls of encoded bytes: each rank receives every rank's encoded copy of its chunk,
decodes them and sums them in rank order (so the sum is the same on every run), encodes the
sum and sends it to every rank. Every rank, itself included, then holds the *decoded* sums,
so all replicas stay identical. A rank sends ``2 (W - 1) / W`` of the tensor's encoded size,
the traffic of a ring all-reduce, at the codec's precision. The chunks are whole values for
the elementwise codecs (fp32, fp16, bf16) and whole rows of 256 values for the scaled ones
(fp8, int8: one scale per row), split as evenly as that allows, so the bytes of the dense
all-reduce do not depend on how DDP buckets the gradients. (Gloo and NCCL both have
reduce-scatter and all-gather, but summing in the backend would sum in the codec's
precision and in the backend's order, and the two all-to-alls let every byte be counted on
its link; so this module keeps them.)

:meth:`Comm.all_reduce_start` runs an all-reduce on the comm's own thread and returns a
future: the DDP comm hook (:func:`ddp_comm_hook`) returns it, so DDP overlaps the dense
all-reduce with the rest of the backward pass. The thread issues the all-reduces in the
order they were started (DDP starts its buckets in order on every rank), on a process group
of their own.

Bytes are counted where they are sent: :class:`CommStats` holds, per kind of collective, the
bytes this rank put on the wire to other ranks (its chunk to itself is not counted), split by
link class (to a rank of its own node: ``intra_node``; of another node: ``inter_node``), the
number of collectives and the seconds spent waiting in them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from harness.reference.distributed.comm_codecs import (
    Codec,
    decode,
    encode,
    is_scaled,
    wire_bytes,
)

# the kinds of collectives as logged, their link classes, and the all-reduce's row of values for
# fp8/int8 (one scale each): the traffic model's names, so counts and projections speak alike.
# INPUT: embedding ids to the ranks that hold their rows; FORWARD: pooled embeddings back to the
# ranks of their samples; BACKWARD: their gradients to the ranks that hold the rows; DENSE:
# gradients of the dense part (DDP), averaged; REPLICA: of the data-parallel tables, summed.
from harness.reference.planner.traffic import (  # noqa: F401  (INTRA: re-exported)
    ALL_REDUCE_ROW,
    BACKWARD,
    DENSE,
    FORWARD,
    INPUT,
    INTER,
    INTRA,
    KINDS,
    REPLICA,
)
from harness.reference.timing import phases


@dataclass
class CommStats:
    """Bytes sent to other ranks (in all, and over inter-node links), collectives and seconds
    waited, per kind; ``input_batches``: the batches whose ids were distributed."""

    bytes_sent: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    inter_node: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    calls: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(KINDS, 0.0))
    input_batches: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()  # the all-reduce thread counts too

    def add(self, kind: str, nbytes: int, seconds: float = 0.0, calls: int = 1, *, inter_node: int = 0) -> None:
        with self._lock:
            self.bytes_sent[kind] += int(nbytes)
            self.inter_node[kind] += int(inter_node)
            self.calls[kind] += calls
            self.seconds[kind] += seconds

    def to_dict(self) -> dict[str, dict[str, float]]:
        return {
            kind: {"bytes": self.bytes_sent[kind], INTRA + "_bytes": self.bytes_sent[kind] - self.inter_node[kind],
                   INTER + "_bytes": self.inter_node[kind], "calls": self.calls[kind],
                   "seconds": round(self.seconds[kind], 6)}
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
                with phases.CLOCK.phase(self._kind):
                    self._work.wait()
            self._stats.add(self._kind, 0, time.perf_counter() - t0, calls=0)
            self._chunks = list(self._out.split(self._sizes))
        return self._chunks


class Comm:
    """All-to-alls and all-reduces on one process group, counted in ``stats``.

    ``ranks_per_node``: the topology (global rank ``g`` is on node ``g // ranks_per_node``),
    which tells each destination's link class; None: one node.
    """

    def __init__(self, group: dist.ProcessGroup | None, stats: CommStats, ranks_per_node: int | None = None):
        self.group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self.stats = stats
        members = dist.get_process_group_ranks(group) if group is not None else list(range(self.world_size))
        per_node = ranks_per_node or dist.get_world_size()
        self.node_of = [g // per_node for g in members]  # the node of each rank of the group
        self._thread: ThreadPoolExecutor | None = None

    def all_to_all_start(
        self, chunks: Sequence[torch.Tensor], recv_sizes: Sequence[int], kind: str
    ) -> PendingAllToAll:
        """Send ``chunks[p]`` (1-D, one dtype) to rank ``p``; receive ``recv_sizes[q]`` elements from ``q``."""
        if len(chunks) != self.world_size or len(recv_sizes) != self.world_size:
            raise ValueError(f"all-to-all needs one chunk and one size per rank ({self.world_size})")
        send = torch.cat([c.reshape(-1) for c in chunks])
        out = send.new_empty(sum(recv_sizes))
        send_sizes = [c.numel() for c in chunks]
        mine = self.node_of[self.rank]
        others = sum(send_sizes) - send_sizes[self.rank]
        inter = sum(n for n, node in zip(send_sizes, self.node_of) if node != mine)
        self.stats.add(kind, others * send.element_size(), inter_node=inter * send.element_size())
        work = dist.all_to_all_single(out, send, list(recv_sizes), send_sizes, group=self.group, async_op=True)
        return PendingAllToAll(work, out, list(recv_sizes), self.stats, kind)

    def all_to_all(self, chunks: Sequence[torch.Tensor], recv_sizes: Sequence[int], kind: str) -> list[torch.Tensor]:
        return self.all_to_all_start(chunks, recv_sizes, kind).wait()

    def all_reduce(self, flat: torch.Tensor, codec: Codec, kind: str, *, average: bool) -> torch.Tensor:
        """Sum (or average) a 1-D float32 tensor over the ranks, sent as ``codec``; a new tensor."""
        w, n = self.world_size, flat.numel()
        width = ALL_REDUCE_ROW if is_scaled(codec) else 1  # values per codec row
        rows = -(-n // width)
        counts = [rows // w + (1 if q < rows % w else 0) for q in range(w)]  # rows of each rank's chunk
        padded = flat if rows * width == n else torch.cat([flat, flat.new_zeros(rows * width - n)])
        blocks = [b.view(-1, width) if width > 1 else b.view(1, -1) for b in padded.split([c * width for c in counts])]

        def shape(q: int) -> tuple[int, int]:
            return (counts[q], width) if width > 1 else (1, counts[q])

        me = self.rank
        # reduce-scatter: my chunk of every rank's tensor, summed in rank order
        got = self.all_to_all([encode(b, codec) for b in blocks], [wire_bytes(codec, *shape(me))] * w, kind)
        total = decode(got[0], codec, *shape(me))
        for chunk in got[1:]:
            total += decode(chunk, codec, *shape(me))
        if average:
            total /= w
        # all-gather: every rank's sum, decoded from the same bytes everywhere
        got = self.all_to_all([encode(total, codec)] * w, [wire_bytes(codec, *shape(q)) for q in range(w)], kind)
        self.stats.add(kind, 0, calls=-1)  # one all-reduce, made of two all-to-alls
        out = torch.cat([decode(c, codec, *shape(q)).reshape(-1) for q, c in enumerate(got)])
        return out[:n]

    def all_reduce_start(self, flat: torch.Tensor, codec: Codec, kind: str, *,
                         average: bool) -> torch.futures.Future:
        """:meth:`all_reduce` on this comm's thread: a future of its result. The thread runs the
        all-reduces in the order they are started, so every rank issues the same collectives in
        the same order when every rank starts them in the same order."""
        if self._thread is None:
            self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="harness-allreduce")
        fut: torch.futures.Future = torch.futures.Future()

        def run() -> None:
            try:
                fut.set_result(self.all_reduce(flat, codec, kind, average=average))
            except BaseException as err:  # noqa: BLE001  (handed to whoever waits on the future)
                fut.set_exception(err)

        self._thread.submit(run)
        return fut

    def close(self) -> None:
        if self._thread is not None:
            self._thread.shutdown(wait=True)
            self._thread = None

    def barrier(self) -> None:
        dist.barrier(group=self.group)


def ddp_comm_hook(state, bucket):  # no annotations: DDP checks them, and they are strings here
    """DDP communication hook: sum the bucket's gradients over the ranks with :meth:`Comm.all_reduce`
    (each rank's loss is already its share of the global-batch mean: see
    :meth:`harness.reference.distributed.session.DistributedSession._objective`).

    Registered with ``DistributedDataParallel.register_comm_hook((comm, codec, overlap),
    ddp_comm_hook)``, so the dense all-reduce uses the chosen codec and is counted like every
    other collective. With ``overlap`` it returns the future of the all-reduce running on the
    comm's thread (DDP waits for it at the end of the backward pass, which goes on meanwhile);
    without, the all-reduce is done when the hook returns.
    """
    comm, codec, overlap = state
    buffer = bucket.buffer()
    if overlap:
        dtype = buffer.dtype
        return comm.all_reduce_start(buffer.float(), codec, DENSE, average=False).then(
            lambda fut: fut.value().to(dtype))
    reduced = comm.all_reduce(buffer.float(), codec, DENSE, average=False).to(buffer.dtype)
    fut = torch.futures.Future()
    fut.set_result(reduced)
    return fut
