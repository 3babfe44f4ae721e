"""gigpo_envs.workers: a pool's workers never outlive it.

Real processes throughout: a parent pool process run as a child of the test and SIGKILLed or
sent SIGINT while a worker hangs in an env call (tests/worker_envs.py), and pools dropped
without ``close()`` in this process. A worker counts as gone once no process has its pid or
the process is a zombie (exited, not yet reaped by its new parent).
"""

from __future__ import annotations

import gc
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path

import pytest

from gigpo_envs import workers
from gigpo_envs.workers import EnvWorkerPool, make_env

TESTS = str(Path(__file__).resolve().parents[1])
REPO = str(Path(__file__).resolve().parents[2])


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has exited (a zombie counts: it runs nothing)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("State:"):
                    return line.split()[1] in ("Z", "X")
    except FileNotFoundError:
        return True
    except OSError:  # no /proc (not Linux): ask the kernel
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _survivors(pids: list[int], within_s: float) -> list[int]:
    """The pids still running after up to ``within_s`` seconds."""
    deadline = time.monotonic() + within_s
    while True:
        alive = [pid for pid in pids if not _gone(pid)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def _kill_all(pids: list[int]) -> None:
    """Cleans up after a failed test: no stray worker is left running."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _start_parent(body: str, tmp_path: Path) -> tuple[subprocess.Popen, list[int]]:
    """Runs ``body`` in a fresh Python (a pool's parent); returns it and the worker pids it
    prints on its first line. Its SIGINT is Python's own handler, as in a terminal, whoever
    started the tests: a runner launched in the background by a script (``tox &``) hands its
    children SIGINT ignored, which Python keeps (a Ctrl-C could not reach the parent)."""
    prelude = "import signal, sys\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
    script = f"{prelude}sys.path.insert(0, {TESTS!r})\n{body}"
    stderr = open(tmp_path / "stderr.txt", "w")  # noqa: SIM115  (the child writes it)
    proc = subprocess.Popen(
        [sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, stderr=stderr, text=True
    )
    stderr.close()
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        ready = selector.select(timeout=120)
    line = proc.stdout.readline() if ready else ""
    if not line:
        proc.kill()
        proc.wait()
        pytest.fail(f"the parent printed no pids: {(tmp_path / 'stderr.txt').read_text()}")
    return proc, [int(pid) for pid in line.split()]


_HUNG_PARENT = """
import worker_envs
from gigpo_envs import workers
workers._PARENT_DEATH_SIGNAL = {death_signal}
workers._PARENT_WATCH = {watch}
pool = workers.EnvWorkerPool(2, start_method={start_method!r})
envs = [pool.make(worker_envs.misbehaving_sokoban, "hang") for _ in range(2)]
for env in envs:
    env.reset(seed=0)
calls = [env.call("step", "misbehave") for env in envs]  # both workers hang
print(*pool.pids, flush=True)
calls[0].result()
"""


@pytest.mark.parametrize(
    ("death_signal", "watch", "start_method"),
    [
        (True, True, "spawn"),
        (True, False, "spawn"),
        (False, True, "spawn"),
        (False, True, "forkserver"),  # the worker's parent is the fork server
    ],
    ids=["both", "death-signal-alone", "watch-alone", "forkserver"],
)
def test_workers_end_when_their_parent_is_killed_during_a_hung_call(
    tmp_path, death_signal, watch, start_method
):
    if death_signal and not sys.platform.startswith("linux"):
        pytest.skip("the parent-death signal is Linux's")
    body = _HUNG_PARENT.format(death_signal=death_signal, watch=watch, start_method=start_method)
    proc, pids = _start_parent(body, tmp_path)
    try:
        assert len(pids) == 2 and not any(_gone(pid) for pid in pids)
        time.sleep(0.5)  # the workers are inside their hung step
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert _survivors(pids, within_s=5) == []
    finally:
        _kill_all(pids)


def test_workers_started_from_a_thread_outlive_that_thread():
    """Linux's parent-death signal follows the thread that started a worker: the pool starts
    them from a thread of its own, so a pool made in a short-lived thread keeps its workers."""
    made: list = []

    def make() -> None:
        pool = EnvWorkerPool(1)
        made.append((pool, pool.make(make_env, "gigpo/Sokoban-v0")))  # the worker is up

    thread = threading.Thread(target=make)
    thread.start()
    thread.join(timeout=60)
    pool, env = made[0]
    with pool:
        time.sleep(0.5)  # a signal sent when the thread ended would have landed
        assert not _gone(env.worker_pid)
        assert env.reset(seed=0)[1]["anchor"]


def _pool_threads() -> int:
    names = ("gigpo-env-reader", "gigpo-env-watchdog")
    return sum(t.name.startswith(names) for t in threading.enumerate())


def test_pools_dropped_without_close_leave_no_workers_and_no_threads():
    threads_before = _pool_threads()
    pools = [EnvWorkerPool(2, call_timeout_s=60) for _ in range(10)]
    env = pools[0].make(make_env, "gigpo/Sokoban-v0")  # a used pool, its env dropped too
    env.reset(seed=0)
    pids = [pid for pool in pools for pid in pool.pids]
    refs = [weakref.ref(pool) for pool in pools]
    assert _pool_threads() == threads_before + 10 * 2 + 10
    try:
        del pools, env
        gc.collect()
        assert [ref() for ref in refs] == [None] * 10
        assert _survivors(pids, within_s=5) == []
        deadline = time.monotonic() + 5
        while _pool_threads() > threads_before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _pool_threads() == threads_before
    finally:
        _kill_all(pids)


_STUBBORN_PARENT = {
    # the pool closed by its with block, as KeyboardInterrupt leaves it
    "with": """
import worker_envs
from gigpo_envs.workers import EnvWorkerPool
with EnvWorkerPool(2) as pool:
    env = pool.make(worker_envs.stubborn_sokoban)
    env.reset(seed=0)  # from here on the worker ignores SIGTERM
    call = env.call("step", "up")  # and hangs
    print(*pool.pids, flush=True)
    call.result()
""",
    # the pool left open: interpreter exit closes it
    "exit": """
import worker_envs
from gigpo_envs.workers import EnvWorkerPool
pool = EnvWorkerPool(2)
env = pool.make(worker_envs.stubborn_sokoban)
env.reset(seed=0)
call = env.call("step", "up")
print(*pool.pids, flush=True)
call.result()
""",
}


@pytest.mark.parametrize("how", sorted(_STUBBORN_PARENT))
def test_ctrl_c_ends_the_parent_and_its_workers_in_bounded_time(tmp_path, how):
    proc, pids = _start_parent(_STUBBORN_PARENT[how], tmp_path)
    try:
        time.sleep(0.5)  # the stubborn worker is inside its hung step
        start = time.monotonic()
        os.kill(proc.pid, signal.SIGINT)
        bound = workers.SHUTDOWN_GRACE_S + workers.TERMINATE_WAIT_S
        try:
            proc.wait(timeout=bound + 15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            pytest.fail(f"the parent still ran {bound + 15} s after SIGINT")
        assert time.monotonic() - start < bound + 4
        assert "KeyboardInterrupt" in (tmp_path / "stderr.txt").read_text()
        assert _survivors(pids, within_s=2) == []
    finally:
        _kill_all(pids)


def test_the_watchdog_of_the_shortest_timeout_stays_idle():
    with pytest.raises(ValueError, match=r"call_timeout_s must be .* >= 0\.1"):
        EnvWorkerPool(1, call_timeout_s=1e-6)
    with EnvWorkerPool(1, call_timeout_s=workers.MIN_CALL_TIMEOUT_S):
        start = time.process_time()
        time.sleep(1.0)  # the watchdog wakes every 10 ms, finding nothing to do
        assert time.process_time() - start < 0.25  # this process's CPU seconds
