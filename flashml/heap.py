"""The C heap's settings for a long job: glibc's malloc raises its mmap threshold (up to
32 MB) each time a large block is freed, after which blocks of up to that size come from
the heap and its per-thread arenas, which keep freed memory instead of returning it; a job
that allocates and frees arrays of tens of MB from several threads (the simulator, the tree
evaluator, LightGBM, Polars' readers) grows its resident set by what the arenas hold. A
fixed threshold of `MMAP_THRESHOLD` (every larger block is mapped, and unmapped when
freed) and at most `ARENA_MAX` arenas (measured on the 10 M-access main job: every stage's
peak 300-500 MB lower, 4.2 -> 3.2 GB at its end, no slower) are set here, through
`mallopt`, as the environment's MALLOC_MMAP_THRESHOLD_ and MALLOC_ARENA_MAX would set
them at start. Not glibc (another libc, macOS): nothing is done."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os

log = logging.getLogger(__name__)

#: Blocks of at least this many bytes are mapped on their own (glibc's M_MMAP_THRESHOLD).
MMAP_THRESHOLD = 1 << 20
#: Most malloc arenas (glibc's M_ARENA_MAX).
ARENA_MAX = 2
# mallopt's parameter numbers (glibc's malloc.h)
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8


def bound() -> bool:
    """Set the heap's mmap threshold and arena count (glibc only), unless the environment
    already sets them (MALLOC_MMAP_THRESHOLD_, MALLOC_ARENA_MAX). True when set here."""
    if os.environ.get("MALLOC_MMAP_THRESHOLD_") or os.environ.get("MALLOC_ARENA_MAX"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    ok = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and \
        mallopt(_M_ARENA_MAX, ARENA_MAX) == 1
    log.debug("heap: mmap threshold %d B, at most %d arenas: %s", MMAP_THRESHOLD, ARENA_MAX,
              "set" if ok else "refused")
    return ok
