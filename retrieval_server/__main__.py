"""Command line: build an index, serve it.

    python -m retrieval_server index --corpus wiki.jsonl --out INDEX_DIR [--backend bm25s]
    python -m retrieval_server serve --index INDEX_DIR [--host 127.0.0.1] [--port 8000]
    python -m retrieval_server serve --corpus wiki.jsonl   # bm25s index built in memory

``serve`` prints one line ``listening on http://HOST:PORT`` once the socket listens with
the index loaded (with ``--workers N``: once the first worker does), so a client may connect
as soon as it reads the line (``--port 0`` picks a free port and prints it). SIGTERM or
Ctrl+C stops it: requests under way get ``--shutdown-timeout-s`` to finish, then are cut.

Every numeric flag has a range (the ``Limits`` ones in ``retrieval_server.limits.BOUNDS``);
a value outside it, ``inf`` and ``nan`` included, exits with status 2 and names the flag.
So does every other refusal: a corpus line that is not a document (named by file and line),
a corpus that is not a regular file (a FIFO is never waited on), an ``--out`` that exists
and is not an empty directory (an index is never written over; a new one is written beside
it and renamed into place), an unknown or absent ``--device``, an empty ``--host``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import secrets
import shutil
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import fields
from pathlib import Path
from typing import NoReturn

from retrieval_server.backends import (
    BACKENDS,
    BackendError,
    SearchBackend,
    get_backend,
    load_backend,
)
from retrieval_server.backends.base import read_meta
from retrieval_server.corpus import CorpusError, read_corpus
from retrieval_server.limits import BOUNDS, Limits, problem_with

#: how long requests under way at SIGTERM may take to finish (``--shutdown-timeout-s``).
SHUTDOWN_TIMEOUT_S = 5.0
#: uvicorn's log levels (``--log-level``).
LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")


def bounded(kind: type, low: float, high: float) -> Callable[[str], int | float]:
    """An argparse ``type``: ``kind`` (int or float) parsed from the text, in ``[low, high]``.

    ``inf``, ``nan`` and out-of-range values are refused (argparse names the flag and exits
    with status 2).
    """

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            value = math.nan
        problem = problem_with(value, kind, low, high)
        if problem is not None:
            raise argparse.ArgumentTypeError(f"{problem}, got {text!r}")
        return value

    parse.__name__ = kind.__name__
    return parse


def _build_options(args: argparse.Namespace) -> dict:
    options = {"show_progress": not args.quiet}
    for name in (
        "k1",
        "b",
        "model",
        "index_type",
        "threads",
        "batch_size",
        "max_seq_length",
        "normalize",
        "device",
    ):
        value = getattr(args, name)
        if value is not None:
            options[name] = value
    if args.no_stemmer:
        options["stemmer"] = None
    return options


def check_out(out: Path) -> None:
    """Raises :class:`BackendError` unless ``out`` is absent or an empty directory.

    ``index`` never writes into a folder that holds anything (an earlier index included):
    it refuses before reading the corpus.
    """
    if not os.path.lexists(out):
        return
    if out.is_symlink() or not out.is_dir():
        raise BackendError(f"--out {out} exists and is not a directory; give a new path")
    if any(out.iterdir()):
        raise BackendError(
            f"--out {out} is not empty (an index is never written over); give a new or "
            "empty directory"
        )


def save_index(backend: SearchBackend, out: Path) -> None:
    """Saves ``backend`` into ``out`` as a whole: written beside it, then renamed into place.

    The rename fails, leaving what is there, if ``out`` has meanwhile become a file or a
    folder that holds anything; a failed save leaves nothing behind.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.parent / f".{out.name}.partial-{os.getpid()}-{secrets.token_hex(4)}"
    staging.mkdir()  # the mode a plain mkdir gives (umask), as the index will keep
    try:
        backend.save(staging)
        os.rename(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def index_command(args: argparse.Namespace) -> int:
    """Builds and saves an index; returns the exit status."""
    started = time.perf_counter()
    out = Path(args.out)
    try:
        check_out(out)
        if args.backend == "dense" and args.device is not None:
            from retrieval_server.backends.dense_backend import check_device

            check_device(args.device)
        docs = read_corpus(args.corpus, show_progress=not args.quiet)
        backend = get_backend(args.backend).build(docs, **_build_options(args))
        save_index(backend, out)
    except (CorpusError, BackendError, ValueError, TypeError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # --out's parent is a file, not writable, the disk is full
        print(f"error: cannot write the index to --out {out}: {error}", file=sys.stderr)
        return 2
    seconds = time.perf_counter() - started
    print(
        f"indexed {len(backend)} documents with {args.backend} into {args.out} in {seconds:.1f} s"
    )
    return 0


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``(host, port)`` (``port`` 0: a free one), for uvicorn.

    Made with ``proto=IPPROTO_TCP``: asyncio turns on ``TCP_NODELAY`` only for connections
    of sockets that say they are TCP, and without it every answer (headers, then body) waits
    about 40 ms for the client's delayed ACK (Nagle's algorithm).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def announce_when_listening(sock: socket.socket, line: str) -> threading.Event:
    """Prints ``line`` once ``sock`` listens (uvicorn calls ``listen()`` when it serves).

    A client that connects after reading the line is accepted: a socket that is bound but
    not yet listening refuses connections. Returns an event that stops the watch (set it
    when the server ends). Where the platform cannot say whether a socket listens, the
    socket listens at once and connections wait in its backlog until the server takes them.
    """
    stop = threading.Event()
    if not hasattr(socket, "SO_ACCEPTCONN"):
        sock.listen(2048)  # uvicorn's default backlog
        print(line, flush=True)
        return stop

    def watch() -> None:
        while not stop.is_set():
            try:
                listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
            except OSError:  # closed: the server ended before it listened
                return
            if listening:
                print(line, flush=True)
                return
            stop.wait(0.005)

    threading.Thread(target=watch, name="announce", daemon=True).start()
    return stop


def serve_command(args: argparse.Namespace) -> int:
    """Loads an index and serves it until interrupted; returns the exit status."""
    import uvicorn

    from retrieval_server.app import INDEX_ENV, LIMITS_ENV, create_app

    try:
        limits = Limits(
            **{
                f.name: getattr(args, f.name)
                for f in fields(Limits)
                if getattr(args, f.name, None) is not None
            }
        )
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if not args.host.strip():
        print("error: --host is empty; give an address (0.0.0.0: every interface)", file=sys.stderr)
        return 2
    if (args.index is None) == (args.corpus is None):
        print("error: give exactly one of --index DIR or --corpus FILE", file=sys.stderr)
        return 2
    if args.workers > 1:
        try:
            if args.index is None:
                raise BackendError("--workers > 1 needs a saved --index")
            read_meta(args.index)
        except BackendError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    try:
        sock = listening_socket(args.host, args.port)
    except OSError as error:
        print(f"error: cannot listen on {args.host}:{args.port}: {error}", file=sys.stderr)
        return 2
    port = sock.getsockname()[1]
    if args.workers > 1:
        os.environ[INDEX_ENV] = os.path.abspath(args.index)
        os.environ[LIMITS_ENV] = json.dumps(
            {f.name: getattr(limits, f.name) for f in fields(limits)}
        )
        config = uvicorn.Config(
            "retrieval_server.app:create_app_from_env",
            factory=True,
            workers=args.workers,
            log_level=args.log_level,
            timeout_graceful_shutdown=args.shutdown_timeout_s,
        )
        from uvicorn.supervisors import Multiprocess

        supervisor = Multiprocess(config, sockets=[sock])
        line = f"listening on http://{args.host}:{port} ({args.workers} workers)"
        stop_announcing = announce_when_listening(sock, line)
        try:
            supervisor.run()
        finally:
            stop_announcing.set()
        return 0
    try:
        if args.index is not None:
            backend = load_backend(args.index)
        else:
            backend = get_backend(args.backend).build(read_corpus(args.corpus))
    except (BackendError, CorpusError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    app = create_app(backend, limits)
    config = uvicorn.Config(
        app,
        log_level=args.log_level,
        access_log=False,
        timeout_graceful_shutdown=args.shutdown_timeout_s,
    )
    server = uvicorn.Server(config)
    line = f"listening on http://{args.host}:{port} ({backend.name}, {len(backend)} documents)"
    stop_announcing = announce_when_listening(sock, line)
    try:
        server.run(sockets=[sock])
    finally:
        stop_announcing.set()
    return 0


class _Parser(argparse.ArgumentParser):
    """Errors as one line and a hint, exit 2; the usage on ``--help`` only (as ``training``'s
    commands, whose parser this package may not import)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\nrun '{self.prog} --help' for usage\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit status."""
    parser = _Parser(prog="python -m retrieval_server", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    index = commands.add_parser("index", help="build an index from a JSON-lines corpus")
    index.add_argument("--corpus", required=True, help='JSON lines {"id", "contents"}')
    index.add_argument("--out", required=True, help="directory to write the index to")
    index.add_argument("--backend", default="bm25s", choices=sorted(BACKENDS))
    index.add_argument("--k1", type=bounded(float, 0.0, 100.0), help="BM25 k1 (bm25s, pyserini)")
    index.add_argument("--b", type=bounded(float, 0.0, 1.0), help="BM25 b (bm25s, pyserini)")
    index.add_argument("--no-stemmer", action="store_true", help="bm25s: do not stem words")
    index.add_argument("--model", help="dense: a local sentence-transformers model directory")
    index.add_argument("--index-type", choices=["flat", "hnsw"], help="dense: faiss index type")
    index.add_argument(
        "--normalize",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="dense: L2-normalise embeddings (inner product = cosine)",
    )
    index.add_argument(
        "--batch-size", type=bounded(int, 1, 1 << 16), help="dense: encoder batch size"
    )
    index.add_argument(
        "--max-seq-length",
        type=bounded(int, 1, 1 << 20),
        help="dense: cut texts to this many tokens",
    )
    index.add_argument("--device", help="dense: torch device of the encoder (cpu, cuda)")
    index.add_argument("--threads", type=bounded(int, 1, 1024), help="pyserini: indexing threads")
    index.add_argument("--quiet", action="store_true", help="no progress bars")
    index.set_defaults(run=index_command)

    serve = commands.add_parser("serve", help="serve an index over HTTP")
    serve.add_argument("--index", help="an index directory written by 'index'")
    serve.add_argument("--corpus", help="or a JSON-lines corpus, indexed in memory at start")
    serve.add_argument(
        "--backend", default="bm25s", choices=sorted(BACKENDS), help="the backend for --corpus"
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument(
        "--port", type=bounded(int, 0, 65535), default=8000, help="0 picks a free port"
    )
    serve.add_argument(
        "--workers",
        type=bounded(int, 1, 256),
        default=1,
        help="processes, each with the index",
    )
    serve.add_argument("--log-level", default="warning", choices=LOG_LEVELS)
    serve.add_argument(
        "--shutdown-timeout-s",
        type=bounded(float, 0.1, 600.0),
        default=SHUTDOWN_TIMEOUT_S,
        help=f"on SIGTERM, how long requests under way may take ({SHUTDOWN_TIMEOUT_S:g})",
    )
    defaults = Limits()
    for setting in fields(Limits):
        low, high = BOUNDS[setting.name]
        serve.add_argument(
            "--" + setting.name.replace("_", "-"),
            type=bounded(type(setting.default), low, high),
            help=f"default {getattr(defaults, setting.name)}, in [{low}, {high}]",
        )
    serve.set_defaults(run=serve_command)

    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except KeyboardInterrupt:  # Ctrl-C: uvicorn has shut the server down; one line, no trace
        what = "the server stopped" if args.command == "serve" else "--out was not written"
        print(f"{parser.prog}: interrupted: {what}", file=sys.stderr, flush=True)
        return INTERRUPTED


#: The exit status after Ctrl-C (128 + SIGINT), as a shell reports it.
INTERRUPTED = 130


if __name__ == "__main__":
    sys.exit(main())
