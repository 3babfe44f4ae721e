"""Bounded text: values shown in error messages, and texts saved in step-record files; the
close match an error about an unknown name suggests.

Neither ever builds more than a bounded amount of text, however large its input.
"""

from __future__ import annotations

import difflib
import reprlib
from collections.abc import Iterable
from typing import Any

_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother = 3, 80, 80
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxdict = _SHORT.maxset = 6


def show(value: Any) -> str:
    """A ``repr`` of ``value`` for an error message, cut short: at most a few levels, items
    and ~80 characters a string, however large the value (it never builds the whole repr)."""
    return _SHORT.repr(value)


def bound_text(text: Any, max_chars: int) -> str:
    """``text`` as a string of at most ``max_chars`` characters plus a marker of what was cut
    (``" ... [+N chars]"``); ``max_chars <= 0`` keeps it whole, None is ``""``."""
    text = "" if text is None else str(text)
    if max_chars <= 0 or len(text) <= max_chars:
        return text
    return f"{text[:max_chars]} ... [+{len(text) - max_chars} chars]"


def did_you_mean(name: Any, known: Iterable[str], prefix: str = "") -> str:
    """``"; did you mean PREFIX+X?"`` for the name of ``known`` closest to ``name``
    (:func:`difflib.get_close_matches`, its default cutoff), else ``""``: the tail of an error
    about an unknown key or section. A name over 100 characters gets no suggestion."""
    if not isinstance(name, str) or len(name) > 100:
        return ""
    match = difflib.get_close_matches(name, list(known), n=1)
    return f"; did you mean {prefix}{match[0]}?" if match else ""
