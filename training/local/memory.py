"""The memory plan of a run: its peak memory, from the model's config and the run's sizes,
before any weight loads (``gigpo-train --dry-run`` prints it; a run whose plan does not fit
the device's free memory is refused before its first iteration).

Resident all run: the policy's weights, the reference's (``algo.kl_coef`` > 0), PPO's
critic, AdamW's two moments of every trainable weight, and under bfloat16 autocast over
float32 weights autocast's bfloat16 copy of each trainable weight. On top, the larger of:

- **generation** (every env at once, prompts of up to ``rollout.max_prompt_tokens``,
  ``rollout.max_new_tokens`` new): the key/value cache of the longest sequences, and the
  larger of the prompt pass's transients (one decoder layer at a time) and a decoding step's;
- **an update micro-batch** (``algo.micro_batch_tokens`` padded tokens, or the whole
  minibatch): the gradients (an earlier micro-batch of the step made them), the activations
  the backward pass reads (every layer's, or with ``model.gradient_checkpointing`` each
  layer's input), and the larger of the response logits and the backward pass's transients.

Activations are counted per token and layer from the tensors a Llama / Qwen2 layer keeps for
its backward pass; attention as a fused kernel (no scores kept) where the device runs one.
``benchmarks/memory_plan.py`` checks the plan against measured peaks (docs/benchmarks.md).
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from training.local.schema import ConfigError, TrainConfig
from training.local.shapes import ModelShape, model_shape

GIB = 2**30
#: The share of the plan added before comparing it with the free memory: the caching
#: allocator's fragmentation and what the plan does not count (Python, tokenizers, envs).
HEADROOM = 0.10
#: Bytes always left free besides (CUDA's workspaces; on a CPU, the process itself).
RESERVE = GIB
_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass
class MemoryPlan:
    """A run's planned peak memory, in bytes, by part (see the module doc)."""

    device: str
    sizes: dict[str, Any]
    resident: dict[str, int] = field(default_factory=dict)
    generation: dict[str, int] = field(default_factory=dict)
    update: dict[str, int] = field(default_factory=dict)
    lora: bool = False
    """The run trains LoRA adapters (``model.lora_rank``), not the model's weights."""
    model_config: str = ""
    """Where the model's sizes came from (a ``config.json``, or the table of known
    architectures)."""

    @property
    def generation_peak(self) -> int:
        return sum(self.resident.values()) + sum(self.generation.values())

    @property
    def update_peak(self) -> int:
        return sum(self.resident.values()) + sum(self.update.values())

    @property
    def peak(self) -> int:
        return max(self.generation_peak, self.update_peak)

    def to_dict(self) -> dict[str, Any]:
        """The plan as JSON-able data (bytes), with the two peaks and the overall one."""
        peaks = {"generation_peak": self.generation_peak, "update_peak": self.update_peak}
        return dataclasses.asdict(self) | peaks | {"peak": self.peak}

    def lines(self) -> list[str]:
        """The plan as a table a person reads."""
        out = [f"memory plan on {self.device}:"]
        out.append("  sizes: " + ", ".join(f"{k} {v}" for k, v in self.sizes.items()))
        for title, part, peak in (
            ("resident", self.resident, None),
            ("generation", self.generation, self.generation_peak),
            ("update micro-batch", self.update, self.update_peak),
        ):
            items = ", ".join(f"{k} {_size(v)}" for k, v in part.items() if v)
            total = f" -> peak {_size(peak)}" if peak is not None else ""
            out.append(f"  {title}: {items or '-'}{total}")
        out.append(f"  peak: {_size(self.peak)}")
        return out


def _size(count: int) -> str:
    """Bytes in GiB (MiB under one GiB)."""
    return f"{count / GIB:.2f} GiB" if count >= GIB else f"{count / 2**20:.1f} MiB"


def plan_memory(
    config: TrainConfig, shape: ModelShape, prompt_tokens: int, device_memory: int | None = None
) -> MemoryPlan:
    """The :class:`MemoryPlan` of ``config`` for a model of ``shape``, prompts of up to
    ``prompt_tokens`` tokens (``rollout.max_prompt_tokens`` where set).

    ``rollout.engine: vllm`` replaces the hf engine's cache. On a GPU it takes
    ``rollout.gpu_memory_utilization`` of ``device_memory`` (total bytes; None: its weights
    only, ``sizes["engine"]`` says which) while it generates, and sleeps through the update;
    on a CPU its weights and ``rollout.engine_cache_gib`` are resident.
    """
    m, a = config.model, config.algo
    device = m.device
    compute = _compute_dtype(config)
    w = _BYTES[m.dtype]
    c = 2 if compute == "bfloat16" else 4
    lora = m.lora_rank > 0
    # Under LoRA the base is held in the compute dtype (its reference: the base, adapters
    # off) and only the adapters (model.dtype) train; activations are counted as for
    # autocast over float32 weights, an upper bound for a bfloat16 base's.
    autocast = c == 2 and (w == 4 or lora)
    ppo = a.estimator == "ppo"
    new = config.rollout.max_new_tokens
    envs = config.env.num_groups * config.env.group_size
    evaluation = config.eval.groups if config.eval.every else 0  # its own batch of rows
    rows = max(envs, evaluation)
    length = prompt_tokens + new
    micro = a.minibatch_size
    if a.micro_batch_tokens:
        micro = max(1, min(micro, a.micro_batch_tokens // length))
    sizes = {
        "generation_rows": rows,
        "prompt_tokens": prompt_tokens,
        "new_tokens": new,
        "micro_batch_rows": micro,
        "micro_batch_tokens": micro * length,
        "compute": compute,
        "weights": f"{compute} base, {m.dtype} LoRA rank {m.lora_rank}" if lora else m.dtype,
    }
    plan = MemoryPlan(device, sizes, lora=lora)
    s = shape
    trainable = s.trainable + (s.body + s.hidden + 1 if ppo else 0)
    plan.resident = {
        # under LoRA: the base in the compute dtype, its output head float32, the adapters
        "policy": (
            s.parameters * c + s.vocab * s.hidden * (4 - c) + s.trainable * w
            if lora
            else s.parameters * w
        ),
        "reference": s.parameters * w if a.kl_coef > 0 and not lora else 0,
        "critic": (s.body + s.hidden + 1) * w if ppo else 0,
        "optimizer": 2 * trainable * w,
        "autocast_copies": s.trainable * 2 if autocast else 0,
    }
    # Bytes a token of cache: under autocast over float32 weights the keys are float32 (the
    # rotary embedding follows the float32 residual stream), the values bfloat16. Under LoRA
    # the stream is float32 where the float32 head is tied to the embeddings.
    float_stream = autocast and (not lora or s.body == s.parameters)
    kv = s.layers * s.kv_heads * s.head_dim * ((4 if float_stream else c) + c)
    prompt_pass = _prefill(s, rows, prompt_tokens, c) + _scores(
        s, rows, prompt_tokens, device, compute
    )
    if config.rollout.cache == "static":  # allocated whole once a shape, kept the whole run
        plan.resident["static_cache"] = (envs + evaluation) * length * kv
        plan.generation = {"kv_cache": 0, "transient": max(prompt_pass, _decode_step(s, rows))}
    else:  # the prompt pass (the cache holds the prompts only) or a decoding step (all of it)
        transient = max(prompt_pass - rows * new * kv, _decode_step(s, rows))
        plan.generation = {"kv_cache": rows * length * kv, "transient": transient}
    if config.rollout.engine == "vllm":  # replaces the hf engine's cache
        util, known = config.rollout.gpu_memory_utilization, device_memory is not None
        if device == "cpu":  # its weights (compute dtype) and cache, all run
            plan.resident["engine"] = s.parameters * c + config.rollout.engine_cache_gib * GIB
        else:  # its share while it generates (else its weights); asleep in the update
            share = math.ceil(util * device_memory) if known else s.parameters * c
            plan.generation["engine"] = share
            plan.sizes["engine"] = f"{util} of {_size(device_memory)}" if known else "weights"
        plan.generation.update(kv_cache=0, transient=_decode_step(s, rows))
    tokens = micro * length
    per_layer = _layer_activations(s, c, autocast)
    scores = s.layers * _scores(s, micro, length, device, compute)
    logits = _logits(s, micro * new)
    backward = tokens * _backward(s, c)
    if m.gradient_checkpointing:  # each layer's input; one layer's recomputed in turn
        kept = s.layers * tokens * s.hidden * 4 + _mask(micro, length)
        transient = max(logits, tokens * per_layer + scores // s.layers + backward)
    else:
        kept = s.layers * tokens * per_layer + scores + _mask(micro, length)
        transient = max(logits, backward)
    # The gradients of a minibatch's earlier micro-batches are there all along.
    plan.update = {"gradients": trainable * w, "activations": kept, "transient": transient}
    return plan


def run_plan(config: TrainConfig, model_dir: Path | None) -> MemoryPlan:
    """The plan of a run: the model's shape from ``model_dir``'s config (None: from the
    config alone, :func:`~training.local.shapes.plan_config`: nothing is downloaded but the
    config), prompts of ``rollout.max_prompt_tokens``, or where that is 0 of the first
    prompt's length (counted with the model's tokenizer; uncapped prompts with a history
    grow past it). ``sizes["prompt_source"]`` and ``model_config`` say where the numbers
    came from.

    Raises:
        ConfigError: an uncapped prompt without a model directory to count it with, or a
            model whose config cannot be had here.
    """
    from training.local.shapes import plan_config

    prompt = config.rollout.max_prompt_tokens
    source = "rollout.max_prompt_tokens"
    if not prompt:
        if model_dir is None:
            raise ConfigError(
                "rollout.max_prompt_tokens is 0 (no cap) and the model's tokenizer is not here "
                "to count a prompt with: set rollout.max_prompt_tokens (the paper's: 2048)"
            )
        from training.local.prompts import first_prompt_tokens

        prompt = first_prompt_tokens(config, model_dir)
        source = "the first prompt (rollout.max_prompt_tokens 0: no cap; later ones may be longer)"
    if model_dir is None:
        hf, where = plan_config(config)
    else:
        hf, where = model_dir, str(model_dir / "config.json")
    plan = plan_memory(config, model_shape(config, hf), prompt, device_memory(config.model.device))
    plan.sizes["prompt_source"] = source
    plan.model_config = where
    return plan


def _compute_dtype(config: TrainConfig) -> str:
    """The run's compute dtype on its device; ``auto`` on a CUDA device this machine does
    not have (a dry run planning for a GPU elsewhere) is bfloat16, as on GPUs since Ampere."""
    import torch

    from training.local.precision import resolve_compute_dtype

    setting, device = config.model.compute_dtype, config.model.device
    if setting == "auto" and device.startswith("cuda") and not torch.cuda.is_available():
        return "bfloat16"
    return resolve_compute_dtype(setting, device)[0]


def _layer_activations(s: ModelShape, c: int, autocast: bool) -> int:
    """Bytes a decoder layer keeps for its backward pass, per token: two RMSNorms (float32
    input and normalised output each), the projections' inputs (the norms' float32
    outputs; under autocast a bfloat16 copy for each of q, k, v, gate and up), the rotated
    q and k, v, the attention's output and the output projection's input, and the MLP's
    gate, up, activation and product."""
    h, i, kv = s.hidden, s.intermediate, s.kv_heads * s.head_dim
    norms = 2 * 2 * h * 4
    inputs = 2 * h * 4 + ((3 + 2) * h * c if autocast else 0)
    attention = c * (2 * h + 2 * kv) + c * h
    mlp = 4 * i * c
    return norms + inputs + attention + mlp


def _scores(s: ModelShape, rows: int, length: int, device: str, compute: str) -> int:
    """Bytes of a layer's attention scores where they are materialised: on a CPU under
    bfloat16, while they are small (:data:`training.local.attention.SCORES_LIMIT`
    elements: the float32 softmax and its bfloat16 copy). Elsewhere a fused kernel
    (flash or memory-efficient) keeps none."""
    from training.local.attention import SCORES_LIMIT

    elements = rows * s.heads * length * length
    if device == "cpu" and compute == "bfloat16" and elements <= SCORES_LIMIT:
        return elements * (4 + 2)
    return 0


def _prefill(s: ModelShape, rows: int, prompt: int, c: int) -> int:
    """The prompt pass's transients, one decoder layer at a time: the float32 residual
    stream and norm, the MLP's intermediates; and the attention mask."""
    return rows * prompt * (3 * s.hidden * 4 + 3 * s.intermediate * c) + _mask(rows, prompt)


def _decode_step(s: ModelShape, rows: int) -> int:
    """A decoding step's transients: a few float32 copies of its (rows, V) logits (the
    model's, transformers' copy, the temperature's, the softmax, the recorded log-probs)."""
    return 5 * rows * s.vocab * 4


def _logits(s: ModelShape, response_tokens: int) -> int:
    """The update's float32 (response tokens, V) tensors, three at once (the log-softmax
    kept for the backward pass with the logits and the entropy's exp, or the two
    gradients), and the head's input."""
    return response_tokens * (3 * s.vocab * 4 + s.hidden * 4)


def _backward(s: ModelShape, c: int) -> int:
    """A layer's backward transients per token beyond its activations (which it frees as
    it goes): a gradient of the MLP's width and one of the float32 residual stream."""
    return s.intermediate * c + s.hidden * 4


def _mask(rows: int, length: int) -> int:
    """The attention mask of a padded batch: (rows, 1, length, length) booleans, built
    once a forward pass and read by every layer (and kept for the backward pass)."""
    return rows * length * length


def free_memory(device: str) -> int | None:
    """Bytes free to plan against: ``$GIGPO_FREE_MEMORY_GIB`` when set (a dry run for
    another machine, a test), else the device's: CUDA's free memory, a CPU's available
    memory (``MemAvailable``), or None where it cannot be read (MPS, no ``/proc/meminfo``).

    Raises:
        ConfigError: a bad ``$GIGPO_FREE_MEMORY_GIB`` (:func:`free_memory_override`).
    """
    gib = free_memory_override()
    if gib is not None:
        return int(gib * GIB)
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            return None
        return int(torch.cuda.mem_get_info(int(device.partition(":")[2] or 0))[0])
    if device == "cpu":
        try:
            text = Path("/proc/meminfo").read_text()
        except OSError:
            return None
        for line in text.splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return None


def device_memory(device: str) -> int | None:
    """A CUDA device's total bytes: the device's own where this machine has it, else
    ``$GIGPO_FREE_MEMORY_GIB`` (a dry run for a GPU elsewhere: its free memory, all of an idle
    GPU's); None elsewhere (a CPU, MPS, a GPU not here and no override)."""
    if not device.startswith("cuda"):
        return None
    import torch

    if torch.cuda.is_available():
        index = int(device.partition(":")[2] or 0)
        return int(torch.cuda.get_device_properties(index).total_memory)
    gib = free_memory_override()
    return None if gib is None else int(gib * GIB)


#: The most GiB ``$GIGPO_FREE_MEMORY_GIB`` may say (a pebibyte): more is a typo.
MAX_FREE_GIB = 1 << 20


def free_memory_override() -> float | None:
    """``$GIGPO_FREE_MEMORY_GIB`` in GiB (None: unset); a :class:`ConfigError` naming it
    unless a number in (0, :data:`MAX_FREE_GIB`] (not ``inf``, ``nan``, ``1e400``, ``-3``)."""
    value = os.environ.get("GIGPO_FREE_MEMORY_GIB")
    try:
        gib = float(value) if value else None
    except ValueError:
        gib = math.nan
    if gib is not None and not 0 < gib <= MAX_FREE_GIB:  # NaN fails every comparison
        raise ConfigError(f"$GIGPO_FREE_MEMORY_GIB must be a number of GiB in (0, "
                          f"{MAX_FREE_GIB}], got {value[:40]!r}")  # fmt: skip
    return gib


def check_fits(plan: MemoryPlan, free: int | None) -> None:
    """Raises :class:`ConfigError` when ``plan`` (with :data:`HEADROOM` and :data:`RESERVE`)
    needs more than ``free`` bytes, naming the settings that shrink its larger peak."""
    if free is None:
        return
    need = math.ceil(plan.peak * (1 + HEADROOM)) + RESERVE
    if need <= free:
        return
    if plan.update_peak >= plan.generation_peak:
        which = "an update micro-batch"
        fix = (
            "lower algo.micro_batch_tokens (or algo.minibatch_size), set "
            "model.gradient_checkpointing: true, or shorten rollout.max_prompt_tokens / "
            "rollout.max_new_tokens"
        )
    elif "engine" in plan.generation:  # vLLM's share of the GPU, while it generates
        which = f"generation ({_size(plan.generation['engine'])} of it the vllm engine's)"
        fix = "lower rollout.gpu_memory_utilization (the engine's share of the GPU)"
    else:
        which = "generation"
        fix = (
            "play fewer envs at once (env.num_groups x env.group_size, eval.groups), or "
            "shorten rollout.max_prompt_tokens / rollout.max_new_tokens"
        )
    resident = sum(plan.resident.values())
    lora = "" if plan.lora else (
        "train LoRA adapters (model.lora_rank: 64: a frozen base held in the compute dtype, "
        "whose reference is the base itself), "
    )  # fmt: skip
    smaller = (f"{lora}or shrink it with model.dtype, model.trainable_layers, algo.kl_coef: 0 "
               "(drops the reference)")  # fmt: skip
    head = (f"the run does not fit {plan.device}: its memory plan peaks at {_size(plan.peak)} "
            f"in {which}, {_size(need)} with headroom, and {_size(free)} is free")  # fmt: skip
    if free > RESERVE and math.ceil(resident * (1 + HEADROOM)) + RESERVE > free:  # weights alone
        raise ConfigError(
            f"{head}; its resident part alone (weights, reference, optimizer) takes "
            f"{_size(resident)}: {smaller}; then keep the activations small with "
            "model.gradient_checkpointing: true. See the plan: gigpo-train --dry-run"
        )
    raise ConfigError(
        f"{head} ({_size(resident)} resident: weights, reference, optimizer): {fix}; or make "
        f"the resident part smaller: {smaller}. See the plan: gigpo-train --dry-run"
    )
