"""HGPO's hierarchy of groups, level by level, in memory linear in the rows N.

:class:`HGPOLevels` keeps what makes every row's group at every level (its step group, its
previous row, its return): O(N) whatever ``history_length``. Level k + 1's group of a row is
a code of (its level-k group, the state k rows earlier in its trajectory). A row alone in its
group at some level is alone at every deeper level too (its group there is a subset of this
one), so :func:`weighted_means` drops it from the passes that follow, and adds each level's
items into the weighted sums as it goes: memory O(N), time O(N) per level for the rows still
in a group of two or more. Only the (K, N) tables (:meth:`HGPOLevels.tables`) cost K x N.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from gigpo_algo._arrays import factorize_ints
from gigpo_algo._grouped import combine_codes, normalize_in_groups


@dataclass(frozen=True, eq=False)
class HGPOLevels:
    """Every row's group at every level, kept as the O(N) arrays that make them: ``states``
    and ``prev``, int64 (N,), each row's step group and previous row (-1: none); ``returns``,
    float64 (N,). :meth:`groups` yields the levels one by one, each of O(N); :meth:`tables`
    makes the (K, N) tables of :class:`~gigpo_algo.hgpo.HGPOResult` (once; K x N memory
    and time)."""

    states: np.ndarray
    prev: np.ndarray
    returns: np.ndarray
    norm: str
    eps: float
    num_levels: int
    _tables: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = field(
        default_factory=list, repr=False
    )

    def groups(
        self, *, prune: bool = False
    ) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
        """Yields ``(k, rows, group, size, advantage)`` for level k + 1 = 1 .. K: the rows
        in the level (int64 (M,), ascending), each one's group there (int64 (M,), numbered
        in order of first appearance), its size and the row's advantage in it (float64
        (M,), NaN in a group of one). ``prune`` leaves out the rows alone at a shallower
        level (alone at every deeper one too; their groups there are not yielded).

        Raises:
            ValueError: an advantage overflows float64 (naming ``rewards`` and the rows).
        """
        n = len(self.states)
        if not n:
            return
        key, num_keys = factorize_ints(self.states)
        num_states = int(self.states.max()) + 1
        rows = np.arange(n)
        back = rows.copy()  # each row's oldest state's row in its window
        for k in range(self.num_levels):
            if k:  # extend each window by the state one row further back
                keep = self.prev[back] >= 0
                rows, back, key = rows[keep], self.prev[back[keep]], key[keep]
                if not len(rows):
                    return
                key, num_keys = combine_codes(key, num_keys, self.states[back], num_states)
            size = np.bincount(key, minlength=num_keys)[key]
            returns = self.returns[rows]
            a = normalize_in_groups(returns, key, num_keys, self.norm, self.eps, ddof=0)
            a = np.where(size >= 2, a, np.nan)
            overflow = np.isinf(a)
            if overflow.any():
                raise ValueError(
                    f"rewards are too large: the level-{k + 1} advantages (a return less its "
                    f"group's mean) overflow float64 (at rows {rows[overflow][:5].tolist()})"
                )
            yield k, rows, key, size, a
            if prune:
                keep = size >= 2
                rows, back, key = rows[keep], back[keep], key[keep]

    def tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(level_group_ids, level_sizes, level_advantages)``, each (K, N), as
        :class:`HGPOResult` describes them; made on the first call."""
        if not self._tables:
            n = len(self.states)
            ids = np.full((self.num_levels, n), -1, dtype=np.int64)
            sizes = np.zeros((self.num_levels, n), dtype=np.int64)
            items = np.full((self.num_levels, n), np.nan)
            for k, rows, key, size, a in self.groups():
                ids[k, rows], sizes[k, rows], items[k, rows] = key, size, a
            self._tables.append((ids, sizes, items))
        return self._tables[0]


def weighted_means(
    levels: HGPOLevels, weights: np.ndarray, base: np.ndarray | None, drop_zero: bool, eps: float
) -> tuple[np.ndarray, np.ndarray]:
    """Each row's ``sum_k w_k a_k / (sum_k w_k + eps)`` over its items, 0 where it has none.

    Args:
        levels: the hierarchy (K levels, N rows).
        weights: float64 (K,), finite: level k + 1's weight.
        base: float64 (N,), A_E as each row's level-0 item of weight 1, or None.
        drop_zero: leave items exactly 0 out.
        eps: added to the sum of the weights.

    Returns:
        ``(step_only, advantages)``, float64 (N,) each: over the level items alone, and with
        ``base`` (the same array as ``step_only`` when ``base`` is None). The sums are the
        dense ones' bit for bit (the same additions in the same order, level by level); the
        weights are scaled by one power of two (exact) so that with the base weight they sum
        to at most 1, and no sum overflows.
    """
    n = len(levels.states)
    shift = _weight_shift(weights)
    w = np.ldexp(weights, -shift)
    step_num, step_total = np.zeros(n), np.zeros(n)
    base_num, base_total = np.zeros(n), np.zeros(n)
    if base is not None:
        present = base != 0.0 if drop_zero else np.ones(n, dtype=bool)
        base_total[present] = np.ldexp(1.0, -shift)
        base_num[present] = np.ldexp(base[present], -shift)
    for k, rows, _, _, a in levels.groups(prune=True):
        present = ~np.isnan(a)
        if drop_zero:
            present &= a != 0.0
        rows, wa = rows[present], w[k] * a[present]
        step_total[rows] += w[k]
        step_num[rows] += wa
        if base is not None:
            base_total[rows] += w[k]
            base_num[rows] += wa
    small = float(np.ldexp(eps, -shift))
    step_only = _ratio(step_num, step_total, small)
    return step_only, (step_only if base is None else _ratio(base_num, base_total, small))


def _weight_shift(weights: np.ndarray) -> int:
    """The power of two ``e`` that brings ``1 + sum(weights)`` to at most 1 as
    ``ldexp(weights, -e)``, computed without overflow (weights finite, >= 1; shape (K,))."""
    top = int(np.frexp(weights.max())[1]) if len(weights) else 0
    total = np.ldexp(1.0, -top) + np.ldexp(weights, -top).sum()  # <= K + 1
    return top + int(np.frexp(total)[1])


def _ratio(num: np.ndarray, total: np.ndarray, eps: float) -> np.ndarray:
    """``num / (total + eps)``, 0 where ``total`` is 0 (no item); float64 (N,) each."""
    return np.divide(num, total + eps, out=np.zeros_like(num), where=total > 0)
