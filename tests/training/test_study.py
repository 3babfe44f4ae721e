"""The estimator study: runs differ only in estimator and seed; table, plot and numbers."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from training.cli.study import main
from training.local.config import ConfigError
from training.stats import mean_ci, paired_difference
from training.study.plan import Arm, axis_arms, load_study_file, parse_arm
from training.study.runs import plan_runs


def test_mean_and_95_percent_interval_by_hand():
    # t quantiles from a printed 4-decimal table; the exact ones agree to 1e-4 relative
    mean, half = mean_ci([1.0, 2.0, 3.0])  # sd 1, t(0.975, 2 df) = 4.3027
    assert mean == 2.0 and half == pytest.approx(4.3027 / math.sqrt(3), rel=1e-4)
    assert mean_ci([0.5]) == (0.5, 0.0)
    mean, half = mean_ci([0.0, 1.0])  # sd 0.7071, t(1 df) = 12.7062
    assert half == pytest.approx(12.7062 * math.sqrt(0.5) / math.sqrt(2), rel=1e-4)


def _config(tmp_path, model_dir, extra: str = "") -> str:
    path = tmp_path / "tiny_line.yaml"
    path.write_text(
        f"model: {{name_or_path: {model_dir}}}\n"
        "env:\n  id: gigpo/NumberLine-v0\n  kwargs: {max_position: 3, max_steps: 3}\n"
        "  num_groups: 2\n  group_size: 2\n  history_length: 0\n"
        "  heldout_fraction: 0.25\n"
        "rollout: {max_new_tokens: 4}\neval: {groups: 2, every: 2}\n"
        f"algo: {{minibatch_size: 8{extra}}}\n"
        "run: {iterations: 2, checkpoint_every: 0}\n"
    )
    return str(path)


def test_only_estimator_and_seed_differ_between_runs(tmp_path, tiny_model_dir):
    config = _config(tmp_path, tiny_model_dir)
    runs = plan_runs([config], ["gigpo", "grpo", "rloo"], [0, 1], tmp_path / "study")
    assert len(runs) == 6
    assert {(r.estimator, r.seed) for r in runs} == {
        (e, s) for e in ("gigpo", "grpo", "rloo") for s in (0, 1)
    }
    stripped = {
        tuple(
            a
            for a in r.argv()
            if "estimator" not in a and "seed" not in a and "label" not in a and "--out" not in a
        )
        for r in runs
    }
    assert len(stripped) == 1  # everything else is the same command line
    quick = plan_runs([config], ["gigpo"], [0], tmp_path / "q", quick=True)
    assert "--run.iterations=2" in quick[0].argv()


def test_a_setting_an_estimator_ignores_stops_the_study_before_training(tmp_path, tiny_model_dir):
    config = _config(tmp_path, tiny_model_dir, extra=", step_weight: 0.5")
    with pytest.raises(ConfigError, match="algo.step_weight=0.5 is not used by"):
        plan_runs([config], ["gigpo", "grpo"], [0], tmp_path / "study")
    assert not (tmp_path / "study" / "runs").exists()
    with pytest.raises(ConfigError, match="algo.estimator='ppo'"):
        plan_runs([config], ["ppo"], [0], tmp_path / "study")
    with pytest.raises(ConfigError, match="--estimators"):
        plan_runs([config], ["a2c"], [0], tmp_path / "study")
    with pytest.raises(ConfigError, match="--seeds"):
        plan_runs([config], ["gigpo"], [1, 1], tmp_path / "study")


def test_a_small_study_writes_its_table_plot_and_numbers(tmp_path, tiny_model_dir, capsys):
    config = _config(tmp_path, tiny_model_dir)
    out = tmp_path / "study"
    argv = ["--config", config, "--estimators", "gigpo", "grpo", "--seeds", "0", "1"]
    assert main([*argv, "--out", str(out), "--jobs", "2"]) == 0
    table = (out / "study.md").read_text()
    assert "| `gigpo` | 2 |" in table and "| `grpo` | 2 |" in table
    assert "| `gigpo` - `grpo` | 2 |" in table  # the default pair
    assert (out / "study.png").stat().st_size > 10_000
    study = json.loads((out / "study.json").read_text())
    entry = study["runs"]["tiny_line"]["grpo"]
    assert entry["seeds"] == [0, 1]
    for key in ("train_success", "heldout_success", "valid_action_rate", "step_group_coverage"):
        values = entry["per_seed"][key]
        assert len(values) == 2 and all(0.0 <= v <= 1.0 for v in values)
        assert entry["mean_ci"][key][0] == pytest.approx(sum(values) / 2)
    assert entry["per_seed"]["step_group_mean_size"][0] >= 1.0
    # Run again: every run is finished, so nothing trains and the numbers are the same.
    first = (out / "runs" / "tiny_line" / "grpo" / "seed1" / "metrics.jsonl").read_text()
    assert main([*argv, "--out", str(out)]) == 0
    assert (out / "runs" / "tiny_line" / "grpo" / "seed1" / "metrics.jsonl").read_text() == first
    assert (
        json.loads((out / "study.json").read_text())["runs"]["tiny_line"]["grpo"]["per_seed"]
        == entry["per_seed"]
    )


def test_arms_parse_to_one_canonical_name_and_bad_specs_are_named():
    arm = parse_arm("gigpo:norm=mean, step_weight=2")
    assert arm == Arm("gigpo", (("norm", "mean"), ("step_weight", "2")))
    assert arm.name == "gigpo:norm=mean,step_weight=2"
    assert arm.overrides() == ["--algo.estimator=gigpo", "--algo.norm=mean", "--algo.step_weight=2"]
    # One arm however it is spelt: settings sorted, values as YAML reads them.
    assert parse_arm("gigpo:step_weight=2.0,norm=mean") == arm
    assert parse_arm("gigpo:similarity=0.90").name == "gigpo:similarity=0.9"
    assert parse_arm("rloo").name == "rloo" and parse_arm("rloo").overrides() == [
        "--algo.estimator=rloo"
    ]
    for spec, message in [
        ("a2c", "estimator must be one of"),
        ("gigpo:norm", "is not key=value"),
        ("gigpo:colour=red", "algo.colour is not a setting"),
        ("gigpo:norm=mean,norm=loo", "given twice"),
        ("gigpo:", "nothing after"),
        ("", "an arm is a string"),
    ]:
        with pytest.raises(ConfigError, match=message):
            parse_arm(spec)


def test_axes_cross_only_the_arms_that_read_them():
    arms = axis_arms(
        [Arm("gigpo"), Arm("grpo"), Arm("rloo")], {"norm": ["mean", "loo"], "step_weight": [2]}
    )
    assert [a.name for a in arms] == [
        "gigpo:norm=mean,step_weight=2",
        "gigpo:norm=loo,step_weight=2",
        "grpo:norm=mean",
        "grpo:norm=loo",
        "rloo",  # RLOO reads neither: one arm
    ]
    with pytest.raises(ConfigError, match="algo.speed is not a setting"):
        axis_arms([Arm("gigpo")], {"speed": [1]})


def test_paired_difference_by_hand():
    d = paired_difference([0.9, 0.8, 0.7, 0.5], [0.5, 0.8, 0.4, 0.6])  # diffs .4 0 .3 -.1
    assert d["n"] == 4 and (d["wins"], d["losses"], d["ties"]) == (2, 1, 1)
    assert d["mean"] == pytest.approx(0.15)
    sd = math.sqrt(((0.25**2) + 0.15**2 + 0.15**2 + 0.25**2) / 3)
    assert d["half"] == pytest.approx(3.1824 * sd / 2, rel=1e-4)  # t(3 df) = 3.1824
    assert d["p_sign"] == pytest.approx(1.0)  # 2 vs 1: 2 * (1 + 3) / 8 = 1
    assert paired_difference([1.0] * 8, [0.0] * 8)["p_sign"] == pytest.approx(2 / 256)
    nan = paired_difference([1.0, math.nan], [0.0, 0.0])
    assert nan["n"] == 1
    with pytest.raises(ValueError, match="equal lengths"):
        paired_difference([1.0], [])


def test_study_file_parts_pairs_and_errors(tmp_path, tiny_model_dir):
    config = _config(tmp_path, tiny_model_dir)
    good = tmp_path / "s.yaml"
    good.write_text(
        "jobs: 2\nparts:\n"
        f"  - name: norm\n    configs: [{config}]\n    seeds: 3\n"
        "    arms: [gigpo, grpo]\n    axes: {norm: [mean, mean_std]}\n"
        "  - name: weight\n    configs: [tiny_line.yaml]\n    seeds: [0, 1]\n"
        "    arms: ['gigpo:norm=mean,step_weight=2', 'gigpo:norm=mean']\n"
        "    pairs: [['gigpo:norm=mean,step_weight=2', 'gigpo:norm=mean']]\n"
    )
    parts, options = load_study_file(good)
    assert options == {"jobs": 2} and [p.name for p in parts] == ["norm", "weight"]
    assert parts[0].overrides == ()
    assert parts[0].seeds == [0, 1, 2]
    assert parts[0].pairs == [
        ("gigpo:norm=mean", "grpo:norm=mean"),
        ("gigpo:norm=mean_std", "grpo:norm=mean_std"),
    ]
    runs, _ = __import__("training.study.plan", fromlist=["plan_runs"]).plan_runs(
        parts, tmp_path / "out"
    )
    # gigpo:norm=mean seeds 0, 1 are shared by both parts: trained once.
    assert len(runs) == 4 * 3 + 2
    for text, message in [
        ("parts: []\n", "parts: a non-empty list"),
        ("parts: [{configs: [nope.yaml], arms: [gigpo]}]\n", "parts.0.configs: no file"),
        (f"parts: [{{configs: [{config}], arms: [gigpo], colour: 1}}]\n", "parts.0.colour"),
        (f"parts: [{{configs: [{config}], arms: [gigpo], seeds: [1, 1]}}]\n", "parts.0.seeds"),
        (
            f"parts: [{{configs: [{config}], arms: [gigpo], pairs: [[gigpo, grpo]]}}]\n",
            "parts.0.pairs: 'grpo' is not an arm",
        ),
        ("jobs: 0\nparts: []\n", "jobs must be a positive int"),
        (f"parts: [{{configs: [{config}], arms: [gigpo], pairs: 5}}]\n", "parts.0.pairs: a list"),
        (
            f"parts: [{{configs: [{config}], arms: [gigpo], pairs: [[gigpo, gigpo]]}}]\n",
            "paired with itself",
        ),
        (f"parts: [{{configs: [{config}], arms: [gigpo], name: null}}]\n", "parts.0.name"),
        (
            f"parts: [{{configs: [{config}], arms: [gigpo], name: a}}, "
            f"{{configs: [{config}], arms: [grpo], name: a}}]\n",
            "parts.1.name: 'a' names another part",
        ),
        ("overrides: ['--algo.norm=mean']\nparts: []\n", "--algo.norm is the study's own"),
        ("overrides: [run.iterations=5]\nparts: []\n", "overrides: a list of '--key=value'"),
        ("overrides: ['--run.seed=5']\nparts: []\n", "the study's own"),
        ("extra: 1\n", "unknown key 'extra'"),
        ("[1, 2\n", "cannot read it"),
    ]:
        bad = tmp_path / "bad.yaml"
        bad.write_text(text)
        with pytest.raises(ConfigError, match=message):
            load_study_file(bad)


def test_an_arm_setting_its_estimator_ignores_fails_before_any_model_is_built(tmp_path):
    path = tmp_path / "tiny_line.yaml"
    path.write_text(
        "model: {name_or_path: tiny-random}\n"
        "env:\n  id: gigpo/NumberLine-v0\n  kwargs: {max_position: 3, max_steps: 3}\n"
        "  num_groups: 2\n  group_size: 2\n"
        "run: {iterations: 2}\n"
    )
    with pytest.raises(SystemExit):
        main(["--config", str(path), "--arm", "grpo:step_weight=2", "--out", str(tmp_path / "o")])
    assert not (tmp_path / "o").exists()  # no tiny model was built


def test_the_shipped_paper_study_has_the_paper_axes_on_8_seeds():
    from training.study.parts import study_path

    parts, options = load_study_file(study_path("paper"))
    assert options == {"jobs": 2, "threads": 1}
    by_name = {p.name: p for p in parts}
    norm = by_name["norm"]
    assert len(norm.seeds) >= 8 and len(by_name["step_weight"].seeds) >= 8
    every_arm = {a.name for p in parts for a in p.arms}
    for n in ("mean", "mean_std", "loo"):
        assert f"gigpo:norm={n}" in every_arm
    assert {"rloo", "ppo"} <= every_arm
    assert ("gigpo:norm=mean", "grpo:norm=mean") in norm.pairs
    assert ("gigpo:norm=mean_std", "grpo:norm=mean_std") in norm.pairs
    weights = {dict(a.settings).get("step_weight") for a in by_name["step_weight"].arms}
    assert weights == {"0.5", None, "2"}
    metrics = {dict(a.settings).get("similarity_metric") for a in by_name["grouping"].arms}
    assert metrics == {None, "difflib", "embedding"}
    with pytest.raises(ConfigError, match="no shipped study"):
        study_path("nope")


def test_the_family_parts_run_each_method_as_its_recipe_does(tmp_path):
    """Parts 8a-9b (issue: the family compared as each paper runs it): HGPO on prompts that
    show the last K steps, K the same for every arm and HGPO's own, with and without
    base_group, beside GiGPO and GRPO; GraphGPO at its recipe's penalty, statistics and
    gamma, distance normalisation on and off, every arm of the part at the same penalty."""
    from training.local.config import load_config
    from training.study.parts import study_path

    parts = {p.name: p for p in load_study_file(study_path("paper"))[0]}
    for name in ("history_hidden", "history_long", "history_round_trip"):
        part = parts[name]
        arms = {a.name: dict(a.settings) for a in part.arms}
        if name == "history_round_trip":  # the one question, HGPO against GiGPO
            assert set(arms) == {"hgpo", "gigpo:norm=mean_std"}
        else:
            assert set(arms) == {"hgpo", "hgpo:base_group=true", "gigpo:norm=mean_std",
                                 "grpo:norm=mean_std"}  # fmt: skip
        assert ("hgpo", "gigpo:norm=mean_std") in part.pairs and len(part.seeds) >= 8
        for path in part.configs:
            config = load_config(str(path), [f"--out={tmp_path / 'o'}", "--algo.estimator=hgpo"])
            assert config.env.history_length == config.algo.history_length == 2
            assert "history" in config.env.template["order"]  # the prompt shows it
    hidden = load_config(str(parts["history_hidden"].configs[0]), [f"--out={tmp_path / 'o'}"])
    assert hidden.env.kwargs["hidden_target"] is True
    trip = load_config(str(parts["history_round_trip"].configs[0]), [f"--out={tmp_path / 'o'}"])
    assert trip.env.kwargs["round_trip"] is True
    for name in ("graphgpo_recipe_long", "graphgpo_recipe_traps"):
        part = parts[name]
        settings = [dict(a.settings) for a in part.arms]
        assert {a.estimator for a in part.arms} == {"graphgpo", "gigpo", "grpo"}
        assert all(s["invalid_penalty"] == "0.1" and s["episode_stats"] == "step"
                   for s in settings)  # fmt: skip
        graph = [s for a, s in zip(part.arms, settings, strict=True) if a.estimator == "graphgpo"]
        assert sorted(s.get("normalize_distance", "false") for s in graph) == ["false", "true"]
        assert all("gamma" not in s for s in graph)  # its own default: the ALFWorld recipe's
        assert len(part.seeds) >= 8


def test_study_file_overrides_reach_every_run(tmp_path, tiny_model_dir):
    from training.study.plan import plan_runs as plan_parts

    config = _config(tmp_path, tiny_model_dir)
    path = tmp_path / "s.yaml"
    path.write_text(
        "overrides: ['--run.iterations=1', '--optim.lr=0.001']\n"
        f"parts: [{{configs: [{config}], arms: [gigpo, grpo], seeds: 2}}]\n"
    )
    parts, _ = load_study_file(path)
    runs, _ = plan_parts(parts, tmp_path / "out")
    assert len(runs) == 4
    for run in runs:
        assert {"--run.iterations=1", "--optim.lr=0.001"} <= set(run.argv())
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        f"overrides: ['--optim.lr=-1']\nparts: [{{configs: [{config}], arms: [grpo]}}]\n"
    )
    with pytest.raises(ConfigError, match="optim.lr"):
        plan_parts(load_study_file(bad)[0], tmp_path / "out2")


def test_a_run_folder_with_other_settings_is_refused_before_training(tmp_path, tiny_model_dir):
    from training.study.runs import run_all

    config = _config(tmp_path, tiny_model_dir)
    out = tmp_path / "study"
    assert (
        main(["--config", config, "--estimators", "grpo", "--seeds", "0", "--out", str(out)]) == 0
    )
    before = (out / "runs" / "tiny_line" / "grpo" / "seed0" / "metrics.jsonl").read_text()
    # The same folder under another setting (a KL coefficient) is another run: refused.
    changed = plan_runs([config], [], [0], out, arms=[parse_arm("grpo:kl_coef=0.5")])
    changed = [r for r in changed]
    moved = type(changed[0])(
        changed[0].config_path,
        changed[0].name,
        changed[0].arm,
        0,
        out / "runs" / "tiny_line" / "grpo" / "seed0",
        changed[0].overrides,
    )
    with pytest.raises(ConfigError, match="holds a run with other settings.*kl_coef"):
        run_all([moved], 1)
    after = (out / "runs" / "tiny_line" / "grpo" / "seed0" / "metrics.jsonl").read_text()
    assert after == before
    # --quick runs live in their own folders, never beside the full ones.
    quick = plan_runs([config], ["grpo"], [0], out, quick=True)
    assert "runs-quick" in str(quick[0].out)


def _tiny_random_config(tmp_path) -> str:
    path = tmp_path / "tiny_random.yaml"
    path.write_text(
        "model: {name_or_path: tiny-random}\n"
        "env:\n  id: gigpo/NumberLine-v0\n  kwargs: {max_position: 3, max_steps: 2}\n"
        "  num_groups: 1\n  group_size: 2\n  history_length: 0\n  heldout_fraction: 0.25\n"
        "rollout: {max_new_tokens: 2}\neval: {groups: 1, every: 2}\n"
        "algo: {minibatch_size: 4}\nrun: {iterations: 2, checkpoint_every: 0}\n"
    )
    return str(path)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--seeds", "4294967296"], r"--seeds\[0\]: a seed is the trainer's run.seed"),
        (["--seeds", *map(str, range(10_001))], "at most 10000 seeds"),
        (["--arm", "gigpo:step_weight=" + "1" * 5000], r"algo.step_weight.*5000 digits"),
        (["--arm", "gigpo:similarity_metric=" + "a" * 313], "338 characters, over the limit"),
        (["--arm", "gigpo:similarity_metric=../../x"], "letters, digits"),
    ],
)
def test_numbers_and_arms_are_checked_before_the_shared_model_is_built(
    tmp_path, capsys, argv, message
):
    out = tmp_path / "o"
    with pytest.raises(SystemExit) as exc:
        main(["--config", _tiny_random_config(tmp_path), *argv, "--out", str(out)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert re.search(message, err), err
    assert "Traceback" not in err and len(err) < 2000
    assert not (out / "models").exists()  # refused before any tiny model was built


ALIAS_BOMB = "\n".join(
    ["overrides: [--run.iterations=1]", "parts: [{configs: [c.yaml], arms: [gigpo]}]", "x:"]
    + ['  a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    + [f"  a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
)


@pytest.mark.parametrize(
    "text, message",
    [
        (ALIAS_BOMB, "anchors and aliases"),
        ("parts: " + "[" * 20_000 + "]" * 20_000, "nested deeper than 32"),
        (
            "parts: [{configs: [c.yaml], arms: [gigpo], seeds: [" + "7" * 5000 + "]}]",
            r"parts\[0\].seeds\[0\] \(line 1.*5000 digits",
        ),
        (
            "parts: [{configs: [c.yaml], arms: [gigpo], seeds: [4294967296]}]",
            r"parts.0.seeds\[0\]: a seed",
        ),
        ("parts: [{configs: [c.yaml], arms: [gigpo], seeds: 10001}]", "at most 10000 seeds"),
        ("parts: [{configs: [c.yaml], arms: ['gigpo:kl_coef=" + "9" * 300 + "']}]", "300 digits"),
        ("parts: [1]\n" + "# padding\n" * 200_000, "over the limit of 1048576 bytes"),
    ],
)
def test_a_hostile_study_file_is_a_short_named_error(tmp_path, text, message):
    (tmp_path / "c.yaml").write_text("run: {iterations: 1}\n")
    path = tmp_path / "study.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_study_file(path)
    assert re.search(message, str(exc.value)), str(exc.value)
    assert len(str(exc.value)) < 1000


def test_a_moved_or_copied_study_resumes_where_it_is_without_training_again(tmp_path, monkeypatch):
    import shutil

    config = _tiny_random_config(tmp_path)
    argv = ["--config", config, "--estimators", "grpo", "--seeds", "0", "--quick"]
    first = tmp_path / "first"
    assert main([*argv, "--out", str(first)]) == 0
    run = Path("runs-quick") / "tiny_random" / "grpo" / "seed0"
    saved = json.loads((first / run / "config.json").read_text())
    assert saved["model"]["name_or_path"] == "tiny-random"  # no path inside the study folder
    assert (first / run / "tiny-model").is_symlink()

    def stamps(study):
        return [(study / run / name).stat().st_mtime_ns for name in ("metrics.jsonl", "train.log")]

    before = stamps(first)
    moved = tmp_path / "moved"
    first.rename(moved)
    monkeypatch.chdir(tmp_path)
    assert main([*argv, "--out", "moved"]) == 0  # moved, and a relative --out
    assert stamps(moved) == before  # nothing trained again
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert main([*argv, "--out", "../moved"]) == 0  # from another folder
    assert stamps(moved) == before
    copied = tmp_path / "copied"
    shutil.copytree(moved, copied, symlinks=True)  # as cp -r does
    copied_before = stamps(copied)
    assert main([*argv, "--out", str(copied)]) == 0
    assert stamps(copied) == copied_before
