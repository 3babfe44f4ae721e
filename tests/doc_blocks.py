"""The code examples of the README and the docs/ pages, for the tests that run them."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def section_text(page: str, section: str | None = None) -> str:
    """The text of ``page`` (a path from the repository root), or of one of its sections.

    ``section`` is the start of a heading's text; the section runs to the next heading of the
    same or a higher level (lines inside code fences are never headings). Fails loudly if
    the heading is gone, so that a test follows the text when it moves.
    """
    lines = (REPO / page).read_text().splitlines(keepends=True)
    if section is None:
        return "".join(lines)
    start = level = None
    in_fence = False
    for i, line in enumerate(lines):
        if line.startswith("```"):
            in_fence = not in_fence
            continue
        heading = None if in_fence else re.match(r"(#+) (.*)", line)
        if heading is None:
            continue
        if start is None and heading.group(2).startswith(section):
            start, level = i, len(heading.group(1))
        elif start is not None and len(heading.group(1)) <= level:
            return "".join(lines[start:i])
    if start is None:
        raise AssertionError(f"{page} has no heading starting with {section!r}")
    return "".join(lines[start:])


def code_blocks(page: str, section: str | None = None, language: str = "python") -> list[str]:
    """The ``language`` code blocks of ``page`` (or of one section of it), in order."""
    return re.findall(rf"```{language}\n(.*?)```", section_text(page, section), re.DOTALL)
