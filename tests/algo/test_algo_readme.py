"""The gigpo_algo example of the README and of docs/library.md runs and prints what it says."""

import contextlib
import io

import pytest
from doc_blocks import code_blocks


def _advantages_example(page: str, section: str | None) -> str:
    blocks = [b for b in code_blocks(page, section) if "gigpo_advantages(" in b]
    assert blocks, f"{page} has no gigpo_advantages example"
    return blocks[0]


@pytest.mark.parametrize(
    ("page", "section"), [("README.md", None), ("docs/library.md", "The functions")]
)
def test_advantages_example_runs(page, section):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(_advantages_example(page, section), page, "exec"), {})
    lines = out.getvalue().splitlines()
    assert lines[0] == "[0 1 2 0 1]"
    # The winning rollout's rows have positive advantages, the losing rollout's negative.
    values = [float(x) for x in lines[1].strip("[]").split()]
    assert all(v > 0 for v in values[:3]) and all(v < 0 for v in values[3:])


def test_family_example_runs_and_prints_what_it_says():
    blocks = [
        b
        for b in code_blocks("docs/library.md", "The family: HGPO and GraphGPO")
        if "graphgpo_advantages(" in b
    ]
    assert blocks, "docs/library.md has no family example"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(blocks[0], "docs/library.md", "exec"), {})
    text = out.getvalue()
    # k = 1 sizes: s0 x3, s1 x3, s2, s3, s1 ...; k = 2 needs a previous state.
    assert text.splitlines()[0].startswith("[[3 3 1 3 1 3 3 3]")
    assert text.splitlines()[-1] == "[2. 1. 0. 3. 2. 4. 2. 4.]"
    # The comment in the example says what the last line prints.
    assert "[2. 1. 0. 3. 2. 4. 2. 4.]" in blocks[0]
