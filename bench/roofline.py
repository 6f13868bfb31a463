"""The limit this machine puts on one DLRM training step (a roofline), from two measurements
made in the same run: the dense part's matrix multiplies and the memory bandwidth.

    step_s   = gemm_s + embedding_bytes / bw_bytes_per_s
    limit    = batch / step_s                                  (samples/s)

* ``gemm_s``: every multiply of one step of the dense part (:func:`mlp_gemms`: each layer's
  forward and its two backward multiplies, the interaction's), each shape timed at the
  benchmark's batch in the precision's compute type (fp32; bf16; fp16 on CUDA, bf16 on a CPU)
  as the median of 7 repetitions, summed (:func:`gemm_time`).
* ``embedding_bytes``: what the embedding rows of one step must move at least
  (:class:`EmbeddingTraffic`): the forward gather of every looked-up row, and the backward
  read-modify-write of every distinct row touched, its weights in the tables' type and its
  fp32 Adagrad state, each read once and written once.
* ``bw_bytes_per_s``: a large tensor copy ``dst.copy_(src)``, read + write bytes, the median of
  7 (:func:`copy_bandwidth`).

Both terms are lower bounds on time (GEMMs at their measured rate, bytes at streaming
bandwidth, nothing else: no casts, no elementwise work, no Python), and they are added rather
than overlapped, as one step's phases mostly run one after the other.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from harness.reference.models.dlrm import DLRMConfig, Interaction
from harness.rules.precision import Precision

ADAGRAD_STATE_BYTES = 4  # the fused (and torch's) Adagrad keeps one fp32 accumulator per value, in every precision


def sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def gemm_dtype(precision: Precision, device) -> torch.dtype:
    """The operands' type of the dense part's multiplies at ``precision``: fp32; bf16; fp16 on
    CUDA (a CPU's fast reduced type is bf16, so fp16 there is bounded by bf16's rate)."""
    if precision is Precision.FP32:
        return torch.float32
    if precision is Precision.FP16 and torch.device(device).type == "cuda":
        return torch.float16
    return torch.bfloat16


def mlp_gemms(cfg: DLRMConfig, batch: int) -> list[tuple[int, int, int]]:
    """The matrix multiplies of one training step of the dense part, ``(m, k, n)`` each: every
    layer's forward ``(B x in) @ (in x out)`` and its two backward ones (input and weight
    gradients), for the bottom MLP, the DCN layers' low-rank pair (or the dot interaction's
    batched ``(F+1) x D`` products, as one ``B(F+1) x D x (F+1)`` multiply) and the top MLP."""
    layers, n_in = [], cfg.num_dense
    for w in cfg.bottom_mlp:
        layers.append((n_in, w))
        n_in = w
    out = []
    if cfg.interaction is Interaction.DCN:
        for _ in range(cfg.dcn_layers):
            layers += [(cfg.interaction_width, cfg.dcn_rank), (cfg.dcn_rank, cfg.interaction_width)]
    else:
        n = cfg.num_sparse + 1
        out += [(batch * n, cfg.embedding_dim, n)] * 3  # forward, and the two gradients (the same shape)
    n_in = cfg.interaction_width
    for w in cfg.top_mlp:
        layers.append((n_in, w))
        n_in = w
    for k, n in layers:
        out += [(batch, k, n), (batch, n, k), (n, batch, k)]  # forward, input gradient, weight gradient
    return out


def gemm_time(gemms: Sequence[tuple[int, int, int]], device, dtype: torch.dtype, reps: int = 7) -> tuple[float, float]:
    """Seconds and FLOPs of ``gemms`` (``(m, k, n)`` each) with ``dtype`` operands: each shape
    timed as the median of ``reps`` repetitions after a warm-up, summed. The layers' own shapes
    at the benchmark's batch: what these GEMMs can do here, not a square matrix's peak."""
    g = torch.Generator(device="cpu").manual_seed(0)
    total_s, flops = 0.0, 0.0
    for m, k, n in gemms:
        a = torch.randn(m, k, generator=g).to(device, dtype)
        b = torch.randn(k, n, generator=g).to(device, dtype)
        for _ in range(2):
            a @ b
        times = []
        for _ in range(reps):
            sync(device)
            t = time.perf_counter()
            a @ b
            sync(device)
            times.append(time.perf_counter() - t)
        total_s += statistics.median(times)
        flops += 2 * m * k * n
    return total_s, flops


def copy_bandwidth(device, nbytes: int | None = None, reps: int = 7) -> tuple[float, int]:
    """The memory bandwidth of ``device`` in bytes/s, and the bytes copied: ``dst.copy_(src)`` of
    ``nbytes`` (256 MiB on a CPU, 1 GiB on a GPU: far beyond every cache), counting the bytes
    read and the bytes written, the median of ``reps`` copies after a warm-up."""
    if nbytes is None:
        nbytes = (1 << 30) if torch.device(device).type == "cuda" else (256 << 20)
    src = torch.ones(nbytes // 4, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    times = []
    for _ in range(reps):
        sync(device)
        t = time.perf_counter()
        dst.copy_(src)
        sync(device)
        times.append(time.perf_counter() - t)
    return 2 * src.numel() * 4 / statistics.median(times), src.numel() * 4


def distinct_rows(sparse: torch.Tensor, pooling: Sequence[int]) -> int:
    """Rows of all tables one batch touches: the distinct ids of each table's columns of
    ``sparse`` (``B x sum(pooling)``, per-table ids), summed over the tables."""
    cols = [0, *torch.tensor(pooling).cumsum(0).tolist()]
    return sum(int(torch.unique(sparse[:, cols[f] : cols[f + 1]]).numel()) for f in range(len(pooling)))


@dataclass(frozen=True)
class EmbeddingTraffic:
    """The bytes the embedding rows of one training step move at least::

        bytes = B * sum(pooling) * D * b_table          forward: gather every looked-up row
              + U * 2 * (D * b_table + S * b_state)     backward: read and write each distinct
                                                        row's weights and Adagrad state

    with ``B`` the batch, ``D`` the dimension, ``U`` the distinct rows the step touches (the
    distinct ids of each table, summed over tables), ``b_table`` the tables' bytes per value
    (4 in fp32, 2 in bf16 or fp16), ``b_state`` Adagrad's (4: its state is fp32) and ``S`` the
    state's values a row (``D`` for Adagrad, 1 for row-wise Adagrad)."""

    gathered_rows: float
    distinct_rows: float
    dim: int
    table_bytes_per_value: int
    state_bytes_per_value: int = ADAGRAD_STATE_BYTES
    rowwise: bool = False

    @property
    def gather_bytes(self) -> float:
        return self.gathered_rows * self.dim * self.table_bytes_per_value

    @property
    def update_bytes(self) -> float:
        state_values = 1 if self.rowwise else self.dim
        return self.distinct_rows * 2 * (self.dim * self.table_bytes_per_value
                                         + state_values * self.state_bytes_per_value)

    @property
    def bytes(self) -> float:
        return self.gather_bytes + self.update_bytes

    @classmethod
    def of_batches(cls, sparse_batches: Sequence[torch.Tensor], cfg: DLRMConfig, precision: Precision,
                   rowwise: bool = False) -> EmbeddingTraffic:
        """The mean traffic of a step over ``sparse_batches`` (each ``B x sum(pooling)``)."""
        distinct = statistics.mean(distinct_rows(s, cfg.pooling) for s in sparse_batches)
        gathered = statistics.mean(s.numel() for s in sparse_batches)
        return cls(gathered, distinct, cfg.embedding_dim, precision.bytes_per_element, rowwise=rowwise)


@dataclass(frozen=True)
class Roofline:
    """The limit of one step: its GEMMs at the measured rate plus its embedding bytes at the
    measured bandwidth."""

    batch_size: int
    gemm_dtype: torch.dtype
    gemm_s: float
    gemm_flops: float
    traffic: EmbeddingTraffic
    bw_bytes_per_s: float
    bw_probe_bytes: int

    @property
    def memory_s(self) -> float:
        return self.traffic.bytes / self.bw_bytes_per_s

    @property
    def step_s(self) -> float:
        return self.gemm_s + self.memory_s

    @property
    def samples_per_s(self) -> float:
        return self.batch_size / self.step_s

    @classmethod
    def measure(cls, cfg: DLRMConfig, batch_size: int, sparse_batches: Sequence[torch.Tensor], precision: Precision,
                device, rowwise: bool = False) -> Roofline:
        """Measure both terms here and now (a few seconds); ``rowwise``: the tables' optimizer is
        row-wise Adagrad (one state value a row)."""
        dtype = gemm_dtype(precision, device)
        gemm_s, flops = gemm_time(mlp_gemms(cfg, batch_size), device, dtype)
        bw, probe = copy_bandwidth(device)
        traffic = EmbeddingTraffic.of_batches(sparse_batches, cfg, precision, rowwise)
        return cls(batch_size, dtype, gemm_s, flops, traffic, bw, probe)

    def describe(self) -> list[str]:
        """The limit with its parts, a few lines."""
        t, name = self.traffic, str(self.gemm_dtype).removeprefix("torch.")
        return [
            f"dense part: {self.gemm_flops / self.batch_size / 1e6:.2f} MFLOP/sample (forward + backward); its {name} "
            f"GEMMs at batch {self.batch_size} take {self.gemm_s * 1e3:.2f} ms/step "
            f"({self.gemm_flops / self.gemm_s / 1e9:.1f} GFLOP/s, each shape's median of 7)",
            f"embeddings: {t.gathered_rows:,.0f} rows gathered ({t.gather_bytes / 1e6:.1f} MB) + {t.distinct_rows:,.0f} "
            f"distinct rows read and written with their fp32 {'row-wise ' if t.rowwise else ''}Adagrad state "
            f"({t.update_bytes / 1e6:.1f} MB) = "
            f"{t.bytes / 1e6:.1f} MB/step at {self.bw_bytes_per_s / 1e9:.1f} GB/s "
            f"(copy of {self.bw_probe_bytes >> 20} MiB, read + write, median of 7) take {self.memory_s * 1e3:.2f} ms/step",
            f"roofline: {self.gemm_s * 1e3:.2f} + {self.memory_s * 1e3:.2f} = {self.step_s * 1e3:.2f} ms/step, "
            f"{self.samples_per_s:,.0f} samples/s",
        ]
