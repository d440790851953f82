"""How many cores a piece of work may use: the process's (its CPU affinity), or fewer inside
`limited(n)`. A sweep running two trials at a time on two cores gives each one core, so the
tree evaluator, LightGBM and the side-by-side threshold searches of one trial do not fight
the other's (their results do not depend on the count: the same trees and scores, bit for
bit). The limit is per thread (a sweep trial runs in its own thread)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_local = threading.local()


def machine() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def load_factor(load: float | None = None) -> float:
    """How much slower than on a quiet machine work runs now: `load` (default: the 1-minute
    load average) per core, at least 1. On 2 cores under a load of 40 a job takes about 20
    times its quiet time; waits for a server to start and the tests' hang guards stretch by it."""
    if load is None:
        load = os.getloadavg()[0]
    return max(1.0, load / machine())


def available() -> int:
    """The cores the current thread's work may use: `machine()`, or the innermost limit."""
    return min(machine(), getattr(_local, "limit", None) or machine())


@contextmanager
def limited(n: int) -> Iterator[int]:
    """Within the block, this thread's work uses at most `n` (>= 1) cores."""
    before = getattr(_local, "limit", None)
    _local.limit = max(1, int(n))
    try:
        yield _local.limit
    finally:
        _local.limit = before
