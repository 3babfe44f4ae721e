"""``gigpo/SearchQA-v0``: search-augmented question answering (Search-R1's setting).

env = gym.make("gigpo/SearchQA-v0", dataset="nq_test.jsonl", corpus="wiki.jsonl")
env = gym.make("gigpo/SearchQA-v0", dataset="nq_test.jsonl", retriever_url="http://...")
"""

from __future__ import annotations

from gigpo_envs.searchqa.answers import exact_match, normalize_answer, token_f1
from gigpo_envs.searchqa.datasets import DatasetError, QAItem, load_questions
from gigpo_envs.searchqa.env import SearchQAEnv, search_r1_passages
from gigpo_envs.searchqa.parsing import SearchAnswerParser
from gigpo_envs.searchqa.retriever import Passage, corpus_backend
from gigpo_envs.searchqa.templates import SEARCHQA_TEMPLATE

__all__ = [
    "SEARCHQA_TEMPLATE",
    "DatasetError",
    "Passage",
    "QAItem",
    "SearchAnswerParser",
    "SearchQAEnv",
    "corpus_backend",
    "exact_match",
    "load_questions",
    "normalize_answer",
    "search_r1_passages",
    "token_f1",
]
