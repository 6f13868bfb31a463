"""The charts of a leaderboard page: per benchmark, the time to train of each entry, the AUC of
every run during training, the score against the accelerator count, and the projected score
against the measured one (:func:`charts`, one ``<div class="charts">`` of up to four figures).
A chart with nothing to draw (the score against accelerators of a benchmark only CPUs ran) is
no figure, never an empty card: a note under the charts names it and says why.

Each chart is an ``<svg class="chart chart-time|chart-curves|chart-scaling|chart-projection"
data-benchmark=...>`` built from :mod:`harness.leaderboard.svg`'s primitives; every user-supplied
value passes through :func:`html.escape`. A time axis is logarithmic when its values span more
than :data:`LOG_SPAN`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from html import escape
from typing import Any

from harness.leaderboard.labels import auc_text as _auc
from harness.leaderboard.labels import minutes_text as _minutes
from harness.leaderboard.svg import (
    Frame as _Frame,
)
from harness.leaderboard.svg import (
    LegendItem as _LegendItem,
)
from harness.leaderboard.svg import (
    Scale as _Scale,
)
from harness.leaderboard.svg import (
    Ticks as _Ticks,
)
from harness.leaderboard.svg import (
    finite as _finite,
)
from harness.leaderboard.svg import (
    legend as _legend,
)
from harness.leaderboard.svg import (
    log_ticks as _log_ticks,
)
from harness.leaderboard.svg import (
    nice_ticks as _nice_ticks,
)
from harness.leaderboard.svg import (
    px as _n,
)
from harness.leaderboard.svg import (
    svg,
)
from harness.leaderboard.svg import (
    swatch_line as _swatch_line,
)
from harness.leaderboard.svg import (
    swatch_rect as _swatch_rect,
)
from harness.leaderboard.svg import (
    tip as _tip,
)
from harness.leaderboard.svg import (
    x_axis as _x_axis,
)
from harness.leaderboard.svg import (
    y_axis as _y_axis,
)

Entry = dict[str, Any]

_FADED = ' fill-opacity="0.3" stroke="{colour}" stroke-dasharray="3 2"'  # an unranked entry's bar


def _svg(kind: str, benchmark: str, title: str, body: str, height: float, width: float = 480,
         extra_attrs: str = "") -> str:
    return svg(kind, title, body, height, width=width, attrs=f' data-benchmark="{escape(benchmark)}"{extra_attrs}')


def _who(entry: Entry) -> str:
    """``submitter / system`` with the entry's caveats, for tooltips."""
    notes = [note for note, on in (("emulated", entry["emulated"]), ("not ranked", not entry["ranked"])) if on]
    return f"{entry['submitter']} / {entry['label']}" + (f" ({', '.join(notes)})" if notes else "")


def _names(entries: Iterable[Entry]) -> str:
    return ", ".join(f"{e['submitter']} / {e['label']}" for e in entries)


def _system_legend(entries: Iterable[Entry], colours: dict[str, str],
                   mark: Callable[[str], str]) -> list[_LegendItem]:
    seen = dict.fromkeys(e["label"] for e in entries)
    return [_LegendItem(system, mark(colours[system])) for system in seen]


Drawn = tuple[str, str] | str  # a chart's SVG and caption, or why it has nothing to draw


def charts(bench: dict[str, Any], entries: list[Entry], colours: dict[str, str]) -> str:
    """The figures of a benchmark's section that have something to draw (time to train, AUC during
    training, score against accelerators, projected against measured score; each an SVG and its
    caption), and a note naming those that have not, with why."""
    made: list[tuple[str, str, Drawn]] = [
        ("Time to train", "time to train", _time_chart(bench["benchmark"], entries, colours)),
        ("AUC during training", "AUC during training", _curves_chart(bench, entries, colours)),
        ("Score vs accelerators", "score vs accelerators", _scaling_chart(bench["benchmark"], entries, colours)),
        ("Projected vs measured", "projected vs measured", _projection_chart(bench["benchmark"], entries, colours)),
    ]
    figures = "".join(
        f'<figure class="chart-box"><h4>{heading}</h4>{drawn[0]}<figcaption>{drawn[1]}</figcaption></figure>'
        for heading, _, drawn in made if not isinstance(drawn, str))
    missing = [f"{name} ({why})" for _, name, why in made if isinstance(why, str)]
    return ((f'<div class="charts">{figures}</div>' if figures else "")
            + (f'<p class="note charts-missing">No chart of {"; ".join(missing)}.</p>' if missing else ""))


def _time_chart(benchmark: str, entries: list[Entry], colours: dict[str, str]) -> Drawn:
    """Horizontal bars: each entry's score, its runs' minutes as dots and the 95% interval; each
    bar under its entry's whole label; a log axis when the minutes span more than 10x."""
    drawn = [e for e in entries if _finite(e["score_minutes"]) is not None
             or any(_finite(m) is not None for m in e["run_minutes"])]
    if not drawn:
        return "no entry has a score or a run time"
    skipped = [e for e in entries if e not in drawn]
    row = 34.0
    frame = _Frame(height=max(row * len(drawn), 60), left=18)
    values = [v for e in drawn for v in (e["score_minutes"], *e["run_minutes"], *(e["score_interval_95"] or ()))
              if _finite(v) is not None]
    x, ticks = _time_scale(values, frame.x0, frame.x1)
    body = [_x_axis(x, ticks, frame, "minutes to train" + (" (log scale)" if x.log else ""))]
    for i, entry in enumerate(drawn):
        body.append(_time_row(entry, x, frame.y0 + row * (i + 0.5) + 6, frame, colours[entry["label"]]))
    legend, legend_height = _legend([
        _LegendItem("score", _swatch_rect("#8c959f")),
        _LegendItem("one run", '<circle cx="8" cy="5" r="3.2" class="run-dot"/>'),
        _LegendItem("95% interval", '<line x1="0" y1="5" x2="16" y2="5" class="interval"/>'),
        _LegendItem("not ranked", _swatch_rect("#8c959f", _FADED.format(colour="#8c959f"))),
    ], frame.below, frame)
    svg = _svg("time", benchmark, f"Time to train per entry, {benchmark}", "".join(body) + legend,
               frame.below + legend_height + 6, extra_attrs=f' data-x-scale="{_scale_name(x)}"')
    caption = ("Bar: the score (olympic mean, minutes). Dots: each run's minutes. "
               "Whisker: the 95% interval. Faded bars are not ranked.")
    if x.log:
        caption += " The minutes span more than 10x, so the axis is logarithmic."
    if skipped:
        caption += f" Not drawn (no score and no run times): {escape(_names(skipped))}."
    return svg, caption


LOG_SPAN = 10.0  # a time axis whose values span more than this factor is drawn logarithmic


def _scale_name(scale: _Scale) -> str:
    return "log" if scale.log else "linear"


def _time_scale(values: Sequence[float], px_lo: float, px_hi: float, *,
                flip: bool = False) -> tuple[_Scale, _Ticks]:
    """A scale over minutes: from 0 and linear, or logarithmic when the positive values span
    more than :data:`LOG_SPAN`; ``flip`` maps high values to ``px_lo`` (a y axis)."""
    positive = [v for v in values if v > 0]
    if positive and max(positive) / min(positive) > LOG_SPAN:
        ticks = _decade_ticks(min(positive), max(positive))
        log = True
    else:
        ticks = _nice_ticks(0.0, max(values, default=1.0))
        log = False
    lo, hi = ticks.values[0], ticks.values[-1]
    return (_Scale(lo, hi, px_hi, px_lo, log=log) if flip else _Scale(lo, hi, px_lo, px_hi, log=log)), ticks


def _decade_ticks(lo: float, hi: float) -> _Ticks:
    """Log-axis ticks at 1, 2 and 5 x 10^k (only 10^k past three decades) covering [lo, hi]."""
    steps = (1.0,) if hi / lo > 1000 else (1.0, 2.0, 5.0)
    candidates = [m * 10.0 ** k for k in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 2)
                  for m in steps]
    below = max(c for c in candidates if c <= lo * (1 + 1e-9))
    above = min(c for c in candidates if c >= hi * (1 - 1e-9))
    values = [c for c in candidates if below <= c <= above]
    return _Ticks(values, [f"{v:g}" for v in values])


def _time_row(entry: Entry, x: _Scale, y: float, frame: _Frame, colour: str) -> str:
    ranked = entry["ranked"]
    who = _who(entry)
    label_class = "row-label" if ranked else "row-label muted"
    label = (f'<text class="{label_class}" x="{_n(frame.x0)}" y="{_n(y - 12)}" text-anchor="start">'
             f'{_tip(who)}{escape(entry["label"])}</text>')
    parts = [label]
    score = _finite(entry["score_minutes"])
    if score is not None:
        style = ' fill-opacity="0.85"' if ranked else _FADED.format(colour=colour)
        parts.append(f'<rect class="bar" x="{_n(x(x.lo))}" y="{_n(y - 6)}" width="{_n(x(score) - x(x.lo))}" '
                     f'height="12" rx="2" fill="{colour}"{style}>{_tip(f"{who}: score {_minutes(score)} min")}</rect>')
    interval = entry["score_interval_95"]
    low, high = (_finite(v) for v in interval) if interval else (None, None)
    if low is not None and high is not None and (not x.log or low > 0):
        parts.append(f'<path class="interval" d="M{_n(x(low))} {_n(y - 4)}V{_n(y + 4)}M{_n(x(low))} {_n(y)}'
                     f'H{_n(x(high))}M{_n(x(high))} {_n(y - 4)}V{_n(y + 4)}">'
                     f'{_tip(f"95% interval {_minutes(low)}-{_minutes(high)} min")}</path>')
    for j, minutes in enumerate(m for m in map(_finite, entry["run_minutes"]) if m is not None and (not x.log or m > 0)):
        jitter = ((j % 3) - 1) * 2.5
        parts.append(f'<circle class="run-dot" cx="{_n(x(minutes))}" cy="{_n(y + jitter)}" r="3">'
                     f'{_tip(f"run {j + 1}: {_minutes(minutes)} min")}</circle>')
    return "".join(parts)


def _curve_points(curve: dict[str, Any]) -> list[tuple[float, float]]:
    points = [(_finite(p[0]), _finite(p[1])) for p in curve["points"]]
    return [(t, a) for t, a in points if t is not None and a is not None]


def _curves_chart(bench: dict[str, Any], entries: list[Entry], colours: dict[str, str]) -> Drawn:
    """Every curve of every entry: AUC against minutes since run_start, with the target dashed."""
    benchmark, target = bench["benchmark"], _finite(bench["target_auc"])
    curves = [(e, c, pts) for e in entries for c in e["curves"] if (pts := _curve_points(c))]
    if not curves:
        return "no run logged an evaluation"
    frame = _Frame(height=230)
    times = [t for _, _, pts in curves for t, _ in pts]
    aucs = [a for _, _, pts in curves for _, a in pts] + ([target] if target is not None else [])
    x, x_ticks = _time_scale(times, frame.x0, frame.x1)
    if x.log:  # a point at 0 minutes has no place on a log axis
        curves = [(e, c, kept) for e, c, pts in curves if (kept := [(t, a) for t, a in pts if t > 0])]
    y_ticks = _nice_ticks(min(aucs, default=0.5), max(aucs, default=1.0))
    y = _Scale(y_ticks.values[0], y_ticks.values[-1], frame.y1, frame.y0)
    x_title = "minutes since run_start" + (" (log scale)" if x.log else "")
    body = [_x_axis(x, x_ticks, frame, x_title), _y_axis(y, y_ticks, frame, "AUC")]
    for entry, curve, points in curves:
        body.append(_curve_path(entry, curve, points, x, y, colours[entry["label"]]))
    if target is not None:
        ty = _n(y(target))
        body.append(f'<line class="target target-line" x1="{_n(frame.x0)}" y1="{ty}" x2="{_n(frame.x1)}" y2="{ty}">'
                    f'{_tip(f"target AUC {_auc(target)}")}</line>'
                    f'<text class="target-label" x="{_n(frame.x1 - 4)}" y="{_n(y(target) - 5)}" text-anchor="end">'
                    f"target {_auc(target)}</text>")
    items = _system_legend((e for e, _, _ in curves), colours, _swatch_line)
    if target is not None:
        items.append(_LegendItem("target AUC", '<line x1="0" y1="5" x2="16" y2="5" class="target"/>'))
    if any(not c["converged"] for _, c, _ in curves):
        items.append(_LegendItem("did not converge", _swatch_line("#8c959f", ' stroke-opacity="0.35"')))
    legend, legend_height = _legend(items, frame.below, frame)
    svg = _svg("curves", benchmark, f"AUC against minutes since run_start, {benchmark}",
               "".join(body) + legend, frame.below + legend_height + 6,
               extra_attrs=f' data-x-scale="{_scale_name(x)}"')
    caption = "Every evaluation of every run, one colour per system; faded lines did not converge. "
    caption += (f"Dashed line: the target AUC {_auc(target)}." if target is not None
                else "This benchmark has no target AUC.")
    return svg, caption


def _curve_path(entry: Entry, curve: dict[str, Any], points: list[tuple[float, float]],
                x: _Scale, y: _Scale, colour: str) -> str:
    d = "M" + "L".join(f"{_n(x(t))} {_n(y(a))}" for t, a in points)
    faded = "" if curve["converged"] else ' stroke-opacity="0.35"'
    state = "converged" if curve["converged"] else "did not converge"
    tip = _tip(f"{entry['submitter']} / {entry['label']}, {curve['run']} ({state})")
    last_t, last_a = points[-1]
    end_tip = _tip(f"{curve['run']}: AUC {_auc(last_a)} at {_minutes(last_t)} min")
    end_faded = faded.replace("stroke", "fill")
    return (f'<path class="curve" d="{d}" stroke="{colour}"{faded}>{tip}</path>'
            f'<circle class="curve-end" cx="{_n(x(last_t))}" cy="{_n(y(last_a))}" r="2.6" '
            f'fill="{colour}"{end_faded}>{end_tip}</circle>')


def _scaling_chart(benchmark: str, entries: list[Entry], colours: dict[str, str]) -> Drawn:
    """Score against accelerator count, one point per entry: accelerators always on a log axis
    (the same for every benchmark), the score on a log axis when it spans more than 10x; points
    of one count side by side, so none hides another."""
    drawn = [e for e in entries if e["accelerator_count"] > 0 and _finite(e["score_minutes"]) is not None]
    no_accelerators = [e for e in entries if e["accelerator_count"] <= 0]
    no_score = [e for e in entries if e["accelerator_count"] > 0 and _finite(e["score_minutes"]) is None]
    if not drawn:
        return ("no entry with accelerators has a score" if no_score
                else "no entry ran on accelerators: CPUs only" if entries else "no entries")
    counts = [float(e["accelerator_count"]) for e in drawn]
    frame = _Frame(height=230)
    x_ticks = _log_ticks(min(counts), max(counts))
    y, y_ticks = _time_scale([e["score_minutes"] for e in drawn], frame.y0, frame.y1, flip=True)
    x = _Scale(x_ticks.values[0], x_ticks.values[-1], frame.x0 + 14, frame.x1 - 14, log=True)
    body = [_x_axis(x, x_ticks, frame, "accelerators (log scale)"),
            _y_axis(y, y_ticks, frame, "score (minutes" + (", log scale)" if y.log else ")"))]
    by_count: dict[int, list[Entry]] = {}
    for entry in drawn:
        by_count.setdefault(entry["accelerator_count"], []).append(entry)
    for group in by_count.values():
        for k, entry in enumerate(group):
            dodge = (k - (len(group) - 1) / 2) * 12.0
            body.append(_scaling_point(entry, x, y, colours[entry["label"]], dodge))
    items = _system_legend(drawn, colours, lambda c: f'<circle cx="8" cy="5" r="4.5" fill="{c}"/>')
    if any(not e["ranked"] for e in drawn):
        items.append(_LegendItem("not ranked (hollow)",
                                 '<circle cx="8" cy="5" r="4" fill="#fff" stroke="#8c959f" stroke-width="2"/>'))
    legend, legend_height = _legend(items, frame.below, frame)
    svg = _svg("scaling", benchmark, f"Score against accelerator count, {benchmark}", "".join(body) + legend,
               frame.below + legend_height + 6, extra_attrs=f' data-x-scale="log" data-y-scale="{_scale_name(y)}"')
    caption = "One point per entry; lower is faster. Hollow points are not ranked."
    if any(len(g) > 1 for g in by_count.values()):
        caption += " Entries with the same accelerator count are drawn side by side."
    if no_accelerators:
        caption += f" Not drawn, CPUs only (no accelerators): {escape(_names(no_accelerators))}."
    if no_score:
        caption += f" Not drawn, no score: {escape(_names(no_score))}."
    return svg, caption


def _projected(entry: Entry) -> float | None:
    return _finite((entry.get("projection") or {}).get("minutes"))


def _projection_chart(benchmark: str, entries: list[Entry], colours: dict[str, str]) -> Drawn:
    """Each entry's projected score (``harness project``, from its system description) against its
    measured score, on one scale for both axes (logarithmic when they span more than 10x), with the
    diagonal where the two agree."""
    points = [(e, measured, projected) for e in entries
              if (measured := _finite(e["score_minutes"])) is not None and (projected := _projected(e)) is not None]
    drawn = [e for e, _, _ in points]
    if not drawn:
        return "no entry has both a score and a projection"
    skipped = [e for e in entries if e not in drawn]
    frame = _Frame(height=230)
    values = [v for _, measured, projected in points for v in (measured, projected)]
    x, ticks = _time_scale(values, frame.x0, frame.x1)
    y, _ = _time_scale(values, frame.y0, frame.y1, flip=True)
    scale = " (log scale)" if x.log else ""
    body = [_x_axis(x, ticks, frame, "measured score (minutes)" + scale),
            _y_axis(y, ticks, frame, "projected (minutes)" + scale),
            (f'<line class="diagonal" x1="{_n(x(x.lo))}" y1="{_n(y(x.lo))}" x2="{_n(x(x.hi))}" y2="{_n(y(x.hi))}" '
             f'stroke="#8c959f" stroke-dasharray="4 3">{_tip("projected = measured")}</line>')]
    for entry, measured, projected in points:
        colour = colours[entry["label"]]
        paint = f'fill="{colour}"' if entry["ranked"] else f'fill="#fff" stroke="{colour}" stroke-width="2"'
        tip = f"{_who(entry)}: measured {_minutes(measured)} min, projected {_minutes(projected)} min"
        body.append(f'<circle class="point" cx="{_n(x(measured))}" cy="{_n(y(projected))}" r="5.5" {paint}>'
                    f"{_tip(tip)}</circle>")
    items = _system_legend(drawn, colours, lambda c: f'<circle cx="8" cy="5" r="4.5" fill="{c}"/>')
    items.append(_LegendItem("projected = measured",
                             '<line x1="0" y1="5" x2="16" y2="5" stroke="#8c959f" stroke-dasharray="4 3"/>'))
    legend, legend_height = _legend(items, frame.below, frame)
    svg = _svg("projection", benchmark, f"Projected against measured score, {benchmark}", "".join(body) + legend,
               frame.below + legend_height + 6, extra_attrs=f' data-x-scale="{_scale_name(x)}"')
    caption = ("One point per entry: its score, and harness project's from its own system description and batch "
               "size. Above the diagonal the projection is slower than the run was; hollow points are not ranked.")
    if skipped:
        caption += f" Not drawn (no score or no projection): {escape(_names(skipped))}."
    return svg, caption


def _scaling_point(entry: Entry, x: _Scale, y: _Scale, colour: str, dodge: float = 0.0) -> str:
    score, count = float(entry["score_minutes"]), entry["accelerator_count"]
    paint = f'fill="{colour}"' if entry["ranked"] else f'fill="#fff" stroke="{colour}" stroke-width="2"'
    tip = f"{_who(entry)}: {count} x {entry['accelerator_model']}, {_minutes(score)} min"
    return (f'<circle class="point" cx="{_n(x(count) + dodge)}" cy="{_n(y(score))}" r="5.5" {paint}>'
            f"{_tip(tip)}</circle>")
