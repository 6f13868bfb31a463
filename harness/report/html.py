"""Render a :class:`~harness.report.collect.Report` as one self-contained HTML page.

CSS and charts (SVG) are inline and nothing is fetched; there is no script. Every text that
comes from a log, a system description or a path passes through :func:`html.escape`, in text
and attributes alike. The chart primitives are the leaderboard's (:mod:`harness.leaderboard.svg`).

Hooks for tests and tools: each run set is ``<section class="runset" data-runset=N>``; charts are
``<svg class="chart chart-<kind>" data-runset=N>`` with kind ``auc-samples``, ``auc-time``,
``step-time``, ``phases``, ``comm``, ``memory`` (``data-tier``), ``cache``, ``blocks`` and
``throughput``; their marks carry ``data-run``, ``data-rank``, ``data-phase``, ``data-kind``,
``data-link``, ``data-measure`` and the value drawn (``data-seconds``, ``data-bytes``, ...);
the target AUC is ``line.target-line[data-target]``; what a log lacks is ``ul.missing > li``;
the files that are not logs are ``p.not-logs``.

The figures of a run set (``figure.chart-box[data-block]``, each named by its block) fill the
page's width: from 1,230 px in three columns (``div.figures > div.column``), each figure placed
in the shortest; narrower, in one grid in their order. A legend swatch is painted by the function
that paints its bars (:func:`_paint`), and an axis of time says the unit its ticks are in.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path

from harness import __version__
from harness.hw_profiles.profiles import format_bytes
from harness.leaderboard.svg import (
    BASE_CSS,
    DASH,
    Frame,
    LegendItem,
    Scale,
    Ticks,
    empty_chart,
    legend,
    nice_ticks,
    px,
    series_colour,
    svg,
    swatch_line,
    tip,
    x_axis,
    y_axis,
)
from harness.mllog import keys
from harness.report.collect import NOT_A_LOG_MARK, TIERS, Report, RunReport, RunSetReport, name_files

_DOT = " \u00b7 "
_FAINT_OPACITY = 0.35  # the run blocks, under the init and eval blocks they hold
_MEASURES = (("planned", "#8c959f"), ("held", "#0067a5"), ("peak", "#be0032"))


def render_html(report: Report, *, generated_at: str | None = None) -> str:
    """The whole page (``index.html``) for ``report``."""
    when = generated_at or dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    sections = "\n".join(_run_set_section(i, rs) for i, rs in enumerate(report.run_sets))
    return "\n".join([
        "<!doctype html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>Run set report</title>", f"<style>{_CSS}</style>", "</head>", "<body>",
        ('<header class="page"><div class="inner"><h1>Run set report</h1>'
         '<p class="lede">Where the time, the bytes and the memory of each run went, from its logs.</p><dl>'
         f'<div><dt>Generated</dt><dd class="generated-at">{escape(when)}</dd></div>'
         f"<div><dt>Harness</dt><dd>{escape(__version__)}</dd></div>"
         f"<div><dt>Logs from</dt><dd><code>{escape(str(report.root))}</code></dd></div>"
         f"<div><dt>Run sets</dt><dd>{len(report.run_sets)}</dd></div></dl></div></header>"),
        "<main>", _contents(report), _not_logs(report.not_logs, report.root), sections, "</main>", "</body>",
        "</html>", "",
    ])


def _not_logs(paths: Sequence[Path], root: Path) -> str:
    if not paths:
        return ""
    return (f'<p class="note not-logs">Not logs (no {escape(NOT_A_LOG_MARK)} line in them), left out: '
            f"<code>{escape(name_files(tuple(paths), root))}</code></p>")


def _contents(report: Report) -> str:
    if len(report.run_sets) < 2:
        return ""
    items = "".join(f'<li><a href="#runset-{i}">{escape(rs.system)} / {escape(rs.benchmark)}</a></li>'
                    for i, rs in enumerate(report.run_sets))
    return f'<nav class="contents"><ul>{items}</ul></nav>'


# ---------------------------------------------------------------------------------------
# A run set

def _run_set_section(index: int, rs: RunSetReport) -> str:
    target = (f"target AUC <strong>{rs.target_auc:.6g}</strong> (from {escape(rs.target_source)})"
              if rs.target_auc is not None else f"no target AUC ({escape(rs.target_source)})")
    converged = sum(r.converged(rs.target_auc) for r in rs.runs)
    facts = [f"<code>{escape(str(rs.path))}</code>", f"{len(rs.runs)} runs, {converged} reached the target", target]
    problems = "".join(f"<li>{escape(p)}</li>" for p in rs.problems)
    parts = [
        (f'<section class="runset" id="runset-{index}" data-runset="{index}" data-system="{escape(rs.system)}" '
         f'data-benchmark="{escape(rs.benchmark)}">'),
        f"<h2>{escape(rs.system)} <span class=\"muted\">/ {escape(rs.benchmark)}</span></h2>",
        f'<p class="facts">{_DOT.join(facts)}</p>',
        f'<ul class="problems">{problems}</ul>' if problems else "",
        _not_logs(rs.not_logs, rs.path),
        _setup_block(rs),
        _runs_table(rs),
        _figures([("Quality", [_auc_chart(index, rs, by_samples=True), _auc_chart(index, rs, by_samples=False)]),
                  ("Time", _time_figures(index, rs)),
                  ("Bytes on the wire", [_comm_chart(index, rs)]),
                  ("Memory", _memory_figures(index, rs))]),
        _missing_block(rs),
        "</section>",
    ]
    return "\n".join(p for p in parts if p)


@dataclass(frozen=True)
class _Figure:
    heading: str
    svg: str  # trusted SVG, or "" for a figure that is only words
    caption: str  # already escaped


COLUMNS = 3  # figures side by side on a wide page (3 x 380 px and the gaps: from 1,230 px)
_COLUMN_PX = 407.0  # a figure's inner width at 1,400 px, in CSS pixels
_GAP_PX = 16.0


def _figures(blocks: Sequence[tuple[str, Sequence[_Figure]]]) -> str:
    """Every figure of a run set, each named by its block (quality, time, bytes, memory), in
    :data:`COLUMNS` columns that fill the page's width: each figure in turn goes to the column
    that is shortest so far (by :func:`_height`), so no column is left empty while another
    runs on. On a narrower page the columns dissolve into one grid of the figures in their
    order (their CSS ``order``)."""
    columns: list[list[str]] = [[] for _ in range(COLUMNS)]
    heights = [0.0] * COLUMNS
    figures = [(block, f) for block, fs in blocks for f in fs]
    for order, (block, f) in enumerate(figures):
        shortest = min(range(COLUMNS), key=lambda c: heights[c])
        columns[shortest].append(
            f'<figure class="chart-box" data-block="{escape(block)}" style="order: {order}">'
            f'<h4><span class="block-name">{escape(block)}</span>{escape(f.heading)}</h4>{f.svg}'
            f"<figcaption>{f.caption}</figcaption></figure>")
        heights[shortest] += _height(f) + _GAP_PX
    return ('<div class="figures">' + "".join(f'<div class="column">{"".join(c)}</div>' for c in columns)
            + "</div>")


def _height(f: _Figure) -> float:
    """About how tall ``f`` is drawn in a column at 1,400 px (CSS pixels): its box, headings, chart
    (its viewBox scaled to the column), table rows and caption lines (12 px text, 6.2 px a
    character). An estimate that only balances the columns."""
    height = 26.0 + 43.0  # the box's padding and border; the block's name and the heading
    box = re.search(r'viewBox="0 0 ([\d.]+) ([\d.]+)"', f.svg)
    if box:
        height += float(box.group(2)) * _COLUMN_PX / float(box.group(1))
    height += 28.0 * f.svg.count("<tr")
    text = re.sub(r"<[^>]+>", "", f.caption)
    return height + 6.0 + 17.0 * max(1, math.ceil(len(text) * 6.2 / _COLUMN_PX))


def _setup_block(rs: RunSetReport) -> str:
    first = rs.runs[0] if rs.runs else None
    setup = dict(first.setup) if first else {}
    setup.update({f"system: {k}": v for k, v in rs.system_facts.items()})
    rows = "".join(f'<div data-key="{escape(k)}"><dt>{escape(k)}</dt><dd>{escape(v)}</dd></div>'
                   for k, v in setup.items())
    emulated = (" " + '<span class="badge emulated">emulated</span>'
                if first and first.setup.get("emulated", "").startswith("yes") else "")
    source = f" (from {escape(first.name)})" if first else ""
    return f'<h3>What the run was{emulated}</h3><p class="note">As its log says it{source}.</p>' \
           f'<dl class="setup">{rows or "<div><dt>nothing</dt><dd>the log states none of it</dd></div>"}</dl>'


def _runs_table(rs: RunSetReport) -> str:
    head = "".join(f"<th{_NUM if num else ''}>{escape(h)}</th>" for h, num in _RUN_COLUMNS)
    rows = []
    for r in rs.runs:
        last = r.evals[-1].auc if r.evals else None
        phases = r.step_phases
        slowest = max(phases.ranks, key=lambda k: k.step_s.p50) if phases else None
        cells = [
            escape(r.name), escape(str(r.seed)) if r.seed is not None else DASH,
            escape(r.status or DASH)
            + ("" if r.converged(rs.target_auc) else ' <span class="badge bad">no target</span>'),
            _num(r.run_seconds, "{:,.2f}"), _num(last, "{:.5f}"), _num(r.samples_per_s, "{:,.0f}"),
            *(_num(getattr(slowest.step_s, p) * 1000 if slowest else None, "{:.2f}") for p in ("p50", "p90", "p99")),
        ]
        tds = "".join(f"<td{_NUM if num else ''}>{c}</td>" for c, (_, num) in zip(cells, _RUN_COLUMNS))
        rows.append(f'<tr class="run" data-run="{escape(r.name)}">{tds}</tr>')
    return (f'<h3>Runs</h3><div class="table-wrap"><table class="runs"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div>'
            '<p class="note">Step percentiles: the slowest rank\'s (by P50), from the log\'s '
            f"{keys.HARNESS_STEP_PHASES} record where it has one.</p>")


_NUM = ' class="num"'
_RUN_COLUMNS = (("run", False), ("seed", False), ("status", False), ("seconds", True), ("final AUC", True),
                ("samples/s", True), ("step P50 ms", True), ("step P90 ms", True), ("step P99 ms", True))


def _num(value: float | None, fmt: str) -> str:
    return DASH if value is None else escape(fmt.format(value))


def _missing_block(rs: RunSetReport) -> str:
    lacks: dict[str, list[str]] = {}
    for r in rs.runs:
        for item in r.missing:
            lacks.setdefault(item, []).append(r.name)
    if not lacks:
        return '<h3>What the logs lack</h3><p class="note missing-none">Nothing: every figure is drawn.</p>'
    items = "".join(
        f'<li data-figure="{escape(item.split(" (", 1)[0])}">{escape(item)}'
        f'{"" if len(runs) == len(rs.runs) else escape(" — in " + ", ".join(runs))}</li>'
        for item, runs in lacks.items())
    return f'<h3>What the logs lack</h3><ul class="missing">{items}</ul>'


# ---------------------------------------------------------------------------------------
# Charts: shared pieces

def _attrs(**values: object) -> str:
    """`` data-a="..."`` for each value (escaped); ``rank_id`` is written ``data-rank-id``."""
    return "".join(f' data-{k.replace("_", "-")}="{escape(str(v))}"' for k, v in values.items())


def _chart(kind: str, index: int, title: str, body: str, frame: Frame, items: Sequence[LegendItem],
           **data: object) -> str:
    legend_svg, legend_height = legend(items, frame.below, frame)
    return svg(kind, title, body + legend_svg, frame.below + legend_height + 6, width=frame.width,
               attrs=_attrs(runset=index, **data))


def _run_colours(rs: RunSetReport) -> dict[str, str]:
    return {r.name: series_colour(i) for i, r in enumerate(rs.runs)}


def _words_figure(heading: str, text: str) -> _Figure:
    return _Figure(heading, "", escape(text))


def _paint(colour: str, *, hollow: bool = False, faint: bool = False) -> str:
    """The fill and stroke of a bar, and of the legend swatch that names it: solid, faint (see
    through to what it holds) or hollow (dashed: a projection, not a measure)."""
    if hollow:
        return f'fill="#fff" stroke="{colour}" stroke-width="1.5" stroke-dasharray="3 2"'
    return f'fill="{colour}"' + (f' fill-opacity="{_FAINT_OPACITY}"' if faint else "")


def _swatch(colour: str, *, hollow: bool = False, faint: bool = False) -> str:
    """A legend's 16 x 10 swatch, painted as its bars."""
    return f'<rect x="0" y="0" width="16" height="10" rx="2" {_paint(colour, hollow=hollow, faint=faint)}/>'


@dataclass(frozen=True)
class _Bar:
    value: float
    colour: str
    cls: str
    attrs: str  # escaped data-* attributes
    tip: str  # plain text
    hollow: bool = False


@dataclass(frozen=True)
class _Row:
    label: str
    bars: tuple[_Bar, ...]
    attrs: str = ""
    stacked: bool = False  # one lane, the bars end to end (a breakdown); else a lane per bar


MIN_WIDTH_PX = 0.1  # px() writes coordinates to a tenth of a pixel


def _bar_chart(kind: str, index: int, title: str, rows: Sequence[_Row], x_title: str | Callable[[Ticks], str],
               show: Callable[[float], str], items: Sequence[LegendItem], *,
               tick_show: Callable[[float, Ticks], str] | None = None, **data: object) -> str:
    """Horizontal bars under each row's label: stacked (a breakdown) or side by side (a comparison).

    ``show`` writes a value (a tick's label, a stacked row's total); ``tick_show``, where given,
    writes the ticks instead, and ``x_title`` may be made from the ticks (an axis whose unit
    follows its range)."""
    lane = 9.0
    heights = [18 + (lane + 2 if row.stacked else (lane + 1) * len(row.bars)) + 6 for row in rows]
    frame = Frame(height=max(sum(heights), 60), left=18)
    totals = [sum(b.value for b in row.bars) if row.stacked else max((b.value for b in row.bars), default=0)
              for row in rows]
    ticks = nice_ticks(0.0, max(totals, default=1.0) or 1.0)
    x = Scale(ticks.values[0], ticks.values[-1], frame.x0, frame.x1)
    labels = [tick_show(v, ticks) if tick_show else show(v) for v in ticks.values]
    title_text = x_title(ticks) if callable(x_title) else x_title
    body = [x_axis(x, Ticks(ticks.values, labels), frame, title_text)]
    y = frame.y0
    for row, height in zip(rows, heights):
        parts = [f'<text class="row-label" x="{px(frame.x0)}" y="{px(y + 12)}">{escape(row.label)}</text>']
        at, lane_y = x.lo, y + 18
        for bar in row.bars:
            start = at if row.stacked else x.lo
            # a bar of any time is drawn at least as wide as the coordinates' precision (0.1 px): a phase
            # of a few microseconds beside a step of milliseconds would otherwise round to nothing
            width = max(x(start + bar.value) - x(start), MIN_WIDTH_PX if bar.value > 0 else 0.0)
            parts.append(f'<rect class="bar {bar.cls}"{bar.attrs} x="{px(x(start))}" y="{px(lane_y)}" '
                         f'width="{px(width)}" height="{px(lane)}" {_paint(bar.colour, hollow=bar.hollow)}>'
                         f"{tip(bar.tip)}</rect>")
            if row.stacked:
                at += bar.value
            else:
                lane_y += lane + 1
        if row.stacked:
            parts.append(f'<text x="{px(x(at) + 4)}" y="{px(lane_y + lane / 2)}" dy="0.32em">{escape(show(at))}</text>')
        body.append(f'<g class="row"{row.attrs}>{"".join(parts)}</g>')
        y += height
    if not rows:
        body.append(empty_chart(frame, "nothing to draw"))
    return _chart(kind, index, title, "".join(body), frame, items, **data)


def _seconds(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f} s"
    if value >= 1:
        return f"{value:.2f} s"
    return f"{value * 1000:.3g} ms"


_TIME_UNITS = ((1.0, "s"), (1e-3, "ms"), (1e-6, "\u00b5s"))


def _time_unit(ticks: Ticks) -> tuple[float, str]:
    """The unit an axis of seconds is read in: the largest in which its last tick is at least 1."""
    top = ticks.values[-1]
    return next(((size, unit) for size, unit in _TIME_UNITS if top >= size), _TIME_UNITS[-1])


def _time_tick(value: float, ticks: Ticks) -> str:
    """A tick of an axis of seconds, as a number in the axis's unit (:func:`_time_unit`), to the
    decimals its step needs."""
    size, _ = _time_unit(ticks)
    step = (ticks.values[1] - ticks.values[0]) / size if len(ticks.values) > 1 else 1.0
    decimals = next((d for d in range(10) if abs(round(step, d) - step) < 1e-9 * step), 9)
    return f"{value / size:,.{decimals}f}"


def _samples(value: float) -> str:
    for scale, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{unit}"
    return f"{value:.0f}"


# ---------------------------------------------------------------------------------------
# Quality

def _auc_chart(index: int, rs: RunSetReport, *, by_samples: bool) -> _Figure:
    what = "training samples" if by_samples else "seconds since run_start"
    curves = [(r, [(at, e.auc) for e in r.evals if (at := e.samples if by_samples else e.seconds) is not None])
              for r in rs.runs]
    curves = [(r, pts) for r, pts in curves if pts]
    frame = Frame(height=220)
    xs = [p[0] for _, pts in curves for p in pts]
    aucs = [p[1] for _, pts in curves for p in pts] + ([rs.target_auc] if rs.target_auc is not None else [])
    x_ticks = nice_ticks(0.0, max(xs, default=1.0) or 1.0)
    x = Scale(x_ticks.values[0], x_ticks.values[-1], frame.x0, frame.x1)
    if by_samples:
        x_ticks = Ticks(x_ticks.values, [_samples(v) for v in x_ticks.values])
    y_ticks = nice_ticks(min(aucs, default=0.5), max(aucs, default=1.0))
    y = Scale(y_ticks.values[0], y_ticks.values[-1], frame.y1, frame.y0)
    body = [x_axis(x, x_ticks, frame, what), y_axis(y, y_ticks, frame, "AUC")]
    colours = _run_colours(rs)
    for run, pts in curves:
        d = "M" + "L".join(f"{px(x(a))} {px(y(b))}" for a, b in pts)
        faded = "" if run.converged(rs.target_auc) else ' stroke-opacity="0.4"'
        body.append(f'<path class="curve"{_attrs(run=run.name, points=len(pts))} d="{d}" stroke="{colours[run.name]}"'
                    f'{faded}>{tip(f"{run.name}: {len(pts)} evaluations, last AUC {pts[-1][1]:.5f}")}</path>')
        body.extend(f'<circle class="eval-point"{_attrs(run=run.name)} cx="{px(x(a))}" cy="{px(y(b))}" r="2.2" '
                    f'fill="{colours[run.name]}">'
                    f'{tip(f"{run.name}: AUC {b:.5f} at {_samples(a) if by_samples else _seconds(a)}")}</circle>'
                    for a, b in pts)
    items = [LegendItem(r.name, swatch_line(colours[r.name])) for r, _ in curves]
    if rs.target_auc is not None:
        ty = px(y(rs.target_auc))
        body.append(f'<line class="target target-line"{_attrs(target=rs.target_auc)} x1="{px(frame.x0)}" y1="{ty}" '
                    f'x2="{px(frame.x1)}" y2="{ty}">{tip(f"target AUC {rs.target_auc:.6g}")}</line>')
        items.append(LegendItem(f"target {rs.target_auc:.6g}", '<line x1="0" y1="5" x2="16" y2="5" class="target"/>'))
    if not curves:
        body.append(empty_chart(frame, "no evaluations with " + ("samples" if by_samples else "times")))
    kind = "auc-samples" if by_samples else "auc-time"
    caption = f"Every evaluation of every run against {what}"
    caption += (f"; dashed: the target AUC {rs.target_auc:.6g}." if rs.target_auc is not None
                else "; no target AUC is known for this benchmark.")
    if by_samples:
        caption += " Samples: the evaluation's samples_count, else its epoch_num times train_samples."
    return _Figure(f"AUC against {what}", _chart(kind, index, f"AUC against {what}", "".join(body), frame, items),
                   escape(caption))


# ---------------------------------------------------------------------------------------
# Time

def _time_figures(index: int, rs: RunSetReport) -> list[_Figure]:
    run = rs.first_with("step_phases")
    figures = []
    if run is None:
        figures.append(_words_figure("Step time", _no_step_timing(rs)))
    else:
        figures += [_step_time_chart(index, run), _phase_chart(index, run)]
    return figures + [_throughput_chart(index, rs), _blocks_chart(index, rs)]


def _no_step_timing(rs: RunSetReport) -> str:
    text = (f"The logs lack per-step timing: no run has a {keys.HARNESS_STEP_PHASES} record, so neither the step "
            "time over the run, its P50/P90/P99 per rank nor its breakdown by phase can be drawn.")
    found = next(((r.name, rate, batch) for r in rs.runs
                  if (rate := r.samples_per_s) and (batch := r.global_batch_size)), None)
    if found is not None:
        name, rate, batch = found
        text += (f" From what the log has: {rate:,.0f} samples/s at a global batch of "
                 f"{batch:,} is a step of {_seconds(batch / rate)} on average ({name}).")
    return text


def _step_time_chart(index: int, run: RunReport) -> _Figure:
    phases = run.step_phases
    assert phases is not None  # drawn only for a run that has the record
    frame = Frame(height=200)
    steps = [s for r in phases.ranks for s in r.series_step]
    times = [t for r in phases.ranks for t in r.series_step_s]
    x_ticks = nice_ticks(0.0, max(steps, default=1) or 1.0, integer=True)
    x = Scale(x_ticks.values[0], x_ticks.values[-1], frame.x0, frame.x1)
    y_ticks = nice_ticks(0.0, max(times, default=0.01) * 1000 or 1.0)
    y = Scale(y_ticks.values[0], y_ticks.values[-1], frame.y1, frame.y0)
    body = [x_axis(x, x_ticks, frame, "training step"), y_axis(y, y_ticks, frame, "step time (ms)")]
    items = []
    for r in phases.ranks:
        colour = series_colour(r.rank)
        if r.series_step:
            d = "M" + "L".join(f"{px(x(s))} {px(y(t * 1000))}" for s, t in zip(r.series_step, r.series_step_s))
            note = (f"rank {r.rank}: P50 {_seconds(r.step_s.p50)}, P90 {_seconds(r.step_s.p90)}, "
                    f"P99 {_seconds(r.step_s.p99)}")
            body.append(f'<path class="curve step-series"{_attrs(rank=r.rank, points=len(r.series_step))} d="{d}" '
                        f'stroke="{colour}">{tip(note)}</path>')
        items.append(LegendItem(f"rank {r.rank}", swatch_line(colour)))
    if not steps:
        body.append(empty_chart(frame, "the record has no series"))
    rows = "".join(f'<tr data-rank="{r.rank}"><td>rank {r.rank}</td>'
                   + "".join(f'<td class="num" data-pct="{p}">{getattr(r.step_s, p) * 1000:.3f}</td>'
                             for p in ("mean", "p50", "p90", "p99")) + "</tr>" for r in phases.ranks)
    table = ('<table class="percentiles"><thead><tr><th>rank</th><th class="num">mean ms</th><th class="num">P50</th>'
             f'<th class="num">P90</th><th class="num">P99</th></tr></thead><tbody>{rows}</tbody></table>')
    caption = (f"{run.name}: each rank's step time over the run ({phases.steps:,} steps, the first "
               f"{phases.warmup_steps} warm-up steps left out of the percentiles), down-sampled.")
    return _Figure("Step time per rank", _chart("step-time", index, "Step time per rank", "".join(body), frame, items,
                                                run=run.name) + table, escape(caption))


def _phase_chart(index: int, run: RunReport) -> _Figure:
    phases = run.step_phases
    assert phases is not None
    colours = {name: series_colour(i) for i, name in enumerate(phases.phases)}
    straggler = phases.straggler
    rows = []
    for r in phases.ranks:
        bars = tuple(_Bar(r.phase_s[name].mean, colours[name], "phase",
                          _attrs(phase=name, seconds=r.phase_s[name].mean),
                          f"rank {r.rank}, {name}: mean {_seconds(r.phase_s[name].mean)}") for name in phases.phases)
        label = f"rank {r.rank}" + ("  (straggler)" if r.rank == straggler else "")
        rows.append(_Row(label, bars, _attrs(rank=r.rank, step_mean=r.step_s.mean, straggler=r.rank == straggler),
                         stacked=True))
    items = [LegendItem(name, _swatch(colours[name])) for name in phases.phases]
    svg_text = _bar_chart("phases", index, "Step time by phase, per rank", rows,
                          lambda ticks: f"mean time per step ({_time_unit(ticks)[1]})", _seconds, items,
                          tick_show=_time_tick, run=run.name).replace('<g class="row"', '<g class="row phase-bar"')
    sums = [abs(r.phase_mean_total_s - r.step_s.mean) / r.step_s.mean for r in phases.ranks if r.step_s.mean > 0]
    caption = (f"{run.name}: one bar per rank, the mean time of each phase stacked in the record's order. "
               + (f"Rank {straggler} is the straggler (its mean step is over 10% above the median rank's). "
                  if straggler is not None else "")
               + (f"The phases add up to the measured mean step within {max(sums):.1%}." if sums else ""))
    if phases.eval_total_s is not None:
        caption += f" Evaluations: {phases.eval_count} taking {_seconds(phases.eval_total_s)} in all."
    return _Figure("Step breakdown by phase", svg_text, escape(caption))


def _throughput_chart(index: int, rs: RunSetReport) -> _Figure:
    colours = _run_colours(rs)
    rows = [_Row(r.name, (_Bar(r.samples_per_s, colours[r.name], "throughput", _attrs(run=r.name,
                                                                                    samples_per_s=r.samples_per_s),
                               f"{r.name}: {r.samples_per_s:,.0f} samples/s"),))
            for r in rs.runs if r.samples_per_s]
    svg_text = _bar_chart("throughput", index, "Training throughput per run", rows, "samples per second", _samples, [])
    logged = all(r.logged_samples_per_s is not None for r in rs.runs if r.samples_per_s)
    caption = ("Training samples per second of each run, as its log's tracked_stats states it." if logged else
               "Samples per second of each run: tracked_stats' throughput where logged, else the last evaluation's "
               "samples over its seconds since run_start (evaluations included).")
    return _Figure("Throughput", svg_text, escape(caption))


def _blocks_chart(index: int, rs: RunSetReport) -> _Figure:
    runs = [r for r in rs.runs if r.blocks]
    frame = Frame(height=max(26.0 * len(runs), 40), left=70)
    end = max((b.stop_s for r in runs for b in r.blocks), default=1.0)
    ticks = nice_ticks(0.0, end or 1.0)
    x = Scale(ticks.values[0], ticks.values[-1], frame.x0, frame.x1)
    body = [x_axis(x, ticks, frame, "seconds since the log's first record")]
    colours = {"init": "#8c959f", "run": "#0067a5", "eval": "#f38400"}
    for i, r in enumerate(runs):
        y = frame.y0 + 26.0 * i + 4
        body.append(f'<text class="row-label" x="{px(frame.x0 - 6)}" y="{px(y + 9)}" text-anchor="end">'
                    f"{escape(r.name)}</text>")
        for b in r.blocks:
            top, height = (y + 4, 10) if b.kind == "eval" else (y, 18)
            body.append(f'<rect class="block"{_attrs(run=r.name, block=b.kind, seconds=b.stop_s - b.start_s)} '
                        f'x="{px(x(b.start_s))}" y="{px(top)}" width="{px(max(x(b.stop_s) - x(b.start_s), 1.0))}" '
                        f'height="{height}" {_paint(colours[b.kind], faint=b.kind == "run")}>'
                        f"{tip(f'{r.name}, {b.kind}: {_seconds(b.stop_s - b.start_s)}')}</rect>")
    if not runs:
        body.append(empty_chart(frame, "no init, run or eval blocks logged"))
    items = [LegendItem(k, _swatch(c, faint=k == "run")) for k, c in colours.items()]
    totals = []
    for kind in ("init", "eval"):
        seconds = [sum(b.stop_s - b.start_s for b in r.blocks if b.kind == kind) for r in runs]
        if any(seconds):
            totals.append(f"{kind} {_seconds(sum(seconds) / len(seconds))} per run on average")
    caption = ("The blocks each log brackets: init_start to init_stop, run_start to run_stop, and every "
               "eval_start to eval_stop. " + ("; ".join(totals) + "." if totals else ""))
    return _Figure("Init, run and evaluation blocks",
                   _chart("blocks", index, "Init, run and evaluation blocks", "".join(body), frame, items),
                   escape(caption))


# ---------------------------------------------------------------------------------------
# Bytes and memory

def _comm_chart(index: int, rs: RunSetReport) -> _Figure:
    run = rs.first_with("collectives")
    if run is None:
        one_rank = all(r.harness_log and r.world_size == 1 for r in rs.runs)
        return _words_figure("Bytes per collective", f"No run of this set logged {keys.HARNESS_COMM_STATS}: "
                             + ("one rank has no collectives." if one_rank else "there are no measured bytes to draw."))
    rows = []
    for c in run.collectives:
        for link in sorted(set(c.measured) | set(c.projected or {})):
            measured, projected = c.measured.get(link), (c.projected or {}).get(link)
            if not measured and not projected:
                continue
            bars = []
            if measured is not None:
                bars.append(_Bar(measured, "#0067a5", "measured", _attrs(kind=c.kind, link=link, bytes=measured),
                                 f"{c.kind}, {link}: measured {format_bytes(measured)} per step"))
            if projected is not None:
                bars.append(_Bar(projected, "#f38400", "projected", _attrs(kind=c.kind, link=link, bytes=projected),
                                 f"{c.kind}, {link}: projected {format_bytes(projected)} per step", hollow=True))
            rows.append(_Row(f"{c.kind} \u00b7 {link.replace('_', '-')}", tuple(bars), _attrs(kind=c.kind, link=link)))
    if not rows:
        return _words_figure("Bytes per collective", f"{run.name}: no collective moved a byte over any link "
                             f"({run.world_size} rank{'s' if run.world_size > 1 else ''}), as measured and as planned.")
    items = [LegendItem("measured", _swatch("#0067a5")),
             LegendItem("planner's projection", _swatch("#f38400", hollow=True))]
    svg_text = _bar_chart("comm", index, "Bytes per step per collective and link class", rows, "bytes per step",
                          format_bytes, items, run=run.name)
    caption = (f"{run.name}: the bytes every rank sent per training step, summed, for each collective and link "
               "class, measured beside the planner's projection (dashed).")
    return _Figure("Bytes per collective and link class", svg_text, escape(caption))


def _memory_figures(index: int, rs: RunSetReport) -> list[_Figure]:
    figures = []
    run = rs.first_with("memory")
    if run is None:
        figures.append(_words_figure("Memory per tier", f"No run of this set logged {keys.HARNESS_MEMORY}."))
    else:
        for tier in TIERS:
            if not any(getattr(m, measure).get(tier) for m in run.memory for measure, _ in _MEASURES):
                continue
            rows = [_Row(f"rank {m.rank}", tuple(
                _Bar(float(getattr(m, measure).get(tier, 0)), colour, measure,
                     _attrs(rank=m.rank, measure=measure, bytes=getattr(m, measure).get(tier, 0)),
                     f"rank {m.rank}, {tier.upper()} {measure}: {format_bytes(getattr(m, measure).get(tier, 0))}")
                for measure, colour in _MEASURES if tier in getattr(m, measure)), _attrs(rank=m.rank))
                for m in run.memory]
            items = [LegendItem(measure, _swatch(colour)) for measure, colour in _MEASURES]
            capacity = {held for m in run.memory if (held := m.capacity.get(tier))}
            caption = (f"{run.name}: each rank's {tier.upper()} bytes: what the plan gave it, what it held at the end "
                       "and the peak." + (f" Capacity per rank: {format_bytes(max(capacity))}." if capacity else ""))
            figures.append(_Figure(f"Memory per rank: {tier.upper()}", _bar_chart(
                "memory", index, f"{tier.upper()} bytes per rank", rows, "bytes", format_bytes, items, tier=tier,
                run=run.name), escape(caption)))
    figures.append(_cache_figure(index, rs))
    return figures


def _cache_figure(index: int, rs: RunSetReport) -> _Figure:
    run = rs.first_with("cache")
    if run is None or run.cache is None:
        return _words_figure("Cache hit rates", f"No run of this set logged {keys.HARNESS_EMBEDDING_CACHE}: "
                             "its tables were in memory, behind no cache, or the log is not the harness's.")
    c = run.cache
    rows = [_Row(label, (_Bar(value, colour, "hit-rate", _attrs(measure=measure, rate=value),
                              f"{label}: {value:.1%}"),))
            for label, measure, value, colour in (("hit rate (lookups)", "hit_rate", c.hit_rate, "#008856"),
                                                  ("hit rate (unique rows)", "unique_hit_rate", c.unique_hit_rate,
                                                   "#8db600"))
            if value is not None]
    svg_text = _bar_chart("cache", index, "Cache hit rates", rows, "hit rate", lambda v: f"{v:.0%}", [],
                          run=run.name, tier=c.tier)
    moved = [f"{what} {format_bytes(v)} per step" for what, v in (("read", c.read_bytes_per_step),
                                                                   ("written", c.written_bytes_per_step)) if v]
    caption = (f"{run.name}: the {c.policy or ''} cache over the {c.tier.upper()} tier, over the whole run"
               + (f" ({c.lookups:,} lookups)" if c.lookups else "") + (f"; {c.tier.upper()} " + ", ".join(moved)
                                                                      if moved else "")
               + ". The log keeps the rate of the whole run, not its course.")
    return _Figure("Cache hit rates", svg_text, escape(caption))


_CSS = BASE_CSS + """
.figures { display: grid; grid-template-columns: repeat(auto-fill, minmax(380px, 1fr)); gap: 16px; margin-top: 22px;
  align-items: start; }
.figures > .column { display: contents; }
@media (min-width: 1230px) {
  .figures { grid-template-columns: repeat(3, minmax(0, 1fr)); }
  .figures > .column { display: flex; flex-direction: column; gap: 16px; min-width: 0; }
}
figure.chart-box h4 .block-name { display: block; margin-bottom: 2px; color: var(--muted); font-size: 10.5px;
  font-weight: 600; letter-spacing: 0.06em; text-transform: uppercase; }
p.not-logs { color: var(--bad); overflow-wrap: anywhere; }
nav.contents ul { list-style: none; display: flex; flex-wrap: wrap; gap: 6px 24px; padding: 0; margin: 18px 0 0; }
nav.contents a { color: var(--accent); text-decoration: none; font-weight: 600; }
section.runset { margin-top: 30px; }
section.runset h2 { font-size: 19px; margin: 0; padding-bottom: 6px; border-bottom: 1px solid var(--line);
  overflow-wrap: anywhere; }
section.runset h3 { font-size: 15px; margin: 22px 0 4px; }
p.facts { margin: 8px 0 12px; color: var(--muted); font-size: 13px; overflow-wrap: anywhere; }
p.facts strong { color: var(--fg); font-weight: 600; }
dl.setup { display: grid; grid-template-columns: repeat(auto-fill, minmax(300px, 1fr)); gap: 4px 24px; margin: 6px 0;
  font-size: 13px; }
dl.setup div { display: flex; gap: 8px; min-width: 0; }
dl.setup dt { color: var(--muted); flex: 0 0 auto; }
dl.setup dd { margin: 0; overflow-wrap: anywhere; min-width: 0; }
.table-wrap { overflow-x: auto; border: 1px solid var(--line); border-radius: 6px; max-width: 100%; }
table.runs, table.percentiles { border-collapse: collapse; width: 100%; font-size: 12.5px; }
table.runs th, table.runs td, table.percentiles th, table.percentiles td { padding: 5px 8px; text-align: left;
  border-bottom: 1px solid var(--soft); }
table.runs thead th, table.percentiles thead th { background: var(--panel); font-size: 11.5px; color: #424a53; }
table.percentiles { margin-top: 8px; }
.num { text-align: right; font-variant-numeric: tabular-nums; }
td.num, th.num { text-align: right; }
ul.missing, ul.problems { margin: 6px 0; padding-left: 20px; font-size: 13px; }
ul.problems { color: var(--bad); }
ul.missing li { margin: 2px 0; overflow-wrap: anywhere; }
figcaption { overflow-wrap: anywhere; }
svg.chart .step-series { stroke-width: 1.3; }
"""
