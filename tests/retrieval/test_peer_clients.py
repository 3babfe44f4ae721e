"""The four search-agent projects' clients, as their code sends and reads, against a real server.

Their clients do not install here, so each is written down from reading its code (versions
in ``docs/notes/retrieval.md``): the body it posts to ``/retrieve`` for a turn's queries, the edge
cases it really sends, and the path by which it reads the answer. None of them reads more
than ``result[i][j]["document"]["contents"]``; Search-R1 crashes on anything but a 200 with
``result``; verl and SkyRL retry a 500/502/503/504 ten times, so ordinary input must never
get one.

* Search-R1 ``generation.py``: ``{"queries": [...], "topk": 3, "return_scores": true}`` for
  every search of the batch, ``[]`` when no rollout searched, ``""`` for ``<search></search>``;
  one result per query, in order. ``infer.py``: the same body with one query.
* verl ``search_r1_like_utils.py``: the same body, with ``Accept: application/json``.
* SkyRL ``skyrl_gym/tools/search.py`` (and verl-agent's copy of it): one query as
  ``{"query": "...", "topk": 3, "return_scores": true}``, read as a list of result lists.
  SkyRL's ``local_search.py``: ``{"queries": [q], ...}``, asserting one result list.
"""

from __future__ import annotations

import json

import pytest
from retrieval_helpers import post_raw

from retrieval_server.backends import load_backend

QUERIES = ["Pavia Cathedral", "", "who founded the Bank of England", "   "]


@pytest.fixture(scope="module")
def local(bm25s_index):
    return load_backend(bm25s_index)


def _expected(local, queries, k=3):
    return [
        [local.document(h.doc_id)["contents"] for h in hits] if q.strip() else []
        for q, hits in zip(queries, local.search([q or "" for q in queries], k), strict=True)
    ]


def _send(url, body, headers=None):
    status, answer = post_raw(url, json.dumps(body).encode(), headers)
    assert status == 200, (body, answer)  # Search-R1 crashes, verl and SkyRL retry, otherwise
    return answer


def _contents(result_list):
    return [item["document"]["contents"] for item in result_list]


def test_search_r1s_training_loop(bm25s_server, local):
    answer = _send(bm25s_server.url, {"queries": QUERIES, "topk": 3, "return_scores": True})
    results = answer["result"]
    assert len(results) == len(QUERIES)  # its assert: one result per search action
    assert [_contents(r) for r in results] == _expected(local, QUERIES)
    assert all(isinstance(item["score"], float) for r in results for item in r)
    # a turn where no rollout searched
    assert _send(bm25s_server.url, {"queries": [], "topk": 3, "return_scores": True}) == {
        "result": []
    }


def test_search_r1s_infer_script(bm25s_server, local):
    for query in ("Pavia Cathedral", ""):
        answer = _send(bm25s_server.url, {"queries": [query], "topk": 3, "return_scores": True})
        assert _contents(answer["result"][0]) == _expected(local, [query])[0]


def test_verls_search_tool(bm25s_server, local):
    headers = {"Accept": "application/json"}
    body = {"queries": QUERIES[:3], "topk": 3, "return_scores": True}
    answer = _send(bm25s_server.url, body, headers)
    results = answer.get("result", [])
    assert [_contents(r) for r in results] == _expected(local, QUERIES[:3])


@pytest.mark.parametrize("query", ["Pavia Cathedral", "", "   "])
def test_skyrl_and_verl_agents_single_query_form(bm25s_server, local, query):
    answer = _send(bm25s_server.url, {"query": query, "topk": 3, "return_scores": True})
    results = answer.get("result", [])
    assert len(results) == 1  # they iterate a list of result lists
    assert [_contents(r) for r in results] == _expected(local, [query])


def test_skyrl_agents_local_search(bm25s_server, local):
    body = {"queries": ["who founded the Bank of England"], "topk": 3, "return_scores": True}
    answer = _send(bm25s_server.url, body)
    assert "result" in answer and len(answer["result"]) == 1
    assert _contents(answer["result"][0]) == _expected(local, body["queries"])[0]
