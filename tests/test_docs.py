"""The README is a short front door, the docs/ pages hold the rest, and every link resolves."""

from __future__ import annotations

import re

import pytest
from doc_blocks import REPO, section_text

PAGES = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md"))
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: str) -> set[str]:
    text = section_text(page)
    text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    return {_slug(h) for h in re.findall(r"^#+ (.*)$", text, re.MULTILINE)}


def test_slugs_follow_githubs_rule():
    assert _slug("1. An environment (`gigpo_envs`)") == "1-an-environment-gigpo_envs"
    assert _slug("GiGPO against GRPO and RLOO: the estimator study") == (
        "gigpo-against-grpo-and-rloo-the-estimator-study"
    )


def test_readme_is_a_front_door():
    lines = (REPO / "README.md").read_text().splitlines()
    assert 100 <= len(lines) <= 170, len(lines)
    readme = "\n".join(lines)
    for page in PAGES:  # every docs page is reachable from the README
        assert f"({page})" in readme, page


@pytest.mark.parametrize("page", ["README.md", *PAGES, "data/samples/README.md"])
def test_every_relative_link_resolves(page):
    text = re.sub(r"```.*?```", "", section_text(page), flags=re.DOTALL)
    base = (REPO / page).parent
    for target in LINK.findall(text):
        if re.match(r"[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        resolved = (base / path).resolve() if path else REPO / page
        assert resolved.exists(), f"{page}: broken link {target}"
        if anchor and resolved.suffix == ".md":
            assert anchor in _anchors(resolved.relative_to(REPO).as_posix()), (
                f"{page}: no heading for {target}"
            )


def test_the_clone_stands_alone():
    """Nothing points outside the repository: no ../shared data, no DESIGN.md beside it, and
    every docs/ page a docstring or script cites exists."""
    for path in REPO.rglob("*"):
        if path.suffix not in {".py", ".md", ".toml", ".ini", ".sh", ".yaml", ".cfg"}:
            continue
        if any(part.startswith(".") or part in {"runs", "build"} for part in path.parts):
            continue
        if "egg-info" in str(path) or path.name == "test_docs.py":
            continue
        text = path.read_text(errors="replace")
        assert "../shared" not in text and "DESIGN.md" not in text, path
        for cited in re.findall(r"\bdocs/[\w\-]+\.md", text):
            assert (REPO / cited).is_file(), f"{path} cites {cited}"


def test_every_data_sample_folder_says_where_it_comes_from():
    folders = [p for p in (REPO / "data" / "samples").iterdir() if p.is_dir()]
    assert {p.name for p in folders} >= {"searchqa", "webshop", "alfworld"}
    for folder in folders:
        readme = (folder / "README.md").read_text().lower()
        assert "license" in readme and "source" in readme and "cut" in readme, folder
