"""The learning curves (inline SVG, at most :data:`MAX_POINTS` points a curve) and the
step-group statistics table (at most :data:`MAX_ITERATION_ROWS` saved iterations) of the
viewer's page (:mod:`training.viewer.page`). Every text is escaped where it is written.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from training.viewer.checks import as_float
from training.viewer.html import esc

#: The most points a curve draws: more are thinned evenly (the first and the last kept).
MAX_POINTS = 400
#: The most saved iterations the statistics table lists (the latest ones).
MAX_ITERATION_ROWS = 500

#: Curves drawn, as (title, the y axis's quantity and unit, whether it is a rate from 0 to
#: 1, [(metric key, label), ...]).
CURVES = (
    ("success rate", "share of episodes won", True,
     [("success_rate", "train"), ("eval_success_rate", "held-out")]),
    ("mean return", "reward per episode", False,
     [("mean_return", "train"), ("eval_mean_return", "held-out")]),
    ("valid-action rate", "share of actions valid", True,
     [("valid_action_rate", "train"), ("eval_valid_action_rate", "held-out")]),
    ("step-group coverage", "share of step records", True, [("step_group_coverage", "train")]),
)  # fmt: skip
#: The most ticks on the iteration axis.
MAX_X_TICKS = 6


def svg_chart(
    title: str,
    series: Sequence[tuple[str, list[tuple[float, float]]]],
    unit: str = "",
    rate: bool = False,
) -> str:
    """A small line chart as inline SVG: x = iteration (as ``metrics.jsonl`` numbers them,
    from 0; ticks at whole iterations, :func:`iteration_ticks`), one polyline per series,
    each thinned to :data:`MAX_POINTS` points. ``unit`` names the y axis (its quantity and
    unit); a ``rate`` is drawn on [0, 1] (wider only for a value outside it), so that 0.94
    and 1.00 do not fill the chart's height."""
    series = [(label, _thinned(values)) for label, values in series]
    width, height, left, right, top, bottom = 360, 220, 52, 10, 42, 34
    points = [p for _, values in series for p in values]
    if not points:
        return f'<figure class="chart"><figcaption>{esc(title)}</figcaption><p>no data</p></figure>'
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys), max(ys)
    if rate:
        y0, y1 = min(y0, 0.0), max(y1, 1.0)
    if y0 == y1:
        y0, y1 = y0 - 0.5, y1 + 0.5
    if x0 == x1:
        x0, x1 = x0 - 0.5, x1 + 0.5

    # halves first, so that values near the float limits neither overflow nor divide by 0
    x_span, y_span = x1 / 2 - x0 / 2, y1 / 2 - y0 / 2

    def sx(x: float) -> float:
        share = (x / 2 - x0 / 2) / x_span if x_span > 0 else 0.5
        return left + share * (width - left - right)

    def sy(y: float) -> float:
        share = (y1 / 2 - y / 2) / y_span if y_span > 0 else 0.5
        return top + share * (height - top - bottom)

    parts = [
        f'<svg viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
        f'aria-label="{esc(title)}">',
        f'<text x="{left}" y="16" class="ct">{esc(title)}</text>',
        f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" '
        'class="axis"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" class="axis"/>',
    ]
    for y in (y0, y0 / 2 + y1 / 2, y1):
        parts.append(
            f'<text x="{left - 4}" y="{sy(y) + 4:.1f}" class="tick" text-anchor="end">'
            f"{y:.2f}</text>"
        )
    for x in iteration_ticks(x0, x1):
        parts.append(
            f'<text x="{sx(x):.1f}" y="{height - bottom + 14}" class="tick" '
            f'text-anchor="middle">{x if abs(x) < 10**7 else f"{x:.2e}"}</text>'
        )
    parts.append(
        f'<text x="{(left + width - right) / 2:.0f}" y="{height - 4}" class="tick axis-label" '
        'text-anchor="middle">iteration</text>'
    )
    if unit:
        middle = (top + height - bottom) / 2
        parts.append(
            f'<text x="10" y="{middle:.0f}" class="tick axis-label" text-anchor="middle" '
            f'transform="rotate(-90 10 {middle:.0f})">{esc(unit)}</text>'
        )
    for index, (label, values) in enumerate(series):
        if not values:
            continue
        color = ("#0072B2", "#D55E00", "#009E73")[index % 3]
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in values)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        for x, y in values:
            parts.append(
                f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.5" fill="{color}">'
                f"<title>{esc(label)} it {x:g}: {y:.3f}</title></circle>"
            )
        parts.append(
            f'<text x="{left + 8 + 110 * index}" y="31" class="legend" fill="{color}">'
            f"&#9632; {esc(label)}</text>"
        )
    parts.append("</svg>")
    return f'<figure class="chart">{"".join(parts)}</figure>'


def curves_html(
    rows: list[dict[str, Any]], summaries: dict[int, dict[str, Any]] | None = None
) -> str:
    """The learning-curve charts of the metrics rows, and (from the saved rollouts) how often
    A_S and A_E have opposite signs."""
    charts = []
    for title, unit, rate, keys in CURVES:
        series = []
        for key, label in keys:
            values = [point for r in rows if (point := _point(r["iteration"], r.get(key)))]
            if values:
                series.append((label, values))
        charts.append(svg_chart(title, series, unit, rate))
    if summaries:
        values = [
            point for it, s in summaries.items() if (point := _point(it, s["sign_disagreement"]))
        ]
        charts.append(svg_chart("A_S against A_E: opposite signs", [("saved iterations", values)],
                                "share of records (both ≠ 0)", rate=True))  # fmt: skip
    return '<div class="charts">' + "".join(charts) + "</div>"


def iteration_ticks(low: float, high: float) -> list[int]:
    """Whole iterations from ``low`` to ``high`` to mark on the x axis: evenly spaced at 1,
    2 or 5 times a power of ten, at most :data:`MAX_X_TICKS` of them (an axis of iterations
    0 to 5 gets 0, 1, 2, 3, 4, 5; never a tick at 2.5)."""
    first, last = math.ceil(low), math.floor(high)
    if last < first:
        return []
    step, scale = 1, 1
    while (last - first) // step >= MAX_X_TICKS:
        for factor in (2, 5, 10):
            step = factor * scale
            if (last - first) // step < MAX_X_TICKS:
                break
        scale *= 10
    start = -(-first // step) * step  # the first multiple of step from first on
    return list(range(start, last + 1, step))


def _point(iteration: Any, value: Any) -> tuple[float, float] | None:
    """(iteration, value) as finite floats, or None where either is no such number."""
    x, y = as_float(iteration), as_float(value)
    return None if x is None or y is None else (x, y)


def _thinned(values: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """At most :data:`MAX_POINTS` of ``values``, evenly spaced, the first and last kept."""
    if len(values) <= MAX_POINTS:
        return values
    step = (len(values) - 1) / (MAX_POINTS - 1)
    return [values[round(i * step)] for i in range(MAX_POINTS)]


def stats_html(summaries: dict[int, dict[str, Any]], shown: int | None = None) -> str:
    """The per-iteration step-group statistics table (the latest
    :data:`MAX_ITERATION_ROWS` iterations). The iteration ``shown`` (the one whose groups
    the page holds) links to its section, ``#iteration-N``; every other row says the
    ``--iteration`` that writes its page."""
    left_out = max(0, len(summaries) - MAX_ITERATION_ROWS)
    summaries = dict(list(summaries.items())[left_out:])
    lines = [
        '<table class="stats"><thead><tr><th>iteration</th><th>records</th>'
        "<th>in step groups of size &ge; 2</th><th>step groups</th>"
        "<th>step-group sizes (size: count)</th><th>A_S and A_E of opposite sign</th>"
        "</tr></thead><tbody>"
    ]
    for iteration, s in summaries.items():
        histogram = s["step_group_sizes"]
        most = max(histogram.values(), default=1)
        bars = "".join(
            f'<span class="bar" title="{count} step groups of size {size}">'
            f'<span style="height:{max(2, round(24 * count / most))}px"></span>'
            f"<em>{size}</em></span>"
            for size, count in histogram.items()
        )
        lines.append(
            f'<tr data-iteration="{iteration}"><td>{_iteration_cell(iteration, shown)}</td>'
            f"<td>{s['records']}</td><td>{100 * s['step_group_coverage']:.1f}%</td>"
            f'<td>{s["step_groups"]}</td><td><div class="hist">{bars}</div>'
            f"<small>{esc(', '.join(f'{k}: {v}' for k, v in histogram.items()))}</small></td>"
            f"<td>{100 * s['sign_disagreement']:.1f}% "
            f"<small>of {s['both_nonzero']}</small></td></tr>"
        )
    lines.append("</tbody></table>")
    if left_out:
        lines.append(f'<p class="hint">{left_out} earlier saved iterations not listed.</p>')
    return "".join(lines)


def _iteration_cell(iteration: int, shown: int | None) -> str:
    """The statistics table's first cell: the iteration, a link to its section where the
    page holds its groups, else the option that writes a page of them."""
    if iteration == shown:
        return f'<a href="#iteration-{iteration}">{iteration}</a> <small>shown below</small>'
    return f"{iteration} <small>--iteration {iteration}</small>"
