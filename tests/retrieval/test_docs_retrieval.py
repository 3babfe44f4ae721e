"""The examples of docs/retrieval.md and docs/searchqa.md run as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from doc_blocks import code_blocks, section_text
from retrieval_helpers import REPO

import retrieval_server

# The examples import the installed package (or this checkout when run from a source tree).
PACKAGE_ROOT = str(Path(retrieval_server.__file__).resolve().parent.parent)


def _run(code: str, cwd) -> subprocess.CompletedProcess:
    completed = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
        env={**os.environ, "PYTHONPATH": PACKAGE_ROOT},
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return completed


def test_docs_examples_run(bm25s_server, corpus_path, tmp_path):
    client_block, backend_block = code_blocks("docs/retrieval.md")
    (env_block,) = code_blocks("docs/searchqa.md")
    code = client_block.replace("http://127.0.0.1:8000", bm25s_server.url)
    _run(code + "\nassert len(docs) == 2 and docs[1][0]['id'] == '4'\n", tmp_path)
    prelude = f"import json\ndocs = [json.loads(l) for l in open({str(corpus_path)!r})]\n"
    _run(prelude + backend_block + "\nassert hits[0].doc_id == '4'\n", tmp_path)
    assert (tmp_path / "indexes" / "wiki1k" / "meta.json").is_file()
    # The environment example reads data/samples relative to the repository root.
    out = _run(env_block, REPO).stdout.split()
    assert out[:2] == ["0.0", "0.0"]  # "Wilhelm Röntgen" is not an exact match


def test_docs_serve_command_names_the_sample_corpus():
    section = section_text("docs/retrieval.md")
    command = re.search(r"python -m retrieval_server serve --corpus (\S+)", section)
    assert command is not None
    assert (REPO / command.group(1)).resolve() == (
        REPO / "data" / "samples" / "searchqa" / "wiki_sample_1000.jsonl"
    ).resolve()
