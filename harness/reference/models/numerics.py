"""Reduced-precision numerics of the reference: the dense layers' autocast, and embedding tables
stored in bf16 or fp16 with deterministic stochastic rounding.

**Stochastic rounding.** A table stored in 16 bits is updated in fp32 (its rows read, widened,
updated by the fused optimizer, whose state stays fp32) and written back rounded to one of the
two neighbouring 16-bit values, up with a probability equal to the distance from the lower
one: the rounding is unbiased, so updates smaller than half a unit in the last place still add
up over steps (Zhang et al., "Training with Low-precision Embedding Tables", 2018; FBGEMM's TBE
does this). Unlike FBGEMM's, whose random bits come from the thread that does the update, the
bits here are a pure function of ``(seed, step, table, row, column)``: a row of a row-wise
shard on rank 3 rounds exactly as that row does in one process, and the same seed gives the
same curve, bit for bit.

The bits: a 32-bit key per updated row, ``mix(seed, step, table, row)`` (three rounds of a
32-bit integer finaliser, :func:`_mix32`), times an odd 31-bit multiplier per column
(``mix(column) | 1``), of which bits 16 to 31 are taken, the highest flipped: for a fixed
column, multiplying by an odd number is a bijection modulo 2**32, so a uniform key gives uniform
bits. Everything is
int32/int64 arithmetic that torch computes alike on every device, with no overflow in the
int64 steps (each product is below 2**63).

* bf16: the fp32 value's bits plus 16 random bits, truncated to the upper 16: rounds up with
  probability exactly ``low 16 bits / 2**16`` (for negative values, the magnitude; unbiased).
* fp16: in fp16's normal range the same with 13 bits; below it (fp16's subnormals, a fixed
  spacing of 2**-24) ``floor(x * 2**24 + u) * 2**-24`` with ``u`` of 16 bits (a bias below
  2**-16 of a unit in the last place). Values beyond fp16's range are clamped to it.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import overload

import torch

from harness.rules.precision import Precision, parse_precision

_WORKSPACES = threading.local()


def workspace(name: str, like: torch.Tensor, dtype: torch.dtype | None = None,
              shape: Sequence[int] | None = None) -> torch.Tensor:
    """A tensor of ``shape`` (default ``like``'s), ``like``'s device and ``dtype`` (default
    ``like``'s), from a buffer of this thread kept for the next call (grown when too small): its
    contents are whatever was last written there."""
    buffers = getattr(_WORKSPACES, "buffers", None)
    if buffers is None:
        buffers = _WORKSPACES.buffers = {}
    dtype = like.dtype if dtype is None else dtype
    shape = tuple(like.shape if shape is None else shape)
    numel = 1
    for n in shape:
        numel *= int(n)
    key = (name, dtype, like.device)
    buf = buffers.get(key)
    if buf is None or buf.numel() < numel:
        buf = buffers[key] = torch.empty(numel, dtype=dtype, device=like.device)
    return buf[:numel].view(shape)


_DTYPES = {Precision.FP32: torch.float32, Precision.BF16: torch.bfloat16, Precision.FP16: torch.float16}
_MASK32 = 0xFFFFFFFF
_M = 0x45D9F3B  # the finaliser's multiplier (< 2**27: x * _M stays below 2**59 for x < 2**32)
_FP16_MAX = 65504.0
_FP16_MIN_NORMAL = 2.0**-14


def torch_dtype(precision: Precision | str) -> torch.dtype:
    """The torch dtype of ``precision``."""
    return _DTYPES[parse_precision(precision)]


def precision_of(dtype: torch.dtype) -> Precision:
    """The :class:`Precision` of a table's dtype."""
    for p, d in _DTYPES.items():
        if d == dtype:
            return p
    raise ValueError(f"no precision stores {dtype}")


def autocast(precision: Precision | str, device: torch.device | str):
    """The dense layers' autocast region for ``precision`` (none for fp32)."""
    p = parse_precision(precision)
    if p is Precision.FP32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=_DTYPES[p])


@overload
def _mix32(x: torch.Tensor) -> torch.Tensor: ...


@overload
def _mix32(x: int) -> int: ...


def _mix32(x: torch.Tensor | int) -> torch.Tensor | int:
    """A bijection of 32-bit values (int64 tensors or ints in ``[0, 2**32)``) with good avalanche
    (the "hash32" finaliser: two xor-shift-multiply rounds)."""
    x = (((x >> 16) ^ x) * _M) & _MASK32
    x = (((x >> 16) ^ x) * _M) & _MASK32
    return (x >> 16) ^ x


def _mix32_(x: torch.Tensor) -> torch.Tensor:
    """:func:`_mix32` of an int64 tensor, in place (the same values, without a fresh tensor per
    operation: the keys of a step's rows are computed on tens of thousands of them)."""
    for _ in range(2):
        x.bitwise_xor_(x >> 16).mul_(_M).bitwise_and_(_MASK32)
    return x.bitwise_xor_(x >> 16)


def _to_int32(x: torch.Tensor) -> torch.Tensor:
    """int64 values in ``[0, 2**32)`` as the int32 of the same bits."""
    return torch.where(x >= 1 << 31, x - (1 << 32), x).to(torch.int32)


def step_key(seed: int, step: int) -> int:
    """The 32-bit key of one optimizer step of one run."""
    return int(_mix32(_mix32(seed & _MASK32) ^ (step & _MASK32) ^ (((seed >> 32) ^ (step >> 32)) & 0xFFFF)))


def row_keys(seed: int, step: int, tables: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """The ``U x 1`` int32 keys of rows ``rows`` (each row's index in its table) of tables
    ``tables`` (each row's table index in the model) at ``step``."""
    s = step_key(seed, step)
    rows = rows.to(torch.int64)
    h = _mix32_((tables.to(torch.int64) & _MASK32) ^ s)
    h = _mix32_(h ^ (rows >> 32))
    h = _mix32_(h ^ (rows & _MASK32))
    return _to_int32(h).unsqueeze(1)


def _table_keys(seed: int, step: int, tables: torch.Tensor) -> torch.Tensor:
    """Per table, the hash that :func:`row_keys` mixes with a row's low 32 bits when its high 32
    bits are zero (every row of a table of fewer than 2**32 rows)."""
    return _mix32_(_mix32_((tables & _MASK32) ^ step_key(seed, step)))


@functools.lru_cache(maxsize=256)
def _multipliers(col_offset: int, cols: int, device: str) -> torch.Tensor:
    c = torch.arange(col_offset, col_offset + cols, dtype=torch.int64)
    odd = (_mix32((c + 0x9E3779B9) & _MASK32) & 0x7FFFFFFF) | 1
    return odd.to(torch.int32).to(device)


def column_multipliers(col_offset: int, cols: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """The odd int32 multiplier of each column ``col_offset .. col_offset + cols - 1``."""
    return _multipliers(int(col_offset), int(cols), str(torch.device(device)))


def random_bits(keys: torch.Tensor, multipliers: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """``U x C`` int32 values, uniform in ``[0, 2**16)``: bits 16..31 of ``key * multiplier``
    with the highest of them flipped (:func:`stochastic_round` adds them this way in fewer
    passes; flipping a bit keeps them uniform)."""
    out = torch.mul(keys, multipliers, out=out) if out is not None else torch.mul(keys, multipliers)
    return out.bitwise_right_shift_(16).add_(1 << 15)


def _high_halves(x: torch.Tensor) -> torch.Tensor:
    """The upper 16 bits of each int32 of ``x``, as a signed int16 view (no copy; little-endian,
    as on every platform torch runs on)."""
    return x.view(torch.int16)[..., 1::2]


def stochastic_round(values: torch.Tensor, dtype: torch.dtype, keys: torch.Tensor, multipliers: torch.Tensor,
                     ) -> torch.Tensor:
    """``values`` (``U x C`` fp32; consumed) rounded stochastically to ``dtype`` (bf16 or fp16)
    with the random bits of ``keys`` (``U x 1``) and ``multipliers`` (``C``); fp32 is returned as is.

    bf16 is returned as a view (not contiguous) of ``values``' storage, since bf16 is fp32's upper
    half: the upper halves of ``values``' bits plus :func:`random_bits`. Every pass is an int32
    operation on int32 tensors (torch's mixed-type integer arithmetic, and a conversion to int16,
    take several times longer each)."""
    if dtype == torch.float32:
        return values
    if dtype == torch.bfloat16:
        bits = values.view(torch.int32)
        bits.add_(random_bits(keys, multipliers, out=workspace("rounding_bits", bits)))
        return _high_halves(bits).view(torch.bfloat16)
    if dtype != torch.float16:
        raise ValueError(f"no stochastic rounding to {dtype}")
    bits = random_bits(keys, multipliers, out=workspace("rounding_bits", values.view(torch.int32)))
    values.clamp_(-_FP16_MAX, _FP16_MAX)
    small = values.abs() < _FP16_MIN_NORMAL
    normal = values.view(torch.int32).add(bits >> 3).bitwise_and_(~0x1FFF).view(torch.float32)
    if bool(small.any()):
        u = (bits.to(torch.float32) + 0.5) * (1.0 / 65536.0)
        sub = torch.floor(values * 2.0**24 + u) * 2.0**-24
        normal = torch.where(small, sub, normal)
    return normal.to(torch.float16)


@dataclass(frozen=True)
class TableLayout:
    """Where the rows of one stored weight sit in the model's tables, so that its updates round
    with the bits of ``(seed, step, table, row, column)`` whatever the plan: block ``b`` of the
    weight (local rows ``starts[b] .. starts[b + 1] - 1``) holds rows ``row_offsets[b] ...`` of
    table ``tables[b]``, columns ``col_offset ..`` of it."""

    seed: int
    tables: tuple[int, ...]
    block_rows: tuple[int, ...]
    row_offsets: tuple[int, ...] | None = None
    col_offset: int = 0

    @classmethod
    def of_shard(cls, seed: int, table: int, rows: int, row_offset: int, col_offset: int) -> TableLayout:
        return cls(seed, (table,), (rows,), (row_offset,), col_offset)

    @functools.cached_property
    def _tensors(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        starts = torch.tensor([0, *self.block_rows], dtype=torch.int64).cumsum(0)
        offsets = torch.tensor(self.row_offsets or (0,) * len(self.tables), dtype=torch.int64)
        return starts, torch.tensor(self.tables, dtype=torch.int64), offsets

    @functools.cached_property
    def _short_tables(self) -> bool:
        """Whether every row of the layout has an index below 2**32 in its table."""
        offsets = self.row_offsets or (0,) * len(self.tables)
        return all(o + r <= 1 << 32 for o, r in zip(offsets, self.block_rows))

    def key_blocks(self, step: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """What :meth:`keys` needs of the layout at ``step``, for a kernel that computes the keys itself
        (``harness/reference/models/_rowupdate.c``): the blocks' first local rows and the end (int64,
        one more than the blocks), their ``row_offsets`` (int64) and their tables' keys (int32 of
        :func:`_table_keys`' bits): a row's key is ``mix32(local ^ its table's key)``. None where a row
        has an index of 2**32 or more in its table (:meth:`keys` mixes its high bits too)."""
        if not self._short_tables:
            return None
        starts, tables, offsets = self._tensors
        return starts, offsets, _to_int32(_table_keys(self.seed, step, tables.clone()))

    def keys(self, rows: torch.Tensor, step: int) -> torch.Tensor:
        """The ``U x 1`` keys of local rows ``rows`` at ``step`` (:func:`row_keys`' values)."""
        starts, tables, offsets = (t.to(rows.device) for t in self._tensors)
        if len(self.tables) == 1:
            block = None
            local = rows + offsets[0]
        else:
            block = torch.bucketize(rows, starts[1:], right=True)
            local = rows - starts[block] + offsets[block]
        if not self._short_tables:
            return row_keys(self.seed, step, tables.expand(rows.shape[0]) if block is None else tables[block], local)
        # rows below 2**32: the first two rounds of row_keys depend on the table only, so they
        # are computed once per table and the rows' own round is the only one over every row
        per_table = _table_keys(self.seed, step, tables.clone())
        h = local.bitwise_xor_(per_table[0] if block is None else per_table[block])
        return _to_int32(_mix32_(h)).unsqueeze(1)

    def bits(self, rows: torch.Tensor, step: int, cols: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The rounding keys of local rows ``rows`` at ``step`` and the multipliers of the
        weight's ``cols`` columns: :func:`stochastic_round`'s last two arguments."""
        return self.keys(rows, step), column_multipliers(self.col_offset, cols, rows.device)

    def round(self, values: torch.Tensor, dtype: torch.dtype, rows: torch.Tensor, step: int) -> torch.Tensor:
        """``values`` (fp32, the new values of local rows ``rows``) stored as ``dtype``."""
        if dtype == torch.float32:
            return values
        return stochastic_round(values, dtype, *self.bits(rows, step, values.shape[1]))


def fused_layout(seed: int, table_ids: Sequence[int], table_rows: Sequence[int]) -> TableLayout:
    """The layout of a fused weight of whole tables (one after another)."""
    return TableLayout(int(seed), tuple(int(t) for t in table_ids), tuple(int(r) for r in table_rows))
