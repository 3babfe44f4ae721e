"""The HTML pieces of the viewer's page, which :mod:`training.viewer.page` assembles: the
learning curves as inline SVG, the step-group statistics table, and one iteration group by
group. Every text is escaped where it is written; the records come checked
(:mod:`training.viewer.checks`).
"""

from __future__ import annotations

import html
import math
import urllib.parse
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from training.viewer.checks import as_float, group_key

#: Curves drawn, as (title, [(metric key, label), ...]).
CURVES = (
    ("success rate", [("success_rate", "train"), ("eval_success_rate", "held-out")]),
    ("mean return", [("mean_return", "train"), ("eval_mean_return", "held-out")]),
    ("valid-action rate", [("valid_action_rate", "train"), ("eval_valid_action_rate", "held-out")]),
    ("step-group coverage", [("step_group_coverage", "train")]),
)
# Colour-blind-safe palette (Okabe-Ito, then Tol's muted), cycled for step-group labels.
PALETTE = (
    "#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7",
    "#88CCEE", "#44AA99", "#117733", "#999933", "#DDCC77", "#CC6677", "#882255", "#AA4499",
)  # fmt: skip


def group_href(group_id: int | str) -> str:
    """The page address that opens ``group_id``: ``#group=`` and the id percent-encoded as
    JavaScript's ``encodeURIComponent`` would, so that any id (``%41``, ``/``, ``#``, ``?``,
    non-ASCII) decodes back to itself."""
    return "#group=" + urllib.parse.quote(group_key(group_id), safe="")


def esc(text: Any) -> str:
    # a carriage return as a reference: the HTML parser turns a raw one into a line feed,
    # which would change a group id between its data-group and its #group= address
    return html.escape("" if text is None else str(text), quote=True).replace("\r", "&#13;")


def _fmt(value: float | None, signed: bool = True) -> str:
    if value is None:
        return "n/a"
    return f"{value:+.3f}" if signed else f"{value:.3f}"


def _sign_class(value: float | None) -> str:
    if value is None or value == 0:
        return "zero"
    return "pos" if value > 0 else "neg"


def svg_chart(title: str, series: Sequence[tuple[str, list[tuple[float, float]]]]) -> str:
    """A small line chart as inline SVG: x = iteration (1-based), one polyline per series."""
    width, height, left, right, top, bottom = 360, 220, 46, 10, 42, 34
    points = [p for _, values in series for p in values]
    if not points:
        return f'<figure class="chart"><figcaption>{esc(title)}</figcaption><p>no data</p></figure>'
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys), max(ys)
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
    for x in sorted({round(x0), round(x0 / 2 + x1 / 2), round(x1)}):
        parts.append(
            f'<text x="{sx(x):.1f}" y="{height - bottom + 14}" class="tick" '
            f'text-anchor="middle">{x}</text>'
        )
    parts.append(
        f'<text x="{(left + width - right) / 2:.0f}" y="{height - 4}" class="tick" '
        'text-anchor="middle">iteration</text>'
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
    for title, keys in CURVES:
        series = []
        for key, label in keys:
            values = [point for r in rows if (point := _point(r["iteration"], r.get(key)))]
            if values:
                series.append((label, values))
        charts.append(svg_chart(title, series))
    if summaries:
        values = [
            point for it, s in summaries.items() if (point := _point(it, s["sign_disagreement"]))
        ]
        charts.append(svg_chart("A_S against A_E: opposite signs", [("saved iterations", values)]))
    return '<div class="charts">' + "".join(charts) + "</div>"


def _point(iteration: Any, value: Any) -> tuple[float, float] | None:
    """(1-based iteration, value) as finite floats, or None where either is no such number."""
    x, y = as_float(iteration), as_float(value)
    return None if x is None or y is None or not math.isfinite(x + 1) else (x + 1, y)


def stats_html(summaries: dict[int, dict[str, Any]]) -> str:
    """The per-iteration step-group statistics table."""
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
            f'<tr data-iteration="{iteration}"><td><a href="#iteration">{iteration}</a></td>'
            f"<td>{s['records']}</td><td>{100 * s['step_group_coverage']:.1f}%</td>"
            f'<td>{s["step_groups"]}</td><td><div class="hist">{bars}</div>'
            f"<small>{esc(', '.join(f'{k}: {v}' for k, v in histogram.items()))}</small></td>"
            f"<td>{100 * s['sign_disagreement']:.1f}% "
            f"<small>of {s['both_nonzero']}</small></td></tr>"
        )
    lines.append("</tbody></table>")
    return "".join(lines)


def _step_group_labels(records: list[dict[str, Any]]) -> dict[int, str]:
    """Label ``S1``, ``S2``, ... per step group of size >= 2, in order of first appearance."""
    sizes: dict[int, int] = defaultdict(int)
    for r in records:
        sizes[r["step_group_id"]] += 1
    labels: dict[int, str] = {}
    for r in records:
        gid = r["step_group_id"]
        if sizes[gid] >= 2 and gid not in labels:
            labels[gid] = f"S{len(labels) + 1}"
    return labels


def group_html(
    group_id: Any, records: list[dict[str, Any]], labels: dict[int, str], max_chars: int
) -> str:
    """One group: trajectories side by side, then its revisited states ranked by A_S.

    ``labels``: :func:`_step_group_labels` of ``records``."""
    trajs: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        trajs[r["traj_id"]].append(r)
    for steps in trajs.values():
        steps.sort(key=lambda r: r["step"])
    depth = max(len(steps) for steps in trajs.values())

    def badge(gid: int) -> str:
        label = labels.get(gid)
        if label is None:
            return '<span class="sg solo" title="visited once in this group">&middot;</span>'
        color = PALETTE[(int(label[1:]) - 1) % len(PALETTE)]
        return f'<span class="sg" style="background:{color}" data-label="{label}">{label}</span>'

    key = esc(group_key(group_id))
    out = [f'<section class="group" data-group="{key}">']
    out.append(
        f"<h3>Group {key} <small>{len(trajs)} trajectories, {len(records)} steps, "
        f"{len(labels)} revisited states</small></h3>"
    )
    out.append('<div class="grid"><table class="traj"><thead><tr><th>step</th>')
    for traj, steps in trajs.items():
        total = sum(r["reward"] or 0.0 for r in steps)
        a_e = steps[0]["episode_advantage"]
        out.append(
            f'<th data-traj="{esc(traj)}">trajectory {esc(traj)}<br><small>return '
            f'{total:.2f} &middot; A_E <b class="{_sign_class(a_e)}">{_fmt(a_e)}</b></small></th>'
        )
    out.append("</tr></thead><tbody>")
    for step in range(depth):
        out.append(f"<tr><th>{step}</th>")
        for steps in trajs.values():
            if step >= len(steps):
                out.append('<td class="empty"></td>')
                continue
            r = steps[step]
            out.append(_step_cell(r, labels, badge(r["step_group_id"]), max_chars))
        out.append("</tr>")
    out.append("</tbody></table></div>")

    members: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        if r["step_group_id"] in labels:
            members[r["step_group_id"]].append(r)
    if members:
        out.append(
            "<h4>Revisited states <small>each state reached more than once in this group, "
            "with the actions taken there ranked by A_S (the step advantage)</small></h4>"
        )
        for gid, rows in members.items():
            rows = sorted(rows, key=lambda r: -(r["step_advantage"] or 0.0))
            text = rows[0]["anchor_text"] or rows[0]["observation"]
            shown = (
                f"<pre>{esc(text)}</pre>"
                if len(text) <= 160
                else f"<details><summary>state</summary><pre>{esc(text)}</pre></details>"
            )
            out.append(
                f'<div class="state" data-step-group="{gid}">{badge(gid)} '
                f"<small>{len(rows)} visits</small>{shown}"
                '<table class="rank"><thead><tr><th>A_S</th><th>action</th><th>trajectory</th>'
                "<th>step</th><th>reward</th><th>return (discounted)</th></tr></thead><tbody>"
            )
            for r in rows:
                out.append(
                    f'<tr data-traj="{esc(r["traj_id"])}" data-step="{r["step"]}">'
                    f'<td><b class="{_sign_class(r["step_advantage"])}">'
                    f"{_fmt(r['step_advantage'])}</b></td>"
                    f'<td><code class="act">{esc(r["action"])}</code></td>'
                    f"<td>{esc(r['traj_id'])}</td><td>{r['step']}</td>"
                    f"<td>{_fmt(r['reward'], signed=False)}</td>"
                    f"<td>{_fmt(r['return'], signed=False)}</td></tr>"
                )
            out.append("</tbody></table></div>")
    out.append("</section>")
    return "".join(out)


def _bounded(text: str, max_chars: int) -> str:
    if max_chars and len(text) > max_chars:
        return f"{text[:max_chars]} ... [+{len(text) - max_chars} chars]"
    return text


def _family_html(r: dict[str, Any]) -> str:
    """What the GiGPO family's estimators add to a step, where its record has it: GraphGPO's
    steps to the goal from the state and from the next one, HGPO's group at each level."""
    out = []
    if "graph_distance" in r or "graph_next_distance" in r:
        d, after = r.get("graph_distance"), r.get("graph_next_distance")
        out.append(
            '<div class="nums graph" title="GraphGPO: steps to the goal in the group\'s state '
            f'graph, from this state and from the state the action led to" data-graph-d="{d!r}" '
            f'data-graph-next-d="{after!r}"><span>to goal <b>{_steps(d)}</b> &rarr; '
            f"<b>{_steps(after)}</b></span></div>"
        )
    if "hgpo_levels" in r:
        cells = [
            f'<span data-k="{level["k"]}" data-hgpo-group="{level["group"]}" data-size='
            f'"{level["size"]}">k{level["k"]} '
            + (
                f"g{level['group']} &times;{level['size']} A "
                f'<b class="{_sign_class(level["advantage"])}">{_fmt(level["advantage"])}</b>'
                if level["size"] > 0 and level["group"] >= 0
                else "&ndash;"
            )
            + "</span>"
            for level in r["hgpo_levels"]
        ]
        out.append(
            '<div class="nums hgpo" title="HGPO: the step\'s group at each history length k '
            f'(id, size, advantage)">HGPO {"".join(cells) or "&ndash;"}</div>'
        )
    return "".join(out)


def _steps(value: float | None) -> str:
    return "n/a" if value is None else f"{value:g}"


def _next_state_html(r: dict[str, Any], max_chars: int) -> str:
    """The state the step's action led to, collapsed: its text, else its key; nothing for a
    record without it."""
    if "next_anchor" not in r:
        return ""
    text = r.get("next_anchor_text")
    shown = _bounded(r["next_anchor"] if text is None else text, max_chars)
    return f"<details><summary>next state</summary><pre>{esc(shown)}</pre></details>"


def _step_cell(r: dict[str, Any], labels: dict[int, str], badge: str, max_chars: int) -> str:
    """One step of the trajectory grid; its ``data-*`` attributes hold the exact values."""
    observation = _bounded(r["observation"], max_chars)
    valid = r["is_action_valid"]
    a_e, a_s, a = r["episode_advantage"], r["step_advantage"], r["advantage"]
    attributes = (
        f'data-traj="{esc(r["traj_id"])}" data-step="{r["step"]}" '
        f'data-step-group="{r["step_group_id"]}" '
        f'data-label="{labels.get(r["step_group_id"], "")}" data-reward="{r["reward"]!r}" '
        f'data-valid="{int(valid)}" data-a-e="{a_e!r}" '
        f'data-a-s="{a_s!r}" data-a="{a!r}"'
    )
    return (
        f'<td class="step {"valid" if valid else "invalid"}" {attributes}>{badge}'
        f'<code class="act">{esc(r["action"])}</code><div class="nums">'
        f"<span>reward <b>{_fmt(r['reward'], signed=False)}</b></span>"
        f"<span>{'&#10003; valid' if valid else '&#10007; invalid'}</span>"
        f'<span>A_E <b class="{_sign_class(a_e)}">{_fmt(a_e)}</b></span>'
        f'<span>A_S <b class="{_sign_class(a_s)}">{_fmt(a_s)}</b></span>'
        f'<span>A <b class="{_sign_class(a)}">{_fmt(a)}</b></span></div>{_family_html(r)}'
        f"<details><summary>observation</summary><pre>{esc(observation)}</pre></details>"
        f"{_next_state_html(r, max_chars)}</td>"
    )


def iteration_html(
    iteration: int, header: dict[str, Any], records: list[dict[str, Any]], max_chars: int
) -> str:
    """The chosen iteration: a list of its groups, and one inert template per group."""
    groups: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        groups[r["group_id"]].append(r)
    out = [
        f'<section id="iteration" data-iteration="{iteration}"><h2>Iteration {iteration} '
        f"<small>{len(records)} step records, {len(groups)} groups, estimator "
        f"{esc(header.get('estimator') or '?')}, from {esc(header.get('source'))}</small></h2>",
        '<p class="hint">Pick a group. Steps that share a coloured label (S1, S2, ...) were '
        "taken from the same state: that is a GiGPO step group, and A_S compares the actions "
        "taken there. Invalid actions are shaded red.</p>",
        '<table class="groups"><thead><tr><th>group</th><th>trajectories</th><th>steps</th>'
        "<th>returns</th><th>revisited states</th><th>steps taken from them</th>"
        "</tr></thead><tbody>",
    ]
    templates = []
    for group_id, rows in groups.items():
        labels = _step_group_labels(rows)
        trajs = sorted({r["traj_id"] for r in rows}, key=str)
        returns = defaultdict(float)
        for r in rows:
            returns[r["traj_id"]] += r["reward"] or 0.0
        covered = sum(r["step_group_id"] in labels for r in rows)
        key = esc(group_key(group_id))
        out.append(
            f'<tr class="pick" data-group="{key}" tabindex="0">'
            f'<td><a href="{esc(group_href(group_id))}">{key}</a></td><td>{len(trajs)}</td>'
            f"<td>{len(rows)}</td><td>{esc(' '.join(f'{returns[t]:.2f}' for t in trajs))}</td>"
            f"<td>{len(labels)}</td><td>{100 * covered / len(rows):.0f}%</td></tr>"
        )
        body = group_html(group_id, rows, labels, max_chars)
        templates.append(f'<template data-group="{key}">{body}</template>')
    out.append('</tbody></table><div id="group-view"><p class="hint">No group open.</p></div>')
    out.extend(templates)
    out.append("</section>")
    return "".join(out)
