"""Python code run in a child process held to a memory bound and a time limit: a check that
something huge (/dev/zero, a billion products) is refused fails there, rather than taking
the machine's memory or hanging the test run."""

from __future__ import annotations

import resource
import subprocess
import sys


def run_capped(
    code: str, *args: str, memory_bytes: int = 1 << 30, timeout_s: float = 30
) -> subprocess.CompletedProcess:
    """``python -c code *args`` with its address space bounded to ``memory_bytes``; its
    output captured as text. Raises ``subprocess.TimeoutExpired`` past ``timeout_s``."""

    def bound() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))

    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True, text=True, timeout=timeout_s, preexec_fn=bound,
    )  # fmt: skip
