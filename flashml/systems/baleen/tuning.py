"""Tune one policy knob so that the simulated flash write rate meets a target.

Write rate is monotone in each knob flashml tunes (an admission threshold lowers it; a
CoinFlip probability or a RejectX history factor raises it), so a bracketing search finds the knob
whose write rate is the largest one not above the target (`tune_to_write_rate`: regula falsi
inside the bracket the knob's ends make).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

from flashml.simulation import SimResult

log = logging.getLogger(__name__)

#: The step inside the bracket from which `tune_to_write_rate` asks its `pieces` (each ask
#: reads the whole score array: most searches end before it).
PIECES_AFTER = 6

T = TypeVar("T")
R = TypeVar("R")
#: `tune_to_write_rate`'s `pieces`: (x_a, x_b) -> (a knob inside each piece of constant rate
#: between them, or inside evenly spaced ones, and whether that is every piece), or None.
Pieces = Callable[[float, float], tuple[list[float], bool] | None]


class SearchCancelled(Exception):
    """A search stopped by its `cancel` event before its next simulation."""


@dataclass
class Tuned:
    knob: float
    result: SimResult
    evaluations: int
    #: False when even the knob's extreme cannot reach the target (result is that extreme).
    reached: bool
    #: Every (knob, write rate) this search and the `known` ones it was given measured: a
    #: later search on the same function (same policy arrays and config) starts from them.
    points: list[tuple[float, float]] = field(default_factory=list)

    @property
    def write_rate(self) -> float:
        return float(self.result.metrics["flash_write_rate_mbps"])


def tune_to_write_rate(run: Callable[[float], SimResult], target_mbps: float, lo: float,
                       hi: float, *, increasing: bool, log_scale: bool = False,
                       rel_tol: float = 0.01, max_iter: int = 30,
                       known: list[tuple[float, float]] | None = None,
                       hint: list[tuple[float, float]] | None = None,
                       pieces: Pieces | None = None) -> Tuned:
    """Search `knob` in [lo, hi] for the largest write rate <= target (within rel_tol).

    The ends first (the target may be out of reach), then regula falsi with the Illinois
    modification inside the bracket: each step interpolates the write rate linearly between
    the bracket's ends (on a log scale with `log_scale`), and an end kept twice in a row has
    its excess over the target halved, so a curved or step-like rate still shrinks the
    bracket on both sides. Where the rate is nearly linear in the knob (a threshold mapped
    to the share of accesses it admits: `tune_threshold`) it took 6-8 simulations where
    bisection took 9-20 (the 1 M-access region1-like job's learned policies); a step is kept
    at least 1% of the bracket from its ends, so the worst case stays near bisection's.

    `known`: (knob, write rate) points an earlier search of the same function measured (its
    `Tuned.points`, e.g. a sweep trial's first, warm-started iteration after the main loop's
    search): the bracket starts between the nearest of them on either side of the target,
    and the ends are simulated only when no point lies beyond them (1-3 simulations instead
    of 6-8 when the target lies between measured points).

    `hint`: (knob, write rate) points of a *similar* function (the previous model's search at
    this target, the same model without its peak schedule, another ML-When threshold): not
    trusted as this function's, only used to aim. The first probe is where the hint's rate
    crosses the target; while a probe misses by more than `rel_tol` and no two probes lie on
    both sides of it, the next steps to the target along the hint's slope, then along the
    secant of the last two probes (at most three probes). The probes are this function's
    points from then on (as `known`: the interpolation starts from their bracket, simulating
    an end only when they have none). A bad hint costs at most three simulations; a good one
    ends the search in 1-3 instead of 6-9.

    A rate that seems to step across the target (25 simulations were seen under a peak
    schedule) is searched down to one float (or its pieces, below) on purpose: the peak and
    off-peak thresholds cross a cluster of equal scores at nearby shares, and between them
    lies a narrow plateau near the target (148 MB/s between 137.8 and 171.0 at a target of
    149.3; stopping at a bracket of 1e-4 of the share missed it, and the sweep took the trial
    for saturated).

    `pieces`: for a rate that changes only at known knobs (a threshold on a score array
    changes what it admits only where it crosses a score: `tune_threshold`),
    `pieces(x_a, x_b)` gives a knob inside each piece of constant rate strictly between the
    pieces that hold `x_a` and `x_b` (or inside evenly spaced ones of them, at most a few
    dozen) and whether that is every such piece; None when it cannot tell. From the
    `PIECES_AFTER`-th step inside the bracket on, the search bisects those pieces instead of
    the floats between them, so each simulation halves the pieces left, and finds the same
    piece: a cluster of equal scores (7% of the accesses at 1 M region1-like accesses) made a
    step that the float search took 28-34 simulations to narrow down to one float, half of
    all the main job's simulations.
    """
    if target_mbps <= 0:
        raise ValueError(f"target write rate must be > 0 MB/s, got {target_mbps}")
    if not lo < hi:
        raise ValueError(f"empty knob range [{lo}, {hi}]")
    evals = 0
    points = list(known or [])
    results: dict[float, SimResult] = {}  # this search's own simulations by knob
    upper = target_mbps * (1 + rel_tol)

    def wr(x: float) -> tuple[float, SimResult]:
        nonlocal evals
        evals += 1
        r = run(x)
        w = float(r.metrics["flash_write_rate_mbps"])
        points.append((x, w))
        results[x] = r
        return w, r

    def done(knob: float, r: SimResult, reached: bool) -> Tuned:
        log.debug("tuned knob=%g -> %.3f MB/s (target %.3f) in %d simulations", knob,
                  float(r.metrics["flash_write_rate_mbps"]), target_mbps, evals)
        return Tuned(knob, r, evals, reached=reached, points=points)

    # The knob end that writes least / most; "below" a knob writes less.
    low_end, high_end = (lo, hi) if increasing else (hi, lo)
    sign = 1.0 if increasing else -1.0
    use_log = log_scale and lo > 0
    to_pos = (lambda x: math.log(x)) if use_log else (lambda x: x)
    from_pos = (lambda u: math.exp(u)) if use_log else (lambda u: u)
    on_target = target_mbps * (1 - rel_tol)
    feasible, over = _sides(points, lo, hi, upper)
    # a hint aims only a search whose own points hold neither a point on target nor a bracket
    settled = any(w >= on_target for _, w in feasible) or bool(feasible and over)
    aim = _aim(hint, target_mbps, sign, to_pos) if hint and not settled else None
    if aim is not None:
        p_lo, p_hi = sorted((to_pos(lo), to_pos(hi)))
        pos, slope = min(max(aim[0], p_lo), p_hi), aim[1]
        probes: list[tuple[float, float]] = []
        for _ in range(3):
            x = from_pos(pos)
            w, r = wr(x)
            if on_target <= w <= upper:
                return done(x, r, True)
            probes.append((pos, w))
            if len({w > upper for _, w in probes}) == 2:
                break  # a bracket: the interpolation below takes it from here
            if len(probes) >= 2:  # this function's own slope (secant) from now on
                (p0, w0), (p1, w1) = probes[-2:]
                if w1 != w0 and p1 != p0 and (w1 - w0) / (p1 - p0) * slope > 0:
                    slope = (w1 - w0) / (p1 - p0)
            nxt = min(max(pos + (target_mbps - w) / slope, p_lo), p_hi)
            if nxt == pos:
                break
            pos = nxt
    feasible, over = _sides(points, lo, hi, upper)
    if feasible and over and max(sign * x for x, _ in feasible) >= min(sign * x for x, _ in over):
        feasible, over = [], []  # not monotone (another function's points?): start afresh
    best: tuple[float, float, SimResult | None]
    if feasible:
        x_a, w_a = max(feasible, key=lambda p: (sign * p[0], p[1]))
        if w_a >= on_target:  # already on target: its figures only
            w, r = wr(x_a)
            return done(x_a, r, abs(w - target_mbps) <= target_mbps * 0.05)
        best = (x_a, w_a, results.get(x_a))
    else:
        w_low, r_low = wr(low_end)
        if w_low > upper:
            return done(low_end, r_low, False)
        x_a, w_a = low_end, w_low
        best = (low_end, w_low, r_low)
    if over:
        x_b, w_b = min(over, key=lambda p: sign * p[0])
    else:
        w_high, r_high = wr(high_end)
        if w_high <= upper:
            return done(high_end, r_high, w_high >= on_target)
        x_b, w_b = high_end, w_high
    # bracket in position space: (position, write rate - target); fa <= 0 < fb
    a, fa = to_pos(x_a), w_a - target_mbps
    b, fb = to_pos(x_b), w_b - target_mbps
    side = 0  # which end the last step replaced: -1 a, +1 b
    for step in range(max_iter):
        got = pieces(from_pos(a), from_pos(b)) if pieces and step >= PIECES_AFTER else None
        if got is not None:
            # the rate is monotone across the pieces: bisect them from a's side to b's
            xs, every = sorted(got[0], key=lambda x: abs(to_pos(x) - a)), got[1]
            i, j, hit = 0, len(xs) - 1, False
            while i <= j:
                k = (i + j) // 2
                w, r = wr(xs[k])
                if w > upper:
                    b, fb, j = to_pos(xs[k]), w - target_mbps, k - 1
                    continue
                if w >= best[1] or best[2] is None:
                    best = (xs[k], w, r)
                a, fa, i = to_pos(xs[k]), w - target_mbps, k + 1
                if w >= on_target:
                    hit = True
                    break
            if hit or every:
                break
            side = 0
            continue
        t = fa / (fa - fb) if fb != fa else 0.5
        t = min(max(t, 0.01), 0.99)
        mid_pos = a + t * (b - a)
        mid = from_pos(mid_pos)
        if mid in (from_pos(a), from_pos(b)):  # the bracket is one float wide
            break
        w, r = wr(mid)
        f = w - target_mbps
        if w <= upper:
            if w >= best[1] or best[2] is None:
                best = (mid, w, r)
            if w >= on_target:
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
    if r is None:  # the best point is a known one: simulate it again for its figures
        w, r = wr(knob)
    return done(knob, r, abs(w - target_mbps) <= target_mbps * 0.05)


def _sides(points: list[tuple[float, float]], lo: float, hi: float, upper: float
           ) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """The points inside [lo, hi] that write at most `upper` (feasible) and more (over)."""
    inside = [(x, w) for x, w in points if lo <= x <= hi]
    return [p for p in inside if p[1] <= upper], [p for p in inside if p[1] > upper]


def _aim(hint: list[tuple[float, float]], target: float, sign: float,
         to_pos: Callable[[float], float]) -> tuple[float, float] | None:
    """Where the hint's rate first crosses `target` (a position, linear between the two hint
    points around it) and its slope there (rate per position), or None when it does not."""
    pts = []
    for x, w in hint:
        try:
            p = to_pos(x)
        except ValueError:  # log of a knob <= 0
            continue
        if math.isfinite(p) and math.isfinite(w):
            pts.append((p, w))
    pts.sort(key=lambda pw: sign * pw[0])
    for (p0, w0), (p1, w1) in zip(pts, pts[1:], strict=False):
        if w0 <= target <= w1 and w1 > w0 and p1 != p0:
            return p0 + (target - w0) / (w1 - w0) * (p1 - p0), (w1 - w0) / (p1 - p0)
    return None


def parallel_map(fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """`[fn(x) for x in items]` on one thread per available CPU: for independent threshold
    searches (the simulator releases the GIL, so two searches on two cores take the time of
    one). Exceptions propagate; the results keep the items' order."""
    from flashml.cores import available

    workers = min(len(items), available())
    if workers <= 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(max_workers=workers) as ex:
        return list(ex.map(fn, items))
