"""Stand-in for vLLM (GPU only): the names OpenRLHF 0.11.2 imports, and a scripted engine.

OpenRLHF's ``RolloutRayActor`` builds its engine with
``vllm.AsyncLLMEngine.from_engine_args(vllm.AsyncEngineArgs(**kwargs))`` and awaits
``engine.generate(prompt, sampling_params, request_id=...)``. Here that engine is
:class:`ScriptedEngine`: it generates nothing, it answers each request with one of the texts
in ``$GIGPO_STANDIN_VLLM_SCRIPT``, tokenized with the model's own tokenizer, cut at
``max_tokens``: a JSON list, drawn from by a ``random.Random`` seeded with the engine's
``seed``; or a JSON object from prompt substrings to lists, where the first key found in the
request's decoded prompt chooses (``""`` matches all) and its list is answered in turn,
cycling (so a test knows that, say, four episodes of one task get two answers each).
Everything around the engine (OpenRLHF's actor, the executor, the environments) is real.

It keeps the engine states OpenRLHF drives, so that a test sees them used in order: asleep
(``sleep``; ``wake_up`` by tag; generating while the weights or the KV cache sleep is an
error), paused (``pause_generation``: requests wait until ``resume_generation``), the
weights version (each token's log-prob is ``-1 - version``, so a sample tells which weights
generated it) and prefix-cache resets.

Weight syncs: before a sync group is joined (``collective_rpc("init_process_group", ...)``),
one ``update_weight`` call stands for a whole sync and counts one version. After it, and for
``update_weight_cuda_ipc``, the calls are OpenRLHF's own, one per tensor, received and loaded
by :class:`~vllm.weight_sync.WeightSync` (a wrong name, shape or dtype is an error, as in
vLLM); the call that OpenRLHF marks last (``empty_cache``) counts the version.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from vllm.weight_sync import WeightSync

#: OpenRLHF 0.11.2's ``vllm`` extra pins vLLM 0.29.0; its version checks read this.
__version__ = "0.29.0+gigpo.standin"

#: The environment variable holding the engine's script: a JSON list of response texts.
SCRIPT_ENV = "GIGPO_STANDIN_VLLM_SCRIPT"


class SamplingParams:
    """Holds the sampling settings OpenRLHF passes to an engine (attributes only)."""

    def __init__(self, **kwargs: Any) -> None:
        self.__dict__.update(kwargs)

    def __repr__(self) -> str:
        return f"SamplingParams({self.__dict__})"


class AsyncEngineArgs:
    """The engine keyword arguments OpenRLHF passes (``model``, ``seed``, ...), kept."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if args:
            raise TypeError("vllm stand-in: AsyncEngineArgs takes keyword arguments only")
        self.__dict__.update(kwargs)


@dataclass
class Logprob:
    logprob: float


@dataclass
class _OutputProcessor:
    unfinished: int = 0

    def get_num_unfinished_requests(self) -> int:
        return self.unfinished


@dataclass
class ScriptedEngine:
    """Answers every request from the script (see the module docstring); not a model."""

    model: str
    seed: int
    texts: list[str] | dict[str, list[str]]
    output_processor: _OutputProcessor = field(default_factory=_OutputProcessor)
    engine_args: dict = field(default_factory=dict)
    weights_version: int = 0
    prefix_cache_resets: int = 0
    asleep: set = field(default_factory=set)
    generated: int = 0

    def __post_init__(self) -> None:
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(self.model)
        self.rng = random.Random(self.seed)
        self.turns: dict[str, int] = {}
        self.running: asyncio.Event | None = None
        self.sync = WeightSync(self.model, str(self.engine_args.get("dtype", "bfloat16")))

    def _resume_event(self) -> asyncio.Event:
        if self.running is None:  # made in the engine's own event loop
            self.running = asyncio.Event()
            self.running.set()
        return self.running

    async def is_sleeping(self) -> bool:
        return bool(self.asleep)

    async def sleep(self, level: int = 1) -> None:
        """vLLM frees its GPU memory here (there is none): the weights and the KV cache."""
        self.asleep = {"weights", "kv_cache"}

    async def wake_up(self, tags: list[str] | None = None) -> None:
        """vLLM reloads its GPU memory here: the tags given, or all."""
        self.asleep -= set(tags or ("weights", "kv_cache"))

    async def pause_generation(self, mode: str = "keep") -> None:
        """Requests wait (kept, not aborted) until :meth:`resume_generation`."""
        if mode != "keep":
            raise NotImplementedError(f"vllm stand-in: pause mode {mode!r}")
        self._resume_event().clear()

    async def resume_generation(self) -> None:
        self._resume_event().set()

    async def reset_prefix_cache(self) -> None:
        self.prefix_cache_resets += 1

    async def collective_rpc(self, method: str, args: tuple = ()) -> list:
        """The weight sync's worker calls (see the module docstring)."""
        if method == "init_process_group":
            self.sync.init_process_group(*args)
            return [None]
        if method not in ("update_weight", "update_weight_cuda_ipc"):
            raise NotImplementedError(f"vllm stand-in: collective_rpc {method!r}")
        if "weights" in self.asleep:
            raise RuntimeError(f"vllm stand-in: {method} while the weights sleep")
        if method == "update_weight" and self.sync.group is None:
            self.weights_version += 1  # one call for a whole sync
            return [None]
        getattr(self.sync, method)(*args)
        if args[-1]:  # empty_cache: OpenRLHF's last tensor of a sync
            self.weights_version += 1
        return [None]

    def _answer(self, prompt_ids: list[int]) -> str:
        if isinstance(self.texts, list):
            return self.rng.choice(self.texts)
        prompt = self.tokenizer.decode(prompt_ids)
        for key, texts in self.texts.items():
            if key in prompt:
                turn = self.turns.get(key, 0)
                self.turns[key] = turn + 1
                return texts[turn % len(texts)]
        raise ValueError('vllm stand-in: no script key matches the prompt (add a "" key)')

    async def generate(self, prompt: dict, sampling_params: Any, request_id: str):
        await self._resume_event().wait()
        if self.asleep:
            raise RuntimeError(f"vllm stand-in: generate() while {sorted(self.asleep)} sleep")
        self.output_processor.unfinished += 1
        try:
            text = self._answer(list(prompt["prompt_token_ids"]))
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            limit = sampling_params.max_tokens
            finish = "stop"
            if limit is not None and len(ids) >= limit:
                ids, finish = ids[:limit], "length"
            else:
                ids = ids + [self.tokenizer.eos_token_id]
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
            logprobs = None
            if getattr(sampling_params, "logprobs", None) is not None:
                logprobs = [{t: Logprob(-1.0 - self.weights_version)} for t in ids]
            self.generated += 1
            output = SimpleNamespace(
                token_ids=ids, text=text, finish_reason=finish, logprobs=logprobs
            )
            yield SimpleNamespace(
                request_id=request_id,
                prompt_token_ids=list(prompt["prompt_token_ids"]),
                outputs=[output],
                finished=True,
            )
        finally:
            self.output_processor.unfinished -= 1


class AsyncLLMEngine:
    @staticmethod
    def from_engine_args(engine_args: AsyncEngineArgs) -> ScriptedEngine:
        script = os.environ.get(SCRIPT_ENV)
        if not script:
            raise RuntimeError(f"vllm stand-in: set {SCRIPT_ENV} to a JSON list of texts")
        texts = json.loads(script)
        lists = list(texts.values()) if isinstance(texts, dict) else [texts]
        if not lists or not all(
            isinstance(t, list) and t and all(isinstance(x, str) for x in t) for t in lists
        ):
            raise ValueError(
                f"vllm stand-in: {SCRIPT_ENV} must be a non-empty JSON list of texts, or an "
                "object of such lists"
            )
        return ScriptedEngine(
            model=engine_args.model,
            seed=int(engine_args.seed),
            texts=texts,
            engine_args=dict(engine_args.__dict__),
        )
