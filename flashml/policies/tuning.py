"""Tune one policy knob so that the simulated flash write rate meets a target.

Write rate is monotone in each knob flashml tunes (an admission threshold lowers it; a
CoinFlip probability or a RejectX history factor raises it), so a bracketing search finds the knob
whose write rate is the largest one not above the target (`tune_to_write_rate`: regula falsi
inside the bracket the knob's ends make).
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
    """Search `knob` in [lo, hi] for the largest write rate <= target (within rel_tol).

    The ends first (the target may be out of reach), then regula falsi with the Illinois
    modification inside the bracket: each step interpolates the write rate linearly between
    the bracket's ends (on a log scale with `log_scale`), and an end kept twice in a row has
    its excess over the target halved, so a curved or step-like rate still shrinks the
    bracket on both sides. Where the rate is nearly linear in the knob (a threshold mapped
    to the share of accesses it admits: `tune_threshold`) it needs 2-4 simulations where
    bisection needed 7-12 (bench/bench_pipeline.py); a step is kept at least 1% of the
    bracket from its ends, so the worst case stays near bisection's."""
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
    use_log = log_scale and lo > 0
    to_pos = (lambda x: math.log(x)) if use_log else (lambda x: x)
    from_pos = (lambda u: math.exp(u)) if use_log else (lambda u: u)
    best = (low_end, w_low, r_low)
    # bracket in position space: (position, write rate - target); fa <= 0 < fb
    a, fa = to_pos(low_end), w_low - target_mbps
    b, fb = to_pos(high_end), w_high - target_mbps
    side = 0  # which end the last step replaced: -1 a, +1 b
    for _ in range(max_iter):
        t = fa / (fa - fb) if fb != fa else 0.5
        t = min(max(t, 0.01), 0.99)
        mid_pos = a + t * (b - a)
        mid = from_pos(mid_pos)
        if mid in (from_pos(a), from_pos(b)):  # the bracket is one float wide
            break
        w, r = wr(mid)
        f = w - target_mbps
        if w <= target_mbps * (1 + rel_tol):
            if w >= best[1]:
                best = (mid, w, r)
            if w >= target_mbps * (1 - rel_tol):
                break
            a, fa = mid_pos, f
            if side == -1:
                fb /= 2
            side = -1
        else:
            b, fb = mid_pos, f
            if side == 1:
                fa /= 2
            side = 1
    knob, w, r = best
    log.debug("tuned knob=%g -> %.3f MB/s (target %.3f) in %d simulations", knob, w,
              target_mbps, evals)
    return Tuned(knob, r, evals, reached=abs(w - target_mbps) <= target_mbps * 0.05)
