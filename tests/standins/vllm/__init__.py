"""Stand-in for vLLM (GPU only): the names OpenRLHF 0.11.2 imports, and a scripted engine.

OpenRLHF's ``RolloutRayActor`` builds its engine with
``vllm.AsyncLLMEngine.from_engine_args(vllm.AsyncEngineArgs(**kwargs))`` and awaits
``engine.generate(prompt, sampling_params, request_id=...)``. Here that engine is
:class:`ScriptedEngine`: it generates nothing, it answers each request with one of the texts
in ``$GIGPO_STANDIN_VLLM_SCRIPT`` (a JSON list), drawn by a ``random.Random`` seeded with the
engine's ``seed``, tokenized with the model's own tokenizer, cut at ``max_tokens``. Everything
around the engine (OpenRLHF's actor, the executor, the environments) is real.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

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
    texts: list[str]
    output_processor: _OutputProcessor = field(default_factory=_OutputProcessor)

    def __post_init__(self) -> None:
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(self.model)
        self.rng = random.Random(self.seed)

    async def is_sleeping(self) -> bool:
        return False

    async def sleep(self, level: int = 1) -> None:
        """vLLM frees its GPU memory here; there is none."""

    async def wake_up(self, tags: list[str] | None = None) -> None:
        """vLLM reloads its GPU memory here; there is none."""

    async def generate(self, prompt: dict, sampling_params: Any, request_id: str):
        self.output_processor.unfinished += 1
        try:
            text = self.rng.choice(self.texts)
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
                logprobs = [{t: Logprob(-1.0)} for t in ids]
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
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            raise ValueError(f"vllm stand-in: {SCRIPT_ENV} must be a non-empty JSON list of texts")
        return ScriptedEngine(model=engine_args.model, seed=int(engine_args.seed), texts=texts)
