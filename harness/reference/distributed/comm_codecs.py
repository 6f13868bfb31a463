"""Quantized communication codecs for the sharded DLRM's collectives (Neo/ZionEX, FBGEMM's qcomm).

A codec turns a float32 tensor into the bytes put on the wire and back. Each is chosen
separately for the forward all-to-all (pooled embeddings), the backward all-to-all (their
gradients) and the dense all-reduce. The wire format is always a flat ``uint8`` tensor, so
every backend can move it (gloo has no fp8 type: fp8 travels as its bytes).

- ``fp32``: the tensor as is (4 bytes per value);
- ``fp16``, ``bf16``: cast (2 bytes per value); bf16 keeps fp32's range, fp16 its precision;
- ``fp8``: e4m3 (1 byte per value) after scaling each row so its largest magnitude maps to
  e4m3's largest finite value (448); the per-row fp32 scale travels with the row;
- ``int8``: row-wise asymmetric quantisation as FBGEMM's fused 8-bit rows do it: per row a
  scale and a bias (fp32 each), ``q = round((x - bias) / scale)`` in 0..255.

Encoding is deterministic (round-half-to-even, no stochastic rounding), so a run with
quantized communication is as reproducible as one without. The codecs are the planner's
:class:`~harness.reference.planner.types.CommPrecision` values, so a plan's cost model and
the collectives speak of the same precisions. Their torch-free half (:class:`CommConfig`, MLPerf's
names, the bytes on the wire) is :mod:`harness.reference.planner.codecs`, re-exported here.
"""

from __future__ import annotations

import torch

from harness.reference.planner.codecs import (  # noqa: F401  (re-exported: the codecs' torch-free half)
    ROW_OVERHEAD,
    CommConfig,
    is_scaled,
    mlperf_precision,
    wire_bytes,
)
from harness.reference.planner.types import CommPrecision as Codec

FP8_MAX = 448.0  # largest finite float8_e4m3fn


def _as_bytes(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8).reshape(-1)


def encode(x: torch.Tensor, codec: Codec) -> torch.Tensor:
    """A 2-D float32 tensor as the ``uint8`` bytes ``codec`` sends."""
    if x.dim() != 2 or x.dtype != torch.float32:
        raise ValueError(f"encode takes a 2-D float32 tensor, got {x.dim()}-D {x.dtype}")
    if codec is Codec.FP32:
        return _as_bytes(x)
    if codec is Codec.FP16:
        return _as_bytes(x.to(torch.float16))
    if codec is Codec.BF16:
        return _as_bytes(x.to(torch.bfloat16))
    if codec is Codec.FP8:
        amax = x.abs().amax(dim=1, keepdim=True)
        scale = torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax))
        q = (x / scale).to(torch.float8_e4m3fn)
        return torch.cat([_as_bytes(scale), _as_bytes(q)])
    lo = x.amin(dim=1, keepdim=True)
    hi = x.amax(dim=1, keepdim=True)
    scale = torch.where(hi > lo, (hi - lo) / 255.0, torch.ones_like(hi))
    q = torch.round((x - lo) / scale).clamp_(0, 255).to(torch.uint8)
    return torch.cat([_as_bytes(scale), _as_bytes(lo), q.reshape(-1)])


def decode(data: torch.Tensor, codec: Codec, rows: int, cols: int) -> torch.Tensor:
    """The float32 ``rows x cols`` tensor that ``data`` (from :func:`encode`) stands for."""
    if data.dtype != torch.uint8 or data.numel() != wire_bytes(codec, rows, cols):
        raise ValueError(f"{codec.value} payload for {rows}x{cols} must be {wire_bytes(codec, rows, cols)} bytes")
    data = data.contiguous()
    if codec is Codec.FP32:
        return data.view(torch.float32).reshape(rows, cols).clone()
    if codec is Codec.FP16:
        return data.view(torch.float16).reshape(rows, cols).float()
    if codec is Codec.BF16:
        return data.view(torch.bfloat16).reshape(rows, cols).float()
    if codec is Codec.FP8:
        scale = data[: rows * 4].view(torch.float32).reshape(rows, 1)
        q = data[rows * 4 :].view(torch.float8_e4m3fn).reshape(rows, cols)
        return q.float() * scale
    scale = data[: rows * 4].view(torch.float32).reshape(rows, 1)
    bias = data[rows * 4 : rows * 8].view(torch.float32).reshape(rows, 1)
    q = data[rows * 8 :].reshape(rows, cols)
    return q.float() * scale + bias
