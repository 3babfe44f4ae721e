"""Fixtures of the retrieval tests: the sample corpus, index directories, live servers."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from retrieval_helpers import (  # noqa: E402
    INDEX_OPTIONS,
    ServerProcess,
    build_index,
    data_dir,
    title_of,
)


@pytest.fixture(scope="session")
def searchqa_dir() -> Path:
    return data_dir()


@pytest.fixture(scope="session")
def corpus_path(searchqa_dir) -> Path:
    return searchqa_dir / "wiki_sample_1000.jsonl"


@pytest.fixture(scope="session")
def corpus_docs(corpus_path) -> list[dict]:
    with open(corpus_path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


@pytest.fixture(scope="session")
def unique_title_docs(corpus_docs) -> list[dict]:
    """Documents whose title no other document has."""
    counts: dict[str, int] = {}
    for doc in corpus_docs:
        counts[title_of(doc)] = counts.get(title_of(doc), 0) + 1
    return [doc for doc in corpus_docs if counts[title_of(doc)] == 1]


@pytest.fixture(scope="session")
def index_dirs(corpus_path, tmp_path_factory):
    """Returns ``get(backend) -> Path``: each index built once per session with the CLI."""
    built: dict[str, Path] = {}

    def get(backend: str) -> Path:
        if backend not in built:
            out = tmp_path_factory.mktemp(backend) / "index"
            built[backend] = build_index(corpus_path, out, backend, *INDEX_OPTIONS[backend])
        return built[backend]

    return get


@pytest.fixture(scope="session")
def bm25s_index(index_dirs) -> Path:
    return index_dirs("bm25s")


@pytest.fixture(scope="session")
def bm25s_server(bm25s_index) -> Iterator[ServerProcess]:
    """A bm25s server with small limits (64 queries, 300 characters) to test them cheaply."""
    server = ServerProcess(bm25s_index, "--max-queries", "64", "--max-query-chars", "300")
    yield server
    server.stop()
