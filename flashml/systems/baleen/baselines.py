"""Baselines tuned to the same target write rate: RejectX (history factor) and CoinFlip (p),
plus a threshold tuner for any per-access score (learned models)."""

from __future__ import annotations

import threading
import weakref
from dataclasses import replace
from typing import Any

import numpy as np
import polars as pl

from flashml.simulation import SimConfig, simulate
from flashml.systems.baleen.tuning import Pieces, SearchCancelled, Tuned, tune_to_write_rate

#: RejectX's history factor: the search's range, and where its first search stops (a
#: history of 10 caches; the rest of the range only when the target lies beyond it).
REJECTX_FACTORS = (1e-4, 10.0, 1e3)


def _go_on(cancel: threading.Event | None, target_mbps: float) -> None:
    """SearchCancelled once `cancel` is set (checked before each simulation of a search)."""
    if cancel is not None and cancel.is_set():
        raise SearchCancelled(f"search at {target_mbps:.4g} MB/s cancelled")


def tune_rejectx(df: pl.DataFrame, base: SimConfig, target_mbps: float, *,
                 cancel: threading.Event | None = None) -> Tuned:
    """RejectX's history factor at the target, searched in `REJECTX_FACTORS[:2]` first: a
    history of 1000 caches (the range's top) holds every segment the trace ever misses on
    (at 10 M region1-like accesses 2.7 GB, and each simulation several times slower), while
    the factors that meet the targets measured are near 0.02; only a target that a history
    of 10 caches cannot reach is searched up to the top, from the first search's points.
    Once `cancel` is set, the search raises `SearchCancelled` before its next simulation."""
    cfg = base.replace(admission="rejectx")

    def run(f: float) -> Any:
        _go_on(cancel, target_mbps)
        return simulate(df, cfg.replace(rejectx_factor=f))

    lo, mid, hi = REJECTX_FACTORS
    tuned = tune_to_write_rate(run, target_mbps, lo, mid, increasing=True, log_scale=True)
    if tuned.reached or tuned.write_rate > target_mbps:
        return tuned
    return tune_to_write_rate(run, target_mbps, lo, hi, increasing=True, log_scale=True,
                              known=tuned.points)


def tune_coinflip(df: pl.DataFrame, base: SimConfig, target_mbps: float, *,
                  cancel: threading.Event | None = None) -> Tuned:
    """CoinFlip's admission probability at the target (`cancel` as `tune_rejectx`'s)."""
    cfg = base.replace(admission="coinflip")

    def run(p: float) -> Any:
        _go_on(cancel, target_mbps)
        return simulate(df, cfg.replace(coinflip_p=p))

    return tune_to_write_rate(run, target_mbps, 0.0, 1.0, increasing=True)


def tune_threshold(df: pl.DataFrame, base: SimConfig, target_mbps: float,
                   arrays: dict[str, np.ndarray], *,
                   known: list[tuple[float, float]] | None = None,
                   hint: list[tuple[float, float]] | None = None,
                   cancel: threading.Event | None = None, **prefetch: Any) -> Tuned:
    """Admission threshold on `arrays['score']` (with any prefetch arrays) at the target.
    The search runs over the share of accesses admitted (`share_to_threshold`); `known` and
    the result's `points` are (share, write rate) pairs of these arrays and config; `hint`:
    such pairs of similar arrays or config, to aim with (`tune_to_write_rate`). Once
    `cancel` is set, the search raises `SearchCancelled` before its next simulation."""
    cfg = base.replace(admission="threshold", **prefetch)
    knob = share_to_threshold(arrays["score"])

    def run(q: float) -> Any:
        _go_on(cancel, target_mbps)
        return simulate_threshold(df, cfg.replace(threshold=knob(q)), arrays)

    tuned = tune_to_write_rate(
        run, target_mbps, 0.0, 1.0, increasing=True, known=known, hint=hint,
        pieces=threshold_pieces(arrays["score"], knob, cfg))
    return replace(tuned, knob=knob(tuned.knob))


#: The last simulations of `simulate_threshold`, newest last: (key, weak references to the
#: table and the arrays it was run with, result).
_RECENT: list[tuple[tuple[Any, ...], list[weakref.ref[Any]], Any]] = []
_RECENT_LOCK = threading.Lock()
#: How many `_RECENT` keeps (a result is a few KB: metrics and the window series).
RECENT_SIMULATIONS = 64


def simulate_threshold(df: pl.DataFrame, cfg: SimConfig, arrays: dict[str, np.ndarray]) -> Any:
    """`simulate(df, cfg, **arrays)`, or its result when the same table and arrays (the same
    objects, still alive: weak references, so no array outlives its search) were just
    simulated with the same config: a search that starts on a point another search
    measured (the main loop's last point, given to the flat-threshold row and to the
    sweep's trial at the target as `known`) needs no simulation for that point's figures.
    The simulator is deterministic, so the result is the one it would return."""
    objs = [df, *(arrays[k] for k in sorted(arrays))]
    key = (cfg, tuple(sorted(arrays)), tuple(id(o) for o in objs))
    with _RECENT_LOCK:
        _RECENT[:] = [e for e in _RECENT if all(r() is not None for r in e[1])]
        for i, (k, refs, res) in enumerate(_RECENT):
            if k == key and all(r() is o for r, o in zip(refs, objs, strict=True)):
                _RECENT.append(_RECENT.pop(i))
                return res
    res = simulate(df, cfg, **arrays)
    try:
        refs = [weakref.ref(o) for o in objs]
    except TypeError:  # an object without weak references (a plain list): not kept
        return res
    with _RECENT_LOCK:
        _RECENT.append((key, refs, res))
        del _RECENT[:-RECENT_SIMULATIONS]
    return res


class ShareMap:
    """The threshold that admits about a share q of the accesses by score (q = 0: 1.0, none;
    q = 1: 0.0, all), interpolated between the ranked scores so that every threshold in
    [0, 1] stays reachable (a peak schedule's lowered threshold falls between them): the
    write rate is close to linear in q, not in the threshold (scores bunch near 0 and 1), so
    the tuner's interpolation lands near the target in a few steps. `share(t)` inverts it."""

    def __init__(self, score: np.ndarray) -> None:
        score = np.asarray(score, dtype=np.float64)
        # every n/2^18-th score: quantiles within ~0.2% (the map only has to be monotone and
        # near linear), a 4 ms sort instead of 1 s at 10 M accesses
        step = max(1, len(score) >> 18)
        self.ranked = np.concatenate(([0.0], np.sort(np.clip(score[::step], 0.0, 1.0)), [1.0]))
        self.top = float(len(self.ranked) - 1)

    def __call__(self, q: float) -> float:
        if q <= 0.0:
            return 1.0
        if q >= 1.0:
            return 0.0
        ranked = self.ranked
        x = (1.0 - q) * self.top
        i = min(int(x), len(ranked) - 2)
        return float(ranked[i] + (x - i) * (ranked[i + 1] - ranked[i]))

    def share(self, t: float) -> float:
        """A share whose threshold is `t` (up to rounding) for t in [0, 1]."""
        ranked = self.ranked
        i = min(max(int(np.searchsorted(ranked, t, side="right")) - 1, 0), len(ranked) - 2)
        d = ranked[i + 1] - ranked[i]
        x = i + ((t - ranked[i]) / d if d > 0 else 0.0)
        return float(min(max(1.0 - x / self.top, 0.0), 1.0))


def share_to_threshold(score: np.ndarray) -> ShareMap:
    """`ShareMap(score)`: the threshold of each share q admitted."""
    return ShareMap(score)


#: Most pieces `threshold_pieces` lists at once (with more, evenly spaced ones of them).
MAX_PIECES = 32
#: Breaks closer than this (in threshold) count as one: a peak hour's break (score + bonus)
#: is rounded, and a narrower piece holds no threshold the share map reaches exactly.
BREAK_TOL = 1e-9
#: With more scores than this inside a bracket, its distinct ones are not looked for.
MAX_BRACKET_SCORES = 2_000_000


def threshold_pieces(score: np.ndarray, knob: ShareMap, cfg: SimConfig) -> Pieces:
    """`tune_to_write_rate`'s `pieces` for a threshold on `score` under `cfg` (admit iff
    score >= threshold, threshold - peak bonus in the peak hours): what is admitted changes
    only where the threshold crosses a score (or a score + the bonus), so between two shares
    the rate takes one value per piece between those breaks. Gives a share at the middle of
    each piece strictly between the two shares' pieces, or of `MAX_PIECES` evenly spaced
    ones (and False) when there are more; None with too many scores between them or a share
    the map cannot place inside its piece."""
    score = np.asarray(score, dtype=np.float64)
    offsets = (0.0, float(cfg.peak_bonus)) if cfg.peak_hours and cfg.peak_bonus else (0.0,)

    def pieces(q_a: float, q_b: float) -> tuple[list[float], bool] | None:
        lo, hi = sorted((knob(q_a), knob(q_b)))
        found = []
        for off in offsets:
            # the pieces are (break, next break]: the one holding lo ends at the first break
            # >= lo, the one holding hi starts at the last break < hi
            inside = score[(score >= lo - off) & (score < hi - off)]
            if inside.size > MAX_BRACKET_SCORES:
                return None
            found.append(np.unique(inside) + off)
        breaks = np.unique(np.concatenate(found))
        if breaks.size:
            breaks = breaks[np.concatenate(([True], np.diff(breaks) > BREAK_TOL))]
        n = max(breaks.size - 1, 0)
        which = np.arange(n) if n <= MAX_PIECES else \
            np.unique(np.linspace(0, n - 1, MAX_PIECES).round().astype(np.int64))
        out = []
        for k in which:
            b0, b1 = breaks[k], breaks[k + 1]
            q = knob.share(0.5 * (b0 + b1))
            if not b0 < knob(q) < b1:
                return None
            out.append(q)
        return out, n <= MAX_PIECES

    return pieces
