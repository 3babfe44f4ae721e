"""The bm25s backend's whole-array index build against bm25s's own, on real passages."""

from __future__ import annotations

import bm25s
import numpy as np
import pytest

from retrieval_server.backends.bm25s_backend import (
    Analyzer,
    Bm25sBackend,
    bm25_matrix,
    corpus_term_ids,
)


@pytest.mark.parametrize("method", ["lucene", "robertson", "atire"])
def test_the_score_matrix_is_bm25s_own_bit_for_bit(corpus_docs, method):
    texts = [doc["contents"] for doc in corpus_docs]
    analyzer, vocab = Analyzer(), {}
    ids = [[vocab.setdefault(term, len(vocab)) for term in analyzer(t)] for t in texts]
    theirs = bm25s.BM25(k1=1.2, b=0.75, method=method)
    theirs.index((ids, dict(vocab)), show_progress=False)

    ours_vocab: dict[str, int] = {}
    flat, lengths = corpus_term_ids(Analyzer(), texts, ours_vocab, chunk=97)  # chunks split docs
    assert ours_vocab == vocab  # the same ids, in order of first appearance
    assert flat.tolist() == [i for doc in ids for i in doc]
    assert lengths.tolist() == [len(doc) for doc in ids]
    ours = bm25_matrix(flat, lengths, len(ours_vocab), bm25s.BM25(k1=1.2, b=0.75, method=method))
    for key in ("data", "indices", "indptr"):
        assert np.array_equal(np.asarray(theirs.scores[key]), ours[key]), key
        assert np.asarray(theirs.scores[key]).dtype == ours[key].dtype
    assert ours["num_docs"] == theirs.scores["num_docs"] == len(texts)


def test_methods_with_a_nonoccurrence_array_still_build_and_search(corpus_docs):
    backend = Bm25sBackend.build(corpus_docs[:200], method="bm25+")
    hits = backend.search(["cathedral"], 3)[0]
    assert hits and all(h.score > 0 for h in hits)


def test_texts_without_terms_get_length_zero():
    vocab: dict[str, int] = {}
    flat, lengths = corpus_term_ids(Analyzer(), ["the of and", "Pavia cathedral", ""], vocab)
    assert lengths.tolist() == [0, 2, 0] and len(flat) == 2 and len(vocab) == 2


def test_a_loaded_index_finds_terms_through_its_mapped_lexicon(corpus_docs, tmp_path):
    import shutil

    from retrieval_server.backends import load_backend
    from retrieval_server.backends.bm25s_backend import LEXICON_IDS, Lexicon

    docs = corpus_docs[:300] + [{"id": "extra", "contents": '"Ünïcode"\nnaïve café Zürich'}]
    built = Bm25sBackend.build(docs)
    built.save(tmp_path / "index")
    loaded = load_backend(tmp_path / "index")
    lexicon = loaded._vocab
    assert isinstance(lexicon, Lexicon)
    vocab = {t: i for t, i in built._vocab.items() if t}
    assert dict(lexicon.items()) == vocab  # every term, its id
    assert all(lexicon.get(term) == i for term, i in vocab.items())
    assert lexicon.get("zzzz-not-a-term") is None and lexicon.get("") is None
    queries = [d["contents"][:80] for d in docs[::7]] + ["naïve Zürich", "the of and"]
    assert loaded.search(queries, 5) == built.search(queries, 5)
    # an index written before the lexicon existed still loads, with bm25s's vocab dict
    old = tmp_path / "old"
    shutil.copytree(tmp_path / "index", old)
    for path in (old / "bm25s").glob("lexicon.*"):
        path.unlink()
    assert not (old / "bm25s" / LEXICON_IDS).exists()
    assert load_backend(old).search(queries, 5) == built.search(queries, 5)
    # a loaded index saved elsewhere is a copy of its files
    loaded.save(tmp_path / "copy")
    assert load_backend(tmp_path / "copy").search(queries, 5) == built.search(queries, 5)
