"""The default backend: BM25 with the pure-Python ``bm25s`` library (scipy sparse scores).

Text is lower-cased, split into word tokens of two or more characters, English stop words
are dropped and, when ``PyStemmer`` is installed, words are Snowball-stemmed: close to the
Lucene analyzer pyserini uses. ``k1=0.9, b=0.4`` are pyserini's defaults, so the two BM25
backends rank alike. Only documents that share a term with the query are returned.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from retrieval_server.backends.base import (
    BackendError,
    Hit,
    SearchBackend,
    missing_dependency,
    read_docs,
    read_meta,
    top_k,
    validate_docs,
    validate_queries,
    write_docs,
    write_meta,
)

_TOKEN = re.compile(r"(?u)\b\w\w+\b")
_MODEL_DIR = "bm25s"
_CACHE_LIMIT = 1 << 16


def _import_bm25s():
    try:
        import bm25s
    except ImportError as error:
        raise missing_dependency("bm25s", "retrieval") from error
    return bm25s


class Analyzer:
    """Turns text into index terms: lower case, word tokens, no stop words, stems.

    Args:
      stemmer: a Snowball language for ``PyStemmer`` (``"english"``), or None for no
        stemming. ``"auto"`` stems in English when PyStemmer is installed.
      stopwords: ``"en"`` for bm25s's English list, or None to keep every word.
    """

    def __init__(self, stemmer: str | None = "auto", stopwords: str | None = "en") -> None:
        self.stemmer_name = stemmer
        self._stem = None
        if stemmer is not None:
            try:
                import Stemmer
            except ImportError as error:
                if stemmer != "auto":
                    raise missing_dependency("PyStemmer", "retrieval") from error
                self.stemmer_name = None
            else:
                language = "english" if stemmer == "auto" else stemmer
                try:
                    self._stem = Stemmer.Stemmer(language).stemWord
                except (KeyError, AttributeError, TypeError):  # not a language's name
                    raise ValueError(f"unknown stemmer language {stemmer!r}") from None
                self.stemmer_name = language
        if stopwords not in (None, "en"):
            raise ValueError(f"stopwords must be 'en' or None, got {stopwords!r}")
        self.stopwords_name = stopwords
        self._stopwords: frozenset[str] = frozenset()
        if stopwords == "en":
            self._stopwords = frozenset(_import_bm25s().stopwords.STOPWORDS_EN)
        self._cache: dict[str, str] = {}

    def options(self) -> dict[str, Any]:
        """Returns the options that recreate this analyzer."""
        return {"stemmer": self.stemmer_name, "stopwords": self.stopwords_name}

    def words(self, text: str) -> list[str]:
        """The lower-case word tokens of ``text``, in order, stop words included."""
        return _TOKEN.findall(text.lower())

    def term(self, word: str) -> str | None:
        """The index term of a lower-case word token (its stem); None for a stop word."""
        if word in self._stopwords:
            return None
        term = self._cache.get(word)
        if term is None:
            term = self._stem(word) if self._stem is not None else word
            if len(self._cache) < _CACHE_LIMIT:
                self._cache[word] = term
        return term

    def __call__(self, text: str) -> list[str]:
        """Returns the terms of ``text`` in order (repeats kept)."""
        terms = (self.term(word) for word in self.words(text))
        return [term for term in terms if term is not None]


def corpus_term_ids(
    analyzer: Analyzer,
    texts: Sequence[str],
    vocab: dict[str, int],
    show_progress: bool = False,
    chunk: int = 20_000,
) -> tuple[np.ndarray, np.ndarray]:
    """Every text's terms as vocabulary ids, in order (what ``analyzer`` gives, word by word).

    New terms are added to ``vocab`` in order of first appearance. Each distinct word is
    stemmed once; the mapping of words to ids runs in C (``map`` over a dict).

    Returns:
      ``(ids, lengths)``: int32 array of shape ``[total terms]``, the texts' terms one after
      another, and int64 array ``[len(texts)]``, each text's number of terms.
    """
    table: dict[str, int] = {}  # lower-case word -> term id, -1 for a stop word
    id_parts, length_parts = [], []
    starts = range(0, len(texts), chunk)
    if show_progress:
        from tqdm.auto import tqdm

        starts = tqdm(starts, desc="tokenize", unit="chunk")
    for start in starts:
        words = [analyzer.words(text) for text in texts[start : start + chunk]]
        flat = list(itertools.chain.from_iterable(words))
        for word in dict.fromkeys(flat):
            if word not in table:
                term = analyzer.term(word)
                table[word] = -1 if term is None else vocab.setdefault(term, len(vocab))
        ids = np.fromiter(map(table.__getitem__, flat), dtype=np.int64, count=len(flat))
        counts = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
        keep = ids >= 0
        owner = np.repeat(np.arange(len(words)), counts)
        id_parts.append(ids[keep].astype(np.int32))
        length_parts.append(np.bincount(owner[keep], minlength=len(words)))
    if not id_parts:
        return np.zeros(0, np.int32), np.zeros(0, np.int64)
    return np.concatenate(id_parts), np.concatenate(length_parts).astype(np.int64)


def bm25_matrix(ids: np.ndarray, lengths: np.ndarray, n_vocab: int, model: Any) -> dict:
    """bm25s's score matrix for term ids, built with whole-array operations.

    The same numbers, in the same order, as ``bm25s.BM25.index`` builds document by document
    (its own idf and term-frequency scorers for ``model.method``, the same float64 arithmetic
    cast to ``model.dtype``; tested equal), in a fraction of the time and memory.

    Args:
      ids: int array ``[total terms]``, the documents' term ids one after another.
      lengths: int array ``[num docs]``, each document's number of terms.
      n_vocab: the number of terms (matrix columns).
      model: a ``bm25s.BM25`` (``k1``, ``b``, ``delta``, ``method``, ``idf_method``, dtypes).

    Returns:
      bm25s's ``scores`` dict: CSC ``data``, ``indices`` (document of each score), ``indptr``
      (``[n_vocab + 1]``), ``num_docs``.
    """
    from bm25s.scoring import _select_idf_scorer, _select_tfc_scorer

    n_docs = len(lengths)
    # one key per (term, document) occurrence, sorted by term then document: CSC order
    # (in place where it can be: this array is the build's largest)
    keys = ids.astype(np.int64)
    keys *= n_docs
    keys += np.repeat(np.arange(n_docs, dtype=np.int64), lengths)
    keys.sort()
    first = np.empty(len(keys), dtype=bool)
    first[:1] = True
    np.not_equal(keys[1:], keys[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    del first
    tf = np.diff(starts, append=len(keys))
    rows = keys[starts]
    del keys, starts
    terms = rows // n_docs
    rows -= terms * n_docs
    df = np.bincount(terms, minlength=n_vocab)
    idf_of = _select_idf_scorer(model.idf_method)
    seen = df > 0
    distinct = np.unique(df[seen])
    idf_values = np.asarray([idf_of(int(d), N=n_docs) for d in distinct], dtype=model.dtype)
    idf = np.zeros(n_vocab, dtype=model.dtype)
    idf[seen] = idf_values[np.searchsorted(distinct, df[seen])]
    average = np.asarray(lengths).mean()
    tfc = _select_tfc_scorer(model.method)(
        tf_array=tf.astype(model.dtype),
        l_d=lengths[rows],
        l_avg=average,
        k1=model.k1,
        b=model.b,
        delta=model.delta,
    )
    data = (idf[terms] * tfc).astype(model.dtype)
    indptr = np.concatenate([[0], np.cumsum(df)])  # df: each term's number of documents
    return {
        "data": data,
        "indices": rows.astype(model.int_dtype),
        "indptr": indptr.astype(np.int64),
        "num_docs": n_docs,
    }


LEXICON_HASHES = "lexicon.hashes.npy"  # uint64 [n]: each term's 64-bit hash, ascending
LEXICON_TERMS = "lexicon.terms.npy"  # the terms' UTF-8 bytes, in that order, one after another
LEXICON_OFFSETS = "lexicon.offsets.npy"  # int64 [n + 1]: where each term starts
LEXICON_IDS = "lexicon.ids.npy"  # int32 [n]: each term's vocabulary id


def term_hash(term: bytes) -> int:
    """A 64-bit hash of a term that is the same in every process and Python version."""
    return int.from_bytes(hashlib.blake2b(term, digest_size=8).digest(), "little")


def write_lexicon(directory: Path, vocab: Mapping[str, int]) -> None:
    """Writes ``vocab`` (term -> id; the empty term left out) as a mappable lexicon, ordered
    by term hash (ties by term)."""
    items = sorted(
        (term_hash(encoded), encoded, index)
        for encoded, index in ((term.encode(), index) for term, index in vocab.items() if term)
    )
    offsets = np.zeros(len(items) + 1, dtype=np.int64)
    np.cumsum([len(term) for _, term, _ in items], out=offsets[1:])
    blob = b"".join(term for _, term, _ in items)
    np.save(directory / LEXICON_HASHES, np.asarray([h for h, _, _ in items], dtype=np.uint64))
    np.save(directory / LEXICON_TERMS, np.frombuffer(blob, dtype=np.uint8))
    np.save(directory / LEXICON_OFFSETS, offsets)
    np.save(directory / LEXICON_IDS, np.asarray([i for _, _, i in items], dtype=np.int32))


class Lexicon:
    """A vocabulary (term -> id) in memory-mapped arrays: a term is found by binary search
    of its hash (in C, ``np.searchsorted``), then compared byte for byte.

    Replaces a Python dict of every term in each server worker (several GB at wiki scale,
    one copy per process) with arrays in the page cache that all workers share.
    """

    def __init__(self, directory: Path) -> None:
        self._hashes = np.load(directory / LEXICON_HASHES, mmap_mode="r")
        self._terms = np.load(directory / LEXICON_TERMS, mmap_mode="r")
        self._offsets = np.load(directory / LEXICON_OFFSETS, mmap_mode="r")
        self._ids = np.load(directory / LEXICON_IDS, mmap_mode="r")
        n = len(self._ids)
        if len(self._hashes) != n or len(self._offsets) != n + 1:
            raise ValueError("the lexicon files do not match each other")
        if self._offsets[-1] != len(self._terms):
            raise ValueError("the lexicon files do not match each other")
        self._cache: dict[str, int | None] = {}

    def __len__(self) -> int:
        return len(self._ids)

    def _term(self, position: int) -> bytes:
        start, end = int(self._offsets[position]), int(self._offsets[position + 1])
        return self._terms[start:end].tobytes()

    def get(self, term: str) -> int | None:
        """The id of ``term``, or None (up to 65,536 answers kept, then started afresh)."""
        try:
            return self._cache[term]
        except KeyError:
            pass
        found = self._find(term)
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[term] = found
        return found

    def _find(self, term: str) -> int | None:
        encoded = term.encode()
        key = np.uint64(term_hash(encoded))
        position = int(np.searchsorted(self._hashes, key))
        while position < len(self._ids) and self._hashes[position] == key:
            if self._term(position) == encoded:
                return int(self._ids[position])
            position += 1  # another term with the same hash
        return None

    def items(self):
        """``(term, id)`` pairs, in the file's order."""
        for position in range(len(self._ids)):
            yield self._term(position).decode(), int(self._ids[position])


class Bm25sBackend(SearchBackend):
    """BM25 over a scipy sparse matrix of precomputed term scores (``bm25s``).

    Build options: ``k1`` (0.9), ``b`` (0.4), ``method`` (``"lucene"``; also ``"robertson"``,
    ``"atire"``, ``"bm25l"``, ``"bm25+"``), ``stemmer`` (``"auto"``), ``stopwords``
    (``"en"``), ``show_progress`` (False).
    """

    name = "bm25s"

    def __init__(
        self, docs: Sequence[Mapping[str, str]], model: Any, analyzer: Analyzer, params: dict
    ) -> None:
        super().__init__(docs)
        self._model = model
        self._analyzer = analyzer
        self._params = params
        self._vocab: Any = model.vocab_dict  # a dict, or a Lexicon when loaded

    @classmethod
    def build(
        cls,
        docs: Sequence[Mapping[str, str]],
        *,
        k1: float = 0.9,
        b: float = 0.4,
        method: str = "lucene",
        stemmer: str | None = "auto",
        stopwords: str | None = "en",
        show_progress: bool = False,
    ) -> Bm25sBackend:
        bm25s = _import_bm25s()
        docs = validate_docs(docs)
        if not docs:
            raise ValueError("cannot build an index over zero documents")
        if not (k1 >= 0 and 0 <= b <= 1):
            raise ValueError(f"need k1 >= 0 and 0 <= b <= 1, got k1={k1}, b={b}")
        analyzer = Analyzer(stemmer=stemmer, stopwords=stopwords)
        try:
            model = bm25s.BM25(k1=k1, b=b, method=method)
        except (ValueError, KeyError) as error:
            raise ValueError(f"bad BM25 options: {error}") from error
        vocab: dict[str, int] = {}
        texts = [doc["contents"] for doc in docs]
        ids, lengths = corpus_term_ids(analyzer, texts, vocab, show_progress)
        if method in model.methods_requiring_nonoccurrence:  # bm25l, bm25+: bm25s's own loop
            ends = np.cumsum(lengths)
            corpus_ids = [ids[end - n : end].tolist() for n, end in zip(lengths, ends, strict=True)]
            model.index((corpus_ids, vocab), show_progress=show_progress)
        else:
            model.scores = bm25_matrix(ids, lengths, len(vocab), model)
            model.vocab_dict = {**vocab, "": len(vocab)}  # as bm25s.BM25.index leaves it
            model.unique_token_ids_set = set(model.vocab_dict.values())
            model.nonoccurrence_array = None
        params = {"k1": k1, "b": b, "method": method, **analyzer.options()}
        return cls(docs, model, analyzer, params)

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        validate_queries(queries, k)
        results = []
        for query in queries:
            found = (self._vocab.get(term) for term in self._analyzer(query))
            term_ids = [term_id for term_id in found if term_id is not None]
            if not term_ids:
                results.append([])
                continue
            scores = np.asarray(self._model.get_scores_from_ids(term_ids))
            best = top_k(scores, int(k))
            results.append([Hit(self.doc_ids[i], float(scores[i])) for i in best])
        return results

    def save(self, directory: str | os.PathLike[str]) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        target = (directory / _MODEL_DIR).resolve()
        source = getattr(self, "_loaded_from", None)
        if source is None:
            self._model.save(str(target), show_progress=False)
            write_lexicon(target, self._vocab)
        elif target != source:  # a loaded index: its files are the index
            shutil.copytree(source, target, dirs_exist_ok=True)
        # (over the directory it was loaded from, its memory-mapped files are already these;
        # rewriting them would truncate pages in use)
        write_docs(directory, self.docs)
        write_meta(directory, self.name, len(self), self._params)

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> Bm25sBackend:
        bm25s = _import_bm25s()
        directory = Path(directory)
        meta = read_meta(directory)
        if meta["backend"] != cls.name:
            raise BackendError(f"{directory} holds a {meta['backend']!r} index, not bm25s")
        params = meta["options"]
        docs = read_docs(directory)
        try:
            # Memory-mapped: the score matrix stays in the page cache, shared by every worker
            # process that serves the same directory instead of copied into each.
            # So are the terms, when the index has its lexicon (else bm25s's vocab dict).
            model_dir = directory / _MODEL_DIR
            lexicon = Lexicon(model_dir) if (model_dir / LEXICON_IDS).is_file() else None
            model = bm25s.BM25.load(
                str(model_dir), show_progress=False, mmap=True, load_vocab=lexicon is None
            )
            if lexicon is not None:
                model.vocab_dict = lexicon
        except (OSError, ValueError, KeyError, json.JSONDecodeError) as error:
            raise BackendError(f"cannot load the bm25s index in {directory}: {error}") from error
        if model.scores["num_docs"] != len(docs):
            raise BackendError(
                f"{directory}: the index has {model.scores['num_docs']} documents but "
                f"docs.jsonl has {len(docs)}"
            )
        analyzer = Analyzer(stemmer=params.get("stemmer"), stopwords=params.get("stopwords"))
        backend = cls(docs, model, analyzer, params)
        backend._loaded_from = (directory / _MODEL_DIR).resolve()
        return backend
