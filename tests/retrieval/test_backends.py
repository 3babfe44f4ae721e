"""The in-process backends over the real 1,000-passage wiki sample."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from retrieval_helpers import title_of

from retrieval_server.backends import (
    BACKENDS,
    BackendError,
    Hit,
    MissingDependencyError,
    SearchBackend,
    get_backend,
    load_backend,
)
from retrieval_server.backends.base import DiskDocs, top_k

BACKEND_PARAMS = [
    pytest.param("bm25s", id="bm25s"),
    pytest.param("pyserini", id="pyserini", marks=pytest.mark.slow),
    pytest.param("dense", id="dense", marks=pytest.mark.slow),
]


@pytest.fixture(scope="module", params=BACKEND_PARAMS)
def backend(request, index_dirs) -> SearchBackend:
    """Each backend's index over the 1,000 passages, built by ``python -m retrieval_server
    index`` and opened in this process."""
    loaded = load_backend(index_dirs(request.param))
    assert loaded.name == request.param
    return loaded


def test_importing_backends_pulls_no_heavy_dependency():
    code = (
        "import sys, retrieval_server.backends as b; "
        "heavy = {'fastapi', 'uvicorn', 'pyserini', 'faiss', 'jnius', 'torch', 'bm25s'}; "
        "print(sorted(heavy & {m.split('.')[0] for m in sys.modules}))"
    )
    import subprocess

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_get_backend_names_and_unknown():
    assert sorted(BACKENDS) == ["bm25s", "dense", "pyserini"]
    assert get_backend("bm25s").name == "bm25s"
    with pytest.raises(ValueError, match="unknown backend"):
        get_backend("elasticsearch")


def test_title_query_finds_its_passage(backend, unique_title_docs):
    hits = backend.search([title_of(doc) for doc in unique_title_docs], k=1)
    found = [
        bool(row) and row[0].doc_id == doc["id"]
        for row, doc in zip(hits, unique_title_docs, strict=True)
    ]
    # The 257 unique titles: a handful are generic words that other passages rank higher for.
    assert np.mean(found) >= 0.95, np.mean(found)
    assert backend.search(["Evan Morris"], k=1)[0][0].doc_id == "0"


def test_passage_text_finds_itself(backend, corpus_docs):
    docs = corpus_docs[::10]
    hits = backend.search([doc["contents"] for doc in docs], k=1)
    assert [row[0].doc_id for row in hits] == [doc["id"] for doc in docs]


def test_hits_are_sorted_bounded_and_deterministic(backend, corpus_docs):
    queries = [title_of(doc) for doc in corpus_docs[:50]] + ["zzzz qqqq", "the of and"]
    first = backend.search(queries, k=5)
    assert len(first) == len(queries)
    for row in first:
        assert len(row) <= 5
        assert all(isinstance(h, Hit) and isinstance(h.doc_id, str) for h in row)
        scores = [h.score for h in row]
        assert scores == sorted(scores, reverse=True)
        assert len({h.doc_id for h in row}) == len(row)
    again = backend.search(list(reversed(queries)), k=5)[::-1]
    assert [[h.doc_id for h in r] for r in again] == [[h.doc_id for h in r] for r in first]
    assert backend.search([], k=3) == []


def test_smaller_k_is_a_prefix(backend, corpus_docs):
    queries = [title_of(doc) for doc in corpus_docs[:40]]
    for small, large in zip(
        backend.search(queries, k=2), backend.search(queries, k=10), strict=True
    ):
        assert [h.doc_id for h in small] == [h.doc_id for h in large[: len(small)]]


def test_document_and_len(backend, corpus_docs):
    assert len(backend) == len(corpus_docs)
    assert backend.document(corpus_docs[7]["id"]) == corpus_docs[7]
    with pytest.raises(KeyError):
        backend.document("no-such-id")


def test_save_load_round_trip(backend, corpus_docs, tmp_path):
    backend.save(tmp_path / "saved")
    loaded = load_backend(tmp_path / "saved")
    assert type(loaded) is type(backend) and len(loaded) == len(backend)
    queries = [title_of(doc) for doc in corpus_docs[:30]]
    ids = [[h.doc_id for h in row] for row in backend.search(queries, k=4)]
    assert [[h.doc_id for h in row] for row in loaded.search(queries, k=4)] == ids


def test_bad_search_arguments(backend):
    with pytest.raises(ValueError, match="k must be"):
        backend.search(["x"], k=0)
    with pytest.raises(ValueError, match="sequence of strings"):
        backend.search("a bare string", k=1)
    with pytest.raises(ValueError, match="sequence of strings"):
        backend.search([1, 2], k=1)


@pytest.mark.parametrize(
    "docs, message",
    [
        ([], "zero documents"),
        ([{"id": "1"}], "string 'contents'"),
        ([{"contents": "x"}], "non-empty string 'id'"),
        ([{"id": "1", "contents": "a"}, {"id": "1", "contents": "b"}], "appears twice"),
        (["just text"], "not a mapping"),
    ],
)
def test_bm25s_build_rejects_bad_documents(docs, message):
    with pytest.raises(ValueError, match=message):
        get_backend("bm25s").build(docs)


def test_bm25s_rejects_bad_options():
    docs = [{"id": "1", "contents": "a b c"}]
    with pytest.raises(ValueError, match="k1"):
        get_backend("bm25s").build(docs, k1=-1.0)
    with pytest.raises(ValueError, match="stopwords"):
        get_backend("bm25s").build(docs, stopwords="klingon")


def test_dense_flat_index_is_exact(corpus_docs):
    docs = corpus_docs[:40]
    flat = get_backend("dense").build(docs, index_type="flat", max_seq_length=64)
    queries = [title_of(doc) for doc in docs[:10]]
    vectors = flat.encode([d["contents"] for d in docs])
    expected = flat.encode(queries) @ vectors.T  # cosine: embeddings are normalised
    for row, scores in zip(flat.search(queries, k=5), expected, strict=True):
        assert [h.doc_id for h in row] == [docs[i]["id"] for i in np.argsort(-scores)[:5]]
        np.testing.assert_allclose([h.score for h in row], np.sort(scores)[::-1][:5], rtol=1e-4)
    with pytest.raises(ValueError, match="index_type"):
        get_backend("dense").build(docs, index_type="ivf")


def test_bm25s_tiny_corpus_ranks_by_term_matches():
    docs = [
        {"id": "a", "contents": '"Paris"\nParis is the capital of France.'},
        {"id": "b", "contents": '"Lyon"\nLyon is a city in France.'},
        {"id": "c", "contents": '"Berlin"\nBerlin is the capital of Germany.'},
    ]
    backend = get_backend("bm25s").build(docs)
    # c has both terms, a only "capital", b neither (and is left out).
    assert [h.doc_id for h in backend.search(["capital of Germany"], k=3)[0]] == ["c", "a"]
    assert [h.doc_id for h in backend.search(["capitals"], k=3)[0]] == ["a", "c"]  # stemmed
    assert backend.search(["Tokyo"], k=3) == [[]]  # no shared term, no hit


def test_bm25s_empty_and_stop_word_documents_and_queries(tmp_path):
    docs = [
        {"id": "empty", "contents": ""},
        {"id": "hello", "contents": "hello world"},
        {"id": "stop", "contents": "the a an"},
    ]
    backend = get_backend("bm25s").build(docs)
    assert backend.search(["hello", "the", "", "!!!"], k=3) == [
        [Hit("hello", pytest.approx(backend.search(["hello"], 1)[0][0].score))],
        [],
        [],
        [],
    ]
    backend.save(tmp_path)
    assert [h.doc_id for h in load_backend(tmp_path).search(["world"], 5)[0]] == ["hello"]


def test_a_missing_package_is_a_distinct_backend_error(corpus_docs, monkeypatch):
    monkeypatch.setitem(sys.modules, "bm25s", None)  # as if bm25s were not installed
    with pytest.raises(MissingDependencyError, match=r'pip install "gigpo\[retrieval\]"') as caught:
        get_backend("bm25s").build(corpus_docs[:2])
    assert isinstance(caught.value, BackendError) and isinstance(caught.value, ImportError)
    assert (caught.value.name, caught.value.extra) == ("bm25s", "retrieval")


def test_a_broken_index_is_not_a_missing_package(tmp_path):
    (tmp_path / "meta.json").write_text("{not json")
    with pytest.raises(BackendError) as caught:
        load_backend(tmp_path)
    assert not isinstance(caught.value, ImportError)


def test_dense_refuses_a_missing_model_directory(tmp_path, corpus_docs):
    with pytest.raises(BackendError, match="never downloaded"):
        get_backend("dense").build(corpus_docs[:2], model=tmp_path / "no-model")


def test_load_rejects_broken_directories(tmp_path, corpus_docs):
    with pytest.raises(BackendError, match="meta.json is missing"):
        load_backend(tmp_path)
    (tmp_path / "meta.json").write_text("{not json")
    with pytest.raises(BackendError, match="not valid JSON"):
        load_backend(tmp_path)
    (tmp_path / "meta.json").write_text(json.dumps({"backend": "nope", "format_version": 1}))
    with pytest.raises(BackendError, match="unknown backend"):
        load_backend(tmp_path)
    backend = get_backend("bm25s").build(corpus_docs[:20])
    backend.save(tmp_path / "good")
    (tmp_path / "good" / "docs.jsonl").write_text('{"id": "0"}\n')
    with pytest.raises(BackendError, match="docs.jsonl:1 is damaged"):
        load_backend(tmp_path / "good")
    backend.save(tmp_path / "short")
    lines = (tmp_path / "short" / "docs.jsonl").read_text().splitlines()
    (tmp_path / "short" / "docs.jsonl").write_text("\n".join(lines[:5]) + "\n")
    with pytest.raises(BackendError, match="docs.jsonl has 5"):
        load_backend(tmp_path / "short")


def test_loaded_documents_are_read_from_disk(bm25s_index, corpus_docs, tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    backend = load_backend(bm25s_index)
    assert isinstance(backend.docs, DiskDocs) and len(backend.docs) == len(corpus_docs)
    assert backend.docs[-1] == corpus_docs[-1] and backend.docs[3:6] == corpus_docs[3:6]
    with pytest.raises(IndexError):
        backend.docs[len(corpus_docs)]
    with ThreadPoolExecutor(4) as pool:  # positional reads from many threads at once
        ids = [doc["id"] for doc in corpus_docs]
        assert list(pool.map(backend.document, ids)) == corpus_docs
    backend.save(tmp_path / "copy")  # a loaded index saves by copying its documents
    assert (tmp_path / "copy" / "docs.jsonl").read_bytes() == (
        bm25s_index / "docs.jsonl"
    ).read_bytes()
    lines = (bm25s_index / "docs.jsonl").read_text().splitlines()
    (tmp_path / "copy" / "docs.jsonl").write_text("\n".join([lines[0], *lines[:-1]]) + "\n")
    with pytest.raises(BackendError, match="ids repeat"):
        load_backend(tmp_path / "copy")


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.5, -1.0]), min_size=1, max_size=40),
    st.integers(1, 45),
    st.booleans(),
)
def test_top_k_matches_a_full_sort(values, k, positive_only):
    scores = np.asarray(values, dtype=np.float32)
    expected = sorted(range(len(values)), key=lambda i: (-values[i], i))
    if positive_only:
        expected = [i for i in expected if values[i] > 0]
    assert top_k(scores, k, positive_only).tolist() == expected[:k]


def test_a_loaded_bm25s_index_is_memory_mapped_and_answers_as_built(corpus_docs, tmp_path):
    # Memory-mapped, the score matrix is shared through the page cache by every server
    # worker that loads the same directory, instead of copied into each process.
    built = get_backend("bm25s").build(corpus_docs)
    built.save(tmp_path / "index")
    loaded = load_backend(tmp_path / "index")
    assert isinstance(loaded._model.scores["data"], np.memmap)
    queries = [title_of(doc) for doc in corpus_docs[:50]] + ["zzzqqq", "Pavia Cathedral history"]
    assert loaded.search(queries, 5) == built.search(queries, 5)


def test_a_saved_index_opens_from_its_offsets_without_reading_every_line(corpus_docs, tmp_path):
    from retrieval_server.backends.base import IDS_FILE, OFFSETS_FILE, PositionalIds

    docs = [{"id": str(i), "contents": d["contents"]} for i, d in enumerate(corpus_docs[:50])]
    get_backend("bm25s").build(docs).save(tmp_path / "index")
    assert (tmp_path / "index" / OFFSETS_FILE).is_file()
    assert not (tmp_path / "index" / IDS_FILE).exists()  # wiki-18's ids: "0".."n-1"
    # a line changed in place, same length: the offsets still match, so nothing reads it
    path = tmp_path / "index" / "docs.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    lines[7] = b"x" * (len(lines[7]) - 1) + b"\n"
    path.write_bytes(b"".join(lines))
    backend = load_backend(tmp_path / "index")
    assert isinstance(backend.doc_ids, PositionalIds) and len(backend) == 50
    assert backend.document("5") == docs[5] and backend.doc_ids[49] == "49"
    for unknown in ("50", "05", "-1", "five", ""):
        with pytest.raises(KeyError):
            backend.document(unknown)
    with pytest.raises(BackendError, match="docs.jsonl:8 is damaged"):
        backend.document("7")  # found when read, naming the line
    backend.save(tmp_path / "index")  # saved over itself while its offsets are mapped
    assert load_backend(tmp_path / "index").document("49") == docs[49]


def test_other_ids_are_kept_beside_the_offsets(corpus_docs, tmp_path):
    from retrieval_server.backends.base import IDS_FILE

    docs = [{"id": f"wiki-{i}", "contents": d["contents"]} for i, d in enumerate(corpus_docs[:30])]
    get_backend("bm25s").build(docs).save(tmp_path / "index")
    assert (tmp_path / "index" / IDS_FILE).is_file()
    backend = load_backend(tmp_path / "index")
    assert list(backend.doc_ids) == [d["id"] for d in docs]
    assert backend.document("wiki-12") == docs[12]
    hits = backend.search([docs[3]["contents"][:60]], 1)[0]
    assert hits[0].doc_id == "wiki-3"
