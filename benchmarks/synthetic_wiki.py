"""A generated corpus in the wiki-18 layout, for retrieval benchmarks at any size.

Search-R1's corpus (wiki-18, DPR's split of the December 2018 English Wikipedia) is 21M
passages of exactly 100 whitespace words under a title line: ``{"id": "N", "contents":
'"Title"\\n' + text}``. It cannot be downloaded here, so :func:`generate` writes passages of
the same shape whose word statistics follow the real sample in ``data/samples/searchqa``
(1,000 wiki-18 passages):

* every text is 100 words; titles have the sample's length distribution (1-11 words);
* words follow a Zipf-Mandelbrot law ``p(r) ~ (r + 2.7) ** -1.2`` over 20M ranks; the
  sample's own words, most frequent first, take the first ranks (so real questions find real
  words), and the tail are pronounceable made-up words (syllables);
* burstiness: 20% of a passage's words come from its own "topic" of 12 words drawn from the
  tail (rank > 300), as names and subject terms repeat within a real passage.

The constants were chosen (a small grid) to match the sample at 1,000 passages on what
drives a BM25 index, as ``python benchmarks/synthetic_wiki.py --check`` measures with the
bm25s backend's analyzer: distinct terms per passage (the index's nonzeros) 56.6 against
the sample's 55.7, and a vocabulary of 19,161 terms against 11,855 (a heavier tail than
real text: more distinct terms, so memory is overstated rather than understated).

    python benchmarks/synthetic_wiki.py --docs 1000000 --out wiki_1m.jsonl [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import os
from collections import Counter
from pathlib import Path

import numpy as np

SAMPLE = Path(__file__).resolve().parents[1] / "data/samples/searchqa/wiki_sample_1000.jsonl"
WORDS_PER_PASSAGE = 100
ZIPF_S, ZIPF_Q, VOCAB = 1.2, 2.7, 20_000_000
TOPIC_SHARE, TOPIC_WORDS, TOPIC_MIN_RANK = 0.2, 12, 300
CHUNK = 50_000  # passages drawn at a time (part of what a seed means)
SYLLABLES = [c + v for c in "bdfghklmnprstvz" for v in "aeiou"] + ["an", "er", "in", "on", "or"]


class SampleStats:
    """The real sample's words (most frequent first) and title lengths."""

    def __init__(self, path: Path = SAMPLE) -> None:
        counts: Counter[str] = Counter()
        title_lengths = []
        for line in open(path, encoding="utf-8"):
            title, _, text = json.loads(line)["contents"].partition("\n")
            counts.update(text.split())
            title_lengths.append(len(title.strip('"').split()))
        self.words = [w for w, _ in counts.most_common()]
        self.title_lengths = np.asarray(title_lengths)


def made_up_word(rank: int) -> str:
    """A pronounceable word for ``rank`` (distinct per rank, 2-5 syllables)."""
    n, parts = rank, []
    while True:
        n, digit = divmod(n, len(SYLLABLES))
        parts.append(SYLLABLES[digit])
        if n == 0:
            break
    if len(parts) == 1:
        parts.append("a")
    return "".join(parts)


def _cdf() -> np.ndarray:
    weights = (np.arange(1, VOCAB + 1, dtype=np.float64) + ZIPF_Q) ** -ZIPF_S
    cdf = np.cumsum(weights)
    return cdf / cdf[-1]


def generate(
    num_docs: int,
    out: str | os.PathLike[str],
    seed: int = 0,
    stats: SampleStats | None = None,
) -> Path:
    """Writes ``num_docs`` passages to ``out`` (JSON lines, ids ``"0"``..); returns the path.

    The same ``(num_docs, seed)`` always writes the same file.
    """
    if num_docs < 1:
        raise ValueError(f"num_docs must be >= 1, got {num_docs}")
    stats = stats or SampleStats()
    rng = np.random.default_rng(seed)
    cdf = _cdf()
    tail_start = cdf[TOPIC_MIN_RANK - 1]
    real = np.asarray(stats.words, dtype=object)
    out = Path(out)
    with open(out, "w", encoding="utf-8") as handle:
        for start in range(0, num_docs, CHUNK):
            n = min(CHUNK, num_docs - start)
            ranks = np.searchsorted(cdf, rng.random((n, WORDS_PER_PASSAGE)))
            topics = np.searchsorted(cdf, rng.uniform(tail_start, 1.0, (n, TOPIC_WORDS)))
            pick = rng.integers(0, TOPIC_WORDS, (n, WORDS_PER_PASSAGE))
            from_topic = rng.random((n, WORDS_PER_PASSAGE)) < TOPIC_SHARE
            ranks = np.where(from_topic, np.take_along_axis(topics, pick, axis=1), ranks)
            title_lengths = rng.choice(stats.title_lengths, n)
            title_ranks = np.take_along_axis(
                topics, rng.integers(0, TOPIC_WORDS, (n, int(title_lengths.max()))), axis=1
            )
            used, inverse = np.unique(np.concatenate([ranks.ravel(), title_ranks.ravel()]),
                                      return_inverse=True)  # fmt: skip
            words = np.asarray(
                [real[r] if r < len(real) else made_up_word(int(r)) for r in used], dtype=object
            )
            text_words = words[inverse[: ranks.size]].reshape(ranks.shape)
            title_words = words[inverse[ranks.size :]].reshape(title_ranks.shape)
            for i in range(n):
                title = " ".join(w.capitalize() for w in title_words[i, : title_lengths[i]])
                contents = f'"{title}"\n' + " ".join(text_words[i])
                handle.write(json.dumps({"id": str(start + i), "contents": contents}) + "\n")
    return out


def corpus_stats(path: str | os.PathLike[str], limit: int = 1000) -> dict:
    """Distinct analyzed terms per passage and the vocabulary of the first ``limit``
    passages, as the bm25s backend's analyzer sees them."""
    from retrieval_server.backends.bm25s_backend import Analyzer

    analyzer, vocab, distinct = Analyzer(), set(), []
    for number, line in enumerate(open(path, encoding="utf-8")):
        if number >= limit:
            break
        terms = analyzer(json.loads(line)["contents"])
        distinct.append(len(set(terms)))
        vocab.update(terms)
    return {"distinct_terms_per_passage": float(np.mean(distinct)), "vocabulary": len(vocab)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--out", default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--check", action="store_true", help="compare 1,000 passages with the sample"
    )
    args = parser.parse_args()
    if args.check:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            generated = generate(1000, Path(tmp) / "gen.jsonl", seed=args.seed)
            print(
                json.dumps({"sample": corpus_stats(SAMPLE), "generated": corpus_stats(generated)})
            )
        return
    if args.out is None:
        parser.error("--out is required")
    print(generate(args.docs, args.out, seed=args.seed))


if __name__ == "__main__":
    main()
