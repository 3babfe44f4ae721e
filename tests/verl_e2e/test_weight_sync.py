"""verl's weight sync into vLLM's CPU build, piece by piece and without Ray: vLLM started on
dummy weights with verl's worker extension (as verl starts its rollout server), the trained
weights sent by verl's ``BucketedWeightSender`` through shared memory and received by the
extension's ``update_weights_from_ipc`` (with the CPU platform's patches,
``training/verl/vllm_cpu.py``); then vLLM's log-probs of what it samples are the trained
model's (transformers, float32), not the dummy's nor the untrained model's.

Two tiny models with tied embeddings: a Qwen2 (vLLM reuses the embedding module as its LM
head) and a Llama (vLLM's LM head is a module of its own sharing the weight, which a reload
does not process again: ``repack_embeddings``). Each runs in a child process (this file as a
script): vLLM's engine starts processes of its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

#: How far vLLM's log-probs may be from transformers', per token (mean; both float32).
GAP = 1e-3
CHILD_TIMEOUT_S = 600


def tiny_llama(source: Path, target: Path) -> Path:
    """A random 2-layer Llama with tied embeddings and heads of 32 dims, with the tokenizer
    of the tiny Qwen2 at ``source``."""
    import shutil

    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(source)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=1024,
        tie_word_embeddings=True, bos_token_id=None, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    torch.manual_seed(1)
    LlamaForCausalLM(config).save_pretrained(target)
    for name in source.iterdir():
        if name.name.startswith("tokenizer") or name.name in ("special_tokens_map.json",
                                                              "chat_template.jinja"):  # fmt: skip
            shutil.copy(name, target / name.name)
    return target


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    from training.tiny_model import build_tiny_model

    root = tmp_path_factory.mktemp("models")
    qwen2 = build_tiny_model(root / "qwen2", hidden_size=64, head_dim=32)
    return {"qwen2": qwen2, "llama": tiny_llama(qwen2, root / "llama")}


@pytest.mark.parametrize("name", ["qwen2", "llama"])
def test_vllm_samples_from_the_weights_verl_sends(models, tmp_path, name):
    env = {**os.environ, "VERL_PLATFORM": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1",
           "VERL_RAY_JOB_ID": uuid.uuid4().hex[:12], "VERL_REPLICA_RANK": "0"}  # fmt: skip
    done = subprocess.run(
        [sys.executable, __file__, str(models[name]), str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-5000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["tokens"] >= 16
    assert report["gap_trained"] < GAP, report
    assert report["gap_untrained"] > 100 * GAP, report  # the update shows


# -- the child process --------------------------------------------------------------------


def trained_weights(model_dir: str) -> dict:
    """The model's weights moved far from where they start, float32, by verl's names (the
    state dict's, a tied head's key too): seeded noise of half each tensor's spread, and
    embeddings 8 times larger, so that the logits are peaked and differ from the untrained
    model's (a random tiny model's are near uniform). Tied tensors stay tied."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    gen = torch.Generator().manual_seed(7)
    moved = {}
    for name, value in model.named_parameters():  # each tied tensor once
        noise = torch.randn(value.shape, generator=gen) * (0.5 * float(value.std()) + 1e-3)
        scale = 8.0 if "embed" in name else 1.0
        moved[value.data_ptr()] = ((value.detach() + noise) * scale).contiguous()
    return {key: moved.get(value.data_ptr(), value).clone()
            for key, value in model.state_dict().items()}  # fmt: skip


def token_log_probs(model_dir: str, state: dict | None, prompt: list[int], tokens: list[int]):
    """float32 log-probs of ``tokens`` after ``prompt`` under the model (``state`` loaded)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if state is not None:
        model.load_state_dict(state)
    ids = torch.tensor([prompt + tokens])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(tokens)[:, None])[:, 0]


def main(model_dir: str, folder: str) -> None:
    import asyncio
    import threading

    import torch
    import verl  # noqa: F401  (the plugin, with the CPU platform's patches)
    from transformers import AutoTokenizer
    from verl.workers.rollout.vllm_rollout.bucketed_weight_transfer import BucketedWeightSender
    from vllm import LLM, SamplingParams

    llm = LLM(
        model=model_dir, load_format="dummy", dtype="float32", enforce_eager=True,
        max_model_len=512, seed=0,
        worker_extension_cls="verl.workers.rollout.vllm_rollout.utils.vLLMColocateWorkerExtension",
    )  # fmt: skip
    state = trained_weights(model_dir)
    handle = f"ipc:///tmp/rl-colocate-zmq-{os.environ['VERL_RAY_JOB_ID']}-replica-0-rank-0.sock"
    sender = BucketedWeightSender(zmq_handle=handle, bucket_size_mb=64, use_shm=True)
    failure: list[BaseException] = []

    def send() -> None:
        try:
            asyncio.run(sender.async_send_weights(iter(state.items())))
        except BaseException as exc:  # reported by the main thread
            failure.append(exc)

    thread = threading.Thread(target=send)
    thread.start()
    llm.collective_rpc("update_weights_from_ipc", kwargs={"use_shm": True})
    thread.join(timeout=120)
    assert not failure and not thread.is_alive(), failure
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    texts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
        )
        for text in ("Target: 5\nCurrent: 2", "Move left or right.")
    ]
    prompts = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]
    params = SamplingParams(temperature=1.0, max_tokens=12, logprobs=0, seed=3, ignore_eos=True)
    outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], params)
    gaps = {"trained": [], "untrained": []}
    for prompt, output in zip(prompts, outputs, strict=True):
        sample = output.outputs[0]
        tokens = list(sample.token_ids)
        served = torch.tensor([sample.logprobs[i][t].logprob for i, t in enumerate(tokens)])
        for key, weights in (("trained", state), ("untrained", None)):
            reference = token_log_probs(model_dir, weights, list(prompt), tokens)
            gaps[key].append((served - reference).abs())
    report = {f"gap_{k}": float(torch.cat(v).mean()) for k, v in gaps.items()}
    report["tokens"] = sum(len(g) for g in gaps["trained"])
    (Path(folder) / "report.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main(*sys.argv[1:])
