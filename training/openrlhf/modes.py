"""The OpenRLHF modes a run turns on, checked before Ray starts (pure).

OpenRLHF 0.11.2's asynchronous training, partial rollouts, dynamic filtering, GSPO, LoRA
(whose weight sync to vLLM :mod:`training.openrlhf.lora_sync` makes work), packing, dynamic
batches, colocation and prefix caching: which combinations cannot run (a
:class:`~training.openrlhf.layout.UsageError` naming the flag and why) and what a user should
know about the rest (warnings). What each mode does with GiGPO, and the test that shows it:
docs/openrlhf.md#openrlhf-modes.
"""

from __future__ import annotations

from training.openrlhf.layout import UsageError, flag_value, has_flag


def check_modes(theirs: list[str], layout: str, gigpo_algo: bool, warnings: list[str]) -> None:
    """Refuses the OpenRLHF modes that cannot run together as given, before Ray starts, and
    warns about what a mode does to GiGPO (docs/openrlhf.md#openrlhf-modes).

    Raises:
        UsageError: naming the flag and why.
    """
    async_on = has_flag(theirs, "--train.async_enable")
    if flag_value(theirs, "--ds.lora.rank", "0").strip() not in ("0", ""):
        check_lora(theirs)
    if has_flag(theirs, "--train.partial_rollout_enable") and not async_on:
        raise UsageError(
            "--train.partial_rollout_enable pauses generation across a weight sync of the "
            "asynchronous trainer: it needs --train.async_enable"
        )
    if async_on and has_flag(theirs, "--vllm.enable_sleep"):
        raise UsageError(
            "--vllm.enable_sleep with --train.async_enable: asynchronous training keeps the "
            "vLLM engines generating while the models train, so they cannot sleep (the "
            "launcher leaves its default --vllm.enable_sleep out when --train.async_enable "
            "is given; do not give both)"
        )
    if gigpo_algo and has_flag(theirs, "--algo.dynamic_filtering_range"):
        raise UsageError(
            "--algo.dynamic_filtering_range: with gigpo_algo's estimators dynamic filtering "
            "drops a group when none of its turns has a nonzero advantage at either level "
            "(an episode-score range would drop GiGPO groups that still have a step-level "
            "signal); give --algo.dynamic_filtering_enable alone"
        )
    if async_on and has_flag(theirs, "--train.colocate_all"):
        warnings.append(
            "--train.async_enable with --train.colocate_all colocates the DeepSpeed models "
            "only: the vLLM engines need GPUs of their own (--vllm.num_engines x "
            "--vllm.tensor_parallel_size beside the actor's)"
        )
    generate_batch = flag_value(theirs, "--rollout.vllm_generate_batch_size", "")
    rollout_batch = flag_value(theirs, "--rollout.batch_size", "1024")
    if generate_batch and not async_on:
        try:
            over = int(generate_batch) > int(rollout_batch)
        except ValueError:
            raise UsageError(
                "--rollout.vllm_generate_batch_size and --rollout.batch_size must be ints"
            ) from None
        if over:
            raise UsageError(
                "--rollout.vllm_generate_batch_size larger than --rollout.batch_size keeps the "
                "extra groups for later training steps: it needs --train.async_enable"
            )
    if async_on and not has_flag(theirs, "--algo.advantage.is_correction_level"):
        warnings.append(
            "--train.async_enable trains on samples of an older policy (up to "
            "--train.async_queue_size weight syncs behind, one more with "
            "--train.partial_rollout_enable): the PPO ratio starts from the trainer's "
            "policy, not the sampler's; --algo.advantage.is_correction_level token "
            "corrects the gap with the vLLM log-probs"
        )
    gspo = flag_value(theirs, "--actor.policy_loss_type", "ppo") == "gspo"
    if gspo and gigpo_algo and layout == "episode":
        warnings.append(
            "--actor.policy_loss_type gspo with --gigpo.layout episode: GSPO's one ratio per "
            "sample pushes every token of an episode by the mean of its turns' advantages, "
            "so GiGPO's per-turn credit is averaged away; --gigpo.layout step keeps one "
            "advantage per sample"
        )


def check_lora(theirs: list[str]) -> None:
    """Refuses what OpenRLHF 0.11.2 cannot run with a LoRA actor (``--ds.lora.rank`` > 0).

    Raises:
        UsageError: naming the flag and why.
    """
    if has_flag(theirs, "--ds.load_in_4bit"):
        raise UsageError(
            "--ds.load_in_4bit with --ds.lora.rank: the LoRA weight sync merges each adapter "
            "into its layer's weight for vLLM, and a bitsandbytes 4-bit weight is packed, not "
            "a tensor it can add to (vLLM loads the unquantized model); train LoRA on the "
            "bf16 model"
        )
    if has_flag(theirs, "--train.enable_ema"):
        raise UsageError(
            "--train.enable_ema with --ds.lora.rank: OpenRLHF 0.11.2 builds the EMA model "
            "without LoRA and averages it with the actor parameter by parameter in order "
            "(DeepspeedStrategy.moving_average zips the two models' parameters), which pairs "
            "each adapter with another layer's weight: the first average fails on their "
            "shapes, or averages the wrong tensors where the shapes broadcast"
        )
