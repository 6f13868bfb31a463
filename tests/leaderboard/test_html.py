"""index.html as text: hooks, every entry present, formatting, charts, escaping, self-containment.

The page is parsed with the standard library's HTML parser into a small tree, so the tests
ask about elements and attributes rather than grepping markup.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

import pytest

from compliance.schemas import validate
from harness.leaderboard.charts import _log_ticks, _nice_ticks
from harness.leaderboard.collect import build_leaderboard
from harness.leaderboard.html import render_html
from harness.leaderboard.tables import render_markdown
from tests.leaderboard.support.board_fixture import (
    BASELINE_SYSTEM,
    SCRIPT_SUBMITTER,
    TRICKY_SYSTEM,
    sample_board,
)
from tests.leaderboard.support.cpu_tree import PROCESSOR, cpu_tree

VOID = {"meta", "link", "br", "hr", "img", "input", "source", "wbr", "col", "area", "base", "embed", "track"}
NUMERIC_KEYS = {"rank", "hardware", "runs", "score", "projected", "cv", "throughput", "accelerator_minutes", "speedup"}


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    children: list[Node | str] = field(default_factory=list)

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def walk(self) -> Iterator[Node]:
        yield self
        for child in self.children:
            if isinstance(child, Node):
                yield from child.walk()

    def find(self, tag: str, *classes: str, **attrs: str) -> list[Node]:
        return [n for n in self.walk() if n.tag == tag and set(classes) <= n.classes
                and all(n.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items())]


class TreeBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Node(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        assert self.stack[-1].tag == tag, f"</{tag}> closes <{self.stack[-1].tag}>"
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse(page: str) -> Node:
    builder = TreeBuilder()
    builder.feed(page)
    builder.close()
    assert builder.stack == [builder.root], "unclosed elements"
    return builder.root


@pytest.fixture(scope="module")
def board() -> dict[str, Any]:
    return sample_board()


@pytest.fixture(scope="module")
def page(board: dict[str, Any]) -> str:
    return render_html(board)


@pytest.fixture(scope="module")
def doc(page: str) -> Node:
    return parse(page)


def table(doc: Node, kind: str, benchmark: str) -> Node:
    (found,) = doc.find("table", "leaderboard", kind, data_benchmark=benchmark)
    return found


def column(node: Node, key: str) -> list[Node]:
    return [td for row in node.find("tr", "entry") for td in row.find("td", data_key=key)]


def chart(doc: Node, kind: str, benchmark: str) -> Node:
    (found,) = doc.find("svg", "chart", f"chart-{kind}", data_benchmark=benchmark)
    return found


def drawn(svg: Node, tag: str, cls: str) -> list[Node]:
    """The marks of class ``cls`` in the plot, not in the legend."""
    in_legend = {id(n) for g in svg.find("g", "legend") for n in g.walk()}
    return [n for n in svg.find(tag, cls) if id(n) not in in_legend]


def caption(doc: Node, svg: Node) -> str:
    (figure,) = [f for f in doc.find("figure") if any(n is svg for n in f.walk())]
    return figure.find("figcaption")[0].text()


# --- the fixture ---------------------------------------------------------------------------

def test_sample_board_is_schema_valid(board: dict[str, Any]) -> None:
    validate(board, "leaderboard", what="sample")


def test_sample_board_covers_the_cases(board: dict[str, Any]) -> None:
    entries = [e for b in board["benchmarks"] for e in b["entries"]]
    assert len(board["benchmarks"]) == 2
    assert any(e["emulated"] and not e["ranked"] for e in entries)
    assert any(e["compliance_verdict"] == "fail" for e in entries)
    assert any(e["runs"] < 10 and e["score_minutes"] is None for e in entries)
    assert {SCRIPT_SUBMITTER} <= {e["submitter"] for e in entries}
    assert {TRICKY_SYSTEM} <= {e["system"] for e in entries}
    assert all(c["points"] for e in entries for c in e["curves"])


# --- the document ---------------------------------------------------------------------------

def test_page_is_one_self_contained_document(page: str, doc: Node) -> None:
    assert page.startswith("<!doctype html>")
    assert page.rstrip().endswith("</html>")
    assert [n.tag for n in doc.children if isinstance(n, Node)] == ["html"]
    for node in doc.walk():
        assert node.tag not in {"link", "img", "iframe", "object", "embed"}, node.tag
        assert "src" not in node.attrs, node
        assert node.attrs.get("href", "#").startswith("#"), node.attrs
    assert "http://" not in page and "https://" not in page
    assert "url(" not in page and "@import" not in page
    assert len(doc.find("style")) == 1 and len(doc.find("script")) == 1


def test_header_shows_generated_at_and_baseline(doc: Node, board: dict[str, Any]) -> None:
    (header,) = doc.find("header", "page")
    assert header.find("dd", "generated-at")[0].text() == board["generated_at"]
    assert header.find("dd", "baseline")[0].text() == BASELINE_SYSTEM
    without = parse(render_html({**board, "baseline_system": None}))
    assert "none" in without.find("dd", "baseline")[0].text()


def test_ranked_and_unranked_tables_hold_every_entry(doc: Node, board: dict[str, Any]) -> None:
    for bench in board["benchmarks"]:
        name = bench["benchmark"]
        ranked = sum(e["ranked"] for e in bench["entries"])
        assert len(table(doc, "ranked", name).find("tr", "entry")) == ranked
        assert len(table(doc, "unranked", name).find("tr", "entry")) == len(bench["entries"]) - ranked
    assert len(doc.find("tr", "entry")) == sum(len(b["entries"]) for b in board["benchmarks"])


def test_the_hooks_are_literal(page: str) -> None:
    assert '<table class="leaderboard ranked" data-benchmark="dlrm_dcnv2">' in page
    assert '<table class="leaderboard unranked" data-benchmark="dlrm_dcnv2">' in page
    assert page.count('<tr class="entry">') == 9
    for kind in ("time", "curves", "scaling", "projection"):
        assert f'<svg class="chart chart-{kind}" data-benchmark="dlrm_dcnv2"' in page


def test_unranked_rows_give_their_reasons(doc: Node, board: dict[str, Any]) -> None:
    for bench in board["benchmarks"]:
        cells = column(table(doc, "unranked", bench["benchmark"]), "reasons")
        expected = [e["reasons"] for e in bench["entries"] if not e["ranked"]]
        assert [[li.text() for li in cell.find("li")] for cell in cells] == expected


def test_ranked_rows_come_in_rank_order_whatever_the_input_order(board: dict[str, Any]) -> None:
    shuffled = copy.deepcopy(board)
    shuffled["benchmarks"][0]["entries"].reverse()
    ranks = [td.text() for td in column(table(parse(render_html(shuffled)), "ranked", "dlrm_dcnv2"), "rank")]
    assert ranks == ["1", "2", "3"]


def test_headers_say_how_to_sort_and_cells_carry_sort_keys(doc: Node) -> None:
    ranked = table(doc, "ranked", "dlrm_dcnv2")
    headers = ranked.find("th")
    assert {h.attrs["data-key"] for h in headers if h.attrs["data-type"] == "num"} == NUMERIC_KEYS
    assert all(h.find("button") for h in headers)
    for key in NUMERIC_KEYS:
        for td in column(doc, key):
            value = td.attrs["data-sort"]
            assert value == "" or math.isfinite(float(value)), (key, value)


def test_cells_are_formatted(doc: Node) -> None:
    ranked = table(doc, "ranked", "dlrm_dcnv2")
    hardware = column(ranked, "hardware")[0].text()
    assert hardware.startswith("8 x H100-SXM5-80GB") and "Xeon Platinum 8480C" in hardware
    score = column(ranked, "score")[1]
    assert float(score.attrs["data-sort"]) == pytest.approx(12.29, abs=0.005)
    assert score.text() == "12.29" + "12.08\u201312.50"
    assert column(ranked, "cv")[0].text().endswith("%")
    assert column(ranked, "speedup")[1].text() == "1.00\u00d7"
    assert column(ranked, "throughput")[0].text() == "3.35\u202fM/s"
    assert column(ranked, "throughput")[2].text() == "\u2014"
    assert column(ranked, "profile")[2].text() == "\u2014"
    assert ranked.find("span", "badge", "baseline")


def test_null_score_shows_a_dash_and_sorts_as_null(doc: Node) -> None:
    too_few = table(doc, "unranked", "dlrm_dcnv2").find("tr", "entry")[2]
    for key in ("score", "cv", "accelerator_minutes", "speedup"):
        (td,) = too_few.find("td", data_key=key)
        assert td.text() == "\u2014" and td.attrs["data-sort"] == ""
    (runs,) = too_few.find("td", data_key="runs")
    assert runs.text() == "2/3 of 10 required"  # the requirement shown where the set falls short


def test_emulated_entries_are_labelled(doc: Node) -> None:
    emulated = table(doc, "unranked", "dlrm_dcnv2").find("tr", "entry")[0]
    assert emulated.find("span", "badge", "emulated")
    assert sum(len(t.find("span", "badge", "emulated")) for t in doc.find("table")) == 1


def test_verdicts_are_badges_with_their_detail(doc: Node) -> None:
    bigco = table(doc, "unranked", "dlrm_dcnv2").find("tr", "entry")[1]
    (rcp,) = bigco.find("td", data_key="rcp")
    assert rcp.find("span", "badge", "bad")[0].text() == "fail"
    assert "converged faster than the RCP allows" in rcp.text()
    (compliance,) = bigco.find("td", data_key="compliance")
    assert compliance.find("span", "badge", "bad")


# --- charts ------------------------------------------------------------------------------

def test_every_chart_with_something_to_draw(doc: Node) -> None:
    drawn = {"dlrm_dcnv2": ("time", "curves", "scaling", "projection"),
             "synthetic_small": ("time", "curves", "scaling")}  # no entry of synthetic_small was projected
    for bench, kinds in drawn.items():
        for kind in kinds:
            svg = chart(doc, kind, bench)
            assert svg.find("text", "axis-title") and svg.find("g", "legend")
            assert svg.find("title"), "an accessible title"
    assert len(doc.find("svg", "chart")) == 7 and not doc.find("text", "no-data")


def test_time_chart_draws_each_score_and_each_run(doc: Node, board: dict[str, Any]) -> None:
    for bench in board["benchmarks"]:
        svg = chart(doc, "time", bench["benchmark"])
        scored = [e for e in bench["entries"] if e["score_minutes"] is not None]
        assert len(drawn(svg, "rect", "bar")) == len(scored)
        assert len(drawn(svg, "circle", "run-dot")) == sum(len(e["run_minutes"]) for e in bench["entries"])
        assert len(drawn(svg, "path", "interval")) == len(scored)


def test_curves_chart_draws_every_curve_and_the_target(doc: Node, board: dict[str, Any]) -> None:
    for bench in board["benchmarks"]:
        svg = chart(doc, "curves", bench["benchmark"])
        assert len(drawn(svg, "path", "curve")) == sum(len(e["curves"]) for e in bench["entries"])
        assert len(drawn(svg, "line", "target-line")) == (bench["target_auc"] is not None)
    colours = {p.attrs["stroke"] for p in chart(doc, "curves", "dlrm_dcnv2").find("path", "curve")}
    assert len(colours) == len(sample_board()["benchmarks"][0]["entries"])
    assert "0.80275" in chart(doc, "curves", "dlrm_dcnv2").text()


def test_scaling_chart_uses_log_x_over_a_wide_span_and_names_what_it_skips(doc: Node) -> None:
    wide = chart(doc, "scaling", "dlrm_dcnv2")
    assert wide.attrs["data-x-scale"] == "log"  # 1 to 64 accelerators
    assert len(drawn(wide, "circle", "point")) == 5  # laptop-cpu has 0 accelerators and no score
    assert "Solo / laptop-cpu" in caption(doc, wide)
    narrow = chart(doc, "scaling", "synthetic_small")
    assert narrow.attrs["data-x-scale"] == "log"  # 1 to 8: the same axis for every benchmark
    assert len(drawn(narrow, "circle", "point")) == 3
    assert "Not drawn" not in caption(doc, narrow)


def test_one_colour_per_system_across_charts(doc: Node) -> None:
    def colour_of(svg: Node, system: str) -> set[str]:
        return {n.attrs.get("fill") for n in svg.find("circle", "point")
                if n.find("title") and f"/ {system}" in n.find("title")[0].text() and n.attrs.get("fill") != "#fff"}
    first, second = chart(doc, "scaling", "dlrm_dcnv2"), chart(doc, "scaling", "synthetic_small")
    assert colour_of(first, "dgx-h100-8gpu") == colour_of(second, "dgx-h100-8gpu") != set()


# --- escaping ----------------------------------------------------------------------------

def test_user_text_is_escaped_in_tables_tooltips_legends_and_captions(page: str, doc: Node) -> None:
    assert SCRIPT_SUBMITTER not in page and "<i>x</i>" not in page and '"quoted"' not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "a&amp;b &quot;quoted&quot; &lt;i&gt;x&lt;/i&gt;" in page
    assert not doc.find("i")
    assert SCRIPT_SUBMITTER in table(doc, "ranked", "dlrm_dcnv2").text()
    assert any(TRICKY_SYSTEM in t.text() for t in chart(doc, "time", "dlrm_dcnv2").find("title"))
    assert any(TRICKY_SYSTEM in g.text() for g in chart(doc, "curves", "dlrm_dcnv2").find("g", "legend-item"))


def _hostile(board: Any, text: str) -> Any:
    """``board`` with every string replaced by ``text`` (keys and the compliance enum kept)."""
    if isinstance(board, dict):
        return {k: v if k == "compliance_verdict" else _hostile(v, text) for k, v in board.items()}
    if isinstance(board, list):
        return [_hostile(v, text) for v in board]
    return text if isinstance(board, str) else board


@pytest.mark.parametrize("payload", [
    "\"'><img src=x onerror=alert(1)><script>alert(1)</script>&amp;",
    "</script><script>alert(2)</script>",
    "</style><svg onload=alert(3)>",
    "</title></svg><iframe srcdoc=x>",
])
def test_no_user_value_becomes_markup_anywhere(board: dict[str, Any], payload: str) -> None:
    hostile = render_html(_hostile(board, payload))
    doc = parse(hostile)
    assert not doc.find("img") and not doc.find("iframe") and len(doc.find("script")) == 1
    assert len(doc.find("style")) == 1
    assert all(not name.startswith("on") for node in doc.walk() for name in node.attrs)
    assert len(doc.find("svg")) == 7
    assert len(doc.find("tr", "entry")) == 9


def test_the_script_is_a_constant_that_carries_nothing_of_the_board(page: str, board: dict[str, Any]) -> None:
    other = render_html(_hostile(board, "</script><script>alert(2)</script>"))
    (script,) = parse(page).find("script")
    (other_script,) = parse(other).find("script")
    assert script.text() == other_script.text()
    for value in (SCRIPT_SUBMITTER, "quoted", "dlrm_dcnv2", "alert"):
        assert value not in script.text()


# --- edge cases --------------------------------------------------------------------------

def test_rendering_is_deterministic(board: dict[str, Any], page: str) -> None:
    assert render_html(copy.deepcopy(board)) == page


def test_an_empty_board_renders() -> None:
    board = {"generated_at": "now", "harness_version": "0", "baseline_system": None, "roots": [], "benchmarks": []}
    validate(board, "leaderboard", what="empty")
    doc = parse(render_html(board))
    assert not doc.find("table") and "No benchmarks" in doc.text()


def test_a_benchmark_without_entries_or_data_has_no_empty_chart_cards_but_says_why(board: dict[str, Any]) -> None:
    empty = {"benchmark": "empty", "target_auc": 0.8, "required_runs": 5, "entries": []}
    bare = copy.deepcopy(board["benchmarks"][1])
    for entry in bare["entries"]:
        entry.update(score_minutes=None, score_interval_95=None, run_minutes=[], curves=[], ranked=False, rank=None)
    bare["benchmark"] = "bare"
    doc = parse(render_html({**board, "benchmarks": [empty, bare]}))
    assert "No ranked entries" in doc.text()
    assert not doc.find("svg") and not doc.find("figure") and not doc.find("div", "charts")
    notes = [p.text() for p in doc.find("p", "charts-missing")]
    assert len(notes) == 2 and all(n.startswith("No chart of time to train (no entry has a score or a run time)")
                                   for n in notes), notes
    assert "score vs accelerators (no entry with accelerators has a score)" in notes[1]
    assert len(table(doc, "unranked", "bare").find("tr", "entry")) == 3


# --- our own runs of a CPU machine -------------------------------------------------------------

@pytest.fixture(scope="module")
def cpu_board(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = cpu_tree(tmp_path_factory.mktemp("cpu"))
    return build_leaderboard([root / "results-bf16", root / "results-fp32"])


def test_cpu_systems_read_as_cpus(cpu_board: dict[str, Any]) -> None:
    doc = parse(render_html(cpu_board))
    hardware = [td.text() for td in column(doc, "hardware")]
    assert hardware == [f"CPU: 2 cores, {PROCESSOR}"] * 3
    markdown = render_markdown(cpu_board)
    assert f"| CPU: 2 cores, {PROCESSOR} |" in markdown and "N/A" not in markdown


def test_a_cpu_only_benchmark_has_no_score_vs_accelerators_card(cpu_board: dict[str, Any]) -> None:
    doc = parse(render_html(cpu_board))
    for bench in ("tiny_synthetic", "solo_synthetic"):
        assert chart(doc, "time", bench) and chart(doc, "curves", bench)
        assert not doc.find("svg", "chart-scaling", data_benchmark=bench)
    assert not doc.find("text", "no-data")
    assert len(doc.find("figure", "chart-box")) == 4  # time and curves, twice
    for note in doc.find("p", "charts-missing"):
        assert "score vs accelerators (no entry ran on accelerators: CPUs only)" in note.text()


def test_plurals_are_right_on_the_page(board: dict[str, Any]) -> None:
    """One run, one required run, one log: never "1 runs" (the requirement, the facts, the reasons)."""
    single = copy.deepcopy(board)
    bench = single["benchmarks"][1]
    bench["required_runs"] = 1
    for entry in bench["entries"]:
        entry.update(runs=1, converged_runs=1, required_runs=1, run_minutes=entry["run_minutes"][:1])
    text = parse(render_html(single)).text()
    assert "1 run required" in text
    assert not re.search(r"\b1 (runs|logs|benchmarks|run sets|cores|entries)\b", text)


def test_non_finite_numbers_do_not_break_the_page(board: dict[str, Any]) -> None:
    odd = copy.deepcopy(board)
    entry = odd["benchmarks"][0]["entries"][0]
    entry.update(score_minutes=float("nan"), throughput_samples_per_s=float("inf"))
    entry["run_minutes"].append(float("nan"))
    entry["curves"][0]["points"].append([float("nan"), 0.8])
    page = render_html(odd)
    assert not re.search(r"\b(nan|inf)\b", page, re.IGNORECASE)
    assert len(parse(page).find("tr", "entry")) == 9


# --- axis ticks --------------------------------------------------------------------------

@pytest.mark.parametrize(("lo", "hi"), [(0, 3.9), (0, 61.0), (0.55, 0.81), (0, 0.41), (5, 5), (0, 1e6)])
def test_nice_ticks_cover_the_range_with_round_steps(lo: float, hi: float) -> None:
    ticks = _nice_ticks(lo, hi)
    assert ticks.values[0] <= lo and ticks.values[-1] >= hi
    assert 2 <= len(ticks.values) <= 12
    steps = {round(b - a, 9) for a, b in zip(ticks.values, ticks.values[1:])}
    assert len(steps) == 1
    assert len(set(ticks.labels)) == len(ticks.labels)


def test_integer_ticks_and_log_ticks() -> None:
    assert _nice_ticks(0, 3, integer=True).labels == ["0", "1", "2", "3"]
    assert _log_ticks(1, 64).labels == ["1", "2", "4", "8", "16", "32", "64"]
    assert _log_ticks(1, 5000).labels == ["1", "10", "100", "1000", "10000"]
    assert _log_ticks(3, 5).values == [2.0, 4.0, 8.0]


def test_a_projection_is_shown_beside_the_score_and_its_absence_says_why(doc: Node) -> None:
    ranked = table(doc, "ranked", "dlrm_dcnv2")
    projected = column(ranked, "projected")
    assert projected[0].text().startswith("4.46") and "1.17\u00d7 measured" in projected[0].text()
    assert projected[0].attrs["data-sort"] == "4.46"
    (why,) = projected[1].find("span")
    assert why.attrs["title"] == "accelerator '<script>alert(1)</script>' is not in the table of devices"
    svg = chart(doc, "projection", "dlrm_dcnv2")
    assert len(svg.find("circle", "point")) == 1 and svg.find("line", "diagonal")
