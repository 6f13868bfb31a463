"""``harness data inspect`` of a Yambda folder: what its parquet holds, read once by record batches,
no benchmark needed; with one, what that benchmark's spec would cut from it.

:func:`inspect_yambda` streams every event file through the reader's checks
(:mod:`harness.reference.data.yambda`: columns and types, ``(uid, timestamp)`` order, known event
types) and reports the layout, each file's rows and bytes, the events per type, the listens played
beyond 50% (``listen_plus``), the distinct users and items (exact up to a limit, then HyperLogLog,
as the Criteo report), the time span in days and the reference's global temporal split of it (the
test day, the 30-minute gap, the train days, the one-day windows). Given a benchmark's ``dataset``
section it also opens the data as a run would (building the reader's cache) and reports the splits
it cuts: train and eval samples available against those the spec asks for. A malformed file stops
the pass and is reported (:attr:`YambdaReport.malformed`), as the Criteo report does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import HarnessError
from harness.reference.data.inspect import DistinctCounter
from harness.reference.data.yambda import YambdaSpec, open_yambda
from harness.reference.data.yambda_store import (
    DEFAULT_MEMORY_BUDGET,
    EVENT_FILES,
    Bounds,
    EventFileReader,
    batch_rows,
    find_layout,
    open_parquet,
)

__all__ = ["YambdaReport", "format_yambda_report", "inspect_yambda"]

_DAY = 86400
_UNBOUNDED = Bounds(2**62, 2**62, 2**62, 2**62)


@dataclass(frozen=True)
class YambdaReport:
    """What :func:`inspect_yambda` found; counts cover what was read before a malformed row, if any."""

    path: str
    layout: str
    files: tuple[tuple[str, int, int], ...]  # (name, rows, bytes)
    events: dict[str, int]  # per event type
    listen_plus: int
    listens_without_ratio: int
    users: int
    users_estimated: bool
    items: int
    items_estimated: bool
    first_timestamp: int | None
    last_timestamp: int | None
    split: dict[str, int] | None  # the reference's global temporal split, in seconds
    cut: dict[str, Any] | None = None  # what a benchmark's spec cuts (its data set's description)
    malformed: str | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def well_formed(self) -> bool:
        return self.malformed is None

    @property
    def days(self) -> float | None:
        if self.first_timestamp is None or self.last_timestamp is None:
            return None
        return (self.last_timestamp - self.first_timestamp) / _DAY

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["files"] = [{"name": n, "rows": r, "bytes": b} for n, r, b in self.files]
        out.update(well_formed=self.well_formed, days=self.days)
        return out


def _gts(first: int, last: int, spec: YambdaSpec | None) -> dict[str, int]:
    """The reference's global temporal split of ``[first, last]``: the last day is the test day,
    training ends 30 minutes before it and spans 300 days at most, in one-day windows."""
    test_seconds, gap, train_days, window = ((spec.test_seconds, spec.gap_seconds, spec.train_days,
                                              spec.window_seconds) if spec else (_DAY, 1800, 300, _DAY))
    test_start = last + 1 - test_seconds
    train_end = test_start - gap
    train_start = max(first, train_end - train_days * _DAY)
    return {"train_start": train_start, "train_end": train_end, "test_start": test_start, "test_end": last + 1,
            "windows": max(0, -(-(train_end - train_start) // window))}


def inspect_yambda(path: Path | str, *, dataset: Mapping[str, Any] | None = None, cache_dir: Path | str | None = None,
                   memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET,
                   progress: Callable[[str], None] | None = None) -> YambdaReport:
    """Read the Yambda folder ``path`` once and report on it (see the module's docstring);
    ``dataset``: a benchmark's ``dataset`` section, whose cut is reported too.

    Raises:
        HarnessError: no Yambda layout at ``path`` (NOT_FOUND or BAD_INPUT); a malformed file is
            reported, not raised.
    """
    layout = find_layout(path)
    rows = batch_rows(memory_budget_bytes)
    counts = dict.fromkeys(EVENT_FILES, 0) | {"listens_without_ratio": 0}
    stats: dict[str, Any] = {"peak_batch_rows": 0, "peak_batch_bytes": 0, "t_min": 2**62, "t_max": -1,
                             "listen_t_min": 2**62}
    users, items = DistinctCounter(), DistinctCounter()
    listen_plus, files, malformed = 0, [], None
    try:
        for event_type, file in layout.events:
            reader = EventFileReader(file, event_type, _UNBOUNDED, rows, counts, stats)
            files.append((file.name, int(reader.pf.metadata.num_rows), file.stat().st_size))
            for events in reader:
                users.add(np.unique(events["uid"]))
                items.add(np.unique(events["item"]))
                listen_plus += int((events["action"] == 1).sum())
            if progress is not None:
                progress(f"{file.name}: {files[-1][1]:,} rows")
        for _, file in layout.mappings:
            files.append((file.name, int(open_parquet(file).metadata.num_rows), file.stat().st_size))
    except HarnessError as err:
        malformed = err.message
    first = stats["t_min"] if stats["t_max"] >= 0 else None
    last = stats["t_max"] if stats["t_max"] >= 0 else None
    spec = YambdaSpec.from_section(dataset) if dataset is not None and dataset.get("kind") == "yambda" else None
    cut, notes = None, []
    if dataset is not None and malformed is None:
        try:
            cut = open_yambda(dataset, layout.root, cache_dir=cache_dir, memory_budget_bytes=memory_budget_bytes,
                              progress=progress).describe()
        except HarnessError as err:
            notes.append(f"the benchmark's spec cannot be cut from it: {err.message}")
    if counts["listens_without_ratio"]:
        notes.append(f"{counts['listens_without_ratio']:,} listens have no played_ratio_pct: counted as not played")
    return YambdaReport(
        path=str(layout.root), layout=layout.kind.value, files=tuple(files),
        events={t: counts[t] for t in EVENT_FILES}, listen_plus=listen_plus,
        listens_without_ratio=counts["listens_without_ratio"], users=users.count(), users_estimated=users.estimated,
        items=items.count(), items_estimated=items.estimated, first_timestamp=first, last_timestamp=last,
        split=_gts(first, last, spec) if first is not None and last is not None else None, cut=cut,
        malformed=malformed,
        notes=tuple(notes))


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.2f}%"


def format_yambda_report(report: YambdaReport) -> str:
    """The report as a readable table."""
    lines = [f"{report.path}: Yambda parquet ({report.layout} layout), "
             f"{'well-formed' if report.well_formed else 'MALFORMED'}", ""]
    lines.append(f"{'FILE':<30} {'ROWS':>14} {'BYTES':>14}")
    lines += [f"{name:<30} {rows:>14,} {size:>14,}" for name, rows, size in report.files]
    lines += ["", f"{'EVENTS':<30} {'COUNT':>14}"]
    lines += [f"{t:<30} {n:>14,}" for t, n in report.events.items()]
    listens = report.events.get("listen", 0)
    lines.append(f"{'listen_plus (> 50% played)':<30} {report.listen_plus:>14,} "
                 f"{_pct(report.listen_plus / listens if listens else None):>8}")
    lines += ["", f"{'users':<30} {('~' if report.users_estimated else '') + f'{report.users:,}':>14}",
              f"{'items':<30} {('~' if report.items_estimated else '') + f'{report.items:,}':>14}"]
    if report.days is not None:
        lines.append(f"{'time span':<30} {report.first_timestamp}..{report.last_timestamp} s ({report.days:.2f} days)")
    if report.split:
        s = report.split
        lines.append(f"{'split (reference GTS)':<30} train [{s['train_start']}, {s['train_end']}) in {s['windows']} "
                     f"one-day windows, gap [{s['train_end']}, {s['test_start']}), test day "
                     f"[{s['test_start']}, {s['test_end']})")
    if report.cut:
        c = report.cut
        lines += ["", f"{'SPLIT (the benchmark)':<30} {'ASKED':>14} {'AVAILABLE':>14}",
                  f"{'train':<30} {c['train_samples']:>14,} {c['train_samples_available']:>14,}",
                  f"{'eval':<30} {c['eval_samples']:>14,} {c['eval_samples_available']:>14,}",
                  f"windows {c['train_windows'][0]}-{c['train_windows'][1]} trained, window {c['eval_window']} "
                  f"evaluated; {c['train_users']:,} train users, {c['eval_users']:,} eval users"]
    lines += [f"note: {n}" for n in report.notes]
    if report.malformed:
        lines.append(f"first malformed: {report.malformed}")
    return "\n".join(lines)
