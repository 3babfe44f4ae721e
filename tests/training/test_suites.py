"""Pinned evaluation suites (``gigpo-evaluate --suite``): every shipped file loads, data is
hashed and a changed file is an error naming it, the generated suites run end to end with
the tiny model, the real-split suites run on fake data trees laid out as their downloads
are, runs resume, groups report how often states recur, and bad commands are errors."""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from sample_data import sample_dir

from training.cli.evaluate import main
from training.evaluation.data import prepare_data
from training.evaluation.play import read_rows, suite_tasks
from training.evaluation.suite_file import LAYOUTS, SuiteError, load_suite, set_roots, suite_names
from training.evaluation.table import ALFWORLD_COLUMNS, summarize

SEARCHQA = sample_dir("searchqa", "wiki_sample_1000.jsonl")


@pytest.fixture(scope="module")
def suite_cache(tmp_path_factory):
    """One cache of generated suite data for the module (the ALFWorld set takes ~2.5 min)."""
    return tmp_path_factory.mktemp("suite-cache")


@pytest.fixture(autouse=True)
def _cache_env(monkeypatch, suite_cache):
    monkeypatch.setenv("GIGPO_SUITE_CACHE", str(suite_cache))


def _evaluate(tmp_path, model, *args, out="run"):
    out = tmp_path / out
    assert main(["--model", str(model), "--out", str(out), *map(str, args)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    rows = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    return summary, rows, out


def _error(capsys, *argv) -> str:
    with pytest.raises(SystemExit) as exc:
        main(list(map(str, argv)))
    assert exc.value.code == 2
    return capsys.readouterr().err


# ----------------------------------------------------------------------- the suite files


@pytest.mark.parametrize("name", suite_names())
def test_every_shipped_suite_loads(name):
    suite = load_suite(name)
    assert suite.name == name and suite.version >= 1 and suite.layout in LAYOUTS
    assert suite.parts and all(p.tasks for p in suite.parts)
    pins = suite.data.get("files")
    # Every suite names its data: pinned hashes, or files it hashes when it runs.
    assert pins or suite.data.get("read"), name
    for path, digest in (pins or {}).items():
        assert path.split("/")[0] in ("cache", "samples") and len(digest) == 64


def test_the_shipped_suites_are_the_papers_sets():
    assert {"alfworld-gen-v1", "alfworld-valid-unseen", "alfworld-valid-seen", "webshop-test",
            "webshop-gen-v1", "searchqa-sample", "searchqa-all"} <= set(suite_names())  # fmt: skip
    assert load_suite("alfworld-valid-unseen").parts[0].expect == 134
    assert load_suite("alfworld-valid-seen").parts[0].expect == 140
    assert [p.name for p in load_suite("searchqa-all").parts] == [
        "NQ", "TriviaQA", "PopQA", "HotpotQA", "2Wiki", "MuSiQue", "Bamboogle"]  # fmt: skip
    assert load_suite("webshop-test").parts[0].tasks == {"count": 500}


def test_sample_data_is_checked_and_a_changed_file_is_named(tmp_path):
    suite = load_suite("searchqa-sample")
    set_roots(suite)
    data = prepare_data(suite)
    assert data["pinned"] and len(data["files"]) == 4
    copy = tmp_path / "data"
    shutil.copytree(SEARCHQA, copy / "searchqa")
    set_roots(suite, copy)
    assert prepare_data(suite)["sha256"] == data["sha256"]  # same bytes, same digest
    path = copy / "searchqa" / "nq_test16.jsonl"
    path.write_bytes(path.read_bytes() + b"\n")  # one byte more
    with pytest.raises(SuiteError, match="nq_test16.jsonl changed"):
        prepare_data(suite)
    path.unlink()
    with pytest.raises(SuiteError, match="nq_test16.jsonl is missing"):
        prepare_data(suite)


def test_alfworld_gen_v1_regenerates_its_pinned_bytes_and_every_type_equally():
    suite = load_suite("alfworld-gen-v1")
    set_roots(suite)
    data = prepare_data(suite)  # generates the 120 games here and checks all 240 pins
    assert data["pinned"] and len(data["files"]) == 240
    tasks = suite_tasks(suite)
    assert len(tasks) == 120
    assert Counter(t["column"] for t in tasks) == {t: 20 for t in ALFWORLD_COLUMNS}
    # Interleaved: any 6 consecutive tasks are one of each type.
    assert len({t["column"] for t in tasks[:6]}) == 6


def test_alfworld_type_columns_add_up_to_all():
    suite = load_suite("alfworld-gen-v1")
    set_roots(suite)
    prepare_data(suite)
    rng = np.random.default_rng(0)
    rows = [{**task, "task_index": i, "sample": 0, "won": bool(rng.random() < 0.4),
             "return": 0.0, "length": 5, "valid_steps": 5, "recurring_steps": 0}
            for i, task in enumerate(suite_tasks(suite))]  # fmt: skip
    columns = summarize("alfworld", ["ALFWorld"], rows)["columns"]
    wins = sum(columns[c]["value"] * columns[c]["tasks"] for c in ALFWORLD_COLUMNS.values())
    assert sum(columns[c]["tasks"] for c in ALFWORLD_COLUMNS.values()) == columns["All"]["tasks"]
    assert wins / 100 == pytest.approx(sum(r["won"] for r in rows))
    assert columns["All"]["value"] == pytest.approx(100 * np.mean([r["won"] for r in rows]))


# --------------------------------------------------------------------- end to end, CI size


def test_alfworld_gen_v1_end_to_end(tiny_model_dir, tmp_path, capsys):
    summary, rows, out = _evaluate(tmp_path, tiny_model_dir, "--suite", "alfworld-gen-v1",
                                   "--max-episodes", 6, "--max-new-tokens", 6)  # fmt: skip
    captured = capsys.readouterr()
    table = captured.out
    assert "alfworld-gen-v1: 6/6 tasks, " in captured.err  # progress, one line per batch
    assert "| All | Pick | Look | Clean | Heat | Cool | Pick2 |" in table
    assert summary["complete"] is False and summary["tasks_total"] == 120
    assert summary["data"]["pinned"] and summary["tasks"] == 6
    assert {r["column"] for r in rows} == set(ALFWORLD_COLUMNS)
    assert all(summary["columns"][c]["tasks"] == 1 for c in ALFWORLD_COLUMNS.values())
    assert (out / "table.md").read_text() == table
    assert summary["commit"] == rows[0]["commit"] and summary["commit"] in table
    for row in rows:  # the game a row names is the game its first observation plays
        assert row["length"] == len(row["steps"]) >= 1


def test_webshop_gen_v1_with_a_group_reports_recurring_states(tiny_model_dir, tmp_path):
    summary, rows, _ = _evaluate(tmp_path, tiny_model_dir, "--suite", "webshop-gen-v1",
                                 "--max-episodes", 3, "--group-size", 4, "--max-new-tokens", 6,
                                 "--batch-size", 8)  # fmt: skip
    assert len(rows) == 12 and summary["group_size"] == 4 and summary["temperature"] == 1.0
    # Recomputed by brute force from the rows' anchors: a step recurs when its anchor appears
    # at least twice among the steps of its task's group.
    recurring = steps = 0
    for task in {r["task_index"] for r in rows}:
        anchors = [s["anchor"] for r in rows if r["task_index"] == task for s in r["steps"]]
        counts = Counter(anchors)
        recurring += sum(counts[a] >= 2 for a in anchors)
        steps += len(anchors)
    assert summary["step_group_coverage"] == pytest.approx(recurring / steps)
    assert summary["step_group_coverage"] > 0  # every group starts from one search page
    # The goal of task k is goal k of the test split, in order, for all four rollouts.
    assert [r["task"] for r in rows] == [str(k) for k in range(3) for _ in range(4)]
    assert len({r["steps"][0]["anchor"] for r in rows if r["task_index"] == 0}) == 1


def test_searchqa_sample_resumes_after_an_interruption(tiny_model_dir, tmp_path):
    args = ("--suite", "searchqa-sample", "--max-episodes", 4, "--batch-size", 2,
            "--max-new-tokens", 8)  # fmt: skip
    whole, whole_rows, _ = _evaluate(tmp_path, tiny_model_dir, *args, out="whole")
    cut, _, out = _evaluate(tmp_path, tiny_model_dir, *args, out="cut")
    path = out / "episodes.jsonl"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 40])  # killed while writing the last batch
    assert len(read_rows(path)) == len(whole_rows) - 2  # the cut batch (2 rows) is dropped
    resumed, resumed_rows, _ = _evaluate(tmp_path, tiny_model_dir, *args, out="cut")
    assert len(resumed_rows) == len(whole_rows) == 12  # 4 of each of 3 datasets
    key = lambda r: (r["task_index"], [s["action"] for s in r["steps"]])  # noqa: E731
    assert sorted(map(key, resumed_rows)) == sorted(map(key, whole_rows))
    assert resumed["columns"] == whole["columns"]
    assert list(whole["columns"]) == ["NQ", "HotpotQA", "Bamboogle", "Avg"]


def test_compare_puts_runs_side_by_side_and_refuses_other_suites(tiny_model_dir, tmp_path,
                                                                  capsys):  # fmt: skip
    base = ("--suite", "searchqa-sample", "--max-episodes", 1, "--max-new-tokens", 4)
    _evaluate(tmp_path, tiny_model_dir, *base, out="a")
    _evaluate(tmp_path, tiny_model_dir, *base, "--prompt", "react", out="b")
    capsys.readouterr()
    assert main(["--compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].startswith("| model | prompt | decoding | NQ |")
    assert " template " in table[2] and " react " in table[3]
    assert any(
        line.startswith("- `") and "over 1 tasks" not in line and "over 3 tasks" in line
        for line in table
    )  # the paired line: 1 question of each of 3 datasets
    other = tmp_path / "c"
    other.mkdir()
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    (other / "summary.json").write_text(json.dumps({**summary, "suite": "webshop-gen-v1"}))
    err = _error(capsys, "--compare", tmp_path / "a", other)
    assert f"--compare {other}" in err and "is not what" in err


def test_a_suite_run_without_out_gets_one_folder_per_model_and_decoding():
    from training.evaluation.suite import default_suite_out

    assert default_suite_out("alfworld-gen-v1", "runs/my run", "react", None, 1) == Path(
        "runs/suites/alfworld-gen-v1/my_run-react-greedy"
    )
    assert default_suite_out("x/webshop.yaml", "org/model", "template", None, 4).name == (
        "model-template-t1-g4"  # a group samples at temperature 1 unless told
    )
    assert default_suite_out("s", "m", "template", 0.7, 1).name == "m-template-t0.7"


def test_sign_test_and_paired_difference_by_hand():
    from training.evaluation.table import paired_line, sign_test

    assert sign_test(10, 2) == pytest.approx(2 * (1 + 12 + 66) / 4096)
    assert sign_test(0, 6) == pytest.approx(2 / 64) and sign_test(3, 0) == pytest.approx(0.25)
    assert sign_test(0, 0) == 1.0 and sign_test(4, 4) == 1.0
    a = {0: 1.0, 1: 0.0, 2: 1.0, 3: 0.0}
    b = {0: 1.0, 1: 1.0, 2: 0.0, 3: 1.0, 9: 1.0}  # task 9: only b played it, not paired
    # diffs 0, +1, -1, +1: mean 0.25, sd 0.9574, t(3) 3.182, half 1.5232
    line = paired_line("A", "B", a, b)
    assert "+25.0 points [-127.3, +177.3] over 4 tasks; better on 2, worse on 1" in line
    assert line.endswith("(sign test p = 1)")


# ------------------------------------------------------------------ the real-data suites


def _fake_alfworld_download(root: Path, split: str, games: int, source: Path) -> None:
    """``games`` trial folders under ``root/json_2.1.1/split`` as alfworld-download writes
    them (task folder, trial folder, game.tw-pddl and traj_data.json), copied round robin
    from the generated games in ``source``."""
    generated = sorted((source / "json_2.1.1" / "train").glob("*/*/game.tw-pddl"))
    for i in range(games):
        game = generated[i % len(generated)]
        task = f"{game.parent.parent.name.rsplit('-', 1)[0]}-{300 + i}"
        trial = root / "json_2.1.1" / split / task / f"trial_T20190909_{i:06d}"
        trial.mkdir(parents=True)
        shutil.copy(game, trial / "game.tw-pddl")
        shutil.copy(game.parent / "traj_data.json", trial / "traj_data.json")


@pytest.fixture(scope="module")
def alfworld_download(tmp_path_factory):
    from gigpo_envs.alfworld.generate import generate_games

    source = tmp_path_factory.mktemp("generated")
    generate_games(source, num_games=6, seed=5)  # one game of each type
    root = tmp_path_factory.mktemp("alfworld-download")
    _fake_alfworld_download(root, "valid_unseen", 134, source)
    _fake_alfworld_download(root, "valid_seen", 139, source)  # one game short
    return root


def test_alfworld_valid_unseen_on_a_fake_download(tiny_model_dir, tmp_path, alfworld_download,
                                                  monkeypatch, capsys):  # fmt: skip
    monkeypatch.setenv("ALFWORLD_DATA", str(alfworld_download))
    summary, rows, out = _evaluate(tmp_path, tiny_model_dir, "--suite", "alfworld-valid-unseen",
                                   "--max-episodes", 6, "--max-new-tokens", 4)  # fmt: skip
    assert summary["tasks_total"] == 134 and not summary["data"]["pinned"]
    assert summary["data"]["files"] == 268  # both files of every game
    assert {r["column"] for r in rows} == set(ALFWORLD_COLUMNS)  # round robin over types
    # A copy checked against the run's manifest: equal passes, a changed game is named.
    manifest = out / "data_manifest.json"
    _evaluate(tmp_path, tiny_model_dir, "--suite", "alfworld-valid-unseen", "--max-episodes", 1,
              "--max-new-tokens", 4, "--data-manifest", manifest, out="again")  # fmt: skip
    game = sorted(alfworld_download.glob("json_2.1.1/valid_unseen/*/*/game.tw-pddl"))[7]
    game.write_text(game.read_text().replace('"solvable": true', '"solvable":  true'))
    err = _error(capsys, "--model", tiny_model_dir, "--suite", "alfworld-valid-unseen",
                 "--data-manifest", manifest, "--out", tmp_path / "third")  # fmt: skip
    assert game.relative_to(alfworld_download).as_posix() in err and "changed" in err
    # valid_seen holds 139 games, not ALFWorld's 140.
    err = _error(capsys, "--model", tiny_model_dir, "--suite", "alfworld-valid-seen",
                 "--out", tmp_path / "seen")  # fmt: skip
    assert "expects 140 tasks" in err and "found 139" in err


def _fake_webshop_data(folder: Path, num_products: int) -> Path:
    """A generated catalog under the names WebShop's ``setup.sh -d small`` downloads."""
    from gigpo_envs.webshop.catalog import write_catalog

    paths = write_catalog(folder.with_name(folder.name + "-generated"), num_products, seed=1)
    folder.mkdir()
    for kind, name in (("items", "items_shuffle_1000.json"),
                       ("attributes", "items_ins_v2_1000.json"),
                       ("human", "items_human_ins.json")):  # fmt: skip
        shutil.copy(paths[kind], folder / name)
    return folder


def test_webshop_test_on_a_fake_webshop_data_folder(tiny_model_dir, tmp_path, monkeypatch,
                                                    capsys):  # fmt: skip
    data = _fake_webshop_data(tmp_path / "webshop-data", num_products=600)
    monkeypatch.setenv("WEBSHOP_DATA", str(data))
    summary, rows, _ = _evaluate(tmp_path, tiny_model_dir, "--suite", "webshop-test",
                                 "--max-episodes", 2, "--max-new-tokens", 4)  # fmt: skip
    assert summary["tasks_total"] == 500 and summary["data"]["files"] == 3
    assert list(summary["columns"]) == ["Score", "Success"]
    assert summary["env_kwargs"]["WebShop"]["noun_tagger"] == "spacy"  # the original's reward
    # Files with fewer than 500 goals: an error, not a replay of the first ones.
    small = _fake_webshop_data(tmp_path / "small", num_products=120)
    err = _error(capsys, "--model", tiny_model_dir, "--suite", "webshop-test",
                 "--data-dir", small, "--out", tmp_path / "small-run")  # fmt: skip
    assert "plays 500 tasks but its data holds only" in err


def test_searchqa_bamboogle_on_flashrag_files_through_a_real_server(tiny_model_dir, tmp_path):
    import csv

    from retrieval.retrieval_helpers import ServerProcess

    flashrag = tmp_path / "flashrag" / "bamboogle"
    flashrag.mkdir(parents=True)
    with open(SEARCHQA / "bamboogle.csv", newline="", encoding="utf-8") as handle:
        lines = [json.dumps({"id": f"test_{i}", "question": row["Question"],
                             "golden_answers": [row["Answer"]]})
                 for i, row in enumerate(csv.DictReader(handle))]  # fmt: skip
    (flashrag / "test.jsonl").write_text("\n".join(lines) + "\n")
    server = ServerProcess(SEARCHQA / "wiki_sample_1000.jsonl")
    try:
        summary, rows, _ = _evaluate(
            tmp_path,
            tiny_model_dir,
            "--suite",
            "searchqa-bamboogle",
            "--data-dir",
            tmp_path / "flashrag",
            "--retriever-url",
            server.url,
            "--max-episodes",
            3,
            "--max-new-tokens",
            8,
        )
    finally:
        server.stop()
    assert summary["tasks_total"] == 125 and len(rows) == 3
    assert list(summary["columns"]) == ["Bamboogle", "Avg"]


# ------------------------------------------------------------------------- bad commands


def test_bad_suite_commands_are_errors_naming_what(tiny_model_dir, tmp_path, capsys):
    model = ("--model", tiny_model_dir, "--out", tmp_path / "x")
    assert "unknown suite 'nope'" in _error(capsys, *model, "--suite", "nope")
    err = _error(capsys, *model, "--suite", "searchqa-sample", "--env.kwargs={max_steps: 9}")
    assert "--env.kwargs: suite searchqa-sample pins" in err
    assert "--max-episodes" in _error(capsys, *model, "--suite", "searchqa-sample",
                                      "--episodes", 3)  # fmt: skip
    err = _error(capsys, *model, "--suite", "searchqa-sample", "--group-size", 4,
                 "--temperature", 0)  # fmt: skip
    assert "--group-size > 1 needs sampling" in err
    assert "--retriever-url" in _error(capsys, *model, "--suite", "searchqa-nq")
    err = _error(capsys, *model, "--suite", "webshop-test", "--data-dir", tmp_path)
    assert "items_human_ins.json is missing" in err and "$WEBSHOP_DATA" in err
    bad = tmp_path / "bad.yaml"
    bad.write_text("suite: bad\nversion: 1\nlayout: alfworld\nenv: {id: x}\nparts: []\nextra: 1\n")
    assert "unknown key extra" in _error(capsys, *model, "--suite", bad)
    bad.write_text("suite: [unclosed\n")
    assert "is not valid YAML" in _error(capsys, *model, "--suite", bad)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"tasks": {"count": "x"}}, "parts[0].tasks.count must be an int >= 1"),
        ({"tasks": {"all_games": False}}, "parts[0].tasks.all_games must be true"),
        ({"tasks": {"seeds": []}}, "parts[0].tasks.seeds must be a non-empty list"),
        ({"expect": "a"}, "parts[0].expect must be an int >= 1"),
        ({"kwargs": {"dataset": "{nowhere}/q.jsonl"}}, "unknown placeholder {nowhere}"),
        ({"kwargs": [1]}, "parts[0].kwargs must be a mapping"),
    ],
)
def test_malformed_suite_files_name_the_key(tmp_path, change, message):
    raw = {"suite": "mine", "version": 1, "layout": "searchqa",
           "env": {"id": "gigpo/SearchQA-v0", "kwargs": {}},
           "parts": [{"name": "NQ", "tasks": {"count": 2}, **change}]}  # fmt: skip
    path = tmp_path / "mine.yaml"
    path.write_text(json.dumps(raw))  # JSON is YAML
    with pytest.raises(SuiteError, match=re.escape(message)):
        load_suite(path)


def test_suite_files_need_their_own_name_and_distinct_parts(tmp_path):
    raw = {"suite": "other", "version": 1, "layout": "searchqa", "env": {"id": "x"},
           "parts": [{"name": "NQ", "tasks": {"count": 2}}]}  # fmt: skip
    path = tmp_path / "mine.yaml"
    path.write_text(json.dumps(raw))
    with pytest.raises(SuiteError, match="suite must be the file's name"):
        load_suite(path)
    raw.update(suite="mine", parts=raw["parts"] * 2)
    path.write_text(json.dumps(raw))
    with pytest.raises(SuiteError, match="'NQ' is used twice"):
        load_suite(path)
    raw.update(parts=raw["parts"][:1], sampling={"temperature": "hot"})
    path.write_text(json.dumps(raw))
    with pytest.raises(SuiteError, match="sampling.temperature must be a finite number"):
        load_suite(path)


def test_a_quick_look_then_more_reuses_its_rows(tiny_model_dir, tmp_path):
    args = ("--suite", "searchqa-sample", "--max-new-tokens", 4)
    first, first_rows, out = _evaluate(tmp_path, tiny_model_dir, *args, "--max-episodes", 2)
    more, more_rows, _ = _evaluate(tmp_path, tiny_model_dir, *args, "--max-episodes", 3)
    # Task positions are the suite's: NQ 0.., HotpotQA from 17, Bamboogle from 217.
    assert [r["task_index"] for r in first_rows] == [0, 1, 17, 18, 217, 218]
    assert sorted(r["task_index"] for r in more_rows) == [0, 1, 2, 17, 18, 19, 217, 218, 219]
    assert [r for r in more_rows if r["task_index"] in (0, 1, 17, 18, 217, 218)] == first_rows
    assert more["columns"]["NQ"]["tasks"] == 3 and not more["complete"]
    # A folder whose rows are not this suite's tasks is refused, not mixed in.
    path = out / "episodes.jsonl"
    rows = path.read_text().splitlines()
    row = json.loads(rows[0])
    rows[0] = json.dumps({**row, "seed": row["seed"] + 5})
    path.write_text("\n".join(rows) + "\n")
    with pytest.raises(SystemExit):
        main(["--model", str(tiny_model_dir), "--out", str(out), *map(str, args)])
    # A line broken in the middle of the file (not a cut last write) is an error too.
    rows[0] = "{not json"
    path.write_text("\n".join(rows) + "\n")
    with pytest.raises(SuiteError, match="line 1 is not the episode row"):
        read_rows(path)


def test_one_folder_one_writer(tiny_model_dir, tmp_path, capsys):
    import os

    from training.locks import hold_folder

    out = tmp_path / "busy"
    with hold_folder(out, "suite"):  # two processes: tests/training/test_locks.py
        argv = ["--model", tiny_model_dir, "--out", out, "--suite", "searchqa-sample",
                "--max-episodes", 1]  # fmt: skip
        assert main(list(map(str, argv))) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert f"--out {out} is in use by another process: pid {os.getpid()} (" in err
    assert "wait for it to finish or use another --out" in err
    assert "take no --suite" in _error(capsys, "--compare", out, "--suite", "searchqa-sample")


def test_a_folder_of_another_run_is_not_mixed_into(tiny_model_dir, tmp_path, capsys):
    args = ("--suite", "searchqa-sample", "--max-episodes", 1, "--max-new-tokens", 4)
    _evaluate(tmp_path, tiny_model_dir, *args)
    err = _error(capsys, "--model", tiny_model_dir, "--out", tmp_path / "run", *args,
                 "--temperature", 0.7)  # fmt: skip
    assert "holds a run with other settings (temperature" in err


def test_a_suite_file_that_never_ends_is_refused_fast(tmp_path):
    """A suite file linked to /dev/zero: the limit and a byte more are read, then a named error
    (in a child held to 1 GiB of memory and 30 s, so a regression fails rather than hangs)."""
    from capped import run_capped

    (tmp_path / "z.yaml").symlink_to("/dev/zero")
    code = (
        "import sys\nfrom training.evaluation.suite_file import SuiteError, load_suite\n"
        "try:\n    load_suite(sys.argv[1])\nexcept SuiteError as exc:\n    print(exc)\n"
    )
    done = run_capped(code, str(tmp_path / "z.yaml"))
    assert done.returncode == 0, done.stderr
    # a device is no regular file: refused before a byte is read (over the limit, before)
    assert f"suite file {tmp_path / 'z.yaml'}: cannot read it (" in done.stdout
    assert "z.yaml is a character device, not a regular file)" in done.stdout
