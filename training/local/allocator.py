"""The C allocator of a CPU training process: freed memory kept for reuse.

glibc's ``malloc`` serves every allocation above a threshold (at most 32 MiB, usually far
less) with fresh pages from ``mmap`` and gives them back to the system on ``free``. A policy
update allocates and frees the same large tensors (logits, activations, their gradients)
every minibatch, so each one is paid again in page faults: on the project's 2-core CPU
machine about half the update's system time, and 10-20% of a SmolLM2 update's wall time
(docs/benchmarks.md). :func:`keep_freed_memory` tells glibc to serve large blocks from its
heap and keep freed memory there (``mallopt``), so the second minibatch reuses the first's
pages. The process's resident memory then stays at its high-water mark instead of shrinking
between minibatches; ``run.keep_freed_memory: false`` leaves the allocator as it is.

Only glibc (Linux) has ``mallopt``; elsewhere this is a no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform

#: ``mallopt`` parameters (glibc's malloc.h).
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_MAX = -1, -2, -4
#: Never give the top of the heap back (``mallopt(3)``: -1 disables trimming).
TRIM_THRESHOLD = -1
#: Grow the heap by at least this much at a time.
TOP_PAD = 64 * 2**20


def keep_freed_memory() -> bool:
    """Serves large allocations from the heap and keeps freed memory for reuse (see the
    module doc); returns whether the allocator took the settings (False off glibc)."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    taken = [
        mallopt(M_MMAP_MAX, 0),
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD),
        mallopt(M_TOP_PAD, TOP_PAD),
    ]
    return all(taken)
