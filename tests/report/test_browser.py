"""The report's index.html in a real headless Chromium at 1500 px: every chart drawn with its data
(one breakdown bar per rank, the projection beside each measured byte count, the target line), nothing
wider than the viewport, user text escaped, no script errors.

Needs Debian's chromium and Playwright for Python, as the leaderboard's browser tests do (their absence is
a failure with the install commands). The full-page screenshot is kept as ``test-artifacts/report.png``;
``docs/report.png`` is the page of an emulated 8-rank run (README, `harness report`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.report import write_report
from harness.report.collect import collect_report, read_run
from tests.leaderboard.test_browser import PageLog, browser  # noqa: F401 - the fixture
from tests.report.support.report_tree import PHASES, SCRIPT_FOLDER, SCRIPT_SYSTEM, Tree

ARTIFACT = Path(__file__).resolve().parents[2] / "test-artifacts" / "report.png"
VIEWPORT = 1500


@pytest.fixture(scope="module")
def loaded(browser: Any, tree: Tree,  # noqa: F811
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, PageLog]]:
    index = write_report(collect_report(tree.root), tmp_path_factory.mktemp("report"))
    page = browser.new_page(viewport={"width": VIEWPORT, "height": 900})
    log = PageLog()
    log.attach(page)
    page.goto(index.as_uri())
    page.wait_for_load_state("load")
    ARTIFACT.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACT), full_page=True)
    yield page, log
    page.close()


def runset(page: Any, system: str) -> str:
    index = page.eval_on_selector_all("section.runset", f"""ss => ss.findIndex(s => s.dataset.system === {system!r})""")
    assert index >= 0, system
    return f'[data-runset="{index}"]'


@pytest.mark.slow
def test_every_auc_chart_draws_each_run_and_the_target(loaded: tuple[Any, PageLog], tree: Tree) -> None:
    page, _ = loaded
    for system, runs, target in ((tree.sharded.parent.name, 1, "0.6"), (tree.cached.parent.name, 2, "0.6"),
                                 (SCRIPT_FOLDER, 1, "0.80275")):
        rs = runset(page, system)
        for kind in ("auc-samples", "auc-time"):
            chart = f"svg.chart-{kind}{rs}"
            assert page.locator(f"{chart} path.curve").count() == runs, (system, kind)
            assert page.locator(f"{chart} line.target-line").get_attribute("data-target") == target
            box = page.locator(chart).bounding_box()
            assert box and box["width"] > 300 and box["height"] > 150
    mlperf = runset(page, SCRIPT_FOLDER)
    assert page.locator(f'svg.chart-auc-time{mlperf} path.curve').get_attribute("data-points") == "15"


@pytest.mark.slow
def test_one_breakdown_bar_per_rank_with_every_phase_and_the_straggler(loaded: tuple[Any, PageLog],
                                                                      tree: Tree) -> None:
    page, _ = loaded
    rs = runset(page, tree.sharded.parent.name)
    record = read_run(tree.sharded / "result_0.txt").step_phases  # what the ranks measured
    bars = page.locator(f"svg.chart-phases{rs} g.phase-bar")
    assert bars.count() == 4
    for rank in range(4):
        bar = f'svg.chart-phases{rs} g.phase-bar[data-rank="{rank}"]'
        phases = page.eval_on_selector_all(f"{bar} rect.phase", "rs => rs.map(r => [r.dataset.phase, "
                                           "r.getBoundingClientRect().width])")
        drawn = [p for p, w in phases if w > 0]
        # every phase the rank spent time in, in the record's order (the one-process phases all do;
        # a phase of no time is drawn 0 wide)
        assert [p for p, _ in phases] == list(PHASES)
        assert drawn == [p for p in PHASES if record.ranks[rank].phase_s[p].mean > 0]
        assert page.locator(bar).get_attribute("data-straggler") == str(record.straggler == rank)
    widths = page.eval_on_selector_all(f"svg.chart-phases{rs} g.phase-bar", "gs => gs.map(g => "
                                       "Array.from(g.querySelectorAll('rect.phase')).reduce((s, r) => s + "
                                       "r.getBoundingClientRect().width, 0))")
    means = [r.phase_mean_total_s for r in record.ranks]  # the bars' lengths follow the ranks' phase sums
    for w, m in zip(widths, means, strict=True):
        assert w / widths[0] == pytest.approx(m / means[0], rel=0.02)
    assert page.locator(f"svg.chart-step-time{rs} path.step-series").count() == 4
    assert page.locator(f"{rs} table.percentiles tbody tr").count() == 4


@pytest.mark.slow
def test_projection_beside_every_measured_byte_count(loaded: tuple[Any, PageLog], tree: Tree) -> None:
    page, _ = loaded
    rs = runset(page, tree.sharded.parent.name)
    pairs = page.eval_on_selector_all(f"svg.chart-comm{rs} g.row", """gs => gs.map(g => ({
        kind: g.dataset.kind, link: g.dataset.link,
        measured: g.querySelector('rect.measured') && Number(g.querySelector('rect.measured').dataset.bytes),
        projected: g.querySelector('rect.projected') && Number(g.querySelector('rect.projected').dataset.bytes),
        widths: Array.from(g.querySelectorAll('rect.bar')).map(r => r.getBoundingClientRect().width)}))""")
    assert {p["link"] for p in pairs} == {"intra_node", "inter_node"} and len(pairs) >= 6
    for p in pairs:
        assert p["measured"] is not None and p["projected"] is not None, p
        assert all(w > 0 for w in p["widths"]), p


@pytest.mark.slow
def test_memory_cache_and_blocks_are_drawn(loaded: tuple[Any, PageLog], tree: Tree) -> None:
    page, _ = loaded
    rs = runset(page, tree.sharded.parent.name)
    for measure in ("planned", "held", "peak"):
        assert page.locator(f'svg.chart-memory[data-tier="hbm"]{rs} rect.{measure}').count() == 4
    cached = runset(page, tree.cached.parent.name)
    assert page.locator(f'svg.chart-cache{cached} rect[data-measure="hit_rate"]').count() == 1
    mlperf = runset(page, SCRIPT_FOLDER)
    assert page.locator(f'svg.chart-blocks{mlperf} rect[data-block="eval"]').count() == 15
    assert page.locator(f'svg.chart-blocks{mlperf} rect[data-block="init"]').count() == 1


@pytest.mark.slow
def test_what_a_log_lacks_is_said(loaded: tuple[Any, PageLog], tree: Tree) -> None:
    page, _ = loaded
    cached = runset(page, tree.cached.parent.name)
    assert page.locator(f"svg.chart-step-time{cached}").count() == 0
    assert "lack per-step timing" in page.locator(f"section.runset{cached}").inner_text()
    lacks = page.locator(f"section.runset{runset(page, SCRIPT_FOLDER)} ul.missing li").all_inner_texts()
    assert len(lacks) == 5 and any("harness_comm_stats" in t for t in lacks)


@pytest.mark.slow
def test_nothing_is_wider_than_1500_px(loaded: tuple[Any, PageLog]) -> None:
    page, _ = loaded
    assert page.evaluate("document.documentElement.scrollWidth") <= VIEWPORT
    wide = page.eval_on_selector_all("body *", f"""els => els.filter(e => e.getBoundingClientRect().right > {VIEWPORT})
        .map(e => e.tagName + '.' + e.className)""")
    assert wide == []


@pytest.mark.slow
def test_user_text_is_escaped_and_no_script_ran(loaded: tuple[Any, PageLog]) -> None:
    page, log = loaded
    assert page.locator("script").count() == 0
    headings = page.locator("section.runset h2").all_inner_texts()
    assert any(h.startswith(SCRIPT_FOLDER) for h in headings)
    assert SCRIPT_SYSTEM in page.locator("dl.setup").last.inner_text()
    assert log.console_errors == [] and log.page_errors == [] and log.dialogs == []


def _unit_seconds(unit: str) -> float:
    return {"s": 1.0, "seconds": 1.0, "ms": 1e-3, "milliseconds": 1e-3, "µs": 1e-6, "microseconds": 1e-6}[unit]


@pytest.mark.slow
def test_the_phase_axis_says_the_unit_of_its_ticks(loaded: tuple[Any, PageLog], tree: Tree) -> None:
    """The axis said "mean seconds per step" over ticks in ms. Its title's unit must be its ticks'
    (a tick may repeat it, not name another), and a bar read against the ticks in that unit must be
    the rank's measured time."""
    import re

    page, _ = loaded
    chart = f"svg.chart-phases{runset(page, tree.sharded.parent.name)}"
    title = page.locator(f"{chart} text.axis-title").first.text_content()
    units = re.findall(r"\b(µs|ms|s|seconds|milliseconds|microseconds)\b", title)
    assert len(units) == 1, title
    unit = _unit_seconds(units[0])
    ticks = page.eval_on_selector_all(f'{chart} > text[text-anchor="middle"]:not(.axis-title)',  # the x ticks
                                      "ts => ts.map(t => [t.textContent, "
                                      "t.getBoundingClientRect().x + t.getBoundingClientRect().width / 2])")
    assert len(ticks) >= 2, ticks
    for label, _ in ticks:
        _, tick_unit = re.fullmatch(r"([\d.,]+)\s*(\S*)", label).groups()
        assert tick_unit in ("", units[0]), (title, label)
    (first, x0), (last, x1) = ticks[0], ticks[-1]
    per_px = (float(last.split()[0].replace(",", "")) - float(first.split()[0].replace(",", ""))) * unit / (x1 - x0)
    record = read_run(tree.sharded / "result_0.txt").step_phases
    widths = page.eval_on_selector_all(f"{chart} g.phase-bar", "gs => gs.map(g => Array.from("
                                       "g.querySelectorAll('rect.phase')).reduce((s, r) => s + "
                                       "r.getBoundingClientRect().width, 0))")
    for w, r in zip(widths, record.ranks, strict=True):
        assert w * per_px == pytest.approx(r.phase_mean_total_s, rel=0.02), (title, ticks)


LEGEND_PAINT = ("e => { const s = getComputedStyle(e); "
                "return [s.fill, s.fillOpacity, s.stroke, s.strokeWidth, s.strokeDasharray]; }")


@pytest.mark.slow
def test_every_legend_swatch_is_painted_as_its_bars(loaded: tuple[Any, PageLog], tree: Tree) -> None:
    """The blocks chart's "run" bars are faint, its legend swatch was not: each legend item of the
    bar charts must be painted (fill, opacity, stroke, dashes) as the bars it names."""
    page, _ = loaded
    charts = {  # chart, its bars of one legend label
        f"svg.chart-blocks{runset(page, SCRIPT_FOLDER)}": lambda label: f'rect[data-block="{label}"]',
        f"svg.chart-blocks{runset(page, tree.sharded.parent.name)}": lambda label: f'rect[data-block="{label}"]',
        f"svg.chart-phases{runset(page, tree.sharded.parent.name)}": lambda label: f'rect[data-phase="{label}"]',
        f"svg.chart-comm{runset(page, tree.sharded.parent.name)}":
            lambda label: "rect.projected" if label == "planner's projection" else f"rect.{label}",
        f'svg.chart-memory[data-tier="hbm"]{runset(page, tree.sharded.parent.name)}': lambda label: f"rect.{label}",
    }
    checked = 0
    for chart, bars_of in charts.items():
        labels = page.locator(f"{chart} g.legend-item text").all_text_contents()
        assert labels, chart
        for i, label in enumerate(labels):
            swatch = page.locator(f"{chart} g.legend-item").nth(i).locator("rect, line").first.evaluate(LEGEND_PAINT)
            bars = page.locator(f"{chart} {bars_of(label)}")
            assert bars.count() > 0, (chart, label)
            for paint in {tuple(p) for p in bars.evaluate_all(f"bs => bs.map({LEGEND_PAINT})")}:
                assert list(paint) == swatch, (chart, label, paint, swatch)
            checked += 1
    assert checked >= 3 + 3 + 11 + 2 + 3


WIDE = 1400


@pytest.mark.slow
def test_the_figures_fill_the_page_width_at_1400_px(browser: Any, tree: Tree,  # noqa: F811
                                                  tmp_path_factory: pytest.TempPathFactory) -> None:
    """Half of the page was empty at 1,400 px (one or two 480 px figures a row, the rest blank): in
    every run set the figures reach both edges of the section and cover most of the area they span."""
    index = write_report(collect_report(tree.root), tmp_path_factory.mktemp("report-wide"))
    page = browser.new_page(viewport={"width": WIDE, "height": 900})
    try:
        page.goto(index.as_uri())
        page.wait_for_load_state("load")
        sections = page.eval_on_selector_all("section.runset", """ss => ss.map(s => {
            const r = s.getBoundingClientRect();
            const boxes = Array.from(s.querySelectorAll('figure.chart-box')).map(f => f.getBoundingClientRect())
            return {system: s.dataset.system, left: r.left, right: r.right,
                    boxes: boxes.map(b => [b.left, b.top, b.right, b.bottom])};
        })""")
        assert len(sections) == 3
        for s in sections:
            boxes = s["boxes"]
            left, right = min(b[0] for b in boxes), max(b[2] for b in boxes)
            top, bottom = min(b[1] for b in boxes), max(b[3] for b in boxes)
            width = s["right"] - s["left"]
            assert width > 0.9 * (WIDE - 80), s["system"]
            assert left - s["left"] < 2 and s["right"] - right < 2, (s["system"], left, right, s["left"], s["right"])
            covered = sum((b[2] - b[0]) * (b[3] - b[1]) for b in boxes) / (width * (bottom - top))
            assert covered >= 0.7, (s["system"], f"the figures cover {covered:.0%} of the area they span")
            assert page.evaluate("document.documentElement.scrollWidth") <= WIDE
    finally:
        page.close()
