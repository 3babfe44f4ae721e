"""The exit status of a command's ``main``, whether it returns it or raises SystemExit (as
argparse and ``CommandParser.fail`` do): one helper for the command-line tests."""

from __future__ import annotations

from collections.abc import Callable


def exit_code(main: Callable[[list[str]], int], argv: list[str]) -> int | str | None:
    """``main(argv)``'s return value, or the code of the SystemExit it raised."""
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code
