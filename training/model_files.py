"""A model folder's files, checked before anything follows them or transformers reads them
(docs/security.md). A model named by hub id resolves through the Hugging Face cache, which
is a folder on disk like a run's ``tiny-model/``: what its files say is checked, not trusted.

- **Refs** (:func:`ref_commit`): a cache's ``refs/<branch>`` is a regular file holding one
  commit, 40 hex digits (trailing whitespace allowed); a path (``../../elsewhere``) or a FIFO
  there is refused.
- **Snapshots** (:func:`check_snapshot`): the folder a hub id resolves to is, through its
  links, ``snapshots/<commit>`` of that repository's own cache folder, and every file in it
  lies inside that cache folder (a link to one of its blobs).
- **Files** (:func:`check_model_folder`): each file of a model folder is a regular file (a
  FIFO there is an error, never a hang); ``config.json`` and ``generation_config.json`` are
  read by the guarded loader at most :data:`MAX_CONFIG_BYTES`, the tokenizer's small JSON
  files and a sharded model's index at most :data:`~training.guarded.MAX_JSON_BYTES`, all
  nested at most :data:`~training.guarded.MAX_DEPTH` levels (:data:`GUARDED_JSON`).
- **Weights** (:func:`check_safetensors`): a safetensors file's header is checked against
  the file as the safetensors library checks it (its length, at most
  :data:`MAX_HEADER_BYTES`, within the file; JSON; each tensor's dtype, shape and data
  offsets consistent, the tensors filling the data exactly), so a header that lies is an
  error naming the file.

Every refusal is a :class:`ModelFileError` naming the file: a :class:`ModelNotFoundError`,
so each command reports it as it reports a model it cannot find (one line, exit 2).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from training.files import UnsafeFileError, file_kind, open_regular
from training.guarded import MAX_JSON_BYTES, GuardError, load_json, read_json_file
from training.text import show

__all__ = [
    "GUARDED_JSON", "MAX_CONFIG_BYTES", "MAX_HEADER_BYTES", "MAX_REF_BYTES", "ModelFileError",
    "ModelNotFoundError", "check_model_folder", "check_safetensors", "check_snapshot",
    "is_commit", "is_regular_file", "read_model_config", "ref_commit", "repo_folder",
]  # fmt: skip

#: The most bytes of a model's ``config.json`` (or ``generation_config.json``) read: real
#: ones are a few KB, a multimodal model's tens of KB.
MAX_CONFIG_BYTES = 4 << 20
#: The most bytes of a cache ref read (one holds a 40-character commit).
MAX_REF_BYTES = 4096
#: The most bytes of a safetensors header, the safetensors library's own limit.
MAX_HEADER_BYTES = 100_000_000
#: The JSON files of a model folder read by the guarded loader before transformers reads
#: them, with each one's size limit (``*.index.json``: a sharded model's weight map).
GUARDED_JSON = {
    "config.json": MAX_CONFIG_BYTES,
    "generation_config.json": MAX_CONFIG_BYTES,
    "tokenizer_config.json": MAX_JSON_BYTES,
    "special_tokens_map.json": MAX_JSON_BYTES,
    "added_tokens.json": MAX_JSON_BYTES,
    ".index.json": MAX_JSON_BYTES,
}

_COMMIT = re.compile(r"[0-9a-f]{40}")
#: Bits per element of each safetensors dtype (the library's ``Dtype``).
_DTYPE_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E4M3FNUZ": 8,
    "F8_E5M2FNUZ": 8, "F8_E8M0": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32,
    "U32": 32, "F32": 32, "I64": 64, "U64": 64, "F64": 64, "C64": 64, "F4": 4, "F6_E2M3": 6,
    "F6_E3M2": 6,
}  # fmt: skip


class ModelNotFoundError(FileNotFoundError):
    """A model name that is neither a local model directory nor a hub id that resolves here
    (the message says why and how to fetch it). :mod:`training.hub` raises it (and exports
    it); it lives here so that :class:`ModelFileError` is one."""


class ModelFileError(ModelNotFoundError):
    """A model's files are here but one of them is not read: a cache ref that holds no
    commit, a snapshot outside its repository's cache folder, a file that is no regular
    file, JSON too large or nested too deeply, a weights file whose header does not match
    it. The message names the file."""


#: Makes the error that refuses a safetensors file, from why.
Refusal = Callable[[str], ModelFileError]


def is_commit(revision: str | None) -> bool:
    """Whether ``revision`` is a full commit hash (40 lowercase hex digits)."""
    return revision is not None and _COMMIT.fullmatch(revision) is not None


def repo_folder(cache: Path, repo_id: str) -> Path:
    """The cache folder of model repository ``repo_id`` (``models--org--name``)."""
    return Path(cache) / ("models--" + repo_id.replace("/", "--"))


def ref_commit(cache: Path, repo_id: str, revision: str | None) -> str | None:
    """The commit that the cache's ref of ``revision`` (None: ``main``) names, read as a
    regular file without blocking; None when ``revision`` is a commit itself or the cache
    has no such ref.

    Raises:
        ModelFileError: the ref is no regular file (a FIFO, a folder), or does not hold a
            commit (a path, anything else), or ``revision`` leaves the refs folder.
    """
    revision = revision or "main"
    if is_commit(revision):
        return None
    if Path(revision).is_absolute() or ".." in Path(revision).parts:
        raise ModelFileError(f"revision {show(revision)} is a path out of the cache's refs")
    ref = repo_folder(cache, repo_id) / "refs" / revision
    if not os.path.lexists(ref):
        return None
    try:
        with open_regular(ref) as handle:  # a FIFO is refused at once, never waited on
            data = handle.read(MAX_REF_BYTES + 1)
    except UnsafeFileError as exc:
        raise ModelFileError(f"the cache ref {exc}") from None
    except OSError as exc:
        raise ModelFileError(f"cannot read the cache ref {ref}: {exc.strerror or exc}") from None
    text = data.decode("utf-8", "replace").strip()
    if len(data) > MAX_REF_BYTES or not is_commit(text):
        raise ModelFileError(
            f"the cache ref {ref} does not hold a commit (40 hex digits) but {show(text)}; "
            "remove it and fetch the model again"
        )
    return text


def check_snapshot(folder: Path, cache: Path, repo_id: str) -> Path:
    """Returns ``folder`` when it is, through its links, ``snapshots/<commit>`` of
    ``repo_id``'s own cache folder, and every entry in it lies inside that cache folder.

    Raises:
        ModelFileError: naming the folder or file that lies outside.
    """
    try:
        repo = repo_folder(cache, repo_id).resolve()
        real = Path(folder).resolve()
        entries = {real / name: (real / name).resolve() for name in sorted(os.listdir(real))}
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop
        raise ModelFileError(f"cannot read the snapshot {folder} of {repo_id}: {exc}") from None
    if real.parent != repo / "snapshots" or not is_commit(real.name):
        raise ModelFileError(
            f"the snapshot {folder} of {repo_id} is {real}, not a commit's folder in "
            f"{repo / 'snapshots'}: a model is never loaded from outside its cache folder"
        )
    for path, target in entries.items():
        if not target.is_relative_to(repo):
            raise ModelFileError(
                f"{Path(folder) / path.name} links to {target}, outside the cache folder "
                f"{repo} of {repo_id}; remove the snapshot and fetch the model again"
            )
    return Path(folder)


def is_regular_file(path: Path) -> bool:
    """Whether ``path`` is a regular file (through links); False when nothing is there.

    Raises:
        ModelFileError: something else is there: a FIFO, a device, a socket, a link to
            nothing.
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if os.path.islink(path):
            raise ModelFileError(f"{path} is a symbolic link to nothing") from None
        return False
    except OSError as exc:
        raise ModelFileError(f"cannot read {path}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(mode):
        return False
    if not stat.S_ISREG(mode):
        raise ModelFileError(
            f"{path} is {file_kind(mode)}, not a regular file; a model's files are read, "
            "never waited on"
        )
    return True


def read_model_config(path: Path) -> dict[str, Any]:
    """A model's ``config.json`` (a JSON object) by the guarded loader: at most
    :data:`MAX_CONFIG_BYTES`, nested at most 32 levels, a regular file.

    Raises:
        ModelFileError: naming the file and what is wrong with it.
    """
    is_regular_file(path)
    return _read_guarded(path, "model config", MAX_CONFIG_BYTES)


def _read_guarded(path: Path, what: str, max_bytes: int) -> Any:
    """The JSON in ``path`` by the guarded loader (``max_bytes``, 32 levels), its refusal a
    :class:`ModelFileError`."""
    try:
        return read_json_file(path, what, max_bytes=max_bytes, nonfinite=True)
    except GuardError as exc:
        raise ModelFileError(str(exc)) from None


def check_model_folder(folder: Path) -> None:
    """Checks every file of the model folder ``folder`` that transformers may read: each a
    regular file, the JSON of :data:`GUARDED_JSON` under its limits, each ``*.safetensors``
    header against its file (:func:`check_safetensors`). Reads no weights.

    Raises:
        ModelFileError: naming the first file refused.
    """
    try:
        names = sorted(os.listdir(folder))
    except OSError as exc:
        raise ModelFileError(
            f"cannot read the model folder {folder}: {exc.strerror or exc}"
        ) from None
    for name in names:
        path = Path(folder) / name
        if not is_regular_file(path):
            continue  # a folder: transformers reads the top level only
        limit = GUARDED_JSON.get(".index.json" if name.endswith(".index.json") else name)
        if limit is not None:
            _read_guarded(path, "model file", limit)
        elif name.endswith(".safetensors"):
            check_safetensors(path)


def check_safetensors(path: Path) -> None:
    """Checks the header of the safetensors file ``path`` against the file: an 8-byte
    little-endian length, at most :data:`MAX_HEADER_BYTES` and within the file, then JSON
    naming each tensor's dtype, shape and ``data_offsets`` (``__metadata__``: strings), the
    offsets consistent with dtype and shape and the tensors filling the data after the header
    exactly, as the safetensors library requires. Reads the header only.

    Raises:
        ModelFileError: naming the file and the first thing its header gets wrong.
    """

    def refuse(why: str) -> ModelFileError:
        return ModelFileError(f"{path}: not a valid safetensors file ({why})")

    size, header = _read_header(path, refuse)
    try:
        text = header.decode("utf-8")
        value = load_json(text, f"the header of {path}", max_bytes=MAX_HEADER_BYTES, expect=dict)
    except UnicodeDecodeError as exc:
        raise refuse(f"its header is not UTF-8 text (byte {exc.start})") from None
    except GuardError as exc:
        raise ModelFileError(str(exc)) from None
    spans = _tensor_spans(value, refuse)
    end = 0
    for begin, stop, name in sorted(spans):
        if begin != end:
            raise refuse(f"tensor {show(name)} starts at byte {begin} of its data, not {end}")
        end = stop
    if end != size - 8 - len(header):
        raise refuse(f"its tensors take {end} bytes, its data {size - 8 - len(header)}")


def _read_header(path: Path, refuse: Refusal) -> tuple[int, bytes]:
    """``(the file's size, its header's bytes)`` of the safetensors file ``path``, the header's
    length checked against the file and :data:`MAX_HEADER_BYTES` before it is read."""
    try:
        with open_regular(path) as handle:
            size = os.fstat(handle.fileno()).st_size
            start = handle.read(8)
            length = int.from_bytes(start, "little")
            fits = len(start) == 8 and length <= min(MAX_HEADER_BYTES, size - 8)
            header = handle.read(length) if fits else b""
    except OSError as exc:
        raise ModelFileError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(start) < 8:
        raise refuse(f"{size} bytes, shorter than the 8-byte header length")
    if length > MAX_HEADER_BYTES:
        raise refuse(f"a header of {length} bytes, over the limit of {MAX_HEADER_BYTES}")
    if length > size - 8 or len(header) != length:
        raise refuse(f"a header of {length} bytes in a file of {size} bytes")
    return size, header


def _tensor_spans(header: dict[str, Any], refuse: Refusal) -> list[tuple[int, int, str]]:
    """``(begin, end, name)`` of every tensor a safetensors ``header`` names, each checked:
    a dtype, a shape of sizes >= 0, ``data_offsets`` [begin, end] whose length is the
    shape's bytes in that dtype (a dtype this module does not know: left to the library)."""
    spans = []
    for name, info in header.items():
        if name == "__metadata__":
            if not (isinstance(info, dict) and all(isinstance(v, str) for v in info.values())):
                raise refuse("__metadata__ is not a mapping of strings")
            continue
        if not isinstance(info, dict):
            raise refuse(f"tensor {show(name)} is described by {show(info)}, not a mapping")
        dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if not isinstance(dtype, str):
            raise refuse(f"tensor {show(name)} has no dtype")
        if not (isinstance(shape, list) and all(_size(n) for n in shape)):
            raise refuse(f"tensor {show(name)} has the shape {show(shape)}")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(_size, offsets))
                and offsets[0] <= offsets[1]):  # fmt: skip
            raise refuse(f"tensor {show(name)} has the data_offsets {show(offsets)}")
        bits = _DTYPE_BITS.get(dtype)
        if bits is not None:
            count = 1
            for n in shape:
                count *= n
            if count * bits != 8 * (offsets[1] - offsets[0]):
                raise refuse(
                    f"tensor {show(name)} of dtype {dtype} and shape {show(shape)} takes "
                    f"{show(count * bits // 8)} bytes, its data_offsets {show(offsets)} "
                    f"{offsets[1] - offsets[0]}"
                )
        spans.append((offsets[0], offsets[1], name))
    return spans


def _size(value: Any) -> bool:
    """Whether ``value`` is an integer >= 0 (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
