"""gigpo/SearchQA-v0 with an in-process bm25s index over the real wiki sample."""

from __future__ import annotations

import csv
import json

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import given, settings
from hypothesis import strategies as st
from sample_data import sample_dir

import gigpo_envs  # noqa: F401  (registers the environments)
from gigpo_envs import HistoryPrompt, make_group_vec
from gigpo_envs.searchqa import (
    DatasetError,
    Passage,
    QAItem,
    SearchAnswerParser,
    exact_match,
    load_questions,
    normalize_answer,
    search_r1_passages,
    token_f1,
)

SEARCHQA = sample_dir("searchqa", "wiki_sample_1000.jsonl")
CORPUS = SEARCHQA / "wiki_sample_1000.jsonl"
NQ = SEARCHQA / "nq_test16.jsonl"


def make(**kwargs) -> gym.Env:
    kwargs.setdefault("dataset", NQ)
    kwargs.setdefault("corpus", CORPUS)
    return gym.make("gigpo/SearchQA-v0", **kwargs)


# ------------------------------------------------------------------ answers
def test_squad_normalisation():
    assert normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
    assert normalize_answer("  A cat, an apple and THE dog. ") == "cat apple and dog"
    assert exact_match("the Beatles", ["Beatles"]) == 1.0
    assert exact_match("Beatles band", ["Beatles"]) == 0.0
    assert exact_match("Röntgen", ["Wilhelm Conrad Röntgen", "röntgen"]) == 1.0
    assert token_f1("Wilhelm Röntgen", ["Wilhelm Conrad Röntgen"]) == pytest.approx(0.8)
    assert token_f1("nothing alike", ["Paris", "France"]) == 0.0
    assert token_f1("the", ["a"]) == 1.0  # both normalise to nothing


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40), st.lists(st.text(max_size=40), min_size=1, max_size=3))
def test_f1_is_one_exactly_on_exact_match(prediction, golds):
    em, f1 = exact_match(prediction, golds), token_f1(prediction, golds)
    assert 0.0 <= f1 <= 1.0
    if em == 1.0:
        assert f1 == 1.0
    assert exact_match(prediction, [prediction]) == 1.0


# ------------------------------------------------------------------ parsing
# Search-R1's reading (its generation.py, postprocess_predictions): the first complete
# <search>...</search> or <answer>...</answer> wins, its text stripped; nothing else counts.
@pytest.mark.parametrize(
    "response, expected",
    [
        (
            "<search>first nobel prize physics</search>",
            "<search>first nobel prize physics</search>",
        ),
        ("<think>x</think>\n<search>  two\n words </search>", "<search>two\n words</search>"),
        ("<answer>Wilhelm Röntgen</answer>", "<answer>Wilhelm Röntgen</answer>"),
        ("<search>a</search> then <search>b</search>", "<search>a</search>"),
        ("<search>a</search><answer>b</answer>", "<search>a</search>"),  # first tag wins
        ("<answer>b</answer> or <search>a</search>", "<answer>b</answer>"),
        ("<search>a <answer>b</answer></search>", "<search>a <answer>b</answer></search>"),
        ("<search>   </search>", "<search></search>"),  # a search for nothing
        ("< Search >a</SEARCH>", None),  # Search-R1's tags are exact
        ("no tags at all", None),
        ("<search>unclosed", None),
        ("<search>" + "q" * 600 + "</search>", None),
        ("x" * 9000, None),
        (None, None),
        (b"<answer>bytes</answer>", "<answer>bytes</answer>"),
    ],
)
def test_parser_reads_as_search_r1_does(response, expected):
    assert SearchAnswerParser().extract(response) == expected


@pytest.mark.parametrize(
    "response, expected",
    [
        ("<think>x</think>\n< Search >  two\n words </SEARCH>", "<search>two words</search>"),
        ("<search>a</search> then <search>b</search>", "<search>a</search>"),
        ("<search>a</search><answer>b</answer>", None),  # both: invalid
        ("<search>   </search>", None),
        ("<answer></answer>", None),
        ("no tags at all", None),
    ],
)
def test_strict_parser(response, expected):
    assert SearchAnswerParser(protocol="strict").extract(response) == expected


def test_parser_require_think_and_split():
    strict = SearchAnswerParser(require_think=True)
    assert strict.extract("<search>q</search>") is None
    assert strict.extract("<think>hm</think><search>q</search>") == "<search>q</search>"
    parser = SearchAnswerParser()
    assert parser.split("<answer>x y</answer>") == ("answer", "x y")
    assert parser.split("<search>q</search>") == ("search", "q")
    assert parser.split("<search></search>") == ("search", "")
    assert SearchAnswerParser(protocol="strict").split("<search></search>") is None
    assert parser.split("search q") is None
    assert parser.format_example("who") == "<search>who</search>"
    with pytest.raises(ValueError):
        SearchAnswerParser(answer_tag="search")
    with pytest.raises(ValueError, match="protocol"):
        SearchAnswerParser(protocol="react")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300), st.sampled_from(["search-r1", "strict"]))
def test_parser_never_raises(text, protocol):
    parser = SearchAnswerParser(protocol=protocol)
    parsed = parser.extract(text)
    assert parsed is None or parser.split(parsed) is not None


# ------------------------------------------------------------------ datasets
def test_real_question_files():
    nq = load_questions(NQ)
    assert nq[0] == QAItem(
        "test_0", "who got the first nobel prize in physics", ("Wilhelm Conrad Röntgen",)
    )
    assert len({item.id for item in nq}) == len(nq) >= 16
    hotpot = load_questions(SEARCHQA / "hotpot_dev_simplified.json")
    assert len(hotpot) == 7405 and hotpot[0].answers == ("yes",)
    bamboogle = load_questions(SEARCHQA / "bamboogle.csv")
    assert len(bamboogle) == 125 and bamboogle[1].answers == ("Titan IIIE",)
    assert all(item.question and item.answers for item in hotpot + bamboogle)


def test_parquet_in_the_search_r1_layout(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [json.loads(line) for line in NQ.read_text().splitlines()]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "nq.parquet")
    assert load_questions(tmp_path / "nq.parquet") == load_questions(NQ)
    (tmp_path / "broken.parquet").write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(DatasetError, match="cannot read the parquet"):
        load_questions(tmp_path / "broken.parquet")


@pytest.mark.parametrize(
    "name, content, message",
    [
        (
            "q.jsonl",
            '{"question": "q", "golden_answers": ["a"]}\n{broken\n',
            "q.jsonl:2: not valid JSON",
        ),
        ("q.jsonl", '{"question": "q"}\n', "no 'golden_answers'"),
        ("q.jsonl", '{"question": "", "answer": "a"}\n', "non-empty string"),
        ("q.jsonl", '{"question": "q", "golden_answers": []}\n', "non-empty list"),
        ("q.jsonl", '{"question": "q", "golden_answers": [{"x": 1}]}\n', "is not a string"),
        ("q.jsonl", "[1, 2]\n", "expected an object"),
        ("q.jsonl", "\n\n", "holds no questions"),
        ("q.json", '{"question": "q"}', "JSON list"),
        ("q.json", "[", "not valid JSON"),
        ("q.csv", "Foo,Bar\n1,2\n", "'Question' column"),
        ("q.csv", "Question,Answer\nwho,me,extra\n", "more fields"),
        ("q.txt", "who?", "unknown question file type"),
    ],
)
def test_bad_question_files(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(DatasetError, match=message):
        load_questions(path)


def test_missing_and_non_utf8_question_files(tmp_path):
    with pytest.raises(DatasetError, match="not found"):
        load_questions(tmp_path / "nope.jsonl")
    (tmp_path / "latin.csv").write_bytes("Question,Answer\nq\xe9,a\n".encode("latin-1"))
    with pytest.raises(DatasetError, match="not UTF-8"):
        load_questions(tmp_path / "latin.csv")


# ------------------------------------------------------------------ environment
def test_check_env_passes():
    check_env(make().unwrapped)


def test_constructor_rejects_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="exactly one of"):
        gym.make("gigpo/SearchQA-v0", dataset=NQ)
    with pytest.raises(ValueError, match="exactly one of"):
        make(retriever_url="http://127.0.0.1:1")
    with pytest.raises(ValueError, match="topk"):
        make(topk=0)
    with pytest.raises(FileNotFoundError):
        make(corpus=tmp_path / "no_corpus.jsonl")
    with pytest.raises(TypeError, match="SearchAnswerParser"):
        make(action_parser=gigpo_envs.ActionParser())
    with pytest.raises(DatasetError):
        make(dataset=tmp_path / "none.jsonl")


def test_episode_search_then_answer():
    env = make()
    observation, info = env.reset(seed=0)
    assert observation == "Question: who got the first nobel prize in physics"
    assert info["question_id"] == "test_0" and info["is_action_valid"] is True
    start_anchor = info["anchor"]
    observation, reward, terminated, truncated, info = env.step(
        "<think>look it up</think><search>Evan Morris lobbyist Genentech</search>"
    )
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert observation.startswith("Question: who got")
    assert '<information>Doc 1(Title: "Evan Morris") Evan Morris Evan L. Morris' in observation
    assert observation.endswith("</information>") and observation.count("\nDoc ") == 2
    assert info["doc_ids"][0] == "0" and len(info["doc_ids"]) == 3
    assert info["query"] == "Evan Morris lobbyist Genentech"
    assert info["anchor"] != start_anchor
    observation, reward, terminated, truncated, info = env.step("<answer>Röntgen</answer>")
    assert (reward, terminated, truncated) == (0.0, True, False)
    assert info["em"] == 0.0 and info["f1"] == pytest.approx(0.5) and not info["won"]
    assert info["golden_answers"] == ["Wilhelm Conrad Röntgen"]
    with pytest.raises(RuntimeError, match="after the episode ended"):
        env.step("<answer>x</answer>")


def test_correct_answer_wins_after_normalisation():
    env = make()
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step("<answer> wilhelm conrad RÖNTGEN. </answer>")
    assert reward == 1.0 and terminated and info["won"] and info["em"] == 1.0
    assert info["action"] == "<answer>wilhelm conrad RÖNTGEN.</answer>"


def test_invalid_turns_are_no_ops_and_count_towards_max_steps():
    with pytest.raises(ValueError, match="not both"):
        make(max_steps=3, max_turns=3)
    assert make(max_turns=5).unwrapped.max_steps == 5  # Search-R1's name is an alias
    env = make(max_steps=3, protocol="strict")
    observation, info = env.reset(seed=2)
    anchor = info["anchor"]
    for response in ["<search>a</search><answer>b</answer>", "plain text"]:
        next_observation, reward, terminated, truncated, info = env.step(response)
        assert next_observation == observation and info["anchor"] == anchor
        assert info["is_action_valid"] is False and reward == 0.0 and not terminated
    _, _, terminated, truncated, info = env.step("<search>Pavia Cathedral</search>")
    assert info["is_action_valid"] and not terminated and truncated  # third turn: the limit


def test_seed_picks_the_question_in_file_order():
    env = make()
    questions = load_questions(NQ)
    for seed in [0, 5, len(questions) - 1, len(questions) + 3]:
        observation, info = env.reset(seed=seed)
        assert observation == f"Question: {questions[seed % len(questions)].question}"
    other = make()
    for seed in range(5):
        assert env.reset(seed=seed) == other.reset(seed=seed)


def test_anchor_is_question_plus_retrieved_ids():
    first, second = make(), make()
    first.reset(seed=1)
    second.reset(seed=1)
    # Different words, same passages: the same anchor state.
    _, _, _, _, info_a = first.step("<search>Pavia Cathedral</search>")
    _, _, _, _, info_b = second.step("<search>cathedral of Pavia</search>")
    assert info_a["doc_ids"] == info_b["doc_ids"]
    assert info_a["anchor"] == info_b["anchor"]
    _, _, _, _, info_c = second.step("<search>Evan Morris</search>")
    assert info_c["anchor"] != info_a["anchor"]
    game = second.unwrapped.state_dict()["game"]
    assert game["retrieved"] == [info_a["doc_ids"], info_c["doc_ids"]]
    assert first.unwrapped.state_text().startswith("Question: ")


def test_state_dict_round_trip():
    env = make()
    env.reset(seed=3)
    env.step("<search>Pavia Cathedral</search>")
    state = env.unwrapped.state_dict()
    key, observation = env.unwrapped.state_key(), env.unwrapped.state_text()
    _, reward_a, *_ = env.step("<answer>x</answer>")
    restored = make()
    restored.unwrapped.load_state_dict(json.loads(json.dumps(state)))
    assert restored.unwrapped.state_text() == observation
    assert restored.unwrapped.state_key() == key
    assert restored.unwrapped.state_dict() == state
    _, reward_b, *_ = restored.step("<answer>x</answer>")
    assert reward_a == reward_b
    for broken in [
        {**state, "passages": [["1", "text"]]},
        {**state, "passages": state["passages"][:1]},
        {**state, "game": {**state["game"], "question_index": 999}},
        {**state, "game": {**state["game"], "question_id": "other"}},
        {**state, "game": {**state["game"], "retrieved": [[1, 2]]}},
        {**state, "env": "Sokoban"},
    ]:
        with pytest.raises(ValueError):
            make().unwrapped.load_state_dict(broken)


def test_observation_respects_the_length_limit():
    env = make(topk=10, max_observation_chars=1500, protocol="strict")
    env.reset(seed=0)
    observation, *_ = env.step("<search>city California United States history</search>")
    assert len(observation) <= 1500 and observation.count("Doc ") == 10
    assert observation in env.observation_space
    env = make(topk=10, max_observation_chars=1500)  # Search-R1's rendering, cut at the end
    env.reset(seed=0)
    observation, *_ = env.step("<search>city California United States history</search>")
    assert len(observation) == 1500 and observation.endswith("</information>")
    assert observation in env.observation_space


def test_passages_are_written_byte_for_byte_as_search_r1_writes_them():
    # Search-R1's _passages2string: title = the first line of "contents" (quotes kept),
    # text = the other lines joined by newlines, "Doc {i}(Title: {title}) {text}\n" each.
    passages = [
        Passage("4", '"Pavia Cathedral"\nThe cathedral  of Pavia.\nSecond line.', 3.0),
        Passage("9", "a passage without a title line", 1.0),
    ]
    assert search_r1_passages(passages) == (
        'Doc 1(Title: "Pavia Cathedral") The cathedral  of Pavia.\nSecond line.\n'
        "Doc 2(Title: a passage without a title line) \n"
    )
    assert search_r1_passages([]) == ""


def test_a_search_for_nothing_finds_nothing_and_first_tags_win_in_the_env():
    env = make()
    env.reset(seed=0)
    observation, reward, terminated, _, info = env.step("<search> </search>")
    assert info["is_action_valid"] and not terminated and info["doc_ids"] == []
    assert observation.endswith("\n<information></information>")
    _, reward, terminated, _, info = env.step(
        "<answer>Wilhelm Conrad Röntgen</answer> and then <search>more</search>"
    )
    assert terminated and reward == 1.0 and info["answer"] == "Wilhelm Conrad Röntgen"


def test_history_prompt_and_group_vector_env():
    env = HistoryPrompt(make(), history_length=2)
    prompt, info = env.reset(seed=4)
    assert "<search>" in prompt and "<answer>" in prompt and "Question:" in prompt
    prompt, *_, info = env.step("<search>Pavia Cathedral</search>")
    assert "[Step 0 action] <search>Pavia Cathedral</search>" in prompt
    envs = make_group_vec(
        "gigpo/SearchQA-v0", num_groups=2, group_size=2, seed=7, dataset=NQ, corpus=CORPUS
    )
    observations, infos = envs.reset()
    assert observations[0] == observations[1] and observations[2] == observations[3]
    envs.close()


def test_a_shared_backend_and_a_list_of_questions():
    from retrieval_server.backends import get_backend

    docs = [json.loads(line) for line in CORPUS.read_text().splitlines()[:50]]
    backend = get_backend("bm25s").build(docs)
    items = [QAItem("q1", "Who was Evan Morris?", ("a lobbyist",))]
    env = gym.make("gigpo/SearchQA-v0", dataset=items, retriever=backend, topk=2)
    env.reset(seed=0)
    _, _, _, _, info = env.step("<search>Evan Morris</search>")
    assert info["doc_ids"][0] == "0" and 1 <= len(info["doc_ids"]) <= 2
    _, reward, *_ = env.step("<answer>A lobbyist</answer>")
    assert reward == 1.0


def test_bamboogle_csv_with_a_corpus_index_directory(tmp_path):
    from retrieval_server.backends import get_backend

    docs = [json.loads(line) for line in CORPUS.read_text().splitlines()]
    get_backend("bm25s").build(docs).save(tmp_path / "index")
    env = make(dataset=SEARCHQA / "bamboogle.csv", corpus=tmp_path / "index")
    observation, info = env.reset(seed=1)
    with open(SEARCHQA / "bamboogle.csv", encoding="utf-8") as handle:
        second = list(csv.DictReader(handle))[1]
    assert observation == f"Question: {second['Question']}"
    _, reward, *_ = env.step(f"<answer>{second['Answer']}</answer>")
    assert reward == 1.0


def test_protocol_arguments_are_checked():
    with pytest.raises(ValueError, match="protocol"):
        make(protocol="strict", action_parser=SearchAnswerParser())
    with pytest.raises(ValueError, match="protocol must be one of"):
        make(protocol="react")
    with pytest.raises(ValueError, match="applies to protocol='strict' only"):
        make(max_passage_chars=200)
    assert make(protocol="strict").unwrapped.max_passage_chars == 1000


def test_a_question_file_is_read_again_only_when_it_changed(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({"question": "Who?", "golden_answers": ["me"]}) + "\n")
    first = load_questions(path)
    again = load_questions(path)
    assert again == first and again is not first  # a new list each call, callers may edit it
    again.clear()
    assert len(load_questions(path)) == 1
    path.write_text(path.read_text() + json.dumps({"question": "Why?", "answer": "so"}) + "\n")
    assert [q.question for q in load_questions(path)] == ["Who?", "Why?"]
