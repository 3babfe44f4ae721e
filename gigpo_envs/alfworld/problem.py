"""Sampling one ALFWorld game: a room, a task, and its PDDL problem for ALFRED's domain.

Everything here is a pure function of a numpy generator (plus ALFRED's constants and goal
library from the ``alfworld`` package), so the same seed gives the same game anywhere.
Object ids follow ALFRED's mangled form (``Desk_bar__3``, ``Sink_bar__7_bar_SinkBasin``) so
that ``alfworld``'s demangler names them ``desk 1`` and ``sinkbasin 1``, which the hand-coded
expert relies on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gigpo_envs.alfworld.rooms import BASIN_PARENTS, ROOM_KINDS, TASK_ROOMS, RoomKind

_LAMP = "DeskLamp"


def _alfred() -> tuple[Any, Any]:
    """Returns ``(alfworld.gen.constants, alfworld.gen.goal_library)``."""
    from gigpo_envs.alfworld.games import require_alfworld

    require_alfworld()
    import alfworld.gen.constants as constants
    import alfworld.gen.goal_library as goal_library

    return constants, goal_library


@dataclass
class Scene:
    """One sampled game before it is written out.

    Attributes:
      task_type: one of the six ALFWorld task types.
      room: the room kind's name.
      scene_num: an ALFRED-style floor plan number for the room kind.
      object_target, parent_target, toggle_target: ``pddl_params`` of ``traj_data.json``.
      receptacles: ``(id, type)`` of every receptacle.
      objects: ``(id, type, receptacle id)`` of every object.
      task_desc: the task sentence the game shows.
    """

    task_type: str
    room: str
    scene_num: int
    object_target: str
    parent_target: str
    toggle_target: str
    receptacles: list[tuple[str, str]] = field(default_factory=list)
    objects: list[tuple[str, str, str]] = field(default_factory=list)
    task_desc: str = ""

    @property
    def task_dir_name(self) -> str:
        """``<task_type>-<object>-None-<parent or toggle>-<scene>``, as ALFWorld names them."""
        last = self.parent_target or self.toggle_target
        return f"{self.task_type}-{self.object_target}-None-{last}-{self.scene_num}"

    def traj_data(self) -> dict[str, Any]:
        """The ``traj_data.json`` fields that ``alfworld`` reads."""
        return {
            "task_type": self.task_type,
            "pddl_params": {
                "object_target": self.object_target,
                "parent_target": self.parent_target,
                "toggle_target": self.toggle_target,
                "mrecep_target": "",
                "object_sliced": False,
            },
            "scene": {"floor_plan": f"FloorPlan{self.scene_num}", "scene_num": self.scene_num},
            "turk_annotations": {
                "anns": [{"task_desc": self.task_desc[:1].upper() + self.task_desc[1:] + "."}]
            },
            "generator": "gigpo_envs.alfworld.generate",
        }


def _pick(rng: np.random.Generator, items: list[Any] | tuple[Any, ...]) -> Any:
    return items[int(rng.integers(len(items)))]


def _candidates(task_type: str, room: RoomKind, receptacle_types: set[str], constants: Any):
    """(object type, parent type) pairs that make a sensible task of this type here."""
    accepts = constants.VAL_RECEPTACLE_OBJECTS
    actions = constants.VAL_ACTION_OBJECTS
    needs = {
        "pick_clean_then_place_in_recep": ("Cleanable", "SinkBasin"),
        "pick_heat_then_place_in_recep": ("Heatable", "Microwave"),
        "pick_cool_then_place_in_recep": ("Coolable", "Fridge"),
    }
    pairs = []
    for obj in room.objects:
        if not any(obj in accepts.get(r, ()) for r in receptacle_types):
            continue  # nowhere to put it in this room
        if task_type in needs:
            ability, tool = needs[task_type]
            if obj not in actions[ability] or tool not in receptacle_types:
                continue
        if task_type == "look_at_obj_in_light":
            pairs.append((obj, ""))
            continue
        for parent in sorted(receptacle_types):
            if obj not in accepts.get(parent, ()):
                continue
            if task_type in needs and parent == needs[task_type][1]:
                continue  # "heat the mug and put it in the microwave" is not an ALFWorld task
            # the object must start somewhere else
            if any(obj in accepts.get(r, ()) for r in receptacle_types if r != parent):
                pairs.append((obj, parent))
    return pairs


def sample_scene(rng: np.random.Generator, task_type: str) -> Scene:
    """Samples a room of a kind that suits ``task_type``, a task in it and its objects.

    Raises ValueError if ``task_type`` is unknown; a room that admits no task of the type is
    re-drawn (a bounded number of times).
    """
    if task_type not in TASK_ROOMS:
        raise ValueError(f"unknown ALFWorld task type {task_type!r}")
    constants, goal_library = _alfred()
    accepts = constants.VAL_RECEPTACLE_OBJECTS
    for _ in range(100):
        room = ROOM_KINDS[_pick(rng, TASK_ROOMS[task_type])]
        counts = {kind: int(rng.integers(low, high + 1)) for kind, low, high in room.receptacles}
        if task_type == "look_at_obj_in_light" and not any(counts[h] for h in room.lamp_holders):
            counts[_pick(rng, room.lamp_holders)] = 1
        receptacle_types = {kind for kind, count in counts.items() if count > 0}
        pairs = _candidates(task_type, room, receptacle_types, constants)
        if pairs:
            break
    else:
        raise RuntimeError(f"could not sample a room for {task_type}")
    obj, parent = _pick(rng, pairs)
    toggle = _LAMP if task_type == "look_at_obj_in_light" else ""

    next_id = iter(range(1, 10_000))
    receptacles: list[tuple[str, str]] = []
    for kind in sorted(counts):
        for _ in range(counts[kind]):
            base = BASIN_PARENTS.get(kind)
            rid = (
                f"{base}_bar__{next(next_id)}_bar_{kind}"
                if base
                else f"{kind}_bar__{next(next_id)}"
            )
            receptacles.append((rid, kind))

    def holders(obj_type: str, exclude: tuple[str, ...] = ()) -> list[tuple[str, str]]:
        return [
            (rid, kind)
            for rid, kind in receptacles
            if obj_type in accepts.get(kind, ()) and kind not in exclude
        ]

    tools = {"SinkBasin", "Microwave", "Fridge"}
    objects: list[tuple[str, str, str]] = []
    target_count = (
        int(rng.integers(2, 4))
        if task_type == "pick_two_obj_and_place"
        else int(rng.integers(1, 3))
    )
    for _ in range(target_count):
        rid, _kind = _pick(rng, holders(obj, exclude=(parent, *tools)) or holders(obj, (parent,)))
        objects.append((f"{obj}_bar__{next(next_id)}", obj, rid))
    if toggle:
        rid, _kind = _pick(rng, [r for r in receptacles if r[1] in room.lamp_holders])
        objects.append((f"{toggle}_bar__{next(next_id)}", toggle, rid))
    others = [o for o in room.objects if o != obj and holders(o)]
    chosen = rng.choice(len(others), size=min(len(others), int(rng.integers(6, 12))), replace=False)
    for index in sorted(int(i) for i in chosen):
        kind = others[index]
        for _ in range(int(rng.integers(1, 3))):
            rid, _k = _pick(rng, holders(kind))
            objects.append((f"{kind}_bar__{next(next_id)}", kind, rid))

    template = _pick(rng, goal_library.gdict[task_type]["templates"])
    task_desc = template.format(
        obj=obj.lower(), recep=parent.lower(), toggle=toggle.lower(), mrecep=""
    )
    return Scene(
        task_type=task_type,
        room=room.name,
        scene_num=room.scene_base + int(rng.integers(1, 31)),
        object_target=obj,
        parent_target=parent,
        toggle_target=toggle,
        receptacles=receptacles,
        objects=objects,
        task_desc=task_desc,
    )


def problem_pddl(scene: Scene, name: str) -> str:
    """Returns the PDDL problem of ``scene`` for ALFRED's domain (``alfred.pddl``)."""
    constants, goal_library = _alfred()
    static_types = set(constants.RECEPTACLES) - set(constants.MOVABLE_RECEPTACLES)
    object_types = sorted(set(constants.OBJECTS_SET) - static_types)
    receptacle_types = sorted(static_types)
    actions = constants.VAL_ACTION_OBJECTS
    accepts = constants.VAL_RECEPTACLE_OBJECTS
    locations = {rid: f"loc_bar__{index}" for index, (rid, _) in enumerate(scene.receptacles, 1)}
    start = "loc_bar__0"

    declared = ["agent1 - agent"]
    declared += [f"{t}Type - otype" for t in object_types]
    declared += [f"{t}Type - rtype" for t in receptacle_types]
    declared += [f"{oid} - object" for oid, _, _ in scene.objects]
    declared += [f"{rid} - receptacle" for rid, _ in scene.receptacles]
    declared += [f"{loc} - location" for loc in [start, *locations.values()]]

    init = [f"(atLocation agent1 {start})"]
    for rid, kind in scene.receptacles:
        init.append(f"(receptacleType {rid} {kind}Type)")
        init.append(f"(receptacleAtLocation {rid} {locations[rid]})")
        if kind in constants.OPENABLE_CLASS_SET:
            init.append(f"(openable {rid})")
    present_kinds = sorted({kind for _, kind in scene.receptacles})
    present_objects = sorted({kind for _, kind, _ in scene.objects})
    for kind in present_kinds:
        for obj_type in present_objects:
            if obj_type in accepts.get(kind, ()):
                init.append(f"(canContain {kind}Type {obj_type}Type)")
    for oid, kind, rid in scene.objects:
        init.append(f"(objectType {oid} {kind}Type)")
        init.append(f"(inReceptacle {oid} {rid})")
        init.append(f"(objectAtLocation {oid} {locations[rid]})")
        if kind == _LAMP:
            init.append(f"(toggleable {oid})")
            continue
        init.append(f"(pickupable {oid})")
        if kind in constants.MOVABLE_RECEPTACLES_SET:
            init.append(f"(isReceptacleObject {oid})")
        for ability, predicate in (
            ("Cleanable", "cleanable"),
            ("Heatable", "heatable"),
            ("Coolable", "coolable"),
            ("Sliceable", "sliceable"),
        ):
            if kind in actions[ability]:
                init.append(f"({predicate} {oid})")

    goal = goal_library.gdict[scene.task_type]["pddl"].replace("#", "-")
    goal = goal.format(
        obj=scene.object_target, recep=scene.parent_target, toggle=scene.toggle_target, mrecep=""
    )
    indent = "\n        "
    return (
        f"(define (problem {name})\n    (:domain alfred)\n"
        f"    (:objects{indent}{indent.join(declared)}\n    )\n"
        f"    (:init{indent}{indent.join(init)}\n    )\n"
        f"{goal.strip()}\n"  # ALFRED's goal text closes the define
    )
