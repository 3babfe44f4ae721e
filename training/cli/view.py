"""``gigpo-view`` (``python -m training.cli.view RUN_DIR``): a run's rollouts and curves as one
static HTML page, written as ``RUN_DIR/view.html`` (or ``-o``, never inside a run or another
gigpo command's folder) and, with ``--serve``, served on 127.0.0.1. The page is
:mod:`training.viewer` (read :mod:`training.viewer.page` first)."""

from __future__ import annotations

import argparse
import sys

from training.commands import CommandParser, interrupted, invoked_as
from training.locks import FolderBusyError
from training.record_files import RolloutFileError
from training.viewer.page import VIEW_FILE, ViewError, write_page
from training.viewer.serve import serve

#: The most characters ``--max-chars`` shows of one text (the page's bound rests on it).
MAX_CHARS = 100_000


def _count(text: str) -> int:
    value = int(text)
    if not 1 <= value <= MAX_CHARS:
        raise argparse.ArgumentTypeError(f"must be from 1 to {MAX_CHARS:,}, got {value}")
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be from 0 to 65535, got {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = CommandParser(
        prog=invoked_as("training.cli.view"),
        description="A run's rollouts and curves as one static HTML page.",
    )
    parser.add_argument("run_dir", help="a training run's --out directory")
    parser.add_argument(
        "-o",
        "--output",
        help=f"the HTML file (default RUN_DIR/{VIEW_FILE}); never inside a run, study or "
        "evaluation folder",
    )
    parser.add_argument("--iteration", type=int, help="iteration to show (default: last saved)")
    parser.add_argument(
        "--max-chars", type=_count, default=1500, help="observation characters shown per step"
    )
    parser.add_argument(
        "--serve", action="store_true", help="serve the page (only it) on 127.0.0.1"
    )
    parser.add_argument("--port", type=_port, default=0, help="port for --serve (0: any free)")
    args = parser.parse_args(argv)
    try:
        path, info = write_page(args.run_dir, args.output, args.iteration, args.max_chars)
    except (ViewError, RolloutFileError, FolderBusyError) as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # the page is written whole or not at all
        return interrupted(parser.prog, "no page was written")
    print(
        f"wrote {path} ({info['bytes'] / 1e6:.2f} MB; iteration {info['iteration']}, "
        f"{info['records']} records)",
        flush=True,
    )
    if args.serve:
        try:
            serve(path, args.port)  # returns once Ctrl-C stops it
        except OSError as exc:
            print(f"{parser.prog}: error: cannot serve on port {args.port}: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:  # before it served
            pass
        return interrupted(parser.prog, f"stopped serving; the page stays in {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
