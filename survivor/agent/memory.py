"""Read buffers already paged in when a notice comes: the agent's malloc settings (glibc only).

    >>> warm_read_buffers()        # first thing in the agent process, before its threads start
    True

google-cloud-storage reads each file it uploads (up to 100 MB a request) into one bytes object.
Memory the process has never used comes from the kernel a page at a time, one fault per 4 KiB:
reading a 10 MB file took 5.6-7 ms that way, 1.2 ms into memory used before (2,440 faults).
In the agent the first large read of a boot is often the upload after the notice (no periodic
checkpoint came before it), so those milliseconds landed on the way to safety.

So the agent asks glibc to:
- serve every thread from one heap (`M_ARENA_MAX` 1). Otherwise each upload thread gets a heap
  of its own, and pages touched by one thread are no use to another;
- take allocations of up to 32 MiB, glibc's upper limit, from that heap (`M_MMAP_THRESHOLD`);
- keep freed memory instead of returning it to the kernel (`M_TRIM_THRESHOLD`).
Then it touches `WARM_BYTES` once, in a background thread at start. The upload reads that follow
reuse those pages: a file, or several read at once, up to about 30 MiB in all. The cost is
~30 MiB of resident memory for the agent's lifetime. Files above 32 MiB are mapped fresh for
each read, as before (glibc maps anything larger on its own). Where there is no glibc `mallopt`
(macOS, musl), nothing changes and `warm_read_buffers` returns False.
"""

from __future__ import annotations

import ctypes
import mmap
import threading
from typing import Callable

from survivor import log as logs

log = logs.get("memory")

# glibc's mallopt parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8

#: The largest allocation glibc will take from a heap instead of mapping it (its limit on 64-bit).
HEAP_ALLOCATION_LIMIT = 32 << 20
#: Free memory at the top of the heap kept before any is returned to the kernel.
KEEP_FREED = 256 << 20
#: Memory touched once at start, then reused by upload reads.
WARM_BYTES = 30 << 20


def _glibc_mallopt() -> Callable[[int, int], int] | None:
    """glibc's `mallopt` from the C library this process already runs on, or None."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # no such symbol: not glibc
        return None
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return mallopt


def keep_heap_memory(mallopt: Callable[[int, int], int] | None = None) -> bool:
    """One heap for all threads, allocations up to 32 MiB from it, freed memory kept. Returns
    whether every setting took (musl's `mallopt` accepts none of them)."""
    mallopt = mallopt or _glibc_mallopt()
    if mallopt is None:
        return False
    settings = ((M_ARENA_MAX, 1), (M_MMAP_THRESHOLD, HEAP_ALLOCATION_LIMIT), (M_TRIM_THRESHOLD, KEEP_FREED))
    return all(mallopt(param, value) == 1 for param, value in settings)


def touch(nbytes: int) -> None:
    """Allocates `nbytes`, writes one byte per page so the kernel backs all of them, frees it."""
    buffer = bytearray(nbytes)
    buffer[::mmap.PAGESIZE] = b"\x01" * len(range(0, nbytes, mmap.PAGESIZE))
    del buffer


def warm_read_buffers(nbytes: int = WARM_BYTES, background: bool = True,
                      mallopt: Callable[[int, int], int] | None = None) -> bool:
    """Sets glibc up as the module docstring says and touches `nbytes` (in a daemon thread unless
    `background` is False). Returns False, touching nothing, where a setting is not taken (no
    glibc `mallopt`, or one that refuses: settings asked for before the refusal stay set)."""
    if not keep_heap_memory(mallopt):
        log.debug("no glibc mallopt; upload reads use fresh memory")
        return False
    if background:
        threading.Thread(target=touch, args=(nbytes,), name="warm read buffers", daemon=True).start()
    else:
        touch(nbytes)
    return True
