"""ALFWorld's hand-coded expert: its own "no advice" signals give ``expert_action`` None,
while any other error inside it (a bug) is raised, not swallowed."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest
from alfworld.agents.environment import alfred_tw_env
from alfworld.agents.expert import HandCodedAgentFailed, HandCodedAgentTimeout, HandCodedTWAgent

import gigpo_envs  # noqa: F401  (registers gigpo/ALFWorld-v0)
from gigpo_envs.alfworld.generate import generate_games
from gigpo_envs.alfworld.session import TextWorldSession

ENV_ID = "gigpo/ALFWorld-v0"
EXPERT_MOVES = 5


@pytest.fixture(scope="module")
def games_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("alfworld_expert_games")
    generate_games(out, num_games=1, seed=5)
    return out


@pytest.fixture(scope="module")
def game_file(games_dir) -> Path:
    (game,) = sorted(games_dir.rglob("game.tw-pddl"))
    return game


@pytest.fixture
def session():
    session = TextWorldSession(expert=True)
    yield session
    session.close()


def test_the_real_expert_timeout_gives_no_advice_and_play_goes_on(game_file, monkeypatch):
    # AlfredExpert builds HandCodedTWAgent(max_steps=200); a budget of 5 moves reaches the
    # same HandCodedAgentTimeout -> Exception("Timeout") path of alfworld in a few moves.
    class ShortExpert(HandCodedTWAgent):
        def __init__(self, max_steps: int = 150) -> None:
            super().__init__(max_steps=EXPERT_MOVES)

    monkeypatch.setattr(alfred_tw_env, "HandCodedTWAgent", ShortExpert)
    session = TextWorldSession(expert=True)
    try:
        session.reset(game_file)
        assert session.expert_action() is not None
        for move in range(1, EXPERT_MOVES + 1):
            session.step("look")  # never wins; the expert is asked once per move
            assert session.expert_action() is not None, move
        session.step("look")  # one move past its budget: the expert times out
        assert session.expert_action() is None
        session.step("look")
        assert session.expert_action() is None
        assert not session.won and "look" in session.admissible_commands
    finally:
        session.close()


def test_the_expert_running_out_of_subgoals_gives_no_advice(session, game_file, monkeypatch):
    session.reset(game_file)
    first = session.expert_action()
    assert first is not None

    def gives_up(self, game_state, reward, done, last_action=""):
        raise HandCodedAgentFailed()  # what BasePolicy.act raises with no subgoal left

    monkeypatch.setattr(HandCodedTWAgent, "act", gives_up)
    session.step(first)
    assert session.expert_action() is None


@pytest.mark.parametrize(
    "bug",
    [
        TypeError("unsupported operand type(s) for +: 'int' and 'str'"),
        AttributeError("'NoneType' object has no attribute 'split'"),
        IndexError("list index out of range"),
        Exception("not the timeout"),
    ],
    ids=lambda bug: type(bug).__name__,
)
def test_a_bug_inside_the_expert_is_raised_with_the_game(session, game_file, monkeypatch, bug):
    session.reset(game_file)
    first = session.expert_action()
    assert first is not None

    def buggy(self, game_state, reward, done, last_action=""):
        raise bug

    monkeypatch.setattr(HandCodedTWAgent, "act", buggy)
    with pytest.raises(type(bug)) as caught:
        session.step(first)
    assert caught.value is bug
    assert any("hand-coded expert" in note and str(game_file) in note for note in bug.__notes__)


def test_a_timeout_like_exception_without_the_timeout_is_not_swallowed(
    session, game_file, monkeypatch
):
    # ``Exception("Timeout")`` means "no advice" only when alfworld raised it for its timeout.
    session.reset(game_file)

    def buggy(self, game_state, reward, done, last_action=""):
        raise Exception("Timeout")

    monkeypatch.setattr(HandCodedTWAgent, "act", buggy)
    with pytest.raises(Exception, match="Timeout") as caught:
        session.step("look")
    assert not isinstance(caught.value.__context__, HandCodedAgentTimeout)


def test_the_env_reports_no_advice_and_raises_bugs(games_dir, monkeypatch):
    env = gym.make(ENV_ID, data_dir=games_dir, expert=True)
    _, info = env.reset(seed=0)
    advice = info["expert_action"]
    assert advice is not None

    def gives_up(self, game_state, reward, done, last_action=""):
        raise HandCodedAgentTimeout()

    monkeypatch.setattr(HandCodedTWAgent, "act", gives_up)
    _, _, _, _, info = env.step(f"<think>ok</think><action>{advice}</action>")
    assert info["expert_action"] is None

    def buggy(self, game_state, reward, done, last_action=""):
        return self.policy.no_such_method()

    monkeypatch.setattr(HandCodedTWAgent, "act", buggy)
    with pytest.raises(AttributeError, match="no_such_method"):
        env.step("<think>ok</think><action>look</action>")
    env.close()
