"""Turn spans against hand-built multi-turn sequences, laid out as OpenRLHF 0.11.2 lays them."""

from __future__ import annotations

import numpy as np
import pytest

from gigpo_algo.tokens import turns_to_tokens
from training.openrlhf.spans import batch_turn_spans, turn_columns


def _episode(parts):
    """Concatenates ("prompt"|"action"|"env", n_tokens) parts; returns tokens and ranges."""
    tokens, ranges, kinds = [], [], []
    for kind, n in parts:
        start = len(tokens)
        tokens += [len(tokens) + 100 + i for i in range(n)]
        kinds += [kind] * n
        if kind == "action":
            ranges.append((start, start + n))
    return tokens, ranges, kinds


def _openrlhf_action_mask(length, ranges, max_len):
    """OpenRLHF's sample layout: 1 on response tokens, cut to max_len, first token dropped."""
    mask = np.zeros(length, dtype=np.int64)
    for start, end in ranges:
        mask[start:end] = 1
    return mask[1:max_len]


@pytest.mark.parametrize("max_len", [64, 30, 21, 12, 9, 5])
def test_columns_cover_exactly_the_action_mask(max_len):
    parts = [("prompt", 7), ("action", 4), ("env", 5), ("action", 6), ("env", 3), ("action", 2)]
    tokens, ranges, _ = _episode(parts)
    cols = turn_columns(ranges, len(tokens), max_len)
    mask = _openrlhf_action_mask(len(tokens), ranges, max_len)
    placed = np.zeros_like(mask)
    for first, last in cols:
        placed[first:last] += 1
    assert np.array_equal(placed, mask)


def test_each_turn_value_lands_on_its_own_response_tokens():
    parts = [("prompt", 5), ("action", 3), ("env", 4), ("action", 2), ("env", 2), ("action", 3)]
    tokens, ranges, kinds = _episode(parts)
    cols = turn_columns(ranges, len(tokens), max_len=100)
    spans = batch_turn_spans([cols], mask_width=len(tokens) - 1)
    out = turns_to_tokens(np.array([1.0, -2.0, 3.0]), spans, (1, len(tokens) - 1))[0]
    # Column c is about token c + 1: read the value each token received.
    per_token = np.concatenate([[0.0], out])
    turn_of_token = np.zeros(len(tokens))
    for value, (start, end) in zip([1.0, -2.0, 3.0], ranges, strict=True):
        turn_of_token[start:end] = value
    assert np.array_equal(per_token, turn_of_token)
    assert all(per_token[i] == 0 for i, kind in enumerate(kinds) if kind != "action")


def test_truncation_keeps_the_head_of_a_cut_turn_and_empties_later_ones():
    tokens, ranges, _ = _episode([("prompt", 4), ("action", 4), ("env", 2), ("action", 5)])
    # Tokens 0..7 kept: turn 1 whole (4..8 -> cols 3..7), turn 2 (10..15) gone.
    cols = turn_columns(ranges, len(tokens), max_len=8)
    assert cols.tolist() == [[3, 7], [7, 7]]
    cols = turn_columns(ranges, len(tokens), max_len=12)
    assert cols.tolist() == [[3, 7], [9, 11]]


def test_batch_spans_number_the_sequences_and_respect_padding():
    a = turn_columns([(3, 5), (7, 8)], 9, 100)
    b = turn_columns([(2, 6)], 6, 100)
    spans = batch_turn_spans([a, b], mask_width=8)
    assert spans.tolist() == [[0, 2, 4], [0, 6, 7], [1, 1, 5]]
    assert batch_turn_spans([], 4).shape == (0, 3)
    with pytest.raises(ValueError, match="past the mask width"):
        batch_turn_spans([a], mask_width=5)


@pytest.mark.parametrize(
    ("ranges", "length", "max_len", "message"),
    [
        ([(0, 2)], 5, 10, "at least one prompt token"),
        ([(3, 2)], 5, 10, "end < start"),
        ([(2, 6)], 5, 10, "past the sequence"),
        ([(1, 3), (2, 4)], 5, 10, "overlap"),
        ([(1, 2)], 5, 1, "max_len must be >= 2"),
    ],
)
def test_malformed_ranges_are_clear_errors(ranges, length, max_len, message):
    with pytest.raises(ValueError, match=message):
        turn_columns(ranges, length, max_len)
