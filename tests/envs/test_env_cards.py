"""The gym_cards games: EZPoints / Points24, NumberLine, Blackjack."""

from __future__ import annotations

import itertools
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import gigpo_envs  # noqa: F401
from gigpo_envs.cards import evaluate, is_solvable, solve
from gigpo_envs.cards.blackjack import hand_total
from gigpo_envs.cards.cards import card_value
from gigpo_envs.cards.numberline import MAX_CLOCK_STEP, MINUTES_PER_DAY, NUMBER_WORDS


def _act(env, token):
    return env.step(f"<think>...</think><action>{token}</action>")


# ----------------------------------------------------------------------------- formulas
@pytest.mark.parametrize(
    ("tokens", "value"),
    [
        (["2", "+", "3", "*", "4"], Fraction(14)),
        (["(", "2", "+", "3", ")", "*", "4"], Fraction(20)),
        (["8", "/", "3", "*", "3"], Fraction(8)),
        (["10", "-", "4", "-", "3"], Fraction(3)),
        (["1", "/", "(", "1", "-", "1", ")"], None),
        (["2", "+"], None),
        (["(", "2"], None),
        (["2", "3"], None),
        (["-", "2"], None),
        ([")", "2"], None),
        ([], None),
    ],
)
def test_evaluate(tokens, value):
    assert evaluate(tokens) == value


def _brute_force_two(a: int, b: int, target: int) -> bool:
    values = {a + b, a * b, a - b, b - a}
    values |= {Fraction(a, b), Fraction(b, a)}
    return target in values


def test_solver_agrees_with_brute_force_on_all_pairs():
    for a, b in itertools.product(range(1, 11), repeat=2):
        assert is_solvable([a, b], 12) == _brute_force_two(a, b, 12), (a, b)
        solution = solve([a, b], 12)
        if solution is not None:
            assert evaluate(solution) == 12
            assert sorted(int(t) for t in solution if t.isdigit()) == sorted([a, b])


def test_solver_on_four_cards():
    assert evaluate(solve([1, 5, 5, 5], 24)) == 24  # needs fractions: (5 - 1/5) * 5
    assert evaluate(solve([3, 3, 8, 8], 24)) == 24  # 8 / (3 - 8/3)
    assert solve([1, 1, 1, 1], 24) is None
    assert not is_solvable([1, 1, 1, 2], 24)


# ----------------------------------------------------------------------------- points
@pytest.mark.parametrize(
    ("env_id", "seeds"), [("gigpo/EZPoints-v0", 200), ("gigpo/Points24-v0", 60)]
)
def test_solver_formulas_win(env_id, seeds):
    env = gym.make(env_id)
    for seed in range(seeds):
        env.reset(seed=seed)
        core = env.unwrapped
        values = [card_value(card) for card in core.cards]
        tokens = solve(values, core.target)
        assert tokens is not None, f"seed {seed}: unsolvable deal {core.cards}"
        for token in tokens:
            _, reward, terminated, _, info = _act(env, token)
            assert info["is_action_valid"] and reward == 0.0 and not terminated
        _, reward, terminated, truncated, info = _act(env, "=")
        assert (reward, terminated, truncated, info["won"]) == (10.0, True, False, True)


def _points_env(cards, target=12, **kwargs):
    env = gym.make("gigpo/EZPoints-v0", target=target, num_cards=len(cards), **kwargs)
    env.reset(seed=0)
    state = env.unwrapped.state_dict()
    state["game"] = {"target": target, "cards": cards, "formula": []}
    env.unwrapped.load_state_dict(state)
    return env


def test_points_rules():
    env = _points_env(["KH", "2C"])  # 10 and 2
    assert env.unwrapped._game_observation().startswith("Target: 12\nCards: K of hearts = 10")
    _, _, _, _, info = _act(env, "7")  # no 7 dealt
    assert not info["is_action_valid"]
    _, _, _, _, info = _act(env, "k")  # K counts 10
    assert info["is_action_valid"] and info["action"] == "10"
    assert "10" not in info["admissible_actions"] and "2" in info["admissible_actions"]
    _, _, _, _, info = _act(env, "10")  # the only 10 is used
    assert not info["is_action_valid"]
    _act(env, "+")
    _, reward, terminated, _, info = _act(env, "=")  # "10 +" is malformed
    assert (reward, terminated, info["won"]) == (-1.0, True, False)

    env = _points_env(["KH", "2C"])
    for token in ("10", "*", "2"):
        _act(env, token)
    _, reward, terminated, _, info = _act(env, "=")  # 20, not 12
    assert (reward, terminated, info["won"]) == (-1.0, True, False)

    env = _points_env(["6H", "6C"])
    _act(env, "6")
    _act(env, "*")
    _act(env, "2")  # invalid: no 2
    _, reward, terminated, _, info = _act(env, "=")  # one card unused
    assert (reward, info["won"]) == (-1.0, False)

    env = _points_env(["6H", "6C"])
    for token in ("(", "6", "+", "6", ")"):
        _act(env, token)
    _, reward, terminated, _, info = _act(env, "=")
    assert (reward, terminated, info["won"]) == (10.0, True, True)


def test_points_deals_are_solvable_unless_asked_otherwise():
    env = gym.make("gigpo/EZPoints-v0")
    free = gym.make("gigpo/EZPoints-v0", solvable_only=False)
    unsolvable = 0
    for seed in range(100):
        env.reset(seed=seed)
        assert is_solvable([card_value(c) for c in env.unwrapped.cards], 12)
        free.reset(seed=seed)
        unsolvable += not is_solvable([card_value(c) for c in free.unwrapped.cards], 12)
    assert unsolvable > 0


def test_points_bad_state_and_arguments():
    env = _points_env(["KH", "2C"])
    state = env.unwrapped.state_dict()
    for game in (
        {"target": 12, "cards": ["ZZ", "2C"], "formula": []},
        {"target": 12, "cards": ["KH", "2C"], "formula": ["7"]},
        {"target": 12, "cards": ["KH", "2C"], "formula": ["2", "2"]},
        {"target": 12, "cards": ["KH", "2C"], "formula": ["sqrt"]},
    ):
        with pytest.raises(ValueError):
            env.unwrapped.load_state_dict({**state, "game": game})
    with pytest.raises(ValueError, match="num_cards"):
        gym.make("gigpo/EZPoints-v0", num_cards=0)


# ----------------------------------------------------------------------------- number line
def test_numberline_rules_and_optimal_play():
    env = gym.make("gigpo/NumberLine-v0")
    assert env.unwrapped.max_steps == 10
    for seed in range(50):
        observation, _ = env.reset(seed=seed)
        target, current = (int(line.split(": ")[1]) for line in observation.splitlines())
        assert target != current and 0 <= target <= 5 and 0 <= current <= 5
        direction = "+" if target > current else "-"
        for step in range(abs(target - current)):
            _, reward, terminated, _, info = _act(env, direction)
            last = step == abs(target - current) - 1
            assert reward == (1.0 if last else 0.0) and terminated is last
        assert info["won"]


def test_numberline_wrong_way_and_edges_cost_one():
    env = gym.make("gigpo/NumberLine-v0")
    env.reset(seed=0)
    state = env.unwrapped.state_dict()
    env.unwrapped.load_state_dict(
        {**state, "game": {"max_position": 5, "position": 0, "target": 3}}
    )
    assert _act(env, "-")[1] == -1.0  # pushing against 0
    assert env.unwrapped.position == 0
    assert _act(env, "right")[1] == 0.0
    assert _act(env, "left")[1] == -1.0
    with pytest.raises(ValueError):
        env.unwrapped.load_state_dict(
            {**state, "game": {"max_position": 5, "position": 9, "target": 3}}
        )


def _numberline(**kwargs):
    return gym.make("gigpo/NumberLine-v0", max_position=9, max_steps=18, **kwargs)


def _clock_minutes(observation: str) -> int:
    line = observation.splitlines()[2]
    assert line.startswith("Clock: ") and len(line) == len("Clock: HH:MM"), line
    hours, minutes = line.removeprefix("Clock: ").split(":")
    assert 0 <= int(hours) < 24 and 0 <= int(minutes) < 60
    return int(hours) * 60 + int(minutes)


def _plan(seed: int, steps: int = 18) -> list[str]:
    """A seeded mix of moves, their aliases and junk that names no action."""
    rng = np.random.default_rng(seed)
    choices = ["+", "-", "right", "left", "fly"]
    return [f"<action>{choices[int(rng.integers(5))]}</action>" for _ in range(steps)]


def test_numberline_words_write_the_numbers_as_words():
    digits, words = _numberline(), _numberline(words=True)
    for seed in range(30):
        digit_obs, _ = digits.reset(seed=seed)
        word_obs, info = words.reset(seed=seed)
        target, current = (int(line.split(": ")[1]) for line in digit_obs.splitlines())
        assert word_obs == f"Target: {NUMBER_WORDS[target]}\nCurrent: {NUMBER_WORDS[current]}"
        assert info["anchor_text"] == word_obs
        assert info["anchor"] == digits.unwrapped.state_key()  # the same state, other text
        for action in _plan(seed, 6):
            digit_step, word_step = digits.step(action), words.step(action)
            assert digit_step[1:4] == word_step[1:4]
            if digit_step[2] or digit_step[3]:
                break
            assert word_step[0] == "Target: {}\nCurrent: {}".format(
                *(NUMBER_WORDS[int(line.split(": ")[1])] for line in digit_step[0].splitlines())
            )
    env = gym.make("gigpo/NumberLine-v0", max_position=20, words=True)
    env.reset(seed=0)
    state = env.unwrapped.state_dict()
    env.unwrapped.load_state_dict({**state, "game": {**state["game"], "position": 20}})
    assert env.unwrapped.state_text().endswith("Current: twenty")
    assert "twenty" in env.unwrapped.render_legend()


def test_numberline_clock_changes_every_move_and_nothing_else():
    plain, timed = _numberline(words=True), _numberline(words=True, clock=True)
    clocks_seen, invalid_steps = set(), 0
    for seed in range(40):
        plain_obs, plain_info = plain.reset(seed=seed)
        timed_obs, timed_info = timed.reset(seed=seed)
        assert timed_obs.splitlines()[:2] == plain_obs.splitlines()
        assert timed_info["anchor"] != plain_info["anchor"]  # the clock is in the key
        clock = _clock_minutes(timed_obs)
        clocks_seen.add(clock)
        keys = {timed_info["anchor"]}
        for action in _plan(1000 + seed):
            plain_obs, *plain_rest, plain_info = plain.step(action)
            timed_obs, *timed_rest, timed_info = timed.step(action)
            assert timed_rest == plain_rest  # reward, terminated, truncated
            assert timed_obs.splitlines()[:2] == plain_obs.splitlines()
            for key in ("is_action_valid", "won", "action", "admissible_actions"):
                assert timed_info[key] == plain_info[key], key
            assert timed.unwrapped.position == plain.unwrapped.position
            # Time passes on every step, an invalid one included: never the same state twice.
            minutes = (_clock_minutes(timed_obs) - clock) % MINUTES_PER_DAY
            assert 1 <= minutes <= MAX_CLOCK_STEP
            assert timed_info["anchor"] not in keys
            invalid_steps += not timed_info["is_action_valid"]
            clock = _clock_minutes(timed_obs)
            keys.add(timed_info["anchor"])
            if timed_rest[1] or timed_rest[2]:
                break
    assert len(clocks_seen) > 30  # the start time depends on the seed
    assert invalid_steps > 20


def test_numberline_clock_is_reproducible_from_the_seed():
    pinned = [736, 759, 794, 810, 849]  # seed 0, then + + - +: fixed in every process
    env = _numberline(words=True, clock=True)
    env.reset(seed=0)
    clocks = [env.unwrapped.clock_time]
    for action in "++-+":
        env.step(f"<action>{action}</action>")
        clocks.append(env.unwrapped.clock_time)
    assert clocks == pinned
    again, other = _numberline(clock=True), _numberline(clock=True)
    for seed in range(10):
        traces = []
        for env in (again, other):
            observation, _ = env.reset(seed=seed)
            trace = [observation]
            for action in _plan(seed):
                observation, _, terminated, truncated, _ = env.step(action)
                trace.append(observation)
                if terminated or truncated:
                    break
            traces.append(trace)
        assert traces[0] == traces[1]


def test_numberline_clock_depends_on_the_path_not_only_the_step():
    env = _numberline(clock=True)
    ends = set()
    for path in ("++--", "+-+-", "-++-", "--++"):  # all back at the start after 4 moves
        env.reset(seed=7)
        game = {"max_position": 9, "position": 4, "target": 9, "clock": 600}
        env.unwrapped.load_state_dict({**env.unwrapped.state_dict(), "game": game})
        for action in path:
            env.step(f"<action>{action}</action>")
        assert env.unwrapped.position == 4
        ends.add(env.unwrapped.clock_time)
    assert len(ends) == 4


def test_numberline_clock_state_round_trips():
    env = _numberline(words=True, clock=True)
    env.reset(seed=5)
    for action in _plan(5, 3):
        env.step(action)
    saved = json.loads(json.dumps(env.unwrapped.state_dict()))
    assert saved["game"]["clock"] == env.unwrapped.clock_time
    key, text = env.unwrapped.state_key(), env.unwrapped.state_text()
    future = _plan(6, 15)
    original = [env.step(action) for action in future[:8]]
    restored = _numberline(words=True, clock=True)
    restored.unwrapped.load_state_dict(saved)
    assert restored.unwrapped.state_key() == key and restored.unwrapped.state_text() == text
    assert [restored.step(action) for action in future[:8]] == original
    assert restored.unwrapped.state_dict() == env.unwrapped.state_dict()


def test_numberline_bad_clock_states_are_refused():
    env = _numberline(clock=True)
    env.reset(seed=2)
    state = env.unwrapped.state_dict()
    for clock in (-1, MINUTES_PER_DAY, 1.5, "10:00", True, None):
        with pytest.raises(ValueError, match="clock must be an int"):
            env.unwrapped.load_state_dict({**state, "game": {**state["game"], "clock": clock}})
        assert env.unwrapped.state_dict() == state  # a refused state changes nothing
    no_clock = {k: v for k, v in state["game"].items() if k != "clock"}
    with pytest.raises(ValueError, match="clock=True"):
        env.unwrapped.load_state_dict({**state, "game": no_clock})
    plain = _numberline()
    plain.reset(seed=2)
    with pytest.raises(ValueError, match="clock=False"):
        plain.unwrapped.load_state_dict(state)
    words = _numberline(words=True)
    words.reset(seed=2)
    with pytest.raises(ValueError, match="number words"):
        words.unwrapped.load_state_dict(
            {**state, "game": {"max_position": 30, "position": 25, "target": 3}}
        )


def test_numberline_bad_options_are_refused():
    with pytest.raises(TypeError, match="words must be a bool"):
        gym.make("gigpo/NumberLine-v0", words="yes")
    with pytest.raises(TypeError, match="clock must be a bool"):
        gym.make("gigpo/NumberLine-v0", clock=1)
    with pytest.raises(ValueError, match=r"max_position must be an int in \[1, 20\] with words"):
        gym.make("gigpo/NumberLine-v0", max_position=21, words=True)
    gym.make("gigpo/NumberLine-v0", max_position=21, clock=True)  # digits have no such limit
    check_env(gym.make("gigpo/NumberLine-v0", max_position=20, words=True, clock=True).unwrapped)


def _play_clock_plan(env_index: int, start: threading.Barrier | None) -> list:
    """One env instance's plan: three seeds, two envs per seed (as in a GiGPO group)."""
    env = _numberline(words=True, clock=True)
    if start is not None:
        start.wait(timeout=60)
    trace = []
    for episode in range(3):
        seed = 10 * episode + env_index % 2
        observation, info = env.reset(seed=seed)
        trace.append((observation, info["anchor"]))
        for action in _plan(100 * env_index + episode):
            observation, reward, terminated, truncated, info = env.step(action)
            trace.append((observation, reward, terminated, truncated, info["anchor"]))
            if terminated or truncated:
                break
    return trace


def test_numberline_clock_envs_in_threads_match_sequential_play():
    sequential = [_play_clock_plan(index, None) for index in range(4)]
    start = threading.Barrier(4)
    with ThreadPoolExecutor(max_workers=4) as pool:
        threaded = list(pool.map(lambda index: _play_clock_plan(index, start), range(4)))
    assert threaded == sequential
    assert sequential[0][0] == sequential[2][0]  # same seed, same start clock


# ----------------------------------------------------------------------------- blackjack
@pytest.mark.parametrize(
    ("cards", "total", "soft"),
    [
        (["AH", "KD"], 21, True),
        (["AH", "AD"], 12, True),
        (["AH", "AD", "9C"], 21, True),
        (["AH", "KD", "5C"], 16, False),
        (["TH", "9D", "5C"], 24, False),
        (["2H", "3D"], 5, False),
    ],
)
def test_hand_total(cards, total, soft):
    assert hand_total(cards) == (total, soft)


def test_blackjack_outcomes_follow_the_rules():
    env = gym.make("gigpo/Blackjack-v0")
    outcomes = set()
    for seed in range(300):
        env.reset(seed=seed)
        core = env.unwrapped
        hits = 0
        while True:
            player_total = hand_total(
                [core.player[i : i + 2] for i in range(0, len(core.player), 2)]
            )[0]
            action = "hit" if player_total < 15 else "stand"
            _, reward, terminated, truncated, info = _act(env, action)
            hits += action == "hit"
            if terminated:
                break
        player = hand_total([core.player[i : i + 2] for i in range(0, len(core.player), 2)])[0]
        dealer = hand_total([core.dealer[i : i + 2] for i in range(0, len(core.dealer), 2)])[0]
        if player > 21:
            expected = -1.0
            assert len(core.dealer) == 4  # the dealer does not draw after a bust
        else:
            assert dealer >= 17
            expected = (
                1.0 if dealer > 21 or player > dealer else (0.0 if player == dealer else -1.0)
            )
        assert reward == expected and info["won"] is (expected > 0)
        assert len(core.player) == 4 + 2 * hits
        outcomes.add(expected)
    assert outcomes == {-1.0, 0.0, 1.0}


def _blackjack_env(player, dealer, deck, **kwargs):
    env = gym.make("gigpo/Blackjack-v0", **kwargs)
    env.reset(seed=0)
    state = env.unwrapped.state_dict()
    state["game"] = {"player": player, "dealer": dealer, "deck": deck, "result": None}
    env.unwrapped.load_state_dict(state)
    return env


def test_blackjack_natural_and_observation():
    for natural, expected in ((False, 1.0), (True, 1.5)):
        env = _blackjack_env("AHKD", "9C8D", "2C" * 10, natural=natural)
        observation = env.unwrapped.state_text()
        assert "Dealer shows: 9 and one face-down card" in observation
        assert "Your cards: A, K (total 21, soft)" in observation
        observation, reward, terminated, _, info = _act(env, "stand")
        assert (reward, terminated, info["won"]) == (expected, True, True)
        assert "Dealer has: 9, 8 (total 17)" in observation and "Result: win" in observation
    env = _blackjack_env("TH9D", "9C8D", "5C" * 10)
    assert _act(env, "hit")[1:3] == (-1.0, True)
    for bad in ("AHK", "AH", "ZZ9C"):
        with pytest.raises(ValueError):
            env.unwrapped.load_state_dict(
                {
                    **env.unwrapped.state_dict(),
                    "game": {"player": bad, "dealer": "9C8D", "deck": "", "result": None},
                }
            )
