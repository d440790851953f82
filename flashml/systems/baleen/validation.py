"""The shipped variant of Baleen's policy, chosen on held-out data inside the training window.

The convergence loop trains on the whole training window (the first day by default) and
the evaluation days stay unseen, so which peak schedule to ship (or none), and which
admission feature set (Baleen's 18, or CacheLib-ML's without the three size features), is
chosen on that window with the labels held out by key:

1. the window's labelled rows (the loop's final episodes and K) are split in two halves by
   a hash of their block; a model trained on one half scores the other half's accesses, so
   every access of the window gets an out-of-fold score, from a model that never saw its
   block's labels (one pair of models per feature set);
2. the window is simulated from a cold cache with those scores, under the flat threshold
   and every schedule of `peak.schedule_candidates`, each tuned to the target write rate
   (RejectX beside them), and measured once the cache has filled
   (`converge.warm_training_day`, as the loop's choice of ML-When): the evaluation days are
   measured with a warm cache, while a cold cache's first windows miss on nearly every
   access whatever is admitted and set the day's peak (14 of 22 region-like traces
   measured: every variant then tied, or the cold start decided);
3. the lowest peak DT wins, except that the simplest candidate within `TOLERANCE` of it
   is taken instead (flat before a schedule, a smaller bonus, then fewer hours, then fewer
   admission features: CacheLib-ML's 15 before Baleen's 18): a 10-minute window sets a
   day's peak, and a difference that small is noise; the size features, as the schedule,
   have to earn their place.

A one-day validation peak is one window of one day; the choice guards against the failures
seen on the evaluation days (a schedule whose off-peak threshold is so high that the hours
next to the busy block become the new peak; a feature set that overfits the window), it is
not a promise for every day. Whether the chosen variant beats RejectX on the window is
recorded (`beats_rejectx`), and the job warns when it does not.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import polars as pl

from flashml.features.contract import contract
from flashml.features.matrix import Features
from flashml.models.gbm import side_by_side, split_by_key
from flashml.settings import GbmParams, LoopSettings, PeakSettings
from flashml.simulation import SimConfig
from flashml.systems.baleen.baselines import tune_rejectx, tune_threshold
from flashml.systems.baleen.converge import TOLERANCE, select_when_threshold, warm_training_day
from flashml.systems.baleen.dataset import training_data
from flashml.systems.baleen.model import score_all, train_policy
from flashml.systems.baleen.peak import busy_hours, schedule_candidates
from flashml.systems.baleen.tuning import parallel_map

log = logging.getLogger(__name__)

#: Windows averaged by `top_dt_util` (an hour of 10-minute windows).
TOP_WINDOWS = 6
#: Hash seed of the two validation folds (not the GBM's early-stopping split's).
FOLD_SEED = 0x5EED_F01D
#: The feature sets validated (the contract's own names); on a tie the one with fewer
#: features is preferred (`feature_count`).
FEATURE_SETS = ("baleen", "cachelib_like")


def zeroed_features(feature_set: str) -> tuple[str, ...]:
    """The contract features a feature set leaves out (held at 0 in its training rows:
    `train_policy(zeroed=...)`): none for Baleen's, the size features for CacheLib-ML's."""
    if feature_set == "baleen":
        return ()
    keep = set(contract().models[feature_set])
    return tuple(n for n in contract().names if n not in keep)


def feature_count(feature_set: str) -> int:
    """The admission features a feature set's model may split on."""
    return len(contract().names) - len(zeroed_features(feature_set))


@dataclass
class Candidate:
    feature_set: str
    peak_hours: tuple[int, ...]
    peak_bonus: float
    peak_dt_util: float = float("nan")
    mean_dt_util: float = float("nan")
    write_rate_mbps: float = float("nan")
    #: Mean of the `TOP_WINDOWS` busiest windows' DT utilisation.
    top_dt_util: float = float("nan")

    def simplicity(self) -> tuple[float, int, int]:
        return (self.peak_bonus, len(self.peak_hours), feature_count(self.feature_set))


@dataclass
class Choice:
    """The variant to ship and what the held-out window measured for every candidate."""

    feature_set: str
    peak_hours: tuple[int, ...]
    peak_bonus: float
    reason: str
    rejectx_peak_dt_util: float
    peak_dt_util: float
    candidates: list[Candidate] = field(default_factory=list)
    #: The cold start left out of the window's figures (`converge.fill_seconds`).
    warmup_s: float = 0.0
    #: ML-When's threshold for the chosen variant (None: not chosen here) and the window's
    #: peak DT by threshold.
    when_threshold: float | None = None
    when_peaks: dict[float, float] = field(default_factory=dict)

    @property
    def beats_rejectx(self) -> bool:
        return self.peak_dt_util < self.rejectx_peak_dt_util

    def record(self) -> dict[str, Any]:
        return {"feature_set": self.feature_set, "peak_hours": list(self.peak_hours),
                "peak_bonus": self.peak_bonus, "reason": self.reason,
                "validation_peak_dt_util": self.peak_dt_util,
                "validation_rejectx_peak_dt_util": self.rejectx_peak_dt_util,
                "beats_rejectx": self.beats_rejectx, "validation_warmup_s": self.warmup_s,
                "when_threshold": self.when_threshold,
                "when_peaks": [[w, p] for w, p in self.when_peaks.items()],
                "candidates": [asdict(c) | {"peak_hours": list(c.peak_hours)}
                               for c in self.candidates]}


def pick(candidates: list[Candidate], tolerance: float = TOLERANCE) -> Candidate:
    """The simplest candidate whose peak DT is within `tolerance` (relative) of the lowest."""
    ok = [c for c in candidates if np.isfinite(c.peak_dt_util)]
    if not ok:
        raise ValueError("no candidate has a finite validation peak DT")
    best = min(c.peak_dt_util for c in ok)
    return min((c for c in ok if c.peak_dt_util <= best * (1.0 + tolerance)),
               key=lambda c: (c.simplicity(), c.peak_dt_util))


def top_mean(series: dict[str, np.ndarray], n: int = TOP_WINDOWS) -> float:
    """Mean DT utilisation of the `n` busiest measured windows of a simulation's series."""
    d = np.asarray(series["dt_util"], dtype=np.float64)
    w = np.asarray(series.get("warmup", np.zeros(len(d))), dtype=bool)
    d = np.sort(d[~w])[::-1]
    return float(d[:n].mean()) if len(d) else float("nan")


def out_of_fold_scores(df: pl.DataFrame, feats: Features, labels: pl.DataFrame,
                       episodes: pl.DataFrame, n: int, k: int, settings: LoopSettings,
                       gbm: GbmParams, feature_set: str) -> np.ndarray:
    """Admission scores of the window's first `n` accesses, each from a model trained on the
    other half of the blocks' labels (with `feature_set`'s features)."""
    data = training_data(feats, df["time"].to_numpy(), labels, episodes,
                         settings.train_seconds, max_position=k,
                         max_rows=settings.max_training_rows)
    fold = split_by_key(data.adm_keys, 0.5, seed=FOLD_SEED)
    day_fold = split_by_key(df["key"].to_numpy()[:n], 0.5, seed=FOLD_SEED)
    out = np.zeros(n, dtype=np.float64)

    def fold_scores(side: bool) -> Callable[[int], np.ndarray]:
        def train(threads: int) -> np.ndarray:
            rows = fold == side
            if len(np.unique(data.adm_y[rows])) < 2:  # too few labels on one side: in-sample
                rows = np.ones(len(rows), dtype=bool)
            half = replace(data, adm_X=data.adm_X[rows], adm_y=data.adm_y[rows],
                           adm_keys=data.adm_keys[rows])
            policy = train_policy(half, gbm, with_prefetch=False,
                                  zeroed=zeroed_features(feature_set), threads=threads)
            return score_all(policy, feats[:n][day_fold != side])["score"]
        return train

    # the two folds' trainings side by side, one LightGBM thread each (the same trees)
    sides = (True, False)
    for side, score in zip(sides, side_by_side([fold_scores(s) for s in sides],
                                               gbm.num_threads), strict=True):
        out[day_fold != side] = score
    return out


def choose(df: pl.DataFrame, feats: Features, labels: pl.DataFrame,
           episodes: pl.DataFrame, base: SimConfig, target_mbps: float, k: int,
           settings: LoopSettings, gbm: GbmParams, peak: PeakSettings,
           feature_sets: tuple[str, ...] = FEATURE_SETS,
           arrays: dict[str, np.ndarray] | None = None) -> Choice:
    """The feature set and peak schedule (or none) with the lowest held-out peak DT on the
    training window (module docstring), and every candidate's figures. With `arrays` (the
    loop's ML-Range/ML-When arrays of every access), ML-When's threshold is chosen again
    for the chosen variant (`converge.select_when_threshold` among
    `settings.when_candidates`): with its schedule and its out-of-fold admission scores,
    not the loop's in-sample scores of Baleen's features (a threshold chosen for one
    admission model prefetched where the other's admissions did not need it)."""
    n, day, warm = warm_training_day(df, base, settings.train_seconds, target_mbps)
    schedules: list[tuple[tuple[int, ...], float]] = [((), 0.0)]
    for hours, bonus in schedule_candidates(peak):
        schedules.append((busy_hours(df, settings.train_seconds, hours), bonus))
    scores = {fs: out_of_fold_scores(df, feats, labels, episodes, n, k, settings, gbm, fs)
              for fs in feature_sets}
    cands = [Candidate(fs, h, b) for fs in feature_sets for h, b in schedules]
    flat_points: dict[str, list[tuple[float, float]]] = {}

    def run(c: Candidate) -> None:
        t = tune_threshold(day, warm.replace(peak_hours=c.peak_hours, peak_bonus=c.peak_bonus),
                           target_mbps, {"score": scores[c.feature_set]},
                           hint=flat_points.get(c.feature_set))
        if not c.peak_hours:
            flat_points[c.feature_set] = t.points
        m = t.result.metrics
        c.peak_dt_util, c.mean_dt_util = float(m["peak_dt_util"]), float(m["mean_dt_util"])
        c.write_rate_mbps = float(m["flash_write_rate_mbps"])
        c.top_dt_util = top_mean(t.result.series)

    def feature_set_runs(fs: str) -> Callable[[], float]:
        def runs() -> float:
            # the flat threshold first; its search aims the schedules' (the same scores, a
            # threshold lowered in some hours: 2-4 simulations each instead of 7-10)
            for c in sorted((c for c in cands if c.feature_set == fs),
                            key=lambda c: bool(c.peak_hours)):
                run(c)
            return math.nan
        return runs

    def rejectx() -> float:
        return float(tune_rejectx(day, warm, target_mbps).result.metrics["peak_dt_util"])

    # RejectX's search (the slowest simulations) beside each feature set's runs, on the
    # machine's cores; each feature set's runs stay in order, so each aims as it would alone
    rx = parallel_map(lambda task: task(),
                      [rejectx, *(feature_set_runs(fs) for fs in feature_sets)])[0]
    best = pick(cands)
    lowest = min(cands, key=lambda c: c.peak_dt_util)
    reason = (f"lowest held-out peak DT {lowest.peak_dt_util:.4f} "
              f"({lowest.feature_set}, {_schedule(lowest)}); chosen {best.feature_set}, "
              f"{_schedule(best)} at {best.peak_dt_util:.4f} (the simplest within "
              f"{TOLERANCE:.0%}); RejectX {rx:.4f}; the first {warm.warmup_s / 3600:.1f} h "
              f"(the cache filling) left out")
    choice = Choice(best.feature_set, best.peak_hours, best.peak_bonus, reason, rx,
                    best.peak_dt_util, cands, warm.warmup_s)
    if arrays is not None and len(settings.when_candidates) > 1:
        sub = {name: v[:n] for name, v in arrays.items()} | {"score": scores[best.feature_set]}
        choice.when_threshold, choice.when_peaks = select_when_threshold(
            day, sub, base.replace(peak_hours=best.peak_hours, peak_bonus=best.peak_bonus),
            target_mbps, settings.train_seconds, settings.when_candidates)
        choice.reason += f"; ML-When {choice.when_threshold:g}"
    log.info("validation on the training window: %s", reason)
    if not choice.beats_rejectx:
        log.warning("no learned variant beats RejectX's peak DT on the held-out training "
                    "window (best %.4f vs %.4f): the shipped policy may not either",
                    best.peak_dt_util, rx)
    return choice


def _schedule(c: Candidate) -> str:
    if not c.peak_hours or c.peak_bonus <= 0.0:
        return "flat threshold"
    return f"{len(c.peak_hours)} h from {c.peak_hours[0]:02d}:00, bonus {c.peak_bonus:g}"
