"""A tiny random Qwen2 with a byte-level BPE tokenizer trained on the spot, for tests and smoke.

Everything is built offline in a few seconds: the tokenizer is trained by ``tokenizers`` on
the prompts of the registered environments (so prompts tokenize compactly), carries a ChatML
chat template, and the model is a 2-layer Qwen2 with random weights.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from training.files import check_own_folder, remove_tree
from training.guarded import GuardError, read_json_file

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
#: The protocol's tags are whole tokens, so that an answer is a handful of tokens.
TAG_TOKENS = ["<think>", "</think>", "<action>", "</action>"]
#: The built-in games whose prompts train the tokenizer (no data files, no extras).
CORPUS_ENVS = (
    "gigpo/Sokoban-v0",
    "gigpo/EZPoints-v0",
    "gigpo/Points24-v0",
    "gigpo/NumberLine-v0",
    "gigpo/Blackjack-v0",
)
WARMUP_BATCH = 8
#: Written last into a tiny model's directory: the settings it was built with.
BUILT_FILE = "gigpo_tiny_model.json"


def _examples() -> list[tuple[list[dict[str, str]], str]]:
    """(chat messages, answer) pairs of every registered environment, from fixed seeds.

    The answer is an admissible action in the protocol's tags, chosen at random (seeded).
    """
    import gymnasium as gym
    import numpy as np

    import gigpo_envs  # noqa: F401  (registers the ids)
    from gigpo_envs import HistoryPrompt

    rng = np.random.default_rng(0)
    pairs = []
    for env_id in CORPUS_ENVS:
        env = HistoryPrompt(gym.make(env_id), history_length=2)
        for seed in range(4):
            _, info = env.reset(seed=seed)
            for _ in range(4):
                actions = info.get("admissible_actions") or ["up", "down", "left", "right"]
                answer = f"<action>{actions[int(rng.integers(len(actions)))]}</action>"
                pairs.append((info["messages"], answer))
                _, _, terminated, truncated, info = env.step(answer)
                if terminated or truncated:
                    break
    return pairs


def _warm_up(model, tokenizer, steps: int, seed: int) -> None:
    """A few supervised steps on (end of prompt, admissible action) pairs.

    A random model never writes the action tags, so every rollout scores the same and every
    group-relative advantage is 0; after this warm-up it names a legal action now and then,
    at random, which is the starting point RL needs.
    """
    import torch

    rng = torch.Generator().manual_seed(seed)
    seqs, masks = [], []
    for messages, answer in _examples():
        prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        p = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        a = tokenizer(answer, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        seqs.append(p + a)
        masks.append([False] * len(p) + [True] * len(a))
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), tokenizer.pad_token_id)
    labels = torch.full((len(seqs), width), -100)
    for row, (seq, mask) in enumerate(zip(seqs, masks, strict=True)):
        ids[row, : len(seq)] = torch.tensor(seq)
        labels[row, : len(seq)] = torch.where(torch.tensor(mask), torch.tensor(seq), -100)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        rows = torch.randint(len(seqs), (WARMUP_BATCH,), generator=rng)
        loss = model(input_ids=ids[rows], labels=labels[rows]).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()


def build_tiny_model(
    directory: str | Path,
    *,
    hidden_size: int = 32,
    num_layers: int = 2,
    vocab_size: int = 400,
    warmup_steps: int = 0,
    seed: int = 0,
    head_dim: int = 16,
) -> Path:
    """Writes a random Qwen2 and its tokenizer to ``directory`` (a normal HF model dir).

    Args:
        directory: where to save; created if missing.
        hidden_size: model width (heads of ``head_dim`` dims each).
        num_layers: decoder layers.
        vocab_size: BPE vocabulary size (>= 256 + special tokens).
        warmup_steps: supervised steps on random admissible actions (see :func:`_warm_up`);
            0 keeps the weights random.
        seed: torch seed of the random weights and the warm-up.
        head_dim: dims per attention head (16; vLLM's CPU attention takes 32 and up).

    Returns:
        ``directory`` as a Path.
    """
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2ForCausalLM

    if head_dim not in (16, 32, 64):
        raise ValueError(f"head_dim must be 16, 32 or 64, got {head_dim}")
    if hidden_size % head_dim or hidden_size < head_dim:
        raise ValueError(
            f"hidden_size must be a positive multiple of head_dim {head_dim}, got {hidden_size}"
        )
    if vocab_size < 256 + len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size must be >= {256 + len(SPECIAL_TOKENS)}, got {vocab_size}")
    directory = Path(directory)
    # Built beside the target and renamed into place: a crash mid-build leaves no half model.
    final, directory = directory, directory.with_name(f".{directory.name}.tmp{os.getpid()}")
    check_own_folder(final)  # a link planted there is refused before anything is built
    remove_tree(directory)
    directory.mkdir(parents=True)

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    examples = _examples()
    corpus = [m["content"] for messages, _ in examples for m in messages]
    bpe.train_from_iterator(corpus + [answer for _, answer in examples], trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
    )
    tokenizer.add_tokens(TAG_TOKENS)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(directory)

    config = tiny_model_config(
        hidden_size,
        num_layers,
        len(tokenizer),
        head_dim=head_dim,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
        if warmup_steps:
            _warm_up(model, tokenizer, warmup_steps, seed)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(directory)
    settings = {"hidden_size": hidden_size, "num_layers": num_layers, "vocab_size": vocab_size,
                "warmup_steps": warmup_steps, "seed": seed}  # fmt: skip
    if head_dim != 16:  # recorded only where it differs, so earlier builds still match
        settings["head_dim"] = head_dim
    (directory / BUILT_FILE).write_text(json.dumps(settings, sort_keys=True) + "\n")
    remove_tree(final)  # a link planted there is refused, never followed
    try:
        directory.rename(final)
    except OSError:  # another process renamed its own build in first
        shutil.rmtree(directory, ignore_errors=True)
        if tiny_model_settings(final) != settings:
            raise
    return final


def tiny_model_config(
    hidden_size: int, num_layers: int, vocab_size: int, head_dim: int = 16, **tokens: int | None
) -> Any:
    """The tiny model's ``Qwen2Config``: heads of ``head_dim`` dims, one key/value head per
    two (at least one), an MLP twice as wide as the model, tied embeddings. ``vocab_size``:
    the tokenizer's length (the BPE vocabulary, at most the ``vocab_size`` setting, and the
    :data:`TAG_TOKENS`). ``tokens``: ``eos_token_id`` and ``pad_token_id``."""
    from transformers import Qwen2Config

    return Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=hidden_size // head_dim,
        num_key_value_heads=max(1, hidden_size // (2 * head_dim)),
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=None,
        **tokens,
    )


def tiny_model_settings(directory: str | Path) -> dict[str, int] | None:
    """The settings a whole tiny model in ``directory`` was built with, or None when there is
    none (absent, or a build a crash cut short: the marker file is written last)."""
    marker = Path(directory) / BUILT_FILE
    try:  # the guarded reader: a marker is one small JSON object
        settings = read_json_file(marker, "tiny model marker", max_bytes=1 << 16)
    except GuardError:
        return None
    return settings if isinstance(settings, dict) else None
