"""index.html in a real headless Chromium: tables, charts, sorting, escaping, no script errors.

Needs Debian's chromium and Playwright for Python; CI installs both, so their absence is a
failure with the install commands, not a skip:

    apt-get update && apt-get install -y chromium
    pip install playwright        # not `playwright install`: we drive /usr/bin/chromium

The full-page screenshot is kept as ``test-artifacts/leaderboard.png`` at the repository root.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.leaderboard.html import render_html
from tests.leaderboard.support.board_fixture import SCRIPT_SUBMITTER, TRICKY_SYSTEM, sample_board

CHROMIUM = Path("/usr/bin/chromium")
LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
               "--disable-sync", "--no-first-run"]
INSTALL = "install them with: apt-get update && apt-get install -y chromium && pip install playwright"
ARTIFACT = Path(__file__).resolve().parents[2] / "test-artifacts" / "leaderboard.png"


class PageLog:
    """Everything the page reported that a test must see empty: console errors, page errors, dialogs."""

    def __init__(self) -> None:
        self.console_errors: list[str] = []
        self.page_errors: list[str] = []
        self.dialogs: list[str] = []

    def attach(self, page: Any) -> None:
        page.on("console", lambda msg: self.console_errors.append(msg.text) if msg.type == "error" else None)
        page.on("pageerror", lambda exc: self.page_errors.append(str(exc)))
        page.on("dialog", self._dialog)

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(f"{dialog.type}: {dialog.message}")
        dialog.dismiss()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} is missing; {INSTALL}", pytrace=False)
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail(f"playwright (Python) is missing; {INSTALL}", pytrace=False)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def loaded(browser: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, PageLog]]:
    """The sample board's index.html, opened from disk; the screenshot is taken on first load."""
    index = tmp_path_factory.mktemp("site") / "index.html"
    index.write_text(render_html(sample_board()), encoding="utf-8")
    page = browser.new_page(viewport={"width": 1480, "height": 900})
    log = PageLog()
    log.attach(page)
    page.goto(index.as_uri())
    page.wait_for_load_state("load")
    ARTIFACT.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACT), full_page=True)
    yield page, log
    page.close()


def fresh(page: Any) -> Any:
    """The page reloaded, so a test starts from the rendered order whatever ran before it."""
    page.reload()
    page.wait_for_load_state("load")
    return page


def table(kind: str, benchmark: str) -> str:
    return f'table.leaderboard.{kind}[data-benchmark="{benchmark}"]'


def column(page: Any, selector: str, key: str, attr: str = "data-sort") -> list[str]:
    return page.eval_on_selector_all(f'{selector} tr.entry td[data-key="{key}"]',
                                     f"cells => cells.map(c => c.getAttribute('{attr}'))")


def test_tables_have_every_entry(loaded: tuple[Any, PageLog]) -> None:
    page, _ = loaded
    expected = {("ranked", "dlrm_dcnv2"): 3, ("unranked", "dlrm_dcnv2"): 3,
                ("ranked", "synthetic_small"): 2, ("unranked", "synthetic_small"): 1}
    for (kind, bench), rows in expected.items():
        assert page.locator(f"{table(kind, bench)} tr.entry").count() == rows, (kind, bench)
    assert page.locator("tr.entry").count() == 9
    assert "Not ranked" in page.locator(".unranked-block").first.inner_text()


def test_charts_are_drawn(loaded: tuple[Any, PageLog]) -> None:
    page, _ = loaded
    for bench in ("dlrm_dcnv2", "synthetic_small"):
        svg = f'[data-benchmark="{bench}"]'
        assert page.locator(f"svg.chart-time{svg} rect.bar").count() >= 3
        assert page.locator(f"svg.chart-time{svg} circle.run-dot").count() >= 15
        assert page.locator(f"svg.chart-curves{svg} path.curve").count() >= 3
        assert page.locator(f"svg.chart-scaling{svg} circle.point").count() >= 3
        for kind in ("time", "curves", "scaling", "projection")[:4 if bench == "dlrm_dcnv2" else 3]:
            box = page.locator(f"svg.chart-{kind}{svg}").bounding_box()
            assert box and box["width"] > 300 and box["height"] > 150, (kind, bench, box)
    assert page.locator("svg.chart").count() == 7  # synthetic_small has no projection to draw
    assert page.locator('svg.chart-curves[data-benchmark="dlrm_dcnv2"] line.target-line').count() == 1
    assert page.locator('svg.chart-curves[data-benchmark="synthetic_small"] line.target-line').count() == 0


def test_clicking_a_header_sorts_numerically_with_nulls_last(loaded: tuple[Any, PageLog]) -> None:
    page = fresh(loaded[0])
    unranked = table("unranked", "dlrm_dcnv2")
    before = column(page, unranked, "score")
    assert before[-1] == "" and float(before[0]) > float(before[1])  # 45.x, 1.0x, null
    header = page.locator(f'{unranked} th[data-key="score"]')
    header.click()
    ascending = column(page, unranked, "score")
    assert [float(v) for v in ascending[:2]] == sorted(float(v) for v in before[:2])
    assert ascending[-1] == ""
    assert header.get_attribute("aria-sort") == "ascending"
    header.click()
    descending = column(page, unranked, "score")
    assert [float(v) for v in descending[:2]] == sorted((float(v) for v in before[:2]), reverse=True)
    assert descending[-1] == ""


def test_sorting_the_ranked_table_by_score_and_back_by_rank(loaded: tuple[Any, PageLog]) -> None:
    page = fresh(loaded[0])
    ranked = table("ranked", "dlrm_dcnv2")
    page.locator(f'{ranked} th[data-key="score"]').click()
    page.locator(f'{ranked} th[data-key="score"]').click()
    assert column(page, ranked, "rank") == ["3", "2", "1"]
    scores = [float(v) for v in column(page, ranked, "score")]
    assert scores == sorted(scores, reverse=True)
    page.locator(f'{ranked} th[data-key="system"]').click()
    systems = column(page, ranked, "system")
    assert systems == sorted(systems)
    page.locator(f'{ranked} th[data-key="rank"]').click()
    assert column(page, ranked, "rank") == ["1", "2", "3"]


def test_user_text_is_shown_literally_and_never_runs(loaded: tuple[Any, PageLog]) -> None:
    page, log = loaded
    ranked = table("ranked", "dlrm_dcnv2")
    assert SCRIPT_SUBMITTER in page.locator(ranked).inner_text()
    assert TRICKY_SYSTEM in page.locator(ranked).inner_text()
    assert page.locator("table.leaderboard i, svg.chart i, figcaption i").count() == 0
    assert page.locator("body script").count() == 1  # ours, and only ours
    assert log.dialogs == []


def test_no_table_overflows_its_container_at_1400_px(browser: Any, tmp_path: Path) -> None:
    """The "Not ranked" table (a column of reasons more) fits as the ranked one does: no column cut off."""
    index = tmp_path / "index.html"
    index.write_text(render_html(sample_board()), encoding="utf-8")
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    try:
        page.goto(index.as_uri())
        page.wait_for_load_state("load")
        wraps = page.eval_on_selector_all(".table-wrap", "ws => ws.map(w => [w.querySelector('table').className, "
                                          "w.scrollWidth, w.clientWidth])")
        assert len(wraps) == 4
        for table_class, scroll, client in wraps:
            assert scroll <= client, (table_class, scroll, client)
        assert page.evaluate("document.documentElement.scrollWidth") <= 1400
    finally:
        page.close()


def test_no_console_or_page_errors(loaded: tuple[Any, PageLog]) -> None:
    page, log = loaded
    fresh(page).locator('th[data-key="throughput"]').first.click()
    assert log.console_errors == []
    assert log.page_errors == []
    assert log.dialogs == []
