"""How much slower than on a quiet machine things run now: the one factor every hang guard
and budget in the tests stretches by. Plain Python (no pytest): tests/adversarial.py also runs
as a bare worker script."""

from __future__ import annotations

import os


def load_factor(load: float | None = None) -> float:
    """`load` (default: the 1-minute load average) per CPU, at least 1: on 2 cores under a
    load of 40 a job takes about 20 times its quiet time."""
    if load is None:
        load = os.getloadavg()[0]
    return max(1.0, load / (os.cpu_count() or 1))
