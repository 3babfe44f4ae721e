"""The run's first prompt, counted before any weight loads: what an uncapped run's memory
plan is made for (:func:`first_prompt_tokens`), and a prompt cap below it refused by the
dry run and the run itself (:func:`check_first_prompt`)."""

from __future__ import annotations

from pathlib import Path

from training.local.schema import ConfigError, TrainConfig


def check_first_prompt(config: TrainConfig, model_dir: Path, *, strict: bool = False) -> bool:
    """Refuses a prompt cap below the run's first prompt (counted with the model's tokenizer
    in ``model_dir``), before any weight loads: such a run would stop at its first step.

    Returns:
        Whether the first prompt was counted: not without a cap, nor (unless ``strict``) with
        a tokenizer that cannot render the env's chat (a model without a chat template: the
        run itself then says so at its first step).

    Raises:
        ConfigError: naming ``rollout.max_prompt_tokens`` and the first prompt's length.
    """
    cap = config.rollout.max_prompt_tokens
    if not cap:
        return False
    try:
        first = first_prompt_tokens(config, model_dir)
    except ValueError:  # no chat template, ...: not this check's business
        if strict:
            raise
        return False
    if first > cap:
        raise ConfigError(
            f"rollout.max_prompt_tokens={cap} is below the run's first prompt, {first} tokens "
            f"(seed run.seed={config.run.seed}): raise it to at least {first}, more with a "
            "history (env.history_length), or shorten the prompt (env.template)"
        )
    return True


def first_prompt_tokens(config: TrainConfig, model_dir: Path) -> int:
    """Tokens of the longest first prompt of the run's first group (seed ``run.seed``)."""
    from training.local.model import load_tokenizer
    from training.local.play import config_envs
    from training.local.rollout import render_prompts

    tokenizer = load_tokenizer(model_dir, trust_remote_code=config.model.trust_remote_code)
    envs = config_envs(config, 1, min(config.env.group_size, 2))
    try:
        _, infos = envs.reset(seed=config.run.seed)
        prompts = render_prompts(tokenizer, [list(m) for m in infos["messages"]],
                                 config.rollout.response_prefix)  # fmt: skip
    finally:
        envs.close()
    return max(len(p) for p in prompts)
