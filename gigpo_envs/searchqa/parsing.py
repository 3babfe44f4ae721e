"""The search-agent protocol: ``<search>query</search>`` or ``<answer>text</answer>``.

One action per turn: a response with a complete search tag *and* a complete answer tag,
or with neither, is invalid. Inside a tag, whitespace is collapsed and case is kept. The
parsed action is given back in canonical form, ``<search>query</search>`` or
``<answer>text</answer>``, which is what ``info["action"]`` and the prompt history show.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gigpo_envs.parsing import ActionParser

_WHITESPACE = re.compile(r"\s+")


def _tag_pattern(name: str) -> re.Pattern[str]:
    """Matches ``<name> ... </name>`` (case and spaces inside the brackets are free)."""
    name = re.escape(name)
    return re.compile(rf"<\s*{name}\s*>(.*?)<\s*/\s*{name}\s*>", re.IGNORECASE | re.DOTALL)


@dataclass(frozen=True)
class SearchAnswerParser(ActionParser):
    """Reads one ``<search>`` or ``<answer>`` action from a model response.

    Attributes (beyond :class:`~gigpo_envs.parsing.ActionParser`'s):
      action_tag: the search tag (``search``).
      answer_tag: the answer tag (``answer``).
      max_action_chars: the longest query or answer, in characters (512).
    """

    action_tag: str = "search"
    answer_tag: str = "answer"
    max_action_chars: int = 512

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.answer_tag or self.answer_tag.lower() == self.action_tag.lower():
            raise ValueError(f"answer_tag must be a non-empty tag other than {self.action_tag!r}")
        object.__setattr__(self, "_search_pattern", _tag_pattern(self.action_tag))
        object.__setattr__(self, "_answer_pattern", _tag_pattern(self.answer_tag))

    def extract(self, response: object) -> str | None:
        """Returns ``"<search>q</search>"`` or ``"<answer>a</answer>"``, or None if invalid.

        None when ``response`` is not text, is too long, holds both a complete search and
        a complete answer or neither, the tag holds only whitespace or too many characters,
        or (with ``require_think``) no ``</think>`` comes before the tag.
        """
        if isinstance(response, bytes | bytearray):
            response = bytes(response).decode("utf-8", errors="replace")
        if not isinstance(response, str) or len(response) > self.max_response_chars:
            return None
        search = self._search_pattern.search(response)  # type: ignore[attr-defined]
        answer = self._answer_pattern.search(response)  # type: ignore[attr-defined]
        if (search is None) == (answer is None):
            return None
        match, tag = (search, self.action_tag) if search is not None else (answer, self.answer_tag)
        if self.require_think and self._think_close.search(response, 0, match.start()) is None:  # type: ignore[attr-defined]
            return None
        text = match.group(1)
        if len(text) > self.max_action_chars:
            return None
        text = _WHITESPACE.sub(" ", text).strip()
        return f"<{tag}>{text}</{tag}>" if text else None

    def split(self, action: str) -> tuple[str, str] | None:
        """Splits a canonical action into ``("search" | "answer", text)``; None if it is not one."""
        for kind, tag in (("search", self.action_tag), ("answer", self.answer_tag)):
            opening, closing = f"<{tag}>", f"</{tag}>"
            if action.startswith(opening) and action.endswith(closing):
                text = action[len(opening) : -len(closing)]
                if text and text == text.strip():
                    return kind, text
        return None

    def format_example(self, action: str) -> str:
        """Returns ``action`` as a model should write it (a search unless already tagged)."""
        if self.split(action) is not None:
            return action
        return f"<{self.action_tag}>{action}</{self.action_tag}>"


DEFAULT_SEARCH_PARSER = SearchAnswerParser()
