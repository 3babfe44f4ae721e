"""One array convention for every public function: the input's form comes back out."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
import torch

from gigpo_algo import (
    aggregate_loss,
    broadcast_to_tokens,
    entropy_from_logits,
    grpo,
    kl_penalty,
    ppo_clip_loss,
    turns_to_tokens,
)
from gigpo_algo._arrays import NUMPY, ArrayKind, common_kind, to_float_array, to_native

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
DTYPES = [torch.float32, torch.float64, torch.bfloat16]
SPANS = [[0, 0, 1], [0, 1, 3], [1, 0, 2]]


def _token_and_loss_calls(x2, x3, v2, v3):
    """Every tokens/losses function on (B, T) = (2, 3) inputs built from the given arrays."""
    return {
        "ppo_clip_loss": lambda: ppo_clip_loss(x2, x2, x2, dual_clip=3.0),
        "kl_penalty": lambda: kl_penalty(x2, x2),
        "entropy_from_logits": lambda: entropy_from_logits(x3),
        "aggregate_loss": lambda: aggregate_loss(x2, x2),
        "broadcast_to_tokens": lambda: broadcast_to_tokens(v2, x2),
        "turns_to_tokens": lambda: turns_to_tokens(v3, SPANS, (2, 3)),
    }


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_tensor_in_gives_tensor_out_same_dtype_and_device(device, dtype):
    def t(*shape):
        return torch.rand(*shape, dtype=torch.float64).to(device, dtype)

    calls = _token_and_loss_calls(t(2, 3), t(2, 3, 4), t(2), t(3))
    for name, call in calls.items():
        out = call()
        assert isinstance(out, torch.Tensor), name
        assert out.dtype == dtype and out.device.type == device, name


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_lists_and_arrays_with_a_tensor_follow_the_tensor(dtype):
    lp = torch.zeros(2, 3, dtype=dtype)
    assert ppo_clip_loss(lp, np.zeros((2, 3)), [[1.0] * 3] * 2).dtype == dtype
    assert broadcast_to_tokens([1.0, 2.0], torch.ones(2, 3, dtype=dtype)).dtype == dtype
    assert aggregate_loss(np.ones((2, 3)), torch.ones(2, 3, dtype=dtype)).dtype == dtype


@pytest.mark.parametrize("make", [lambda a: np.asarray(a).tolist(), np.asarray, np.float32])
def test_no_tensor_gives_float64_numpy(make):
    rng = np.random.default_rng(0)
    calls = _token_and_loss_calls(
        make(rng.random((2, 3))), make(rng.random((2, 3, 4))), make(rng.random(2)), make([1.0] * 3)
    )
    for name, call in calls.items():
        out = call()
        assert isinstance(out, (np.ndarray, np.floating)), name
        assert out.dtype == np.float64, name


def test_advantages_keep_numpy_dtype_and_tensor_dtype():
    scores, groups = [1.0, 0.0, 2.0, 2.0], [0, 0, 1, 1]
    assert grpo(scores, groups).dtype == np.float64
    assert grpo(np.asarray(scores, np.float32), groups).dtype == np.float32
    out = grpo(torch.tensor(scores, dtype=torch.bfloat16), groups)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16
    # an integer tensor gives torch's default float dtype
    assert grpo(torch.tensor([1, 0, 2, 2]), groups).dtype == torch.get_default_dtype()
    assert turns_to_tokens(torch.tensor([1, 2, 3]), SPANS, (2, 3)).dtype == torch.float32


def test_losses_and_broadcast_keep_autograd():
    lp = torch.zeros(2, 3, requires_grad=True)
    values = torch.ones(2, requires_grad=True)
    adv = broadcast_to_tokens(values, torch.ones(2, 3))
    loss = aggregate_loss(ppo_clip_loss(lp, torch.zeros(2, 3), adv) + kl_penalty(lp, lp * 0), adv)
    loss.backward()
    assert lp.grad is not None and torch.isfinite(lp.grad).all() and lp.grad.abs().sum() > 0
    assert values.grad is not None


def test_turns_to_tokens_is_detached():
    values = torch.ones(3, requires_grad=True)
    assert not turns_to_tokens(values, SPANS, (2, 3)).requires_grad


def test_entropy_gradient_is_finite_with_masked_logits():
    logits = torch.tensor([[[math.log(3.0), 0.0, -math.inf, -math.inf]]], requires_grad=True)
    ent = entropy_from_logits(logits)
    ent.sum().backward()
    p = np.array([0.75, 0.25])
    assert float(ent.detach()) == pytest.approx(-(p * np.log(p)).sum())
    assert torch.isfinite(logits.grad).all()
    assert logits.grad[0, 0, 2:].abs().sum() == 0
    np.testing.assert_allclose(
        entropy_from_logits(logits.detach().numpy()), ent.detach().numpy(), rtol=1e-6
    )


BAD = [
    (lambda: ppo_clip_loss(torch.zeros(1, 2), [[0.0, "x"]], [[0.0, 0.0]]), "old_log_probs"),
    (lambda: ppo_clip_loss([[0.0, 0.0]], [[0.0, "x"]], [[0.0, 0.0]]), "old_log_probs"),
    (lambda: kl_penalty(np.zeros((1, 2)), [[0.0], [0.0, 1.0]]), "ref_log_probs"),
    (lambda: aggregate_loss([[1.0], [1.0, 2.0]], [[1, 1]]), "loss"),
    (lambda: aggregate_loss(np.zeros((1, 2)), torch.ones(1, 3)), "response_mask"),
    (lambda: entropy_from_logits([[["a"]]]), "logits"),
    (lambda: broadcast_to_tokens(["x", 1.0], [[1, 0], [1, 1]]), "values"),
    (lambda: broadcast_to_tokens(torch.ones(2), [[1, "y"], [1, 1]]), "response_mask"),
    (lambda: turns_to_tokens(["a", "b", "c"], SPANS, (2, 3)), "values"),
    (lambda: turns_to_tokens(torch.ones(2), SPANS, (2, 3)), "values"),
]


@pytest.mark.parametrize("call,name", BAD, ids=[f"{i}-{c[1]}" for i, c in enumerate(BAD)])
def test_bad_argument_value_error_names_it(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_array_kind_round_trip():
    assert ArrayKind.of([1, 2]) == NUMPY and ArrayKind.of(np.arange(3)) == NUMPY
    assert ArrayKind.of(np.zeros(2, np.float16)).wrap(np.ones(2)).dtype == np.float16
    kind = ArrayKind.of(torch.zeros(2, dtype=torch.bfloat16))
    assert kind.is_torch and kind.wrap(np.ones(2)).dtype == torch.bfloat16
    assert not NUMPY.is_torch and NUMPY.wrap(np.ones(2)).dtype == np.float64
    assert common_kind([1.0], np.zeros(1), torch.zeros(1, dtype=torch.float64)).is_torch
    assert common_kind([1.0], np.zeros(1, np.float32)) == NUMPY


def test_to_native_keeps_tensors_and_converts_the_rest():
    t = torch.zeros(2, dtype=torch.float16, requires_grad=True)
    kind, (a, b, c) = to_native(a=t, b=[1.0, 2.0], c=np.ones(2))
    assert a is t and b.dtype == c.dtype == torch.float16 and kind.xp.exp(a).requires_grad
    kind, (a, b) = to_native(a=[1, 2], b=np.ones(2, np.float32))
    assert not kind.is_torch and a.dtype == b.dtype == np.float64


def test_to_float_array_validates_and_remembers_kind():
    arr, kind = to_float_array(torch.tensor([1.0, 2.0], dtype=torch.bfloat16), "x")
    assert arr.dtype == np.float64 and kind.torch_dtype == torch.bfloat16
    with pytest.raises(ValueError, match="x must have 1 dimension"):
        to_float_array([[1.0]], "x")
    with pytest.raises(ValueError, match="x contains NaN"):
        to_float_array([1.0, math.nan], "x")
    assert np.isnan(to_float_array([math.nan], "x", finite=False)[0]).all()
    with pytest.raises(ValueError, match="x must be numeric"):
        to_float_array(["a"], "x")


def test_numpy_users_never_import_torch():
    code = (
        "import sys, numpy as np, gigpo_algo as g\n"
        "g.gigpo_advantages([0.0, 1.0, 0.0, 1.0], [0, 0, 1, 1], [0] * 4, ['a', 'b', 'a', 'c'])\n"
        "x = np.zeros((2, 3))\n"
        "g.aggregate_loss(g.ppo_clip_loss(x, x, x) + g.kl_penalty(x, x), x)\n"
        "g.entropy_from_logits(np.zeros((2, 3, 4)))\n"
        "g.broadcast_to_tokens([1.0, 2.0], x)\n"
        "g.turns_to_tokens([1.0], [[0, 0, 2]], (2, 3))\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
