"""``harness data inspect``: what a Criteo dataset holds, read once from end to end, no benchmark needed.

:func:`inspect_dataset` streams the whole dataset (the TSV reader's buffer budget; npy rows a
chunk at a time from the memory maps) and reports its format and layout, the days and their
samples, the train and eval counts by the split rule of :mod:`harness.reference.data.criteo`, the label
rate (overall and per split), the number of distinct raw values of each categorical feature
(exact up to ``exact_limit`` values, then a HyperLogLog estimate, marked as one, so memory stays
bounded), the pooling of each feature, and the first malformed record (``file:line`` for TSV,
file and row for npy), where it stops. :func:`format_report` prints it as a table.

The eval split of a TSV dataset is the first half of its last day, whose length is known only
once it has been read: its labels are kept as bits (one per sample of that day) until then.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import ErrorCategory, HarnessError
from harness.reference.data.batches import NUM_SPARSE
from harness.reference.data.counter_rng import mix64
from harness.reference.data.criteo_manifest import Layout, find_layout, kaggle_parts
from harness.reference.data.criteo_npy import NpyDay, npy_day
from harness.reference.data.criteo_tsv import DEFAULT_BUFFER_BYTES, read_tsv_file
from harness.reference.data.datasets import DataFormat

__all__ = ["DistinctCounter", "InspectReport", "format_report", "inspect_dataset"]

_HLL_BITS = 14  # 16384 registers: a relative standard error of 1.04 / sqrt(16384) = 0.8%


# --------------------------------------------------------------------------- distinct values


def _leading_zeros(x: np.ndarray) -> np.ndarray:
    """Leading zero bits of each uint64 (64 for 0), by a vectorised binary search."""
    n = np.zeros(x.shape, np.int64)
    x = x.copy()
    for s in (32, 16, 8, 4, 2, 1):
        top = x >> np.uint64(64 - s)
        empty = top == 0
        n += np.where(empty, s, 0)
        x = np.where(empty, x << np.uint64(s), x)
    return n + (x == 0)


class DistinctCounter:
    """Distinct uint64 values: exact (a sorted array) up to ``exact_limit``, then HyperLogLog
    (Flajolet et al. 2007, with the linear-counting correction for small ranges) over
    SplitMix64 hashes, in 2**14 one-byte registers."""

    def __init__(self, exact_limit: int = 1 << 16):
        self.exact_limit = exact_limit
        self._values: np.ndarray | None = np.empty(0, np.uint64)
        self._registers = np.empty(0, np.uint8)  # HyperLogLog's, once _values is None (estimated)

    @property
    def estimated(self) -> bool:
        return self._values is None

    def add(self, values: np.ndarray) -> None:
        values = np.asarray(values, np.uint64).reshape(-1)
        if self._values is not None:
            self._values = np.union1d(self._values, values)
            if len(self._values) <= self.exact_limit:
                return
            values, self._values = self._values, None
            self._registers = np.zeros(1 << _HLL_BITS, np.uint8)
        h = mix64(values)
        index = (h >> np.uint64(64 - _HLL_BITS)).astype(np.int64)
        rest = (h << np.uint64(_HLL_BITS)) | np.uint64(1 << (_HLL_BITS - 1))  # at most 64 - p leading zeros
        np.maximum.at(self._registers, index, (_leading_zeros(rest) + 1).astype(np.uint8))

    def count(self) -> int:
        if self._values is not None:
            return len(self._values)
        regs = self._registers
        m = len(regs)
        estimate = 0.7213 / (1 + 1.079 / m) * m * m / float(np.sum(np.ldexp(1.0, -regs.astype(np.int64))))
        zeros = int(np.sum(regs == 0))
        if estimate <= 2.5 * m and zeros:
            estimate = m * math.log(m / zeros)
        return int(round(estimate))


# --------------------------------------------------------------------------- the report


@dataclass(frozen=True)
class InspectReport:
    """What :func:`inspect_dataset` found. Counts cover what was read: everything when
    ``malformed`` is None, else the records before the first malformed one (the splits are then
    unknown, since the eval split depends on the last day's length)."""

    path: str
    format: str
    layout: str
    days: tuple[tuple[str, int], ...]  # (day, samples)
    samples: int
    positives: int
    train_samples: int | None
    eval_samples: int | None
    train_positives: int | None
    eval_positives: int | None
    cardinality: tuple[int, ...]
    cardinality_estimated: tuple[bool, ...]
    pooling: tuple[int, ...]
    malformed: str | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def well_formed(self) -> bool:
        return self.malformed is None

    @staticmethod
    def _rate(pos: int | None, n: int | None) -> float | None:
        return None if pos is None or not n else pos / n

    @property
    def label_rate(self) -> float | None:
        return self._rate(self.positives, self.samples)

    @property
    def train_label_rate(self) -> float | None:
        return self._rate(self.train_positives, self.train_samples)

    @property
    def eval_label_rate(self) -> float | None:
        return self._rate(self.eval_positives, self.eval_samples)

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["days"] = [{"day": d, "samples": n} for d, n in self.days]
        out.update(well_formed=self.well_formed, label_rate=self.label_rate, train_label_rate=self.train_label_rate,
                   eval_label_rate=self.eval_label_rate)
        out["features"] = [{"feature": f, "distinct": c, "estimated": e, "pooling": p} for f, (c, e, p) in
                           enumerate(zip(self.cardinality, self.cardinality_estimated, self.pooling))]
        for key in ("cardinality", "cardinality_estimated", "pooling"):
            del out[key]
        out["notes"] = list(self.notes)
        return out


class _Tally:
    """Running counts of a dataset being read."""

    def __init__(self, exact_limit: int):
        self.days: list[tuple[str, int]] = []
        self.samples = self.positives = 0
        self.distinct = [DistinctCounter(exact_limit) for _ in range(NUM_SPARSE)]
        self.pooling: tuple[int, ...] = (1,) * NUM_SPARSE
        self.malformed: str | None = None

    def add(self, labels: np.ndarray, ids: Sequence[np.ndarray]) -> None:
        self.samples += len(labels)
        self.positives += int(np.count_nonzero(labels))
        for f, values in enumerate(ids):
            self.distinct[f].add(values)


def _bit_count(chunks: Sequence[tuple[int, np.ndarray]], lo: int, hi: int) -> int:
    """Ones among bits ``lo .. hi - 1`` of ``chunks`` (``(bits, packed)`` in order)."""
    total, at = 0, 0
    for n, packed in chunks:
        a, b = max(lo, at), min(hi, at + n)
        if a < b:
            total += int(np.unpackbits(packed, count=n)[a - at : b - at].sum())
        at += n
    return total


def _inspect_tsv(layout: Layout, tally: _Tally, buffer_bytes: int,
                 progress: Callable[[str], None] | None) -> tuple[int | None, ...]:
    last_bits: list[tuple[int, np.ndarray]] = []
    for i, path in enumerate(layout.files):
        last = i == len(layout.files) - 1
        lines = 0
        try:
            for parsed in read_tsv_file(path, buffer_bytes=buffer_bytes, partial=True):
                tally.add(parsed.labels, [parsed.raw[:, f] for f in range(NUM_SPARSE)])
                lines += parsed.size
                if last:
                    last_bits.append((parsed.size, np.packbits(parsed.labels > 0)))
        except HarnessError as err:
            if err.category is not ErrorCategory.BAD_INPUT:
                raise
            tally.malformed = err.message
        tally.days.append((path.name, lines))
        if progress is not None:
            progress(f"{path.name}: {lines} lines")
        if tally.malformed:
            return None, None, None, None
    if layout.layout == "kaggle":
        parts = kaggle_parts(tally.days[0][1])
        tally.days = [(f"{layout.files[0].name} part {j}", n) for j, n in enumerate(parts)]
        train = sum(parts[:-1])
        eval_ = (parts[-1] + 1) // 2
        return train, eval_, _bit_count(last_bits, 0, train), _bit_count(last_bits, train, train + eval_)
    counts = [n for _, n in tally.days]
    train, eval_ = sum(counts[:-1]), (counts[-1] + 1) // 2
    eval_pos = _bit_count(last_bits, 0, eval_)
    last_pos = _bit_count(last_bits, 0, counts[-1])
    return train, eval_, tally.positives - last_pos, eval_pos


def _inspect_npy(layout: Layout, tally: _Tally, buffer_bytes: int,
                 progress: Callable[[str], None] | None) -> tuple[int | None, ...]:
    root, multi_hot = layout.root, layout.layout == "multi-hot"
    days: list[NpyDay] = []
    train_pos = eval_pos = 0
    for d in range(layout.days):
        try:
            day = npy_day(root, d, multi_hot)
            if days and day.pooling != days[0].pooling:
                f = next(i for i, (a, b) in enumerate(zip(day.pooling, days[0].pooling)) if a != b)
                raise HarnessError(f"{root / day.sparse[f].name}: feature {f} has {day.pooling[f]} ids per sample "
                                  f"but {days[0].sparse[f].name} has {days[0].pooling[f]}")
        except HarnessError as err:
            if err.category is not ErrorCategory.BAD_INPUT:
                raise
            tally.malformed = err.message
            return None, None, None, None
        days.append(day)
        tally.pooling = day.pooling
        row_bytes = 4 * 14 + 8 * sum(day.pooling)
        step = max(1, buffer_bytes // (4 * row_bytes))
        labels_mm = day.labels.open(root)
        sparse_mm = [a.open(root) for a in day.sparse]
        eval_rows = (day.rows + 1) // 2 if d == layout.days - 1 else 0
        read = 0
        for a in range(0, day.rows, step):
            b = min(day.rows, a + step)
            labels = np.asarray(labels_mm[a:b]).reshape(-1)
            ok = (labels == 0) | (labels == 1)
            good = b - a if ok.all() else int(np.argmin(ok))
            labels = labels[:good]
            if multi_hot:
                ids = [np.asarray(m[a : a + good]).astype(np.uint64) for m in sparse_mm]
            else:
                block = np.asarray(sparse_mm[0][a : a + good]).astype(np.uint64)
                ids = [block[:, f] for f in range(NUM_SPARSE)]
            tally.add(labels, ids)
            positives = int(np.count_nonzero(labels))
            if eval_rows:
                eval_pos += int(np.count_nonzero(labels[: max(0, eval_rows - a)]))
            else:
                train_pos += positives
            read += good
            if good < b - a:
                tally.malformed = (f"{root / day.labels.name}: row {a + good}: label {labels_mm[a + good].item()!r} "
                                   "is not 0 or 1")
                tally.days.append((f"day_{d}", read))
                return None, None, None, None
        tally.days.append((f"day_{d}", day.rows))
        if progress is not None:
            progress(f"day_{d}: {day.rows} samples")
    return sum(d.rows for d in days[:-1]), (days[-1].rows + 1) // 2, train_pos, eval_pos


def inspect_dataset(path: Path | str, *, buffer_bytes: int = DEFAULT_BUFFER_BYTES, exact_limit: int = 1 << 16,
                    progress: Callable[[str], None] | None = None) -> InspectReport:
    """Read the dataset at ``path`` (any layout :func:`~harness.reference.data.criteo_manifest.find_layout`
    recognises) once and report what it holds; a malformed record ends the reading and is
    reported, not raised.

    Raises:
        HarnessError: NOT_FOUND when nothing recognisable (or a file of it) is at ``path``.
    """
    layout = find_layout(path)
    tally = _Tally(exact_limit)
    inspect = _inspect_tsv if layout.format is DataFormat.CRITEO_TSV else _inspect_npy
    train, eval_, train_pos, eval_pos = inspect(layout, tally, buffer_bytes, progress)
    notes = []
    if tally.malformed:
        notes.append("stopped at the first malformed record: the counts cover the records before it")
    if any(c.estimated for c in tally.distinct):
        notes.append(f"distinct counts above {exact_limit} are HyperLogLog estimates (about 0.8% error)")
    if layout.format is DataFormat.CRITEO_TSV:
        notes.append("distinct values of the hex strings read as integers (empty = 0), before any table's modulo")
    return InspectReport(
        path=str(layout.root if layout.layout != "kaggle" else layout.files[0]), format=layout.format.value,
        layout=layout.layout, days=tuple(tally.days), samples=tally.samples, positives=tally.positives,
        train_samples=train, eval_samples=eval_, train_positives=train_pos, eval_positives=eval_pos,
        cardinality=tuple(c.count() for c in tally.distinct),
        cardinality_estimated=tuple(c.estimated for c in tally.distinct),
        pooling=tally.pooling, malformed=tally.malformed, notes=tuple(notes),
    )


# --------------------------------------------------------------------------- printing


def _pct(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.4%}"


def format_report(report: InspectReport) -> str:
    """The report as a readable table."""
    lines = [f"{report.path}: {report.format} ({report.layout} layout), "
             f"{'well-formed' if report.well_formed else 'MALFORMED'}"]
    lines.append("")
    lines.append(f"{'DAY':<22} {'SAMPLES':>14}")
    for day, day_samples in report.days:
        lines.append(f"{day:<22} {day_samples:>14,}")
    lines.append(f"{'total':<22} {report.samples:>14,}")
    lines.append("")
    lines.append(f"{'SPLIT':<22} {'SAMPLES':>14} {'LABEL RATE':>12}")
    lines.append(f"{'all':<22} {report.samples:>14,} {_pct(report.label_rate):>12}")
    for name, n, rate in [("train", report.train_samples, report.train_label_rate),
                          ("eval", report.eval_samples, report.eval_label_rate)]:
        lines.append(f"{name:<22} {'-' if n is None else f'{n:,}':>14} {_pct(rate):>12}")
    lines.append("")
    lines.append(f"{'FEATURE':<8} {'DISTINCT':>14} {'POOLING':>8}")
    for f, (c, est, p) in enumerate(zip(report.cardinality, report.cardinality_estimated, report.pooling)):
        lines.append(f"{f'C{f + 1}':<8} {('~' if est else '') + f'{c:,}':>14} {p:>8}")
    for note in report.notes:
        lines.append(f"note: {note}")
    if report.malformed:
        lines.append(f"first malformed record: {report.malformed}")
    return "\n".join(lines)
