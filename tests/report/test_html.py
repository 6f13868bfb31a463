"""The report page's bar charts, drawn from values without a browser."""

from __future__ import annotations

import re

from harness.report.html import _Bar, _bar_chart, _Row


def test_a_phase_of_a_few_microseconds_beside_milliseconds_is_still_drawn():
    """A stacked bar's tiny phase rounded to 0.0 px and vanished from the page (the browser test of
    the per-rank phases failed when a rank's all-to-all took microseconds)."""
    bars = tuple(_Bar(v, "#000", "phase", f' data-phase="{n}"', n) for n, v in (("compute", 0.02), ("tiny", 2e-7)))
    svg = _bar_chart("phases", 0, "t", [_Row("rank 0", bars, stacked=True)], "seconds", str, [])
    widths = dict(re.findall(r'data-phase="(\w+)"[^>]*width="([\d.]+)"', svg))
    assert float(widths["compute"]) > 100 and float(widths["tiny"]) > 0
