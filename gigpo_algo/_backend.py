"""Tiny numpy/torch dispatch for the trainer-side functions, which must keep autograd."""

from __future__ import annotations

from typing import Any

import numpy as np

from gigpo_algo._arrays import is_torch_tensor


class _Numpy:
    exp = staticmethod(np.exp)
    maximum = staticmethod(np.maximum)
    minimum = staticmethod(np.minimum)
    where = staticmethod(np.where)

    @staticmethod
    def asarray(x: Any, like: Any = None) -> np.ndarray:
        return np.asarray(x, dtype=np.float64)

    @staticmethod
    def clip(x: Any, lo: float | None, hi: float | None) -> Any:
        return np.clip(x, lo, hi)

    @staticmethod
    def sum(x: Any, axis: int | None = None) -> Any:
        return np.sum(x, axis=axis)


class _Torch:
    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.exp = torch.exp
        self.maximum = torch.maximum
        self.minimum = torch.minimum
        self.where = torch.where

    def asarray(self, x: Any, like: Any = None) -> Any:
        if is_torch_tensor(x):
            return x if like is None else x.to(like.device)
        dtype = like.dtype if like is not None and like.is_floating_point() else None
        device = like.device if like is not None else None
        return self.torch.as_tensor(x, dtype=dtype, device=device)

    def clip(self, x: Any, lo: float | None, hi: float | None) -> Any:
        return self.torch.clamp(x, lo, hi)

    def sum(self, x: Any, axis: int | None = None) -> Any:
        return x.sum() if axis is None else x.sum(dim=axis)


def backend(*xs: Any) -> Any:
    """The array namespace for the inputs: torch when any of them is a tensor, else numpy."""
    if any(is_torch_tensor(x) for x in xs):
        return _Torch()
    return _Numpy


def first_tensor(*xs: Any) -> Any:
    """The first torch tensor among ``xs`` (None if there is none)."""
    return next((x for x in xs if is_torch_tensor(x)), None)
