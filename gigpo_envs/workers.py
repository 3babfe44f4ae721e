"""Environments in worker processes: env work that scales with cores instead of one GIL.

A rollout actor plays many episodes at once. In one process their environment calls share
one GIL, and an environment whose dependencies keep global state (ALFWorld's TextWorld)
runs them one at a time (:data:`gigpo_envs.alfworld.session.TEXTWORLD_LOCK`). An
:class:`EnvWorkerPool` starts ``num_workers`` processes; :meth:`EnvWorkerPool.make` builds an
environment inside one of them (the one hosting the fewest) and returns a
:class:`RemoteEnv`, whose ``reset`` / ``step`` / ``close`` run there and return exactly what
the environment returns. Each worker serves its environments one call at a time, in the
order the calls arrive, so an environment's calls keep their order.

Calls are thread-safe and return :class:`concurrent.futures.Future`; the ``reset`` /
``step`` / ``close`` methods wait for them, and ``await remote.areset(...)`` (``astep``,
``aclose``) waits without blocking an event loop.

Errors: an exception raised by the environment is raised again in the caller, same type
and message when it pickles (else an :class:`EnvWorkerError` holding its text), with the
worker's traceback in a note; a ``SystemExit`` inside a worker is an ``EnvWorkerError``, not
the end of the worker. A worker that dies (killed, out of memory) fails every pending call of
its environments with an :class:`EnvWorkerError` naming it and its exit code; later calls to
those environments fail the same way, and new environments go to the live workers (a dead
worker is replaced when one is needed). A call that takes longer than ``call_timeout_s``
kills its worker and fails the same way: a hung environment never hangs the caller.

Workers start with the ``spawn`` method (safe in a process that runs threads, such as a Ray
actor or vLLM); the factory passed to :meth:`EnvWorkerPool.make` must be picklable (a module
level function), and so must the environment's observations, infos and arguments. A script
that makes a pool needs the ``if __name__ == "__main__":`` guard: each worker imports the
script's main module again.

Lifetimes: no worker outlives its pool's process, and none outlives its pool.

- The parent dies (SIGKILL, the OOM killer, a crash), even while a worker is inside a hung
  environment call: on Linux the kernel kills the worker at once (a parent-death signal set
  when the worker starts; a worker whose parent died before that exits); on every platform a
  thread in the worker sees the parent gone within :data:`PARENT_POLL_S` (0.5 s) and exits.
- A pool dropped without :meth:`EnvWorkerPool.close` is collected (its threads hold no
  reference to it) and closed by its finalizer; one still open at interpreter exit is
  closed by an exit hook that runs before ``multiprocessing`` joins its children.
- Closing is bounded, whatever the environments do: the workers get
  :data:`SHUTDOWN_GRACE_S` (2 s) to close their environments and exit, then SIGTERM, then
  SIGKILL :data:`TERMINATE_WAIT_S` (2 s) later. Workers ignore SIGINT: a Ctrl-C reaches the
  pool's process, whose ``with`` block or exit hook then ends them (about 4 s at most, an
  environment that ignores SIGTERM included).

Processes that an environment starts itself (a server, a browser) are its own to end in
``close``: they are not the pool's workers, and a worker that is killed leaves them running.
"""

from __future__ import annotations

import asyncio
import atexit
import ctypes
import functools
import itertools
import multiprocessing
import multiprocessing.connection
import multiprocessing.util  # registers its exit join now, so that ours (below) runs first
import os
import pickle
import queue
import signal
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

MIN_CALL_TIMEOUT_S = 0.1
"""The smallest ``call_timeout_s`` a pool accepts, in seconds."""
SHUTDOWN_GRACE_S = 2.0
"""Seconds :meth:`EnvWorkerPool.close` gives the workers to close their envs and exit."""
TERMINATE_WAIT_S = 2.0
"""Seconds between SIGTERM and SIGKILL for a worker still running after the grace."""
PARENT_POLL_S = 0.5
"""Seconds between a worker's checks that its parent lives (the watch thread)."""
_WATCHDOG_MIN_PERIOD_S = 0.01
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_ORPHAN_EXIT = 70  # a worker's exit code when its parent is gone
# Which parent-death guards new workers arm (both by default; tests switch one off to
# check the other alone).
_PARENT_DEATH_SIGNAL = True
_PARENT_WATCH = True


class EnvWorkerError(RuntimeError):
    """An environment worker process failed (died, timed out, or raised what cannot pickle)."""


def make_env(env_id: str, kwargs: dict[str, Any] | None = None) -> Any:
    """``gymnasium.make(env_id, **kwargs)`` with the gigpo ids registered: a factory for
    :meth:`EnvWorkerPool.make`."""
    import gymnasium as gym

    import gigpo_envs  # noqa: F401  (registers the gigpo/ ids in the worker)

    return gym.make(env_id, **dict(kwargs or {}))


def cpu_heavy(env_id: str) -> bool:
    """Whether the environment class of ``env_id`` declares ``cpu_heavy`` (its step costs
    milliseconds of Python: ALFWorld, WebShop), so that a trainer runs it in worker processes."""
    import importlib

    import gymnasium as gym

    import gigpo_envs  # noqa: F401

    entry = gym.spec(env_id).entry_point
    if not isinstance(entry, str):
        return bool(getattr(entry, "cpu_heavy", False))
    module, _, name = entry.partition(":")
    return bool(getattr(getattr(importlib.import_module(module), name), "cpu_heavy", False))


def usable_cpus() -> int:
    """The cores this process may run on (``os.sched_getaffinity`` where it exists)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


# ------------------------------------------------------------------------------ worker side
def _worker_main(conn: Any, parent_pid: int | None, death_signal: bool, watch: bool) -> None:
    """A worker's loop: requests ``(call_id, op, payload)``, one at a time, in order.

    ``parent_pid`` is the pool's process (None when it is not the worker's parent: the
    ``forkserver`` start method); the worker ends when the pool's process dies
    (``death_signal``: Linux's parent-death signal; ``watch``: a thread watching the parent,
    on every platform) and ignores SIGINT: a Ctrl-C reaches the pool's process, which ends
    its workers.
    """
    _die_with_parent(parent_pid, death_signal, watch)
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread (a custom start method): the pool still ends it
        pass
    envs: dict[int, Any] = {}
    while True:
        try:
            call_id, op, payload = conn.recv()
        except (EOFError, OSError):  # the pool is gone
            break
        if op == "shutdown":
            for env in envs.values():
                try:
                    env.close()
                except Exception:  # noqa: BLE001  (closing is best effort at shutdown)
                    pass
            conn.send((call_id, True, None))
            break
        try:
            if op == "make":
                key, factory, args, kwargs = payload
                envs[key] = factory(*args, **kwargs)
                value = None
            elif op == "call":
                key, method, args, kwargs = payload
                value = getattr(envs[key], method)(*args, **kwargs)
            elif op == "close":
                env = envs.pop(payload, None)
                value = env.close() if env is not None else None
            elif op == "stats":
                value = _worker_stats(len(envs))
            else:
                raise ValueError(f"unknown env worker request {op!r}")
            reply = (call_id, True, value)
        except (Exception, SystemExit) as exc:  # noqa: BLE001  (sent back to the caller)
            reply = (call_id, False, _error_payload(exc))
        try:
            conn.send(reply)
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            conn.send((call_id, False, _error_payload(exc, "the result cannot be pickled: ")))


def _die_with_parent(parent_pid: int | None, death_signal: bool, watch: bool) -> None:
    """Makes this worker end when the pool's process dies, however it dies (SIGKILL, the
    OOM killer), even while the worker is inside a hung environment call.

    ``death_signal`` (Linux): the kernel sends SIGKILL when the parent dies
    (``prctl(PR_SET_PDEATHSIG)``; the pool starts workers from one long-lived thread, since
    the signal follows the thread that started the worker). ``watch``: a daemon thread that
    waits on the parent's sentinel (a pipe that only the parent holds open on POSIX, the
    parent's process handle on Windows) and checks ``os.getppid()`` every
    :data:`PARENT_POLL_S` seconds, then ``os._exit``. A parent already dead exits at once.
    With ``parent_pid`` None (a forkserver's child) only the sentinel is watched: it is a
    pipe from the pool's process.
    """
    if parent_pid is None:
        if watch:
            threading.Thread(
                target=_watch_parent, args=(None,), name="gigpo-env-parent-watch", daemon=True
            ).start()
        return
    if death_signal and sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            zero = ctypes.c_ulong(0)
            libc.prctl(_PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL), zero, zero, zero)
        except (OSError, AttributeError):  # no prctl (an odd libc): the watch remains
            pass
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(_ORPHAN_EXIT)
    if watch:
        threading.Thread(
            target=_watch_parent, args=(parent_pid,), name="gigpo-env-parent-watch", daemon=True
        ).start()


def _watch_parent(parent_pid: int | None) -> None:
    """Exits the process once the parent is gone (its sentinel ready, or a new parent pid)."""
    parent = multiprocessing.parent_process()
    sentinels = [parent.sentinel] if parent is not None and parent.sentinel is not None else []
    while True:
        if sentinels:
            gone = bool(multiprocessing.connection.wait(sentinels, timeout=PARENT_POLL_S))
        else:
            time.sleep(PARENT_POLL_S)
            gone = False
        if gone or (parent_pid is not None and os.getppid() != parent_pid):
            os._exit(_ORPHAN_EXIT)


def _error_payload(exc: BaseException, prefix: str = "") -> tuple[Any, str, str]:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    carried: Any = None
    if not isinstance(exc, SystemExit) and not prefix:
        try:
            pickle.loads(pickle.dumps(exc))
            carried = exc
        except Exception:  # noqa: BLE001  (sent as text instead)
            carried = None
    return carried, f"{prefix}{type(exc).__name__}: {exc}", text


def _worker_stats(num_envs: int) -> dict[str, Any]:
    usage = time.process_time()
    peak_kib = 0
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    peak_kib = int(line.split()[1])
    except OSError:
        pass
    return {"pid": os.getpid(), "envs": num_envs, "cpu_s": usage, "peak_rss_kib": peak_kib}


# ------------------------------------------------------------------------------ pool side
@dataclass
class _Call:
    future: Future
    op: str
    deadline: float


@dataclass
class _Worker:
    index: int
    process: Any
    conn: Any
    send_lock: threading.Lock = field(default_factory=threading.Lock)
    pending: dict[int, _Call] = field(default_factory=dict)
    envs: set[int] = field(default_factory=set)
    error: str | None = None
    reader: threading.Thread | None = None

    @property
    def alive(self) -> bool:
        return self.error is None


# The threads of a pool (readers, watchdog) and its finalizer hold its workers, its lock and
# its stop event, never the pool itself: a pool dropped without close() is collected, and
# its finalizer ends its workers.
def _read_replies(worker: _Worker, lock: threading.Lock) -> None:
    """The reader thread of one worker: resolves the futures of its replies."""
    try:
        while True:
            try:
                call_id, ok, value = worker.conn.recv()
            except (EOFError, OSError):
                worker.process.join(timeout=5)
                _fail_worker(lock, worker, f"exited with code {worker.process.exitcode}")
                return
            with lock:
                call = worker.pending.pop(call_id, None)
            # a caller that stopped waiting (a cancelled await) leaves a cancelled future
            if call is None or not call.future.set_running_or_notify_cancel():
                continue
            if ok:
                call.future.set_result(value)
            else:
                call.future.set_exception(_rebuild(value))
    except Exception as exc:  # noqa: BLE001  (an unreadable reply: the worker is unusable)
        _fail_worker(lock, worker, f"sent an unreadable reply ({exc!r}); killed")
        worker.process.kill()


def _watchdog(
    workers: list[_Worker], lock: threading.Lock, stop: threading.Event, timeout_s: float
) -> None:
    """Kills a worker whose oldest pending call has waited past ``timeout_s``; wakes every
    tenth of it, between 10 ms and 1 s."""
    period = max(_WATCHDOG_MIN_PERIOD_S, min(1.0, timeout_s / 10))
    while not stop.wait(period):
        now = time.monotonic()
        with lock:
            late = [
                (w, c.op) for w in workers if w.alive
                for c in list(w.pending.values())[:1] if c.deadline < now
            ]  # fmt: skip
        for worker, op in late:
            _fail_worker(
                lock, worker, f"took more than call_timeout_s={timeout_s} s on {op}; killed"
            )
            worker.process.kill()


def _fail_worker(lock: threading.Lock, worker: _Worker, why: str) -> None:
    """Marks ``worker`` dead and fails its pending calls with an :class:`EnvWorkerError`."""
    with lock:
        if worker.error is None:
            worker.error = (
                f"env worker {worker.index} (pid {worker.process.pid}) {why}; "
                f"its {len(worker.envs)} environment(s) are lost"
            )
        pending, worker.pending = worker.pending, {}
    for call in pending.values():
        if call.future.set_running_or_notify_cancel():
            call.future.set_exception(EnvWorkerError(worker.error))


def _join_all(workers: list[_Worker], seconds: float) -> None:
    """Waits up to ``seconds`` in all for the processes of ``workers`` to exit."""
    deadline = time.monotonic() + seconds
    for worker in workers:
        worker.process.join(timeout=max(0.0, deadline - time.monotonic()))


def _shut_down(workers: list[_Worker], stop: threading.Event) -> None:
    """Ends a pool's workers within a bound, however they behave: each is asked to close its
    envs and exit (:data:`SHUTDOWN_GRACE_S` for all), then sent SIGTERM
    (:data:`TERMINATE_WAIT_S`), then SIGKILL; its reader thread is joined and its pipe closed.
    The pool's finalizer: run by :meth:`EnvWorkerPool.close`, when a pool is collected, or at
    interpreter exit.

    It takes no lock of the pool: the garbage collector may run it in a thread that holds
    one (a reader's); no worker is added once it runs (the pool is closed or gone)."""
    stop.set()
    ending = list(workers)
    for worker in ending:
        if worker.alive and worker.send_lock.acquire(timeout=1):
            try:
                worker.conn.send((-1, "shutdown", None))
            except Exception:  # noqa: BLE001  (a broken pipe: the signals below end it)
                pass
            finally:
                worker.send_lock.release()
    _join_all(ending, SHUTDOWN_GRACE_S)
    stragglers = [w for w in ending if w.process.is_alive()]
    for worker in stragglers:
        worker.process.terminate()
    _join_all(stragglers, TERMINATE_WAIT_S)
    for worker in stragglers:
        if worker.process.is_alive():
            worker.process.kill()
    _join_all(stragglers, 5.0)
    for worker in ending:
        if worker.reader is not None and worker.reader is not threading.current_thread():
            worker.reader.join(timeout=1)
        worker.conn.close()


_OPEN_POOLS: set[weakref.finalize] = set()  # the finalizers of this process's pools
_OPEN_POOLS_LOCK = threading.Lock()


def _track(finalizer: weakref.finalize) -> None:
    with _OPEN_POOLS_LOCK:
        _OPEN_POOLS.difference_update([f for f in _OPEN_POOLS if not f.alive])
        _OPEN_POOLS.add(finalizer)


def _close_open_pools() -> None:
    """At interpreter exit (a Ctrl-C included), ends every open pool within its bound, before
    multiprocessing's own exit hook joins the workers without one (registered earlier by the
    ``import multiprocessing.util`` above, so it runs after this)."""
    with _OPEN_POOLS_LOCK:
        finalizers = list(_OPEN_POOLS)
        _OPEN_POOLS.clear()
    for finalizer in finalizers:
        finalizer()


atexit.register(_close_open_pools)

_SPAWNER: dict[str, Any] = {}  # "pid": the process whose spawner thread runs, "queue": its requests
_SPAWNER_LOCK = threading.Lock()


def _start_process(process: Any) -> None:
    """``process.start()`` from this process's spawner thread, a daemon thread that lives as
    long as the process: Linux's parent-death signal follows the *thread* that started a
    worker, so a worker started from a short-lived thread (``asyncio.to_thread``, a request
    handler) would be killed when that thread ends."""
    with _SPAWNER_LOCK:
        if _SPAWNER.get("pid") != os.getpid():  # the first start, or a forked copy
            requests: queue.SimpleQueue = queue.SimpleQueue()
            threading.Thread(
                target=_spawner_loop, args=(requests,), name="gigpo-env-spawner", daemon=True
            ).start()
            _SPAWNER.update(pid=os.getpid(), queue=requests)
        requests = _SPAWNER["queue"]
    done: Future = Future()
    requests.put((process, done))
    done.result()


def _spawner_loop(requests: queue.SimpleQueue) -> None:
    while True:
        process, done = requests.get()
        try:
            process.start()
        except BaseException as exc:  # noqa: BLE001  (raised again in the caller)
            done.set_exception(exc)
        else:
            done.set_result(None)


class EnvWorkerPool:
    """``num_workers`` processes hosting environments (see the module docstring).

    Args:
      num_workers: processes to start, >= 1.
      call_timeout_s: the longest one call may wait for its reply before its worker is killed
        (None: no limit; else at least :data:`MIN_CALL_TIMEOUT_S`, 0.1 s). The time counts
        from the call, so a call queued behind the same worker's other calls spends part of
        it waiting; building an env counts as a call.
      start_method: ``multiprocessing`` start method (``spawn`` by default).
    """

    def __init__(
        self, num_workers: int, *, call_timeout_s: float | None = None, start_method: str = "spawn"
    ) -> None:
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
            raise ValueError(f"num_workers must be an int >= 1, got {num_workers!r}")
        if call_timeout_s is not None and (
            isinstance(call_timeout_s, bool)
            or not isinstance(call_timeout_s, (int, float))
            or not call_timeout_s >= MIN_CALL_TIMEOUT_S
        ):
            raise ValueError(
                f"call_timeout_s must be a number of seconds >= {MIN_CALL_TIMEOUT_S} or None, "
                f"got {call_timeout_s!r}"
            )
        self.num_workers = num_workers
        self.call_timeout_s = call_timeout_s
        self._context = multiprocessing.get_context(start_method)
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._closed = False
        self._places: dict[Any, tuple[_Worker, int]] = {}  # place_with -> (worker, live envs)
        self._workers: list[_Worker] = []  # one list for the pool's life, changed in place
        self._stop = threading.Event()
        self._finalizer = weakref.finalize(self, _shut_down, self._workers, self._stop)
        _track(self._finalizer)
        self._workers.extend(self._start(i) for i in range(num_workers))
        if call_timeout_s is not None:
            threading.Thread(
                target=_watchdog,
                args=(self._workers, self._lock, self._stop, call_timeout_s),
                name="gigpo-env-watchdog",
                daemon=True,
            ).start()

    # -------------------------------------------------------------- lifecycle
    def _start(self, index: int) -> _Worker:
        parent, child = self._context.Pipe(duplex=True)
        # a forkserver, not this process, forks the worker: its parent pid is not ours
        direct = self._context.get_start_method() != "forkserver"
        parent_pid = os.getpid() if direct else None
        process = self._context.Process(
            target=_worker_main,
            args=(child, parent_pid, _PARENT_DEATH_SIGNAL, _PARENT_WATCH),
            name=f"gigpo-env-worker-{index}",
            daemon=True,
        )
        try:
            _start_process(process)
        finally:
            child.close()
        worker = _Worker(index, process, parent)
        worker.reader = threading.Thread(
            target=_read_replies,
            args=(worker, self._lock),
            name=f"gigpo-env-reader-{index}",
            daemon=True,
        )
        worker.reader.start()
        return worker

    def close(self) -> None:
        """Stops every worker and waits for them, in at most about
        ``SHUTDOWN_GRACE_S + TERMINATE_WAIT_S`` seconds (4 s): the workers close their
        environments and exit, or are sent SIGTERM, then SIGKILL. Calls still pending fail
        with :class:`EnvWorkerError`. Idempotent; a pool dropped without it, or still open at
        interpreter exit, is closed the same way."""
        with self._lock:
            self._closed = True
        self._finalizer()

    def __enter__(self) -> EnvWorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -------------------------------------------------------------- calls
    def _submit(self, worker: _Worker, op: str, payload: Any) -> Future:
        future: Future = Future()
        with self._lock:
            if worker.error is not None:
                future.set_exception(EnvWorkerError(worker.error))
                return future
            call_id = next(self._ids)
            deadline = time.monotonic() + (self.call_timeout_s or float("inf"))
            worker.pending[call_id] = _Call(future, op, deadline)
        try:
            with worker.send_lock:
                worker.conn.send((call_id, op, payload))
        except Exception as exc:  # noqa: BLE001  (unpicklable arguments, or a broken pipe)
            with self._lock:
                call = worker.pending.pop(call_id, None)
            if call is None:  # the worker failed meanwhile: the future has its error
                return future
            if isinstance(exc, (pickle.PicklingError, TypeError, AttributeError)):
                future.set_exception(
                    EnvWorkerError(f"the arguments of {op} cannot be sent to a worker: {exc}")
                )
            else:  # a broken pipe: the worker is dying; name its exit code when it has one
                worker.process.join(timeout=1)
                code = worker.process.exitcode
                why = (
                    f"exited with code {code}" if code is not None else f"cannot be reached ({exc})"
                )
                _fail_worker(self._lock, worker, why)
                worker.process.kill()  # one that cannot be reached serves nothing
                future.set_exception(EnvWorkerError(worker.error or str(exc)))
        return future

    def _place(self, key: int, place_with: Any) -> _Worker:
        """Reserves ``key`` on a worker: the one of ``place_with`` while it hosts an env of
        it, else the live worker hosting the fewest; dead workers are replaced first."""
        with self._lock:
            if self._closed:
                raise EnvWorkerError("the env worker pool is closed")
            for i, worker in enumerate(self._workers):
                if not worker.alive:  # replaced under the lock: one replacement per worker
                    self._workers[i] = self._start(i)
            placed = self._places.get(place_with) if place_with is not None else None
            if placed is not None and placed[0].alive:
                worker = placed[0]
            else:
                worker = min(self._workers, key=lambda w: (len(w.envs), w.index))
            worker.envs.add(key)
            if place_with is not None:
                count = placed[1] if placed is not None and placed[0] is worker else 0
                self._places[place_with] = (worker, count + 1)
            return worker

    def _unplace(self, worker: _Worker, key: int, place_with: Any) -> None:
        with self._lock:
            worker.envs.discard(key)
            placed = self._places.get(place_with) if place_with is not None else None
            if placed is not None and placed[0] is worker:
                if placed[1] <= 1:
                    del self._places[place_with]
                else:
                    self._places[place_with] = (worker, placed[1] - 1)

    def make(
        self,
        factory: Callable[..., Any],
        *args: Any,
        place_with: Any = None,
        **kwargs: Any,
    ) -> RemoteEnv:
        """Builds ``factory(*args, **kwargs)`` in a worker and waits for it (errors of the
        factory are raised here).

        The worker is the one hosting the fewest environments, or, given ``place_with`` (any
        hashable, e.g. a GiGPO group), the worker that hosts the other live envs of that key:
        a group's envs then share one worker's caches (ALFWorld translates a game once per
        process).
        """
        key = next(self._ids)
        worker = self._place(key, place_with)
        remote = RemoteEnv(self, worker, key, place_with)
        try:
            self._submit(worker, "make", (key, factory, args, kwargs)).result()
        except BaseException:
            self._unplace(worker, key, place_with)
            raise
        return remote

    async def amake(
        self, factory: Callable[..., Any], *args: Any, place_with: Any = None, **kwargs: Any
    ) -> RemoteEnv:
        """:meth:`make` without blocking the event loop."""
        return await asyncio.to_thread(
            functools.partial(self.make, factory, *args, place_with=place_with, **kwargs)
        )

    def stats(self) -> list[dict[str, Any]]:
        """Per live worker: ``pid``, ``envs`` hosted, ``cpu_s`` (its process CPU seconds) and
        ``peak_rss_kib`` (its peak resident memory)."""
        with self._lock:
            workers = [w for w in self._workers if w.alive]
        futures = [self._submit(w, "stats", None) for w in workers]
        return [f.result(timeout=60) for f in futures]

    @property
    def pids(self) -> list[int]:
        return [w.process.pid for w in self._workers]


class RemoteEnv:
    """An environment living in an :class:`EnvWorkerPool` worker."""

    def __init__(self, pool: EnvWorkerPool, worker: _Worker, key: int, place_with: Any) -> None:
        self._pool, self._worker, self._key = pool, worker, key
        self._place_with = place_with
        self._closed = False

    @property
    def worker_pid(self) -> int:
        return self._worker.process.pid

    def call(self, method: str, *args: Any, **kwargs: Any) -> Future:
        """``env.<method>(*args, **kwargs)`` in the worker, as a future."""
        if self._closed:
            future: Future = Future()
            future.set_exception(EnvWorkerError("the environment is closed"))
            return future
        return self._pool._submit(self._worker, "call", (self._key, method, args, kwargs))

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        return self.call("reset", **kwargs).result()

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        return self.call("step", action).result()

    def close(self) -> None:
        """Closes the environment in its worker; a no-op when closed or its worker is gone."""
        if self._closed:
            return
        self._closed = True
        self._pool._unplace(self._worker, self._key, self._place_with)
        if self._worker.alive:
            try:
                self._pool._submit(self._worker, "close", self._key).result()
            except EnvWorkerError:
                pass

    async def areset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        return await asyncio.wrap_future(self.call("reset", **kwargs))

    async def astep(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        return await asyncio.wrap_future(self.call("step", action))

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)


def _rebuild(payload: tuple[Any, str, str]) -> BaseException:
    carried, summary, text = payload
    error = carried if isinstance(carried, BaseException) else EnvWorkerError(summary)
    error.add_note(f"raised in an env worker process:\n{text}")
    return error


__all__ = ["EnvWorkerError", "EnvWorkerPool", "RemoteEnv", "cpu_heavy", "make_env", "usable_cpus"]
