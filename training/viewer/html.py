"""The HTML pieces of the viewer's page, which :mod:`training.viewer.page` assembles: the
learning curves as inline SVG, the step-group statistics table, and one iteration group by
group. Every text is escaped where it is written; the records come checked
(:mod:`training.viewer.checks`).
"""

from __future__ import annotations

import html
import urllib.parse
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from training.viewer.checks import group_key

#: What one page shows at most, whatever the rollout file holds (docs/security.md): each
#: text cut to ``--max-chars``; per group the first trajectories and steps of the grid, and
#: its first revisited states with their first visits; groups while the page is under
#: :data:`MAX_PAGE_CHARS` characters (one more step cell at most past it).
MAX_TRAJS_SHOWN, MAX_STEPS_SHOWN = 64, 200
MAX_STATES_SHOWN, MAX_VISITS_SHOWN = 100, 64
MAX_PAGE_CHARS = 64 * 2**20
MAX_GROUPS_LISTED = 2000


class Budget:
    """Characters of page left to write; a piece is taken while any are left."""

    def __init__(self, chars: int = MAX_PAGE_CHARS) -> None:
        self.left = chars

    def take(self, text: str) -> bool:
        """Counts ``text`` against the budget; False (nothing counted) when none was left."""
        if self.left <= 0:
            return False
        self.left -= len(text)
        return True


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
    group_id: Any,
    records: list[dict[str, Any]],
    labels: dict[int, str],
    max_chars: int,
    budget: Budget | None = None,
    penalty: float | None = None,
) -> str:
    """One group: trajectories side by side, then its revisited states ranked by A_S; at
    most :data:`MAX_TRAJS_SHOWN` x :data:`MAX_STEPS_SHOWN` steps and
    :data:`MAX_STATES_SHOWN` states, while ``budget`` lasts (what is left out is said).

    ``labels``: :func:`_step_group_labels` of ``records``; ``penalty``: the run's
    invalid-action penalty (:func:`penalty_html`)."""
    budget = budget or Budget()
    trajs: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        trajs[r["traj_id"]].append(r)
    for steps in trajs.values():
        steps.sort(key=lambda r: r["step"])
    depth = max(len(steps) for steps in trajs.values())
    shown = dict(list(trajs.items())[:MAX_TRAJS_SHOWN])

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
    out.append(_no_goal_note(records))
    out.append('<div class="grid"><table class="traj"><thead><tr><th>step</th>')
    for traj, steps in shown.items():
        total = sum(r["reward"] or 0.0 for r in steps)
        invalid = sum(not r["is_action_valid"] for r in steps)
        a_e, cost = steps[0]["episode_advantage"], penalty_html(invalid, penalty, 2)
        score = f"{total - invalid * (penalty or 0.0):.2f} (rewards {total:.2f}{cost})"
        out.append(
            f'<th data-traj="{esc(traj)}">trajectory {esc(traj)}<br><small>return '
            f"{score if cost else f'{total:.2f}'} &middot; A_E "
            f'<b class="{_sign_class(a_e)}">{_fmt(a_e)}</b></small></th>'
        )
    out.append("</tr></thead><tbody>")
    rows_shown = 0
    for step in range(min(depth, MAX_STEPS_SHOWN)):
        cells = [f"<tr><th>{step}</th>"]
        for steps in shown.values():
            if step >= len(steps):
                cells.append('<td class="empty"></td>')
                continue
            r = steps[step]
            cells.append(_step_cell(r, labels, badge(r["step_group_id"]), max_chars, penalty))
        cells.append("</tr>")
        row = "".join(cells)
        if not budget.take(row):
            break
        out.append(row)
        rows_shown += 1
    out.append("</tbody></table></div>")
    if rows_shown < depth or len(shown) < len(trajs):
        out.append(
            f'<p class="hint">Shown: the first {rows_shown} of {depth} steps of the first '
            f"{len(shown)} of {len(trajs)} trajectories (the page's bounds: "
            f"{MAX_STEPS_SHOWN} steps, {MAX_TRAJS_SHOWN} trajectories, "
            f"{MAX_PAGE_CHARS // 2**20} Mi characters in all).</p>"
        )

    members: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        if r["step_group_id"] in labels:
            members[r["step_group_id"]].append(r)
    if members:
        out.append(
            "<h4>Revisited states <small>each state reached more than once in this group, "
            "with the actions taken there ranked by A_S (the step advantage)</small></h4>"
        )
        for gid, rows in list(members.items())[:MAX_STATES_SHOWN]:
            piece = _state_html(gid, rows, badge(gid), max_chars, penalty)
            if not budget.take(piece):
                break
            out.append(piece)
        if len(members) > MAX_STATES_SHOWN or budget.left <= 0:
            out.append(f'<p class="hint">Not every one of the {len(members)} revisited states '
                       "is listed (the page's bounds).</p>")  # fmt: skip
    out.append("</section>")
    return "".join(out)


def _state_html(
    gid: int, rows: list[dict[str, Any]], badge: str, max_chars: int, penalty: float | None
) -> str:
    """One revisited state: its text and its first visits, ranked by A_S."""
    rows = sorted(rows, key=lambda r: -(r["step_advantage"] or 0.0))
    text = _bounded(rows[0]["anchor_text"] or rows[0]["observation"], max_chars)
    shown = (
        f"<pre>{esc(text)}</pre>"
        if len(text) <= 160
        else f"<details><summary>state</summary><pre>{esc(text)}</pre></details>"
    )
    out = [
        f'<div class="state" data-step-group="{gid}">{badge} '
        f"<small>{len(rows)} visits</small>{shown}"
        '<table class="rank"><thead><tr><th>A_S</th><th>action</th><th>trajectory</th>'
        "<th>step</th><th>reward</th><th>return (discounted)</th></tr></thead><tbody>"
    ]
    for r in rows[:MAX_VISITS_SHOWN]:
        out.append(
            f'<tr data-traj="{esc(r["traj_id"])}" data-step="{r["step"]}">'
            f'<td><b class="{_sign_class(r["step_advantage"])}">'
            f"{_fmt(r['step_advantage'])}</b></td>"
            f'<td><code class="act">{esc(_bounded(r["action"], max_chars))}</code></td>'
            f"<td>{esc(r['traj_id'])}</td><td>{r['step']}</td>"
            f"<td>{_fmt(r['reward'], signed=False)}"
            f"{penalty_html(not r['is_action_valid'], penalty)}</td>"
            f"<td>{_fmt(r['return'], signed=False)}</td></tr>"
        )
    out.append("</tbody></table></div>")
    return "".join(out)


def _no_goal_note(records: list[dict[str, Any]]) -> str:
    """For GraphGPO's records: a note when no trajectory of the group reached the goal (its
    state graph then has no goal, every state is 1 step from it, and the distances carry
    no signal); else nothing."""
    if not any("graph_distance" in r for r in records):
        return ""
    if any(r.get("graph_distance") == 0 or r.get("graph_next_distance") == 0 for r in records):
        return ""
    return (
        '<p class="hint graph-no-goal">No trajectory of this group reached the goal, so '
        "GraphGPO's state graph has no goal: every state counts as 1 step from it "
        '("to goal 1 &rarr; 1") and the distances say nothing about the actions here.</p>'
    )


def _bounded(text: str, max_chars: int) -> str:
    max_chars = max(1, max_chars)  # every text is cut: the page's bound rests on it
    if len(text) > max_chars:
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


def penalty_html(invalid: int, penalty: float | None, digits: int = 3) -> str:
    """``, invalid-action penalty -0.500`` after a reward where ``invalid`` steps (a step's
    own: 0 or 1; a trajectory's count) cost the run's invalid-action ``penalty``: the trainer
    takes it off the step's return and advantages, and the env's reward does not hold it;
    nothing where no penalty applies or none is known."""
    if not invalid or not penalty:
        return ""
    return (
        f', <span class="penalty">invalid-action penalty <b class="neg">'
        f"{-invalid * penalty:.{digits}f}</b></span>"
    )


def _step_cell(
    r: dict[str, Any], labels: dict[int, str], badge: str, max_chars: int, penalty: float | None
) -> str:
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
        f'<code class="act">{esc(_bounded(r["action"], max_chars))}</code><div class="nums">'
        f"<span>reward <b>{_fmt(r['reward'], signed=False)}</b>"
        f"{penalty_html(not valid, penalty)}</span>"
        f"<span>{'&#10003; valid' if valid else '&#10007; invalid'}</span>"
        f'<span>A_E <b class="{_sign_class(a_e)}">{_fmt(a_e)}</b></span>'
        f'<span>A_S <b class="{_sign_class(a_s)}">{_fmt(a_s)}</b></span>'
        f'<span>A <b class="{_sign_class(a)}">{_fmt(a)}</b></span></div>{_family_html(r)}'
        f"<details><summary>observation</summary><pre>{esc(observation)}</pre></details>"
        f"{_next_state_html(r, max_chars)}</td>"
    )


def iteration_html(
    iteration: int,
    header: dict[str, Any],
    records: list[dict[str, Any]],
    max_chars: int,
    notes: Sequence[str] = (),
    penalty: float | None = None,
) -> str:
    """The chosen iteration (its section's anchor ``#iteration-N``): a list of its groups,
    one inert template per group (while the page's budget lasts: :data:`MAX_PAGE_CHARS`),
    and the group most worth a look already open (:func:`worth_a_look`). ``notes``: a
    paragraph each (why this iteration, how to open another, ...); ``penalty``: the run's
    invalid-action penalty (:func:`penalty_html`)."""
    groups: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        groups[r["group_id"]].append(r)
    estimator = esc(_bounded(str(header.get("estimator") or "?"), 100))
    out = [
        f'<section id="iteration-{iteration}" data-iteration="{iteration}"><h2>Iteration '
        f"{iteration} <small>{len(records)} step records, {len(groups)} groups, estimator "
        f"{estimator}, from {esc(_bounded(str(header.get('source')), 100))}</small></h2>",
        *(f'<p class="hint">{esc(note)}</p>' for note in notes),
        '<p class="hint">Pick a group. Steps that share a coloured label (S1, S2, ...) were '
        "taken from the same state: that is a GiGPO step group, and A_S compares the actions "
        "taken there. Invalid actions are shaded red.</p>",
        '<table class="groups"><thead><tr><th>group</th><th>trajectories</th><th>steps</th>'
        "<th>returns</th><th>revisited states</th><th>steps taken from them</th>"
        "</tr></thead><tbody>",
    ]
    budget, templates, first = Budget(), [], worth_a_look(groups)
    opened = ""
    for group_id, rows in list(groups.items())[:MAX_GROUPS_LISTED]:
        if budget.left <= 0:
            break
        labels = _step_group_labels(rows)
        trajs = sorted({r["traj_id"] for r in rows}, key=str)
        returns: dict[Any, float] = defaultdict(float)
        for r in rows:  # the episode's score: its rewards less the invalid-action penalties
            returns[r["traj_id"]] += (r["reward"] or 0.0) - (penalty or 0.0) * (
                not r["is_action_valid"]
            )
        covered = sum(r["step_group_id"] in labels for r in rows)
        key = esc(group_key(group_id))
        shown_returns = " ".join(f"{returns[t]:.2f}" for t in trajs[:MAX_TRAJS_SHOWN])
        out.append(
            f'<tr class="pick{" open" if group_id == first else ""}" data-group="{key}" '
            f'tabindex="0"><td><a href="{esc(group_href(group_id))}">{key}</a></td>'
            f"<td>{len(trajs)}</td><td>{len(rows)}</td><td>{esc(shown_returns)}</td>"
            f"<td>{len(labels)}</td><td>{100 * covered / len(rows):.0f}%</td></tr>"
        )
        body = group_html(group_id, rows, labels, max_chars, budget, penalty)
        if group_id == first:
            opened = body
        templates.append(f'<template data-group="{key}">{body}</template>')
    if len(templates) < len(groups):
        out.append(f'<tr><td colspan="6">{len(groups) - len(templates)} more groups not shown '
                   "(the page's bounds)</td></tr>")  # fmt: skip
    out.append(f'</tbody></table><div id="group-view">{opened}</div>')
    out.extend(templates)
    out.append("</section>")
    return "".join(out)


def worth_a_look(groups: dict[Any, list[dict[str, Any]]]) -> Any:
    """The group the page opens on: the one with the most steps whose step advantage is
    nonzero (what GiGPO learned from here), then the most revisited states; the first
    group when none has any."""

    def score(item: tuple[Any, list[dict[str, Any]]]) -> tuple[int, int]:
        rows = item[1]
        return (sum(bool(r["step_advantage"]) for r in rows), len(_step_group_labels(rows)))

    if not groups:
        return None
    return max(groups.items(), key=score)[0]
