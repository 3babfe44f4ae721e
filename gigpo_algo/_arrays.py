"""Input conversion and validation shared by the public functions.

Every public function converts its numeric inputs to float64 numpy arrays with
:func:`to_float_array`, computes in numpy, and converts the result back with
:class:`ArrayKind` so that a torch tensor in gives a tensor out (same device and dtype).
torch is never imported here unless a tensor is passed in.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

NORMS = ("mean", "mean_std", "loo")


def is_torch_tensor(x: Any) -> bool:
    """True when ``x`` is a torch tensor, without importing torch."""
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


@dataclass(frozen=True)
class ArrayKind:
    """Where an input came from, so that outputs can be given back in the same form."""

    torch_dtype: Any = None
    device: Any = None
    numpy_dtype: Any = None

    def wrap(self, values: np.ndarray) -> Any:
        """Return ``values`` as a tensor (torch input) or a numpy array of the input's dtype."""
        if self.torch_dtype is not None:
            import torch

            return torch.as_tensor(values, dtype=self.torch_dtype, device=self.device)
        if self.numpy_dtype is not None:
            return values.astype(self.numpy_dtype, copy=False)
        return values


def to_float_array(x: Any, name: str, *, ndim: int | None = 1) -> tuple[np.ndarray, ArrayKind]:
    """Convert a list, numpy array or torch tensor to a finite float64 array.

    Args:
        x: numeric input.
        name: argument name, used in error messages.
        ndim: required number of dimensions (None: any).

    Returns:
        ``(array, kind)``; ``kind.wrap`` converts a result back to the input's form.
        A floating numpy or torch input keeps its dtype on the way back; anything else
        comes back as float64 numpy (or, for an integer tensor, a float32 tensor).

    Raises:
        ValueError: not numeric, wrong number of dimensions, or NaN/inf present.
    """
    kind = ArrayKind()
    if is_torch_tensor(x):
        import torch

        dtype = x.dtype if x.is_floating_point() else torch.get_default_dtype()
        kind = ArrayKind(torch_dtype=dtype, device=x.device)
        arr = x.detach().to("cpu", torch.float64).numpy()
    else:
        if isinstance(x, np.ndarray) and np.issubdtype(x.dtype, np.floating):
            kind = ArrayKind(numpy_dtype=x.dtype)
        try:
            arr = np.asarray(x, dtype=np.float64)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{name} must be numeric, got {type(x).__name__}: {err}") from None
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got shape {arr.shape}")
    if not np.isfinite(arr).all():
        bad = np.flatnonzero(~np.isfinite(arr.ravel()))[:5].tolist()
        raise ValueError(f"{name} contains NaN or inf (flat positions {bad})")
    return arr, kind


def _first_appearance(inverse: np.ndarray, first_index: np.ndarray) -> tuple[np.ndarray, int]:
    """Renumber sorted-unique codes so that code k is the k-th distinct value to appear."""
    rank = np.empty(len(first_index), dtype=np.int64)
    rank[np.argsort(first_index, kind="stable")] = np.arange(len(first_index))
    return rank[inverse.ravel()], len(first_index)


def factorize_ints(values: np.ndarray) -> tuple[np.ndarray, int]:
    """Codes 0..K-1 of a 1-D numeric array, numbered in order of first appearance."""
    if len(values) == 0:
        return np.zeros(0, dtype=np.int64), 0
    _, first, inverse = np.unique(values, return_index=True, return_inverse=True)
    return _first_appearance(inverse, first)


def factorize_hashables(values: Sequence[Any]) -> tuple[np.ndarray, dict[Any, int]]:
    """Codes 0..K-1 of a sequence of hashable Python values, in order of first appearance.

    Returns the codes, shape (N,) int64, and the table from each distinct value to its code.
    """
    # dict.fromkeys keeps first-appearance order; both passes run in C.
    table = dict(zip(dict.fromkeys(values), itertools.count()))
    codes = np.fromiter(map(table.__getitem__, values), dtype=np.int64, count=len(values))
    return codes, table


def to_ids(x: Any, name: str, n: int | None = None) -> tuple[np.ndarray, int]:
    """Convert group or trajectory ids (ints or strings) to int64 codes.

    Args:
        x: sequence of ids, shape (N,): ints, strings, or any hashable scalars; a numpy
            array or torch tensor of integers also works.
        name: argument name for error messages.
        n: expected length N (None: any).

    Returns:
        ``(codes, num_unique)``: codes of shape (N,), int64 in [0, num_unique), numbered in
        order of first appearance.
    """
    if is_torch_tensor(x):
        x = x.detach().cpu().numpy()
    if isinstance(x, np.ndarray):
        if x.ndim != 1:
            raise ValueError(f"{name} must be 1-dimensional, got shape {x.shape}")
        if x.dtype.kind in "iub":
            codes, k = factorize_ints(x)
        elif x.dtype.kind == "f":
            if not np.isfinite(x).all():
                raise ValueError(f"{name} contains NaN or inf")
            codes, k = factorize_ints(x)
        elif x.dtype.kind in "USO":
            codes, k = _factorize_objects(x.tolist(), name)
        else:
            raise ValueError(f"{name} has unsupported dtype {x.dtype}")
    else:
        if isinstance(x, (str, bytes)):
            raise ValueError(f"{name} must be a sequence of ids, not a single {type(x).__name__}")
        if not isinstance(x, Sequence):
            try:
                x = list(x)
            except TypeError:
                raise ValueError(
                    f"{name} must be a sequence of ids, got {type(x).__name__}"
                ) from None
        if len(x) and type(x[0]) is int:
            as_array = np.asarray(x)  # a list of ints: the numeric path is faster
            if as_array.dtype.kind in "iu" and as_array.ndim == 1:
                codes, k = factorize_ints(as_array)
                return _checked_length(codes, k, name, n)
        codes, k = _factorize_objects(x, name)
    return _checked_length(codes, k, name, n)


def _checked_length(codes: np.ndarray, k: int, name: str, n: int | None) -> tuple[np.ndarray, int]:
    if n is not None and len(codes) != n:
        raise ValueError(f"{name} has length {len(codes)}, expected {n}")
    return codes, k


def _factorize_objects(values: Sequence[Any], name: str) -> tuple[np.ndarray, int]:
    try:
        codes, table = factorize_hashables(values)
    except TypeError as err:
        raise ValueError(f"{name} must hold hashable ids (ints or strings): {err}") from None
    for v in table:  # distinct values only: cheap even for a million rows
        if v is None or (isinstance(v, float) and v != v):
            raise ValueError(f"{name} contains an invalid id: {v!r}")
    return codes, len(table)


def check_norm(norm: str, name: str = "norm") -> None:
    if norm not in NORMS:
        raise ValueError(f"{name} must be one of {NORMS}, got {norm!r}")


def check_eps(eps: float) -> None:
    if not (np.isfinite(eps) and eps >= 0):
        raise ValueError(f"eps must be a finite number >= 0, got {eps!r}")


def check_same_length(n: int, **arrays: Any) -> None:
    for arg, arr in arrays.items():
        if arr is not None and len(arr) != n:
            raise ValueError(f"{arg} has length {len(arr)}, expected {n}")
