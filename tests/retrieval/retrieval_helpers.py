"""Helpers of the retrieval tests: data location, the CLI, a live server process."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import urlsplit

from sample_data import sample_dir

REPO = Path(__file__).resolve().parents[2]

#: backend -> extra ``index`` options used by the tests (dense: HNSW, texts cut to 128
#: tokens so that encoding 1,000 passages on two CPU cores takes about half a minute).
INDEX_OPTIONS = {
    "bm25s": (),
    "pyserini": (),
    "dense": ("--index-type", "hnsw", "--max-seq-length", "128"),
}


def data_dir() -> Path:
    """``data/samples/searchqa`` in the repository."""
    return sample_dir("searchqa", "wiki_sample_1000.jsonl")


def title_of(doc: dict) -> str:
    """The title line of a wiki-18 document, without its quotes."""
    return doc["contents"].split("\n", 1)[0].strip().strip('"')


def run_cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """Runs ``python -m retrieval_server ARGS`` and returns the finished process."""
    return subprocess.run(
        [sys.executable, "-m", "retrieval_server", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        check=False,
    )


def build_index(corpus: Path, out: Path, backend: str, *extra: str) -> Path:
    """Builds an index with the CLI; fails the test with its stderr if it fails."""
    completed = run_cli(
        "index", "--corpus", str(corpus), "--out", str(out), "--backend", backend, "--quiet", *extra
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert (out / "meta.json").is_file()
    return out


class ServerProcess:
    """``python -m retrieval_server serve`` on 127.0.0.1 and a free port, as a child process.

    ``index`` is an index directory, or a corpus file that the server indexes at start.
    """

    def __init__(self, index: Path, *extra: str, startup_timeout: float = 300) -> None:
        source = "--index" if Path(index).is_dir() else "--corpus"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "retrieval_server", "serve", source, str(index)]
            + ["--host", "127.0.0.1", "--port", "0", *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=REPO,
        )
        self.lines: list[str] = []
        self.url = ""
        ready = threading.Event()

        def pump() -> None:
            assert self.process.stdout is not None
            for line in self.process.stdout:
                self.lines.append(line)
                if line.startswith("listening on ") and not self.url:
                    self.url = line.split()[2]
                    ready.set()
            ready.set()

        threading.Thread(target=pump, daemon=True).start()
        if not ready.wait(startup_timeout) or not self.url:
            self.stop()
            raise RuntimeError("the server did not start:\n" + "".join(self.lines)[-3000:])
        from retrieval_server.client import RetrievalClient

        RetrievalClient(self.url).wait_until_ready(startup_timeout)

    def stop(self) -> None:
        """Terminates the server (kills it if it does not stop within 20 s)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(20)


def post_raw(url: str, body: bytes, headers: dict | None = None) -> tuple[int, dict]:
    """POSTs raw bytes to ``/retrieve``; returns ``(status, decoded JSON answer)``."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        connection.request(
            "POST",
            "/retrieve",
            body=body,
            headers={"Content-Type": "application/json"} | (headers or {}),
        )
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def post(url: str, payload) -> tuple[int, dict]:
    return post_raw(url, json.dumps(payload).encode())
