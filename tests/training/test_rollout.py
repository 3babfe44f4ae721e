"""Rollouts with the tiny model: step records, sampling log-probs, response cuts."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from training.advantages import critic_free_advantages
from training.local.batch import make_batch, token_log_probs
from training.local.model import load_model, load_tokenizer
from training.local.rollout import collect, generate, make_envs, render_prompts
from training.records import StepRecords


@pytest.fixture(scope="module")
def model_and_tokenizer(tiny_model_dir):
    return load_model(tiny_model_dir, "float32"), load_tokenizer(tiny_model_dir)


def test_records_follow_the_contract_and_log_probs_match_a_forward_pass(model_and_tokenizer):
    model, tok = model_and_tokenizer
    # EZPoints deals different cards per group, so prompts differ in length (left padding).
    envs = make_envs("gigpo/EZPoints-v0", 3, 2, 1, None, {"max_steps": 3})
    torch.manual_seed(0)
    rollout = collect(model, tok, envs, seed=4, max_new_tokens=8, temperature=1.0)
    rec = rollout.records
    assert len({len(p) for p in rec.prompt_ids}) > 1
    n = len(rec)
    assert n == int(rollout.episode_lengths.sum()) and n >= 6
    for field in ("response_ids", "old_log_probs", "rewards", "anchors", "group_ids", "traj_ids"):
        assert len(getattr(rec, field)) == n
    assert all(len(a) == len(b) for a, b in zip(rec.response_ids, rec.old_log_probs, strict=True))
    assert rec.group_ids == [t // 2 for t in rec.traj_ids]
    # Rows of a trajectory in time order, one per step the episode took.
    for traj in set(rec.traj_ids):
        rows = [i for i, t in enumerate(rec.traj_ids) if t == traj]
        assert rows == sorted(rows) and len(rows) == rollout.episode_lengths[traj]
    assert rollout.episode_lengths.max() <= 3  # every episode ends at the env's max_steps

    batch = make_batch(rec, np.arange(n), np.zeros(n), tok.pad_token_id)
    with torch.no_grad():
        log_probs = token_log_probs(model, batch)
    mask = batch.response_mask.bool()
    assert torch.allclose(log_probs[mask], batch.old_log_probs[mask], atol=1e-4)
    envs.close()


def test_stop_text_ends_each_response_at_its_closing_tag(model_and_tokenizer):
    model, tok = model_and_tokenizer
    envs = make_envs("gigpo/Sokoban-v0", 2, 4, 0, None, {})
    _, infos = envs.reset(seed=0)
    prompts = render_prompts(tok, [list(m) for m in infos["messages"]], "<action>")
    torch.manual_seed(1)
    ids, log_probs = generate(
        model, tok, prompts, max_new_tokens=12, temperature=1.0, stop_text="</action>"
    )
    cut = 0
    for response, lps in zip(ids, log_probs, strict=True):
        assert 1 <= len(response) == len(lps) <= 12
        text = tok.decode(response, skip_special_tokens=False)
        if "</action>" in text:
            cut += 1
            assert "</action>" not in tok.decode(response[:-1], skip_special_tokens=False)
    assert cut > 0
    envs.close()


def test_grpo_and_rloo_give_every_step_its_episode_advantage():
    from training.local.config import AlgoConfig
    from training.records import StepRecords

    rec = StepRecords(
        rewards=[0.0, 1.0, 0.0, 0.0, 0.0],
        anchors=["a", "b", "a", "c", "a"],
        anchor_texts=["A", "B", "A", "C", "A"],
        group_ids=[0, 0, 0, 0, 0],
        traj_ids=[0, 0, 1, 1, 2],
        is_action_valid=[True, True, True, False, True],
    )
    grpo = critic_free_advantages(rec, AlgoConfig(estimator="grpo", norm="mean_std")).advantages
    # Scores 1, 0, 0 (no penalty): mean 1/3, std sqrt(1/3) over the three trajectories.
    assert grpo[0] == grpo[1] == pytest.approx((2 / 3) / (np.sqrt(1 / 3) + 1e-6))
    assert grpo[2] == grpo[3] == grpo[4] == pytest.approx((-1 / 3) / (np.sqrt(1 / 3) + 1e-6))
    rloo = critic_free_advantages(rec, AlgoConfig(estimator="rloo", invalid_penalty=0.5)).advantages
    # The invalid row 3 scores 0 - 0.5; trajectory 1's value is the mean of its rows, -0.25.
    assert rloo[0] == pytest.approx(1.0 - (-0.25 + 0.0) / 2)
    assert rloo[2] == pytest.approx(0.0 - (1.0 + 0.0) / 2)
    assert rloo[3] == pytest.approx(-0.5 - (1.0 + 0.0) / 2)
    # The default norm, mean: the scores less their mean, no std.
    by_default = critic_free_advantages(rec, AlgoConfig(estimator="grpo")).advantages
    assert np.asarray(by_default) == pytest.approx([2 / 3, 2 / 3, -1 / 3, -1 / 3, -1 / 3])
    gigpo = critic_free_advantages(rec, AlgoConfig(estimator="gigpo", norm="mean_std"))
    # Rows 0, 2 and 4 share state "a" with discounted returns 0.95 * 1, 0, 0: mean 0.95 / 3,
    # unbiased std 0.95 / sqrt(3). Rows 1 and 3 are alone in their step group: A_S = 0.
    s = 0.95 / np.sqrt(3) + 1e-6
    expected_step = [(0.95 - 0.95 / 3) / s, 0.0, (-0.95 / 3) / s, 0.0, (-0.95 / 3) / s]
    assert np.asarray(gigpo.step_advantages) == pytest.approx(expected_step, abs=1e-6)
    assert np.asarray(gigpo.advantages) == pytest.approx(grpo + np.asarray(expected_step))


def test_template_overrides_reach_the_prompts():
    order = {"order": ["format", "admissible", "history", "current"], "current": "{observation}"}
    envs = make_envs("gigpo/NumberLine-v0", 2, 2, 0, "Answer: <action>+</action>", {}, order)
    _, infos = envs.reset(seed=0)
    for messages, raw in zip(infos["messages"], infos["raw_observation"], strict=True):
        user = messages[1]["content"]
        assert user.startswith("Answer: <action>+</action>") and user.endswith("\n\n" + raw)
    envs.close()
    with pytest.raises(ValueError, match="order"):
        make_envs("gigpo/NumberLine-v0", 1, 2, 0, None, {}, {"order": ["nope"]})


def _prompts(count: int, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(5, 30, (count,), generator=g).tolist()
    return [torch.randint(10, 300, (n,), generator=g).tolist() for n in lengths]


def _full_logits_generate(model, tok, prompts, temperature, top_p=1.0, top_k=0, new=12):
    """The trainer's old decoding, as an independent reference: every step's logits kept
    (``output_logits=True``, rows x steps x vocabulary), then one log-softmax."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), tok.pad_token_id)
    mask = torch.zeros_like(ids)
    for row, p in enumerate(prompts):
        ids[row, width - len(p) :] = torch.tensor(p)
        mask[row, width - len(p) :] = 1
    kwargs = {"do_sample": temperature > 0}
    if temperature > 0:
        kwargs.update(temperature=temperature, top_p=top_p, top_k=top_k)
    out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new,
                         eos_token_id=[tok.eos_token_id], pad_token_id=tok.pad_token_id,
                         return_dict_in_generate=True, output_logits=True, **kwargs)  # fmt: skip
    tokens = out.sequences[:, width:]
    logits = torch.stack(out.logits, dim=1).float() / (temperature or 1.0)
    chosen = torch.log_softmax(logits, -1).gather(-1, tokens[:, : logits.shape[1], None])
    return tokens, chosen.squeeze(-1)


@pytest.mark.parametrize(
    ("temperature", "top_p", "top_k"), [(1.0, 1.0, 0), (0.7, 0.9, 20), (0, 1, 0)]
)
def test_generate_takes_the_same_tokens_and_log_probs_as_keeping_every_logit(
    model_and_tokenizer, temperature, top_p, top_k
):
    model, tok = model_and_tokenizer
    prompts = _prompts(6)
    torch.manual_seed(3)
    tokens, chosen = _full_logits_generate(model, tok, prompts, temperature, top_p, top_k)
    torch.manual_seed(3)
    ids, log_probs = generate(model, tok, prompts, max_new_tokens=12, temperature=temperature,
                              top_p=top_p, top_k=top_k)  # fmt: skip
    for row, (response, lps) in enumerate(zip(ids, log_probs, strict=True)):
        assert response == tokens[row, : len(response)].tolist()
        assert lps == chosen[row, : len(response)].tolist()  # bit for bit


def test_the_log_prob_recorder_holds_one_step_of_logits():
    from training.local.decoding import ChosenLogProbs

    recorder = ChosenLogProbs(1.0)
    ids = torch.zeros((4, 3), dtype=torch.long)
    for step in range(50):
        recorder(torch.cat([ids, torch.full((4, step), 7)], dim=1), torch.randn(4, 1000))
    held = [recorder.pending, *recorder.chosen]
    assert recorder.pending.shape == (4, 1000)
    assert all(t.shape == (4,) for t in recorder.chosen) and len(recorder.chosen) == 49
    assert sum(t.numel() for t in held) == 4 * 1000 + 49 * 4  # one step's scores, not 50
    assert recorder.finish(torch.full((4, 50), 7)).shape == (4, 50)


def test_a_models_own_repetition_penalty_does_not_reach_the_sampler(tmp_path):
    """Instruct models ship sampling settings (Qwen2.5-Instruct: repetition_penalty 1.1):
    the trainer samples from softmax(logits / temperature) all the same."""
    from training.tiny_model import build_tiny_model

    model_dir = build_tiny_model(tmp_path / "random")  # no warm-up: long, varied responses
    tok = load_tokenizer(model_dir)
    plain = load_model(model_dir, "float32")
    penalised = load_model(model_dir, "float32")
    penalised.generation_config.repetition_penalty = 3.0
    penalised.generation_config.no_repeat_ngram_size = 1  # no token twice: sure to show
    prompts = _prompts(4, seed=1)
    outs = []
    for model in (plain, penalised):
        torch.manual_seed(5)
        outs.append(generate(model, tok, prompts, max_new_tokens=10, temperature=1.0))
    assert outs[0] == outs[1]
    torch.manual_seed(5)
    tokens, _ = _full_logits_generate(penalised, tok, prompts, 1.0, new=10)
    # a bare generate of the same model obeys its settings: the responses differ
    assert [tokens[r, : len(x)].tolist() for r, x in enumerate(outs[1][0])] != outs[1][0]
    seen = [(p + r)[: len(p) + k] for p, r in zip(prompts, outs[1][0], strict=True)
            for k in range(len(r))]  # fmt: skip
    responses = [t for r in outs[1][0] for t in r]
    assert any(t in before for t, before in zip(responses, seen, strict=True))  # it repeats


def test_the_static_cache_keeps_one_shape_and_the_log_probs(model_and_tokenizer):
    model, tok = model_and_tokenizer
    prompts = _prompts(5, seed=2)
    torch.manual_seed(0)
    ids, log_probs = generate(model, tok, prompts, max_new_tokens=8, temperature=1.0,
                              cache="static", rows=8, cache_length=40)  # fmt: skip
    ((shape, cache),) = model.gigpo_static_caches.items()
    assert shape == (8, 40)
    records = StepRecords(prompt_ids=prompts, response_ids=ids, old_log_probs=log_probs)
    batch = make_batch(records, np.arange(5), np.zeros(5), tok.pad_token_id)
    with torch.no_grad():
        forward = token_log_probs(model, batch)
    mask = batch.response_mask.bool()
    assert torch.allclose(forward[mask], batch.old_log_probs[mask], atol=1e-4)
    # fewer live rows, the same shape: the same cache, emptied
    generate(model, tok, prompts[:2], max_new_tokens=8, temperature=1.0, cache="static",
             rows=8, cache_length=40)  # fmt: skip
    assert model.gigpo_static_caches == {(8, 40): cache}
    # the padding rows are done from the first step: they never prolong a turn
    from training.local.decoding import RowsDone

    done = RowsDone(2)(torch.zeros((4, 3), dtype=torch.long), None)
    assert done.tolist() == [False, False, True, True]
    with pytest.raises(ValueError, match="cache_length"):
        generate(model, tok, prompts, max_new_tokens=20, temperature=1.0, cache="static",
                 rows=8, cache_length=40)  # fmt: skip
    with pytest.raises(ValueError, match="rows"):
        generate(model, tok, prompts, max_new_tokens=8, temperature=1.0, cache="static",
                 rows=4, cache_length=40)  # fmt: skip


def test_a_prompt_over_the_cap_is_an_error_naming_the_key(model_and_tokenizer):
    from training.local.rollout import PromptTooLongError

    model, tok = model_and_tokenizer
    envs = make_envs("gigpo/Sokoban-v0", 1, 2, 0, None, {})
    with pytest.raises(PromptTooLongError, match="rollout.max_prompt_tokens=20"):
        collect(model, tok, envs, seed=0, max_new_tokens=4, temperature=1.0,
                max_prompt_tokens=20)  # fmt: skip
    envs.close()


def test_each_record_carries_the_state_its_action_led_to(model_and_tokenizer):
    import gymnasium as gym

    model, tok = model_and_tokenizer
    # NumberLine's clock moves on every step, valid or not: every step changes the state, so
    # a record's next state is never its own; max_steps 3 truncates most episodes
    kwargs = {"max_position": 3, "max_steps": 3, "clock": True}
    envs = make_envs("gigpo/NumberLine-v0", 2, 3, 1, None, kwargs)
    torch.manual_seed(2)
    rollout = collect(model, tok, envs, seed=9, max_new_tokens=6, temperature=1.0)
    envs.close()
    rec = rollout.records.check()
    assert len(rec.next_anchors) == len(rec.next_anchor_texts) == len(rec)
    assert all(a != b for a, b in zip(rec.anchors, rec.next_anchors, strict=True))
    for traj in sorted(set(rec.traj_ids)):
        rows = [i for i, t in enumerate(rec.traj_ids) if t == traj]
        for now, after in zip(rows, rows[1:], strict=False):
            assert rec.next_anchors[now] == rec.anchors[after]
            assert rec.next_anchor_texts[now] == rec.anchor_texts[after]
        # the last record's next state is where the episode ended: replay its actions
        env = gym.make("gigpo/NumberLine-v0", **kwargs)
        _, info = env.reset(seed=9 + rec.group_ids[rows[0]])
        assert info["anchor"] == rec.anchors[rows[0]]
        for i in rows:
            _, _, terminated, truncated, info = env.step(rec.actions[i])
        assert terminated or truncated
        assert rec.next_anchors[rows[-1]] == info["anchor"]
        assert rec.next_anchor_texts[rows[-1]] == info["anchor_text"]
        env.close()
