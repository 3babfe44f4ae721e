"""Suite inputs a careless user or an attacker writes (issue 45's Low items): data paths that
leave their data root, numbers that are not finite or absurdly large, lists where text
belongs, messages that would quote a huge value whole, cache folders that cannot be
written, and table cells that would break the markdown. Each is a named error, or (the
table) handled; none generates data or loads a model."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from capped import run_capped

from gigpo_envs.webshop.catalog import MAX_PRODUCTS
from training.cli.evaluate import main
from training.evaluation.data import prepare_data
from training.evaluation.suite import SuiteRequest, _check_run, suite_config
from training.evaluation.suite_file import MAX_GENERATED_GAMES, SuiteError, load_suite, set_roots
from training.evaluation.table import markdown_table, summarize


def _suite_file(tmp_path: Path, **changes) -> Path:
    """A small searchqa suite file ``mine.yaml`` with ``changes`` at its top level."""
    raw = {"suite": "mine", "version": 1, "layout": "searchqa",
           "env": {"id": "gigpo/SearchQA-v0", "kwargs": {}},
           "parts": [{"name": "NQ", "tasks": {"count": 2}}], **changes}  # fmt: skip
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


# ------------------------------------------------------------ data paths stay in their root


@pytest.mark.parametrize(
    ("kwargs", "part", "message"),
    [
        ({"dataset": "/etc/passwd"}, {}, "env.kwargs.dataset '/etc/passwd' is a path outside"),
        ({}, {"dataset": "~/questions.jsonl"}, "parts[0].kwargs.dataset '~/questions.jsonl' is a"),
        ({"corpus": "data/wiki.jsonl"}, {}, "env.kwargs.corpus 'data/wiki.jsonl' is a path"),
        ({"files": ["{samples}/../../x"]}, {}, "env.kwargs.files[0] 'samples/../../x' leaves"),
        ({"dataset": "x{samples}/a"}, {}, "a data root placeholder must start the path"),
        (
            {"dataset": "{samples}/searchqa/other.jsonl"},
            {},
            "no data.files or data.read entry covers samples/searchqa/other.jsonl",
        ),
        ({"data_path": "{webshop}"}, {}, "no data.files or data.read entry covers webshop"),
    ],
)
def test_every_path_the_env_reads_is_under_a_data_root_and_hashed(tmp_path, kwargs, part, message):
    data = {"read": ["samples/searchqa/nq_test16.jsonl"]}
    path = _suite_file(tmp_path, data=data, env={"id": "gigpo/SearchQA-v0", "kwargs": kwargs},
                       parts=[{"name": "NQ", "kwargs": part, "tasks": {"count": 2}}])  # fmt: skip
    with pytest.raises(SuiteError, match=re.escape(message)):
        load_suite(path)


def test_paths_that_data_covers_load_and_plain_text_and_urls_are_no_paths(tmp_path):
    data = {"read": ["samples/searchqa/nq_test16.jsonl", "alfworld/json_2.1.1/valid_seen/*/*/x"]}
    env = {
        "id": "gigpo/SearchQA-v0",
        "kwargs": {
            "dataset": "{samples}/searchqa/nq_test16.jsonl",
            "data_dir": "{alfworld}",
            "retriever_url": "http://127.0.0.1:8000/retrieve",
            "split": "valid_seen",
            "topk": 3,
        },
    }
    load_suite(_suite_file(tmp_path, data=data, env=env))  # fmt: skip
    # an ALFWorld game is read under data_dir: it must be hashed too
    games = {"games": ["json_2.1.1/valid_seen/a/b/x", "../../../etc/game.tw-pddl"]}
    path = _suite_file(tmp_path, data=data, env=env,
                       parts=[{"name": "NQ", "tasks": games}])  # fmt: skip
    with pytest.raises(SuiteError, match=re.escape("parts[0].tasks.games[1]")):
        load_suite(path)


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"read": ["samples/../../../../etc/pass*"]}, "data.read[0]"),
        ({"read": ["samples/searchqa/x.jsonl", "flashrag/a/../../b"]}, "data.read[1]"),
        ({"read": ["samples//etc/passwd"]}, "data.read[0]"),
        ({"files": {"cache/../../../etc/passwd": "0" * 64}}, "data.files.cache/../../../etc"),
    ],
)
def test_a_data_path_with_dotdot_or_an_absolute_rest_is_refused_naming_the_key(tmp_path, data, key):
    with pytest.raises(SuiteError, match=re.escape(key) + ".*leaves its data root"):
        load_suite(_suite_file(tmp_path, data=data))


@pytest.mark.parametrize("name", ["etc/passwd", "samples", "samples/", "/etc/passwd"])
def test_a_data_path_needs_a_known_root_and_a_path_under_it(tmp_path, name):
    with pytest.raises(SuiteError, match=r"data.read\[0\] must be a path under a data root"):
        load_suite(_suite_file(tmp_path, data={"read": [name]}))


def _data_tree(tmp_path: Path) -> tuple[Path, Path]:
    """``data/q/a.jsonl`` (a real file) and ``outside/secret`` (outside the data root)."""
    data, outside = tmp_path / "data", tmp_path / "outside"
    (data / "q").mkdir(parents=True)
    outside.mkdir()
    (data / "q" / "a.jsonl").write_text('{"question": "q"}\n')
    (outside / "secret").write_text("root:x:0:0\n")
    return data, outside


def test_a_symlink_out_of_the_data_root_is_refused_when_the_data_is_read(tmp_path):
    data, outside = _data_tree(tmp_path)
    suite = load_suite(_suite_file(tmp_path, data={"read": ["samples/q/*.jsonl"]}))
    set_roots(suite, data)  # --data-dir: {samples} is `data`
    assert list(prepare_data(suite)["files"]) == ["samples/q/a.jsonl"]
    (data / "q" / "b.jsonl").symlink_to(outside / "secret")  # a link in the tree leads out
    with pytest.raises(SuiteError, match=r"data.read 'samples/q/\*.jsonl' resolves to .*secret"):
        prepare_data(suite)
    (data / "q" / "b.jsonl").unlink()
    (data / "link").symlink_to(outside, target_is_directory=True)  # a linked folder, named
    suite = load_suite(_suite_file(tmp_path, data={"read": ["samples/link/secret"]}))
    set_roots(suite, data)
    with pytest.raises(SuiteError, match="data.read 'samples/link/secret' resolves to"):
        prepare_data(suite)
    # A suite built in code, past the file checks: the reader's own check holds too.
    suite.data = {"files": {"samples/../outside/secret": "0" * 64}}
    with pytest.raises(SuiteError, match="data.files 'samples/../outside/secret' resolves to"):
        prepare_data(suite)


# ----------------------------------------------------------------------- numbers and text


@pytest.mark.parametrize(
    ("sampling", "message"),
    [
        ("temperature: .nan", "sampling.temperature must be a finite number >= 0, got nan"),
        ("temperature: .inf", "sampling.temperature must be a finite number >= 0, got inf"),
        ("temperature: -0.5", "sampling.temperature must be a finite number >= 0, got -0.5"),
        ("top_p: .nan", "sampling.top_p must be a finite number >= 0, got nan"),
        ("top_p: 0", "sampling.top_p must be in (0, 1], got 0.0"),
        ("top_p: 1.5", "sampling.top_p must be in (0, 1], got 1.5"),
    ],
)
def test_sampling_numbers_must_be_finite_and_in_range(tmp_path, sampling, message):
    path = _suite_file(tmp_path)
    # JSON has no NaN: the section is added as YAML writes it (.nan, .inf).
    path.write_text(path.read_text() + f"\nsampling: {{{sampling}}}\n")
    with pytest.raises(SuiteError, match=re.escape(message)):
        load_suite(path)


@pytest.mark.parametrize(
    ("rollout", "message"),
    [
        ({"stop_text": [1, 2]}, "rollout.stop_text must be a string, got [1, 2]"),
        ({"stop_text": ["/INST"]}, "quote text that starts with '['"),
        ({"response_prefix": 5}, "rollout.response_prefix must be a string, got 5"),
        ({"max_new_tokens": "64"}, "rollout.max_new_tokens must be an int >= 1, got '64'"),
        ({"max_new_tokens": 0}, "rollout.max_new_tokens must be an int >= 1, got 0"),
    ],
)
def test_rollout_values_of_the_wrong_type_are_refused_not_turned_into_text(
    tmp_path, rollout, message
):
    with pytest.raises(SuiteError, match=re.escape(message)):
        load_suite(_suite_file(tmp_path, rollout=rollout))
    # A string is what the trainer receives, as it is.
    ok = load_suite(_suite_file(tmp_path, rollout={"stop_text": "[/INST]", "max_new_tokens": 8}))
    assert '--rollout.stop_text="[/INST]"' in ok.overrides()


def test_the_trainer_takes_an_overrides_text_as_typed_and_refuses_a_list_in_a_file(tmp_path):
    # The documented rule (docs/training.md): a text field's override is the text typed;
    # Llama's stop text [/INST] must not become a list. A config file's list is an error.
    from training.local.config import ConfigError, load_config

    config = load_config("smoke", ["--rollout.stop_text=[/INST]"])
    assert config.rollout.stop_text == "[/INST]"
    path = tmp_path / "mine.yaml"
    path.write_text("rollout:\n  stop_text: [1, 2]\n")
    with pytest.raises(ConfigError, match=re.escape("rollout.stop_text must be a string")):
        load_config(str(path), [])


@pytest.mark.parametrize(
    ("generate", "message"),
    [
        ({"kind": "webshop", "num_products": 10**9, "seed": 0},
         f"data.generate.num_products must be at most {MAX_PRODUCTS:,}"),
        ({"kind": "webshop", "num_products": 0, "seed": 0},
         "data.generate.num_products must be an int >= 1"),
        ({"kind": "alfworld", "num_games": 10**7, "seed": 0, "split": "valid_seen"},
         f"data.generate.num_games must be at most {MAX_GENERATED_GAMES:,}"),
    ],
)  # fmt: skip
def test_generated_data_sizes_have_an_upper_bound(tmp_path, generate, message):
    with pytest.raises(SuiteError, match=re.escape(message)):
        load_suite(_suite_file(tmp_path, data={"generate": generate}))


def test_the_webshop_generator_refuses_a_catalog_past_its_bound():
    # In a process held to 2 GB of address space: a billion products ran out of memory (and
    # took the machine's with it); now it is refused before a product is drawn.
    code = (
        "from gigpo_envs.webshop.catalog import generate_raw\n"
        "assert len(generate_raw(3)[0]) == 3\n"
        "generate_raw(10**9)\n"
    )
    done = run_capped(code, memory_bytes=2 << 30, timeout_s=120)
    assert done.returncode == 1
    assert f"ValueError: num_products must be in 1..{MAX_PRODUCTS:,}, got 1000000000" in done.stderr


def test_group_size_has_an_upper_bound(tmp_path, capsys):
    request = SuiteRequest(suite="searchqa-sample", model="none", out=tmp_path / "out")
    for size in (0, 100_000):
        request.group_size = size
        with pytest.raises(SuiteError, match=rf"--group-size must be in 1\.\.1024 .*got {size}"):
            suite_config(request)
    with pytest.raises(SystemExit) as exc:
        main(["--model", "none", "--out", str(tmp_path / "out"), "--suite", "searchqa-sample",
              "--group-size", "100000"])  # fmt: skip
    assert exc.value.code == 2 and "--group-size must be in 1..1024" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # refused before anything is written


# ------------------------------------------------------------------------------ messages


def test_a_settings_mismatch_quotes_each_value_cut_short(tmp_path):
    run = {"suite": "searchqa-sample", "model": "m", "overrides": []}
    (tmp_path / "run.json").write_text(json.dumps({**run, "model": "x" * 500_000}))
    with pytest.raises(SuiteError) as exc:
        _check_run(tmp_path, run)
    message = str(exc.value)
    assert "holds a run with other settings (model: 'xxx" in message and "'m' now" in message
    assert len(message) < 1000  # the 500 kB value is cut, not printed whole


@pytest.fixture
def tiny_webshop_suite(tmp_path: Path) -> Path:
    """A suite that generates a 5-product WebShop catalog into the cache (a second)."""
    raw = {"suite": "tiny-shop", "version": 1, "layout": "webshop",
           "env": {"id": "gigpo/WebShop-v0", "kwargs": {"data_path": "{cache}/webshop"}},
           "data": {"generate": {"kind": "webshop", "num_products": 5, "seed": 0},
                    "read": ["cache/webshop/items_shuffle.json"]},
           "parts": [{"name": "WebShop", "tasks": {"count": 1}}]}  # fmt: skip
    path = tmp_path / "tiny-shop.yaml"
    path.write_text(json.dumps(raw))
    return path


def test_a_cache_that_cannot_be_written_names_the_variable(
    tmp_path, monkeypatch, capsys, tiny_webshop_suite
):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("GIGPO_SUITE_CACHE", str(blocker / "cache"))  # under a file: no mkdir
    suite = load_suite(tiny_webshop_suite)
    set_roots(suite)
    with pytest.raises(SuiteError, match=r"set \$GIGPO_SUITE_CACHE to a writable folder \(now '"):
        prepare_data(suite)
    monkeypatch.delenv("GIGPO_SUITE_CACHE")
    monkeypatch.setenv("HOME", str(blocker))  # the default, ~/.cache/gigpo/suites, under a file
    set_roots(suite)
    with pytest.raises(SuiteError, match=r"GIGPO_SUITE_CACHE .*\(unset, so ~/.cache/gigpo/suites"):
        prepare_data(suite)


def test_the_webshop_generation_note_speaks_of_products(
    tmp_path, monkeypatch, capsys, tiny_webshop_suite
):
    monkeypatch.setenv("GIGPO_SUITE_CACHE", str(tmp_path / "cache"))
    suite = load_suite(tiny_webshop_suite)
    set_roots(suite)
    assert list(prepare_data(suite)["files"]) == ["cache/webshop/items_shuffle.json"]
    note = capsys.readouterr().err
    assert "5 WebShop products" in note and "ALFWorld" not in note
    prepare_data(suite)  # the cache is kept: a second call generates nothing
    assert capsys.readouterr().err == ""


# --------------------------------------------------------------------------------- table


def _cells(line: str) -> list[str]:
    """A markdown table row's cells: split on the pipes that are not escaped."""
    return re.split(r"(?<!\\)\|", line.strip())[1:-1]


def test_a_pipe_or_line_break_in_a_name_stays_inside_its_table_cell(tmp_path):
    parts = ["NQ|open", "Hot\npot"]
    path = _suite_file(tmp_path, parts=[{"name": name, "tasks": {"count": 1}} for name in parts])
    assert [p.name for p in load_suite(path).parts] == parts  # a name may hold either
    rows = [{"task_index": i, "part": p, "won": 1.0, "return": 1.0, "length": 2,
             "valid_steps": 2, "sample": 0, "recurring_steps": 0, "recurring_later_steps": 0}
            for i, p in enumerate(parts)]  # fmt: skip
    summary = {"suite": "mine", "suite_version": 1, "model": "models/a|b", "prompt": "template",
               "temperature": 0.0, "commit": "abc", "data": {"sha256": "0" * 64, "pinned": True},
               **summarize("searchqa", parts, rows)}  # fmt: skip
    table = markdown_table([summary]).splitlines()
    head, rule, row = table[0], table[1], table[2]
    assert len(_cells(head)) == len(_cells(rule)) == len(_cells(row)) == 3 + len(parts) + 1
    assert _cells(head)[3:5] == [" NQ\\|open ", " Hot pot "]
    assert _cells(row)[0] == " models/a\\|b "
