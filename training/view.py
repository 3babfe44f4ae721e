"""A run's rollouts and curves as one static HTML page: ``python -m training.view RUN_DIR``.

The page (``RUN_DIR/view.html`` unless ``-o``) needs no server and no network; open it from
disk, or add ``--serve`` to serve it (that one file, nothing else of its folder) on 127.0.0.1.
It shows:

* the learning curves of ``metrics.jsonl`` (success rate, return, valid-action rate, their
  held-out ``eval_*`` values, step-group coverage) as inline SVG;
* per saved iteration, the step-group statistics: share of records in step groups of size
  >= 2, the histogram of step-group sizes, and how often A_S and A_E disagree in sign;
* one iteration (``--iteration``, default the last saved) group by group: the group's
  trajectories side by side, step by step, each step with its action, reward, validity,
  A_E / A_S / A, its observation (collapsed) and its step group (the same label and colour
  for the same anchor state across trajectories); then the group's revisited states, each
  with the actions taken there ranked by A_S.

An ALFWorld-sized iteration (16 groups x 8 trajectories x 50 steps) stays usable because
each group is rendered into an inert ``<template>`` and only the group being looked at is
put into the page (from the list, or ``view.html#group=3``); the browser does no layout
for the others. ``--max-chars`` bounds the observation text shown per step.

Everything the page shows from a rollout file, its header included, is checked for type
before it is used and escaped where it is written: a hand-edited or damaged file is a
:class:`~training.rollouts.RolloutFileError` that names the file, the line and the field
(the command exits 2 with that message), never markup in the page or a traceback.
"""

from __future__ import annotations

import argparse
import html
import http.server
import json
import math
import re
import sys
import urllib.parse
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from training.local.config import show
from training.local.metrics import METRICS_FILE, read_metrics
from training.rollouts import RolloutFileError, read_rollouts, read_summary, rollout_files

VIEW_FILE = "view.html"
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


_T = TypeVar("_T")
_SURROGATE = re.compile("[\ud800-\udfff]")


class ViewError(ValueError):
    """The run directory cannot be shown (missing, empty, unreadable, or an unknown
    iteration), or the page cannot be written."""


# ----------------------------------------------------------------------------- checks
def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _as_float(value: Any) -> float | None:
    """``value`` as a finite float, or None when it is not a number (bools are not) or does
    not fit one (JSON allows ints of thousands of digits, ``NaN`` and ``Infinity``)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _is_id(value: Any) -> bool:
    # a group or trajectory id: an int or a string; lone surrogates (JSON can hold them)
    # could not be written to the page, and two ids differing only there would merge
    return _is_int(value) or (isinstance(value, str) and not _SURROGATE.search(value))


#: The record fields the page reads: what each must hold, and the test of it.
_RECORD_FIELDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "group_id": ("an int or a string of valid Unicode", _is_id),
    "traj_id": ("an int or a string of valid Unicode", _is_id),
    "step": ("an int", _is_int),
    "step_group_id": ("an int", _is_int),
    "observation": ("a string", lambda value: isinstance(value, str)),
    "action": ("a string", lambda value: isinstance(value, str)),
    "anchor_text": ("a string or null", lambda value: value is None or isinstance(value, str)),
    "is_action_valid": ("true or false", lambda value: isinstance(value, bool)),
    **{
        key: (
            "a finite number or null",
            lambda value: value is None or _as_float(value) is not None,
        )
        for key in ("reward", "episode_advantage", "step_advantage", "advantage", "return")
    },
}


def group_key(group_id: int | str) -> str:
    """The text that names a group in the page: its ``data-group`` and, percent-encoded, its
    ``#group=`` address."""
    return str(group_id)


def group_href(group_id: int | str) -> str:
    """The page address that opens ``group_id``: ``#group=`` and the id percent-encoded as
    JavaScript's ``encodeURIComponent`` would, so that any id (``%41``, ``/``, ``#``, ``?``,
    non-ASCII) decodes back to itself."""
    return "#group=" + urllib.parse.quote(group_key(group_id), safe="")


def _check_header(path: Path, header: dict[str, Any]) -> None:
    for key in ("estimator", "source"):
        value = header.get(key)
        if value is not None and not isinstance(value, str):
            raise RolloutFileError(
                f"{path} line 1 (header): {key} must be a string, got {show(value)}"
            )


def _check_records(path: Path, records: list[dict[str, Any]]) -> None:
    """Raises RolloutFileError naming the line and field of the first record the page cannot
    show, or of a group id that reads as another's (``1`` and ``"1"``)."""
    groups: dict[str, tuple[Any, int]] = {}
    for line, record in enumerate(records, 2):  # line 1 is the header
        for key, (expected, valid) in _RECORD_FIELDS.items():
            if key not in record:
                raise RolloutFileError(f"{path} line {line}: record lacks {key}")
            if not valid(record[key]):
                raise RolloutFileError(
                    f"{path} line {line}: {key} must be {expected}, got {show(record[key])}"
                )
        group_id = record["group_id"]
        first, first_line = groups.setdefault(group_key(group_id), (group_id, line))
        if type(first) is not type(group_id):
            raise RolloutFileError(
                f"{path} line {line}: group_id {group_id!r} reads as group_id {first!r} of "
                f"line {first_line}; a file's group ids must be all ints or all strings"
            )


def _checked_summary(path: Path, summary: Any) -> dict[str, Any]:
    """The step-group summary of a rollout file's header with the types the page needs; raises
    RolloutFileError naming the field when it has others."""
    where = f"{path} line 1 (header): summary"
    if not isinstance(summary, dict):
        raise RolloutFileError(f"{where} must be an object, got {show(summary)}")
    checked: dict[str, Any] = {}
    for key in ("records", "step_groups", "both_nonzero"):
        value = summary.get(key)
        if not _is_int(value) or value < 0:
            raise RolloutFileError(f"{where}.{key} must be an int >= 0, got {show(value)}")
        checked[key] = value
    for key in ("coverage", "sign_disagreement"):
        value = _as_float(summary.get(key))
        if value is None or not 0.0 <= value <= 1.0:
            raise RolloutFileError(
                f"{where}.{key} must be a number from 0 to 1, got {show(summary.get(key))}"
            )
        checked[key] = value
    histogram = summary.get("size_histogram")
    if not isinstance(histogram, dict) or not all(
        _is_int(size) and size >= 1 and _is_int(count) and count >= 0
        for size, count in histogram.items()
    ):
        raise RolloutFileError(
            f"{where}.size_histogram must be an object of sizes >= 1 to counts >= 0, got "
            f"{show(histogram)}"
        )
    checked["size_histogram"] = dict(histogram)
    return checked


def _read_guarded(path: Path, read: Callable[[Path], _T]) -> _T:
    """``read(path)``, with what gzip and json raise past read_rollouts' own checks (a line
    nested too deeply, a number of thousands of digits, a file too large for memory) turned
    into a RolloutFileError that names the file."""
    try:
        return read(path)
    except RolloutFileError:
        raise
    except RecursionError:
        raise RolloutFileError(f"{path}: a line is nested too deeply to read") from None
    except MemoryError:
        raise RolloutFileError(f"{path}: too large to read into memory") from None
    except (OSError, EOFError, ValueError) as exc:
        raise RolloutFileError(f"{path} is not a readable rollout file: {exc}") from None


def _read_run_metrics(run: Path) -> list[dict[str, Any]]:
    try:
        return read_metrics(run)
    except RecursionError:
        raise ViewError(f"{run / METRICS_FILE}: a line is nested too deeply to read") from None
    except MemoryError:
        raise ViewError(f"{run / METRICS_FILE}: too large to read into memory") from None
    except (OSError, ValueError) as exc:
        raise ViewError(f"{run / METRICS_FILE} is not readable JSON lines: {exc}") from None


# ----------------------------------------------------------------------------- page parts
def _esc(text: Any) -> str:
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
        return (
            f'<figure class="chart"><figcaption>{_esc(title)}</figcaption><p>no data</p></figure>'
        )
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
        f'aria-label="{_esc(title)}">',
        f'<text x="{left}" y="16" class="ct">{_esc(title)}</text>',
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
                f"<title>{_esc(label)} it {x:g}: {y:.3f}</title></circle>"
            )
        parts.append(
            f'<text x="{left + 8 + 110 * index}" y="31" class="legend" fill="{color}">'
            f"&#9632; {_esc(label)}</text>"
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
    x, y = _as_float(iteration), _as_float(value)
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
        histogram = s["size_histogram"]
        most = max(histogram.values(), default=1)
        bars = "".join(
            f'<span class="bar" title="{count} step groups of size {size}">'
            f'<span style="height:{max(2, round(24 * count / most))}px"></span>'
            f"<em>{size}</em></span>"
            for size, count in histogram.items()
        )
        lines.append(
            f'<tr data-iteration="{iteration}"><td><a href="#iteration">{iteration}</a></td>'
            f"<td>{s['records']}</td><td>{100 * s['coverage']:.1f}%</td>"
            f'<td>{s["step_groups"]}</td><td><div class="hist">{bars}</div>'
            f"<small>{_esc(', '.join(f'{k}: {v}' for k, v in histogram.items()))}</small></td>"
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

    key = _esc(group_key(group_id))
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
            f'<th data-traj="{_esc(traj)}">trajectory {_esc(traj)}<br><small>return '
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
                f"<pre>{_esc(text)}</pre>"
                if len(text) <= 160
                else f"<details><summary>state</summary><pre>{_esc(text)}</pre></details>"
            )
            out.append(
                f'<div class="state" data-step-group="{gid}">{badge(gid)} '
                f"<small>{len(rows)} visits</small>{shown}"
                '<table class="rank"><thead><tr><th>A_S</th><th>action</th><th>trajectory</th>'
                "<th>step</th><th>reward</th><th>return (discounted)</th></tr></thead><tbody>"
            )
            for r in rows:
                out.append(
                    f'<tr data-traj="{_esc(r["traj_id"])}" data-step="{r["step"]}">'
                    f'<td><b class="{_sign_class(r["step_advantage"])}">'
                    f"{_fmt(r['step_advantage'])}</b></td>"
                    f'<td><code class="act">{_esc(r["action"])}</code></td>'
                    f"<td>{_esc(r['traj_id'])}</td><td>{r['step']}</td>"
                    f"<td>{_fmt(r['reward'], signed=False)}</td>"
                    f"<td>{_fmt(r['return'], signed=False)}</td></tr>"
                )
            out.append("</tbody></table></div>")
    out.append("</section>")
    return "".join(out)


def _step_cell(r: dict[str, Any], labels: dict[int, str], badge: str, max_chars: int) -> str:
    """One step of the trajectory grid; its ``data-*`` attributes hold the exact values."""
    observation = r["observation"]
    if max_chars and len(observation) > max_chars:
        cut = len(observation) - max_chars
        observation = f"{observation[:max_chars]} ... [+{cut} chars]"
    valid = r["is_action_valid"]
    a_e, a_s, a = r["episode_advantage"], r["step_advantage"], r["advantage"]
    attributes = (
        f'data-traj="{_esc(r["traj_id"])}" data-step="{r["step"]}" '
        f'data-step-group="{r["step_group_id"]}" '
        f'data-label="{labels.get(r["step_group_id"], "")}" data-reward="{r["reward"]!r}" '
        f'data-valid="{int(valid)}" data-a-e="{a_e!r}" '
        f'data-a-s="{a_s!r}" data-a="{a!r}"'
    )
    return (
        f'<td class="step {"valid" if valid else "invalid"}" {attributes}>{badge}'
        f'<code class="act">{_esc(r["action"])}</code><div class="nums">'
        f"<span>reward <b>{_fmt(r['reward'], signed=False)}</b></span>"
        f"<span>{'&#10003; valid' if valid else '&#10007; invalid'}</span>"
        f'<span>A_E <b class="{_sign_class(a_e)}">{_fmt(a_e)}</b></span>'
        f'<span>A_S <b class="{_sign_class(a_s)}">{_fmt(a_s)}</b></span>'
        f'<span>A <b class="{_sign_class(a)}">{_fmt(a)}</b></span></div>'
        f"<details><summary>observation</summary><pre>{_esc(observation)}</pre></details></td>"
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
        f"{_esc(header.get('estimator') or '?')}, from {_esc(header.get('source'))}</small></h2>",
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
        key = _esc(group_key(group_id))
        out.append(
            f'<tr class="pick" data-group="{key}" tabindex="0">'
            f'<td><a href="{_esc(group_href(group_id))}">{key}</a></td><td>{len(trajs)}</td>'
            f"<td>{len(rows)}</td><td>{_esc(' '.join(f'{returns[t]:.2f}' for t in trajs))}</td>"
            f"<td>{len(labels)}</td><td>{100 * covered / len(rows):.0f}%</td></tr>"
        )
        body = group_html(group_id, rows, labels, max_chars)
        templates.append(f'<template data-group="{key}">{body}</template>')
    out.append('</tbody></table><div id="group-view"><p class="hint">No group open.</p></div>')
    out.extend(templates)
    out.append("</section>")
    return "".join(out)


STYLE = """
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,sans-serif;margin:0 24px 40px;color:#222}
h1{font-size:22px;margin:18px 0 4px}
h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd}
h3{font-size:16px;margin:16px 0 6px}h4{margin:18px 0 6px}small{color:#666;font-weight:normal}
.meta{color:#444}.hint{color:#555;margin:4px 0 10px}
.charts{display:flex;flex-wrap:wrap;gap:8px}.chart{margin:0;border:1px solid #eee;border-radius:6px}
.ct{font-weight:600;font-size:13px}.tick{font-size:10px;fill:#555}.legend{font-size:11px}
.axis{stroke:#999}table{border-collapse:collapse}
th,td{padding:3px 8px;text-align:left;vertical-align:top}
.stats td,.stats th,.groups td,.groups th{border-bottom:1px solid #eee}
.hist{display:inline-flex;align-items:flex-end;gap:2px;height:30px;margin-right:6px}
.bar{display:inline-flex;flex-direction:column;align-items:center;font-size:9px}
.bar span{display:block;width:10px;background:#56B4E9}.bar em{font-style:normal;color:#666}
tr.pick{cursor:pointer}tr.pick:hover,tr.pick.open{background:#eef5fb}
.grid{overflow-x:auto;border:1px solid #ddd;border-radius:6px}
table.traj thead th{position:sticky;top:0;background:#fafafa;border-bottom:1px solid #ddd}
table.traj thead th+th{min-width:190px}table.traj tbody th{color:#666;width:2em}
td.step{border:1px solid #eee;max-width:260px;min-width:190px}td.invalid{background:#fdecea}
td.empty{background:#fafafa}code.act{display:block;white-space:pre-wrap;word-break:break-word;
font-size:12px;background:#f4f4f4;padding:2px 4px;border-radius:3px;margin:2px 0}
.nums{display:flex;flex-wrap:wrap;gap:2px 10px;font-size:12px}
.sg{display:inline-block;min-width:22px;text-align:center;border-radius:9px;font-size:11px;
font-weight:700;color:#000;padding:0 5px}.sg.solo{background:#eee;color:#999}
.pos{color:#0a7d32}.neg{color:#b3261e}.zero{color:#666}
pre{white-space:pre-wrap;word-break:break-word;font-size:12px;margin:4px 0;max-height:320px;
overflow:auto}
details summary{cursor:pointer;color:#555;font-size:12px}
details.stats>summary h2{display:inline-block;border:0;color:#222}
.state{margin:8px 0 14px;padding:6px 8px;border-left:4px solid #ddd}
.rank td{border-bottom:1px solid #f0f0f0}
"""

# The hash holds the group id percent-encoded (group_href), so any id reads back as itself; a
# hand-typed address that is no valid encoding is taken as it stands, and a NUL reads as the
# U+FFFD the HTML parser made of it in the data-group attributes.
SCRIPT = r"""
(function(){
  var view=document.getElementById('group-view');
  if(!view)return;
  var templates=document.querySelectorAll('template[data-group]');
  function open(group){
    var t=Array.prototype.find.call(templates,function(c){return c.dataset.group===group;});
    if(!t)return false;
    view.replaceChildren(t.content.cloneNode(true));
    document.querySelectorAll('tr.pick').forEach(function(r){
      r.classList.toggle('open',r.dataset.group===group);});
    return true;
  }
  function go(r){location.hash='group='+encodeURIComponent(r.dataset.group);}
  document.querySelectorAll('tr.pick').forEach(function(r){
    r.addEventListener('click',function(){go(r);});
    r.addEventListener('keydown',function(e){if(e.key==='Enter')go(r);});
  });
  function decoded(text){try{return decodeURIComponent(text);}catch(e){return text;}}
  function fromHash(){var m=location.hash.match(/^#group=([\s\S]*)$/);
    if(m&&open(decoded(m[1]).replace(/\u0000/g,'\ufffd')))view.scrollIntoView();}
  window.addEventListener('hashchange',fromHash);
  if(location.hash)fromHash();
})();
"""


def build_page(
    run_dir: str | Path, iteration: int | None = None, max_chars: int = 1500
) -> tuple[str, dict[str, Any]]:
    """The HTML page of ``run_dir`` and what it holds (``{"iteration", "records", ...}``).

    Raises:
        ViewError: no such directory, nothing to show, an unreadable ``metrics.jsonl`` or
            folder, or ``iteration`` was not saved.
        training.rollouts.RolloutFileError: a rollout file is damaged, or holds a value the
            page cannot show (the file, line and field named).
    """
    run = Path(run_dir)
    if not run.is_dir():
        raise ViewError(f"no run directory {run}")
    metrics = _read_run_metrics(run)
    try:
        files = rollout_files(run)
    except OSError as exc:
        raise ViewError(f"cannot list the rollouts of {run}: {exc}") from None
    if not metrics and not files:
        raise ViewError(f"{run} has neither metrics.jsonl nor rollouts/: is it a run directory?")
    summaries = {
        it: _checked_summary(path, _read_guarded(path, read_summary)) for it, path in files.items()
    }
    config = _read_config(run)
    title = f"gigpo run {run.resolve().name}"
    body = [
        f"<h1>{_esc(title)}</h1>",
        f'<p class="meta">{_esc(config)} &middot; {len(metrics)} iterations in metrics.jsonl '
        f"&middot; {len(files)} with saved rollouts</p>",
        "<h2>Learning curves</h2>",
        curves_html(metrics, summaries) if metrics or summaries else "<p>no metrics.jsonl</p>",
    ]
    stats = [
        f'<details class="stats" {"open" if len(summaries) <= 30 else ""}><summary>'
        f"<h2>Step groups per saved iteration</h2></summary>",
        stats_html(summaries) if summaries else "<p>no saved rollouts</p>",
        "</details>",
    ]
    info: dict[str, Any] = {"iteration": None, "records": 0, "iterations_saved": list(files)}
    if files:
        chosen = max(files) if iteration is None else int(iteration)
        if chosen not in files:
            raise ViewError(
                f"iteration {chosen} has no saved rollouts in {run}; saved: {list(files)}"
            )
        path = files[chosen]
        header, records = _read_guarded(path, read_rollouts)
        _check_header(path, header)
        _check_records(path, records)
        body.append(iteration_html(chosen, header, records, max_chars))
        info.update(iteration=chosen, records=len(records))
    body.extend(stats)
    page = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_esc(title)}</title><style>{STYLE}</style></head><body>"
        + "".join(body)
        + f"<script>{SCRIPT}</script></body></html>"
    )
    try:
        page.encode("utf-8")
    except UnicodeEncodeError:
        # lone surrogates, from JSON escapes or an undecodable folder name: no UTF-8 for them
        page = _SURROGATE.sub("\ufffd", page)
    return page, info


def _read_config(run: Path) -> str:
    try:
        config = json.loads((run / "config.json").read_text())
        env, algo, model = config["env"], config["algo"], config["model"]
        return (
            f"env {env['id']} ({env['num_groups']} groups x {env['group_size']}), "
            f"estimator {algo['estimator']}, model {model['name_or_path']}"
        )
    except (OSError, ValueError, KeyError, TypeError, RecursionError, MemoryError):
        return "no readable config.json"


def write_page(
    run_dir: str | Path,
    output: str | Path | None = None,
    iteration: int | None = None,
    max_chars: int = 1500,
) -> tuple[Path, dict[str, Any]]:
    """Writes the page; returns its path and what it holds (with ``bytes``).

    Raises:
        ViewError: as :func:`build_page`, or the page cannot be written where asked.
        training.rollouts.RolloutFileError: as :func:`build_page`.
    """
    page, info = build_page(run_dir, iteration, max_chars)
    path = Path(output) if output is not None else Path(run_dir) / VIEW_FILE
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise ViewError(f"cannot write the page to {path}: {exc.strerror or exc}") from None
    info["bytes"] = path.stat().st_size
    return path, info


def page_server(path: Path, port: int = 0) -> http.server.ThreadingHTTPServer:
    """A server on 127.0.0.1 (``port`` 0: any free one) that answers ``/`` and ``/NAME``
    (``path``'s own name) with the page as it is on disk, and 404 to every other request: the
    page needs nothing else (its style and script are inline), and the rest of its folder is
    not the server's to show.

    Raises:
        OSError: the port cannot be bound.
    """
    page = Path(path).resolve()
    routes = {"/", f"/{page.name}"}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._answer(with_body=True)

        def do_HEAD(self) -> None:
            self._answer(with_body=False)

        def _answer(self, with_body: bool) -> None:
            route = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
            try:
                content = page.read_bytes() if route in routes else None
            except OSError:
                content = None
            if content is None:
                self.send_error(404, "only the viewer page is served here")
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(content)))
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            if with_body:
                self.wfile.write(content)

        def log_message(self, *args: Any) -> None:
            pass

    return http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)


def serve(path: Path, port: int = 0) -> None:
    """Serves the page ``path`` (:func:`page_server`) until interrupted.

    Raises:
        OSError: the port cannot be bound.
    """
    with page_server(path, port) as server:
        address = f"http://127.0.0.1:{server.server_address[1]}/"
        print(f"serving {address}{urllib.parse.quote(Path(path).name)} (Ctrl-C stops)", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be from 0 to 65535, got {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m training.view", description=__doc__.splitlines()[0]
    )
    parser.add_argument("run_dir", help="a training run's --out directory")
    parser.add_argument("-o", "--output", help=f"the HTML file (default RUN_DIR/{VIEW_FILE})")
    parser.add_argument("--iteration", type=int, help="iteration to show (default: last saved)")
    parser.add_argument(
        "--max-chars", type=_count, default=1500, help="observation characters shown per step"
    )
    parser.add_argument(
        "--serve", action="store_true", help="serve the page (only it) on 127.0.0.1"
    )
    parser.add_argument("--port", type=_port, default=0, help="port for --serve (0: any free)")
    args = parser.parse_args(argv)
    try:
        path, info = write_page(args.run_dir, args.output, args.iteration, args.max_chars)
    except (ViewError, RolloutFileError) as exc:
        print(f"python -m training.view: error: {exc}", file=sys.stderr)
        return 2
    print(
        f"wrote {path} ({info['bytes'] / 1e6:.2f} MB; iteration {info['iteration']}, "
        f"{info['records']} records)",
        flush=True,
    )
    if args.serve:
        try:
            serve(path, args.port)
        except OSError as exc:
            print(
                f"python -m training.view: error: cannot serve on port {args.port}: {exc}",
                file=sys.stderr,
            )
            return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
