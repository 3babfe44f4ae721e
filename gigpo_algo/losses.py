"""Policy-gradient losses: the PPO clipped surrogate, GSPO's sequence-level surrogate, the
critic's clipped value loss, KL estimators, entropy, and aggregation.

Each function works on per-token arrays of shape (B, T) (B sequences, T response tokens) and
accepts numpy arrays, lists or torch tensors (see :mod:`gigpo_algo._arrays`). With a tensor,
everything is computed in torch on the first tensor's device, so the result keeps its autograd
graph; no value is synchronised. Without one, the result is float64 numpy.
"""

from __future__ import annotations

import math
from typing import Any

from gigpo_algo._arrays import to_native

KL_ESTIMATORS = ("k1", "k2", "k3")
#: The policy losses: PPO's per-token ratio (:func:`ppo_clip_loss`) or GSPO's per-sequence
#: ratio (:func:`gspo_loss`).
POLICY_LOSSES = ("ppo", "gspo")
AGGREGATIONS = (
    "token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)
# exp() of a log-ratio beyond this overflows float16/bfloat16 and means the policy moved
# far off its rollout policy anyway; the ratio is then clipped by PPO.
MAX_LOG_RATIO = 20.0


def _same_shapes(**arrays: Any) -> tuple[int, ...]:
    """The common (B, T) shape of converted arrays, checked."""
    shapes = {name: tuple(a.shape) for name, a in arrays.items()}
    first_name, first = next(iter(shapes.items()))
    if len(first) != 2:
        raise ValueError(f"{first_name} must have shape (B, T), got {first}")
    for name, shape in shapes.items():
        if shape != first:
            raise ValueError(f"{name} has shape {shape}, expected {first} like {first_name}")
    return first


def ppo_clip_loss(
    log_probs: Any,
    old_log_probs: Any,
    advantages: Any,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = None,
) -> Any:
    """Per-token PPO clipped surrogate loss (to minimise), with optional dual clip.

    ``ratio = exp(log_probs - old_log_probs)``;
    ``loss = max(-A * ratio, -A * clip(ratio, 1 - clip_low, 1 + clip_high))``; with
    ``dual_clip = c > 1`` (Ye et al. 2020), tokens with ``A < 0`` use ``min(loss, -A * c)``,
    which bounds the loss when the ratio explodes on a negative advantage. Asymmetric
    ``clip_high > clip_low`` is DAPO's clip-higher.

    Args:
        log_probs: float, shape (B, T): log pi_theta of the response tokens.
        old_log_probs: float, shape (B, T): log-probs under the rollout policy.
        advantages: float, shape (B, T): per-token advantages (see
            :mod:`gigpo_algo.tokens`).
        clip_low, clip_high: clip range, each >= 0.
        dual_clip: None, or c > 1.

    Returns:
        Per-token loss, shape (B, T); reduce it with :func:`aggregate_loss`.
    """
    kind, (lp, old, adv) = to_native(
        log_probs=log_probs, old_log_probs=old_log_probs, advantages=advantages
    )
    _same_shapes(log_probs=lp, old_log_probs=old, advantages=adv)
    _check_clip(clip_low, clip_high, dual_clip)
    xp = kind.xp
    ratio = xp.exp(xp.clip(lp - old, -MAX_LOG_RATIO, MAX_LOG_RATIO))
    return _clipped_surrogate(xp, ratio, adv, clip_low, clip_high, dual_clip)


def gspo_loss(
    log_probs: Any,
    old_log_probs: Any,
    advantages: Any,
    response_mask: Any,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = None,
) -> Any:
    """Per-token GSPO surrogate loss (Zheng et al. 2025, Group Sequence Policy Optimization):
    PPO's clipped objective with one importance ratio per sequence.

    ``s_i = exp(mean_t (log_probs - old_log_probs))`` over the response tokens of sequence
    i (the geometric mean of its token ratios; gradients flow through every token's
    log-prob); every response token of i gets ``s_i`` as its ratio, and
    ``loss = max(-A * s, -A * clip(s, 1 - clip_low, 1 + clip_high))`` per token, with the
    same ``dual_clip`` as :func:`ppo_clip_loss`. Reduce it per sequence
    (``aggregate_loss(..., mode="seq-mean-token-mean")``, GSPO's objective and OpenRLHF's
    ``policy_loss_type="gspo"``). The paper's clip range is far narrower than PPO's
    (3e-4 / 4e-4), since a sequence ratio moves less than a token's.

    With a different advantage on different tokens of one sequence (GiGPO's turns in one
    episode-long sample), the unclipped gradient of sequence i is
    ``-s_i * mean_t(A_t) * mean_t grad log pi_t``: every token is pushed by the sequence's
    mean advantage, so the turns of one sample no longer get their own credit. One sample
    per env step (a step's tokens share one advantage) keeps it.

    Args:
        log_probs: float, shape (B, T): log pi_theta of the response tokens.
        old_log_probs: float, shape (B, T): log-probs under the rollout policy.
        advantages: float, shape (B, T): per-token advantages.
        response_mask: shape (B, T), 1 for response tokens; a sequence without any gets
            ratio 1 and is left out by the aggregation.
        clip_low, clip_high: clip range, each >= 0, ``clip_low < 1``.
        dual_clip: None, or c > 1.

    Returns:
        Per-token loss, shape (B, T) (padding and env tokens hold values the mask removes).
    """
    kind, (lp, old, adv, mask) = to_native(
        log_probs=log_probs,
        old_log_probs=old_log_probs,
        advantages=advantages,
        response_mask=response_mask,
    )
    _same_shapes(log_probs=lp, old_log_probs=old, advantages=adv, response_mask=mask)
    _check_clip(clip_low, clip_high, dual_clip)
    xp = kind.xp
    seq_log_ratio = sequence_log_ratio(lp, old, mask)
    ratio = xp.exp(xp.clip(seq_log_ratio, -MAX_LOG_RATIO, MAX_LOG_RATIO))[:, None] * mask
    return _clipped_surrogate(xp, ratio, adv, clip_low, clip_high, dual_clip)


def sequence_log_ratio(log_probs: Any, old_log_probs: Any, response_mask: Any) -> Any:
    """GSPO's log-ratio of each sequence: the mean over its response tokens of
    ``log_probs - old_log_probs`` (the log of the geometric mean of its token ratios).

    Args:
        log_probs, old_log_probs: float, shape (B, T).
        response_mask: shape (B, T), 1 for response tokens.

    Returns:
        float, shape (B,), in nats; 0 for a sequence without response tokens.
    """
    kind, (lp, old, mask) = to_native(
        log_probs=log_probs, old_log_probs=old_log_probs, response_mask=response_mask
    )
    _same_shapes(log_probs=lp, old_log_probs=old, response_mask=mask)
    xp = kind.xp
    mask = mask * 1.0
    tokens = xp.maximum(xp.sum(mask, axis=1), kind.asarray(1.0))
    return xp.sum((lp - old) * mask, axis=1) / tokens


def _check_clip(clip_low: float, clip_high: float, dual_clip: float | None) -> None:
    if not (clip_low >= 0 and clip_high >= 0):
        raise ValueError(f"clip_low and clip_high must be >= 0, got {clip_low}, {clip_high}")
    if clip_low >= 1:
        raise ValueError(f"clip_low must be < 1, got {clip_low}")
    if dual_clip is not None and not dual_clip > 1:
        raise ValueError(f"dual_clip must be > 1 or None, got {dual_clip!r}")


def _clipped_surrogate(
    xp: Any, ratio: Any, adv: Any, clip_low: float, clip_high: float, dual_clip: float | None
) -> Any:
    """``max(-A r, -A clip(r))``, and the dual clip's bound on negative advantages."""
    unclipped = -adv * ratio
    clipped = -adv * xp.clip(ratio, 1.0 - clip_low, 1.0 + clip_high)
    loss = xp.maximum(unclipped, clipped)
    if dual_clip is not None:
        loss = xp.where(adv < 0, xp.minimum(loss, -adv * dual_clip), loss)
    return loss


def value_loss(
    values: Any,
    old_values: Any,
    returns: Any,
    *,
    value_clip: float | None = None,
) -> Any:
    """Per-token clipped value loss of a PPO critic (to minimise).

    ``0.5 * max((V - R)^2, (V_clip - R)^2)`` with ``V_clip = V_old + clip(V - V_old, -c, c)``
    (PPO2's value clipping: the critic cannot move further than ``c`` from the values it
    had at rollout time and gain from it). ``value_clip=None`` is the plain
    ``0.5 * (V - R)^2``.

    Args:
        values: float, shape (B, T): the critic's values now.
        old_values: float, shape (B, T): its values at rollout time.
        returns: float, shape (B, T): the regression targets (e.g. GAE's returns).
        value_clip: c > 0, or None.

    Returns:
        Per-token loss, shape (B, T), in squared reward units; reduce it with
        :func:`aggregate_loss`.
    """
    kind, (v, old, ret) = to_native(values=values, old_values=old_values, returns=returns)
    _same_shapes(values=v, old_values=old, returns=ret)
    if value_clip is not None and not value_clip > 0:
        raise ValueError(f"value_clip must be > 0 or None, got {value_clip!r}")
    xp = kind.xp
    plain = (v - ret) ** 2
    if value_clip is None:
        return 0.5 * plain
    clipped = (old + xp.clip(v - old, -value_clip, value_clip) - ret) ** 2
    return 0.5 * xp.maximum(plain, clipped)


def kl_penalty(log_probs: Any, ref_log_probs: Any, *, estimator: str = "k3") -> Any:
    """Per-token estimate of KL(pi_theta || pi_ref) from samples of pi_theta.

    With ``d = ref_log_probs - log_probs``: ``"k1"`` = -d (unbiased, high variance, can be
    negative); ``"k2"`` = d^2 / 2 (biased, low variance); ``"k3"`` = exp(d) - d - 1
    (unbiased and always >= 0: Schulman's low-variance estimator, used by GRPO).

    Args:
        log_probs: float, shape (B, T).
        ref_log_probs: float, shape (B, T): log-probs under the frozen reference.
        estimator: ``"k1"``, ``"k2"`` or ``"k3"``.

    Returns:
        float, shape (B, T), in nats.
    """
    kind, (lp, ref) = to_native(log_probs=log_probs, ref_log_probs=ref_log_probs)
    _same_shapes(log_probs=lp, ref_log_probs=ref)
    if estimator not in KL_ESTIMATORS:
        raise ValueError(f"estimator must be one of {KL_ESTIMATORS}, got {estimator!r}")
    xp = kind.xp
    d = ref - lp
    if estimator == "k1":
        return -d
    if estimator == "k2":
        return 0.5 * d * d
    d = xp.clip(d, -MAX_LOG_RATIO, MAX_LOG_RATIO)
    return xp.exp(d) - d - 1.0


def entropy_from_logits(logits: Any) -> Any:
    """Per-token entropy of the next-token distribution, ``-sum_v p_v log p_v``.

    Args:
        logits: float, shape (B, T, V): unnormalised scores over a vocabulary of V tokens
            (already divided by the sampling temperature, if any).

    Returns:
        float, shape (B, T), in nats; between 0 and ``log V``. Computed in the input's
        precision for a tensor (pass float32 logits for a float32 entropy), else in float64.
        Logits of -inf (masked-out tokens) are allowed and get a zero gradient.
    """
    kind, (x,) = to_native(logits=logits)
    shape = tuple(x.shape)
    if len(shape) != 3 or shape[-1] < 1:
        raise ValueError(f"logits must have shape (B, T, V) with V >= 1, got {shape}")
    xp = kind.xp
    log_p = xp.log_softmax(x, axis=-1)
    p = xp.exp(log_p)
    # 0 log 0 = 0 for tokens masked out with -inf logits; selecting before multiplying
    # keeps 0 * -inf (NaN) out of both the value and the gradient.
    return -xp.sum(p * xp.where(p > 0, log_p, 0.0 * p), axis=-1)


def aggregate_loss(
    loss: Any,
    response_mask: Any,
    *,
    mode: str = "token-mean",
    norm_length: int | None = None,
    denominator: float | None = None,
) -> Any:
    """Reduce a per-token loss to a scalar over the response tokens.

    Modes:
        ``"token-mean"``: sum over all tokens / number of tokens (DAPO; every token counts
        the same, so long responses weigh more).
        ``"seq-mean-token-sum"``: mean over sequences of each sequence's token sum.
        ``"seq-mean-token-mean"``: mean over sequences of each sequence's token mean (the
        original GRPO); sequences with no response token are left out.
        ``"seq-mean-token-sum-norm"``: sum over all tokens / (B * norm_length) (Dr. GRPO's
        constant normaliser; ``norm_length`` defaults to T).

    Each mode is a sum over this batch (of tokens, or of sequences' sums or means) divided
    by a normaliser (:func:`loss_denominator`). For gradient accumulation, where a batch
    runs as several micro-batches, pass the *whole* batch's normaliser as ``denominator``
    to each micro-batch's call: the micro-batches' results then sum to the whole batch's
    (with a micro-batch's own normaliser they would not: a mean of means is not the mean).

    Args:
        loss: float, shape (B, T).
        response_mask: shape (B, T), 1 for response tokens, 0 for padding / env tokens.
        mode: one of the above.
        norm_length: positive int, for ``"seq-mean-token-sum-norm"`` only.
        denominator: the normaliser to divide by, > 0 (default: this batch's own,
            ``loss_denominator(response_mask, mode=mode, norm_length=norm_length)``).

    Returns:
        A scalar (0-d tensor for torch input). 0 when the mask is all zeros.
    """
    kind, (x, mask) = to_native(loss=loss, response_mask=response_mask)
    _same_shapes(loss=x, response_mask=mask)
    if denominator is None:
        total = _denominator(kind, mask, mode, norm_length)
    else:
        _denominator_args(mode, norm_length)
        try:
            total = float(denominator)
        except (TypeError, ValueError):
            total = math.nan
        if isinstance(denominator, bool) or not total > 0:
            raise ValueError(f"denominator must be a number > 0, got {denominator!r}")
    xp = kind.xp
    one = kind.asarray(1.0)
    masked = x * mask
    if mode in ("token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"):
        return xp.sum(masked) / total
    per_seq = xp.sum(masked, axis=1)
    tokens = xp.sum(mask, axis=1)
    seq_means = xp.where(tokens > 0, per_seq / xp.maximum(tokens, one), 0.0 * per_seq)
    return xp.sum(seq_means) / total


def loss_denominator(
    response_mask: Any, *, mode: str = "token-mean", norm_length: int | None = None
) -> float:
    """The normaliser :func:`aggregate_loss` divides by in ``mode``, for a batch with this
    mask: its response tokens (``token-mean``), its sequences (``seq-mean-token-sum``), its
    sequences with a response token (``seq-mean-token-mean``), or sequences x
    ``norm_length`` (default T; ``seq-mean-token-sum-norm``); at least 1.

    Args:
        response_mask: shape (B, T), 1 for response tokens.

    Returns:
        A Python float >= 1 (it synchronises a tensor's device once).
    """
    kind, (mask,) = to_native(response_mask=response_mask)
    return float(_denominator(kind, mask, mode, norm_length))


def _denominator_args(mode: str, norm_length: int | None) -> None:
    """Raises ValueError, naming the argument, for a mode or a norm_length no call can use."""
    if mode not in AGGREGATIONS:
        raise ValueError(f"mode must be one of {AGGREGATIONS}, got {mode!r}")
    if norm_length is not None and (isinstance(norm_length, bool) or not norm_length > 0):
        raise ValueError(f"norm_length must be a positive int, got {norm_length!r}")


def _denominator(kind: Any, mask: Any, mode: str, norm_length: int | None) -> Any:
    """:func:`loss_denominator`'s value, left as an array or tensor (no synchronisation)."""
    batch, length = _same_shapes(response_mask=mask)
    _denominator_args(mode, norm_length)
    xp = kind.xp
    one = kind.asarray(1.0)
    if mode == "token-mean":
        return xp.maximum(xp.sum(mask), one)
    if mode == "seq-mean-token-sum":
        return float(max(batch, 1))
    if mode == "seq-mean-token-sum-norm":
        return float(max(batch, 1) * (norm_length or length))
    return xp.maximum(xp.sum((xp.sum(mask, axis=1) > 0) * 1.0), one)
