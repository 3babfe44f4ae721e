"""Models named by hub id, resolved as transformers resolves them: the Hugging Face cache,
``HF_HUB_OFFLINE``, a pinned ``model.revision``; the run records the commit it trained on.
No test reaches the network: the cache is built from the tiny model (tests/hub_cache.py)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hub_cache import cache_model  # noqa: E402

from training.local.config import ConfigError, load_config  # noqa: E402

REPO_ID = "gigpo-tests/tiny-qwen2"


@pytest.fixture
def hub(tiny_model_dir, tmp_path, monkeypatch):
    """An offline hub cache holding the tiny model as ``REPO_ID``; returns its commit."""
    cache = tmp_path / "hf-cache"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return cache_model(tiny_model_dir, cache, REPO_ID)


def _args(tmp_path: Path, *more: str) -> list[str]:
    return [f"--model.name_or_path={REPO_ID}", f"--out={tmp_path}/run", "--run.iterations=1",
            "--run.progress=false", "--eval.every=0", *more]  # fmt: skip


def test_an_id_resolves_to_the_snapshot_transformers_itself_finds(hub, tmp_path):
    from transformers.utils import cached_file

    from training.hub import resolve_model

    resolved = resolve_model(REPO_ID)
    cache = tmp_path / "hf-cache"
    found = cached_file(REPO_ID, "config.json", cache_dir=cache, local_files_only=True)
    theirs = Path(found).parent
    assert resolved.path == theirs and resolved.revision == hub
    assert resolve_model(REPO_ID, hub).path == theirs  # pinned to the commit itself


def test_training_by_id_records_the_id_and_the_commit(hub, tmp_path):
    from training.local.train import train

    config = load_config("smoke", _args(tmp_path))
    train(config)
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["model"]["name_or_path"] == REPO_ID and saved["model"]["revision"] == hub
    # the same config, unpinned, is the same run (a study checks its folders so); the
    # trainer pins it to the commit it resolves to before comparing
    from training.local.resume import config_changes

    assert config_changes(saved, load_config("smoke", _args(tmp_path))) == []
    # the recorded config loads and resumes on the same commit; another commit is refused
    resumed = load_config(tmp_path / "run" / "config.json", ["--run.iterations=2"])
    assert resumed.model.revision == hub
    from training.local.resume import ResumeConfigError

    other = cache_model(Path(resolve_snapshot(hub)), Path(tmp_path / "hf-cache"), REPO_ID,
                        commit="f" * 40)  # fmt: skip
    moved = load_config("smoke", _args(tmp_path, f"--model.revision={other}"))
    with pytest.raises(ResumeConfigError, match="model.revision"):
        train(moved)


def resolve_snapshot(commit: str) -> Path:
    from training.hub import resolve_model

    return resolve_model(REPO_ID, commit).path


def test_offline_and_not_cached_is_an_error_at_load_naming_the_fetch(hub, tmp_path):
    with pytest.raises(ConfigError) as caught:
        load_config(
            "smoke", [f"--out={tmp_path}/r", "--model.name_or_path=Qwen/Qwen2.5-0.5B-Instruct"]
        )
    message = str(caught.value)
    assert "model.name_or_path='Qwen/Qwen2.5-0.5B-Instruct'" in message
    assert "`hf download Qwen/Qwen2.5-0.5B-Instruct`" in message and "HF_HUB_OFFLINE" in message
    with pytest.raises(ConfigError, match="--revision v9"):
        load_config("smoke", [f"--out={tmp_path}/r", f"--model.name_or_path={REPO_ID}",
                              "--model.revision=v9"])  # fmt: skip
    for bad in ("a b", "../../etc"):  # not a ref, or a path out of the cache
        with pytest.raises(ConfigError, match="model.revision must be"):
            load_config("smoke", [f"--out={tmp_path}/r", f"--model.revision={bad}"])
    # a path that exists but is no model, and a name that is neither path nor id
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="not a model directory"):
        load_config("smoke", [f"--out={tmp_path}/r", f"--model.name_or_path={tmp_path}/empty"])
    with pytest.raises(ConfigError, match="not a Hugging Face hub id"):
        load_config("smoke", [f"--out={tmp_path}/r", "--model.name_or_path=a/b/c"])


def test_a_cached_config_without_weights_names_the_fetch(hub, tmp_path):
    """A dry run online fetches config.json alone: such a snapshot is not a model to train."""
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(resolve_snapshot(hub) / "config.json", bare / "config.json")
    cache_model(bare, tmp_path / "hf-cache", "gigpo-tests/config-only")
    with pytest.raises(ConfigError, match="no weights .*hf download gigpo-tests/config-only"):
        load_config(
            "smoke", [f"--out={tmp_path}/r", "--model.name_or_path=gigpo-tests/config-only"]
        )


def test_remote_code_is_refused_unless_trusted(hub, tmp_path, tiny_model_dir):
    model = tmp_path / "remote"
    shutil.copytree(tiny_model_dir, model)
    config = json.loads((model / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_evil.EvilForCausalLM"}
    (model / "config.json").write_text(json.dumps(config))
    cache_model(model, tmp_path / "hf-cache", "gigpo-tests/remote-code")
    for name in (str(model), "gigpo-tests/remote-code"):
        with pytest.raises(ConfigError, match="model.trust_remote_code: true only if you trust"):
            load_config("smoke", [f"--out={tmp_path}/r", f"--model.name_or_path={name}"])
        trusted = load_config("smoke", [f"--out={tmp_path}/r", f"--model.name_or_path={name}",
                                        "--model.trust_remote_code=true"])  # fmt: skip
        assert trusted.model.trust_remote_code


def test_evaluate_by_id_records_the_commit(hub, tmp_path):
    from training.cli.evaluate import main

    out = tmp_path / "eval"
    code = main(["--model", REPO_ID, "--out", str(out), "--episodes", "2", "--config", "smoke"])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["model"] == REPO_ID and summary["model_revision"] == hub
    assert summary["model_dir"] == str(resolve_snapshot(hub))


def test_a_suite_by_id_pins_the_commit_for_its_whole_run(hub, tmp_path, monkeypatch):
    """A pinned suite played by hub id records the commit; resumed after the branch moved
    on, it is refused rather than mixing two models' rows."""
    from training.cli.evaluate import main

    monkeypatch.setenv("GIGPO_SUITE_CACHE", str(tmp_path / "suite-cache"))
    out = tmp_path / "suite"
    args = ["--model", REPO_ID, "--out", str(out), "--suite", "searchqa-sample",
            "--max-episodes", "1", "--max-new-tokens", "8"]  # fmt: skip
    assert main(args) == 0
    summary = json.loads((out / "summary.json").read_text())
    run = json.loads((out / "run.json").read_text())
    assert summary["model_revision"] == run["model_revision"] == hub
    cache_model(resolve_snapshot(hub), tmp_path / "hf-cache", REPO_ID, commit="e" * 40)
    with pytest.raises(SystemExit, match="2"):  # main now points at another commit
        main(args)


def test_a_study_by_id_pins_every_run_to_one_commit(hub, tmp_path):
    from training.study.runs import plan_runs

    config = tmp_path / "study.yaml"
    config.write_text(f"model: {{name_or_path: {REPO_ID}}}\nrun: {{iterations: 1}}\n")
    runs = plan_runs([config], ["gigpo", "grpo"], [0, 1], tmp_path / "study")
    assert len(runs) == 4 and all(f"--model.revision={hub}" in r.argv() for r in runs)


def test_the_openrlhf_launch_checks_its_models_before_ray(hub, tmp_path, tiny_model_dir):
    """OpenRLHF loads the models itself; before Ray starts, each named one must be had here
    (offline: cached), and the commit an id resolves to is said."""
    from training.hub import ModelNotFoundError
    from training.openrlhf.train import model_commits

    flags = ["--actor.model_name_or_path", REPO_ID, "--critic.model_name_or_path",
             str(tiny_model_dir), "--train.batch_size", "8"]  # fmt: skip
    assert model_commits(flags) == {
        "--actor.model_name_or_path": (REPO_ID, hub),
        "--critic.model_name_or_path": (str(tiny_model_dir), None),
    }
    with pytest.raises(ModelNotFoundError, match="hf download Qwen/Qwen2.5-7B-Instruct"):
        model_commits(["--actor.model_name_or_path", "Qwen/Qwen2.5-7B-Instruct"])
