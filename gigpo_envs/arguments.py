"""Checks of the arguments every gigpo environment takes: one rule, written once.

The environments check each constructor argument and each ``reset`` seed with these
functions, so a value of the wrong type is an error that names the argument instead of a
silent coercion (``max_steps=1.5`` is not 1, ``num_boxes="1"`` is not 1, ``natural="yes"``
is not True). The rules:

* an int is an ``int`` or a numpy integer, never a ``bool`` (``True`` is not 1);
* a float is an int, a float or a numpy number (never a ``bool``), and finite;
* a bool is a ``bool`` or a ``numpy.bool_``;
* a string is a ``str``; a path is a ``str`` or an ``os.PathLike``.

A value of the wrong type raises :class:`ArgumentTypeError` (a ``TypeError``, and a
``ValueError`` too, so callers that caught ``ValueError`` for bad arguments keep working); a
value of the right type outside its range raises ``ValueError``. Both messages name the
argument, what it must be and the type of the value given, which is shown cut to
:data:`SHOWN_CHARS` characters (a huge int or string is never printed whole).

Seeds: an episode seed is an int in ``0 .. SEED_MAX`` (``2**63 - 1``). numpy would take any
non-negative int, but ``state_dict()`` stores the seed as a plain JSON number and the vector
env keeps seeds in int64 arrays, so the range is the one every reader can hold; the derived
seeds of :func:`~gigpo_envs.base.next_episode_seed` and fresh OS entropy are 63-bit too, so
every seed an env accepts round-trips through ``load_state_dict(state_dict())``.
"""

from __future__ import annotations

import math
import os
import reprlib
from collections.abc import Collection
from typing import Any

import numpy as np

#: The largest episode seed: seeds are ints in ``0 .. SEED_MAX``.
SEED_MAX = 2**63 - 1
#: The largest ``max_steps`` of any environment: a million turns is far beyond any model's
#: context, so a larger value is a typo (``max_steps`` itself allocates nothing).
MAX_STEPS_LIMIT = 1_000_000
#: At most this many characters of a bad value are shown in an error message.
SHOWN_CHARS = 60

_REAL_TYPES = (int, float, np.integer, np.floating)
_REPR = reprlib.Repr()
_REPR.maxstring = SHOWN_CHARS
_REPR.maxother = SHOWN_CHARS
_REPR.maxlong = SHOWN_CHARS


#: The longest message of an :class:`ArgumentTypeError`.
MAX_MESSAGE_CHARS = 500


class ArgumentTypeError(TypeError, ValueError):
    """An argument of the wrong type; a ``TypeError`` that is also a ``ValueError``.

    Its message is cut to :data:`MAX_MESSAGE_CHARS`: ``gymnasium.make`` re-raises a
    ``TypeError`` from an env's constructor as the same type with every keyword argument's
    ``repr`` appended, which would print a huge value whole.
    """

    def __init__(self, message: str) -> None:
        if len(message) > MAX_MESSAGE_CHARS:
            message = message[: MAX_MESSAGE_CHARS - 3] + "..."
        super().__init__(message)


def describe(value: Any) -> str:
    """Returns ``"<type name> <value>"`` for an error message, the value cut short.

    Safe on any value: a huge int is shown by its size (Python refuses to print ints of more
    than 4300 digits), a long string by its first characters, and an object whose ``repr``
    fails by its type alone.
    """
    type_name = type(value).__name__
    if isinstance(value, int | np.integer) and not isinstance(value, bool):
        number = int(value)
        if number.bit_length() > 4 * SHOWN_CHARS:
            return f"{type_name} of {number.bit_length()} bits"
        text = str(number)
    elif isinstance(value, str | bytes):
        text = repr(value[: SHOWN_CHARS + 1])
    else:
        try:
            text = _REPR.repr(value)
        except Exception:  # a broken __repr__ must not hide the argument error
            return f"{type_name} object"
    if len(text) > SHOWN_CHARS:
        text = text[: SHOWN_CHARS - 3] + "..."
    return f"{type_name} {text}"


def _is_int(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def _range_text(low: float | None, high: float | None) -> str:
    if low is not None and high is not None:
        return f"in [{low}, {high}]"
    if low is not None:
        return f">= {low}"
    return f"<= {high}"


def check_type(name: str, value: Any, types: type | tuple[type, ...], expected: str) -> Any:
    """Returns ``value`` if it is an instance of ``types``; else raises ArgumentTypeError.

    Args:
      name: the argument's name, as the caller wrote it.
      value: the value given.
      types: what ``isinstance`` must accept.
      expected: how the message names the expected type (``"a dict or None"``).
    """
    if not isinstance(value, types):
        raise ArgumentTypeError(f"{name} must be {expected}, got {describe(value)}")
    return value


def check_int(name: str, value: Any, low: int | None = None, high: int | None = None) -> int:
    """Returns ``value`` as an ``int`` after checking that it is one, in ``[low, high]``.

    Raises ArgumentTypeError for a bool, float, string or anything else that is not an int,
    and ``ValueError`` for an int outside ``[low, high]`` (a bound that is None is open).
    """
    if not _is_int(value):
        raise ArgumentTypeError(f"{name} must be an int, got {describe(value)}")
    number = int(value)
    if (low is not None and number < low) or (high is not None and number > high):
        raise ValueError(f"{name} must be an int {_range_text(low, high)}, got {describe(value)}")
    return number


def check_float(
    name: str, value: Any, low: float | None = None, high: float | None = None
) -> float:
    """Returns ``value`` as a finite ``float`` in ``[low, high]``.

    Ints and numpy numbers are accepted, bools are not (ArgumentTypeError); NaN, infinities
    and values outside the range raise ``ValueError``.
    """
    if isinstance(value, bool | np.bool_) or not isinstance(value, _REAL_TYPES):
        raise ArgumentTypeError(f"{name} must be a float, got {describe(value)}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf  # an int too large for a float is not a finite number
    if not math.isfinite(number):
        raise ValueError(f"{name} must be a finite float, got {describe(value)}")
    if (low is not None and number < low) or (high is not None and number > high):
        raise ValueError(f"{name} must be a float {_range_text(low, high)}, got {describe(value)}")
    return number


def check_bool(name: str, value: Any) -> bool:
    """Returns ``value`` as a ``bool``; anything but a bool raises ArgumentTypeError."""
    if not isinstance(value, bool | np.bool_):
        raise ArgumentTypeError(f"{name} must be a bool, got {describe(value)}")
    return bool(value)


def check_str(name: str, value: Any, choices: Collection[str] | None = None) -> str:
    """Returns ``value`` after checking that it is a ``str`` (one of ``choices`` if given)."""
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{name} must be a str, got {describe(value)}")
    if choices is not None and value not in choices:
        raise ValueError(f"{name} must be one of {sorted(choices)}, got {describe(value)}")
    return value


def check_path(name: str, value: Any) -> str | os.PathLike[str]:
    """Returns ``value`` after checking that it is a ``str`` or an ``os.PathLike``."""
    return check_type(name, value, (str, os.PathLike), "a str or os.PathLike path")


def check_seed(value: Any, name: str = "seed") -> int:
    """Returns an episode seed as an ``int`` in ``0 .. SEED_MAX`` (``2**63 - 1``).

    A bool, float or string raises ArgumentTypeError; an int outside the range raises
    ``ValueError`` that names the seed and the range.
    """
    if not _is_int(value):
        raise ArgumentTypeError(f"{name} must be an int, got {describe(value)}")
    seed = int(value)
    if not 0 <= seed <= SEED_MAX:
        raise ValueError(
            f"{name} must be an int in [0, 2**63 - 1] (0 .. {SEED_MAX}), got {describe(value)}"
        )
    return seed
