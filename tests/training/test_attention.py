"""The CPU bfloat16 attention (training.local.attention) computes what transformers' own
attention implementations compute: both of its paths, padded batches, a key/value cache,
grouped key/value heads; and it is only switched on where it applies."""

from __future__ import annotations

import threading

import pytest
import torch

from training.local import attention
from training.local.attention import NAME, use_cpu_bf16_attention
from training.local.model import load_model


def _padded_batch(vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Three rows of 11, 7 and 4 tokens, right-padded to 11."""
    generator = torch.Generator().manual_seed(3)
    ids = torch.randint(5, vocab, (3, 11), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, 7:], mask[2, 4:] = 0, 0
    return ids * mask, mask


@pytest.mark.parametrize("path, reference", [("products", "eager"), ("flash", "sdpa")])
def test_both_paths_give_transformers_logits(tiny_model_dir, monkeypatch, path, reference):
    """float32, no autocast: the products path against transformers' eager attention, the
    flash path (forced by a score limit of 0) against its sdpa, on the real positions of
    a right-padded batch."""
    if path == "flash":
        monkeypatch.setattr(attention, "SCORES_LIMIT", 0)
    theirs = load_model(tiny_model_dir, "float32")
    theirs.set_attn_implementation(reference)
    ours = load_model(tiny_model_dir, "float32")
    assert ours.config.num_attention_heads > ours.config.num_key_value_heads  # grouped
    assert use_cpu_bf16_attention(ours)
    assert ours.config._attn_implementation == NAME
    ids, mask = _padded_batch(ours.config.vocab_size)
    with torch.no_grad():
        expected = theirs(input_ids=ids, attention_mask=mask).logits
        got = ours(input_ids=ids, attention_mask=mask).logits
    real = mask.bool()
    torch.testing.assert_close(got[real], expected[real], rtol=1e-5, atol=1e-5)
    assert float(got[real].std()) > 0.01  # not a constant


def test_generation_with_a_cache_and_left_padding_matches_eager(tiny_model_dir):
    """Greedy generation (a key/value cache, one query a step, left padding) writes the
    same tokens as transformers' eager attention, with scores close at every step."""
    theirs = load_model(tiny_model_dir, "float32")
    theirs.set_attn_implementation("eager")
    ours = load_model(tiny_model_dir, "float32")
    use_cpu_bf16_attention(ours)
    ids, mask = _padded_batch(ours.config.vocab_size)
    left_ids = torch.stack(
        [torch.roll(row, int((m == 0).sum())) for row, m in zip(ids, mask, strict=True)]
    )
    left_mask = torch.stack([torch.roll(m, int((m == 0).sum())) for m in mask])
    kwargs = dict(attention_mask=left_mask, max_new_tokens=6, do_sample=False,
                  output_scores=True, return_dict_in_generate=True, pad_token_id=0)  # fmt: skip
    a = theirs.generate(left_ids, **kwargs)
    b = ours.generate(left_ids, **kwargs)
    assert torch.equal(a.sequences, b.sequences)
    for x, y in zip(a.scores, b.scores, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-4)


def test_under_bf16_autocast_it_stays_close_to_float32(tiny_model_dir):
    """Under bfloat16 autocast the products run in bfloat16 (the logits move a little, not
    far); the float32 reference runs without autocast."""
    ours = load_model(tiny_model_dir, "float32")
    use_cpu_bf16_attention(ours)
    ids, mask = _padded_batch(ours.config.vocab_size)
    with torch.no_grad():
        exact = ours(input_ids=ids, attention_mask=mask).logits
        with torch.autocast("cpu", dtype=torch.bfloat16):
            mixed = ours(input_ids=ids, attention_mask=mask).logits.float()
    real = mask.bool()
    gap = (mixed[real] - exact[real]).abs()
    assert 0 < float(gap.max()) < 0.1


def test_the_critic_and_other_families(tiny_model_dir):
    """The critic's body is switched; a family whose attention differs (GPT-2) is not."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from training.local.model import load_critic

    critic = load_critic(tiny_model_dir, "float32")
    assert use_cpu_bf16_attention(critic)
    assert critic.model.config._attn_implementation == NAME
    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64))
    before = gpt2.config._attn_implementation
    assert not use_cpu_bf16_attention(gpt2)
    assert gpt2.config._attn_implementation == before


def test_models_switched_and_run_from_several_threads(tiny_model_dir):
    """Four models, each switched and run in its own thread at once (as rollout actors do):
    every one gives the single-threaded logits. (They are loaded first, one by one:
    transformers' ``from_pretrained`` itself is not safe to run from several threads.)"""
    ids, mask = _padded_batch(load_model(tiny_model_dir, "float32").config.vocab_size)
    reference = load_model(tiny_model_dir, "float32")
    use_cpu_bf16_attention(reference)
    with torch.no_grad():
        expected = reference(input_ids=ids, attention_mask=mask).logits
    models = [load_model(tiny_model_dir, "float32") for _ in range(4)]
    results: list[torch.Tensor | BaseException] = [None] * 4  # type: ignore[list-item]

    def work(slot: int) -> None:
        try:
            model = models[slot]
            use_cpu_bf16_attention(model)
            with torch.no_grad():
                results[slot] = model(input_ids=ids, attention_mask=mask).logits
        except BaseException as exc:  # reported below
            results[slot] = exc

    threads = [threading.Thread(target=work, args=(slot,)) for slot in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for result in results:
        assert isinstance(result, torch.Tensor), result
        torch.testing.assert_close(result, expected)
