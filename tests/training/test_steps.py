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


def _with_next_states() -> StepRecords:
    records = StepRecords()
    for k in range(2):
        records.append(reward=0.0, anchor=f"s{k}", anchor_text=f"state {k}", group_id=0,
                       traj_id=0, is_action_valid=True, next_anchor=f"s{k + 1}",
                       next_anchor_text=None if k else f"state {k + 1}")  # fmt: skip
    return records


def test_next_states_round_trip_and_records_without_them_still_load():
    records = _with_next_states()
    assert records.next_anchors == ["s1", "s2"] and records.next_anchor_texts == ["state 1", None]
    again = StepRecords.from_dict(json.loads(json.dumps(records.to_dict())))
    assert again == records.check()
    # records written before the next state existed: no such keys at all
    old = _two_rows().to_dict()
    del old["next_anchors"], old["next_anchor_texts"]
    loaded = StepRecords.from_dict(old)
    assert loaded.next_anchors == [] and loaded.next_anchor_texts == [] and len(loaded) == 2
    assert _two_rows().next_anchors == []  # append without next_anchor records none


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"next_anchors": ["s1"], "next_anchor_texts": [None]}, "next_anchors has 1 rows"),
        ({"next_anchor_texts": []}, "next_anchor_texts has 0 rows, next_anchors has 2"),
        ({"next_anchors": []}, "next_anchor_texts has 2 rows, next_anchors has 0"),
    ],
)
def test_malformed_next_states_are_clear_errors(change, message):
    with pytest.raises(ValueError, match=message):
        StepRecords.from_dict(dict(_with_next_states().to_dict(), **change))


def test_extend_keeps_next_states_only_where_every_part_has_them():
    both = StepRecords().extend(_with_next_states()).extend(_with_next_states())
    assert both.next_anchors == ["s1", "s2"] * 2 and len(both.next_anchor_texts) == 4
    old = _with_next_states()
    old.next_anchors, old.next_anchor_texts = [], []  # as written before they existed
    mixed = StepRecords().extend(_with_next_states()).extend(old)
    assert mixed.next_anchors == [] and mixed.next_anchor_texts == [] and len(mixed) == 4
    assert mixed.check() is mixed
    empty_part = _with_next_states().extend(StepRecords())
    assert empty_part.next_anchors == ["s1", "s2"]


def test_won_flags_round_trip_and_are_kept_only_where_every_part_has_them():
    records = StepRecords()
    for k in range(2):
        records.append(reward=float(k), anchor=f"s{k}", anchor_text=None, group_id=0,
                       traj_id=0, is_action_valid=True, won=bool(k))  # fmt: skip
    assert records.won == [False, True]
    again = StepRecords.from_dict(json.loads(json.dumps(records.to_dict())))
    assert again == records.check()
    assert _two_rows().won == []  # not recorded: no column
    joined = StepRecords().extend(records).extend(records)
    assert joined.won == [False, True] * 2
    old = StepRecords.from_dict(dict(records.to_dict(), won=[]))  # written before the column
    mixed = StepRecords().extend(records).extend(old)
    assert mixed.won == [] and len(mixed) == 4 and mixed.check() is mixed
    with pytest.raises(ValueError, match="won has 1 rows"):
        StepRecords.from_dict(dict(records.to_dict(), won=[True]))
