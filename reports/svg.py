"""Inline SVG charts for the HTML report: line/step charts, grouped bars and heat maps.

Drawn as text in Python so the page embeds no charting library and runs no script to draw:
a chart is visible in any browser, in print and in a mail client's preview. Every chart is an
``<svg class="chart" data-chart=NAME>`` with a ``<title>``, labelled axes (units in the
label), and one ``<g data-series=NAME>`` per series, which the browser tests count. The
``viewBox`` lets a chart shrink with the page at narrow widths. Tick labels are formatted by
the caller's function (:mod:`fcctl.reports.format`), so they read like the tables.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from html import escape
from typing import Literal

#: Okabe-Ito: distinguishable with the common colour-vision deficiencies and in greyscale print.
PALETTE = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#000000")
WIDTH, HEIGHT = 640, 340
LEFT, RIGHT, TOP, BOTTOM = 72, 20, 30, 50
CHAR_PX = 6.6  # average width of an 11 px sans-serif glyph, for laying out the legend


def tick(v: float) -> str:
    """A tick label: ``0.001``, ``10``, ``1,000`` (no data value is written this way)."""
    return f"{v:,g}" if abs(v) >= 1 or v == 0 else f"{v:g}"


@dataclass(frozen=True)
class Axis:
    """One axis: its label (with the unit), scale, tick format and optional fixed range."""

    label: str
    log: bool = False
    fmt: Callable[[float], str] = tick
    lo: float | None = None
    hi: float | None = None
    # Ticks of a log axis at powers of this base: 2 for bytes (1 MiB, 16 MiB, ...), else 10.
    base: int = 10


@dataclass(frozen=True)
class Series:
    """A named set of points; ``kind`` says how they are joined."""

    name: str
    xs: Sequence[float]
    ys: Sequence[float]
    kind: Literal["line", "step", "points"] = "line"
    dashed: bool = False
    color: str | None = None


@dataclass(frozen=True)
class RefLine:
    """A horizontal reference line across the plot (the ideal hit share, fio's read rate)."""

    name: str
    y: float


@dataclass
class _Frame:
    """The plot area and the mapping from data to pixels."""

    x: Axis
    y: Axis
    x_lo: float
    x_hi: float
    y_lo: float
    y_hi: float
    top: float
    parts: list[str] = field(default_factory=list)

    @property
    def plot_w(self) -> float:
        return WIDTH - LEFT - RIGHT

    @property
    def plot_h(self) -> float:
        return HEIGHT - self.top - BOTTOM

    def px(self, v: float) -> float:
        return LEFT + self.plot_w * _unit(v, self.x_lo, self.x_hi, self.x.log)

    def py(self, v: float) -> float:
        return self.top + self.plot_h * (1.0 - _unit(v, self.y_lo, self.y_hi, self.y.log))


def _unit(v: float, lo: float, hi: float, log: bool) -> float:
    if log:
        v, lo, hi = math.log(max(v, lo)), math.log(lo), math.log(hi)
    return 0.5 if hi == lo else (v - lo) / (hi - lo)


def _nice_step(span: float, target: int = 5) -> float:
    raw = span / max(1, target)
    mag = 10 ** math.floor(math.log10(raw))
    return next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)


def linear_ticks(lo: float, hi: float) -> list[float]:
    """Round ticks (1, 2, 2.5 or 5 x 10^k apart) covering ``lo``..``hi``."""
    if hi <= lo:
        return [lo]
    step = _nice_step(hi - lo)
    first = math.ceil(lo / step - 1e-9) * step
    n = math.floor((hi - first) / step + 1e-9) + 1
    return [round(first + i * step, 12) for i in range(n)]


def log_ticks(lo: float, hi: float, base: int = 10) -> list[float]:
    """Powers of ``base`` in ``lo``..``hi``, thinned to at most 7; the ends when none fall in."""
    k0 = math.ceil(math.log(lo, base) - 1e-9)
    k1 = math.floor(math.log(hi, base) + 1e-9)
    if k1 < k0:
        return [lo, hi]
    step = max(1, math.ceil((k1 - k0 + 1) / 7))
    return [float(base**k) for k in range(k0, k1 + 1, step)]


def _range(values: list[float], axis: Axis, *, zero: bool) -> tuple[float, float]:
    """Data range of one axis: fixed ends where given, positive values only on a log axis."""
    vals = [v for v in values if math.isfinite(v) and (v > 0 or not axis.log)]
    if axis.log:
        lo = axis.lo if axis.lo is not None else (min(vals) if vals else 1.0)
        hi = axis.hi if axis.hi is not None else (max(vals) if vals else 10.0)
        if hi <= lo:
            lo, hi = lo / 2, lo * 2
        return lo, hi
    lo = axis.lo if axis.lo is not None else min([*vals, 0.0] if zero else vals or [0.0])
    hi = axis.hi if axis.hi is not None else max(vals or [1.0])
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    return lo, hi


def _legend(names: list[tuple[str, str, bool]]) -> tuple[list[str], float]:
    """Legend entries laid out in rows above the plot; returns the parts and the top margin."""
    parts, x, row = [], float(LEFT), 0
    for name, color, dashed in names:
        w = 26 + CHAR_PX * len(name) + 14
        if x + w > WIDTH - RIGHT and x > LEFT:
            x, row = float(LEFT), row + 1
        y = TOP + row * 16
        dash = ' stroke-dasharray="5 3"' if dashed else ""
        parts.append(
            f'<g class="legend-item"><line x1="{x:.1f}" y1="{y - 4:.1f}" x2="{x + 20:.1f}" '
            f'y2="{y - 4:.1f}" stroke="{color}" stroke-width="2.5"{dash}/>'
            f'<text x="{x + 26:.1f}" y="{y:.1f}">{escape(name)}</text></g>'
        )
        x += w
    return parts, TOP + (row + 1) * 16 + 6


def _open(name: str, title: str) -> str:
    return (
        f'<svg class="chart" data-chart="{escape(name)}" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'xmlns="http://www.w3.org/2000/svg" role="img" font-family="sans-serif" '
        f'font-size="11"><title>{escape(title)}</title>'
    )


def distinct_labels(ticks: Sequence[float], fmt: Callable[[float], str]) -> list[float]:
    """The ticks whose label no other tick shares (the lowest tick when every label is shared):
    an axis over bytes or counts whose data are all 0 would otherwise read ``0 B, 0 B, 1 B,
    1 B`` with fractional ticks rounded into the same labels."""
    labels = [fmt(v) for v in ticks]
    counts = Counter(labels)
    kept = [v for v, label in zip(ticks, labels, strict=True) if counts[label] == 1]
    return kept or list(ticks[:1])


def _axes(f: _Frame, x_ticks: list[tuple[float, str]], y_ticks: list[float]) -> None:
    """Grid lines, tick labels and axis labels; the caller decides where x ticks sit."""
    bottom = f.top + f.plot_h
    y_ticks = distinct_labels(y_ticks, f.y.fmt)
    for v in y_ticks:
        y = f.py(v)
        f.parts.append(
            f'<line class="grid" x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" '
            f'stroke="#d0d0d0" stroke-width="0.6"/><text x="{LEFT - 6}" y="{y + 4:.1f}" '
            f'text-anchor="end">{escape(f.y.fmt(v))}</text>'
        )
    for xp, label in x_ticks:
        f.parts.append(
            f'<line x1="{xp:.1f}" y1="{bottom:.1f}" x2="{xp:.1f}" y2="{bottom + 4:.1f}" '
            f'stroke="#333"/><text x="{xp:.1f}" y="{bottom + 16:.1f}" '
            f'text-anchor="middle">{escape(label)}</text>'
        )
    f.parts.append(
        f'<rect x="{LEFT}" y="{f.top:.1f}" width="{f.plot_w:.1f}" height="{f.plot_h:.1f}" '
        f'fill="none" stroke="#333" stroke-width="0.8"/>'
        f'<text class="axis-label" x="{LEFT + f.plot_w / 2:.1f}" y="{HEIGHT - 12}" '
        f'text-anchor="middle">{escape(f.x.label)}</text>'
        f'<text class="axis-label" transform="translate(14 {f.top + f.plot_h / 2:.1f}) '
        f'rotate(-90)" text-anchor="middle">{escape(f.y.label)}</text>'
    )


def _one_value(values: Sequence[float]) -> bool:
    """Whether ``values`` hold one finite value, however often."""
    finite = {v for v in values if math.isfinite(v)}
    return len(finite) == 1


def _around(v: float, log: bool) -> tuple[float, float]:
    """An axis range with ``v`` in its middle."""
    if log and v > 0:
        return v / 2, v * 2
    half = abs(v) / 2 or 1.0
    return v - half, v + half


def line_chart(
    name: str,
    title: str,
    series: Sequence[Series],
    x: Axis,
    y: Axis,
    refs: Sequence[RefLine] = (),
) -> str:
    """Lines, steps or points of each series, with horizontal reference lines."""
    xs = [float(v) for s in series for v in s.xs]
    ys = [float(v) for s in series for v in s.ys] + [r.y for r in refs]
    x_lo, x_hi = _range(xs, x, zero=False)
    y_lo, y_hi = _range(ys, y, zero=True)
    one_x = _one_value(xs) and x.lo is None and x.hi is None
    if one_x:
        # Every point at one x: no line to draw, and an axis stretched to the right of the
        # point would read as a trend; the points sit in the middle over their one tick.
        only = next(v for v in xs if math.isfinite(v))
        x_lo, x_hi = _around(only, x.log)
        series = [dataclasses.replace(s, kind="points") for s in series]
    colors = [s.color or PALETTE[i % len(PALETTE)] for i, s in enumerate(series)]
    ref_color = "#555555"
    legend, top = _legend(
        [(s.name, c, s.dashed) for s, c in zip(series, colors, strict=True)]
        + [(r.name, ref_color, True) for r in refs]
    )
    f = _Frame(x, y, x_lo, x_hi, y_lo, y_hi, top)
    x_ticks = (
        [xs[0]] if one_x else (log_ticks(x_lo, x_hi, x.base) if x.log else linear_ticks(x_lo, x_hi))
    )
    y_ticks = log_ticks(y_lo, y_hi, y.base) if y.log else linear_ticks(y_lo, y_hi)
    _axes(f, [(f.px(v), x.fmt(v)) for v in x_ticks], y_ticks)
    for r in refs:
        yp = f.py(r.y)
        f.parts.append(
            f'<g data-series="{escape(r.name)}" class="ref"><line x1="{LEFT}" y1="{yp:.1f}" '
            f'x2="{WIDTH - RIGHT}" y2="{yp:.1f}" stroke="{ref_color}" stroke-width="1.5" '
            f'stroke-dasharray="5 3"/></g>'
        )
    for s, color in zip(series, colors, strict=True):
        pts = [
            (f.px(float(a)), f.py(float(b)))
            for a, b in zip(s.xs, s.ys, strict=True)
            if math.isfinite(float(a)) and math.isfinite(float(b))
        ]
        body = []
        if s.kind == "step" and pts:
            # Post-step: the value holds until the next point (a CDF at bucket edges).
            path = [f"M{pts[0][0]:.1f},{pts[0][1]:.1f}"]
            for x1, y1 in pts[1:]:
                path.append(f"H{x1:.1f}V{y1:.1f}")
            body.append(
                f'<path d="{"".join(path)}" fill="none" stroke="{color}" stroke-width="2"/>'
            )
        elif s.kind == "line" and len(pts) > 1:
            dash = ' stroke-dasharray="5 3"' if s.dashed else ""
            d = " ".join(f"{a:.1f},{b:.1f}" for a, b in pts)
            body.append(
                f'<polyline points="{d}" fill="none" stroke="{color}" stroke-width="2"{dash}/>'
            )
        # Markers on every point of short series: a single point has no line to show it.
        if s.kind == "points" or len(pts) <= 12:
            body.extend(
                f'<circle cx="{a:.1f}" cy="{b:.1f}" r="3.5" fill="{color}"/>' for a, b in pts
            )
        f.parts.append(
            f'<g data-series="{escape(s.name)}" data-points="{len(pts)}">{"".join(body)}</g>'
        )
    return _open(name, title) + "".join(legend) + "".join(f.parts) + "</svg>"


def bar_chart(
    name: str,
    title: str,
    categories: Sequence[str],
    series: Sequence[tuple[str, Sequence[float | None]]],
    x_label: str,
    y: Axis,
    ref: RefLine | None = None,
    value_fmt: Callable[[float], str] | None = None,
) -> str:
    """Grouped bars: one group per category, one bar per series (None: not run, no bar)."""
    vals = [v for _n, vs in series for v in vs if v is not None]
    y_lo, y_hi = _range([*vals, *([ref.y] if ref else [])], y, zero=True)
    y_hi *= 1.08  # headroom for the value labels above the tallest bar
    colors = [PALETTE[i % len(PALETTE)] for i in range(len(series))]
    legend, top = _legend(
        [(n, c, False) for (n, _v), c in zip(series, colors, strict=True)]
        + ([(ref.name, "#555555", True)] if ref else [])
    )
    f = _Frame(Axis(x_label), y, 0.0, 1.0, y_lo, y_hi, top)
    group_w = f.plot_w / max(1, len(categories))
    bar_w = group_w * 0.7 / max(1, len(series))
    _axes(
        f,
        [(LEFT + group_w * (i + 0.5), c) for i, c in enumerate(categories)],
        linear_ticks(y_lo, y_hi),
    )
    base = f.py(y_lo)
    for k, ((sname, vs), color) in enumerate(zip(series, colors, strict=True)):
        body = []
        for i, v in enumerate(vs):
            if v is None:
                continue
            x0 = LEFT + group_w * i + group_w * 0.15 + bar_w * k
            yv = f.py(v)
            label = escape((value_fmt or y.fmt)(v))
            body.append(
                f'<rect x="{x0:.1f}" y="{yv:.1f}" width="{bar_w:.1f}" '
                f'height="{max(0.0, base - yv):.1f}" fill="{color}"><title>{escape(sname)} '
                f'{escape(categories[i])}: {label}</title></rect><text x="{x0 + bar_w / 2:.1f}" '
                f'y="{yv - 4:.1f}" text-anchor="middle" font-size="10">{label}</text>'
            )
        f.parts.append(
            f'<g data-series="{escape(sname)}" data-points="{len(body)}">{"".join(body)}</g>'
        )
    if ref is not None:
        yp = f.py(ref.y)
        f.parts.append(
            f'<g data-series="{escape(ref.name)}" class="ref"><line x1="{LEFT}" y1="{yp:.1f}" '
            f'x2="{WIDTH - RIGHT}" y2="{yp:.1f}" stroke="#555555" stroke-width="1.5" '
            f'stroke-dasharray="5 3"/></g>'
        )
    return _open(name, title) + "".join(legend) + "".join(f.parts) + "</svg>"


# A light-to-dark blue ramp (sequential): darker is the larger value.
_RAMP = ((0.97, 0.98, 1.0), (0.62, 0.79, 0.88), (0.26, 0.57, 0.78), (0.03, 0.19, 0.42))


def _ramp(t: float) -> tuple[str, bool]:
    """The fill for ``t`` in 0..1 and whether text on it should be white."""
    t = min(1.0, max(0.0, t))
    seg = min(len(_RAMP) - 2, int(t * (len(_RAMP) - 1)))
    u = t * (len(_RAMP) - 1) - seg
    r, g, b = (a + (c - a) * u for a, c in zip(_RAMP[seg], _RAMP[seg + 1], strict=True))
    return f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}", t > 0.55


#: The least spread of a heat map's colour scale, as a share of its largest value: cells that
#: differ by less (TTFT 4.77 s against 4.79 s) are shades around the middle of the ramp, not
#: navy against white. A tenth is the replay decision's default TTFT margin (10 %).
HEAT_MIN_RELATIVE_SPAN = 0.1


def heat_shades(
    cells: dict[tuple[int, int], float],
    fmt: Callable[[float], str],
    min_relative_span: float = HEAT_MIN_RELATIVE_SPAN,
) -> dict[tuple[int, int], float]:
    """Each cell's place on the colour ramp (0..1), from the value its label shows.

    Cells whose labels read alike share one colour (the mean of their values stands for
    them), so the colours show no difference the labels cannot; the scale spans the shown
    values, but never less than ``min_relative_span`` of the largest magnitude, centred."""
    labels = {k: fmt(v) for k, v in cells.items()}
    groups: dict[str, list[float]] = {}
    for k, v in cells.items():
        groups.setdefault(labels[k], []).append(v)
    shown = {label: sum(vs) / len(vs) for label, vs in groups.items()}
    if not shown:
        return {}
    lo, hi = min(shown.values()), max(shown.values())
    span = max(hi - lo, min_relative_span * max(abs(lo), abs(hi)))
    middle = (lo + hi) / 2
    return {k: 0.5 if span == 0 else 0.5 + (shown[labels[k]] - middle) / span for k in cells}


def heat_map(
    name: str,
    title: str,
    x_labels: Sequence[str],
    y_labels: Sequence[str],
    cells: dict[tuple[int, int], float],
    x_label: str,
    y_label: str,
    fmt: Callable[[float], str],
    mark: tuple[int, int] | None = None,
) -> str:
    """A grid of coloured cells, each labelled with its value; ``mark`` outlines one cell.

    ``cells`` maps (x index, y index) to the value; a missing cell is left blank (hatched)."""
    shade = heat_shades(cells, fmt)
    f = _Frame(Axis(x_label), Axis(y_label), 0.0, 1.0, 0.0, 1.0, TOP)
    cw = f.plot_w / max(1, len(x_labels))
    ch = f.plot_h / max(1, len(y_labels))
    body = []
    for (i, j), v in sorted(cells.items()):
        fill, white = _ramp(shade[(i, j)])
        x0, y0 = LEFT + cw * i, f.top + f.plot_h - ch * (j + 1)
        text = escape(fmt(v))
        body.append(
            f'<rect x="{x0:.1f}" y="{y0:.1f}" width="{cw:.1f}" height="{ch:.1f}" fill="{fill}" '
            f'data-v="{v!r}"><title>{escape(x_labels[i])}, {escape(y_labels[j])}: {text}'
            f'</title></rect><text x="{x0 + cw / 2:.1f}" y="{y0 + ch / 2 + 4:.1f}" '
            f'text-anchor="middle" fill="{"#ffffff" if white else "#111111"}">{text}</text>'
        )
    if mark is not None:
        i, j = mark
        body.append(
            f'<rect class="mark" x="{LEFT + cw * i + 1.5:.1f}" '
            f'y="{f.top + f.plot_h - ch * (j + 1) + 1.5:.1f}" width="{cw - 3:.1f}" '
            f'height="{ch - 3:.1f}" fill="none" stroke="#d55e00" stroke-width="3"/>'
        )
    f.parts.append(
        f'<g data-series="{escape(title)}" data-points="{len(cells)}">{"".join(body)}</g>'
    )
    _axes(f, [(LEFT + cw * (i + 0.5), lab) for i, lab in enumerate(x_labels)], [])
    for j, lab in enumerate(y_labels):
        f.parts.append(
            f'<text x="{LEFT - 6}" y="{f.top + f.plot_h - ch * (j + 0.5) + 4:.1f}" '
            f'text-anchor="end">{escape(lab)}</text>'
        )
    return _open(name, title) + "".join(f.parts) + "</svg>"
