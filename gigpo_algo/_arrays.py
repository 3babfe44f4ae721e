"""Array input and output for every public function: the one place numpy and torch meet.

Public functions take lists, numpy arrays or torch tensors and give results in the form of
their input, described by an :class:`ArrayKind`: a tensor in gives a tensor out on the same
device, in its dtype when it is floating (else torch's default float dtype). They compute in
one of two ways:

- in float64 numpy (advantages, baselines): :func:`to_float_array` validates and converts an
  input, and ``kind.wrap`` gives the numpy result back in the input's form, detached (no
  gradient flows through); a floating numpy array keeps its dtype, anything else gives
  float64 numpy;
- natively, so that torch's autograd sees every operation (the losses,
  :func:`~gigpo_algo.tokens.broadcast_to_tokens`): :func:`to_native` converts every input to
  the kind of the first tensor among them (float64 numpy when there is none), and
  ``kind.xp`` holds the operations (exp, clip, where, ...) for that kind. Nothing is moved off
  the tensors' device or synchronised.

:func:`~gigpo_algo.tokens.turns_to_tokens` computes in numpy (``NUMPY.asarray``) but gives
its result back like the native functions (``common_kind(values).wrap``). Ids, flags and spans
go through :func:`to_numpy`. torch is imported only when a tensor is passed in.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

NORMS = ("mean", "mean_std", "loo")


def is_torch_tensor(x: Any) -> bool:
    """True when ``x`` is a torch tensor, without importing torch."""
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def to_numpy(x: Any) -> Any:
    """A tensor as a numpy array (detached, copied to the CPU, dtype kept); else ``x`` itself."""
    return x.detach().cpu().numpy() if is_torch_tensor(x) else x


@dataclass(frozen=True)
class ArrayKind:
    """The form of a function's input, which its results are given back in.

    ``device`` is None for numpy, else the input tensor's device; ``torch_dtype`` is the
    tensor's dtype when it is floating (None: torch's default float dtype for results);
    ``numpy_dtype`` is the dtype of numpy results; ``name`` the argument, for messages.
    """

    torch_dtype: Any = None
    device: Any = None
    numpy_dtype: Any = np.float64
    name: str = dataclasses.field(default="the input", compare=False)

    @classmethod
    def of(cls, x: Any) -> ArrayKind:
        """The kind of one input: a tensor's device and floating dtype, a floating numpy
        array's dtype, else float64 numpy."""
        if is_torch_tensor(x):
            return cls(x.dtype if x.is_floating_point() else None, x.device)
        if isinstance(x, np.ndarray) and np.issubdtype(x.dtype, np.floating):
            return cls(numpy_dtype=x.dtype)
        return cls()

    @property
    def is_torch(self) -> bool:
        return self.device is not None

    @property
    def xp(self) -> Any:
        """The array operations for this kind (see :class:`_NumpyOps`)."""
        return _torch_ops() if self.is_torch else _NumpyOps

    def asarray(self, x: Any, name: str = "value") -> Any:
        """Convert ``x`` to this kind, for computing in it.

        torch: a tensor keeps its dtype and its autograd graph (moved to ``device`` if it is
        elsewhere); anything else becomes a tensor of ``torch_dtype`` (None: inferred) on
        ``device``. numpy: a float64 array (a tensor is detached and copied to the CPU).

        Raises:
            ValueError: ``x`` is not numeric (the message names ``name``).
        """
        if is_torch_tensor(x):
            return x.to(self.device) if self.is_torch else x.detach().cpu().double().numpy()
        try:
            if self.is_torch:
                import torch

                return torch.as_tensor(x, dtype=self.torch_dtype, device=self.device)
            return np.asarray(x, dtype=np.float64)
        except (TypeError, ValueError, RuntimeError) as err:
            raise ValueError(f"{name} must be numeric, got {type(x).__name__}: {err}") from None

    def wrap(self, values: np.ndarray) -> Any:
        """Give a float numpy result back in this kind (a new tensor for torch).

        Raises:
            ValueError: a value is past the range of a narrower dtype (float16's 65504, say),
                where it would become inf; the message names the argument.
        """
        if self.is_torch:
            import torch

            dtype = self.torch_dtype or torch.get_default_dtype()
            if dtype != torch.float64:
                self._check_fits(values, float(torch.finfo(dtype).max), dtype)
            return torch.as_tensor(values, dtype=dtype, device=self.device)
        if np.finfo(self.numpy_dtype).max < np.finfo(np.float64).max:
            self._check_fits(values, float(np.finfo(self.numpy_dtype).max), self.numpy_dtype)
        return values.astype(self.numpy_dtype, copy=False)

    def _check_fits(self, values: np.ndarray, largest: float, dtype: Any) -> None:
        with np.errstate(invalid="ignore"):
            over = np.abs(values) > largest
        if over.any():
            raise ValueError(
                f"{self.name} is {dtype}, and a result is past its range (|value| > "
                f"{largest:.4g}) at flat positions {np.flatnonzero(over)[:5].tolist()}: pass "
                f"{self.name} as float64"
            )


#: float64 numpy, the kind of results when no input is a tensor.
NUMPY = ArrayKind()


def common_kind(*xs: Any) -> ArrayKind:
    """The kind of the first tensor among ``xs``; float64 numpy when there is none."""
    return next((ArrayKind.of(x) for x in xs if is_torch_tensor(x)), NUMPY)


def to_native(**arrays: Any) -> tuple[ArrayKind, list[Any]]:
    """Convert keyword ``name=array`` inputs to their :func:`common_kind`, to compute natively.

    Returns:
        ``(kind, converted)``: ``converted`` in the order given; compute with ``kind.xp``.
        Shapes are not checked, nor are values (checking a tensor's values would synchronise
        its device).

    Raises:
        ValueError: an input is not numeric (the message names it).
    """
    kind = common_kind(*arrays.values())
    return kind, [kind.asarray(x, name) for name, x in arrays.items()]


def to_float_array(
    x: Any, name: str, *, ndim: int | None = 1, finite: bool = True
) -> tuple[np.ndarray, ArrayKind]:
    """Convert a list, numpy array or torch tensor to a float64 numpy array.

    Args:
        x: numeric input.
        name: argument name, used in error messages.
        ndim: required number of dimensions (None: any).
        finite: refuse NaN and inf.

    Returns:
        ``(array, ArrayKind.of(x))``; ``kind.wrap`` converts a result back to the input's form.

    Raises:
        ValueError: not numeric, wrong number of dimensions, or NaN/inf present.
    """
    arr = NUMPY.asarray(x, name)
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got shape {arr.shape}")
    if finite and not np.isfinite(arr).all():
        bad = np.flatnonzero(~np.isfinite(arr.ravel()))[:5].tolist()
        raise ValueError(f"{name} contains NaN or inf (flat positions {bad})")
    return arr, dataclasses.replace(ArrayKind.of(x), name=name)


class _NumpyOps:
    """The operations native computations use, on numpy arrays; :func:`_torch_ops` gives
    the same names on tensors."""

    exp = staticmethod(np.exp)
    maximum = staticmethod(np.maximum)
    minimum = staticmethod(np.minimum)
    where = staticmethod(np.where)

    @staticmethod
    def clip(x: Any, lo: float | None, hi: float | None) -> Any:
        return np.clip(x, lo, hi)

    @staticmethod
    def sum(x: Any, axis: int | None = None) -> Any:
        return np.sum(x, axis=axis)

    @staticmethod
    def log_softmax(x: Any, axis: int = -1) -> Any:
        shifted = x - x.max(axis=axis, keepdims=True)
        return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


@functools.cache
def _torch_ops() -> Any:
    import torch

    class _TorchOps:
        exp = staticmethod(torch.exp)
        maximum = staticmethod(torch.maximum)
        minimum = staticmethod(torch.minimum)
        where = staticmethod(torch.where)

        @staticmethod
        def clip(x: Any, lo: float | None, hi: float | None) -> Any:
            return torch.clamp(x, lo, hi)

        @staticmethod
        def sum(x: Any, axis: int | None = None) -> Any:
            return x.sum() if axis is None else x.sum(dim=axis)

        @staticmethod
        def log_softmax(x: Any, axis: int = -1) -> Any:
            return torch.log_softmax(x, dim=axis)

    return _TorchOps


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
    x = to_numpy(x)
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


def check_overflow(values: np.ndarray, message: str) -> np.ndarray:
    """``values`` itself when every entry is finite; else ValueError ``message`` and where.

    For a result computed from finite inputs, NaN or inf means a step overflowed float64
    (a sum of rewards near 1e308, say): the message names the input, and this adds the
    first rows (a 2-D result: ``(row, column)`` pairs) where it happened. Compute such a
    result under ``np.errstate(over="ignore", invalid="ignore")``: the error replaces
    numpy's warnings.

    Args:
        values: float, any shape.
        message: what overflowed, naming the input (``"rewards are too large: the
            discounted returns overflow float64"``).
    """
    bad = ~np.isfinite(values)
    if bad.any():
        where = np.argwhere(bad)[:5]
        if values.ndim == 1:
            raise ValueError(f"{message} (at rows {where[:, 0].tolist()})")
        raise ValueError(f"{message} (at (row, column) {[tuple(w) for w in where.tolist()]})")
    return values


def check_same_length(n: int, **arrays: Any) -> None:
    for arg, arr in arrays.items():
        if arr is not None and len(arr) != n:
            raise ValueError(f"{arg} has length {len(arr)}, expected {n}")
