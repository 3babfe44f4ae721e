"""HGPO's level weights, ``(k + 1) ** algo.length_alpha`` down to level
``algo.history_length + 1``, must fit float64: a setting whose weights overflow is refused at
load (and by ``--dry-run``), naming ``algo.length_alpha``, with exit code 2 and nothing made in
``--out``; before, it loaded and the run stopped at its first batch, after the model was
built."""

from __future__ import annotations

import pytest
from exit_codes import exit_code

from training.local.__main__ import main as train_main
from training.local.config import ConfigError, load_config


@pytest.mark.parametrize(
    "overrides",
    [
        ["--algo.length_alpha=1000"],  # smoke's env.history_length 1: 3 ** 1000
        ["--algo.history_length=2", "--algo.length_alpha=600", "--dry-run"],  # 4 ** 600
        ["--env.history_length=1000", "--algo.length_alpha=103"],  # 1002 ** 103 ~ 1e309
    ],
)
def test_hgpo_weights_that_overflow_exit_2_naming_the_key(tmp_path, capsys, overrides):
    out = tmp_path / "out"
    argv = ["--config", "smoke", "--algo.estimator=hgpo", *overrides, f"--out={out}"]
    assert exit_code(train_main, argv) == 2
    err = capsys.readouterr().err
    assert "algo.length_alpha=" in err and "overflow float64" in err, err
    assert "algo.history_length=" in err, err
    assert not out.exists()


def test_the_bound_is_the_weights_own(tmp_path):
    # At history 1000 (1001 levels), 1002 ** 102 fits float64 and 1002 ** 103 does not.
    base = ["--algo.estimator=hgpo", "--env.history_length=1000", f"--out={tmp_path}"]
    assert load_config("smoke", [*base, "--algo.length_alpha=102"]).algo.length_alpha == 102
    with pytest.raises(ConfigError, match=r"^algo\.length_alpha=103\.0 is too large"):
        load_config("smoke", [*base, "--algo.length_alpha=103"])
