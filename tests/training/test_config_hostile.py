"""Config values that pass a type check and then hurt: each is refused at load, naming its key,
with exit code 2 from the CLI and nothing created in ``--out``."""

from __future__ import annotations

import pytest
from exit_codes import exit_code

from training.local.__main__ import main as train_main
from training.local.checks import LIMITS, MAX_SEED
from training.local.config import ConfigError, load_config

#: A billion-laughs document: nine levels of nine aliases expand to 9**9 strings.
ALIAS_BOMB = "\n".join(
    ["env:", "  kwargs:", '    a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    + [f"    a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
)


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["--optim.lr=inf"], "optim.lr"),
        (["--optim.lr=.nan"], "optim.lr"),
        (["--optim.lr=1e400"], "optim.lr"),
        (["--optim.weight_decay=inf"], "optim.weight_decay"),
        (["--optim.max_grad_norm=inf"], "optim.max_grad_norm"),
        (["--rollout.temperature=inf"], "rollout.temperature"),
        (["--rollout.top_p=nan"], "rollout.top_p"),
        (["--algo.clip_low=-inf"], "algo.clip_low"),
        (["--env.heldout_fraction=nan"], "env.heldout_fraction"),
        (["--env.group_size=1000000000"], "env.group_size"),
        (["--env.num_groups=1000000000"], "env.num_groups"),
        (["--env.num_groups=4096", "--env.group_size=1024"], "env.num_groups x env.group_size"),
        (["--model.tiny_vocab_size=1000000000"], "model.tiny_vocab_size"),
        (["--model.tiny_hidden_size=4096", "--model.tiny_layers=64"], "model.tiny_"),
        (["--rollout.max_new_tokens=1000000000"], "rollout.max_new_tokens"),
        ([f"--run.seed={2**64}"], "run.seed"),
        ([f"--run.seed={MAX_SEED + 1}"], "run.seed"),
        (["--model.device=cuda:99"], "model.device"),
        (["--model.name_or_path=/no/such/model"], "model.name_or_path"),
        (["--env.kwargs={a: &x [1, 2], b: *x}"], "alias"),
        (["--env.kwargs=" + "[" * 10_000 + "]" * 10_000], "env.kwargs"),
        # Past Python's own digit limit (4300): a named error, not a bare ValueError.
        (["--run.seed=" + "1" * 5000], "run.seed"),
        (["--env.kwargs={max_position: " + "9" * 5000 + "}"], "env.kwargs"),
    ],
)
def test_a_hostile_override_exits_2_naming_its_key(tmp_path, capsys, overrides, key):
    out = tmp_path / "out"
    assert exit_code(train_main, [*overrides, f"--out={out}"]) == 2
    err = capsys.readouterr().err
    assert key in err, err
    assert len(err) < 2000  # never the whole value
    assert not out.exists()


@pytest.mark.parametrize(
    "content, message",
    [
        (ALIAS_BOMB.encode(), "aliases"),
        (b"model:\n  name_or_path: &n x\nrun:\n  label: *n\n", "aliases"),
        (bytes(range(256)) * 4, "not UTF-8"),
        ("model:\n  name_or_path: caf\xe9\n".encode("latin-1"), "not UTF-8"),
        (b"env:\n  kwargs:\n    x: " + b"[" * 10_000 + b"]" * 10_000 + b"\n", "nested deeper"),
        (b"{" * 10_000 + b"}" * 10_000, "nested deeper"),
        (b"model:\n  name_or_path: [" + b"1, " * 400_000 + b"1]\n", "over"),
        (b"1: {a: 2}\n", "config keys are names"),
        (b"run:\n  seed: " + b"1" * 5000 + b"\n", "run.seed (line 2"),
        (b"env:\n  kwargs:\n    m: [1, " + b"9" * 5000 + b"]\n", "env.kwargs.m[1] (line 3"),
        (b"env:\n  kwargs:\n    m: 0x" + b"f" * 200 + b"\n", "an integer of 200 digits"),
        (b"run:\n  label: &n x\n", "anchors"),
        (b"optim:\n  lr: .inf\n", "optim.lr"),
    ],
)
def test_a_hostile_config_file_exits_2_with_a_clear_message(tmp_path, capsys, content, message):
    path = tmp_path / "config.yaml"
    path.write_bytes(content)
    out = tmp_path / "out"
    assert exit_code(train_main, ["--config", str(path), f"--out={out}"]) == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert "Traceback" not in err and len(err) < 2000
    assert not out.exists()


def test_paths_that_are_not_what_they_should_be(tmp_path, capsys):
    assert exit_code(train_main, ["--config", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
    taken = tmp_path / "a_file"
    taken.write_text("not a run directory")
    assert exit_code(train_main, [f"--out={taken}"]) == 2
    assert "run.out is a file" in capsys.readouterr().err
    assert exit_code(train_main, [f"--out={taken / 'run'}"]) == 2
    assert "run.out's parent" in capsys.readouterr().err
    assert taken.read_text() == "not a run directory"


@pytest.mark.parametrize("key", sorted(LIMITS))
def test_each_limit_holds_at_its_bound_and_refuses_one_more(tmp_path, key):
    limit = LIMITS[key]
    extra = []
    if key.startswith("model.tiny_"):  # one size at its bound, the others small
        extra = ["--model.tiny_vocab_size=400", "--model.tiny_hidden_size=32"]
    if key == "env.group_size":
        extra = ["--env.num_groups=1"]
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(None, [*extra, f"--{key}={limit + 1}", f"--out={tmp_path}"])
    if key in ("model.tiny_hidden_size",):
        return  # at its bound the tiny model is past its parameter cap with a 400 vocab
    load_config(None, [*extra, f"--{key}={limit}", f"--out={tmp_path}"])
