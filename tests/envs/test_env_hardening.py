"""Seeds and constructor arguments, checked the same way on every registered gigpo env.

A seed that ``reset`` accepts must round-trip through ``load_state_dict(state_dict())``; a
seed outside that range, or of the wrong type, is refused with an error naming it. Every
constructor argument is type-checked (no silent ``int()`` / ``bool()``), and arguments that
size the game have documented upper bounds (``gigpo_envs.arguments``).
"""

from __future__ import annotations

import json
import math

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.envs.registration import load_env_creator
from sample_data import sample_dir

import gigpo_envs
from gigpo_envs import make_group_vec, next_episode_seed
from gigpo_envs.arguments import (
    MAX_MESSAGE_CHARS,
    MAX_STEPS_LIMIT,
    SEED_MAX,
    ArgumentTypeError,
    describe,
)

SEARCHQA = sample_dir("searchqa", "wiki_sample_1000.jsonl")
ALFWORLD = sample_dir("alfworld", "json_2.1.1")

#: The arguments each env needs beyond its registered ones (data paths), and a small shop.
BASE_KWARGS: dict[str, dict] = {
    "gigpo/Sokoban-v0": {},
    "gigpo/EZPoints-v0": {},
    "gigpo/Points24-v0": {},
    "gigpo/NumberLine-v0": {},
    "gigpo/Blackjack-v0": {},
    "gigpo/WebShop-v0": {"num_products": 30},
    "gigpo/SearchQA-v0": {
        "dataset": SEARCHQA / "nq_test16.jsonl",
        "corpus": SEARCHQA / "wiki_sample_1000.jsonl",
    },
    "gigpo/ALFWorld-v0": {"data_dir": ALFWORLD},
}
ENV_IDS = sorted(BASE_KWARGS)

# (argument, bad value, what the message says it must be, the type it names), per env.
COMMON_BAD_TYPES = [
    ("max_steps", 1.5, "an int", "float"),
    ("max_steps", True, "an int", "bool"),
    ("max_steps", "15", "an int", "str"),
    ("invalid_action_penalty", "0", "a float", "str"),
    ("invalid_action_penalty", False, "a float", "bool"),
]
POINTS_BAD_TYPES = [
    ("target", 12.0, "an int", "float"),
    ("num_cards", "2", "an int", "str"),
    ("solvable_only", "yes", "a bool", "str"),
    ("solvable_only", 1, "a bool", "int"),
]
BAD_TYPES: dict[str, list[tuple[str, object, str, str]]] = {
    "gigpo/Sokoban-v0": [
        ("num_boxes", "1", "an int", "str"),
        ("num_boxes", 1.0, "an int", "float"),
        ("num_boxes", True, "an int", "bool"),
        ("dim_room", (6, 6.0), "an int", "float"),
        ("dim_room", "66", "a (height, width) tuple or list", "str"),
        ("max_solution_steps", 2.5, "an int", "float"),
        ("min_solution_steps", True, "an int", "bool"),
    ],
    "gigpo/EZPoints-v0": POINTS_BAD_TYPES,
    "gigpo/Points24-v0": POINTS_BAD_TYPES,
    "gigpo/NumberLine-v0": [
        ("max_position", 5.5, "an int", "float"),
        ("max_position", "5", "an int", "str"),
        ("max_position", True, "an int", "bool"),
        ("words", "yes", "a bool", "str"),
        ("clock", 1, "a bool", "int"),
        ("traps", 1.5, "an int", "float"),
        ("traps", True, "an int", "bool"),
    ],
    "gigpo/Blackjack-v0": [
        ("natural", "yes", "a bool", "str"),
        ("natural", 1, "a bool", "int"),
        ("natural", None, "a bool", "NoneType"),
    ],
    "gigpo/WebShop-v0": [
        ("num_products", "30", "an int", "str"),
        ("num_products", 30.0, "an int", "float"),
        ("catalog_seed", True, "an int", "bool"),
        ("reward_scale", "1", "a float", "str"),
        ("success_reward_only", "no", "a bool", "str"),
        ("split", 1, "a str", "int"),
        ("goals", None, "a str", "NoneType"),
        ("backend_options", [("k1", 1.2)], "a dict or None", "list"),
    ],
    "gigpo/SearchQA-v0": [
        ("topk", 3.0, "an int", "float"),
        ("topk", True, "an int", "bool"),
        ("max_turns", 4.5, "an int", "float"),
        ("max_observation_chars", "4096", "an int", "str"),
        ("protocol", 1, "a str", "int"),
        ("client_options", "timeout_s=1", "a dict or None", "str"),
        ("dataset", 5, "a path or a list of QAItem", "int"),
    ],
    "gigpo/ALFWorld-v0": [
        ("win_reward", "10", "a float", "str"),
        ("expert", "yes", "a bool", "str"),
        ("split", 1, "a str", "int"),
        ("data_dir", 5, "a str or os.PathLike path", "int"),
    ],
}

# (argument, value out of range, a text the message must hold: the limit), per env.
COMMON_OUT_OF_RANGE = [
    ("max_steps", 10**9, str(MAX_STEPS_LIMIT)),
    ("max_steps", 0, str(MAX_STEPS_LIMIT)),
    ("invalid_action_penalty", math.nan, "finite"),
    ("invalid_action_penalty", -math.inf, "finite"),
]
POINTS_OUT_OF_RANGE = [("target", 10**7, "1000000"), ("num_cards", 7, "[1, 6]")]
OUT_OF_RANGE: dict[str, list[tuple[str, object, str]]] = {
    "gigpo/Sokoban-v0": [
        ("num_boxes", 10**6, "[1, 14]"),  # a 6 x 6 room has 16 inner cells
        ("dim_room", (4, 10**6), "too large"),
        ("dim_room", (3, 6), ">= 4"),
        ("max_solution_steps", 0, ">= 1"),
    ],
    "gigpo/EZPoints-v0": POINTS_OUT_OF_RANGE,
    "gigpo/Points24-v0": POINTS_OUT_OF_RANGE,
    "gigpo/NumberLine-v0": [
        ("max_position", 10**9, str(MAX_STEPS_LIMIT // 2)),
        ("traps", 10**9, "max_position - 1"),
        ("traps", -1, ">= 0"),
    ],
    "gigpo/Blackjack-v0": [],
    "gigpo/WebShop-v0": [("catalog_seed", 2**64, "9223372036854775807")],
    "gigpo/SearchQA-v0": [
        ("max_observation_chars", 10**9, "1000000"),
        ("topk", 101, "[1, 100]"),
        ("max_turns", 0, str(MAX_STEPS_LIMIT)),
    ],
    "gigpo/ALFWorld-v0": [("win_reward", math.inf, "finite"), ("split", "test", "valid_seen")],
}


def _cases(common: list, per_env: dict) -> list:
    return [
        pytest.param(env_id, *case, id=f"{env_id.split('/')[1]}-{case[0]}-{index}")
        for env_id in ENV_IDS
        for index, case in enumerate(common + per_env[env_id])
    ]


def _make(env_id: str, **kwargs) -> gym.Env:
    return gym.make(env_id, **{**BASE_KWARGS[env_id], **kwargs})


def _some_action(info: dict) -> str:
    """A response that changes the state where the game has admissible actions."""
    actions = info.get("admissible_actions")
    if actions:
        return f"<think>ok</think><action>{actions[-1]}</action>"
    return "<search>nobel prize physics</search>"


def test_every_registered_env_is_covered():
    registered = {env_id for env_id in gym.registry if env_id.startswith("gigpo/")}
    assert registered == set(ENV_IDS)
    assert set(gigpo_envs.ENVIRONMENTS) <= registered


# ----------------------------------------------------------------------------- seeds
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_every_accepted_seed_round_trips_and_larger_ones_are_refused(env_id):
    env = _make(env_id).unwrapped
    for seed in (0, SEED_MAX, np.int64(SEED_MAX), np.uint64(12)):
        _, info = env.reset(seed=seed)
        env.step(_some_action(info))
        saved = json.loads(json.dumps(env.state_dict()))
        assert saved["episode_seed"] == int(seed)
        env.reset(seed=1)
        env.load_state_dict(saved)
        assert env.state_dict() == saved
        env.reset()  # the seed chain continues from the restored seed
        assert env.state_dict()["episode_seed"] == next_episode_seed(int(seed))
    env.reset(seed=5)
    before = env.state_dict()
    refusal = r"seed must be an int in \[0, 2\*\*63 - 1\]"
    for seed in (SEED_MAX + 1, 2**64 - 1, np.uint64(2**63), 10**5000, -1):
        with pytest.raises(ValueError, match=refusal) as caught:
            env.reset(seed=seed)
        assert len(str(caught.value)) < 200  # 10**5000 is described by its size, not printed
        assert env.state_dict() == before  # a refused seed leaves the episode as it was


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_a_bool_or_any_other_non_int_is_not_a_seed(env_id):
    env = _make(env_id).unwrapped
    for seed in (True, False, np.bool_(True), 1.0, np.float64(2.0), "3", [1]):
        with pytest.raises(TypeError, match="seed must be an int") as caught:
            env.reset(seed=seed)
        assert f"got {type(seed).__name__}" in str(caught.value)
        assert isinstance(caught.value, ValueError)  # callers that caught ValueError still do


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_a_state_with_a_seed_reset_would_refuse_is_refused(env_id):
    env = _make(env_id).unwrapped
    env.reset(seed=3)
    state = env.state_dict()
    for seed in (True, 1.5, "3", SEED_MAX + 1, -1):
        with pytest.raises(ValueError, match="episode_seed"):
            env.load_state_dict({**state, "episode_seed": seed})
        assert env.state_dict() == state


def test_the_vector_env_refuses_a_seed_schedule_past_the_range():
    vec = make_group_vec("gigpo/NumberLine-v0", num_groups=2, group_size=2)
    try:
        vec.reset(seed=SEED_MAX - 1)  # groups get SEED_MAX - 1 and SEED_MAX: fine
        assert list(vec.group_seeds) == [SEED_MAX - 1, SEED_MAX]
        with pytest.raises(ValueError, match=r"2\*\*63 - 1"):
            vec.reset()  # the next round would start past SEED_MAX
        with pytest.raises(ValueError, match=r"2\*\*63 - 1"):
            vec.reset(seed=SEED_MAX)  # its second group would get SEED_MAX + 1
        with pytest.raises(TypeError, match="got bool"):
            vec.reset(seed=[True, 0])
        with pytest.raises(TypeError, match="got float"):
            vec.reset(seed=1.5)
        with pytest.raises(ValueError, match="seed must be an int in"):
            make_group_vec("gigpo/NumberLine-v0", 1, 1, seed=2**63)
    finally:
        vec.close()


# ----------------------------------------------------------------------------- arguments
@pytest.mark.parametrize(
    ("env_id", "argument", "value", "expected", "got"), _cases(COMMON_BAD_TYPES, BAD_TYPES)
)
def test_a_wrong_typed_argument_is_refused_not_coerced(env_id, argument, value, expected, got):
    with pytest.raises(TypeError) as caught:
        _make(env_id, **{argument: value})
    message = str(caught.value)
    assert f"{argument}" in message and f"must be {expected}" in message, message
    assert f"got {got}" in message, message
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize(
    ("env_id", "argument", "value", "limit"), _cases(COMMON_OUT_OF_RANGE, OUT_OF_RANGE)
)
def test_an_argument_out_of_its_range_is_refused(env_id, argument, value, limit):
    with pytest.raises(ValueError) as caught:
        _make(env_id, **{argument: value})
    message = str(caught.value)
    assert not isinstance(caught.value, TypeError), message
    assert argument in message and limit in message, message


def test_the_catalog_size_is_bounded_before_any_product_is_generated():
    # The bound is checked before the catalog is built: the bad split after it is not reached.
    with pytest.raises(ValueError, match=r"num_products must be an int in \[1, 2000000\]"):
        gym.make("gigpo/WebShop-v0", num_products=10**9, split="dev")


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_a_huge_bad_value_is_never_printed_whole(env_id):
    spec = gym.spec(env_id)
    creator = load_env_creator(spec.entry_point)
    kwargs = {**spec.kwargs, **BASE_KWARGS[env_id]}
    with pytest.raises(TypeError) as caught:
        creator(**{**kwargs, "max_steps": "x" * 100_000})
    assert "max_steps must be an int, got str 'xxx" in str(caught.value)
    assert len(str(caught.value)) < 120
    with pytest.raises(TypeError) as caught:  # gym.make appends every kwarg's repr: still cut
        _make(env_id, max_steps="x" * 100_000)
    assert len(str(caught.value)) <= MAX_MESSAGE_CHARS
    with pytest.raises(ValueError) as caught:
        creator(**{**kwargs, "max_steps": 10**5000})
    assert "bits" in str(caught.value) and len(str(caught.value)) < 120


def test_describe_is_short_and_safe_on_any_value():
    class BrokenRepr:
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    assert describe(1.5) == "float 1.5"
    assert describe(True) == "bool True"
    assert describe("ab") == "str 'ab'"
    assert describe(10**5000) == "int of 16610 bits"
    assert describe(BrokenRepr()).startswith("BrokenRepr ")  # its repr failing is no error
    for value in ("x" * 10**6, b"y" * 10**6, list(range(10**5)), [10**5000], {"k": "v" * 10**5}):
        assert len(describe(value)) < 80
    assert issubclass(ArgumentTypeError, TypeError) and issubclass(ArgumentTypeError, ValueError)


# Values of every accepted kind: numpy scalars, an int where a float is asked for, a list room.
GOOD_KWARGS: dict[str, dict] = {
    "gigpo/Sokoban-v0": {"dim_room": [6, np.int64(6)], "num_boxes": np.int32(1)},
    "gigpo/EZPoints-v0": {"target": np.int64(12), "solvable_only": np.bool_(True)},
    "gigpo/Points24-v0": {"num_cards": np.int8(4)},
    "gigpo/NumberLine-v0": {
        "max_position": np.int64(4),
        "words": np.bool_(True),
        "clock": np.bool_(True),
        "traps": np.int64(2),
    },
    "gigpo/Blackjack-v0": {"natural": np.bool_(True)},
    "gigpo/WebShop-v0": {"num_products": np.int64(30), "reward_scale": np.float32(2.0)},
    "gigpo/SearchQA-v0": {"topk": np.int64(2), "max_turns": np.int16(3)},
    "gigpo/ALFWorld-v0": {"win_reward": 5, "expert": np.bool_(False)},
}


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_numpy_scalars_and_ints_for_floats_are_accepted_as_plain_values(env_id):
    extra = {"max_steps": np.int64(7)} if env_id != "gigpo/SearchQA-v0" else {}
    env = _make(env_id, invalid_action_penalty=-1, **extra, **GOOD_KWARGS[env_id]).unwrapped
    assert env.max_steps == (3 if env_id == "gigpo/SearchQA-v0" else 7)
    assert type(env.max_steps) is int and type(env.invalid_action_penalty) is float
    _, info = env.reset(seed=np.int64(4))
    env.step("<action>not an action</action>")
    json.dumps(env.state_dict())  # numpy scalars were stored as plain Python values
    assert env.state_dict()["episode_seed"] == 4
