"""gigpo/SearchQA-v0 end to end against a real retrieval server, and every backend served."""

from __future__ import annotations

import gymnasium as gym
import pytest
from retrieval_helpers import ServerProcess, title_of

import gigpo_envs  # noqa: F401  (registers the environments)
from retrieval_server.backends import load_backend
from retrieval_server.client import RetrievalClient, RetrievalError


def test_env_against_the_server_matches_the_in_process_env(bm25s_server, searchqa_dir):
    dataset, corpus = searchqa_dir / "nq_test16.jsonl", searchqa_dir / "wiki_sample_1000.jsonl"
    remote = gym.make("gigpo/SearchQA-v0", dataset=dataset, retriever_url=bm25s_server.url)
    local = gym.make("gigpo/SearchQA-v0", dataset=dataset, corpus=corpus)
    script = [
        "<search>Pavia Cathedral</search>",
        "nothing to do",
        "<think>more</think><search>Evan Morris lobbyist</search>",
        "<answer>Wilhelm Conrad Röntgen</answer>",
    ]
    for seed in (0, 9):
        assert remote.reset(seed=seed) == local.reset(seed=seed)
        for response in script:
            got, expected = remote.step(response), local.step(response)
            assert got[0] == expected[0]  # the same passages, in the same order
            assert got[1:4] == expected[1:4]
            assert got[4]["anchor"] == expected[4]["anchor"]
            if got[2] or got[3]:
                break
    assert remote.unwrapped.state_dict()["game"]["retrieved"][0][0] == "4"


def test_env_reports_an_unreachable_server(searchqa_dir):
    env = gym.make(
        "gigpo/SearchQA-v0",
        dataset=searchqa_dir / "nq_test16.jsonl",
        retriever_url="http://127.0.0.1:9",
        client_options={"retries": 1, "backoff_s": 0.01, "timeout_s": 2},
    )
    env.reset(seed=0)
    with pytest.raises(RetrievalError):
        env.step("<search>anything</search>")
    _, _, _, _, info = env.step("<answer>no search needed</answer>")
    assert info["em"] == 0.0


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["pyserini", "dense"])
def test_each_backend_served_over_http(backend, index_dirs, unique_title_docs):
    index = index_dirs(backend)
    local = load_backend(index)
    server = ServerProcess(index)
    try:
        client = RetrievalClient(server.url, timeout_s=120)
        assert client.health()["backend"] == backend
        titles = [title_of(doc) for doc in unique_title_docs]
        rows = client.retrieve(titles, topk=3, return_scores=True)
        top1 = [row[0]["document"]["id"] if row else None for row in rows]
        hits = sum(found == doc["id"] for found, doc in zip(top1, unique_title_docs, strict=True))
        assert hits >= 0.95 * len(titles)
        expected = local.search(titles, 3)
        assert [[e["document"]["id"] for e in row] for row in rows] == [
            [h.doc_id for h in row] for row in expected
        ]
        single = client.retrieve(["Evan Morris"], topk=1)[0]
        assert single[0]["id"] == "0"
    finally:
        server.stop()
