"""Render a leaderboard (a dict valid against ``leaderboard.schema.json``) as one HTML page.

The page is self-contained: CSS, a small column-sorting script and the charts (SVG) are
inline, and nothing is fetched. Every user-supplied value passes through
:func:`html.escape`, in text and in attributes alike; the script carries no data at all and
sorts a table by reading its cells' ``data-sort`` attributes.

Hooks for tests and tools: ``<table class="leaderboard ranked|unranked" data-benchmark=...>``,
rows ``<tr class="entry">``, cells ``<td data-key=... data-sort=...>``, and charts
``<svg class="chart chart-time|chart-curves|chart-scaling|chart-projection" data-benchmark=...>``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from harness.leaderboard.labels import runs_text
from harness.leaderboard.svg import (
    BASE_CSS,
    DASH,
    Frame as _Frame,
    LegendItem as _LegendItem,
    Scale as _Scale,
    Ticks as _Ticks,
    empty_chart as _empty_chart,
    finite as _finite,
    legend as _legend,
    log_ticks as _log_ticks,
    nice_ticks as _nice_ticks,
    px as _n,
    series_colour,
    svg,
    swatch_line as _swatch_line,
    swatch_rect as _swatch_rect,
    tip as _tip,
    x_axis as _x_axis,
    y_axis as _y_axis,
)

Entry = dict[str, Any]

_DOT = " \u00b7 "
_BADGE_CLASS = {"pass": "ok", "fail": "bad"}
_FADED = ' fill-opacity="0.3" stroke="{colour}" stroke-dasharray="3 2"'  # an unranked entry's bar


def render_html(board: dict[str, Any]) -> str:
    """The whole page (``index.html``) for ``board``."""
    colours = _system_colours(board["benchmarks"])
    sections = "\n".join(
        _benchmark_section(i, bench, board["baseline_system"], colours)
        for i, bench in enumerate(board["benchmarks"]))
    if not board["benchmarks"]:
        sections = '<p class="note">No benchmarks: no run sets were found under the roots.</p>'
    return "\n".join([
        "<!doctype html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>DLRM benchmark leaderboard</title>",
        f"<style>{_CSS}</style>",
        "</head>",
        "<body>",
        _page_header(board),
        "<main>",
        _contents(board["benchmarks"]),
        sections,
        "</main>",
        f"<script>{_SORT_JS}</script>",
        "</body>",
        "</html>",
        "",
    ])


# ---------------------------------------------------------------------------------------
# Formatting

def _minutes(value: float) -> str:
    if abs(value) >= 100:
        return f"{value:,.1f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def _rate(value: float) -> str:
    if value >= 1e6:
        return f"{value / 1e6:.2f}\u202fM"
    if value >= 1e3:
        return f"{value / 1e3:.1f}\u202fk"
    return f"{value:.0f}"


def _auc(value: float) -> str:
    return f"{value:.6g}"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "\u2026"


def _sort_attr(value: str | float | None) -> str:
    if value is None:
        return ""
    return escape(value.lower() if isinstance(value, str) else repr(value))


def _badge(text: str, kind: str, hint: str = "") -> str:
    title = f' title="{escape(hint)}"' if hint else ""
    return f'<span class="badge {kind}"{title}>{escape(text)}</span>'


def _verdict_badge(verdict: str) -> str:
    """``"fail: converged too fast"`` as a red "fail" badge with the detail in small text below."""
    head, _, detail = verdict.partition(":")
    kind = _BADGE_CLASS.get(head.strip().lower(), "neutral")
    if not detail.strip():
        return _badge(verdict, kind)
    return _badge(head.strip(), kind) + f'<span class="sub">{escape(detail.strip())}</span>'


# ---------------------------------------------------------------------------------------
# Page frame

def _page_header(board: dict[str, Any]) -> str:
    baseline = board["baseline_system"]
    baseline_html = escape(baseline) if baseline else "none (speedups not computed)"
    roots = ", ".join(f"<code>{escape(r)}</code>" for r in board["roots"]) or DASH
    return (
        '<header class="page"><div class="inner">'
        "<h1>DLRM benchmark leaderboard</h1>"
        '<p class="lede">Time to train to the quality target; lower is better. '
        "Scores are olympic means of the converged runs, in minutes. Click a column header to sort.</p>"
        "<dl>"
        f'<div><dt>Generated</dt><dd class="generated-at">{escape(board["generated_at"])}</dd></div>'
        f'<div><dt>Baseline system</dt><dd class="baseline">{baseline_html}</dd></div>'
        f'<div><dt>Harness</dt><dd>{escape(board["harness_version"])}</dd></div>'
        f"<div><dt>Results from</dt><dd>{roots}</dd></div>"
        "</dl></div></header>")


def _contents(benchmarks: Sequence[dict[str, Any]]) -> str:
    if len(benchmarks) < 2:
        return ""
    items = "".join(
        f'<li><a href="#benchmark-{i}">{escape(b["benchmark"])}</a> '
        f'<span class="muted">{_count_line(b["entries"])}</span></li>'
        for i, b in enumerate(benchmarks))
    return f'<nav class="contents"><ul>{items}</ul></nav>'


def _count_line(entries: Sequence[Entry]) -> str:
    ranked = sum(1 for e in entries if e["ranked"])
    return f"{ranked} ranked \u00b7 {len(entries) - ranked} not ranked"


def _benchmark_section(index: int, bench: dict[str, Any], baseline: str | None,
                       colours: dict[str, str]) -> str:
    name = escape(bench["benchmark"])
    ranked, unranked = _split(bench["entries"])
    target = _finite(bench["target_auc"])
    required = bench["required_runs"]
    facts = [
        f"target AUC <strong>{_auc(target)}</strong>" if target is not None else "no target AUC",
        f"<strong>{required}</strong> runs required" if required is not None else "required runs not set",
        _count_line(bench["entries"]),
    ]
    return "\n".join([
        f'<section class="benchmark" id="benchmark-{index}" data-benchmark="{name}">',
        f"<h2>{name}</h2>",
        f'<p class="facts">{_DOT.join(facts)}</p>',
        _ranked_block(bench["benchmark"], ranked, baseline),
        _unranked_block(bench["benchmark"], unranked, baseline),
        _charts(bench, ranked + unranked, colours),
        "</section>",
    ])


def _split(entries: Sequence[Entry]) -> tuple[list[Entry], list[Entry]]:
    """Ranked entries by rank, and the unranked ones in the order given."""
    ranked = sorted((e for e in entries if e["ranked"]),
                    key=lambda e: (e["rank"] is None, e["rank"] or 0))
    return ranked, [e for e in entries if not e["ranked"]]


def _ranked_block(benchmark: str, entries: list[Entry], baseline: str | None) -> str:
    if not entries:
        return '<p class="note">No ranked entries.</p>'
    return _table("ranked", benchmark, [_RANK, *_COLUMNS], entries, baseline)


def _unranked_block(benchmark: str, entries: list[Entry], baseline: str | None) -> str:
    if not entries:
        return ""
    return ('<div class="unranked-block"><h3>Not ranked</h3>'
            '<p class="note">Shown for completeness; each row says why it is not ranked.</p>'
            f'{_table("unranked", benchmark, [_REASONS, *_COLUMNS], entries, baseline)}</div>')


# ---------------------------------------------------------------------------------------
# Tables

@dataclass(frozen=True)
class _Cell:
    html: str  # already escaped
    sort: str | float | None


@dataclass(frozen=True)
class _Column:
    key: str
    label: str
    hint: str
    numeric: bool
    cell: Callable[[Entry, str | None], _Cell]
    wrap: bool = False  # long free text: may wrap at spaces (identifiers never do)


def _table(kind: str, benchmark: str, columns: Sequence[_Column], entries: Sequence[Entry],
           baseline: str | None) -> str:
    head = "".join(_th(c, sorted_by=(c.key == "rank")) for c in columns)
    rows = "\n".join(
        '<tr class="entry">' + "".join(_td(c, e, baseline) for c in columns) + "</tr>"
        for e in entries)
    return (f'<div class="table-wrap"><table class="leaderboard {kind}" data-benchmark="{escape(benchmark)}">'
            f"<thead><tr>{head}</tr></thead>\n<tbody>\n{rows}\n</tbody></table></div>")


def _th(column: _Column, *, sorted_by: bool) -> str:
    attrs = ' class="num"' if column.numeric else ""
    attrs += ' aria-sort="ascending"' if sorted_by else ""
    kind = "num" if column.numeric else "text"
    return (f'<th scope="col" data-key="{column.key}" data-type="{kind}" title="{escape(column.hint)}"{attrs}>'
            f'<button type="button">{escape(column.label)}</button></th>')


def _td(column: _Column, entry: Entry, baseline: str | None) -> str:
    cell = column.cell(entry, baseline)
    classes = " ".join(c for c, on in (("num", column.numeric), ("wrap", column.wrap)) if on)
    cls = f' class="{classes}"' if classes else ""
    return f'<td data-key="{column.key}" data-sort="{_sort_attr(cell.sort)}"{cls}>{cell.html}</td>'


def _number_cell(value: Any, show: Callable[[float], str]) -> _Cell:
    number = _finite(value)
    return _Cell(DASH, None) if number is None else _Cell(escape(show(number)), number)


def _text_cell(value: str | None) -> _Cell:
    return _Cell(escape(value), value) if value else _Cell(DASH, None)


def _submitter_cell(e: Entry, _: str | None) -> _Cell:
    extra = f'<span class="sub">{escape(e["round"])}</span>' if e["round"] else ""
    return _Cell(f'<span title="{escape(e["source"])}">{escape(e["submitter"])}</span>{extra}',
                 e["submitter"])


def _system_cell(e: Entry, baseline: str | None) -> _Cell:
    badge = " " + _badge("baseline", "baseline") if e.get("baseline") else ""
    return _Cell(f"{escape(e['label'])}{badge}", e["label"])


def _hardware_cell(e: Entry, _: str | None) -> _Cell:
    badge = _badge("emulated", "emulated", "emulated: this hardware was not present") if e["emulated"] else ""
    return _Cell(f'{e["accelerator_count"]} x {escape(e["accelerator_model"])}'
                 f'<span class="sub">{escape(e["host"])}</span>{badge}', e["accelerator_count"])


def _runs_cell(e: Entry, _: str | None) -> _Cell:
    return _Cell(f'<span title="converged / total runs">{escape(runs_text(e))}</span>', e["converged_runs"])


def _score_cell(e: Entry, _: str | None) -> _Cell:
    score = _finite(e["score_minutes"])
    if score is None:
        return _Cell(DASH, None)
    interval = e["score_interval_95"]
    low, high = (_finite(v) for v in interval) if interval else (None, None)
    extra = (f'<span class="sub interval" title="95% interval">{_minutes(low)}\u2013{_minutes(high)}</span>'
             if low is not None and high is not None else "")
    return _Cell(f"<strong>{_minutes(score)}</strong>{extra}", score)


def _projected_cell(e: Entry, _: str | None) -> _Cell:
    """``harness project``'s minutes for the entry, its band and its ratio to the score; a dash with
    the reason as a tooltip where it was not projected."""
    projection = e.get("projection") or {}
    minutes = _finite(projection.get("minutes"))
    if minutes is None:
        note = projection.get("note") or "not projected"
        return _Cell(f'<span title="{escape(note)}">{DASH}</span>', None)
    band, ratio = projection.get("band_minutes"), _finite(projection.get("ratio"))
    extra = (f'<span class="sub" title="band: how far to trust the projection">{_minutes(band[0])}\u2013'
             f'{_minutes(band[1])}</span>' if band else "")
    if ratio is not None:
        extra += f'<span class="sub" title="projected / measured">{ratio:.2f}\u00d7 measured</span>'
    return _Cell(f"{_minutes(minutes)}{extra}", minutes)


def _reasons_cell(e: Entry, _: str | None) -> _Cell:
    reasons = e["reasons"] or ["(no reason given)"]
    items = "".join(f"<li>{escape(r)}</li>" for r in reasons)
    return _Cell(f'<ul class="reasons">{items}</ul>', "; ".join(reasons))


_RANK = _Column("rank", "#", "rank (ranked entries only)", True,
                lambda e, _: _Cell(str(e["rank"]), e["rank"]) if e["rank"] is not None else _Cell(DASH, None))
_REASONS = _Column("reasons", "Why not ranked", "reasons the entry is not ranked", False, _reasons_cell, wrap=True)
_COLUMNS: tuple[_Column, ...] = (
    _Column("submitter", "Submitter", "submitter (and MLPerf round)", False, _submitter_cell, wrap=True),
    _Column("system", "System", "system name", False, _system_cell, wrap=True),
    _Column("hardware", "Hardware", "accelerators (count x model) and host; sorts by count", True,
            _hardware_cell, wrap=True),
    _Column("profile", "Profile", "hardware profile", False, lambda e, _: _text_cell(e["profile"])),
    _Column("division", "Division", "closed or open", False, lambda e, _: _text_cell(e["division"])),
    _Column("availability", "Availability", "available, preview or research", False,
            lambda e, _: _text_cell(e["availability"]), wrap=True),
    _Column("runs", "Runs", "converged / total runs", True, _runs_cell),
    _Column("score", "Score (min)", "olympic mean of the runs in minutes, with its 95% interval", True,
            _score_cell),
    _Column("projected", "Projected (min)", "harness project's score from the system description, with its band "
            "and its ratio to the measured score", True, _projected_cell),
    _Column("cv", "CV", "coefficient of variation of the runs' minutes", True,
            lambda e, _: _number_cell(e["coefficient_of_variation"], lambda v: f"{v * 100:.1f}%")),
    _Column("rcp", "RCP", "reference convergence point check", False,
            lambda e, _: _Cell(_verdict_badge(e["rcp_verdict"]), e["rcp_verdict"]), wrap=True),
    _Column("compliance", "Compliance", "compliance check of the logs", False,
            lambda e, _: _Cell(_verdict_badge(e["compliance_verdict"]), e["compliance_verdict"])),
    _Column("throughput", "Throughput", "training samples per second, where logged", True,
            lambda e, _: _number_cell(e["throughput_samples_per_s"], lambda v: f"{_rate(v)}/s")),
    _Column("accelerator_minutes", "Accel-min", "accelerator-minutes: score x accelerator count", True,
            lambda e, _: _number_cell(e["accelerator_minutes"], _minutes)),
    _Column("speedup", "Speedup", "speedup against the baseline system", True,
            lambda e, _: _number_cell(e["speedup_vs_baseline"], lambda v: f"{v:.2f}\u00d7")),
)


# ---------------------------------------------------------------------------------------
# Chart geometry (the primitives are harness.leaderboard.svg's)

def _svg(kind: str, benchmark: str, title: str, body: str, height: float, width: float = 480,
         extra_attrs: str = "") -> str:
    return svg(kind, title, body, height, width=width, attrs=f' data-benchmark="{escape(benchmark)}"{extra_attrs}')



def _system_colours(benchmarks: Iterable[dict[str, Any]]) -> dict[str, str]:
    """One colour per entry label (one per system) across the page, in order of first appearance."""
    colours: dict[str, str] = {}
    for bench in benchmarks:
        ranked, unranked = _split(bench["entries"])
        for entry in ranked + unranked:
            colours.setdefault(entry["label"], series_colour(len(colours)))
    return colours


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


# ---------------------------------------------------------------------------------------
# Charts

def _charts(bench: dict[str, Any], entries: list[Entry], colours: dict[str, str]) -> str:
    figures = [
        ("Time to train", *_time_chart(bench["benchmark"], entries, colours)),
        ("AUC during training", *_curves_chart(bench, entries, colours)),
        ("Score vs accelerators", *_scaling_chart(bench["benchmark"], entries, colours)),
        ("Projected vs measured", *_projection_chart(bench["benchmark"], entries, colours)),
    ]
    return '<div class="charts">' + "".join(
        f'<figure class="chart-box"><h4>{heading}</h4>{svg}<figcaption>{caption}</figcaption></figure>'
        for heading, svg, caption in figures) + "</div>"


def _time_chart(benchmark: str, entries: list[Entry], colours: dict[str, str]) -> tuple[str, str]:
    """Horizontal bars: each entry's score, its runs' minutes as dots and the 95% interval; each
    bar under its entry's whole label; a log axis when the minutes span more than 10x."""
    drawn = [e for e in entries if _finite(e["score_minutes"]) is not None
             or any(_finite(m) is not None for m in e["run_minutes"])]
    skipped = [e for e in entries if e not in drawn]
    row = 34.0
    frame = _Frame(height=max(row * len(drawn), 60), left=18)
    values = [v for e in drawn for v in (e["score_minutes"], *e["run_minutes"], *(e["score_interval_95"] or ()))
              if _finite(v) is not None]
    x, ticks = _time_scale(values, frame.x0, frame.x1)
    body = [_x_axis(x, ticks, frame, "minutes to train" + (" (log scale)" if x.log else ""))]
    for i, entry in enumerate(drawn):
        body.append(_time_row(entry, x, frame.y0 + row * (i + 0.5) + 6, frame, colours[entry["label"]]))
    if not drawn:
        body.append(_empty_chart(frame, "no scores or runs"))
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


def _curves_chart(bench: dict[str, Any], entries: list[Entry], colours: dict[str, str]) -> tuple[str, str]:
    """Every curve of every entry: AUC against minutes since run_start, with the target dashed."""
    benchmark, target = bench["benchmark"], _finite(bench["target_auc"])
    curves = [(e, c, pts) for e in entries for c in e["curves"] if (pts := _curve_points(c))]
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
    if not curves:
        body.append(_empty_chart(frame, "no evaluation points logged"))
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


def _scaling_chart(benchmark: str, entries: list[Entry], colours: dict[str, str]) -> tuple[str, str]:
    """Score against accelerator count, one point per entry: accelerators always on a log axis
    (the same for every benchmark), the score on a log axis when it spans more than 10x; points
    of one count side by side, so none hides another."""
    drawn = [e for e in entries if e["accelerator_count"] > 0 and _finite(e["score_minutes"]) is not None]
    no_accelerators = [e for e in entries if e["accelerator_count"] <= 0]
    no_score = [e for e in entries if e["accelerator_count"] > 0 and _finite(e["score_minutes"]) is None]
    counts = [float(e["accelerator_count"]) for e in drawn]
    frame = _Frame(height=230)
    x_ticks = _log_ticks(min(counts), max(counts)) if counts else _log_ticks(1.0, 8.0)
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
    if not drawn:
        body.append(_empty_chart(frame, "no entry has both accelerators and a score"))
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
        caption += f" Skipped, no accelerators (count 0): {escape(_names(no_accelerators))}."
    if no_score:
        caption += f" Skipped, no score: {escape(_names(no_score))}."
    return svg, caption


def _projected(entry: Entry) -> float | None:
    return _finite((entry.get("projection") or {}).get("minutes"))


def _projection_chart(benchmark: str, entries: list[Entry], colours: dict[str, str]) -> tuple[str, str]:
    """Each entry's projected score (``harness project``, from its system description) against its
    measured score, on one scale for both axes (logarithmic when they span more than 10x), with the
    diagonal where the two agree."""
    drawn = [e for e in entries if _finite(e["score_minutes"]) is not None and _projected(e) is not None]
    skipped = [e for e in entries if e not in drawn]
    frame = _Frame(height=230)
    values = [v for e in drawn for v in (e["score_minutes"], _projected(e))]
    x, ticks = _time_scale(values, frame.x0, frame.x1)
    y, _ = _time_scale(values, frame.y0, frame.y1, flip=True)
    scale = " (log scale)" if x.log else ""
    body = [_x_axis(x, ticks, frame, "measured score (minutes)" + scale),
            _y_axis(y, ticks, frame, "projected (minutes)" + scale),
            f'<line class="diagonal" x1="{_n(x(x.lo))}" y1="{_n(y(x.lo))}" x2="{_n(x(x.hi))}" y2="{_n(y(x.hi))}" '
            f'stroke="#8c959f" stroke-dasharray="4 3">{_tip("projected = measured")}</line>']
    for entry in drawn:
        measured, projected = float(entry["score_minutes"]), float(_projected(entry))  # type: ignore[arg-type]
        colour = colours[entry["label"]]
        paint = f'fill="{colour}"' if entry["ranked"] else f'fill="#fff" stroke="{colour}" stroke-width="2"'
        tip = f"{_who(entry)}: measured {_minutes(measured)} min, projected {_minutes(projected)} min"
        body.append(f'<circle class="point" cx="{_n(x(measured))}" cy="{_n(y(projected))}" r="5.5" {paint}>'
                    f"{_tip(tip)}</circle>")
    if not drawn:
        body.append(_empty_chart(frame, "no entry has both a score and a projection"))
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


# ---------------------------------------------------------------------------------------
# Inline assets (constant: no user value is ever formatted into these)

_CSS = BASE_CSS + """
nav.contents ul { list-style: none; display: flex; flex-wrap: wrap; gap: 6px 24px; padding: 0; margin: 18px 0 0; }
nav.contents a { color: var(--accent); text-decoration: none; font-weight: 600; }
section.benchmark { margin-top: 30px; }
section.benchmark h2 { font-size: 19px; margin: 0; padding-bottom: 6px; border-bottom: 1px solid var(--line); }
p.facts { margin: 8px 0 12px; color: var(--muted); font-size: 13px; }
p.facts strong { color: var(--fg); font-weight: 600; }
.table-wrap { overflow-x: auto; border: 1px solid var(--line); border-radius: 6px; }
table.leaderboard { border-collapse: collapse; width: 100%; font-size: 12.5px; }
table.leaderboard th, table.leaderboard td { padding: 6px 7px; text-align: left; vertical-align: top;
  border-bottom: 1px solid var(--soft); white-space: nowrap; }
table.leaderboard tbody tr:last-child td { border-bottom: 0; }
table.leaderboard td.wrap { white-space: normal; overflow-wrap: break-word; min-width: 72px; }
table.leaderboard .sub.interval { white-space: nowrap; }
table.leaderboard thead th { white-space: normal; vertical-align: bottom; }
table.leaderboard .num { text-align: right; font-variant-numeric: tabular-nums; }
table.leaderboard thead th { background: var(--panel); font-weight: 600; font-size: 11.5px; color: #424a53;
  border-bottom: 1px solid var(--line); }
table.leaderboard th button { all: unset; cursor: pointer; }
table.leaderboard th button:focus-visible { outline: 2px solid var(--accent); outline-offset: 2px; }
table.leaderboard th button::after { content: ""; margin-left: 3px; font-size: 9px; color: var(--accent); }
table.leaderboard th button:hover { color: var(--accent); text-decoration: underline dotted;
  text-underline-offset: 3px; }
table.leaderboard th[aria-sort="ascending"] button::after { content: "\\25B2"; }
table.leaderboard th[aria-sort="descending"] button::after { content: "\\25BC"; }
table.leaderboard tbody tr:nth-child(even) { background: #fafbfc; }
table.leaderboard tbody tr:hover { background: #f1f6fe; }
table.leaderboard td strong { font-weight: 600; }
.unranked-block { margin-top: 18px; padding: 2px 0 2px 10px; border-left: 4px solid #d4a72c; }
.unranked-block h3 { margin: 4px 0 0; font-size: 15px; }
table.unranked tbody tr:nth-child(even) { background: #fffcf0; }
ul.reasons { margin: 0; padding-left: 16px; white-space: normal; min-width: 170px; max-width: 280px; color: #6e4b00; }
"""

_SORT_JS = """
(function () {
  "use strict";
  function key(cell, numeric) {
    var raw = cell ? cell.getAttribute("data-sort") : null;
    if (raw === null || raw === "") { return null; }
    if (!numeric) { return raw; }
    var n = parseFloat(raw);
    return isFinite(n) ? n : null;
  }
  function order(row) { return Number(row.getAttribute("data-order")); }
  function sortBy(table, th) {
    var column = th.cellIndex;
    var numeric = th.getAttribute("data-type") === "num";
    var ascending = th.getAttribute("aria-sort") !== "ascending";
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = key(a.cells[column], numeric), y = key(b.cells[column], numeric);
      if (x === null || y === null) {
        if (x === y) { return order(a) - order(b); }
        return x === null ? 1 : -1;
      }
      var c = numeric ? x - y : x.localeCompare(y);
      if (c === 0) { return order(a) - order(b); }
      return ascending ? c : -c;
    });
    rows.forEach(function (row) { body.appendChild(row); });
    Array.prototype.forEach.call(th.parentNode.cells, function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
  }
  document.querySelectorAll("table.leaderboard").forEach(function (table) {
    Array.prototype.forEach.call(table.tBodies[0].rows, function (row, i) {
      row.setAttribute("data-order", String(i));
    });
    table.querySelectorAll("thead th").forEach(function (th) {
      th.addEventListener("click", function () { sortBy(table, th); });
    });
  });
})();
"""
