"""SVG chart primitives and the page style that the leaderboard and ``harness report`` share.

Scales and ticks, the plot frame, axes, legends, swatches, the series colours and the base CSS
of a self-contained page. Every user-supplied text that reaches an SVG here (axis titles, legend
labels, tooltips) passes through :func:`html.escape`; the ``mark`` of a legend item and the
``body`` of a chart are trusted SVG that the caller built from escaped values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

DASH = "\u2014"
# Distinct colours for the first series: Kelly's colours of maximum contrast (less white,
# black and grey, which mark axes and unranked entries), ordered so neighbours differ most;
# past them :func:`series_colour` walks the hue circle by the golden angle, so no two series of
# a page ever share a colour however many systems it shows.
PALETTE = ("#0067a5", "#f38400", "#008856", "#be0032", "#875692", "#882d17", "#e68fac",
           "#8db600", "#604e97", "#f6a600", "#a1caf1", "#b3446c", "#c2b280", "#2b3d26",
           "#e25822", "#654522", "#f99379", "#dcd300", "#f3c300")


def finite(value: Any) -> float | None:
    """``value`` as a float when it is a finite number, else None (null, NaN, inf)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


@dataclass(frozen=True)
class Scale:
    """Maps data values in [lo, hi] to pixels in [px_lo, px_hi], linearly or logarithmically."""

    lo: float
    hi: float
    px_lo: float
    px_hi: float
    log: bool = False

    def __call__(self, value: float) -> float:
        if self.log:
            t = (math.log(value) - math.log(self.lo)) / (math.log(self.hi) - math.log(self.lo))
        else:
            t = (value - self.lo) / (self.hi - self.lo)
        return self.px_lo + t * (self.px_hi - self.px_lo)


@dataclass(frozen=True)
class Ticks:
    values: list[float]
    labels: list[str]


def nice_ticks(lo: float, hi: float, *, count: int = 5, integer: bool = False) -> Ticks:
    """Round tick values (steps of 1, 2, 2.5 or 5 x 10^k) covering [lo, hi]."""
    if hi <= lo:
        pad = abs(lo) * 0.1 or 1.0
        lo, hi = lo - pad, hi + pad
    raw = (hi - lo) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw * (1 - 1e-9))
    step = max(step, 1.0) if integer else step
    start = math.floor(lo / step + 1e-9) * step
    n = max(1, math.ceil((hi - start) / step - 1e-9))
    values = [start + i * step for i in range(n + 1)]
    decimals = next(d for d in range(10) if abs(round(step, d) - step) < 1e-9 * step)
    return Ticks(values, [f"{v:.{decimals}f}" for v in values])


def log_ticks(lo: float, hi: float) -> Ticks:
    """Powers of two (or of ten over a wide range) covering [lo, hi]."""
    base = 2 if hi / lo <= 2 ** 10 else 10
    first = math.floor(math.log(lo, base) + 1e-9)
    last = math.ceil(math.log(hi, base) - 1e-9)
    if last == first:
        last += 1
    values = [float(base ** k) for k in range(first, last + 1)]
    return Ticks(values, [f"{v:g}" for v in values])


@dataclass(frozen=True)
class Frame:
    """The plot area inside an SVG: width, plot height and the margins around it."""

    height: float
    left: float = 58
    width: float = 480
    top: float = 16
    right: float = 18
    bottom: float = 46

    @property
    def x0(self) -> float:
        return self.left

    @property
    def x1(self) -> float:
        return self.width - self.right

    @property
    def y0(self) -> float:
        return self.top

    @property
    def y1(self) -> float:
        return self.top + self.height

    @property
    def below(self) -> float:
        return self.y1 + self.bottom


def px(value: float) -> str:
    return f"{value:.1f}"


def tip(text: str) -> str:
    return f"<title>{escape(text)}</title>"


def x_axis(scale: Scale, ticks: Ticks, frame: Frame, title: str) -> str:
    parts = [f'<line class="axis" x1="{px(frame.x0)}" y1="{px(frame.y1)}" x2="{px(frame.x1)}" y2="{px(frame.y1)}"/>']
    for value, label in zip(ticks.values, ticks.labels):
        x = px(scale(value))
        parts.append(f'<line class="grid" x1="{x}" y1="{px(frame.y0)}" x2="{x}" y2="{px(frame.y1)}"/>')
        parts.append(f'<text x="{x}" y="{px(frame.y1 + 15)}" text-anchor="middle">{escape(label)}</text>')
    middle = px((frame.x0 + frame.x1) / 2)
    parts.append(f'<text class="axis-title" x="{middle}" y="{px(frame.y1 + 36)}" text-anchor="middle">'
                 f"{escape(title)}</text>")
    return "".join(parts)


def y_axis(scale: Scale, ticks: Ticks, frame: Frame, title: str) -> str:
    parts = [f'<line class="axis" x1="{px(frame.x0)}" y1="{px(frame.y0)}" x2="{px(frame.x0)}" y2="{px(frame.y1)}"/>']
    for value, label in zip(ticks.values, ticks.labels):
        y = px(scale(value))
        parts.append(f'<line class="grid" x1="{px(frame.x0)}" y1="{y}" x2="{px(frame.x1)}" y2="{y}"/>')
        parts.append(f'<text x="{px(frame.x0 - 6)}" y="{y}" dy="0.32em" text-anchor="end">{escape(label)}</text>')
    middle = px((frame.y0 + frame.y1) / 2)
    parts.append(f'<text class="axis-title" transform="translate(14 {middle}) rotate(-90)" '
                 f'text-anchor="middle">{escape(title)}</text>')
    return "".join(parts)


@dataclass(frozen=True)
class LegendItem:
    label: str  # user text, escaped when drawn
    mark: str  # trusted SVG for a swatch drawn in a 16 x 10 box at the origin


def legend(items: Sequence[LegendItem], top: float, frame: Frame) -> tuple[str, float]:
    """Legend items laid out in rows under the plot; returns the SVG and the height used."""
    parts, x, y, row_height = [], frame.x0, top, 16.0
    for item in items:
        label = item.label  # never clipped: labels are unique only whole
        width = 22 + 6.2 * len(label) + 14
        if x + width > frame.width - 4 and x > frame.x0:
            x, y = frame.x0, y + row_height
        parts.append(f'<g class="legend-item" transform="translate({px(x)} {px(y)})">{tip(item.label)}'
                     f'{item.mark}<text x="22" y="5" dy="0.32em">{escape(label)}</text></g>')
        x += width
    height = (y - top + row_height) if items else 0.0
    return f'<g class="legend">{"".join(parts)}</g>', height


def swatch_rect(colour: str, extra: str = "") -> str:
    return f'<rect x="0" y="0" width="16" height="10" rx="2" fill="{colour}"{extra}/>'


def swatch_line(colour: str, extra: str = "") -> str:
    return f'<line x1="0" y1="5" x2="16" y2="5" stroke="{colour}" stroke-width="2.5"{extra}/>'


def empty_chart(frame: Frame, message: str) -> str:
    return (f'<text class="no-data" x="{px((frame.x0 + frame.x1) / 2)}" y="{px((frame.y0 + frame.y1) / 2)}" '
            f'text-anchor="middle">{escape(message)}</text>')


def series_colour(i: int) -> str:
    """The ``i``-th series colour: the palette, then hues by the golden angle at three lightnesses."""
    if i < len(PALETTE):
        return PALETTE[i]
    k = i - len(PALETTE)
    hue = (k * 137.508 + 20.0) % 360.0
    lightness = (38, 52, 64)[k % 3]
    return f"hsl({hue:.1f} 62% {lightness}%)"

def svg(kind: str, title: str, body: str, height: float, *, width: float = 480, attrs: str = "") -> str:
    """An inline chart ``<svg class="chart chart-<kind>">``; ``attrs`` are extra attributes, already escaped."""
    return (f'<svg class="chart chart-{kind}"{attrs} viewBox="0 0 {px(width)} {px(height)}" '
            f'role="img" aria-label="{escape(title)}">{tip(title)}{body}</svg>')


#: The style both pages share: colours, the page header, notes, badges, chart boxes and charts.
BASE_CSS = """
:root { --fg: #1f2328; --muted: #656d76; --line: #d0d7de; --soft: #eaeef2; --panel: #f6f8fa;
        --accent: #0969da; --ok: #1a7f37; --bad: #cf222e; --warn: #9a6700; }
* { box-sizing: border-box; }
body { margin: 0; color: var(--fg); background: #fff;
       font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Noto Sans", "Helvetica Neue", Arial, sans-serif; }
code { font: 12px ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono", monospace; }
header.page { background: #24292f; color: #f6f8fa; }
header.page .inner, main { max-width: 1480px; margin: 0 auto; padding-left: 28px; padding-right: 28px; }
header.page .inner { padding-top: 20px; padding-bottom: 18px; }
header.page h1 { margin: 0; font-size: 22px; font-weight: 600; letter-spacing: -0.01em; }
header.page .lede { margin: 4px 0 12px; color: #c9d1d9; font-size: 13px; }
header.page dl { display: flex; flex-wrap: wrap; gap: 4px 28px; margin: 0; font-size: 13px; }
header.page dt { display: inline; color: #8b949e; margin-right: 6px; }
header.page dd { display: inline; margin: 0; color: #f6f8fa; }
header.page code { color: #f6f8fa; }
main { padding-bottom: 48px; }
.muted, .note { color: var(--muted); }
.note { font-size: 13px; margin: 6px 0 10px; }
.sub { display: block; color: var(--muted); font-size: 11.5px; white-space: normal; }
.badge { display: inline-block; padding: 0 7px; border-radius: 10px; border: 1px solid; font-size: 11px;
  font-weight: 600; line-height: 17px; white-space: nowrap; }
.badge.ok { color: var(--ok); background: #dafbe1; border-color: #aceebb; }
.badge.bad { color: var(--bad); background: #ffebe9; border-color: #ffcecb; }
.badge.neutral { color: var(--muted); background: var(--panel); border-color: var(--line); }
.badge.emulated { color: var(--warn); background: #fff8c5; border-color: #eac54f; }
.badge.baseline { color: var(--accent); background: #ddf4ff; border-color: #b6e3ff; }
.charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(380px, 1fr)); gap: 16px; margin-top: 20px;
  align-items: start; }
figure.chart-box { margin: 0; padding: 12px 14px; border: 1px solid var(--line); border-radius: 6px; }
figure.chart-box h4 { margin: 0 0 6px; font-size: 13px; font-weight: 600; }
figcaption { margin-top: 6px; font-size: 12px; color: var(--muted); }
svg.chart { display: block; width: 100%; height: auto; overflow: visible; }
svg.chart text { font-size: 11px; fill: #57606a; }
svg.chart .axis-title { font-size: 11.5px; font-weight: 600; fill: #424a53; }
svg.chart .row-label { fill: #24292f; }
svg.chart .row-label.muted { fill: #8c959f; font-style: italic; }
svg.chart .axis { stroke: #8c959f; }
svg.chart .grid { stroke: var(--soft); }
svg.chart .curve { fill: none; stroke-width: 1.6; stroke-linejoin: round; }
svg.chart .target { stroke: #24292f; stroke-width: 1.3; stroke-dasharray: 6 4; }
svg.chart .target-label { fill: #24292f; font-weight: 600; }
svg.chart .interval { fill: none; stroke: #24292f; stroke-width: 1.3; }
svg.chart .run-dot { fill: #fff; stroke: #24292f; stroke-width: 1.1; }
svg.chart .no-data { font-size: 13px; fill: #8c959f; }
"""
