"""The search-agent protocol: ``<search>query</search>`` or ``<answer>text</answer>``.

Two protocols (``SearchAnswerParser.protocol``):

* ``"search-r1"`` (the default), Search-R1's own reading (``postprocess_predictions`` in its
  ``generation.py``): the first complete ``<search>...</search>`` or ``<answer>...</answer>``
  in the response is the action, whatever follows; tags are lower case as written there;
  the text inside is stripped of surrounding whitespace and otherwise kept (an empty search
  is a search for nothing, which finds nothing). No tag at all is invalid.
* ``"strict"``: one action per turn: a response with a complete search tag *and* a complete
  answer tag, or with neither, is invalid; tags may have any case and inner spaces; inside,
  whitespace is collapsed; an empty tag is invalid.

The parsed action is given back in canonical form, ``<search>query</search>`` or
``<answer>text</answer>``, which is what ``info["action"]`` and the prompt history show.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gigpo_envs.parsing import ActionParser

_WHITESPACE = re.compile(r"\s+")
PROTOCOLS = ("search-r1", "strict")


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
      protocol: ``"search-r1"`` (first complete tag wins) or ``"strict"`` (exactly one).
    """

    action_tag: str = "search"
    answer_tag: str = "answer"
    max_action_chars: int = 512
    protocol: str = "search-r1"

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.answer_tag or self.answer_tag.lower() == self.action_tag.lower():
            raise ValueError(f"answer_tag must be a non-empty tag other than {self.action_tag!r}")
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {PROTOCOLS}, got {self.protocol!r}")
        object.__setattr__(self, "_search_pattern", _tag_pattern(self.action_tag))
        object.__setattr__(self, "_answer_pattern", _tag_pattern(self.answer_tag))
        tags = f"{re.escape(self.action_tag)}|{re.escape(self.answer_tag)}"
        object.__setattr__(self, "_first_tag", re.compile(rf"<({tags})>(.*?)</\1>", re.DOTALL))

    def extract(self, response: object) -> str | None:
        """Returns ``"<search>q</search>"`` or ``"<answer>a</answer>"``, or None if invalid.

        None when ``response`` is not text or is too long, has no complete tag, the text
        inside is too long, (``strict``) holds both a search and an answer or an empty tag,
        or (with ``require_think``) no ``</think>`` comes before the tag.
        """
        if isinstance(response, bytes | bytearray):
            response = bytes(response).decode("utf-8", errors="replace")
        if not isinstance(response, str) or len(response) > self.max_response_chars:
            return None
        if self.protocol == "search-r1":
            match = self._first_tag.search(response)  # type: ignore[attr-defined]
            if match is None:
                return None
            tag, text = match.group(1), match.group(2).strip()
        else:
            search = self._search_pattern.search(response)  # type: ignore[attr-defined]
            answer = self._answer_pattern.search(response)  # type: ignore[attr-defined]
            if (search is None) == (answer is None):
                return None
            match = search if search is not None else answer
            tag = self.action_tag if search is not None else self.answer_tag
            text = _WHITESPACE.sub(" ", match.group(1)).strip()
            if not text:
                return None
        if self.require_think and self._think_close.search(response, 0, match.start()) is None:  # type: ignore[attr-defined]
            return None
        if len(text) > self.max_action_chars:
            return None
        return f"<{tag}>{text}</{tag}>"

    def split(self, action: str) -> tuple[str, str] | None:
        """Splits a canonical action into ``("search" | "answer", text)``; None if it is not one."""
        for kind, tag in (("search", self.action_tag), ("answer", self.answer_tag)):
            opening, closing = f"<{tag}>", f"</{tag}>"
            if action.startswith(opening) and action.endswith(closing):
                text = action[len(opening) : -len(closing)]
                if text == text.strip() and (text or self.protocol == "search-r1"):
                    return kind, text
        return None

    def format_example(self, action: str) -> str:
        """Returns ``action`` as a model should write it (a search unless already tagged)."""
        if self.split(action) is not None:
            return action
        return f"<{self.action_tag}>{action}</{self.action_tag}>"


DEFAULT_SEARCH_PARSER = SearchAnswerParser()
