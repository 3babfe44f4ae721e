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
