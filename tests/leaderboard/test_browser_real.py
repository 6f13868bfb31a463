"""The leaderboard over the shared real MLPerf packages plus three entries whose system names
collide, in a real headless Chromium at 1400 px: every label and legend entry unique, one
colour per series and no colour for two, nothing wider than the viewport, and time axes
logarithmic exactly where their values span more than 10x.

The full-page screenshot is kept as ``test-artifacts/leaderboard-real.png``; ``docs/leaderboard.png``
is a copy of it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.leaderboard.charts import LOG_SPAN
from harness.leaderboard.collect import build_leaderboard
from harness.leaderboard.html import render_html
from tests.leaderboard.support.colliding_tree import COLLIDING_SYSTEM, colliding_tree
from tests.leaderboard.test_browser import LAUNCH_ARGS, browser  # noqa: F401 - the fixture

ARTIFACT = Path(__file__).resolve().parents[2] / "test-artifacts" / "leaderboard-real.png"
VIEWPORT = 1400


@pytest.fixture(scope="module")
def board(shared_logs: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return build_leaderboard([colliding_tree(shared_logs, tmp_path_factory.mktemp("real") / "root")])


@pytest.fixture(scope="module")
def page(browser: Any, board: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:  # noqa: F811
    index = tmp_path_factory.mktemp("site") / "index.html"
    index.write_text(render_html(board), encoding="utf-8")
    page = browser.new_page(viewport={"width": VIEWPORT, "height": 900})
    page.board = board
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(index.as_uri())
    page.wait_for_load_state("load")
    ARTIFACT.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACT), full_page=True)
    yield page
    assert errors == []
    page.close()


def test_the_board_has_the_collisions(board: dict[str, Any]) -> None:
    systems = [e["system"] for b in board["benchmarks"] for e in b["entries"]]
    assert systems.count(COLLIDING_SYSTEM) == 3 and len(systems) == 10


def test_every_chart_label_and_legend_entry_is_unique(page: Any) -> None:
    charts = page.eval_on_selector_all("svg.chart", """svgs => svgs.map(s => ({
        kind: s.getAttribute('class'), bench: s.getAttribute('data-benchmark'),
        rows: Array.from(s.querySelectorAll('text.row-label')).map(t => Array.from(t.childNodes)
            .filter(n => n.nodeType === Node.TEXT_NODE).map(n => n.textContent).join('')),
        legend: Array.from(s.querySelectorAll('g.legend-item > text')).map(t => t.textContent)}))""")
    assert len(charts) == 6  # 2 benchmarks x 3 charts (nothing projected: no projection chart)
    for chart in charts:
        for kind in ("rows", "legend"):
            names = chart[kind]
            assert len(names) == len(set(names)), (chart["kind"], chart["bench"], kind, names)
    rows = [r for c in charts for r in c["rows"]]
    assert sum(COLLIDING_SYSTEM in r for r in rows) == 3
    legends = {c["bench"]: c["legend"] for c in charts if "chart-curves" in c["kind"]}
    assert sum(COLLIDING_SYSTEM in name for name in legends["dlrm_dcnv2"]) == 3


def test_no_two_series_share_a_colour(page: Any) -> None:
    # every coloured mark of a series: bars (fill), curves (stroke), points (fill or stroke), by the
    # entry label in its tooltip ("submitter / label ...")
    marks = page.eval_on_selector_all("svg.chart rect.bar, svg.chart path.curve, svg.chart circle.point",
                                      """els => els.map(e => [e.querySelector('title').textContent,
                                          e.getAttribute('stroke') && e.tagName === 'path' ? e.getAttribute('stroke')
                                          : (e.getAttribute('fill') === '#fff' ? e.getAttribute('stroke')
                                          : e.getAttribute('fill'))])""")
    labels = {e["label"]: f"{e['submitter']} / {e['label']}" for b in page_board(page) for e in b["entries"]}
    colour_of: dict[str, set[str]] = defaultdict(set)
    for tip, colour in marks:
        owner = max((lbl for lbl, who in labels.items() if tip.startswith(who)), key=len)
        colour_of[owner].add(colour)
    assert len(colour_of) == 10
    assert all(len(c) == 1 for c in colour_of.values()), colour_of  # one colour per series
    colours = [next(iter(c)) for c in colour_of.values()]
    assert len(set(colours)) == len(colours), colour_of  # no colour for two series


def page_board(page: Any) -> list[dict[str, Any]]:
    return page.board["benchmarks"]


def test_nothing_overflows_1400_px(page: Any) -> None:
    assert page.evaluate("document.documentElement.scrollWidth") <= VIEWPORT
    for scroll, client in page.eval_on_selector_all(".table-wrap", "ws => ws.map(w => [w.scrollWidth, w.clientWidth])"):
        assert scroll <= client, (scroll, client)
    for right in page.eval_on_selector_all("svg.chart, table.leaderboard",
                                           "els => els.map(e => e.getBoundingClientRect().right)"):
        assert right <= VIEWPORT


def _span(values: list[float]) -> float:
    positive = [v for v in values if v is not None and v > 0]
    return max(positive) / min(positive) if positive else 1.0


def test_time_axes_are_logarithmic_where_the_range_spans_more_than_10x(page: Any, board: dict[str, Any]) -> None:
    scales = {(s["bench"], s["kind"]): s for s in page.eval_on_selector_all(
        "svg.chart", "svgs => svgs.map(s => ({bench: s.getAttribute('data-benchmark'), "
                     "kind: s.getAttribute('class').split(' ')[1], x: s.getAttribute('data-x-scale'), "
                     "y: s.getAttribute('data-y-scale')}))")}
    logs = 0
    for bench in board["benchmarks"]:
        entries, name = bench["entries"], bench["benchmark"]
        minutes = [v for e in entries for v in (e["score_minutes"], *e["run_minutes"], *(e["score_interval_95"] or ()))]
        times = [p[0] for e in entries for c in e["curves"] for p in c["points"]]
        scores = [e["score_minutes"] for e in entries if e["accelerator_count"] > 0]
        for (kind, axis), values in {("chart-time", "x"): minutes, ("chart-curves", "x"): times,
                                     ("chart-scaling", "y"): scores}.items():
            expected = "log" if _span(values) > LOG_SPAN else "linear"
            assert scales[(name, kind)][axis] == expected, (name, kind, _span(values))
            logs += expected == "log"
        assert scales[(name, "chart-scaling")]["x"] == "log"  # accelerators: one axis for every benchmark
    assert logs >= 2  # the CPU systems (71.6 and 227 minutes) beside GPUs at 2-4 minutes
