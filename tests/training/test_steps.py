"""training.records.StepRecords: the one step record of both trainers, and its plain-dict form."""

from __future__ import annotations

import json

import pytest

from training.records import StepRecords


def _two_rows() -> StepRecords:
    records = StepRecords()
    for k, traj in enumerate(["a", "b"]):
        records.append(
            prompt_ids=[1, 2, 3], response_ids=[4, 5], old_log_probs=[-0.1, -0.2],
            reward=float(k), anchor=f"s{k}", anchor_text=None if k else "text", group_id="g",
            traj_id=traj, is_action_valid=bool(k), observation="obs", action="act",
            truncated=not k,
        )  # fmt: skip
    return records


def test_step_records_round_trip_through_json():
    records = _two_rows()
    assert len(records) == 2 and records.check() is records
    again = StepRecords.from_dict(json.loads(json.dumps(records.to_dict())))
    assert again == records
    # columns a trainer did not record may be empty; the rest must have one entry per row
    bare = records.to_dict()
    bare.update(observations=[], actions=[], truncated=[])
    assert StepRecords.from_dict(bare).observations == []


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"rewards": [0.0]}, "rewards has 1"),
        ({"observations": ["x"]}, "observations has 1 rows"),
        ({"rewards": [0.0, float("nan")]}, "finite"),
        ({"old_log_probs": [[-0.1], [-0.1, -0.2]]}, "row 0: 1 old_log_probs for 2 response"),
        ({"prompt_ids": [["x"], [1]]}, "malformed step records"),
        ({"bogus": []}, "unknown columns"),
    ],
)
def test_malformed_step_records_are_clear_errors(change, message):
    data = dict(_two_rows().to_dict(), **change)
    with pytest.raises(ValueError, match=message):
        StepRecords.from_dict(data)


def test_missing_columns_and_non_dicts_are_clear_errors():
    data = _two_rows().to_dict()
    del data["anchors"]
    with pytest.raises(ValueError, match=r"lack the columns \['anchors'\]"):
        StepRecords.from_dict(data)
    with pytest.raises(ValueError, match="dict of columns"):
        StepRecords.from_dict([1, 2])
