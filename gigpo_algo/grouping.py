"""Step-level (anchor-state) grouping for GiGPO.

Two rows share a step group when they belong to the same episode group and were taken from
the same environment state, their *anchor*. Anchors are matched exactly (by value), or by
text similarity with the greedy first-fit clustering that verl-agent uses.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np

from gigpo_algo._arrays import factorize_hashables, factorize_ints, is_torch_tensor, to_ids
from gigpo_algo._grouped import combine_codes

METRICS = ("difflib", "indel")


def anchor_groups(
    anchors: Any,
    group_ids: Any,
    *,
    similarity: float | None = None,
    metric: str = "difflib",
) -> np.ndarray:
    """Step-group id of every row: the same id for the same anchor state in the same group.

    Args:
        anchors: shape (N,): one anchor per row. Exact mode accepts ``str``, ``bytes``,
            ``int``, finite ``float``, ``tuple``/``list`` and ``dict`` (compared by value,
            recursively) and numpy arrays (compared by shape and contents); a 2-D numpy array
            or torch tensor of shape (N, D) gives one anchor per row. Similarity mode needs
            ``str`` anchors.
        group_ids: shape (N,), ints or strings: the episode group of each row.
        similarity: None for exact matching; a threshold t in (0, 1) for similarity
            clustering. Inside each episode group, rows are visited in order; a row joins the
            first existing cluster whose first member's anchor ``b`` has
            ``sim(row_anchor, b) >= t``, else it starts a new cluster.
        metric: similarity used when ``similarity`` is set. ``"difflib"``:
            ``difflib.SequenceMatcher(None, a, b).ratio()``, the same partition as verl-agent
            (computed faster: identical texts are clustered once, and provable upper bounds of
            the ratio skip most comparisons). ``"indel"``: rapidfuzz's normalized Indel
            similarity ``2 * LCS / (len(a) + len(b))`` (``pip install "gigpo[fast]"``), much
            faster, and never below difflib's ratio, so it groups at least as eagerly: NOT the
            same partition.

    Returns:
        int64, shape (N,): step-group ids 0..K-1, numbered in order of first appearance.

    Raises:
        ValueError: length mismatch, unsupported anchor types, non-text anchors in
            similarity mode, threshold outside (0, 1), unknown metric.
    """
    groups, num_groups = to_ids(group_ids, "group_ids")
    return step_group_codes(anchors, groups, num_groups, similarity, metric)


def step_group_codes(
    anchors: Any,
    groups: np.ndarray,
    num_groups: int,
    similarity: float | None,
    metric: str,
    *,
    metric_name: str = "metric",
) -> np.ndarray:
    """:func:`anchor_groups` on already-coded episode groups (int64, shape (N,))."""
    n = len(groups)
    if similarity is None:
        codes, num_codes = _anchor_codes(anchors, n)
        return combine_codes(groups, num_groups, codes, num_codes)[0]
    texts = _anchor_texts(anchors, n)
    if isinstance(similarity, bool) or not isinstance(similarity, (int, float, np.floating)):
        raise ValueError(f"similarity must be a float in (0, 1) or None, got {similarity!r}")
    if not 0.0 < float(similarity) < 1.0:
        raise ValueError(f"similarity must be in (0, 1), got {similarity!r}")
    if metric not in METRICS:
        raise ValueError(f"{metric_name} must be one of {METRICS}, got {metric!r}")
    return similarity_groups(texts, groups, float(similarity), metric=metric)


# --------------------------------------------------------------------------- exact mode


def _anchor_codes(anchors: Any, n: int) -> tuple[np.ndarray, int]:
    if is_torch_tensor(anchors):
        anchors = anchors.detach().cpu().numpy()
    if isinstance(anchors, np.ndarray) and anchors.dtype.kind in "biuf":
        if len(anchors) != n:
            raise ValueError(f"anchors has length {len(anchors)}, expected {n}")
        return _numeric_rows_codes(anchors)
    if isinstance(anchors, np.ndarray):
        anchors = anchors.tolist() if anchors.ndim == 1 else list(anchors)
    elif isinstance(anchors, (str, bytes)) or not isinstance(anchors, Sequence):
        raise ValueError(f"anchors must be a sequence with one anchor per row, got {type(anchors)}")
    if len(anchors) != n:
        raise ValueError(f"anchors has length {len(anchors)}, expected {n}")
    kinds = set(map(type, anchors))
    if kinds <= {str, bytes, int}:
        codes, table = factorize_hashables(anchors)
        return codes, len(table)
    codes, table = factorize_hashables([_hashable(a) for a in anchors])
    return codes, len(table)


def _numeric_rows_codes(arr: np.ndarray) -> tuple[np.ndarray, int]:
    """Codes of the rows of an (N, ...) numeric array, equal rows equal codes."""
    if arr.dtype.kind == "f":
        if not np.isfinite(arr).all():
            raise ValueError("anchors contains NaN or inf")
        arr = arr + 0.0  # -0.0 and 0.0 are the same anchor
    if arr.ndim == 1:
        return factorize_ints(arr)
    rows = np.ascontiguousarray(arr.reshape(len(arr), -1))
    as_bytes = rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).ravel()
    return factorize_ints(as_bytes)


def _hashable(a: Any) -> Any:
    """A hashable, value-comparable key for one anchor."""
    if isinstance(a, (str, bytes, bool, int, np.integer)):
        return a
    if isinstance(a, (float, np.floating)):
        if not np.isfinite(a):
            raise ValueError(f"anchors contains a non-finite float: {a!r}")
        return float(a) + 0.0
    if isinstance(a, (tuple, list)):
        return ("__seq__", tuple(_hashable(x) for x in a))
    if isinstance(a, dict):
        return ("__dict__", tuple(sorted((repr(k), _hashable(v)) for k, v in a.items())))
    if isinstance(a, np.ndarray):
        return ("__ndarray__", a.shape, tuple(_hashable(x) for x in a.ravel().tolist()))
    if is_torch_tensor(a):
        return _hashable(a.detach().cpu().numpy())
    raise ValueError(
        f"anchors must be str, bytes, int, float, tuple, list, dict or numpy arrays; "
        f"got {type(a).__name__}"
    )


# ----------------------------------------------------------------------- similarity mode


def _anchor_texts(anchors: Any, n: int) -> list[str]:
    if isinstance(anchors, np.ndarray):
        anchors = anchors.tolist() if anchors.ndim == 1 else None
    if anchors is None or isinstance(anchors, (str, bytes)) or not isinstance(anchors, Sequence):
        raise ValueError("anchors must be a sequence of str for similarity grouping")
    if len(anchors) != n:
        raise ValueError(f"anchors has length {len(anchors)}, expected {n}")
    texts = list(anchors)
    for a in texts:
        if not isinstance(a, str):
            raise ValueError(
                f"similarity grouping needs str anchors, got {type(a).__name__}; "
                "use similarity=None for exact matching"
            )
    return texts


def similarity_groups(
    texts: list[str],
    groups: np.ndarray,
    threshold: float,
    *,
    metric: str = "difflib",
    upper_bound: str = "auto",
    matcher: str = "auto",
) -> np.ndarray:
    """Greedy first-fit similarity clustering inside each episode group.

    Args:
        texts: N anchor strings.
        groups: int64 episode-group codes, shape (N,).
        threshold: t in (0, 1).
        metric: ``"difflib"`` or ``"indel"`` (see :func:`anchor_groups`).
        upper_bound: for ``"difflib"``, how candidate clusters are pruned before the exact
            ratio is computed: ``"auto"`` (rapidfuzz's Indel similarity when installed, else
            character counts), ``"indel"``, ``"counts"``. Every choice gives the same result.
        matcher: for ``"difflib"``, the ``SequenceMatcher`` that computes the exact ratio:
            ``"auto"`` (``cydifflib``, a compiled implementation of difflib's algorithm,
            when installed with ``pip install "gigpo[fast]"``; else the standard library),
            ``"stdlib"`` or ``"cydifflib"``. Both compute the same ratios.

    Returns:
        int64 step-group ids, shape (N,), in order of first appearance.
    """
    out = np.empty(len(texts), dtype=np.int64)
    order = np.argsort(groups, kind="stable")
    bounds = np.flatnonzero(np.diff(groups[order])) + 1
    next_id = 0
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
    stack = [(0, len(a), 0, len(b), bound(a, b))]
    pending = stack[0][4]
    while stack:
        alo, ahi, blo, bhi, rect_bound = stack.pop()
        pending -= rect_bound
        i, j, k = matcher.find_longest_match(alo, ahi, blo, bhi)
        if k:
            found += k
            if 2.0 * found / total >= threshold:
                return True
            if alo < i and blo < j:
                left = bound(a[alo:i], b[blo:j])
                stack.append((alo, i, blo, j, left))
                pending += left
            if i + k < ahi and j + k < bhi:
                right = bound(a[i + k : ahi], b[j + k : bhi])
                stack.append((i + k, ahi, j + k, bhi, right))
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
