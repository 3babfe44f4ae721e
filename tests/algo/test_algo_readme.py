"""The README's gigpo_algo example runs and prints what it says."""

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_advantages_example_runs():
    text = README.read_text()
    section = text[text.index("## Advantages (`gigpo_algo`)") :]
    blocks = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    assert blocks, "the Advantages section has no python example"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(blocks[0], "README.md", "exec"), {})
    lines = out.getvalue().splitlines()
    assert lines[0] == "[0 1 2 0 1]"
    # The winning rollout's rows have positive advantages, the losing rollout's negative.
    values = [float(x) for x in lines[1].strip("[]").split()]
    assert all(v > 0 for v in values[:3]) and all(v < 0 for v in values[3:])
