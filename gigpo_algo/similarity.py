"""Similarity clustering of text anchors: verl-agent's greedy first-fit, computed fast.

:func:`similarity_groups` gives exactly the partition of verl-agent's ``build_step_group``
with ``enable_similarity=True`` (``metric="difflib"``), or the same greedy clustering with
rapidfuzz's normalized Indel similarity (``metric="indel"``) or with the cosine of sentence
embeddings (``metric="embedding"``, :mod:`gigpo_algo.embedding`).
"""

from __future__ import annotations

import difflib
import heapq
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np

from gigpo_algo._arrays import factorize_ints
from gigpo_algo.embedding import embedding_groups


def similarity_groups(
    texts: list[str],
    groups: np.ndarray,
    threshold: float,
    *,
    metric: str = "difflib",
    upper_bound: str = "auto",
    matcher: str = "auto",
    encoder: Any = None,
) -> np.ndarray:
    """Greedy first-fit similarity clustering inside each episode group.

    Args:
        texts: N anchor strings.
        groups: int64 episode-group codes, shape (N,).
        threshold: t in (0, 1).
        metric: ``"difflib"``, ``"indel"`` or ``"embedding"`` (see :func:`anchor_groups`).
        upper_bound: for ``"difflib"``, how candidate clusters are pruned before the exact
            ratio is computed: ``"auto"`` (rapidfuzz's Indel similarity when installed, else
            character counts), ``"indel"``, ``"counts"``. Every choice gives the same result.
        matcher: for ``"difflib"``, the ``SequenceMatcher`` that computes the exact ratio:
            ``"auto"`` (``cydifflib``, a compiled implementation of difflib's algorithm,
            when installed with ``pip install "gigpo[fast]"``; else the standard library),
            ``"stdlib"`` or ``"cydifflib"``. Both compute the same ratios.
        encoder: for ``"embedding"``, texts -> array (n, d); None: the packaged MiniLM-L6
            (see :mod:`gigpo_algo.embedding`).

    Returns:
        int64 step-group ids, shape (N,), in order of first appearance.
    """
    out = np.empty(len(texts), dtype=np.int64)
    order = np.argsort(groups, kind="stable")
    bounds = np.flatnonzero(np.diff(groups[order])) + 1
    next_id = 0
    if metric == "embedding":
        parts = [rows for rows in np.split(order, bounds) if len(rows)]
        for rows, local in zip(
            parts, embedding_groups(texts, parts, threshold, encoder), strict=True
        ):
            out[rows] = local + next_id
            next_id += int(local.max()) + 1
        return factorize_ints(out)[0]
    if metric == "indel":
        similar = _indel_similar(threshold)
    else:
        similar = _DifflibFirstFit(threshold, upper_bound, matcher)
    for rows in np.split(order, bounds):
        if len(rows) == 0:
            continue
        local = similar([texts[i] for i in rows.tolist()])
        out[rows] = local + next_id
        next_id += int(local.max()) + 1
    # Renumber in order of first appearance across the whole batch.
    return factorize_ints(out)[0]


def _indel_similar(threshold: float) -> Callable[[list[str]], np.ndarray]:
    indel = _rapidfuzz_indel()

    def cluster(texts: list[str]) -> np.ndarray:
        reps: list[str] = []
        seen: dict[str, int] = {}
        out = np.empty(len(texts), dtype=np.int64)
        for i, text in enumerate(texts):
            found = seen.get(text)
            if found is None:
                found = len(reps)
                for j, rep in enumerate(reps):
                    if indel.normalized_similarity(text, rep, score_cutoff=threshold) >= threshold:
                        found = j
                        break
                if found == len(reps):
                    reps.append(text)
                seen[text] = found
            out[i] = found
        return out

    return cluster


def _rapidfuzz() -> Any:
    """The rapidfuzz modules we use, as one namespace (``.process``, ``.Indel``)."""
    try:
        from rapidfuzz import process
        from rapidfuzz.distance import Indel
    except ImportError:  # pragma: no cover - exercised only without the extra
        raise ImportError('metric="indel" needs rapidfuzz: pip install "gigpo[fast]"') from None
    return SimpleNamespace(process=process, Indel=Indel)


def _rapidfuzz_indel() -> Any:
    return _rapidfuzz().Indel


class _DifflibFirstFit:
    """verl-agent's first-fit clustering with ``SequenceMatcher.ratio``, pruned exactly.

    Three facts keep the partition identical while skipping most of the work:
    1. A text equal to an earlier row's text lands in the same cluster: clusters are only
       appended, so it meets the same representatives with the same ratios first.
    2. ``ratio = 2*M/T`` where M counts characters in matching blocks, a common subsequence;
       so ``M <= LCS(a, b) <= |multiset intersection|``, and a representative whose bound
       is below t can be skipped without computing the ratio.
    3. A ``SequenceMatcher`` with a fixed second sequence caches its index of it, so each
       representative's index is built once.
    4. The ratio is only compared with t, so difflib's block search can stop as soon as the
       outcome is certain (see :func:`_ratio_reaches`).
    """

    def __init__(self, threshold: float, upper_bound: str, matcher: str = "auto") -> None:
        self.threshold = threshold
        self.matcher_cls = _matcher_class(matcher)
        if upper_bound == "auto":
            try:
                from rapidfuzz.distance import Indel  # noqa: F401

                upper_bound = "indel"
            except ImportError:  # pragma: no cover
                upper_bound = "counts"
        if upper_bound not in ("indel", "counts"):
            raise ValueError(f"upper_bound must be auto, indel or counts, got {upper_bound!r}")
        self.upper_bound = upper_bound

    def __call__(self, texts: list[str]) -> np.ndarray:
        t = self.threshold
        seen: dict[str, int] = {}
        reps: list[str] = []
        matchers: list[Any] = []
        out = np.empty(len(texts), dtype=np.int64)
        counts = _CharCounts(list(dict.fromkeys(texts))) if self.upper_bound == "counts" else None
        indel = _rapidfuzz() if self.upper_bound == "indel" else None
        rep_lengths: list[int] = []
        for i, text in enumerate(texts):
            found = seen.get(text)
            if found is None:
                found = -1
                if reps:
                    sub_bound = indel.Indel.similarity if indel is not None else _shorter
                    for j in self._candidates(text, reps, rep_lengths, counts, indel):
                        if _ratio_reaches(matchers[j], text, reps[j], t, sub_bound):
                            found = j
                            break
                if found < 0:
                    found = len(reps)
                    reps.append(text)
                    rep_lengths.append(len(text))
                    m = self.matcher_cls(None, "", text)
                    matchers.append(m)
                    if counts is not None:
                        counts.add_rep(text)
                seen[text] = found
            out[i] = found
        return out

    def _candidates(
        self,
        text: str,
        reps: list[str],
        rep_lengths: list[int],
        counts: _CharCounts | None,
        indel: Any,
    ) -> list[int]:
        """Representatives, in order, whose upper bound on the ratio reaches the threshold."""
        t = self.threshold
        la = len(text)
        if indel is not None:
            lcs = indel.process.cdist([text], reps, scorer=indel.Indel.similarity, dtype=np.int64)
            total = la + np.asarray(rep_lengths, dtype=np.float64)
            with np.errstate(divide="ignore", invalid="ignore"):
                bound = np.where(total > 0, 2.0 * lcs[0] / total, 1.0)
            return np.flatnonzero(bound >= t).tolist()
        assert counts is not None
        common = counts.intersections(text)
        total = la + np.asarray(rep_lengths, dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            bound = np.where(total > 0, 2.0 * common / total, 1.0)
        return np.flatnonzero(bound >= t).tolist()


def _shorter(a: str, b: str) -> int:
    return min(len(a), len(b))


def _ratio_reaches(
    matcher: Any, a: str, b: str, threshold: float, bound: Callable[[str, str], int]
) -> bool:
    """``SequenceMatcher(None, a, b).ratio() >= threshold``, decided early when possible.

    ``matcher`` already holds ``b`` as its second sequence. difflib's ratio is ``2*M/T``
    where M sums the blocks that ``get_matching_blocks`` finds by recursive longest-match
    search over sub-rectangles of (a, b). The blocks found so far are a lower bound of M;
    adding ``bound`` (an upper bound on matches, e.g. the LCS) of every rectangle still to
    search gives an upper bound. The same blocks are found whatever the search order, so
    stopping when either bound settles the comparison gives exactly ratio() >= threshold.
    """
    total = len(a) + len(b)
    if total == 0:
        return 1.0 >= threshold  # difflib's ratio of two empty strings
    matcher.set_seq1(a)
    found = 0
    # Largest bound first: it holds the most uncertainty, so the decision comes soonest.
    pending = bound(a, b)
    heap = [(-pending, 0, len(a), 0, len(b))]
    while heap:
        neg_bound, alo, ahi, blo, bhi = heapq.heappop(heap)
        pending += neg_bound
        i, j, k = matcher.find_longest_match(alo, ahi, blo, bhi)
        if k:
            found += k
            if 2.0 * found / total >= threshold:
                return True
            if alo < i and blo < j:
                left = bound(a[alo:i], b[blo:j])
                heapq.heappush(heap, (-left, alo, i, blo, j))
                pending += left
            if i + k < ahi and j + k < bhi:
                right = bound(a[i + k : ahi], b[j + k : bhi])
                heapq.heappush(heap, (-right, i + k, ahi, j + k, bhi))
                pending += right
        if 2.0 * (found + pending) / total < threshold:
            return False
    return 2.0 * found / total >= threshold


def _matcher_class(matcher: str) -> Any:
    """The SequenceMatcher class to use: cydifflib's when available (same results, faster)."""
    if matcher not in ("auto", "stdlib", "cydifflib"):
        raise ValueError(f"matcher must be auto, stdlib or cydifflib, got {matcher!r}")
    if matcher != "stdlib":
        try:
            import cydifflib

            return cydifflib.SequenceMatcher
        except ImportError:
            if matcher == "cydifflib":
                raise ImportError('matcher="cydifflib" needs: pip install "gigpo[fast]"') from None
    return difflib.SequenceMatcher


class _CharCounts:
    """Character histograms of one group's distinct texts, for multiset-intersection bounds."""

    def __init__(self, distinct: list[str]) -> None:
        alphabet = {c: k for k, c in enumerate(dict.fromkeys("".join(distinct)))}
        self.row = {text: k for k, text in enumerate(distinct)}
        self.hist = np.zeros((len(distinct), max(len(alphabet), 1)), dtype=np.int32)
        for k, text in enumerate(distinct):
            if text:
                idx, cnt = np.unique(
                    np.fromiter((alphabet[c] for c in text), dtype=np.int64, count=len(text)),
                    return_counts=True,
                )
                self.hist[k, idx] = cnt
        self.rep_rows: list[int] = []

    def add_rep(self, text: str) -> None:
        self.rep_rows.append(self.row[text])

    def intersections(self, text: str) -> np.ndarray:
        mine = self.hist[self.row[text]]
        return np.minimum(self.hist[self.rep_rows], mine).sum(axis=1).astype(np.float64)
