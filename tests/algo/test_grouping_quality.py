"""The grouping-quality benchmark's metric (benchmarks/grouping_quality.py) on counted inputs."""

import numpy as np
import pytest
from grouping_quality import grouping_quality

from gigpo_algo.grouping import anchor_groups


def test_grouping_quality_counts_by_hand():
    # group 0: two records of one text (covered, not merged)
    # group 1: two texts, same actions (a merge, not wrong)
    # group 2: two texts, one record with another action set (a wrong merge)
    # groups 3 and 7: singletons (not covered); ids need not be contiguous
    step_ids = [0, 0, 1, 1, 2, 2, 2, 3, 7]
    texts = ["A", "A", "B", "B2", "C", "C2", "C", "D", "E"]
    admissible = [
        ["a", "b"],
        ["b", "a", "a"],  # the same set: order and repeats do not count
        ["a"],
        ["a"],
        ["c"],
        ["c", "d"],
        ["c"],
        ["d"],
        ["e"],
    ]
    quality = grouping_quality(np.array(step_ids), texts, admissible)
    assert quality == {
        "records": 9,
        "step_groups": 5,
        "coverage": pytest.approx(7 / 9),
        "merged_groups": 2,
        "merged_record_fraction": pytest.approx(5 / 9),
        "wrong_merges": 1,
        "wrong_merge": pytest.approx(1 / 2),
        "wrong_merge_record_fraction": pytest.approx(3 / 9),
    }


def test_exact_grouping_merges_nothing_and_bad_inputs_raise():
    texts = ["x", "y", "x", "x", "y"]
    admissible = [["go"], ["stay"], ["go"], ["go"], ["stay"]]
    step_ids = anchor_groups(texts, [0, 0, 0, 1, 1])  # "x" of group 1 is alone
    quality = grouping_quality(step_ids, texts, admissible)
    assert quality["coverage"] == pytest.approx(2 / 5)
    assert quality["merged_groups"] == 0 and quality["wrong_merge"] is None
    empty = grouping_quality([], [], [])
    assert empty["coverage"] == 0.0 and empty["wrong_merge"] is None
    with pytest.raises(ValueError, match="lengths differ"):
        grouping_quality([0, 0], ["x"], [["go"], ["go"]])
    with pytest.raises(ValueError, match="1-D"):
        grouping_quality([[0, 0]], ["x", "x"], [["go"], ["go"]])
