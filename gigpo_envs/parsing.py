"""The action protocol: from the raw text a language model wrote to the text of one action.

By default a response follows ``<think>...</think><action>...</action>``. Parsing is tolerant of
case and whitespace inside the tags (``< Action >``, ``</ACTION >``), the first action tag wins,
and any text at all parses to either an action string or ``None``; it never raises.

Mapping the extracted text onto a game's actions is the environment's job (see
:meth:`gigpo_envs.base.TextEnv.parse_game_action`); this module only finds the text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_MAX_RESPONSE_CHARS = 8192
DEFAULT_MAX_ACTION_CHARS = 256

_WHITESPACE = re.compile(r"\s+")


def _open_tag(name: str) -> re.Pattern[str]:
    return re.compile(r"<\s*" + re.escape(name) + r"\s*>", re.IGNORECASE)


def _close_tag(name: str) -> re.Pattern[str]:
    return re.compile(r"<\s*/\s*" + re.escape(name) + r"\s*>", re.IGNORECASE)


def normalize_action_text(text: str) -> str:
    """Lower-cases ``text``, trims it and collapses inner whitespace to single spaces.

    Surrounding quotes, backticks and a trailing full stop are dropped too, so that
    ``' "Up." '`` and ``'up'`` name the same action.
    """
    text = _WHITESPACE.sub(" ", text).strip().strip("\"'`").strip()
    if text.endswith(".") and len(text) > 1:
        text = text[:-1].rstrip()
    return text.lower()


@dataclass(frozen=True)
class ActionParser:
    """Extracts the action text from a model response.

    Attributes:
      action_tag: name of the tag that holds the action (``action``).
      think_tag: name of the reasoning tag (``think``); only checked when ``require_think``.
      require_think: if True, a response without a closed think block before the action is
        invalid (the strict form of the protocol that some trainers use).
      allow_bare: if True, a response with no action tag at all is taken whole as the action
        (handy for people typing at a terminal). Off by default: a model must use the tags.
      max_response_chars: responses longer than this many characters are invalid, unread.
      max_action_chars: action texts longer than this many characters are invalid.
    """

    action_tag: str = "action"
    think_tag: str = "think"
    require_think: bool = False
    allow_bare: bool = False
    max_response_chars: int = DEFAULT_MAX_RESPONSE_CHARS
    max_action_chars: int = DEFAULT_MAX_ACTION_CHARS

    def __post_init__(self) -> None:
        if not self.action_tag or not isinstance(self.action_tag, str):
            raise ValueError(f"action_tag must be a non-empty string, got {self.action_tag!r}")
        if self.max_response_chars < 1 or self.max_action_chars < 1:
            raise ValueError(
                "max_response_chars and max_action_chars must be positive, got "
                f"{self.max_response_chars} and {self.max_action_chars}"
            )
        # Compiled once per parser; a frozen dataclass still allows object.__setattr__.
        object.__setattr__(self, "_action_open", _open_tag(self.action_tag))
        object.__setattr__(self, "_action_close", _close_tag(self.action_tag))
        object.__setattr__(self, "_think_close", _close_tag(self.think_tag))

    def extract(self, response: object) -> str | None:
        """Returns the normalized action text of ``response``, or None if there is none.

        Args:
          response: what the model wrote; anything that is not ``str`` (or UTF-8 ``bytes``)
            gives None.

        Returns:
          The text between the first opening action tag and the next closing one, passed
          through :func:`normalize_action_text`; None when the response is not a string, is
          too long, has no complete action tag, or has an empty or too long action.
        """
        if isinstance(response, bytes | bytearray):
            response = bytes(response).decode("utf-8", errors="replace")
        if not isinstance(response, str) or len(response) > self.max_response_chars:
            return None
        opening = self._action_open.search(response)  # type: ignore[attr-defined]
        if opening is None:
            if self.allow_bare and "<" not in response:
                return self._finish(response)
            return None
        if self.require_think:
            think_end = self._think_close.search(response, 0, opening.start())  # type: ignore[attr-defined]
            if think_end is None:
                return None
        closing = self._action_close.search(response, opening.end())  # type: ignore[attr-defined]
        if closing is None:
            return None
        return self._finish(response[opening.end() : closing.start()])

    def _finish(self, text: str) -> str | None:
        if len(text) > self.max_action_chars:
            return None
        text = normalize_action_text(text)
        return text or None

    def format_example(self, action: str) -> str:
        """Returns ``action`` wrapped in this parser's action tags, as a model should write it."""
        return f"<{self.action_tag}>{action}</{self.action_tag}>"


DEFAULT_PARSER = ActionParser()
