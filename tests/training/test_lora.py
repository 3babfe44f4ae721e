"""LoRA in the local trainer (PEFT): only the adapters train, the reference is the base with
them off, checkpoints hold them in PEFT's format and resume bit-exact, evaluation, the viewer
and ``gigpo-export`` open the run, and the merged model gives the adapter model's logits."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import torch

from training.local.__main__ import main as train_main
from training.local.config import ConfigError, load_config
from training.local.metrics import read_metrics
from training.local.train import train

#: bfloat16 compute on every CPU (autocast), as on a GPU: the base is held in bfloat16.
LORA = ["--model.lora_rank=4", "--model.lora_alpha=8", "--optim.lr=1e-2",
        "--model.compute_dtype=bfloat16"]  # fmt: skip
SOKOBAN = [
    "--env.id=gigpo/Sokoban-v0",
    "--env.kwargs={dim_room: [6, 6], num_boxes: 1, max_steps: 3}",
]


def _config(tiny_model_dir, out, *more):
    args = [f"--model.name_or_path={tiny_model_dir}", f"--out={out}", "--run.progress=false",
            "--run.threads=1", "--eval.every=0", "--run.save_rollouts_every=1"]  # fmt: skip
    return load_config("smoke", [*args, *SOKOBAN, *LORA, *more])


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory, tiny_model_dir):
    out = tmp_path_factory.mktemp("lora") / "run"
    rows = train(_config(tiny_model_dir, out))
    return out, rows


def _base_logits(model_dir, ids):
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    return base(input_ids=ids).logits


IDS = torch.tensor([[5, 17, 42, 99, 7, 3, 250, 11]])


def test_only_the_adapters_train_and_are_saved_in_peft_format(lora_run, tiny_model_dir):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    out, rows = lora_run
    adapter = out / "checkpoint" / "adapter"
    assert sorted(p.name for p in adapter.iterdir()) == [
        "README.md", "adapter_config.json", "adapter_model.safetensors",
    ]  # fmt: skip
    assert not (out / "checkpoint" / "model.safetensors").exists()
    saved = json.loads((adapter / "adapter_config.json").read_text())
    assert saved["r"] == 4 and saved["lora_alpha"] == 8 and saved["peft_type"] == "LORA"
    assert saved["base_model_name_or_path"] == str(tiny_model_dir)  # the name the run used
    # PEFT itself loads it on the base; the adapters moved the outputs, the base is untouched
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    with_adapter = PeftModel.from_pretrained(base, adapter)
    with torch.no_grad():
        tuned = with_adapter(input_ids=IDS).logits
        with with_adapter.disable_adapter():
            off = with_adapter(input_ids=IDS).logits
    assert torch.equal(off, _base_logits(tiny_model_dir, IDS))
    assert (tuned - off).abs().max() > 1e-4
    assert all(r["grad_norm"] > 0 for r in rows)


def test_the_merged_model_gives_the_adapter_models_logits(lora_run, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from training.cli.export import main
    from training.local.trained import load_trained

    out, _ = lora_run
    config = load_config(out / "config.json")
    trained = load_trained(str(out), config, tmp_path)
    assert trained.lora and trained.checkpoint == out / "checkpoint"
    base = AutoModelForCausalLM.from_pretrained(trained.source.path, dtype=torch.float32)
    with_adapter = PeftModel.from_pretrained(base, out / "checkpoint" / "adapter")
    with torch.no_grad():
        expected = with_adapter(input_ids=IDS).logits
        merged = trained.policy(input_ids=IDS).logits
    torch.testing.assert_close(merged, expected, atol=1e-5, rtol=1e-5)
    # gigpo-export writes the merged model as a plain transformers directory
    target = tmp_path / "exported"
    assert main([str(out), str(target), "--dtype", "float32"]) == 0
    exported = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32)
    with torch.no_grad():
        torch.testing.assert_close(exported(input_ids=IDS).logits, expected, atol=1e-5, rtol=1e-5)
    names = {n for n, _ in exported.named_parameters()}
    plain = AutoModelForCausalLM.from_pretrained(trained.source.path, dtype=torch.float32)
    assert names == {n for n, _ in plain.named_parameters()}  # the base model's names only
    record = json.loads((target / "gigpo_export.json").read_text())
    # the last iteration trained, numbered from 0 as in metrics.jsonl (2 iterations: 0, 1)
    assert record["lora_merged"] and record["checkpoint_iteration"] == 1
    assert main([str(out), str(target)]) == 2  # never over an existing folder
    assert main([str(tmp_path / "nothing"), str(tmp_path / "x")]) == 2


def test_the_reference_is_the_base_with_the_adapters_off(tiny_model_dir, tmp_path):
    from training.local.batch import make_batch, token_log_probs
    from training.local.lora import BaseReference
    from training.local.model import load_model, load_models
    from training.local.policy import reference_log_probs
    from training.local.precision import compute, prepare_models
    from training.records import StepRecords

    config = _config(tiny_model_dir, tmp_path / "run")
    models = load_models(config, tmp_path / "run")
    assert isinstance(models.reference, BaseReference) and models.separate_reference() is None
    trainable = [n for n, p in models.policy.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    with torch.no_grad():  # move the adapters off zero so that they change the outputs
        for name, p in models.policy.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    records = StepRecords()
    records.append(reward=1.0, anchor="s", anchor_text="s", group_id=0, traj_id="a",
                   is_action_valid=True, prompt_ids=[5, 17, 42, 9], response_ids=[99, 7, 3],
                   old_log_probs=[0.0, 0.0, 0.0])  # fmt: skip
    batch = make_batch(records, np.array([0]), np.array([0.5]), 0, models.policy.device)
    dtypes = {n: p.dtype for n, p in models.policy.named_parameters()}
    assert dtypes["model.layers.0.self_attn.q_proj.base_layer.weight"] == torch.bfloat16
    assert dtypes["model.layers.0.self_attn.q_proj.lora_A.default.weight"] == torch.float32
    assert models.policy.get_output_embeddings().weight.dtype == torch.float32  # float32 logits
    base = load_model(tiny_model_dir, "bfloat16", trainable=False)
    base.get_output_embeddings().to(torch.float32)
    prepare_models("bfloat16", "cpu", models.policy, base)  # as the trainer runs them
    models.policy.train()  # the reference pass runs in eval mode all the same
    with compute("bfloat16", "cpu"), torch.no_grad():
        expected = token_log_probs(base, batch)
        reference = reference_log_probs(models.reference, batch, 1.0)
        assert models.policy.training  # its mode is back
        assert torch.equal(reference, expected)
        tuned = token_log_probs(models.policy, batch)
    assert not torch.allclose(tuned, expected, atol=1e-4)


def test_resume_is_bit_exact(tiny_model_dir, tmp_path):
    from training.local.checkpoint_files import read_tensors

    ckpt = "--model.gradient_checkpointing=true"  # with PEFT's adapters: the shipped setting
    straight = train(_config(tiny_model_dir, tmp_path / "straight", ckpt))
    train(_config(tiny_model_dir, tmp_path / "resumed", "--run.iterations=1", ckpt))
    resumed = train(_config(tiny_model_dir, tmp_path / "resumed", ckpt))
    assert [r["iteration"] for r in resumed] == [1]
    for key in straight[1].keys() - {k for k in straight[1] if k.startswith("time_")}:
        assert resumed[0][key] == straight[1][key], key
    a, b = (read_tensors(tmp_path / run / "checkpoint" / "adapter" / "adapter_model.safetensors")
            for run in ("straight", "resumed"))  # fmt: skip
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    # a LoRA checkpoint does not resume as a full run (the config check names the key)
    from training.local.resume import ResumeConfigError

    full = load_config("smoke", [f"--model.name_or_path={tiny_model_dir}",
                                 f"--out={tmp_path / 'resumed'}", *SOKOBAN])  # fmt: skip
    with pytest.raises(ResumeConfigError, match="model.lora_rank"):
        train(full)


def test_evaluation_and_the_viewer_open_a_lora_run(lora_run, tmp_path):
    from training.cli.evaluate import main as evaluate
    from training.cli.view import main as view

    out, _ = lora_run
    assert evaluate(["--model", str(out), "--out", str(tmp_path / "eval"), "--episodes", "2"]) == 0
    summary = json.loads((tmp_path / "eval" / "summary.json").read_text())
    assert summary["episodes"] == 2
    assert summary["checkpoint_iteration"] == read_metrics(out)[-1]["iteration"] == 1
    assert view([str(out), "-o", str(tmp_path / "page.html")]) == 0
    assert "LoRA rank 4" in (tmp_path / "page.html").read_text()


def test_lora_settings_are_checked_at_load(tiny_model_dir, tmp_path):
    for bad, key in (("--model.lora_rank=-1", "model.lora_rank"),
                     ("--model.lora_alpha=0", "model.lora_alpha"),
                     ("--model.lora_alpha=1e308", r"model.lora_alpha must be in \(0, 8192\]"),
                     ("--model.lora_alpha=8193", "model.lora_alpha"),
                     ("--model.lora_dropout=1", "model.lora_dropout"),
                     ("--model.lora_target_modules=[all-linear, q_proj]", "stands alone"),
                     ("--model.lora_target_modules=[]", "model.lora_target_modules"),
                     ("--model.trainable_layers=1", "model.trainable_layers"),
                     ("--algo.estimator=ppo", "algo.estimator=ppo")):  # fmt: skip
        with pytest.raises(ConfigError, match=key):
            _config(tiny_model_dir, tmp_path / "r", bad)
    one = _config(tiny_model_dir, tmp_path / "r", "--model.lora_target_modules=q_proj")
    assert one.model.lora_target_modules == ["q_proj"]


def test_settings_a_lora_run_cannot_use_are_refused_before_any_file_is_written(
    tmp_path, capsys, monkeypatch
):
    """gigpo-train, its dry run and the run: a target module the model lacks names the key
    and the model's linear layers (it used to plan 0 trainable weights, then fail after
    writing config.json); an alpha that overflows the first generation names its key."""
    monkeypatch.setenv("GIGPO_FREE_MEMORY_GIB", "64")
    out = tmp_path / "run"
    base = ["--config", "smoke", f"--out={out}", "--model.tiny_warmup_steps=0",
            "--model.lora_rank=4", "--run.progress=false"]  # fmt: skip
    for bad, words in (
        ("--model.lora_target_modules=[nonexistent]",
         ["model.lora_target_modules", "nonexistent", "q_proj", "down_proj"]),
        ("--model.lora_target_modules=[q_proj, v_prj]", ["model.lora_target_modules", "v_prj"]),
        ("--model.lora_alpha=1e308", ["model.lora_alpha must be in (0, 8192]"]),
    ):  # fmt: skip
        for dry in (["--dry-run"], []):
            with pytest.raises(SystemExit) as exit_info:
                train_main([*base, bad, *dry])
            err = capsys.readouterr().err  # the dry run's tiny model built, then the refusal
            errors = [line for line in err.splitlines() if "error:" in line]
            assert exit_info.value.code == 2 and "Traceback" not in err, err
            assert len(errors) == 1 and all(w in errors[0] for w in words), err
            assert not out.exists()  # nothing written: no folder, no config.json
    assert train_main([*base, "--model.lora_target_modules=[q_proj, v_proj]", "--dry-run"]) == 0


def test_the_documented_lora_line_passes_its_dry_run(capsys, monkeypatch):
    """docs/training.md's LoRA line (the quick start with rank-16 adapters), run from the
    repository's root as written there, is a run that starts: its dry run plans it."""
    import shlex

    from doc_blocks import REPO, code_blocks

    blocks = code_blocks("docs/training.md", None, "bash")
    lines = [line for b in blocks for line in b.replace("\\\n", " ").splitlines()]
    (line,) = [line for line in lines if "--model.lora_rank" in line]
    argv = shlex.split(line, comments=True)
    assert argv[:3] == ["python", "-m", "training.local"], argv
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("GIGPO_FREE_MEMORY_GIB", "64")
    assert train_main([*argv[3:], "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert "LoRA rank 16" in printed and "fits" in printed


def test_targets_that_match_nothing_name_the_key(tiny_model_dir, tmp_path):
    from training.local.model import load_models

    config = _config(tiny_model_dir, tmp_path / "r", "--model.lora_target_modules=[nothing]")
    with pytest.raises(ValueError, match="model.lora_target_modules"):
        load_models(config, tmp_path / "r")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
