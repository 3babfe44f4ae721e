"""``metric="embedding"``: first-fit clustering on sentence-embedding cosines.

The partition contract is the one the character metrics keep (rows visited in order inside
each episode group; a row joins the first cluster whose first member is at least ``t``
similar; ids in order of first appearance). It is checked by hand on vectors chosen so the
cosines are known, and against a brute-force re-implementation (every pair's cosine, each
text embedded on its own, the shared words cut by a token-level routine) with the real
packaged MiniLM-L6.
"""

from __future__ import annotations

import math
import re
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from gigpo_algo.advantages import anchor_groups, gigpo_advantages
from gigpo_algo.embedding import SentenceEncoder, default_encoder, strip_shared


def angle_encoder(angles: dict[str, float], calls: list[list[str]] | None = None):
    """Texts -> unit vectors at the given angles (degrees): cosines known by hand."""

    def encode(texts: list[str]) -> np.ndarray:
        if calls is not None:
            calls.append(list(texts))
        rad = np.radians([angles[t] for t in texts])
        return np.stack([np.cos(rad), np.sin(rad)], axis=1)

    return encode


ANGLES = {"alpha": 0.0, "bravo": 20.0, "charlie": 50.0, "delta": 35.0, "echo": 100.0}


def test_first_fit_by_hand():
    texts = ["alpha", "bravo", "charlie", "delta", "echo"]
    enc = angle_encoder(ANGLES)
    # t = cos 30 deg = 0.866: bravo (20 deg from alpha) joins alpha; charlie (50) starts a
    # cluster; delta is 35 deg from alpha (0.819 < t) but 15 from charlie: joins charlie;
    # echo is 100 and 50 deg from the two firsts: new.
    ids = anchor_groups(
        texts, [0] * 5, similarity=math.cos(math.radians(30)), encoder=enc, metric="embedding"
    )
    np.testing.assert_array_equal(ids, [0, 0, 1, 1, 2])
    # t = 0.7 (45.6 deg): delta is within it of alpha, the FIRST cluster, so it joins
    # alpha although charlie is closer; echo is 50 deg from charlie (0.643 < t): new.
    ids = anchor_groups(texts, [0] * 5, similarity=0.7, encoder=enc, metric="embedding")
    np.testing.assert_array_equal(ids, [0, 0, 1, 0, 2])
    # The order of rows decides the representatives: echo first changes the clusters.
    # echo rep 0; delta 65 deg away: rep 1; charlie (50 / 15 deg), bravo (80 / 15) and
    # alpha (100 / 35) all join delta.
    ids = anchor_groups(texts[::-1], [0] * 5, similarity=0.7, encoder=enc, metric="embedding")
    np.testing.assert_array_equal(ids, [0, 1, 1, 1, 1])


def test_episode_groups_never_merge_and_ids_follow_first_appearance():
    enc = angle_encoder(ANGLES)
    texts = ["bravo", "alpha", "alpha", "bravo", "echo"]
    ids = anchor_groups(
        texts, ["g2", "g1", "g2", "g1", "g1"], similarity=0.9, encoder=enc, metric="embedding"
    )
    # g2: bravo, alpha (cos 20 = 0.94): one cluster; g1: alpha, bravo one, echo alone.
    np.testing.assert_array_equal(ids, [0, 1, 0, 1, 2])


def test_each_distinct_cut_text_is_embedded_once_in_one_call():
    calls: list[list[str]] = []
    enc = angle_encoder(ANGLES, calls)
    texts = ["see alpha", "see bravo", "see alpha", "see alpha", "see delta", "only echo"]
    groups = [0, 0, 0, 1, 1, 2]
    ids = anchor_groups(texts, groups, similarity=0.9, encoder=enc, metric="embedding")
    # Group 0 cuts "see " off: alpha, bravo; group 1: alpha, delta; group 2 has one text.
    assert calls == [["alpha", "bravo", "delta"]]
    np.testing.assert_array_equal(ids, [0, 0, 0, 1, 2, 3])


@pytest.mark.parametrize(
    ("texts", "cut"),
    [
        (["You see a mug. Task: cool it.", "You see a cup. Task: cool it."], ["mug.", "cup."]),
        (["Target: 7\nCurrent: 3", "Target: 7\nCurrent: 4"], ["3", "4"]),
        (["ab cd", "ab ce"], ["cd", "ce"]),  # no word is cut in two
        (["cat", "hat"], ["cat", "hat"]),
        (["a b", "a x b"], ["b", "x b"]),  # the cuts never overlap
        (["a  b", "a x b"], ["b", "x b"]),  # nothing is cut to "": the shared end goes back
        (["Task: go\n", "Task: go\nYou see a mug."], ["go", "go\nYou see a mug."]),
        (["a b", "a b c"], ["b", "b c"]),
        (["same"], ["same"]),
        ([], []),
    ],
)
def test_strip_shared_by_hand(texts, cut):
    assert strip_shared(texts) == cut


@pytest.mark.parametrize(
    ("texts", "cut"),
    [
        # A text that the shared start would empty: the words are given back to the last one
        # every text keeps, however long the whitespace runs between them.
        (["go" + " " * 5000, "go" + " " * 5000 + "north"], ["go", "go" + " " * 5000 + "north"]),
        ([" " * 5000, " " * 5000 + "b"], ["", "b"]),  # an all-space text: nothing to keep
        (["a b" + " " * 300, "a b" + " " * 300 + "c"], ["b", "b" + " " * 300 + "c"]),
        (["x a\t\n  ", "x a\t\n  y", "x a\t\n  z"], ["a", "a\t\n  y", "a\t\n  z"]),
        (["p q r ", "p q r s", "p q "], ["q r", "q r s", "q"]),
    ],
)
def test_strip_shared_gives_back_words_over_long_whitespace(texts, cut):
    assert strip_shared(texts) == cut


class _CountedSlices(str):
    """A str that counts how often it is sliced (each slice copies up to its length)."""

    slices = 0

    def __getitem__(self, key):
        _CountedSlices.slices += isinstance(key, slice)
        return str.__getitem__(self, key)


def test_strip_shared_slices_its_texts_a_bounded_number_of_times():
    # Giving back one whitespace character at a time sliced the text once per character:
    # quadratic (100k spaces took seconds). The number of slices must not grow with the run.
    counts = []
    for spaces in (100, 10_000):
        _CountedSlices.slices = 0
        texts = [_CountedSlices("go" + " " * spaces), _CountedSlices("go" + " " * spaces + "n")]
        assert strip_shared(texts) == ["go", "go" + " " * spaces + "n"]
        counts.append(_CountedSlices.slices)
    assert counts[0] == counts[1] < 20


def test_bad_encoders_and_inputs_are_clear_errors():
    texts, groups = ["alpha", "bravo"], [0, 0]
    with pytest.raises(ValueError, match="shape"):
        anchor_groups(
            texts, groups, similarity=0.5, metric="embedding", encoder=lambda t: np.ones(len(t))
        )
    with pytest.raises(ValueError, match="NaN"):
        anchor_groups(
            texts,
            groups,
            similarity=0.5,
            metric="embedding",
            encoder=lambda t: np.full((2, 3), np.nan),
        )
    with pytest.raises(ValueError, match="zero vector"):
        anchor_groups(
            texts, groups, similarity=0.5, metric="embedding", encoder=lambda t: np.zeros((2, 3))
        )
    with pytest.raises(ValueError, match="str anchors"):
        anchor_groups([1, 2], groups, similarity=0.5, metric="embedding")
    with pytest.raises(ValueError, match=r"\(0, 1\)"):
        anchor_groups(texts, groups, similarity=1.0, metric="embedding")
    with pytest.raises(ValueError, match="only used with"):
        anchor_groups(texts, groups, similarity=0.5, encoder=angle_encoder(ANGLES))
    with pytest.raises(ValueError, match="only used with"):
        anchor_groups(texts, groups, encoder=angle_encoder(ANGLES), metric="embedding")
    with pytest.raises(ValueError, match="must be callable"):
        anchor_groups(texts, groups, similarity=0.5, metric="embedding", encoder="minilm")
    with pytest.raises(ValueError, match="dtype"):
        SentenceEncoder(dtype="float16")
    with pytest.raises(ValueError, match="no transformers model"):
        SentenceEncoder("/nonexistent/model")
    # Nothing to embed: no encoder is loaded or called.
    assert anchor_groups([], [], similarity=0.5, metric="embedding").shape == (0,)
    one = anchor_groups(
        ["x", "x", "y"], [0, 0, 1], similarity=0.5, encoder=_never, metric="embedding"
    )
    np.testing.assert_array_equal(one, [0, 0, 1])


@pytest.mark.parametrize("scale", [1e308, 1e-300, 5e-324])
def test_huge_and_tiny_encoder_vectors_give_the_cosines_of_their_directions(scale):
    # Squaring 1e308 overflows to inf (every cosine was 0: alpha and bravo, 20 degrees apart,
    # split at t = 0.9); squaring 1e-300 underflows to 0 (a "zero vector" error).
    unit = angle_encoder(ANGLES)
    texts = ["alpha", "bravo", "charlie", "delta", "echo"]
    ids = anchor_groups(
        texts,
        [0] * 5,
        similarity=math.cos(math.radians(30)),
        encoder=lambda t: unit(t) * scale,
        metric="embedding",
    )
    np.testing.assert_array_equal(ids, [0, 0, 1, 1, 2])  # as test_first_fit_by_hand's
    same = anchor_groups(
        ["alpha", "bravo"],
        [0, 0],
        similarity=0.99,
        encoder=lambda t: np.full((len(t), 384), scale),
        metric="embedding",
    )
    np.testing.assert_array_equal(same, [0, 0])  # one direction: one cluster
    with pytest.raises(ValueError, match="NaN or inf"):
        anchor_groups(
            ["alpha", "bravo"],
            [0, 0],
            similarity=0.5,
            encoder=lambda t: np.array([[scale, np.inf], [1.0, 0.0]]),
            metric="embedding",
        )


def _never(texts):
    raise AssertionError(f"the encoder was called with {texts}")


# ----------------------------------------------------------------------- the real MiniLM


@pytest.fixture(scope="module")
def minilm_fp32() -> SentenceEncoder:
    return SentenceEncoder(dtype="float32")


def brute_force(texts, groups, threshold, encoder) -> list[int]:
    """Every pair's cosine; each text embedded alone; first-fit by plain loops."""
    labels: dict[tuple, int] = {}
    out = []
    by_group: dict[object, list[str]] = {}
    for text, group in zip(texts, groups, strict=True):
        by_group.setdefault(group, [])
        if text not in by_group[group]:
            by_group[group].append(text)
    cluster_of: dict[tuple, tuple] = {}
    for group, distinct in by_group.items():
        cut = _cut_by_tokens(distinct)
        vecs = [encoder([c])[0] for c in cut]
        reps: list[int] = []
        for i, v in enumerate(vecs):
            for r in reps:
                cos = float(np.dot(v, vecs[r]) / np.linalg.norm(v) / np.linalg.norm(vecs[r]))
                assert abs(cos - threshold) > 1e-4, "undecided pair: pick another threshold"
                if cos >= threshold:
                    cluster_of[(group, distinct[i])] = (group, r)
                    break
            else:
                reps.append(i)
                cluster_of[(group, distinct[i])] = (group, i)
    for text, group in zip(texts, groups, strict=True):
        out.append(labels.setdefault(cluster_of[(group, text)], len(labels)))
    return out


def _cut_by_tokens(texts: list[str]) -> list[str]:
    """The shared words at both ends cut, on whitespace-separated tokens."""
    if len(texts) < 2:
        return [t.strip() for t in texts]
    split = [re.split(r"(\s+)", t) for t in texts]
    head = 0
    while (
        all(len(s) > head + 1 for s in split)
        and len({s[head] for s in split}) == 1
        and (len({s[head + 1] for s in split}) == 1)
    ):
        head += 2  # a whole word and the space after it
    tail = 0
    while (
        all(len(s) > tail + 1 for s in split)
        and len({s[-1 - tail] for s in split}) == 1
        and (len({s[-2 - tail] for s in split}) == 1)
    ):
        tail += 2
    shortest = min(len(s) for s in split)
    if head + tail > shortest:
        tail = 0
    return ["".join(s[head : len(s) - tail]).strip() for s in split]


WORDS = ["mug", "cup", "fridge", "red", "apple", "you", "see", "a", "the", "on", "is", "open"]


@pytest.mark.parametrize("seed", range(4))
def test_minilm_partition_equals_brute_force(seed, minilm_fp32):
    rng = np.random.default_rng(seed)
    texts, groups = [], []
    for g in range(3):
        pool = [
            "You are in a room. "
            + " ".join(rng.choice(WORDS, int(rng.integers(2, 6))))
            + " Carrying: nothing."
            for _ in range(5)
        ]
        for _ in range(12):
            texts.append(str(pool[int(rng.integers(len(pool)))]))
            groups.append(g)
    checked, merged = 0, False
    for threshold in (0.6, 0.7, 0.8, 0.9):
        try:
            expected = brute_force(texts, groups, threshold, minilm_fp32)
        except AssertionError:
            continue
        merged |= len(set(expected)) < len(set(zip(texts, groups, strict=True)))
        checked += 1
        got = anchor_groups(
            texts, groups, similarity=threshold, encoder=minilm_fp32, metric="embedding"
        )
        np.testing.assert_array_equal(got, expected)
    assert checked >= 2 and merged  # the case can fail: some thresholds merge states


def test_minilm_default_encoder_is_deterministic_and_groups_by_meaning():
    enc = default_encoder()
    assert enc is default_encoder()  # loaded once per process
    texts = [
        "You arrive at fridge 1. The fridge 1 is closed.",
        "You arrive at fridge 1. The fridge 1 is open. In it, you see an apple 1.",
        "You arrive at fridge 1. The fridge 1 is closed.",
        "You arrive at fridge 1. The fridge 1 is open. In it, you see an apple 1 and a mug 2.",
    ]
    a = anchor_groups(texts, [0] * 4, similarity=0.8, metric="embedding")
    b = anchor_groups(list(texts), [0] * 4, similarity=0.8, metric="embedding")
    np.testing.assert_array_equal(a, b)
    assert a[0] == a[2]  # identical states
    assert a[1] != a[0]  # closed and open fridges are not merged at 0.8
    vectors = enc(["the mug", "the cup", "a red apple"])
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]  # a mug is closer to a cup


def test_concurrent_calls_from_threads_equal_sequential():
    rng = np.random.default_rng(0)
    batches = []
    for k in range(4):
        texts = [" ".join(rng.choice(WORDS, 4)) for _ in range(30)]
        batches.append((texts, [i % 3 for i in range(30)], 0.7 + 0.05 * k))
    sequential = [anchor_groups(t, g, similarity=s, metric="embedding") for t, g, s in batches]
    with ThreadPoolExecutor(max_workers=4) as pool:
        threaded = list(
            pool.map(
                lambda b: anchor_groups(b[0], b[1], similarity=b[2], metric="embedding"),
                batches * 2,
            )
        )
    for got, want in zip(threaded, sequential * 2, strict=True):
        np.testing.assert_array_equal(got, want)
    # The case can fail: some batch has clusters that are neither all nor none merged.
    distinct = [len(set(zip(t, g, strict=True))) for t, g, _ in batches]
    assert any(1 < len(set(ids.tolist())) < d for ids, d in zip(sequential, distinct, strict=True))


def test_gigpo_advantages_takes_the_embedding_metric(monkeypatch):
    import gigpo_algo.embedding as embedding

    seen: list[list[str]] = []
    real = embedding.default_encoder()

    def spy() -> object:
        return lambda texts: seen.append(list(texts)) or real(texts)

    monkeypatch.setattr(embedding, "default_encoder", spy)
    texts = ["at 1, mug", "at 1, cup", "at 2, mug", "at 1, mug", "at 2, mug", "at 2, cup"]
    kwargs = dict(rewards=[0, 1, 0, 0, 0, 1], traj_ids=[0, 0, 1, 1, 2, 2], group_ids=[0] * 6)
    res = gigpo_advantages(**kwargs, anchors=texts, similarity=0.9, similarity_metric="embedding")
    # The packaged encoder saw each distinct text once, less the shared "at ".
    assert seen == [["1, mug", "1, cup", "2, mug", "2, cup"]]
    vectors = real(seen[0])
    expected = brute_force_first_fit(vectors, 0.9)
    codes = {t: expected[i] for i, t in enumerate(dict.fromkeys(texts))}
    labels: dict[int, int] = {}
    want = [labels.setdefault(codes[t], len(labels)) for t in texts]
    np.testing.assert_array_equal(res.step_group_ids, want)
    # The step level compares each row's return with its step group's (norm "mean").
    ids, returns = np.asarray(res.step_group_ids), np.asarray(res.returns)
    for k in set(ids.tolist()):
        rows = ids == k
        want_a_s = returns[rows] - returns[rows].mean() if rows.sum() > 1 else 0.0
        np.testing.assert_allclose(np.asarray(res.step_advantages)[rows], want_a_s, atol=1e-12)


def brute_force_first_fit(vectors: np.ndarray, threshold: float) -> list[int]:
    reps: list[int] = []
    out = []
    for i, v in enumerate(vectors):
        for k, r in enumerate(reps):
            if float(v @ vectors[r]) >= threshold:
                out.append(k)
                break
        else:
            out.append(len(reps))
            reps.append(i)
    return out


def test_a_missing_encoder_package_is_a_settings_error_naming_the_key(monkeypatch):
    import gigpo_algo.embedding as embedding
    from gigpo_algo.estimators import check_settings

    settings = {"similarity": 0.9, "similarity_metric": "embedding"}
    check_settings("gigpo", settings, prefix="algo.")  # installed here: fine
    monkeypatch.setattr(embedding, "DEFAULT_MODEL_PACKAGE", "no_such_encoder_package")
    with pytest.raises(ValueError, match=r"algo.similarity_metric='embedding'.*gigpo\[dense\]"):
        check_settings("gigpo", settings, prefix="algo.")
