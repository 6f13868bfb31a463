"""``harness data inspect`` of a Yambda folder: what its parquet holds, read once by record batches,
no benchmark needed; with one, whether that benchmark can be cut from it, and what its spec cuts.

:func:`inspect_yambda` finds the files as a run does (:func:`~harness.reference.data.yambda_store.find_layout`:
a scale's folder, or a dataset root at a scale, the mappings beside the events or up to two folders
up), streams every event file through the reader's checks (:mod:`harness.reference.data.yambda_store`:
columns and types, ``(uid, timestamp)`` order, known event types; the flat and the sequential layout)
and the two mappings through theirs (``item_id`` and ``artist_id`` or ``album_id``, integers, no nulls,
no negative ids), and reports the layout, each file's rows and bytes, the events per type, the listens
played beyond 50% (``listen_plus``), the distinct users and items (exact up to a limit, then
HyperLogLog, as the Criteo report) and the largest ids, the time span in days and the reference's
global temporal split of it (the test day, the 30-minute gap, the train days, the one-day windows).

Given a benchmark's ``dataset`` section it is a gate: :attr:`YambdaReport.refusal` says, in one line,
why the benchmark cannot be served from the data (a data set of another kind; an id beyond the
spec's tables, naming the file, row and column; or what opening the data as a run would (building
the reader's cache) refuses, such as too few samples), else the splits it cuts are reported: train
and eval samples available against those the spec asks for. A malformed file stops the pass and is
reported (:attr:`YambdaReport.malformed`: the file, and the row, column or row group), as the Criteo
report does.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import HarnessError
from harness.reference.data.inspect import DistinctCounter
from harness.reference.data.yambda import YambdaSpec, bounds_of, open_yambda, spec_of
from harness.reference.data.yambda_store import (
    DEFAULT_MEMORY_BUDGET,
    EVENT_FILES,
    MAPPING_FILES,
    Bounds,
    EventFileReader,
    Maximum,
    batch_rows,
    find_layout,
    layout_name,
    mapping_batches,
    open_parquet,
)

__all__ = ["YambdaReport", "format_yambda_report", "inspect_yambda"]

_DAY = 86400
_UNBOUNDED = Bounds(2**62, 2**62, 2**62, 2**62)
_READABLE_KINDS = ("yambda", "event_streams")


@dataclass(frozen=True)
class YambdaReport:
    """What :func:`inspect_yambda` found; counts cover what was read before a malformed row, if any.
    ``max_ids``: the largest ``uid`` and ``item_id`` of the events, ``artist_id`` and ``album_id`` of the
    mappings (-1: none read); ``mappings``: each mapping's rows and largest ``item_id``."""

    path: str
    layout: str
    files: tuple[tuple[str, int, int], ...]  # (name, rows, bytes); a mapping's name is its path from ``path``
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
    scale: str | None = None
    max_ids: dict[str, int] = field(default_factory=dict)
    mappings: dict[str, dict[str, int]] = field(default_factory=dict)
    benchmark: bool = False  # whether a benchmark's spec was given
    refusal: str | None = None  # why that benchmark cannot be served from the data (one line)

    @property
    def well_formed(self) -> bool:
        return self.malformed is None

    @property
    def serves_benchmark(self) -> bool | None:
        """Whether the data can serve the benchmark given (None: none given)."""
        return (self.well_formed and self.refusal is None) if self.benchmark else None

    @property
    def problem(self) -> str | None:
        """The one line a command that gates on the data exits 2 with: the first malformed record, else
        why the benchmark cannot be served; None when neither."""
        return self.malformed or self.refusal

    @property
    def days(self) -> float | None:
        if self.first_timestamp is None or self.last_timestamp is None:
            return None
        return (self.last_timestamp - self.first_timestamp) / _DAY

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["files"] = [{"name": n, "rows": r, "bytes": b} for n, r, b in self.files]
        out.update(well_formed=self.well_formed, serves_benchmark=self.serves_benchmark, days=self.days)
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


def _beyond_the_tables(bounds: Bounds, maxima: Mapping[str, Maximum]) -> str | None:
    """The first id (in the order uid, item_id, artist_id, album_id) no table of the spec holds, as one line."""
    for column, key, limit in (("uid", "users", bounds.users), ("item_id", "item_rows", bounds.item_rows),
                               ("artist_id", "artist_rows", bounds.artist_rows),
                               ("album_id", "album_rows", bounds.album_rows)):
        m = maxima[column]
        if m.value >= limit:
            return f"{m.where}: {column} {m.value} is outside the spec's {key} (0..{limit - 1})"
    return None


def inspect_yambda(path: Path | str, *, dataset: Mapping[str, Any] | None = None, scale: str | None = None,
                   cache_dir: Path | str | None = None, memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET,
                   progress: Callable[[str], None] | None = None) -> YambdaReport:
    """Read the Yambda folder ``path`` once and report on it (see the module's docstring);
    ``dataset``: a benchmark's ``dataset`` section, which the data is checked against and whose cut is
    reported; ``scale``: the scale a dataset root is read at (None: the spec's ``scale``, else the only
    one there).

    Raises:
        HarnessError: no Yambda layout at ``path`` (NOT_FOUND or BAD_INPUT); a malformed file is
            reported, not raised, and so is a benchmark that cannot be served (:attr:`YambdaReport.refusal`).
    """
    spec, refusal, notes = None, None, []
    if dataset is not None:
        if dataset.get("kind") not in _READABLE_KINDS:
            refusal = f"the benchmark trains on {dataset.get('kind')} data, not on Yambda's events"
        else:
            try:
                spec = spec_of(dataset)
            except HarnessError as err:
                refusal = err.message
    chosen = scale if scale is not None else getattr(spec, "scale", None)
    layout = find_layout(path, scale=chosen)
    rows = batch_rows(memory_budget_bytes)
    counts = dict.fromkeys(EVENT_FILES, 0) | {"listens_without_ratio": 0}
    stats: dict[str, Any] = {"peak_batch_rows": 0, "peak_batch_bytes": 0, "t_min": 2**62, "t_max": -1,
                             "listen_t_min": 2**62}
    maxima = {name: Maximum() for name in ("uid", "item_id", "artist_id", "album_id")}
    users, items = DistinctCounter(), DistinctCounter()
    listen_plus, files, malformed, sequential = 0, [], None, False
    mappings: dict[str, dict[str, int]] = {}
    try:
        for event_type, file in layout.events:
            reader = EventFileReader(file, event_type, _UNBOUNDED, rows, counts, stats)
            sequential |= reader.sequential
            files.append((file.name, int(reader.pf.metadata.num_rows), file.stat().st_size))
            for events in reader:
                users.add(np.unique(events["uid"]))
                items.add(np.unique(events["item"]))
                listen_plus += int((events["action"] == 1).sum())
            for name in ("uid", "item_id"):
                m = reader.maxima[name]
                if m.value > maxima[name].value:
                    maxima[name] = m
            if progress is not None:
                progress(f"{file.name}: {files[-1][1]:,} rows")
        for what, file in layout.mappings:
            column = MAPPING_FILES[what][1]
            n, item_max, beyond = 0, Maximum(), 0
            for item, value, where in mapping_batches(file, column, rows):
                n += len(item)
                item_max.see(file, item, where)
                maxima[column].see(file, value, where)
                if spec is not None:
                    beyond += int((item >= spec.item_rows).sum())
            files.append((os.path.relpath(file, layout.root), int(open_parquet(file).metadata.num_rows),
                          file.stat().st_size))
            mappings[what] = {"rows": n, "max_item_id": item_max.value, f"max_{column}": maxima[column].value}
            if beyond and spec is not None:
                notes.append(f"{file}: {beyond:,} rows map items from item_id {spec.item_rows} on, which no table of "
                             "the spec holds (no event can name them: left out)")
            if progress is not None:
                progress(f"{file.name}: {n:,} rows")
    except HarnessError as err:
        malformed = err.message
    first = stats["t_min"] if stats["t_max"] >= 0 else None
    last = stats["t_max"] if stats["t_max"] >= 0 else None
    cut = None
    if spec is not None and isinstance(spec, YambdaSpec) and spec.scale and layout.scale \
            and layout.scale != str(spec.scale).lower():
        notes.append(f"these are Yambda's {layout.scale} events; the benchmark is defined on its {spec.scale} scale")
    if spec is not None and malformed is None and refusal is None:
        refusal = _beyond_the_tables(bounds_of(spec), maxima)
        if refusal is None:
            try:
                assert dataset is not None
                cut = open_yambda(dataset, layout.root, cache_dir=cache_dir,
                                  memory_budget_bytes=memory_budget_bytes, progress=progress).describe()
            except HarnessError as err:
                refusal = err.message
    if counts["listens_without_ratio"]:
        notes.append(f"{counts['listens_without_ratio']:,} listens have no played_ratio_pct: counted as not played")
    return YambdaReport(
        path=str(layout.root), layout=layout_name(layout.kind, sequential), files=tuple(files),
        events={t: counts[t] for t in EVENT_FILES}, listen_plus=listen_plus,
        listens_without_ratio=counts["listens_without_ratio"], users=users.count(), users_estimated=users.estimated,
        items=items.count(), items_estimated=items.estimated, first_timestamp=first, last_timestamp=last,
        split=_gts(first, last, spec if isinstance(spec, YambdaSpec) else None)
        if first is not None and last is not None else None,
        cut=cut, malformed=malformed, notes=tuple(notes), scale=layout.scale,
        max_ids={name: m.value for name, m in maxima.items()}, mappings=mappings, benchmark=dataset is not None,
        refusal=refusal)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.2f}%"


def _ids(report: YambdaReport, name: str) -> str:
    top = report.max_ids.get(name, -1)
    return f"ids up to {top:,}" if top >= 0 else ""


def format_yambda_report(report: YambdaReport) -> str:
    """The report as a readable table."""
    scale = f", scale {report.scale}" if report.scale else ""
    lines = [(f"{report.path}: Yambda parquet ({report.layout} layout{scale}), "
              f"{'well-formed' if report.well_formed else 'MALFORMED'}"), ""]
    lines.append(f"{'FILE':<36} {'ROWS':>14} {'BYTES':>14}")
    lines += [f"{name:<36} {rows:>14,} {size:>14,}" for name, rows, size in report.files]
    lines += ["", f"{'EVENTS':<36} {'COUNT':>14}"]
    lines += [f"{t:<36} {n:>14,}" for t, n in report.events.items()]
    listens = report.events.get("listen", 0)
    lines.append(f"{'listen_plus (> 50% played)':<36} {report.listen_plus:>14,} "
                 f"{_pct(report.listen_plus / listens if listens else None):>8}")
    users = ("~" if report.users_estimated else "") + f"{report.users:,}"
    items = ("~" if report.items_estimated else "") + f"{report.items:,}"
    lines += ["", f"{'users':<36} {users:>14} {_ids(report, 'uid')}",
              f"{'items':<36} {items:>14} {_ids(report, 'item_id')}"]
    for what, m in report.mappings.items():
        column = MAPPING_FILES[what][1]
        lines.append(f"{what + ' mapping':<36} {m['rows']:>14,} rows: item_id up to {m['max_item_id']:,}, "
                     f"{column} up to {m[f'max_{column}']:,}")
    if report.days is not None:
        lines.append(f"{'time span':<36} {report.first_timestamp}..{report.last_timestamp} s ({report.days:.2f} days)")
    if report.split:
        s = report.split
        lines.append(f"{'split (reference GTS)':<36} train [{s['train_start']}, {s['train_end']}) in {s['windows']} "
                     f"one-day windows, gap [{s['train_end']}, {s['test_start']}), test day "
                     f"[{s['test_start']}, {s['test_end']})")
    if report.cut:
        c = report.cut
        lines += ["", f"{'SPLIT (the benchmark)':<36} {'ASKED':>14} {'AVAILABLE':>14}",
                  f"{'train':<36} {c['train_samples']:>14,} {c['train_samples_available']:>14,}",
                  f"{'eval':<36} {c['eval_samples']:>14,} {c['eval_samples_available']:>14,}",
                  (f"windows {c['train_windows'][0]}-{c['train_windows'][1]} trained, window {c['eval_window']} "
                   f"evaluated; {c['train_users']:,} train users, {c['eval_users']:,} eval users")]
    lines += [f"note: {n}" for n in report.notes]
    if report.malformed:
        lines.append(f"first malformed: {report.malformed}")
    if report.refusal:
        lines.append(f"the benchmark cannot be served from it: {report.refusal}")
    elif report.serves_benchmark:
        lines.append("the benchmark can be served from it")
    return "\n".join(lines)
