"""Files a run writes and reads back, handled as untrusted (docs/security.md).

Writes: a file is written next to its target under a fresh hidden temporary name, created
exclusively (``O_EXCL``: a name planted there, a symlink included, is never opened), flushed
to disk, and renamed over the target (``os.replace`` is atomic on POSIX), so a crash at any
instant leaves the old file or the new one. A target that exists and is not a regular file
(a symlink, a FIFO, a device, a folder) is refused, never replaced: :class:`UnsafeFileError`.
Appends (:func:`open_append`) never follow a symlink and refuse anything but a regular file.

Reads (:func:`open_regular`): a file read back is opened without blocking and refused unless
it is a regular file, so a FIFO planted in its place is an error naming it, never a hang.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path
from typing import BinaryIO

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


#: The mode a new file gets (as ``open`` would give it under this process's umask).
_NEW_FILE_MODE = 0o666 & ~_umask()


class UnsafeFileError(OSError):
    """A file gigpo reads or writes is not a regular file (a symlink where one is never
    followed, a FIFO, a device, a folder); the message names it and what it is."""


def file_kind(mode: int) -> str:
    """What an ``st_mode`` is, in words: ``"a FIFO"``, ``"a symbolic link"``, ...."""
    for test, name in (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISREG, "a file"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _lstat_mode(path: str | Path) -> int | None:
    """``path``'s ``st_mode``, the link itself where it is one; None when nothing is there."""
    try:
        return os.lstat(path).st_mode
    except FileNotFoundError:
        return None


def check_writable_target(path: str | Path) -> None:
    """Refuses a target that exists and is not a regular file (a symlink is not followed).

    Raises:
        UnsafeFileError: naming ``path`` and what it is.
    """
    mode = _lstat_mode(path)
    if mode is not None and not stat.S_ISREG(mode):
        raise UnsafeFileError(
            f"{path} is {file_kind(mode)}, not a regular file: refusing to replace it "
            "(remove it or write elsewhere)"
        )


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Writes ``data`` to ``path`` atomically (see the module docstring); returns ``path``.

    Raises:
        UnsafeFileError: ``path`` exists and is not a regular file.
    """
    path = Path(path)
    check_writable_target(path)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    temporary = Path(name)
    try:
        os.fchmod(fd, _NEW_FILE_MODE)  # mkstemp's 0600 is not what a plain open gives
        with os.fdopen(fd, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        check_writable_target(path)  # planted while we wrote: still never replaced
        os.replace(temporary, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Writes ``text`` (UTF-8) to ``path`` atomically; returns ``path``."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def _checked_fd(fd: int, path: str | Path) -> int:
    """``fd`` back in blocking mode when it is a regular file; else closed and refused."""
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise UnsafeFileError(f"{path} is {file_kind(mode)}, not a regular file")
    if _NONBLOCK:
        os.set_blocking(fd, True)
    return fd


def open_regular(path: str | Path, *, follow: bool = True) -> BinaryIO:
    """``path`` opened for reading in binary, refused unless it is a regular file (opened
    without blocking, so a FIFO never hangs the reader). ``follow=False`` also refuses a
    symlink.

    Raises:
        FileNotFoundError: there is no such file.
        UnsafeFileError: it is a FIFO, a device, a socket, a folder (or a symlink, with
            ``follow=False``).
        OSError: it cannot be opened (permissions, ...).
    """
    flags = os.O_RDONLY | _NONBLOCK | _CLOEXEC | (0 if follow else _NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if not follow and os.path.islink(path):
            raise UnsafeFileError(f"{path} is a symbolic link, not a regular file") from None
        if os.path.isdir(path):
            raise UnsafeFileError(f"{path} is a folder, not a regular file") from None
        raise exc
    return os.fdopen(_checked_fd(fd, path), "rb")


def open_append(path: str | Path) -> BinaryIO:
    """``path`` opened to append in binary (created if absent), never through a symlink,
    refused unless it is a regular file.

    Raises:
        UnsafeFileError: a symlink, FIFO, device, socket or folder is there.
    """
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NOFOLLOW | _NONBLOCK | _CLOEXEC
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        if os.path.islink(path):
            raise UnsafeFileError(
                f"{path} is a symbolic link: refusing to write through it"
            ) from None
        try:  # a FIFO without a reader is ENXIO here, a folder EISDIR
            mode = os.lstat(path).st_mode
        except OSError:
            raise exc from None
        if not stat.S_ISREG(mode):
            raise UnsafeFileError(f"{path} is {file_kind(mode)}, not a regular file") from None
        raise exc
    return os.fdopen(_checked_fd(fd, path), "ab")


def read_regular_text(path: str | Path, max_bytes: int | None = None) -> str:
    """The UTF-8 text of the regular file ``path`` (at most ``max_bytes`` read when given).

    Raises:
        UnsafeFileError, OSError: as :func:`open_regular`.
    """
    with open_regular(path) as handle:
        data = handle.read() if max_bytes is None else handle.read(max_bytes)
    return data.decode("utf-8")


def check_own_folder(path: str | Path) -> None:
    """Refuses ``path`` when something is there that is not a real folder: a symlink (to a
    folder or not), a file, a FIFO. Absent is fine.

    Raises:
        UnsafeFileError: naming ``path`` and what it is.
    """
    mode = _lstat_mode(path)
    if mode is not None and not stat.S_ISDIR(mode):
        raise UnsafeFileError(
            f"{path} is {file_kind(mode)}, not a folder: refusing to write into it or remove "
            "it (remove it yourself, or use another folder)"
        )


def check_own_path(base: str | Path, *parts: str) -> None:
    """Refuses ``base/parts...`` when a folder on the way to it, or it, is a symlink, a file
    or a FIFO (:func:`check_own_folder` at each level; absent levels are fine). ``base``
    itself is the caller's (a folder the user named, or one it holds).

    Raises:
        UnsafeFileError: naming the first such path.
    """
    folder = Path(base)
    for part in parts:
        folder = folder / part
        check_own_folder(folder)


def own_folder(base: str | Path, *parts: str) -> Path:
    """The folder ``base/parts...``, made where absent, never through a link: the path is
    checked (:func:`check_own_path`) before and after it is made, so a symlink planted at
    any level (``RUN/tensorboard`` -> elsewhere) is refused, not written through.

    Raises:
        UnsafeFileError: a part is a symlink, a file or a FIFO.
    """
    check_own_path(base, *parts)
    folder = Path(base).joinpath(*parts)
    folder.mkdir(parents=True, exist_ok=True)
    check_own_path(base, *parts)  # planted between the check and the mkdir
    return folder


def remove_tree(path: str | Path) -> None:
    """Removes the folder ``path`` and what it holds (``shutil.rmtree``, which unlinks the
    links inside without following them); absent is fine. Anything but a real folder in
    its place (a symlink, a FIFO, which ``rmtree`` would open and wait on, a file) is
    refused and left as it is.

    Raises:
        UnsafeFileError: naming ``path`` and what it is.
    """
    import shutil

    check_own_folder(path)
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(path)
