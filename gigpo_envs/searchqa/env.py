"""``gigpo/SearchQA-v0``: answer a question with the help of a search engine (Search-R1 style).

Each episode is one question. Every turn the agent writes either ``<search>query</search>``
(the next observation shows the top ``k`` passages inside ``<information>...</information>``)
or ``<answer>text</answer>`` (the episode ends: reward 1 for an exact match with any gold
answer after SQuAD normalisation, else 0; ``info["f1"]`` holds the token F1). By default
the protocol is Search-R1's: the first complete tag of a response is its action, and
passages are written as its ``_passages2string`` writes them (``protocol="strict"``: one
tag per response, whitespace collapsed, passages cut to ``max_passage_chars``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

from gigpo_envs.arguments import MAX_STEPS_LIMIT, check_int, check_path, check_str, check_type
from gigpo_envs.base import OBSERVATION_MAX_LENGTH, TextEnv
from gigpo_envs.searchqa.answers import exact_match, token_f1
from gigpo_envs.searchqa.datasets import QAItem, load_questions
from gigpo_envs.searchqa.parsing import PROTOCOLS, SearchAnswerParser
from gigpo_envs.searchqa.retriever import (
    BackendRetriever,
    Passage,
    RemoteRetriever,
    Retriever,
    corpus_backend,
)
from gigpo_envs.searchqa.templates import SEARCHQA_TEMPLATE

#: The longest observation (and passage) a SearchQA env may be built for: a million
#: characters is far beyond any model's context, so a larger value is a typo.
MAX_OBSERVATION_CHARS = 1_000_000


class UnicodeText(spaces.Text):
    """A :class:`gymnasium.spaces.Text` that holds any string up to ``max_length`` characters.

    Passages and questions are Wikipedia text (accents, dashes); ``sample()`` still draws
    from the printable ASCII characters.
    """

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length


def search_r1_passages(passages: Sequence[Passage]) -> str:
    """Passages exactly as Search-R1's ``_passages2string`` writes them (``generation.py``).

    For each passage ``i`` (from 1): ``Doc i(Title: <first line>) <the other lines>`` and a
    newline; the first line of a wiki-18 passage is its quoted title, kept with its quotes.
    """
    out = []
    for number, passage in enumerate(passages, start=1):
        title, _, text = passage.contents.partition("\n")
        out.append(f"Doc {number}(Title: {title}) {text}\n")
    return "".join(out)


def format_passages(passages: Sequence[Passage], max_chars: int) -> str:
    """The ``strict`` protocol's rendering: ``Doc i (Title: t) text`` lines, whitespace
    collapsed, each cut to ``max_chars``."""
    lines = []
    for number, passage in enumerate(passages, start=1):
        first, newline, rest = passage.contents.partition("\n")
        title, text = (first.strip().strip('"'), rest) if newline else ("", first)
        text = " ".join(text.split())
        if len(text) > max_chars:
            text = text[: max(max_chars - 3, 0)].rstrip() + "..."
        lines.append(f"Doc {number} (Title: {title}) {text}")
    return "\n".join(lines)


class SearchQAEnv(TextEnv):
    """Search-augmented question answering over a question file and a retriever.

    Observation: ``Question: ...``, then after a search the top passages inside
    ``<information>...</information>``; after an answer, the answer given.

    Actions: ``<search>query</search>`` or ``<answer>text</answer>``, exactly one per turn
    (see :class:`~gigpo_envs.searchqa.parsing.SearchAnswerParser`); anything else is an
    invalid no-op.

    The episode with seed ``s`` asks question ``s % len(questions)``, so seeds ``0..n-1``
    walk through the file in order. The anchor (``state_key``) is a digest of the question
    index and the ids of the passages retrieved so far, search by search.

    Args:
      dataset: a question file (see :func:`~gigpo_envs.searchqa.datasets.load_questions`) or
        a list of :class:`QAItem`.
      corpus: a JSON-lines corpus or an index directory, searched in-process (a bm25s index
        built once per process and cached).
      retriever_url: a running retrieval server, instead of ``corpus``.
      retriever: any object with ``search(query, k) -> [Passage]`` or a
        ``retrieval_server.backends.SearchBackend``, instead of ``corpus``.
      topk: passages per search.
      max_steps: turns before the episode is truncated (each search, answer or invalid
        response is a turn), as in every gigpo env.
      max_turns: Search-R1's name for ``max_steps``, accepted as an alias (not both).
      protocol: ``"search-r1"`` (default) or ``"strict"``: how responses are read (see
        :mod:`gigpo_envs.searchqa.parsing`) and how passages are written.
      max_passage_chars: under ``strict``, each passage's text is cut to this many
        characters (default 1000); under ``search-r1`` passages are not cut (None).
      max_observation_chars: the longest observation; passages are cut further to fit.
        ``256 .. MAX_OBSERVATION_CHARS``; ``max_passage_chars`` is ``16 ..`` that bound.
      client_options: ``RetrievalClient`` options (``timeout_s``, ``retries``, ...).
      invalid_action_penalty, action_parser, render_mode: as in :class:`TextEnv`.

    A retrieval server that cannot be reached raises ``RetrievalError`` from ``step``: a
    broken retriever is not the agent's fault and must not be scored as a wrong answer.
    """

    env_name = "SearchQA"
    prompt_template = SEARCHQA_TEMPLATE

    def __init__(
        self,
        dataset: str | os.PathLike[str] | Sequence[QAItem],
        corpus: str | os.PathLike[str] | None = None,
        retriever_url: str | None = None,
        retriever: Any = None,
        *,
        topk: int = 3,
        max_steps: int | None = None,
        max_turns: int | None = None,
        protocol: str = "search-r1",
        max_passage_chars: int | None = None,
        max_observation_chars: int = OBSERVATION_MAX_LENGTH,
        client_options: dict[str, Any] | None = None,
        invalid_action_penalty: float = 0.0,
        action_parser: SearchAnswerParser | None = None,
        render_mode: str | None = None,
    ) -> None:
        if action_parser is not None:
            check_type("action_parser", action_parser, SearchAnswerParser, "a SearchAnswerParser")
        check_str("protocol", protocol, PROTOCOLS)
        for name, steps in (("max_steps", max_steps), ("max_turns", max_turns)):
            if steps is not None:
                check_int(name, steps, 1, MAX_STEPS_LIMIT)  # by the name the caller used
        topk = check_int("topk", topk, 1, 100)
        if max_passage_chars is not None:
            check_int("max_passage_chars", max_passage_chars, 16, MAX_OBSERVATION_CHARS)
        check_int("max_observation_chars", max_observation_chars, 256, MAX_OBSERVATION_CHARS)
        check_type("dataset", dataset, (str, os.PathLike, Sequence), "a path or a list of QAItem")
        if corpus is not None:
            check_path("corpus", corpus)
        if retriever_url is not None:
            check_str("retriever_url", retriever_url)
        if client_options is not None:
            check_type("client_options", client_options, dict, "a dict or None")
        parser = action_parser or SearchAnswerParser(protocol=protocol)
        if parser.protocol != protocol:
            raise ValueError(
                f"protocol={protocol!r} but action_parser.protocol={parser.protocol!r}"
            )
        if max_passage_chars is None:
            max_passage_chars = 1000 if protocol == "strict" else None
        if max_steps is not None and max_turns is not None:
            raise ValueError("give max_steps or its alias max_turns, not both")
        super().__init__(
            max_steps=next((n for n in (max_steps, max_turns) if n is not None), 4),
            invalid_action_penalty=invalid_action_penalty,
            action_parser=parser,
            render_mode=render_mode,
        )
        if sum(x is not None for x in (corpus, retriever_url, retriever)) != 1:
            raise ValueError("give exactly one of corpus=, retriever_url= or retriever=")
        if protocol == "search-r1" and max_passage_chars is not None:
            raise ValueError("max_passage_chars applies to protocol='strict' only")
        if isinstance(dataset, str | os.PathLike):
            self.questions = load_questions(dataset)
        else:
            self.questions = list(dataset)
            if not self.questions or not all(isinstance(q, QAItem) for q in self.questions):
                raise ValueError("dataset must be a path or a non-empty list of QAItem")
        if corpus is not None:
            self.retriever: Retriever = BackendRetriever(corpus_backend(corpus))
        elif retriever_url is not None:
            self.retriever = RemoteRetriever(retriever_url, **(client_options or {}))
        elif hasattr(retriever, "document") and hasattr(retriever, "name"):
            self.retriever = BackendRetriever(retriever)
        else:
            self.retriever = retriever
        self.topk = int(topk)
        self.protocol = protocol
        self.max_passage_chars = None if max_passage_chars is None else int(max_passage_chars)
        self.max_observation_chars = int(max_observation_chars)
        self.observation_space = UnicodeText(self.max_observation_chars, min_length=1)
        self.action_space = UnicodeText(parser.max_response_chars, min_length=0)
        self.parser: SearchAnswerParser = parser
        self._index = 0
        self._retrieved: list[list[str]] = []
        self._passages: list[Passage] = []
        self._answer: str | None = None
        self._extra: dict[str, Any] = {}

    @property
    def item(self) -> QAItem:
        """The current question."""
        return self.questions[self._index]

    # ----------------------------------------------------------------- game hooks
    def _game_reset(self, rng: np.random.Generator) -> None:
        del rng  # the question is the seed's, in file order
        self._index = int(self._episode_seed or 0) % len(self.questions)
        self._retrieved, self._passages, self._answer = [], [], None
        self._extra = {"question_id": self.item.id}

    def parse_game_action(self, action_text: str) -> str | None:
        return action_text if self.parser.split(action_text) is not None else None

    def _game_step(self, action: str) -> tuple[float, bool]:
        kind, text = self.parser.split(action)  # type: ignore[misc]
        if kind == "search":
            self._passages = list(self.retriever.search(text, self.topk))[: self.topk]
            self._retrieved.append([p.doc_id for p in self._passages])
            self._extra = {"query": text, "doc_ids": self._retrieved[-1]}
            return 0.0, False
        self._answer = text
        em = exact_match(text, self.item.answers)
        self._won = em == 1.0
        self._extra = {
            "answer": text,
            "em": em,
            "f1": token_f1(text, self.item.answers),
            "golden_answers": list(self.item.answers),
        }
        return em, True

    def _game_observation(self) -> str:
        question = f"Question: {self.item.question}"
        if len(question) > self.max_observation_chars // 2:
            question = question[: self.max_observation_chars // 2 - 3] + "..."
        if self._answer is not None:
            answer = self._answer[: self.max_observation_chars - len(question) - 20]
            return f"{question}\nYour answer: {answer}"
        if not self._retrieved:
            return question
        if self.protocol == "search-r1":
            # Search-R1 shows <information>{passages.strip()}</information>; a passage text
            # that would overflow the observation is cut there (documented), tags kept.
            body = search_r1_passages(self._passages).strip()
            room = self.max_observation_chars - len(question) - len("\n<information></information>")
            return f"{question}\n<information>{body[: max(room, 0)]}</information>"
        if not self._passages:
            return f"{question}\n<information>No results.</information>"
        room = self.max_observation_chars - len(question) - 40
        per_passage = room // len(self._passages) - 30
        budget = max(min(self.max_passage_chars or per_passage, per_passage), 1)
        body = format_passages(self._passages, budget)
        return f"{question}\n<information>{body}</information>"[: self.max_observation_chars]

    def _game_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {
            "question_index": self._index,
            "question_id": self.item.id,
            "retrieved": [list(ids) for ids in self._retrieved],
        }
        if self._answer is not None:
            state["answer"] = self._answer
        return state

    def _game_load(self, game_state: dict[str, Any]) -> None:
        index = int(game_state["question_index"])
        if not 0 <= index < len(self.questions):
            raise ValueError(f"question_index {index} out of range")
        if game_state.get("question_id") != self.questions[index].id:
            raise ValueError("the state belongs to another question file")
        retrieved = game_state["retrieved"]
        if not isinstance(retrieved, list) or not all(
            isinstance(ids, list) and all(isinstance(i, str) for i in ids) for ids in retrieved
        ):
            raise ValueError("'retrieved' must be a list of lists of document ids")
        answer = game_state.get("answer")
        if answer is not None and not isinstance(answer, str):
            raise ValueError("'answer' must be a string")
        self._index, self._retrieved, self._answer = index, [list(x) for x in retrieved], answer

    # ----------------------------------------------------------------- state with passages
    def state_dict(self) -> dict[str, Any]:
        """The base state plus the passages on screen (they are not part of the anchor)."""
        state = super().state_dict()
        state["passages"] = [list(p) for p in self._passages]
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores a :meth:`state_dict`; ``ValueError`` if it is malformed or inconsistent."""
        try:
            restored = [Passage(str(d), str(c), float(s)) for d, c, s in state["passages"]]
            retrieved = state["game"]["retrieved"]
            last = list(retrieved[-1]) if retrieved else []
        except (KeyError, TypeError, ValueError, IndexError) as error:
            raise ValueError(f"malformed SearchQA state_dict: {error!r}") from error
        if [p.doc_id for p in restored] != last:
            raise ValueError("the passages in the state do not match the last retrieved ids")
        super().load_state_dict(state)
        self._passages = restored
        self._extra = {}

    # ----------------------------------------------------------------- gymnasium API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        observation, info = super().reset(seed=seed, options=options)
        info.update(self._extra)
        return observation, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self._extra = {}
        observation, reward, terminated, truncated, info = super().step(action)
        info.update(self._extra)
        return observation, reward, terminated, truncated, info

    def render_legend(self) -> str:
        return f"Each search shows the top {self.topk} passages."
