"""One writer per output folder: the lock every command takes on the folder it writes.

:func:`hold_folder` is taken by each command that writes a run: the local trainer (kind
``train``), the study on its folder (``study``), plain ``gigpo-evaluate --out`` (``evaluate``),
the suites (``suite``) and ``gigpo-openrlhf`` on its ``--gigpo.dataset_dir`` (``openrlhf``);
:func:`hold_file` by the viewer on the page it writes. Both:

* take a non-blocking exclusive ``flock`` on a lock file (``FOLDER/.gigpo.lock``, or
  ``.PAGE.lock`` beside a page); a second writer is refused at once with
  :class:`FolderBusyError`, whose message names the holder (pid, command, since when) as the
  holder wrote it into the lock file;
* need no clean-up after a crash: the kernel drops a ``flock`` when its process dies, so a
  lock file left by a killed process is simply taken by the next writer, which rewrites the
  holder record. A clean release removes the lock file.

A folder also keeps its kind in ``FOLDER/.gigpo-folder`` (``{"kind": "train"}``, written on
first use): a command of another kind is refused with :class:`FolderKindError` rather than
writing over it. A folder made before these markers existed gets its kind from what it holds
(:func:`inferred_kind`).

POSIX only (``fcntl``). On a network file system ``flock`` may not reach other machines: the
lock then guards against writers on this machine only.
"""

from __future__ import annotations

import errno
import json
import os
import shlex
import socket
import stat
import sys
import time
from pathlib import Path

from training.files import atomic_write_text, file_kind
from training.folders import (
    KIND_FILE,
    KINDS,
    FolderKindError,
    FolderLockError,
    check_kind,
    check_owner,
    folder_kind,
    inferred_kind,
    read_record,
)
from training.text import bound_text, show

__all__ = [
    "KIND_FILE", "KINDS", "LOCK_FILE", "FolderBusyError", "FolderKindError", "FolderLock",
    "FolderLockError", "folder_kind", "hold_file", "hold_folder", "holder_text",
    "inferred_kind",
]  # fmt: skip

#: The lock file inside a folder.
LOCK_FILE = ".gigpo.lock"


class FolderBusyError(FolderLockError):
    """Another process holds the folder (or page) now; the message names it."""


class FolderLock:
    """An exclusive ``flock`` on ``path`` held by this process until :meth:`release` (or the
    end of a ``with`` block, or of the process).

    Attributes:
        path: the lock file.
        target: what it guards (a folder, or a page file).
        kind: the folder's kind (:data:`KINDS`), or None for a page.
        created: whether taking the lock made the folder.
    """

    def __init__(self, path: Path, target: Path, kind: str | None, fd: int) -> None:
        self.path, self.target, self.kind = path, target, kind
        self.created = False
        self._fd: int | None = fd

    @property
    def held(self) -> bool:
        """Whether this object still holds the lock."""
        return self._fd is not None

    def release(self) -> None:
        """Removes the lock file (while still holding it, so that no other writer locks a
        file about to disappear) and drops the lock; a second call does nothing."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            if _same_file(fd, self.path):
                self.path.unlink()
        except OSError:
            pass  # the lock is dropped below all the same; a file left is taken over
        finally:
            os.close(fd)

    def discard(self) -> None:
        """Releases the lock and, when taking it made the folder and nothing has been
        written there since, removes the folder again (a command that fails its checks
        leaves no folder behind)."""
        try:
            if self.held and self.created and self.kind is not None:
                if sorted(os.listdir(self.target)) == sorted([KIND_FILE, LOCK_FILE]):
                    (self.target / KIND_FILE).unlink()
                    self.release()
                    self.target.rmdir()  # fails, harmlessly, if another writer got in
        except OSError:
            pass
        finally:
            self.release()

    def __enter__(self) -> FolderLock:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


def hold_folder(
    folder: str | Path, kind: str, command: str | None = None, option: str = "--out"
) -> FolderLock:
    """Creates ``folder`` if needed and locks it for a command of ``kind`` (see the module
    docstring); use as ``with hold_folder(out, "train"): ...``.

    Args:
        folder: the command's output folder (``--out``).
        kind: one of :data:`KINDS`.
        command: what the holder record calls this command (``gigpo-train``); the process's
            own command line is recorded beside it.
        option: what a message calls the folder's option (``--gigpo.dataset_dir``).

    Raises:
        FolderBusyError: another process holds the folder (its pid, command and start named).
        FolderKindError: the folder holds another kind's output, has a damaged kind file, or
            is a file.
        FolderLockError: the folder cannot be created or its lock file cannot be opened.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {sorted(KINDS)}, got {show(kind)}")
    folder = Path(folder)
    check_owner(folder, kind, option)
    if folder.is_dir():
        check_kind(folder, kind, option)  # before anything is written into a foreign folder
    elif folder.exists() or folder.is_symlink():
        raise FolderKindError(f"{option} {folder} is not a folder; use another {option}")
    try:
        folder.mkdir(parents=True)
        created = True
    except FileExistsError:
        created = False
    except OSError as exc:
        raise FolderLockError(f"cannot create {option} {folder}: {exc.strerror or exc}") from None
    lock = _take(folder / LOCK_FILE, folder, kind, f"{option} {folder}", option)
    lock.created = created
    try:
        check_kind(folder, kind, option)  # again under the lock: no other writer between
        if not (folder / KIND_FILE).exists():
            atomic_write_text(folder / KIND_FILE, json.dumps({"kind": kind}) + "\n")
        _write_holder(lock, kind, command)
    except BaseException:
        lock.release()
        raise
    return lock


def hold_file(
    path: str | Path, command: str | None = None, option: str = "-o", what: str = "page"
) -> FolderLock:
    """Locks the file ``path`` for one writer, through the lock file ``.NAME.lock`` beside it
    (its folder must exist). The file itself is not opened: write it atomically
    (:mod:`training.files`) while the lock is held. A refusal calls it ``what``.

    Raises:
        FolderBusyError: another process is writing ``path`` (its pid, command and start
            named; the message suggests another ``option``).
        FolderLockError: the lock file cannot be opened.
    """
    path = Path(path)
    lock = _take(path.with_name(f".{path.name}.lock"), path, None, f"{what} {path}", option)
    try:
        _write_holder(lock, None, command)
    except BaseException:
        lock.release()
        raise
    return lock


def holder_text(lock_path: Path) -> str:
    """Who holds ``lock_path``, from its holder record: ``pid N (command), since T on host
    H``; a record still being written is waited for briefly, a damaged one is said so."""
    for _ in range(20):  # the holder writes its record just after taking the lock
        try:
            record = read_record(lock_path)
            if isinstance(record, dict) and "pid" in record:
                break
        except FileNotFoundError:
            return "a process that is just letting go of it (try again)"
        except (OSError, ValueError):
            pass
        time.sleep(0.025)
    else:
        return f"a process whose holder record in {lock_path} is unreadable"
    pid, host = record.get("pid"), record.get("host")
    text = f"pid {show(pid)}"
    if record.get("command"):
        text += f" ({bound_text(record['command'], 160)})"
    since = record.get("since")
    try:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since))
        text += f", since {started} ({_duration(time.time() - since)} ago)"
    except (TypeError, ValueError, OverflowError, OSError):
        pass  # no start time, or not a time: said without it
    if host != socket.gethostname():
        text += f" on host {show(host)}"
    elif isinstance(pid, int) and 0 < pid and not _alive(pid):
        text += "; that process has ended, a process it started still holds the lock"
    return text


# ----------------------------------------------------------------------------- internals


def _take(path: Path, target: Path, kind: str | None, name: str, option: str) -> FolderLock:
    """Locks ``path`` (created if absent, never truncated, never through a symlink)."""
    import fcntl

    flags = os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(100):
        try:
            fd = os.open(path, flags, 0o644)
        except OSError as exc:  # a symlink planted there, a read-only folder, ...
            raise FolderLockError(
                f"{name}: cannot open its lock file {path}: {exc.strerror or exc}"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise FolderLockError(  # ENOLCK: a file system without locks
                    f"{name}: cannot lock {path}: {exc.strerror or exc}"
                ) from None
            raise FolderBusyError(
                f"{name} is in use by another process: {holder_text(path)}; wait for it to "
                f"finish or use another {option}"
            ) from None
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):  # a FIFO or device planted as the lock file
            os.close(fd)
            raise FolderLockError(f"{name}: its lock file {path} is {file_kind(mode)}")
        if _same_file(fd, path):
            return FolderLock(path, target, kind, fd)
        os.close(fd)  # its holder removed the file as we locked it: lock the one there now
    raise FolderBusyError(f"{name}: cannot take {path}: it keeps being replaced")


def _write_holder(lock: FolderLock, kind: str | None, command: str | None) -> None:
    """Writes the holder record into the held lock file in one write (a reader that finds
    it empty or cut retries: :func:`holder_text`)."""
    line = _command_line()
    record = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "kind": kind,
        "command": bound_text(f"{command}: {line}" if command else line, 400),
        "since": time.time(),
    }
    fd = lock._fd
    if fd is not None:
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record).encode("utf-8"), 0)


def _command_line() -> str:
    """This process's command line, as typed: ``python -m training.local --out X``, or a
    console script's name and its arguments."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name:
        head = ["python", "-m", spec.name.removesuffix(".__main__")]
    elif sys.argv and sys.argv[0] == "-c":
        head = ["python", "-c", "..."]
    else:
        head = [Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python"]
    return shlex.join([*head, *sys.argv[1:]])


def _same_file(fd: int, path: Path) -> bool:
    """Whether ``path`` still names the file open as ``fd``."""
    try:
        now = os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    held = os.fstat(fd)
    return (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True  # alive under another user, or no pid this system has
    return True


def _duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
