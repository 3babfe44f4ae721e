"""The gigpo_algo example of the README and of docs/algorithm.md runs and prints what it says."""

import contextlib
import io

import pytest
from doc_blocks import code_blocks


def _advantages_example(page: str, section: str | None) -> str:
    blocks = [b for b in code_blocks(page, section) if "gigpo_advantages(" in b]
    assert blocks, f"{page} has no gigpo_advantages example"
    return blocks[0]


@pytest.mark.parametrize(
    ("page", "section"), [("README.md", None), ("docs/algorithm.md", "The functions")]
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
