"""Names a reader can tell apart: one unique label per system entry, and the baseline it names.

MLPerf system names collide: a submitter reuses one name across rounds and across sizes of
the same machine (NVIDIA's v6.0 8-GPU and 64-GPU systems are both "Theia (1x NVIDIA GB300
NVL72)" in their system files). Every chart, legend and table of the leaderboard shows an
entry by its label, and a colour belongs to a label, so the label must be unique.

A system is one ``(package, system folder)``: the same system in two benchmarks has one label
(and one colour). Its label is the system name; where names collide it adds, step by step
and only for the systems that still collide, the round, the accelerators (``8x8 GPUs`` for
nodes x per node, else the count) and the submitter, then the folder name.
"""

from __future__ import annotations

import difflib
from collections import defaultdict
from collections.abc import Iterable
from pathlib import PurePath
from typing import Any

from harness.errors import ErrorCategory, HarnessError

Entry = dict[str, Any]


def system_key(entry: Entry) -> tuple[str, str]:
    """``(package path, system folder)`` of an entry: its source is ``<pkg>/results/<system>/<benchmark>``."""
    source = PurePath(entry["source"])
    return str(source.parent.parent.parent), source.parent.name


def _accelerators(entry: Entry) -> str:
    count = int(entry["accelerator_count"])
    nodes = int(entry.get("nodes") or 1)
    if count <= 0:
        return "no accelerators"
    return f"{nodes}x{count // nodes} accelerators" if nodes > 1 and count % nodes == 0 else f"{count} accelerators"


def _label(entry: Entry, level: int) -> str:
    parts = [entry["round"] if level >= 1 else None,
             _accelerators(entry) if level >= 2 else None,
             entry["submitter"] if level >= 3 else None,
             system_key(entry)[1] if level >= 4 else None]
    details = [p for p in parts if p]
    return entry["system"] + (f" ({', '.join(details)})" if details else "")


MAX_LEVEL = 4


def assign_labels(entries: Iterable[Entry]) -> None:
    """Give every entry a ``label`` unique across ``entries`` (per system, see the module)."""
    entries = list(entries)
    by_system: dict[tuple[str, str], list[Entry]] = defaultdict(list)
    for e in entries:
        by_system[system_key(e)].append(e)
    level = dict.fromkeys(by_system, 0)
    while True:
        owners: dict[str, set[tuple[str, str]]] = defaultdict(set)
        for key, group in by_system.items():
            owners[_label(group[0], level[key])].add(key)
        clashing = {k for keys in owners.values() if len(keys) > 1 for k in keys if level[k] < MAX_LEVEL}
        if not clashing:
            break
        for key in clashing:
            level[key] += 1
    taken: dict[str, int] = defaultdict(int)
    for key, group in by_system.items():
        label = _label(group[0], level[key])
        taken[label] += 1
        if taken[label] > 1:  # the same name, round, size, submitter and folder under two roots
            label = f"{label} #{taken[label]}"
        for e in group:
            e["label"] = label


def baseline_names(entry: Entry) -> set[str]:
    """What ``--baseline`` may say to name this entry's system."""
    package, folder = system_key(entry)
    names = {entry["system"], folder, entry.get("label") or entry["system"],
             f"{entry['submitter']}/{entry['system']}", f"{entry['submitter']}/{folder}"}
    if entry["round"]:
        names |= {f"{entry['round']}/{entry['submitter']}/{entry['system']}",
                  f"{entry['round']}/{entry['submitter']}/{folder}"}
    return names


def full_name(entry: Entry) -> str:
    return "/".join(p for p in (entry["round"], entry["submitter"], system_key(entry)[1]) if p)


def resolve_baseline(entries: Iterable[Entry], baseline: str) -> tuple[str, str]:
    """The system (:func:`system_key`) that ``baseline`` names; a one-line error, exit 2, when
    it names none (with the close names) or several (with how to name each)."""
    entries = list(entries)
    matches: dict[tuple[str, str], Entry] = {}
    for e in entries:
        if baseline in baseline_names(e):
            matches.setdefault(system_key(e), e)
    if len(matches) == 1:
        return next(iter(matches))
    if not matches:
        known = sorted({n for e in entries for n in (e["system"], e.get("label") or e["system"], full_name(e))})
        close = difflib.get_close_matches(baseline, known, n=5, cutoff=0.5)
        hint = f"; close names: {', '.join(repr(c) for c in close)}" if close else (
            f"; systems here: {', '.join(repr(n) for n in sorted({e['system'] for e in entries})[:8])}")
        raise HarnessError(f"--baseline {baseline!r} names no system on the leaderboard{hint}",
                           ErrorCategory.NOT_FOUND)
    names = ", ".join(repr(full_name(e)) for e in matches.values())
    raise HarnessError(f"--baseline {baseline!r} names {len(matches)} systems: {names}; "
                       "pick one as round/submitter/system", ErrorCategory.BAD_INPUT)


def runs_text(entry: Entry) -> str:
    """``converged/total``, and the benchmark's requirement where the set has fewer runs
    (``1/1 of 5 required``)."""
    required = entry.get("required_runs")
    short = f" of {required} required" if required is not None and entry["runs"] < required else ""
    return f'{entry["converged_runs"]}/{entry["runs"]}{short}'


def minutes_text(value: float) -> str:
    """Minutes as the page shows them (``1,234.5``, ``12.35``, ``0.123``)."""
    if abs(value) >= 100:
        return f"{value:,.1f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def auc_text(value: float) -> str:
    """An AUC as the page shows it: six significant digits (``0.80275``)."""
    return f"{value:.6g}"
