"""The generated wiki-18-like corpus of the wiki-scale benchmark: its layout and statistics."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import synthetic_wiki  # noqa: E402

from retrieval_server.corpus import read_corpus, split_title  # noqa: E402


def test_the_corpus_has_wiki18s_layout_and_is_reproducible(tmp_path):
    first = synthetic_wiki.generate(300, tmp_path / "a.jsonl", seed=3)
    again = synthetic_wiki.generate(300, tmp_path / "b.jsonl", seed=3)
    other = synthetic_wiki.generate(300, tmp_path / "c.jsonl", seed=4)
    assert first.read_bytes() == again.read_bytes() != other.read_bytes()
    docs = read_corpus(first)  # the server's own reader accepts it
    assert [d["id"] for d in docs] == [str(i) for i in range(300)]
    sample_titles = set(synthetic_wiki.SampleStats().title_lengths.tolist())
    for doc in docs:
        assert doc["contents"].startswith('"')
        title, text = split_title(doc["contents"])
        assert len(text.split()) == 100 and title
        assert len(title.split()) in sample_titles


def test_its_index_statistics_are_close_to_the_real_samples(tmp_path):
    generated = synthetic_wiki.generate(1000, tmp_path / "g.jsonl", seed=0)
    ours = synthetic_wiki.corpus_stats(generated)
    real = synthetic_wiki.corpus_stats(synthetic_wiki.SAMPLE)
    ratio = ours["distinct_terms_per_passage"] / real["distinct_terms_per_passage"]
    assert 0.95 < ratio < 1.05  # the index's nonzeros per passage
    assert real["vocabulary"] <= ours["vocabulary"] <= 2 * real["vocabulary"]
    # real questions find real words in it
    words = set(json.loads(generated.read_text().splitlines()[0])["contents"].split())
    assert words & set(synthetic_wiki.SampleStats().words[:200])
