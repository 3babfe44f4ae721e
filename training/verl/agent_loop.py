"""The ``gigpo`` agent loop: a gigpo environment's episode through verl's rollout server, one
``AgentLoopOutput`` per environment step (the paper's layout).

verl runs one agent loop per sample (``rollout.n`` of them per task, concurrently, as
coroutines of its agent-loop workers). Each step's prompt is the task and the last K steps
(the env's :func:`~gigpo_envs.history_prompt`, as the OpenRLHF step layout and the paper build
it), tokenized by verl's own continuous-token builder, and the step is one output: its prompt,
its response, and in ``extra_fields`` its step columns (:data:`training.verl.trainer.STEP_FIELDS`:
the episode, the step's index, its reward, the state it acted from and the one it led to,
``is_action_valid``, ``won``), which verl keeps with the row. Every output's ``reward_score``
is the episode's reward sum (verl puts it on the row's last response token, as verl-agent's
episode reward manager does).

A row's dataset fields carry the task: ``extra_info["gigpo_task"]``, a task label
(:func:`training.env_tasks.task_label`, written by ``gigpo-verl``). The env runs in a thread
or in the process's env worker pool (:func:`training.env_tasks.open_task_env`). A prompt longer
than ``rollout.prompt_length`` is an error naming the sizes, never a silent cut.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
    register,
)

from training.env_tasks import PromptTooLongError, open_task_env, parse_task, record_step
from training.records import StepRecords

#: The dataset row's ``extra_info`` key holding the task label.
TASK_KEY = "gigpo_task"


def task_of(kwargs: dict[str, Any]) -> Any:
    """The :class:`~training.env_tasks.Task` of a dataset row's fields.

    Raises:
        ValueError: no task label, or a malformed one (named).
    """
    extra = kwargs.get("extra_info")
    if not isinstance(extra, dict) or TASK_KEY not in extra:
        raise ValueError(
            f"the gigpo agent loop plays rows whose extra_info has a {TASK_KEY!r} task label "
            "(the datasets gigpo-verl writes); this row has "
            f"{sorted(extra) if isinstance(extra, dict) else type(extra).__name__}"
        )
    task = parse_task(extra[TASK_KEY])
    if task.layout != "step":
        raise ValueError(f"the gigpo agent loop plays the step layout, got {task.layout!r}")
    return task


def step_fields(records: StepRecords, i: int) -> dict[str, Any]:
    """Row ``i`` of an episode's records (its step ``i``) as the output's ``extra_fields``
    step columns."""
    return {
        "traj_ids": records.traj_ids[i],
        "step": i,
        "rewards": records.rewards[i],
        "anchors": records.anchors[i],
        "anchor_texts": records.anchor_texts[i],
        "next_anchors": records.next_anchors[i],
        "next_anchor_texts": records.next_anchor_texts[i],
        "is_action_valid": records.is_action_valid[i],
        "won": records.won[i],
        # verl copies the last output's reward_extra_info to the others; none here.
        "reward_extra_info": {},
    }


@register("gigpo")
class GiGPOAgentLoop(AgentLoopBase):
    """Plays one episode of the row's task; returns one output per environment step."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> list[AgentLoopOutput]:
        task = task_of(kwargs)
        group = str(kwargs.get("uid", task.group))
        session = kwargs.get("session_id")
        traj = f"{group}_{session}" if session is not None else uuid4().hex
        prompt_cap = int(self.rollout_config.prompt_length)
        response_cap = int(self.rollout_config.response_length)
        params = dict(sampling_params)
        params["max_tokens"] = min(task.max_new_tokens, response_cap)
        env = await open_task_env(task)
        records, outputs = StepRecords(), []
        try:
            _, info = await env.areset(seed=task.seed)
            while True:  # the env ends every episode (its max_steps)
                started = time.perf_counter()
                prompt_ids = await asyncio.get_running_loop().run_in_executor(
                    None, self.continuous_token_builder.build_initial_tokens, info["messages"]
                )
                if len(prompt_ids) > prompt_cap:
                    raise PromptTooLongError(
                        f"{task.env_id} (seed {task.seed}) step {len(records)}: the prompt has "
                        f"{len(prompt_ids)} tokens, over data.max_prompt_length "
                        f"(rollout.prompt_length) {prompt_cap} (history_length "
                        f"{task.history_length}): raise it or shorten the history"
                    )
                output = await self.server_manager.generate(
                    request_id=uuid4().hex, prompt_ids=prompt_ids, sampling_params=dict(params)
                )
                generated = time.perf_counter()
                merged, mask, log_probs = await self.ct_merge_assistant_token(
                    prompt_ids, output.token_ids, [],
                    [] if output.log_probs else None,
                    assistant_logprobs=output.log_probs or None,
                )  # fmt: skip
                tokens = merged.token_ids
                response_ids = tokens[len(tokens) - len(mask) :] if mask else []
                text = self.tokenizer.decode(output.token_ids, skip_special_tokens=True)
                before = info
                _, reward, terminated, truncated, info = await env.astep(text)
                cut = len(output.token_ids) >= params["max_tokens"]
                record_step(records, before, reward, info, text, group=group, traj=traj,
                            text_chars=None, truncated=cut)  # fmt: skip
                outputs.append(
                    AgentLoopOutput(
                        prompt_ids=tokens[: len(tokens) - len(mask)],
                        response_ids=response_ids[:response_cap],
                        response_mask=mask[:response_cap],
                        response_logprobs=log_probs[:response_cap] if log_probs else None,
                        num_turns=2,
                        metrics=AgentLoopMetrics(
                            generate_sequences=generated - started,
                            tool_calls=time.perf_counter() - generated,
                        ),
                        # the server's fields (the weights' version: global_steps, min_ and
                        # max_global_steps, which verl's staleness metrics read), then ours
                        extra_fields={
                            **dict(output.extra_fields or {}),
                            **step_fields(records, len(outputs)),
                        },  # fmt: skip
                    )
                )
                if terminated or truncated:
                    break
        finally:
            await asyncio.shield(env.aclose())
        episode_reward = float(sum(records.rewards))
        for out in outputs:
            out.reward_score = episode_reward
        return outputs
