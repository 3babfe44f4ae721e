"""Anchor states of ALFWorld games, read from TextWorld's facts instead of the feedback text.

TextWorld keeps an ALFWorld game as a set of PDDL facts such as ``atlocation(agent1, loc 3)``
or ``inreceptacle(cd 1, desk 1)``. The *mutable* facts (where the agent is, what it holds,
which receptacles are open, where every object is, which objects are clean, hot, cool,
sliced, on or toggled) fully determine what every later action does and shows, so they are
the state. Facts that only record history (``checked``, ``examined``, ``wasinreceptacle``)
change no precondition, no feedback and no goal, and are left out: examining a desk twice
does not create a new state.

Grouping on these facts differs from grouping on the raw observation (what some GiGPO
implementations do): "Nothing happens." after a useless action at the desk and at the
fridge are two different states here but one observation there, and the same room reached
by two different routes is one state here even when the two arrival texts differ (e.g. "You
arrive at desk 1. ..." versus "You close the drawer 1.").
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

#: Predicates that can change during a game (lower-case, as TextWorld reports them).
MUTABLE_PREDICATES = frozenset(
    {
        "atlocation",
        "holds",
        "holdsany",
        "holdsanyreceptacleobject",
        "opened",
        "inreceptacle",
        "inreceptacleobject",
        "isreceptacleobjectfull",
        "objectatlocation",
        "full",
        "isclean",
        "ishot",
        "iscool",
        "issliced",
        "ison",
        "istoggled",
    }
)
_OBJECT_STATES = (
    ("isclean", "clean"),
    ("ishot", "hot"),
    ("iscool", "cool"),
    ("issliced", "sliced"),
    ("ison", "on"),
    ("istoggled", "toggled"),
)


def fact_strings(facts: Iterable[Any]) -> list[tuple[str, tuple[str, ...]]]:
    """Returns ``(predicate, argument names)`` of TextWorld propositions, in a stable order."""
    return sorted(
        (str(fact.name).lower(), tuple(str(arg.name).strip() for arg in fact.arguments))
        for fact in facts
    )


def mutable_facts(facts: list[tuple[str, tuple[str, ...]]]) -> list[str]:
    """Returns the mutable facts as sorted strings ``"predicate(arg1, arg2)"``."""
    return sorted(
        f"{name}({', '.join(args)})" for name, args in facts if name in MUTABLE_PREDICATES
    )


class RoomLayout:
    """The static part of a game that the state text needs: receptacles and their places.

    Args:
      facts: ``fact_strings`` of any state of the game (static facts never change).
    """

    def __init__(self, facts: list[tuple[str, tuple[str, ...]]]) -> None:
        self.receptacle_at: dict[str, str] = {}
        self.openable: set[str] = set()
        for name, args in facts:
            if name == "receptacleatlocation" and len(args) == 2:
                self.receptacle_at.setdefault(args[1], args[0])
            elif name == "openable" and len(args) == 1:
                self.openable.add(args[0])
        self.receptacles = sorted(set(self.receptacle_at.values()))

    def describe(self, facts: list[tuple[str, tuple[str, ...]]]) -> str:
        """Returns the state as text: place, hands, receptacles with contents, object states.

        One line per receptacle, in name order, so two states differ in few lines when they
        differ in few facts (what similarity grouping needs).
        """
        location, held, opened = None, [], set()
        contents: dict[str, list[str]] = {}
        states: dict[str, list[str]] = {}
        labels = dict(_OBJECT_STATES)
        for name, args in facts:
            if name == "atlocation" and len(args) == 2:
                location = args[1]
            elif name == "holds" and len(args) == 2:
                held.append(args[1])
            elif name == "opened" and args:
                opened.add(args[0])
            elif name == "inreceptacle" and len(args) == 2:
                contents.setdefault(args[1], []).append(args[0])
            elif name in labels and args:
                states.setdefault(args[0], []).append(labels[name])

        def item(obj: str) -> str:
            return f"{obj} ({', '.join(states[obj])})" if obj in states else obj

        where = self.receptacle_at.get(location or "")
        lines = [
            f"You are at {where}." if where else "You are in the middle of the room.",
            f"You hold {', '.join(item(o) for o in sorted(held))}."
            if held
            else "You hold nothing.",
        ]
        for receptacle in self.receptacles:
            status = ""
            if receptacle in self.openable:
                status = " (open)" if receptacle in opened else " (closed)"
            inside = ", ".join(item(o) for o in sorted(contents.get(receptacle, []))) or "nothing"
            lines.append(f"{receptacle}{status}: {inside}")
        return "\n".join(lines)
