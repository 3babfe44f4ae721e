"""``python -m retrieval_server`` refuses bad input with one line and status 2, never a
traceback, a hang or data written over: hostile corpus lines (named by file and line),
corpora that are not regular files, an ``--out`` that already holds something, damaged
index directories, and flags no backend could use."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from retrieval_helpers import run_cli

from retrieval_server.__main__ import main

GOOD = '{"id": "1", "contents": "\\"Pavia\\"\\nPavia Cathedral"}\n'


def _refused(capsys, *args: str) -> str:
    """Runs the CLI in this process; asserts status 2 and one ``error:`` line; returns it."""
    assert main(list(args)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(
    "line, message",
    [
        ("[" * 100_000, ":2: not valid JSON (nested too deeply)"),
        ('{"id": "2", "contents": ' + "[" * 100_000, ":2: not valid JSON (nested too deeply)"),
        ('{"id": "2", "contents": "x", "n": 1' + "0" * 5000 + "}", ":2: not valid JSON (Exceeds"),
        ('{"id": "2", "contents": "x\\ud800"}', ":2: 'id' or 'contents' holds a lone surrogate"),
        ('{"id": "\\udfff", "contents": "x"}', ":2: 'id' or 'contents' holds a lone surrogate"),
        ('{"id": "1", "contents": "again"}', ":2: id '1' is used by an earlier line"),
        ('{"id": 1.5, "contents": "x"}', ":2: 'id' must be a non-empty string"),
        ("null", ":2: expected a JSON object"),
    ],
    ids=[
        "deep-array",
        "deep-contents",
        "5000-digits",
        "surrogate",
        "surrogate-id",
        "repeat",
        "float-id",
        "null",
    ],  # fmt: skip
)
def test_a_bad_corpus_line_is_named_by_file_and_line(tmp_path, capsys, line, message):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(GOOD + line + "\n")
    for command in (("index", "--out", str(tmp_path / "out"), "--quiet"), ("serve",)):
        err = _refused(capsys, command[0], "--corpus", str(corpus), *command[1:])
        assert f"{corpus}{message}" in err
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["corpus.jsonl"]  # no partial index


def test_a_corpus_that_is_not_a_regular_file_is_refused_without_waiting(tmp_path, capsys):
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)  # nothing ever writes to it: opening it for reading would block
    for command in (("index", "--out", str(tmp_path / "out"), "--quiet"), ("serve",)):
        completed = run_cli(command[0], "--corpus", str(fifo), *command[1:], timeout=60)
        assert completed.returncode == 2, completed.stderr[-2000:]
        assert f"corpus {fifo} is not a regular file" in completed.stderr
        assert "Traceback" not in completed.stderr
    err = _refused(capsys, "index", "--corpus", str(tmp_path), "--out", str(tmp_path / "o"))
    assert f"corpus {tmp_path} is not a regular file" in err
    out = ("--out", str(tmp_path / "o"), "--quiet")
    err = _refused(capsys, "index", "--corpus", str(tmp_path / "no.jsonl"), *out)
    assert "corpus file not found" in err
    (tmp_path / "empty.jsonl").write_text("\n\n")
    err = _refused(capsys, "index", "--corpus", str(tmp_path / "empty.jsonl"), *out)
    assert "holds no documents" in err
    assert not (tmp_path / "out").exists() and not (tmp_path / "o").exists()


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_an_existing_out_is_never_written_over(tmp_path, capsys):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(GOOD)
    earlier, folder, file = tmp_path / "earlier", tmp_path / "folder", tmp_path / "file"
    assert main(["index", "--corpus", str(corpus), "--out", str(earlier), "--quiet"]) == 0
    folder.mkdir()
    (folder / "precious.txt").write_text("keep me")
    file.write_text("keep me too")
    os.mkfifo(tmp_path / "fifo")
    before = _tree(tmp_path)
    corpus.write_text(GOOD.replace("Pavia", "Milan"))  # a rebuild would change the index
    for out, message in [
        (earlier, "is not empty (an index is never written over)"),
        (folder, "is not empty (an index is never written over)"),
        (file, "exists and is not a directory"),
        (tmp_path / "fifo", "exists and is not a directory"),
        (file / "under", "cannot write the index to --out"),
    ]:
        err = _refused(capsys, "index", "--corpus", str(corpus), "--out", str(out), "--quiet")
        assert f"--out {out}" in err and message in err
    assert _tree(tmp_path) == {**before, "corpus.jsonl": corpus.read_bytes()}
    assert not [p for p in tmp_path.iterdir() if "partial" in p.name]
    empty = tmp_path / "empty"
    empty.mkdir()  # an empty folder is the one existing --out taken
    assert main(["index", "--corpus", str(corpus), "--out", str(empty), "--quiet"]) == 0
    assert "Milan" in (empty / "docs.jsonl").read_text()


def test_a_damaged_index_is_refused_by_name(tmp_path, capsys):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(GOOD)
    index = tmp_path / "index"
    assert main(["index", "--corpus", str(corpus), "--out", str(index), "--quiet"]) == 0
    meta = json.loads((index / "meta.json").read_text())
    cases = []
    for name in ("deep-meta", "huge-int-meta", "deep-docs", "stemmer"):
        damaged = tmp_path / name
        shutil.copytree(index, damaged)
        cases.append(damaged)
    (cases[0] / "meta.json").write_text("[" * 100_000)
    (cases[1] / "meta.json").write_text('{"backend": "bm25s", "n": 1' + "0" * 5000 + "}")
    (cases[2] / "docs.jsonl").write_text('{"id": "1", "contents": ' + "[" * 100_000 + "\n")
    (cases[2] / "docs.offsets.npy").unlink()
    (cases[3] / "meta.json").write_text(json.dumps({**meta, "options": {"stemmer": 5}}))
    messages = ["meta.json is not valid JSON", "meta.json is not valid JSON",
                "docs.jsonl:1 is damaged", "unknown stemmer language 5"]  # fmt: skip
    for damaged, message in zip(cases, messages, strict=True):
        err = _refused(capsys, "serve", "--index", str(damaged), "--port", "0")
        assert message in err
    err = _refused(capsys, "serve", "--index", str(cases[0]), "--workers", "2", "--port", "0")
    assert "meta.json is not valid JSON" in err


def test_flags_no_backend_could_use_are_refused(tmp_path, capsys):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(GOOD)
    out = tmp_path / "out"
    index = ("index", "--corpus", str(corpus), "--out", str(out), "--backend", "dense")
    assert "unknown torch device 'bogus'" in _refused(capsys, *index, "--device", "bogus")
    assert "'cuda:99' is not available here" in _refused(capsys, *index, "--device", "cuda:99")
    err = _refused(capsys, "serve", "--corpus", str(corpus), "--host", "", "--port", "0")
    assert "--host is empty" in err
    assert not out.exists()


def test_ctrl_c_stops_the_retrieval_server_with_one_line(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"id": "1", "contents": "paris is the capital of france"}\n')
    err = tmp_path / "stderr.txt"
    with err.open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "retrieval_server", "serve", "--corpus", str(corpus),
             "--port", "0"], cwd=Path(__file__).resolve().parents[2], stdout=subprocess.PIPE,
            stderr=stderr, text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        line = proc.stdout.readline()
        assert line.startswith("listening on"), (line, err.read_text())
        assert time.monotonic() < deadline
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = err.read_text()
    assert proc.returncode == 130, text
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
    assert text.strip().splitlines()[-1] == (
        "python -m retrieval_server: interrupted: the server stopped"
    ), text
