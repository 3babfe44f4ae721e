"""Answer scoring for question answering: SQuAD normalisation, exact match and token F1."""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower-cases ``text``, drops punctuation and the articles a/an/the, collapses spaces."""
    text = "".join(c for c in text.lower() if c not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, golden_answers: Iterable[str]) -> float:
    """Returns 1.0 if ``prediction`` equals any gold answer after normalisation, else 0.0."""
    predicted = normalize_answer(prediction)
    return float(any(predicted == normalize_answer(gold) for gold in golden_answers))


def token_f1(prediction: str, golden_answers: Iterable[str]) -> float:
    """Returns the best token-level F1 in ``[0, 1]`` of ``prediction`` against the gold answers."""
    predicted = normalize_answer(prediction).split()
    best = 0.0
    for gold in golden_answers:
        reference = normalize_answer(gold).split()
        common = sum((Counter(predicted) & Counter(reference)).values())
        if not predicted or not reference:
            score = float(predicted == reference)
        elif common == 0:
            score = 0.0
        else:
            precision, recall = common / len(predicted), common / len(reference)
            score = 2 * precision * recall / (precision + recall)
        best = max(best, score)
    return best
