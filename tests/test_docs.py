"""The README is a short front door, the docs/ pages hold the rest, and every link resolves.

docs/ holds the user guides, one per way of use, each short; docs/notes/ (with the study,
the benchmarks, the design and the security pages) holds the why, the test trail and where
each number comes from. docs/README.md lists every page."""

from __future__ import annotations

import re

import pytest
from doc_blocks import REPO, section_text

PAGES = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").rglob("*.md"))
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
#: The pages a user must read: what to run and what comes out, for each way of use.
GUIDES = [
    "docs/environments.md", "docs/webshop.md", "docs/searchqa.md", "docs/alfworld.md",
    "docs/retrieval.md", "docs/library.md", "docs/training.md", "docs/openrlhf.md",
    "docs/verl.md", "docs/evaluation.md",
]  # fmt: skip
#: A guide stays short: at most this many lines.
GUIDE_LINES = 200


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
    for page in ["docs/README.md", *GUIDES]:  # every guide, and the index, from the README
        assert f"({page})" in readme, page


def test_the_install_block_pins_the_cpu_build_that_ci_tests():
    # tox pins the CPU wheel for CI; the README's first install line must pin the same one
    # from PyTorch's CPU index, or a CPU box resolves the newest torch and its CUDA wheels
    pin = re.search(r"deps = torch==([0-9.]+)", (REPO / "tox.ini").read_text()).group(1)
    install = section_text("README.md", "Install")
    block = re.search(r"```bash\n(.*?)```", install, re.S).group(1).splitlines()
    assert block[0].startswith(
        f"pip install torch=={pin} --index-url https://download.pytorch.org/whl/cpu"
    ), block
    assert block[1].startswith('pip install -e ".[train]"')
    assert "pytorch.org/get-started" in install  # and what GPU users run instead


def test_the_docs_index_lists_every_page():
    index = section_text("docs/README.md")
    for page in PAGES:
        if page != "docs/README.md":
            assert f"({page.removeprefix('docs/')})" in index, page


@pytest.mark.parametrize("page", GUIDES)
def test_a_guide_is_short(page):
    lines = len((REPO / page).read_text().splitlines())
    # Past the bound: the why, the test trail and where numbers come from go to docs/notes/.
    assert lines <= GUIDE_LINES, f"{page}: {lines} lines"


def test_every_guide_and_note_exists():
    assert set(GUIDES) <= set(PAGES)
    assert any(page.startswith("docs/notes/") for page in PAGES)


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
    every docs/ page (and ``page.md#section``) a docstring or script cites exists."""
    for path in REPO.rglob("*"):
        if path.suffix not in {".py", ".md", ".toml", ".ini", ".sh", ".yaml", ".cfg"}:
            continue
        if any(part.startswith(".") or part in {"runs", "build"} for part in path.parts):
            continue
        if "egg-info" in str(path) or path.name == "test_docs.py":
            continue
        text = path.read_text(errors="replace")
        assert "../shared" not in text and "DESIGN.md" not in text, path
        for cited, anchor in re.findall(r"\b(docs/[\w\-/]+\.md)(?:#([\w\-]+))?", text):
            assert (REPO / cited).is_file(), f"{path} cites {cited}"
            assert not anchor or anchor in _anchors(cited), f"{path} cites {cited}#{anchor}"


def test_every_data_sample_folder_says_where_it_comes_from():
    folders = [p for p in (REPO / "data" / "samples").iterdir() if p.is_dir()]
    assert {p.name for p in folders} >= {"searchqa", "webshop", "alfworld"}
    for folder in folders:
        readme = (folder / "README.md").read_text().lower()
        assert "license" in readme and "source" in readme and "cut" in readme, folder
