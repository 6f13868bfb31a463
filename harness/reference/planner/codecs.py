"""The communication codecs without torch: which codec each collective uses (:class:`CommConfig`),
the names MLPerf gives their precisions, and the bytes each puts on the wire.

The codecs are the planner's :class:`~harness.reference.planner.types.CommPrecision` values; what
they do to tensors (encode, decode) is :mod:`harness.reference.distributed.comm_codecs`, which
re-exports these names. The run set and the traffic model speak of codecs through this module,
so they need no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import overload

from harness.errors import ErrorCategory, HarnessError
from harness.reference.planner.types import CommPrecision as Codec

COLLECTIVES = ("forward", "backward", "allreduce")
ROW_OVERHEAD = {Codec.FP8: 4, Codec.INT8: 8}  # a row's fp32 scale (+ fp32 bias): fp8 4 bytes, int8 8
_MLPERF_NAME = {Codec.BF16: "bfloat16"}  # MLPerf's spelling; the others are the same


def mlperf_precision(codec: Codec) -> str:
    """The name MLPerf's ``lowest_numerical_precision_in_comm`` uses for ``codec``."""
    return _MLPERF_NAME.get(codec, codec.value)


@dataclass(frozen=True)
class CommConfig:
    """Which codec each collective uses."""

    forward: Codec = Codec.FP32
    backward: Codec = Codec.FP32
    allreduce: Codec = Codec.FP32

    @classmethod
    def from_names(cls, names: dict[str, str] | None) -> CommConfig:
        """From ``{"forward": "fp16", ...}`` (a run config's ``comm``); unnamed collectives are fp32."""
        names = names or {}
        known = {c.value for c in Codec}
        for collective, codec in names.items():
            if collective not in COLLECTIVES or codec not in known:
                raise HarnessError(
                    f"unknown codec {collective}={codec}; codecs: {', '.join(sorted(known))}", ErrorCategory.BAD_INPUT
                )
        return cls(**{k: Codec(v) for k, v in names.items()})

    def to_names(self) -> dict[str, str]:
        return {"forward": self.forward.value, "backward": self.backward.value, "allreduce": self.allreduce.value}

    def lowest_precision(self) -> str:
        lowest = min((self.forward, self.backward, self.allreduce), key=lambda c: c.bytes_per_element)
        return mlperf_precision(lowest)


def is_scaled(codec: Codec) -> bool:
    """Whether ``codec`` sends a scale per row (fp8, int8): its rows must be whole rows of values."""
    return codec in ROW_OVERHEAD


@overload
def wire_bytes(codec: Codec, rows: int, cols: int) -> int: ...


@overload
def wire_bytes(codec: Codec, rows: float, cols: int) -> float: ...


def wire_bytes(codec: Codec, rows: float, cols: int) -> float:
    """Bytes on the wire for a ``rows x cols`` float32 tensor sent as ``codec`` (an int for whole rows;
    the traffic model also asks for an expected, fractional, count of rows)."""
    return rows * (cols * codec.bytes_per_element + ROW_OVERHEAD.get(codec, 0))
