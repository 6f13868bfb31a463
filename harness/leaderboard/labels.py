"""Names a reader can tell apart: one label per entry, unique in its benchmark, and the baseline it names.

MLPerf system names collide: a submitter reuses one name across rounds and across sizes of
the same machine (NVIDIA's v6.0 8-GPU and 64-GPU systems are both "Theia (1x NVIDIA GB300
NVL72)" in their system files), and our own runs of one machine in two precisions or two
results folders share the machine's name (``local-cpu-2c``). Every chart, legend and table of
a benchmark shows an entry by its label, and a colour belongs to a label, so the labels of a
benchmark's entries must differ.

An entry's label is its system name. Where names collide in a benchmark, the colliding entries
are told apart by what differs between them, and only that: in order, the round, the hardware
(``8x8 accelerators`` for nodes x per node, else the count; ``CPU`` for none), the submitter,
the host, the precision, the profile, the results folder (the part of the package paths that
differs), the date (or date and time) of the first run, the system folder and the run set's folder; each
is added only to entries that still collide, and only where its values differ among them (so
``local-cpu-2c (bf16)`` beside ``local-cpu-2c (fp32)``, never a detail they share). Entries
alike in all of these (two copies of one run set under two roots) are numbered ``#2``, ``#3``.
"""

from __future__ import annotations

import difflib
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import PurePath
from typing import Any

from harness.errors import ErrorCategory, HarnessError

Entry = dict[str, Any]
#: What the logs say of an entry that its model has no field for (``precision``, ``date``, ``started``),
#: by entry: :func:`assign_labels` uses them to tell colliding entries apart.
Facts = Callable[[Entry], Mapping[str, str | None]]


def system_key(entry: Entry) -> tuple[str, str]:
    """``(package path, system folder)`` of an entry: its source is ``<pkg>/results/<system>/<benchmark>``."""
    source = PurePath(entry["source"])
    return str(source.parent.parent.parent), source.parent.name


def plural(count: int, noun: str, many: str | None = None) -> str:
    """``1 run``, ``2 runs``, ``0 runs`` (``many``: the plural where it is not ``noun + "s"``)."""
    return f"{count} {noun if count == 1 else (many or noun + 's')}"


def _hardware(entry: Entry) -> str:
    count = int(entry["accelerator_count"])
    nodes = int(entry.get("nodes") or 1)
    if count <= 0:
        return "CPU"
    return f"{nodes}x{count // nodes} accelerators" if nodes > 1 and count % nodes == 0 else f"{count} accelerators"


def _folders(group: Sequence[Entry]) -> list[str | None]:
    """The part of each entry's package path that differs from the others' (``results-bf16`` beside
    ``results-fp32`` for ``results-bf16/reference`` and ``results-fp32/reference``)."""
    paths = [PurePath(system_key(e)[0]).parts for e in group]
    shortest = min(len(p) for p in paths)
    head = 0
    while head < shortest and len({p[head] for p in paths}) == 1:
        head += 1
    tail = 0
    while tail < shortest - head and len({p[len(p) - 1 - tail] for p in paths}) == 1:
        tail += 1
    rests = [p[head:len(p) - tail] for p in paths]
    if head and any(not r for r in rests):  # one package lies above the others: name the folder they share
        rests = [p[head - 1:len(p) - tail] for p in paths]
    return ["/".join(r) or None for r in rests]


Facet = Callable[[Sequence[Entry]], list[str | None]]


def _each(value: Callable[[Entry], Any]) -> Facet:
    return lambda group: [str(v) if (v := value(e)) not in (None, "") else None for e in group]


def _facets(facts: Facts | None) -> list[Facet]:
    def fact(name: str) -> Facet:
        return _each(lambda e: facts(e).get(name) if facts is not None else None)

    def when(group: Sequence[Entry]) -> list[str | None]:
        """The date each set started, where that tells every one apart; else the date and time."""
        dates = fact("date")(group)
        return dates if len(set(dates)) == len(group) else fact("started")(group)

    return [
        _each(lambda e: e["round"]),
        _each(_hardware),
        _each(lambda e: e["submitter"]),
        _each(lambda e: e["host"]),
        fact("precision"),
        _each(lambda e: f"profile {e['profile']}" if e.get("profile") else None),
        _folders,
        when,
        _each(lambda e: system_key(e)[1]),
        _each(lambda e: PurePath(e["source"]).name),
    ]


def _tell_apart(group: list[Entry], facets: Sequence[Facet], details: dict[int, list[str]]) -> None:
    """Add to ``details`` the first facet whose values differ within ``group``, then go on within each
    part of the group that still shares a value."""
    if len(group) < 2:
        return
    for i, facet in enumerate(facets):
        values = facet(group)
        if len(set(values)) < 2:
            continue
        parts: dict[str | None, list[Entry]] = defaultdict(list)
        for entry, value in zip(group, values):
            if value is not None:
                details[id(entry)].append(value)
            parts[value].append(entry)
        for part in parts.values():
            _tell_apart(part, facets[i + 1:], details)
        return


def assign_labels(entries: Iterable[Entry], facts: Facts | None = None) -> None:
    """Give every entry a ``label`` unique among ``entries`` (one benchmark's; see the module)."""
    entries = list(entries)
    details: dict[int, list[str]] = {id(e): [] for e in entries}
    by_name: dict[str, list[Entry]] = defaultdict(list)
    for e in entries:
        by_name[e["system"]].append(e)
    facets = _facets(facts)
    for group in by_name.values():
        _tell_apart(group, facets, details)
    taken: dict[str, int] = defaultdict(int)
    for e in entries:
        label = e["system"] + (f" ({', '.join(details[id(e)])})" if details[id(e)] else "")
        taken[label] += 1
        e["label"] = label if taken[label] == 1 else f"{label} #{taken[label]}"


def baseline_names(entry: Entry) -> set[str]:
    """What ``--baseline`` may say to name this entry's system."""
    _, folder = system_key(entry)
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


def runs_phrase(entry: Entry) -> str:
    """:func:`runs_text` with its noun, singular or plural as the last number says (``1/1 run``,
    ``3/3 runs``, ``1/1 of 5 required runs``)."""
    required = entry.get("required_runs")
    last = required if required is not None and entry["runs"] < required else entry["runs"]
    return f"{runs_text(entry)} {'run' if last == 1 else 'runs'}"


def hardware_text(entry: Entry) -> tuple[str, str]:
    """What an entry ran on, and the host under it: ``8 x H100`` over the host's processors, or for a
    system without accelerators its CPUs (``CPU: 2 cores, Intel(R) Xeon(R) Processor``) and nothing under."""
    count = int(entry["accelerator_count"])
    if count > 0:
        return f"{count} x {entry['accelerator_model']}", entry["host"]
    if entry["accelerator_model"] == "unknown":  # no system description to read
        return "unknown", ""
    return f"CPU: {entry['host']}", ""


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
