"""What every command line of ``training`` shares (``gigpo-train``, ``gigpo-quickstart``,
``gigpo-view``, ``gigpo-evaluate``, ``gigpo-export``, ``python -m training.study`` and the
launchers ``gigpo-openrlhf`` and ``gigpo-verl``):

- an error is one line, ``PROG: error: MESSAGE``, and exit status 2; an error in the
  arguments themselves adds one hint line, ``run 'PROG --help' for usage``. The usage is
  printed on ``--help`` only (:class:`CommandParser`);
- ``PROG`` is the program as it was typed: a console script's name (``gigpo-train``), else
  the ``python -m`` form (``python -m training.local``) (:func:`invoked_as`);
- Ctrl-C ends a command with one line that says what was kept and how to go on, and exit
  status 130, never a traceback (:func:`interrupted`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import NoReturn

__all__ = ["CONSOLE_SCRIPTS", "INTERRUPTED", "CommandParser", "interrupted", "invoked_as"]

#: The console scripts of pyproject.toml's ``[project.scripts]``.
CONSOLE_SCRIPTS = frozenset(
    {"gigpo-train", "gigpo-quickstart", "gigpo-view", "gigpo-evaluate", "gigpo-export",
     "gigpo-openrlhf", "gigpo-verl"}
)  # fmt: skip
#: The exit status of a command that Ctrl-C ended: 128 + SIGINT, as a shell reports it.
INTERRUPTED = 130


def invoked_as(module: str) -> str:
    """The name of ``module``'s command as the user ran it: the console script's name when
    ``sys.argv[0]`` is one of :data:`CONSOLE_SCRIPTS` (``gigpo-train``), else
    ``python -m module`` (``module`` is the one a user types: ``training.local``)."""
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    name = name.removesuffix(".exe").removesuffix("-script.py")
    return name if name in CONSOLE_SCRIPTS else f"python -m {module}"


class CommandParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line (and a hint), exit status 2: the usage
    is printed on ``--help`` only. Its subparsers are of this class too."""

    def error(self, message: str) -> NoReturn:
        """An error in the arguments: ``PROG: error: MESSAGE`` and the hint line, exit 2."""
        self.exit(2, f"{self.prog}: error: {message}\nrun '{self.prog} --help' for usage\n")

    def fail(self, message: str) -> NoReturn:
        """A refusal once the arguments are read (a config key, a folder): ``PROG: error:
        MESSAGE`` alone, exit 2."""
        self.exit(2, f"{self.prog}: error: {message}\n")


def interrupted(prog: str, kept: str) -> int:
    """Prints ``PROG: interrupted: KEPT`` (what Ctrl-C left and how to go on) on stderr;
    returns :data:`INTERRUPTED`, the exit status."""
    print(f"{prog}: interrupted: {kept}", file=sys.stderr, flush=True)
    return INTERRUPTED
