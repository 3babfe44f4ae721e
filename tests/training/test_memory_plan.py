"""The memory plan: its parts worked by hand for a known shape, what each setting moves, the
dry run (the paper's ALFWorld config planned on this CPU for a GPU), and a run that cannot
fit refused before any weight loads. The plan against measured peaks is
benchmarks/memory_plan.py (docs/benchmarks.md, "Memory")."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from doc_blocks import code_blocks

from training.local.config import ConfigError, load_config
from training.local.memory import GIB, ModelShape, check_fits, plan_memory

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

#: Qwen2.5-1.5B's shape, counted by hand: 28 layers of q, k, v (with biases), o, the MLP's
#: three matrices and two norms, tied 151,936 x 1,536 embeddings and a final norm.
_LAYER = (1536 * 1536 + 1536) + 2 * (1536 * 256 + 256) + 1536 * 1536 + 3 * 1536 * 8960 + 2 * 1536
QWEN15 = ModelShape(
    hidden=1536, intermediate=8960, layers=28, heads=12, kv_heads=2, head_dim=128,
    vocab=151936, parameters=28 * _LAYER + 151936 * 1536 + 1536,
    trainable=28 * _LAYER + 151936 * 1536 + 1536, body=28 * _LAYER + 151936 * 1536 + 1536,
)  # fmt: skip


def _config(*overrides: str, tmp_path: Path):
    return load_config("smoke", [f"--out={tmp_path}/run", *overrides])


def test_the_plan_of_a_known_shape_by_hand(tmp_path):
    config = _config(
        "--model.device=cpu", "--model.compute_dtype=float32", "--env.num_groups=4",
        "--env.group_size=2", "--eval.groups=2", "--rollout.max_new_tokens=100",
        "--rollout.max_prompt_tokens=400", "--algo.minibatch_size=8",
        "--algo.micro_batch_tokens=1000", tmp_path=tmp_path,
    )  # fmt: skip
    plan = plan_memory(config, QWEN15, 400)
    n = QWEN15.parameters
    assert n == 1_543_714_304  # Qwen2.5-1.5B's published count
    assert plan.resident == {"policy": 4 * n, "reference": 4 * n, "critic": 0,
                             "optimizer": 8 * n, "autocast_copies": 0}  # fmt: skip
    # 8 rows x 500 tokens x 28 layers x (k, v) x 2 heads x 128 dims x 4 bytes
    assert plan.generation["kv_cache"] == 8 * 500 * 28 * 2 * 2 * 128 * 4
    assert plan.sizes["micro_batch_rows"] == 2  # 1,000 tokens hold two rows of 500
    assert plan.update["gradients"] == 4 * n
    assert plan.peak == max(plan.generation_peak, plan.update_peak)
    text = "\n".join(plan.lines())
    assert "kv_cache" in text and "GiB" in text


def test_each_setting_moves_the_part_it_should(tmp_path):
    base = ["--model.device=cpu", "--model.compute_dtype=float32",
            "--rollout.max_prompt_tokens=1024", "--rollout.max_new_tokens=256",
            "--algo.minibatch_size=16"]  # fmt: skip
    whole = plan_memory(_config(*base, tmp_path=tmp_path), QWEN15, 1024)
    micro = plan_memory(_config(*base, "--algo.micro_batch_tokens=2560", tmp_path=tmp_path),
                        QWEN15, 1024)  # fmt: skip
    kept = plan_memory(_config(*base, "--model.gradient_checkpointing=true", tmp_path=tmp_path),
                       QWEN15, 1024)  # fmt: skip
    assert micro.update["activations"] * 8 == pytest.approx(whole.update["activations"], rel=0.01)
    assert kept.update["activations"] < whole.update["activations"] / 10
    assert micro.generation == whole.generation  # generation holds every env all the same
    no_ref = plan_memory(_config(*base, "--algo.kl_coef=0", tmp_path=tmp_path), QWEN15, 1024)
    assert no_ref.resident["reference"] == 0 < whole.resident["reference"]
    bf16 = plan_memory(_config(*base, "--model.compute_dtype=bfloat16", tmp_path=tmp_path),
                       QWEN15, 1024)  # fmt: skip
    assert bf16.resident["autocast_copies"] == 2 * QWEN15.trainable
    # float32 keys (the rotary embedding follows the float32 residual), bfloat16 values
    assert bf16.generation["kv_cache"] * 8 == whole.generation["kv_cache"] * 6
    static = plan_memory(_config(*base, "--rollout.cache=static", "--eval.every=0",
                                 tmp_path=tmp_path), QWEN15, 1024)  # fmt: skip
    assert static.resident["static_cache"] == whole.generation["kv_cache"]  # kept all run
    assert static.generation["kv_cache"] == 0 and static.update_peak > whole.update_peak
    # held-out evaluation's rows keep a cache of their own shape
    with_eval = _config(*base, "--rollout.cache=static", "--eval.every=2", "--eval.groups=4",
                        tmp_path=tmp_path)  # fmt: skip
    evaluated = plan_memory(with_eval, QWEN15, 1024)
    assert evaluated.resident["static_cache"] * 8 == static.resident["static_cache"] * 12
    ppo = plan_memory(_config(*base, "--algo.estimator=ppo", tmp_path=tmp_path), QWEN15, 1024)
    assert ppo.resident["critic"] > 0 and ppo.resident["optimizer"] > whole.resident["optimizer"]


def test_a_plan_that_does_not_fit_names_the_settings(tmp_path):
    config = _config("--rollout.max_prompt_tokens=2048", "--rollout.max_new_tokens=512",
                     "--algo.minibatch_size=16", tmp_path=tmp_path)  # fmt: skip
    plan = plan_memory(config, QWEN15, 2048)
    with pytest.raises(ConfigError, match="algo.micro_batch_tokens") as caught:
        check_fits(plan, 80 * GIB)
    assert "gradient_checkpointing" in str(caught.value)
    check_fits(plan, 10_000 * GIB)  # fits
    check_fits(plan, None)  # a device whose free memory is unknown: no check


def _qwen_dir(tmp_path: Path) -> Path:
    """A Qwen2.5-1.5B model directory holding only its config (a plan loads no weight)."""
    from bench_train import QWEN25_15B
    from transformers import Qwen2Config

    directory = tmp_path / "qwen2.5-1.5b"
    Qwen2Config(**QWEN25_15B, eos_token_id=151645, pad_token_id=151643).save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def alfworld_games(tmp_path_factory):
    from gigpo_envs.alfworld.generate import generate_games

    out = tmp_path_factory.mktemp("alfworld")
    generate_games(out, num_games=2, seed=3)
    return out


def test_the_papers_alfworld_config_plans_to_fit_one_80_gb_gpu(
    tmp_path, alfworld_games, capsys, monkeypatch
):
    """training/configs/alfworld_gpu.yaml, dry-run here for a GPU this machine lacks."""
    from training.local.__main__ import main

    monkeypatch.delenv("GIGPO_FREE_MEMORY_GIB", raising=False)
    args = ["--config", "alfworld_gpu", "--dry-run", f"--model.name_or_path={_qwen_dir(tmp_path)}",
            f"--env.kwargs={{data_dir: '{alfworld_games}', split: train, max_steps: 50}}",
            f"--out={tmp_path}/run"]  # fmt: skip
    assert main(args) == 0
    printed = capsys.readouterr().out
    plan = json.loads(next(line for line in printed.splitlines() if line.startswith("{")))
    assert plan["device"] == "cuda"
    assert plan["sizes"] | {"prompt_source": None} == {
        "generation_rows": 128, "prompt_tokens": 2048, "new_tokens": 512,
        "micro_batch_rows": 2, "micro_batch_tokens": 5120, "compute": "bfloat16",
        "weights": "float32", "prompt_source": None,
    }  # fmt: skip
    assert plan["resident"]["reference"] > 0 and plan["resident"]["optimizer"] > 0
    # An 80 GB card (79.1 GiB usable): the plan with its headroom fits
    check_fits_80 = plan["peak"] * 1.1 + GIB
    assert check_fits_80 < 79 * GIB, plan["peak"] / GIB
    assert "unknown here" in printed and not (tmp_path / "run").exists()
    # docs/notes/training.md prints this plan: it is the plan
    (documented,) = code_blocks("docs/notes/training.md", "One GPU at the paper's scale", "text")
    assert documented.splitlines() == printed.splitlines()[: len(documented.splitlines())]
    monkeypatch.setenv("GIGPO_FREE_MEMORY_GIB", "79")
    assert main(args) == 0
    assert "fits: peak" in capsys.readouterr().out


def test_the_documented_dry_run_needs_no_download_no_model_and_no_game_data(
    tmp_path, capsys, monkeypatch
):
    """`gigpo-train --config alfworld_gpu --dry-run` on a fresh install: no network, an empty
    Hugging Face cache, no ALFWorld games. The plan comes from the table of known
    architectures and equals the plan read from the model's own config; what could not be
    checked is said."""
    from training.local.__main__ import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path / "no-games"))
    monkeypatch.setenv("GIGPO_FREE_MEMORY_GIB", "79")
    assert main(["--config", "alfworld_gpu", "--dry-run", f"--out={tmp_path}/run"]) == 0
    printed = capsys.readouterr().out
    assert "model config: the table of known architectures" in printed
    assert "not checked here: the env (" in printed and "ALFWorld" in printed
    assert "not checked here: the first prompt and the later prompts' lengths" in printed
    assert "fits: peak" in printed
    from_table = json.loads(next(x for x in printed.splitlines() if x.startswith("{")))
    # the same run planned from the model's own config.json: the same numbers
    args = ["--config", "alfworld_gpu", "--dry-run", f"--out={tmp_path}/run",
            f"--model.name_or_path={_qwen_dir(tmp_path)}"]  # fmt: skip
    assert main(args) == 0
    printed = capsys.readouterr().out
    from_dir = json.loads(next(x for x in printed.splitlines() if x.startswith("{")))
    assert from_dir.pop("model_config").endswith("qwen2.5-1.5b/config.json")
    assert from_table.pop("model_config").startswith("the table of known architectures")
    assert from_dir == from_table
    assert not (tmp_path / "run").exists() and not (tmp_path / "empty-cache").exists()
    # a hub id that is neither cached nor known: the error names the command to fetch it
    with pytest.raises(SystemExit) as code:
        main(["--config", "alfworld_gpu", "--dry-run", "--model.name_or_path=someone/unknown-7b"])
    err = capsys.readouterr().err
    assert code.value.code == 2 and "hf download someone/unknown-7b config.json" in err


def test_a_run_that_cannot_fit_stops_before_any_weight_loads(tiny_config, monkeypatch, capsys):
    from training.local.__main__ import main

    config = tiny_config("gigpo/Sokoban-v0")
    monkeypatch.setenv("GIGPO_FREE_MEMORY_GIB", "0.5")  # under the 1 GiB reserve
    from training.local import model as model_module

    def refuse(*args, **kwargs):
        raise AssertionError("weights were loaded")

    monkeypatch.setattr(model_module, "load_model", refuse)
    from training.local.train import train

    with pytest.raises(ConfigError, match="does not fit cpu") as caught:
        train(config)
    assert "algo.micro_batch_tokens" in str(caught.value)
    assert not (Path(config.run.out) / "metrics.jsonl").exists()
    # the command line: exit 2 and the message, no traceback
    args = ["--config", "smoke", f"--out={config.run.out}", "--run.progress=false"]
    with pytest.raises(SystemExit) as code:
        main(args)
    assert code.value.code == 2 and "does not fit" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([*args, "--dry-run"])


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ("--rollout.cache=paged", "rollout.cache"),
        ("--rollout.cache=static", "rollout.max_prompt_tokens"),
        ("--rollout.max_prompt_tokens=-1", "rollout.max_prompt_tokens"),
        ("--algo.micro_batch_tokens=-5", "algo.micro_batch_tokens"),
        ("--model.gradient_checkpointing=maybe", "model.gradient_checkpointing"),
    ],
)
def test_the_new_settings_are_checked_at_load(override, match):
    with pytest.raises(ConfigError, match=match):
        load_config("smoke", [override])


def test_bad_free_memory_overrides_are_named(monkeypatch):
    from training.local.memory import free_memory

    for bad in ("lots", "-3", "nan", "inf"):
        monkeypatch.setenv("GIGPO_FREE_MEMORY_GIB", bad)
        with pytest.raises(ConfigError, match="GIGPO_FREE_MEMORY_GIB"):
            free_memory("cpu")
    monkeypatch.setenv("GIGPO_FREE_MEMORY_GIB", "1.5")
    assert free_memory("cuda") == int(1.5 * GIB)
    monkeypatch.delenv("GIGPO_FREE_MEMORY_GIB")
    assert free_memory("cuda:0") is None  # no GPU here
    assert free_memory("cpu") > 0


def test_the_shape_read_from_a_model_directory_is_the_hand_count(tmp_path):
    from transformers import AutoConfig

    from training.local.shapes import known_config, model_shape

    directory = _qwen_dir(tmp_path)
    hf = AutoConfig.from_pretrained(directory)
    config = _config(f"--model.name_or_path={directory}", tmp_path=tmp_path)
    assert model_shape(config, hf) == QWEN15
    two = load_config("smoke", [f"--model.name_or_path={directory}", f"--out={tmp_path}/r",
                                "--model.trainable_layers=2"])  # fmt: skip
    assert model_shape(two, hf).trainable == 2 * _LAYER + 1536  # and the final norm
    # the table a dry run falls back on holds the same architecture
    assert model_shape(config, known_config("Qwen/Qwen2.5-1.5B-Instruct")) == QWEN15


@pytest.mark.parametrize("name", ["searchqa_3b_lora", "searchqa_7b_lora", "webshop_gpu"])
def test_the_papers_larger_runs_plan_to_fit_one_80_gb_gpu(name, tmp_path, capsys, monkeypatch):
    """The search runs (3B, 7B, LoRA) and WebShop (1.5B) fit an 80 GB card (79 GiB usable),
    planned with nothing downloaded; docs/notes/training.md prints each plan."""
    from training.local.__main__ import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("GIGPO_FREE_MEMORY_GIB", "79")
    assert main(["--config", name, "--dry-run", f"--out={tmp_path}/run"]) == 0
    printed = capsys.readouterr().out
    assert "fits: peak" in printed
    plan = printed.splitlines()[:6]
    documented = code_blocks("docs/notes/training.md", "The paper's larger runs", "text")
    assert plan in [block.splitlines() for block in documented]
    if "lora" in name:
        assert "LoRA rank 64" in plan[1] and "reference" not in plan[2]


def test_a_7b_model_trained_in_full_is_refused_naming_lora_and_checkpointing(
    tmp_path, capsys, monkeypatch
):
    from training.local.__main__ import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("GIGPO_FREE_MEMORY_GIB", "79")
    with pytest.raises(SystemExit) as code:
        main(["--config", "searchqa_7b_lora", "--dry-run", "--model.lora_rank=0"])
    err = capsys.readouterr().err
    assert code.value.code == 2 and "resident part alone" in err
    assert "model.lora_rank" in err and "model.gradient_checkpointing" in err


def test_the_plan_counts_the_adapters_peft_makes(tiny_model_dir, tmp_path):
    """LoRA's trainable weights: PEFT's own count on a real model, and Qwen2.5-7B's by hand
    (rank 64 on q, k, v, o and the MLP's three matrices of 28 layers)."""
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    from training.local.lora import adapter_parameters, lora_config
    from training.local.shapes import known_config, model_shape

    for targets in ("[all-linear]", "[q_proj, v_proj]", "down_proj"):
        config = load_config("smoke", [f"--out={tmp_path}/r", "--model.lora_rank=8",
                                       f"--model.lora_target_modules={targets}"])  # fmt: skip
        model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
        counted = adapter_parameters(model, config.model)
        peft = get_peft_model(model, lora_config(config.model))
        assert counted == sum(p.numel() for p in peft.parameters() if p.requires_grad) > 0
    seven = load_config("smoke", [f"--out={tmp_path}/r", "--model.lora_rank=64"])
    h, kv, i = 3584, 512, 18944
    layer = 64 * (2 * (h + h) + 2 * (h + kv) + 3 * (h + i))
    assert model_shape(seven, known_config("Qwen/Qwen2.5-7B-Instruct")).trainable == 28 * layer


def test_the_vllm_engine_is_counted_instead_of_the_hf_generation(tmp_path):
    """Under ``rollout.engine: vllm`` the plan holds the engine's weights (compute dtype) and,
    on a CPU, its key/value cache (``rollout.engine_cache_gib``), and no hf cache (set on a
    config built here: the default env has no vLLM to load one with)."""
    base = ["--model.device=cpu", "--model.compute_dtype=bfloat16",
            "--rollout.max_prompt_tokens=1024", "--rollout.max_new_tokens=256"]  # fmt: skip
    hf = plan_memory(_config(*base, tmp_path=tmp_path), QWEN15, 1024)
    config = _config(*base, "--rollout.engine_cache_gib=3", tmp_path=tmp_path)
    config.rollout.engine = "vllm"
    vllm = plan_memory(config, QWEN15, 1024)
    assert vllm.resident["engine"] == QWEN15.parameters * 2 + 3 * GIB
    assert "engine" not in hf.resident and hf.generation["kv_cache"] > 0
    assert vllm.generation["kv_cache"] == 0
    assert vllm.update == hf.update


def test_on_a_gpu_the_vllm_engine_takes_its_share_while_it_generates_and_sleeps_after(tmp_path):
    """On a GPU the engine holds ``rollout.gpu_memory_utilization`` of the device while it
    generates (vLLM's weights, activations and cache) and nothing through the update (asleep:
    weights in host memory, cache freed); with the device's size unknown, its weights."""
    base = [f"--out={tmp_path}/run", "--model.device=cuda", "--model.compute_dtype=bfloat16",
            "--rollout.max_prompt_tokens=2048", "--rollout.max_new_tokens=512",
            "--algo.micro_batch_tokens=2560", "--model.gradient_checkpointing=true"]  # fmt: skip
    hf = plan_memory(load_config("smoke", base, check_device=False), QWEN15, 2048)
    config = load_config("smoke", [*base, "--rollout.gpu_memory_utilization=0.4"],
                         check_device=False)  # fmt: skip
    config.rollout.engine = "vllm"
    vllm = plan_memory(config, QWEN15, 2048, device_memory=80 * GIB)
    assert vllm.generation["engine"] == 32 * GIB and vllm.generation["kv_cache"] == 0
    assert "engine" not in vllm.resident and vllm.update == hf.update
    assert vllm.update_peak == hf.update_peak
    assert (
        vllm.generation_peak
        == sum(vllm.resident.values()) + 32 * GIB + vllm.generation["transient"]
    )
    unknown = plan_memory(config, QWEN15, 2048)
    assert unknown.generation["engine"] == QWEN15.parameters * 2
    assert unknown.sizes["engine"] == "weights" and "80.00 GiB" in vllm.sizes["engine"]
    # A share that leaves the trainer too little is refused at load (exit 2), naming it.
    config.rollout.gpu_memory_utilization = 0.9
    with pytest.raises(ConfigError, match=r"the vllm engine's\).*rollout.gpu_memory_util"):
        check_fits(plan_memory(config, QWEN15, 2048, device_memory=80 * GIB), 80 * GIB)


def test_a_dry_run_for_a_gpu_elsewhere_plans_the_engines_share_of_it(tmp_path, monkeypatch):
    from training.local.memory import run_plan

    monkeypatch.setenv("GIGPO_FREE_MEMORY_GIB", "79")
    args = [f"--out={tmp_path}/run", "--model.device=cuda", "--rollout.max_prompt_tokens=512",
            "--rollout.gpu_memory_utilization=0.5"]  # fmt: skip
    config = load_config("smoke", args, check_device=False)
    config.rollout.engine = "vllm"
    plan = run_plan(config, None)
    assert plan.generation["engine"] == int(0.5 * 79 * GIB)
