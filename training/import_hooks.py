"""Patching a third-party module the moment it is first imported, once.

The trainers' glue (OpenRLHF's, verl's) wraps a few methods or functions of modules it does
not own. :func:`install_patches` runs each patch now if its module is already imported, else
right after the module's code first runs (a :data:`sys.meta_path` finder), so a process that
never imports the module pays nothing. :func:`wrap_methods` wraps a class's methods once.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from collections.abc import Callable
from typing import Any

_PATCHED_MARK = "__gigpo_patched__"


def wrap_methods(cls: Any, wrappers: dict[str, Callable[[Callable], Callable]]) -> None:
    """Replaces each method ``name`` of ``cls`` by ``wrappers[name](method)``, once per class
    (a second call does nothing)."""
    if getattr(cls, _PATCHED_MARK, False):
        return
    for name, wrap in wrappers.items():
        setattr(cls, name, wrap(getattr(cls, name)))
    setattr(cls, _PATCHED_MARK, True)


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Runs ``patches[name](module)`` right after module ``name`` is first executed."""

    def __init__(self, patches: dict[str, Callable[[Any], None]]) -> None:
        self.patches = patches

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in self.patches:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        loader, patch = spec.loader, self.patches[fullname]
        exec_module = loader.exec_module

        def exec_and_patch(module: Any) -> None:
            exec_module(module)
            patch(module)

        loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


def install_patches(patches: dict[str, Callable[[Any], None]]) -> None:
    """Runs ``patches[name](module)`` for each module name: now if it is imported, else as
    soon as it is. Installing the same pending patches twice adds no second hook."""
    pending = {}
    for name, patch in patches.items():
        if name in sys.modules:
            patch(sys.modules[name])
        else:
            pending[name] = patch
    if pending and not any(
        isinstance(f, _PatchOnImport) and f.patches == pending for f in sys.meta_path
    ):
        sys.meta_path.insert(0, _PatchOnImport(pending))
