"""Render a leaderboard (a dict valid against ``leaderboard.schema.json``) as one HTML page.

The page is self-contained: CSS, a small column-sorting script and the charts (SVG) are
inline, and nothing is fetched. Every user-supplied value passes through
:func:`html.escape`, in text and in attributes alike; the script carries no data at all and
sorts a table by reading its cells' ``data-sort`` attributes. The charts are drawn by
:mod:`harness.leaderboard.charts`.

Hooks for tests and tools: ``<table class="leaderboard ranked|unranked" data-benchmark=...>``,
rows ``<tr class="entry">``, cells ``<td data-key=... data-sort=...>``, and charts
``<svg class="chart chart-time|chart-curves|chart-scaling|chart-projection" data-benchmark=...>``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from harness.leaderboard.charts import charts
from harness.leaderboard.labels import auc_text as _auc
from harness.leaderboard.labels import hardware_text
from harness.leaderboard.labels import minutes_text as _minutes
from harness.leaderboard.svg import BASE_CSS, DASH, series_colour
from harness.leaderboard.svg import finite as _finite

Entry = dict[str, Any]

_DOT = " \u00b7 "
_BADGE_CLASS = {"pass": "ok", "fail": "bad"}


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

def _rate(value: float) -> str:
    if value >= 1e6:
        return f"{value / 1e6:.2f}\u202fM"
    if value >= 1e3:
        return f"{value / 1e3:.1f}\u202fk"
    return f"{value:.0f}"


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
        f"<strong>{required}</strong> {'run' if required == 1 else 'runs'} required" if required is not None
        else "required runs not set",
        _count_line(bench["entries"]),
    ]
    return "\n".join([
        f'<section class="benchmark" id="benchmark-{index}" data-benchmark="{name}">',
        f"<h2>{name}</h2>",
        f'<p class="facts">{_DOT.join(facts)}</p>',
        _ranked_block(bench["benchmark"], ranked, baseline),
        _unranked_block(bench["benchmark"], unranked, baseline),
        charts(bench, ranked + unranked, colours),
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
    """The accelerators over the host, or for a system without accelerators its CPUs."""
    badge = _badge("emulated", "emulated", "emulated: this hardware was not present") if e["emulated"] else ""
    main, host = hardware_text(e)
    sub = f'<span class="sub">{escape(host)}</span>' if host else ""
    return _Cell(f"{escape(main)}{sub}{badge}", e["accelerator_count"])


def _runs_cell(e: Entry, _: str | None) -> _Cell:
    """``converged/total``, and under it the requirement where the set falls short (``of 10 required``)."""
    required = e.get("required_runs")
    short = (f' <span class="sub">of {required} required</span>'
             if required is not None and e["runs"] < required else "")
    return _Cell(f'<span title="converged / total runs">{e["converged_runs"]}/{e["runs"]}</span>{short}',
                 e["converged_runs"])


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
    _Column("hardware", "Hardware", "accelerators (count x model) over the host, or a CPU system's cores and "
            "processors; sorts by accelerator count", True,
            _hardware_cell, wrap=True),
    _Column("profile", "Profile", "hardware profile", False, lambda e, _: _text_cell(e["profile"]), wrap=True),
    _Column("division", "Division", "closed or open", False, lambda e, _: _text_cell(e["division"])),
    _Column("availability", "Avail\u00adability", "available, preview or research", False,
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
    _Column("throughput", "Through\u00adput", "training samples per second, where logged", True,
            lambda e, _: _number_cell(e["throughput_samples_per_s"], lambda v: f"{_rate(v)}/s")),
    _Column("accelerator_minutes", "Accel-min", "accelerator-minutes: score x accelerator count", True,
            lambda e, _: _number_cell(e["accelerator_minutes"], _minutes)),
    _Column("speedup", "Speedup", "speedup against the baseline system", True,
            lambda e, _: _number_cell(e["speedup_vs_baseline"], lambda v: f"{v:.2f}\u00d7")),
)


# ---------------------------------------------------------------------------------------
# Colours: one per system across the page, the same in every chart

def _system_colours(benchmarks: Iterable[dict[str, Any]]) -> dict[str, str]:
    """One colour per label across the page (a system keeps its colour where it keeps its label), in order
    of first appearance."""
    colours: dict[str, str] = {}
    for bench in benchmarks:
        ranked, unranked = _split(bench["entries"])
        for entry in ranked + unranked:
            colours.setdefault(entry["label"], series_colour(len(colours)))
    return colours


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
table.leaderboard { border-collapse: collapse; width: 100%; font-size: 12px; }
table.leaderboard th, table.leaderboard td { padding: 6px 5px; text-align: left; vertical-align: top;
  border-bottom: 1px solid var(--soft); white-space: nowrap; }
table.leaderboard tbody tr:last-child td { border-bottom: 0; }
table.leaderboard td.wrap { white-space: normal; overflow-wrap: break-word; min-width: 64px; }
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
ul.reasons { margin: 0; padding-left: 14px; white-space: normal; min-width: 140px; max-width: 240px; color: #6e4b00; }
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
