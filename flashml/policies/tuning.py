"""Tune one policy knob so that the simulated flash write rate meets a target.

Write rate is monotone in each knob flashml tunes (an admission threshold lowers it; a
CoinFlip probability or a RejectX history factor raises it), so bisection finds the knob
whose write rate is the largest one not above the target. The simulator is fast enough
(milliseconds for a day of a sampled trace) that this costs a few dozen simulations.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

from flashml.simulation import SimResult

log = logging.getLogger(__name__)


@dataclass
class Tuned:
    knob: float
    result: SimResult
    evaluations: int
    #: False when even the knob's extreme cannot reach the target (result is that extreme).
    reached: bool

    @property
    def write_rate(self) -> float:
        return float(self.result.metrics["flash_write_rate_mbps"])


def tune_to_write_rate(run: Callable[[float], SimResult], target_mbps: float, lo: float,
                       hi: float, *, increasing: bool, log_scale: bool = False,
                       rel_tol: float = 0.01, max_iter: int = 30) -> Tuned:
    """Bisect `knob` in [lo, hi] for the largest write rate <= target (within rel_tol)."""
    if target_mbps <= 0:
        raise ValueError(f"target write rate must be > 0 MB/s, got {target_mbps}")
    if not lo < hi:
        raise ValueError(f"empty knob range [{lo}, {hi}]")
    evals = 0

    def wr(x: float) -> tuple[float, SimResult]:
        nonlocal evals
        evals += 1
        r = run(x)
        return float(r.metrics["flash_write_rate_mbps"]), r

    # The knob end that writes least / most.
    low_end, high_end = (lo, hi) if increasing else (hi, lo)
    w_low, r_low = wr(low_end)
    if w_low > target_mbps * (1 + rel_tol):
        return Tuned(low_end, r_low, evals, reached=False)
    w_high, r_high = wr(high_end)
    if w_high <= target_mbps * (1 + rel_tol):
        return Tuned(high_end, r_high, evals, reached=w_high >= target_mbps * (1 - rel_tol))
    best = (low_end, w_low, r_low)
    a, b = low_end, high_end  # wr(a) <= target < wr(b)
    for _ in range(max_iter):
        mid = math.sqrt(a * b) if log_scale and a > 0 and b > 0 else (a + b) / 2
        w, r = wr(mid)
        if w <= target_mbps * (1 + rel_tol):
            if w >= best[1]:
                best = (mid, w, r)
            a = mid
            if w >= target_mbps * (1 - rel_tol):
                break
        else:
            b = mid
    knob, w, r = best
    log.debug("tuned knob=%g -> %.3f MB/s (target %.3f) in %d simulations", knob, w,
              target_mbps, evals)
    return Tuned(knob, r, evals, reached=abs(w - target_mbps) <= target_mbps * 0.05)
