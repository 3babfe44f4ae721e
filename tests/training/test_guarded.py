"""The one guarded loader (training/guarded.py) and the readers built on it: every YAML and
JSON the project reads is bounded in size, depth and integer digits, refuses YAML aliases
and (in JSON) NaN, and breaks a limit with one short error naming the file, line and key."""

from __future__ import annotations

import json
import math

import pytest

from training.guarded import (
    MAX_DEPTH,
    MAX_INT_DIGITS,
    GuardError,
    ParseError,
    load_json,
    load_yaml,
    read_json_file,
    read_json_lines,
)
from training.local.metrics import MetricsLog, read_metrics
from training.study.report import summarize_run

BOMB = "\n".join(
    ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
)


@pytest.mark.parametrize(
    "text, message",
    [
        (BOMB, "anchors and aliases"),
        ("x: &only 1\n", "anchors and aliases"),  # an anchor alone too: no aliases to point at
        (
            "a:\n  b: [1, " + "7" * 5000 + "]\n",
            r"a.b\[1\] \(line 2, column 10\): an integer of 5000",
        ),
        ("a: 0x" + "f" * (MAX_INT_DIGITS + 1), f"an integer of {MAX_INT_DIGITS + 1} digits"),
        ("a: " + "[" * 20_000 + "]" * 20_000, f"nested deeper than {MAX_DEPTH} levels"),
        ("a: [" + "1, " * 400_000 + "1]", "over the limit of 1048576"),
        ("!!python/object/apply:os.system [ls]", "is not valid YAML"),
    ],
)
def test_yaml_past_a_limit_is_one_short_error_naming_the_place(text, message):
    with pytest.raises(GuardError, match=message) as exc:
        load_yaml(text, "study file s.yaml")
    assert str(exc.value).startswith("study file s.yaml")
    assert len(str(exc.value)) < 1000


def test_yaml_at_the_limits_is_read():
    nested = "a: " + "[" * (MAX_DEPTH - 1) + "1" + "]" * (MAX_DEPTH - 1)
    assert load_yaml(nested, "f") is not None
    assert load_yaml("a: " + "9" * MAX_INT_DIGITS, "f") == {"a": int("9" * MAX_INT_DIGITS)}
    assert math.isnan(load_yaml("a: .nan", "f")["a"])  # YAML's NaN: the field's check judges it


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"a": NaN}', "NaN is not a number"),
        ('{"a": -Infinity}', "-Infinity is not a number"),
        ('{"a": 1e400}', "past float's range"),
        ('{"a": ' + "1" * 5000 + "}", "an integer of 5000 digits"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), f"nested deeper than {MAX_DEPTH}"),
        ("[1, 2]", "expected a JSON object, got a JSON list"),
        ('{"a": ', "is not valid JSON"),
    ],
)
def test_json_past_a_limit_is_one_short_error(tmp_path, text, message):
    path = tmp_path / "run.json"
    path.write_text(text)
    with pytest.raises(GuardError, match=message) as exc:
        read_json_file(path, "run file")
    assert str(exc.value).startswith(f"run file {path}") and len(str(exc.value)) < 1000


def test_json_size_and_nan_policy(tmp_path):
    path = tmp_path / "big.json"
    path.write_text('{"a": "' + "x" * 2000 + '"}')
    with pytest.raises(GuardError, match="over the limit of 1000 bytes"):
        read_json_file(path, max_bytes=1000)
    assert load_json('{"a": Infinity}', "config", nonfinite=True) == {"a": math.inf}
    with pytest.raises(ParseError):  # not JSON at all: its own kind, for callers that care
        load_json("{", "x")


def test_json_lines_name_the_line_and_leave_out_a_cut_last_line(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"a": 1}\n{"a": 2}\n{"a": 3')
    assert read_json_lines(path) == [(1, {"a": 1}), (2, {"a": 2})]
    with pytest.raises(GuardError, match="line 3 is not valid JSON"):
        read_json_lines(path, cut_short=False)
    path.write_bytes(b'{"a": 1}\n{"a": NaN}\n')
    with pytest.raises(GuardError, match=rf"{path} line 2: NaN"):
        read_json_lines(path)
    assert read_json_lines(tmp_path / "missing.jsonl") == []


def _metrics(tmp_path, *rows: str) -> None:
    (tmp_path / "metrics.jsonl").write_text("".join(row + "\n" for row in rows))


ROW = {"iteration": 0, "estimator": "gigpo", "success_rate": 0.5, "mean_return": 0.0,
       "valid_action_rate": 1.0}  # fmt: skip


@pytest.mark.parametrize(
    "rows, message",
    [
        ([ROW, {**ROW, "iteration": 1}, {**ROW, "iteration": 1}], "line 3: iteration must be"),
        ([ROW, {**ROW, "iteration": 1, "success_rate": 1.5}], "line 2: success_rate must be a"),
        ([{**ROW, "mean_return": {"nested": 1}}], "line 1: mean_return must be a number"),
        ([{**ROW, "iteration": "0"}], "iteration must be an int"),
        ([{**ROW, "mean_episode_length": -56}], "line 1: mean_episode_length must be a count >= 0"),
        (
            [ROW, {**ROW, "iteration": 1, "step_records": -5}],
            "line 2: step_records must be a count",
        ),
        ([{k: v for k, v in ROW.items() if k != "mean_return"}], "line 1: lacks mean_return"),
        ([ROW, {"iteration": 1, "mean_return": 0.0}], "line 2: lacks success_rate"),
    ],
)
def test_a_bad_metrics_row_is_named_not_skipped(tmp_path, rows, message):
    _metrics(tmp_path, *map(json.dumps, rows))
    with pytest.raises(GuardError, match=message):
        read_metrics(tmp_path)


def test_metrics_nan_names_its_field_and_a_cut_last_line_is_dropped(tmp_path):
    _metrics(tmp_path, json.dumps(ROW), '{"iteration": 1, "kl": NaN}')
    with pytest.raises(GuardError, match="line 2: kl must be a finite number or null"):
        read_metrics(tmp_path)
    (tmp_path / "metrics.jsonl").write_text(json.dumps(ROW) + '\n{"iteration": 1, "succ')
    assert read_metrics(tmp_path) == [ROW]  # a crash mid-write loses that row only
    MetricsLog(tmp_path, completed=1).write({**ROW, "iteration": 1, "kl": math.nan})
    assert read_metrics(tmp_path)[1]["kl"] is None  # written as null, read back


def test_the_study_names_a_run_whose_metrics_lack_what_it_reads(tmp_path):
    from training.local.config import ConfigError

    _metrics(tmp_path, json.dumps({**ROW, "success_rate": None}))
    with pytest.raises(ConfigError, match=r"metrics.jsonl line 1 \(iteration 0\): no success_rate"):
        summarize_run(tmp_path)
    _metrics(tmp_path, json.dumps(ROW))
    (tmp_path / "wall_seconds.txt").write_text("nan\n")
    with pytest.raises(ConfigError, match="wall_seconds.txt: not a number of seconds"):
        summarize_run(tmp_path)
    (tmp_path / "wall_seconds.txt").write_text("90.0\n")
    assert summarize_run(tmp_path)["minutes"] == 1.5


# ------------------------------------------------------- what gigpo-evaluate reads back


def _task(i: int) -> dict:
    return {"part": "NQ", "seed": i, "column": "NQ", "task": str(i)}


def _episode(i: int, sample: int, group: int = 2, **change) -> dict:
    """A row as play_suite writes it (run.py's _rows): task i, one of a batch of 2 tasks."""
    steps = [{"anchor": "a", "observation": "o", "action": "x", "reward": 0.0, "valid": True}]
    row = {"task_index": i, **_task(i), "sample": sample, "batch": i - i % 2,
           "batch_rows": 2 * group, "won": False, "return": 0.0, "length": 1,
           "valid_steps": 1, "recurring_steps": 1, "recurring_later_steps": 0,
           "steps": steps, "commit": "abc"}  # fmt: skip
    return {**row, **change}


def _episodes(path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


GOOD = [_episode(i, s) for i in range(4) for s in range(2)]


@pytest.mark.parametrize(
    "row, message",
    [
        (_episode(1, 2, won=True), "sample 2 is past the group size 2"),
        ({**_episode(1, 1), "return": math.nan}, "return must be a finite number, got nan"),
        (_episode(1, 1, length=-3), "length must be >= 0, got -3"),
        ({k: v for k, v in _episode(1, 1).items() if k != "valid_steps"}, "valid_steps is"),
        (_episode(1, 1, valid_steps=5), r"valid_steps must be in \[0, 1\], got 5"),
        (_episode(1, 1, task_index=9, batch=0), "task_index 9 is past the suite's 4 tasks"),
        (_episode(1, 1, seed=6), "a row of task 1 with seed 6"),
        (_episode(1, 1, won=1), "won must be true or false, got 1"),
        (_episode(1, 1, steps=[]), "steps holds 0 entries for a length of 1"),
        (_episode(1, 1, batch_rows=6), "batch 0 begins before batch 0 ended"),
        (_episode(1, 0), "task 1 sample 0 is there twice"),
        (
            _episode(
                1, 1, task=[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]
            ),
            "nested deeper than 32 levels",
        ),  # fmt: skip
    ],
)
def test_a_tampered_or_foreign_episode_row_is_named_never_counted(tmp_path, row, message):
    from training.evaluation.play import read_rows
    from training.evaluation.suite_file import SuiteError

    path = tmp_path / "episodes.jsonl"
    _episodes(path, [*GOOD[:3], row, *GOOD[4:]])  # line 4: the second row of task 1
    with pytest.raises(SuiteError, match=message) as exc:
        read_rows(path, [_task(i) for i in range(4)], 2)
    assert f"{path}: line 4 is not the episode row" in str(exc.value)
    assert len(str(exc.value)) < 1000
    _episodes(path, GOOD)
    assert read_rows(path, [_task(i) for i in range(4)], 2) == GOOD


def test_a_cut_last_write_is_still_dropped_and_a_short_group_is_named(tmp_path):
    from training.evaluation.play import read_rows
    from training.evaluation.suite_file import SuiteError

    path = tmp_path / "episodes.jsonl"
    _episodes(path, GOOD)
    data = path.read_bytes()
    path.write_bytes(data[:-30])  # killed while writing the last batch (tasks 2 and 3)
    assert read_rows(path, [_task(i) for i in range(4)], 2) == GOOD[:4]
    assert path.read_bytes() == data[: data.index(json.dumps(GOOD[4]).encode())]
    # A whole batch of 2 rows, for 2 tasks of a group of 2: each task lacks a sample.
    _episodes(path, [_episode(0, 0, batch_rows=2), _episode(1, 0, batch_rows=2)])
    with pytest.raises(SuiteError, match="task 0 has 1 rows, not its group's 2"):
        read_rows(path, [_task(0), _task(1)], 2)


def test_run_json_and_manifests_are_read_guarded(tmp_path):
    from training.evaluation.data import check_manifest, manifest_sha256
    from training.evaluation.suite import _check_run
    from training.evaluation.suite_file import SuiteError

    (tmp_path / "run.json").write_text("[1, 2]")
    with pytest.raises(SuiteError, match="run file .*run.json: expected a JSON object, got a"):
        _check_run(tmp_path, {"suite": "s"})
    (tmp_path / "run.json").write_text("[" * 50_000 + "]" * 50_000)
    with pytest.raises(SuiteError, match="nested too deeply"):
        _check_run(tmp_path, {"suite": "s"})
    files = {"samples/a.txt": "0" * 64}
    path = tmp_path / "data_manifest.json"
    for manifest, message in [
        ({"files": []}, "'files' must be an object of path -> sha256, got \\[\\]"),
        ({"files": {"samples/a.txt": 5}}, "files.samples/a.txt must be a sha256 hex digest"),
        ({"files": files, "sha256": "f" * 64}, "is not the digest of its files"),
        ({"files": {"samples/a.txt": "1" * 64}}, "data file samples/a.txt changed"),
    ]:
        path.write_text(json.dumps(manifest))
        with pytest.raises(SuiteError, match=message):
            check_manifest(files, path)
    path.write_text(json.dumps({"files": files, "sha256": manifest_sha256(files)}))
    check_manifest(files, path)


def test_compare_names_a_summary_field_that_is_not_a_number(tmp_path, capsys):
    from training.cli.evaluate import main

    cells = {"NQ": {"value": 50.0, "low": 10.0, "high": 90.0, "tasks": 4}}
    summary = {"suite": "searchqa-sample", "suite_version": 1, "model": "m", "prompt": "p",
               "temperature": 0.0, "commit": "c", "group_size": 2,
               "data": {"sha256": "0" * 64, "pinned": True}, "columns": cells}  # fmt: skip
    for name, columns in (("a", summary["columns"]), ("b", {"NQ": {"value": "50"}})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(json.dumps({**summary, "columns": columns}))
        _episodes(tmp_path / name / "episodes.jsonl", GOOD)
    assert main(["--compare", str(tmp_path / "a"), str(tmp_path / "a")]) == 0
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(["--compare", str(tmp_path / "a"), str(tmp_path / "b")])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "columns.NQ.value must be a finite number, got '50'" in err
    _episodes(tmp_path / "b" / "episodes.jsonl", [*GOOD[:7], _episode(3, 1, length=-1)])
    (tmp_path / "b" / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(SystemExit):
        main(["--compare", str(tmp_path / "a"), str(tmp_path / "b")])
    assert "line 8 is not the episode row that belongs there: length" in capsys.readouterr().err


def test_a_suite_seed_past_32_bits_is_refused_when_the_suite_loads(tmp_path):
    from training.evaluation.suite_file import SuiteError, load_suite

    raw = {"suite": "mine", "version": 1, "layout": "searchqa",
           "env": {"id": "gigpo/SearchQA-v0", "kwargs": {}},
           "parts": [{"name": "NQ", "tasks": {"seeds": [1, 10**29]}}]}  # fmt: skip
    path = tmp_path / "mine.yaml"
    path.write_text(json.dumps(raw))
    with pytest.raises(SuiteError, match=r"parts\[0\].tasks.seeds\[1\] must be at most 4294967295"):
        load_suite(path)
    raw["parts"][0]["tasks"]["seeds"] = [int("9" * 200)]
    path.write_text(json.dumps(raw))
    with pytest.raises(SuiteError, match=r"parts\[0\].tasks.seeds\[0\] \(line 1.*200 digits"):
        load_suite(path)
