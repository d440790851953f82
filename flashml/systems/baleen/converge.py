"""Baleen's convergence loop: the eviction age the episodes assume must match the eviction
age the learned policy produces in simulation at the target write rate.

    EA <- start (2 h)
    repeat (at most max_iter):
        episodes + labels at EA  ->  train  ->  scores for every access
        tune the admission threshold until the simulated write rate meets the target
        EA_measured = mean eviction age of that simulation
        EA' = damping * EA + (1 - damping) * EA_measured
        stop when |EA' - EA| < max(300 s, 5% of EA) and the write rate is within tolerance

The artifact simulates three thresholds and interpolates; the Rust simulator is fast
enough to search the threshold instead (systems/baleen/tuning.py), which hits the target more
precisely.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from flashml.config import GB, MB
from flashml.features.matrix import Features
from flashml.models.gbm import side_by_side
from flashml.settings import GbmParams, LoopSettings
from flashml.simulation import SimConfig
from flashml.systems.baleen.baselines import tune_threshold
from flashml.systems.baleen.dataset import training_data, training_tables, training_window
from flashml.systems.baleen.model import (
    LearnedPolicy,
    TrainingData,
    score_all,
    train_and_score,
    train_policy,
)
from flashml.systems.baleen.tuning import SearchCancelled, Tuned, parallel_map

log = logging.getLogger(__name__)

#: Relative peak-DT margin on the training window within which the simpler choice is taken
#: (less prefetch here; the flat threshold and fewer features in systems/baleen/validation.py): one
#: 10-minute window sets a day's peak, and a smaller difference is noise.
TOLERANCE = 0.01


class Cancelled(Exception):
    """A convergence loop stopped by its `cancel` event."""


class SearchAhead:
    """A threshold search run on its own thread before it is known to be needed: `run_loop`'s
    final search under the peak schedule for an iteration's model, beside that iteration's
    own search, which decides whether the loop ends there. Its result is the search's own
    (the same call, a deterministic simulator); `stop` cancels it before its next
    simulation."""

    def __init__(self, search: Callable[[threading.Event], Tuned],
                 arrays: dict[str, np.ndarray], when_threshold: float) -> None:
        self.arrays, self.when_threshold = arrays, when_threshold
        self.cancel = threading.Event()
        self._out: dict[str, Any] = {}
        self._thread = threading.Thread(target=self._run, args=(search,), daemon=True)
        self._thread.start()

    def _run(self, search: Callable[[threading.Event], Tuned]) -> None:
        try:
            self._out["tuned"] = search(self.cancel)
        except SearchCancelled:
            pass
        except Exception as e:  # raised where the result is taken
            self._out["error"] = e

    def serves(self, arrays: dict[str, np.ndarray], when_threshold: float) -> bool:
        return arrays is self.arrays and when_threshold == self.when_threshold

    def result(self) -> Tuned:
        self._thread.join()
        if "error" in self._out:
            raise self._out["error"]
        return self._out["tuned"]

    def stop(self) -> None:
        self.cancel.set()
        self._thread.join()


@dataclass
class Iteration:
    eviction_age_s: float
    measured_eviction_age_s: float
    threshold: float
    write_rate_mbps: float
    peak_dt_util: float
    episodes: int
    admitted_episodes: int
    seconds: float
    #: True for a warm start's first iteration: the given model's scores, no episodes built
    #: and no training (episodes/admitted_episodes are then 0).
    warm: bool = False


@dataclass
class WarmStart:
    """A converged loop's state a new loop starts from (a sweep trial at another write
    rate): its eviction age, its K (kept: not re-chosen), its model's scores for every
    access and its ML-When threshold, used as the first iteration instead of building
    episodes and training."""

    eviction_age_s: float
    accesses_per_episode: int
    policy: LearnedPolicy
    arrays: dict[str, np.ndarray]
    when_threshold: float
    #: (admitted share, write rate) points measured with these arrays at the loop's config
    #: (`Tuned.points`): each trial's first threshold search starts from them and adds its
    #: own, so later trials in the same process bracket their target at once.
    points: list[tuple[float, float]] = field(default_factory=list)
    #: The loop's last ML-When choice's search points by candidate (a trial's own choice,
    #: with its retrained model, aims with them).
    when_points: dict[float, list[tuple[float, float]]] = field(default_factory=dict)
    #: The loop's final search's points (under `final_base`): a trial's final search aims
    #: with them (the peak schedule shapes the rate more than the model does).
    final_points: list[tuple[float, float]] = field(default_factory=list)
    #: The admission features `policy` holds at 0 (its feature set's, systems/baleen/validation.py
    #: `zeroed_features`): a trial that retrains keeps the shipped model's feature set.
    zeroed: tuple[str, ...] = ()

    @classmethod
    def from_loop(cls, loop: LoopResult, default_k: int) -> WarmStart:
        return cls(loop.eviction_age_s, int(loop.extra.get("accesses_per_episode", default_k)),
                   loop.policy, loop.arrays, loop.when_threshold, list(loop.points),
                   dict(loop.when_points), list(loop.final_points),
                   tuple(loop.extra.get("zeroed", ())))


@dataclass
class LoopResult:
    converged: bool
    iterations: list[Iteration]
    policy: LearnedPolicy
    arrays: dict[str, np.ndarray]
    tuned: Tuned
    eviction_age_s: float
    episodes_dir: Path
    reason: str
    when_threshold: float = 0.5
    extra: dict[str, Any] = field(default_factory=dict)
    #: The last iteration's threshold-search points (`Tuned.points`, before `final_base`).
    points: list[tuple[float, float]] = field(default_factory=list)
    #: The last ML-When choice's threshold-search points by candidate.
    when_points: dict[float, list[tuple[float, float]]] = field(default_factory=dict)
    #: The final search's points (under `final_base`; empty without one).
    final_points: list[tuple[float, float]] = field(default_factory=list)

    def report(self) -> str:
        lines = [f"{'iter':>4} {'assumed EA s':>13} {'measured EA s':>14} {'threshold':>10} "
                 f"{'write MB/s':>11} {'peak DT':>8} {'episodes':>9} {'admitted':>9}"]
        for i, it in enumerate(self.iterations):
            lines.append(f"{i:4d} {it.eviction_age_s:13.0f} {it.measured_eviction_age_s:14.0f}"
                         f" {it.threshold:10.4f} {it.write_rate_mbps:11.2f} "
                         f"{it.peak_dt_util:8.4f} {it.episodes:9d} {it.admitted_episodes:9d}")
        lines.append(("converged: " if self.converged else "NOT converged: ") + self.reason)
        return "\n".join(lines)


def training_day(df: pl.DataFrame, base: SimConfig,
                 train_seconds: float) -> tuple[int, pl.DataFrame, SimConfig]:
    """The training window's row count and rows, and the config that simulates them from a
    cold cache (no warm-up): what every training-day choice is judged on."""
    n = int(training_window(df["time"].to_numpy(), train_seconds).sum())
    return n, df.slice(0, n), base.replace(warmup_s=0.0)


def fill_seconds(base: SimConfig, target_mbps: float, span_s: float) -> float:
    """How long a cold cache takes to fill at the target write rate (cache bytes / rate;
    2.9 h at the artifact's 366.475 GB and 35.599 MiB/s, both at full-node scale), at most
    half of `span_s` (the training window's accesses' span: windows remain to judge), in
    whole measurement windows."""
    w = base.window_s
    fill = base.cache_gb * GB / (target_mbps * MB) if target_mbps > 0 else float("inf")
    return float(max(0.0, min(np.ceil(fill / w), np.floor(0.5 * span_s / w))) * w)


def warm_training_day(df: pl.DataFrame, base: SimConfig, train_seconds: float,
                      target_mbps: float) -> tuple[int, pl.DataFrame, SimConfig]:
    """`training_day` measured once the cache has filled (`fill_seconds` of warm-up): the
    windows a choice judged by peak DT is made on. From a cold cache, the day's first
    windows miss on nearly every access whatever the policy admits, and they set the
    training day's peak (14 of 22 region-like traces measured), so every variant tied or
    the cold start decided; the evaluation days are measured after a day of warm-up. (K is
    chosen on the whole day's mean DT, `select_accesses_per_episode`: the cold start adds
    about the same to every K's.)"""
    n, day, cold = training_day(df, base, train_seconds)
    t = day["time"]
    span = float(t[n - 1] - t[0]) if n else 0.0
    return n, day, cold.replace(warmup_s=fill_seconds(base, target_mbps, span))


def select_when_threshold(df: pl.DataFrame, arrays: dict[str, np.ndarray], base: SimConfig,
                          target_mbps: float, train_seconds: float,
                          candidates: tuple[float, ...],
                          points: dict[float, list[tuple[float, float]]] | None = None
                          ) -> tuple[float, dict[float, float]]:
    """The ML-When threshold with the lowest peak DT on the training window (the first day,
    simulated from a cold cache and measured once it has filled: `warm_training_day`), each
    at the target write rate, except that the highest threshold (the least prefetch; 1.0:
    none) within `TOLERANCE` of it is taken: prefetching writes flash ahead of need and has
    to earn that (of 4 region2-like traces measured, it changed the choice on 2, each to a
    higher evaluation-day peak-DT cut: +0.1 and +0.7 points). Chosen on training data only,
    so the evaluation days stay held out. `points`: by candidate, the
    threshold-search points of an earlier choice (another model's: its searches aim with
    them, `tune_to_write_rate`'s hint), replaced by this choice's."""
    n, sub, cfg = warm_training_day(df, base, train_seconds, target_mbps)
    if n < 2 or len(candidates) == 1:
        return candidates[0], {}
    sub_arrays = {k: v[:n] for k, v in arrays.items()}
    hints = dict(points or {})
    found: dict[float, list[tuple[float, float]]] = {}

    def peak(wt: float, hint: list[tuple[float, float]] | None) -> float:
        t = tune_threshold(sub, cfg.replace(when_threshold=wt), target_mbps, sub_arrays,
                           hint=hint, prefetch="range", prefetch_when="score")
        found[wt] = t.points
        return float(t.result.metrics["peak_dt_util"])

    # Two searches at a time, whatever the cores (so the hints, and the results, do not
    # depend on them): the first two aim with the earlier choice's points, each later one
    # with the points of the candidate two before it (the same model and day, only when
    # prefetches land differs: 1-3 simulations instead of 6-9)
    def aimed(j: int) -> float:
        wt = candidates[j]
        return peak(wt, hints.get(wt) if j < 2 else found[candidates[j - 2]])

    vals: list[float] = []
    for i in range(0, len(candidates), 2):
        vals += parallel_map(aimed, range(i, min(i + 2, len(candidates))))
    if points is not None:
        points.clear()
        points.update(found)
    peaks = dict(zip(candidates, vals, strict=True))
    return simplest_when(peaks), peaks


def simplest_when(peaks: dict[float, float], tolerance: float = TOLERANCE) -> float:
    """The highest ML-When threshold (the least prefetch) whose peak DT is within
    `tolerance` (relative) of the lowest; NaN peaks never win."""
    ok = {w: p for w, p in peaks.items() if np.isfinite(p)}
    if not ok:
        return max(peaks)
    low = min(ok.values())
    return max(w for w, p in ok.items() if p <= low * (1.0 + tolerance))


def select_accesses_per_episode(df: pl.DataFrame, feats: Features, labels: pl.DataFrame,
                                episodes: pl.DataFrame, base: SimConfig, target_mbps: float,
                                settings: LoopSettings, gbm: GbmParams,
                                features: list[str] | None,
                                keep: dict[int, Any] | None = None,
                                zeroed: tuple[str, ...] = ()) -> tuple[int, dict[int, float]]:
    """The K (labelled GETs per episode) whose admission-only model has the lowest mean DT
    on the training window (simulated from a cold cache, at the target write rate), with
    the mean DT by K. Ties go to the artifact's K, then to the smaller one. Training data
    only: the evaluation days stay held out. `keep` receives each K's admission-only policy
    (the loop trains the chosen K's admission model once, not twice)."""
    times = df["time"].to_numpy()
    n, sub, cfg = training_day(df, base, settings.train_seconds)

    def candidate(k: int) -> Callable[[int], tuple[Any, np.ndarray]]:
        def train(threads: int) -> tuple[Any, np.ndarray]:
            data = training_data(feats, times, labels, episodes, settings.train_seconds,
                                 max_position=k, max_rows=settings.max_training_rows)
            policy = train_policy(data, gbm, features=features, with_prefetch=False,
                                  zeroed=zeroed, threads=threads)
            return policy, score_all(policy, feats[:n])["score"]
        return train

    # the candidates' trainings side by side, one LightGBM thread each (the same trees)
    tried = settings.accesses_per_episode_tried
    trained = side_by_side([candidate(k) for k in tried], gbm.num_threads)
    scores: dict[int, np.ndarray] = {}
    for k, (policy, score) in zip(tried, trained, strict=True):
        if keep is not None:
            keep[k] = policy
        scores[k] = score

    def mean_dt(k: int) -> float:
        return float(tune_threshold(sub, cfg, target_mbps, {"score": scores[k]})
                     .result.metrics["mean_dt_util"])

    ks = list(tried)
    means = dict(zip(ks, parallel_map(mean_dt, ks), strict=True))
    best = min(means, key=lambda k: (means[k], k != settings.accesses_per_episode, k))
    return best, means


def training_key(data: TrainingData, gbm: GbmParams, features: list[str] | None,
                 with_prefetch: bool, zeroed: tuple[str, ...]) -> bytes:
    """A digest of everything `train_policy` reads: every array of `data` (dtype, shape and
    bytes), the LightGBM parameters, the feature set, whether the prefetch models train and
    the features held at 0. LightGBM is deterministic, so two trainings with the same digest
    give the same models, and their scores of the same feature matrix the same doubles."""
    h = hashlib.blake2b(digest_size=32)
    for name in TrainingData.__dataclass_fields__:
        a = np.ascontiguousarray(getattr(data, name))
        h.update(f"{name}:{a.dtype.str}:{a.shape};".encode())
        h.update(a.view(np.uint8).ravel() if a.size else b"")
    h.update(repr((gbm, features, with_prefetch, zeroed)).encode())
    return h.digest()


def same_scores(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    """Two policies' per-access arrays (`score_all`'s) hold the same values."""
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def damped(assumed_ea: float, measured_ea: float, s: LoopSettings) -> float:
    """The next assumed eviction age: the artifact's damped step towards the measured one."""
    return s.damping * assumed_ea + (1 - s.damping) * measured_ea


def settled(assumed_ea: float, new_ea: float, s: LoopSettings) -> bool:
    """The eviction age moved less than max(300 s, 5%) of the assumed one."""
    return abs(new_ea - assumed_ea) < max(s.min_move_s, s.min_move_rel * assumed_ea)


def should_stop(assumed_ea: float, new_ea: float, write_rate: float, target: float,
                s: LoopSettings) -> bool:
    """The artifact's rule: the eviction age moved less than max(300 s, 5%) and the write
    rate is within tolerance of the target."""
    return settled(assumed_ea, new_ea, s) and \
        abs(write_rate - target) <= s.write_rate_tolerance * target


def at_fixed_point(result: LoopResult | None, history: list[Iteration], ea: float,
                   target_mbps: float, s: LoopSettings, same: str) -> bool:
    """Whether an iteration at eviction age `ea` that would repeat the last one (`same`
    says why) ends the loop: the eviction age settled from the last iteration's measure.
    If so, `result` (the last iteration's) says so and is the loop's result."""
    prev = history[-1]
    again = damped(ea, prev.measured_eviction_age_s, s)
    if not settled(ea, again, s):
        return False
    assert result is not None
    result.converged = should_stop(ea, again, prev.write_rate_mbps, target_mbps, s)
    result.reason = (
        f"fixed point: {same}, so it would repeat it; the eviction age moves less than "
        f"max({s.min_move_s:g} s, {s.min_move_rel:.0%}) and {prev.write_rate_mbps:.2f} MB/s "
        f"is the write rate this model reaches for the target {target_mbps:.2f}")
    log.info("convergence loop stops: %s", result.reason)
    return True


def run_loop(df: pl.DataFrame, table: Path, feats: Features, base: SimConfig,
             target_mbps: float, workdir: Path, gbm: GbmParams,
             settings: LoopSettings = LoopSettings(),  # noqa: B008 (frozen, shared)
             *, features: list[str] | None = None,
             with_prefetch: bool = True, spark: Any = None,
             final_base: SimConfig | None = None, warm: WarmStart | None = None,
             prebuilt: Path | None = None, zeroed: tuple[str, ...] = (),
             cancel: threading.Event | None = None, warn: bool = True,
             hint: list[tuple[float, float]] | None = None,
             build_lock: AbstractContextManager[Any] | None = None) -> LoopResult:
    """Iterate episodes -> train -> simulate until the eviction age is stable. With
    `final_base` (e.g. `base` plus a peak schedule, systems/baleen/peak.py) the last model's
    admission threshold is tuned to the target once more under it: the loop's own choices
    (eviction age, K, the ML-When threshold) stay those of `base`. With `warm` (a converged
    loop at another target) the loop starts at its eviction age with its model as the first
    iteration and keeps its K: when that model meets this target at about the same eviction
    age the loop stops there, with no episodes built and nothing trained. `prebuilt`: a
    folder of episodes of this table (another loop's, `LoopResult.episodes_dir`) that the
    first iteration uses instead of building when its parameters serve it
    (`episodes.core.reusable`). `zeroed`: admission features held at 0 in every model the
    loop trains (`train_policy`; a warm start's own, `WarmStart.zeroed`, when it has them).
    `cancel`: once set, the loop raises `Cancelled` at its next stage (a sweep point run
    ahead of time that no round asks for). `warn`: a loop that ends unconverged says so as a
    warning (False: in the log's info, for a loop cut short on purpose: a sweep's screen).
    `hint`: threshold-search points of a similar policy on this table and config (another
    feature set's loop at this target) that the first iteration's search aims with.
    `build_lock`: held while an iteration builds its episodes and reads them into training
    rows (loops run side by side share one: a sweep's trials)."""
    from flashml.systems.baleen.episodes.core import EpisodeParams, build, reusable

    times = df["time"].to_numpy()
    ea = warm.eviction_age_s if warm is not None else settings.start_eviction_age_s
    history: list[Iteration] = []
    result: LoopResult | None = None
    prefetch = {"prefetch": "range", "prefetch_when": "score"} if with_prefetch else {}
    fixed_accesses = warm.accesses_per_episode if warm is not None else None
    zeroed = tuple(zeroed or (warm.zeroed if warm is not None else ()))
    build_accesses = fixed_accesses or max((settings.accesses_per_episode,
                                            *settings.accesses_per_episode_tried))
    chosen_accesses: int | None = None
    # Each threshold search aims with the one before it at this target (a model trained at
    # a nearby eviction age admits a similar share): `tune_to_write_rate`'s hint
    when_points = dict(warm.when_points) if warm is not None else {}
    last_points: list[tuple[float, float]] | None = hint
    # the last training's rows' digest (`training_key`), models, scores and iteration
    last_trained: tuple[bytes, LearnedPolicy, dict[str, np.ndarray], int] | None = None
    # the previous iteration's training rows' digest (None after a warm start's first)
    prev_key: bytes | None = None
    # The final search under `final_base`, run beside each iteration's own search when its
    # arguments do not wait for that search (a warm start's final points aim it): the
    # iteration that ends the loop has it done, or nearly, when the loop ends
    final_ahead: SearchAhead | None = None
    ahead_ok = final_base is not None and final_base != base and warm is not None and \
        bool(warm.final_points)

    def final_search(arr: dict[str, np.ndarray], when: float,
                     stop: threading.Event | None = None) -> Tuned:
        assert final_base is not None
        # aimed by the warm start's final search (the same schedule: its rate at share 0 is
        # already most of a low target's), else by this model's search without it
        if warm is not None and warm.final_points:
            hint = warm.final_points
        else:
            assert result is not None
            hint = result.points
        return tune_threshold(df, final_base.replace(when_threshold=when), target_mbps, arr,
                              **prefetch, cancel=stop, hint=hint)

    def check() -> None:
        if cancel is not None and cancel.is_set():
            if final_ahead is not None:
                final_ahead.stop()
            raise Cancelled(f"convergence loop at {target_mbps:.4g} MB/s cancelled")

    for it in range(settings.max_iter):
        check()
        t0 = time.perf_counter()
        out = workdir / f"episodes-{it:02d}"
        n_eps = n_admitted = 0
        if it == 0 and warm is not None:
            policy, arrays, chosen_accesses = warm.policy, warm.arrays, warm.accesses_per_episode
            when_threshold = warm.when_threshold
            log.info("convergence iteration 0: warm start at EA %.0f s (K=%d, ML-When %.2f)",
                     ea, chosen_accesses, when_threshold)
        else:
            # (one loop at a time builds with `build_lock`, released once its tables are
            # read into training rows: the memory of a build, 1.5 GB at 10 M accesses, is not
            # held twice by loops run side by side, and one loop builds while another trains)
            with build_lock or nullcontext():
                params = EpisodeParams(eviction_age_s=ea, target_write_rate_mbps=target_mbps,
                                       accesses_per_episode=build_accesses)
                built = (reusable(prebuilt, params) if it == 0 else None) or build(
                    table, out, params, engine=settings.engine, spark=spark, plot=False)
                out = built.out
                n_eps = int(built.summary["episodes"])
                n_admitted = int(built.summary["admitted_episodes"])
                labels, episodes = training_tables(out)
                chosen_accesses = fixed_accesses or settings.accesses_per_episode
                chosen: dict[int, Any] = {}
                if fixed_accesses is None and len(settings.accesses_per_episode_tried) > 1:
                    chosen_accesses, kmeans = select_accesses_per_episode(
                        df, feats, labels, episodes, base, target_mbps, settings, gbm, features,
                        keep=chosen, zeroed=zeroed)
                    log.info("accesses per episode K=%d (training-day mean DT by K: %s); kept "
                             "for the loop's later iterations", chosen_accesses,
                             {k: round(v, 5) for k, v in kmeans.items()})
                    # K is chosen once, in the first iteration: it is a property of the trace's
                    # access pattern (the same K at every iteration of every loop measured, and
                    # the choice costs one training per candidate)
                    fixed_accesses = chosen_accesses
                check()
                data = training_data(feats, times, labels, episodes, settings.train_seconds,
                                     max_position=chosen_accesses,
                                     max_rows=settings.max_training_rows)
                del labels, episodes  # (not held while it trains and builds the next episodes)
            # (a given admission model is the one these rows and parameters train)
            given = getattr(chosen.get(chosen_accesses), "admission", None)
            key = training_key(data, gbm, features, with_prefetch, zeroed)
            # A fixed point: the same rows as the last iteration's give its models and
            # scores, and its ML-When choice and threshold search at the same target would
            # find its figures again, so the eviction age would move as little as it just
            # did: this iteration would repeat the last one (a write rate that steps over
            # the target between two adjacent thresholds, 138 -> 171 MB/s at a target of
            # 149, never gets within tolerance, and without this stop the loop repeated
            # itself to max_iter, retraining whenever the eviction age crossed a gap between
            # two accesses)
            if prev_key == key and at_fixed_point(
                    result, history, ea, target_mbps, settings,
                    f"iteration {it}'s training rows (episodes at eviction age {ea:.0f} s) "
                    f"are iteration {it - 1}'s"):
                break
            prev_key = key
            if last_trained is not None and last_trained[0] == key:
                # the same rows as the last training (episodes at an eviction age that moved
                # less than any gap between two of the trace's accesses): the same models
                # and scores, kept instead of trained and scored again
                policy, arrays = last_trained[1], last_trained[2]
                log.info("convergence iteration %d: the same training rows as iteration "
                         "%d's; its models and scores kept", it, last_trained[3])
            elif with_prefetch:  # the prefetch models scored beside the admission training
                policy, arrays = train_and_score(data, gbm, feats, features=features,
                                                 admission=given, zeroed=zeroed)
                last_trained = (key, policy, arrays, it)
            else:
                policy = train_policy(data, gbm, features=features, with_prefetch=False,
                                      admission=given, zeroed=zeroed)
                arrays = score_all(policy, feats)
                last_trained = (key, policy, arrays, it)
            # The fixed point above, seen after training: rows that differ (an eviction age
            # that crossed a gap between two accesses of a block outside the labelled ones)
            # trained the same models, whose scores are the last iteration's, so its ML-When
            # choice and threshold search would be found again (the 10 M region1-like
            # sweep's trial at 149 MB/s repeated its iteration 1 exactly: the same 43,677
            # rows' trees, 133.53 MB/s)
            if history and not history[-1].warm and result is not None and \
                    same_scores(arrays, result.arrays) and at_fixed_point(
                        result, history, ea, target_mbps, settings,
                        f"iteration {it}'s models (episodes at eviction age {ea:.0f} s) "
                        f"score every access as iteration {it - 1}'s did"):
                break
            when_threshold = base.when_threshold
            if with_prefetch:
                when_threshold, peaks = select_when_threshold(
                    df, arrays, base, target_mbps, settings.train_seconds,
                    settings.when_candidates, points=when_points)
                log.info("ML-When threshold %.2f (training-day peak DT by threshold: %s)",
                         when_threshold, {k: round(v, 4) for k, v in peaks.items()})
        warm_it = it == 0 and warm is not None
        check()
        if ahead_ok and not (final_ahead is not None and
                             final_ahead.serves(arrays, when_threshold)):
            if final_ahead is not None:
                final_ahead.stop()
            final_ahead = SearchAhead(
                lambda stop, a=arrays, w=when_threshold: final_search(a, w, stop),
                arrays, when_threshold)
        tuned = tune_threshold(df, base.replace(when_threshold=when_threshold), target_mbps,
                               arrays, known=warm.points if warm_it else None,
                               hint=last_points, **prefetch)
        last_points = tuned.points
        if warm_it:
            warm.points[:] = tuned.points
        m = tuned.result.metrics
        measured = float(m["avg_eviction_age_s"])
        if not np.isfinite(measured):
            measured = ea
        history.append(Iteration(ea, measured, tuned.knob, float(m["flash_write_rate_mbps"]),
                                 float(m["peak_dt_util"]), n_eps, n_admitted,
                                 time.perf_counter() - t0, warm=warm_it))
        log.info("convergence iteration %d of at most %d: EA %.0f s -> measured %.0f s, "
                 "threshold %.4f, %.2f MB/s, peak DT %.4f", it, settings.max_iter, ea, measured,
                 tuned.knob,
                 m["flash_write_rate_mbps"], m["peak_dt_util"])
        saturated = tuned.knob == 0.0 and not tuned.reached and \
            float(m["flash_write_rate_mbps"]) < target_mbps
        # Damped as the artifact damps, but for two cases where the measured EA is already
        # the best estimate of the fixed point: a warm start's first iteration (a converged
        # model measured at the new target: damping only walks towards it, 4 trainings
        # instead of 2 on a sweep trial at 1/4 of the target) and a saturated policy (it
        # admits everything, so the EA no longer depends on the model's admissions).
        # (the stopping rule keeps the artifact's damped step)
        undamped = warm_it or saturated
        new_ea = damped(ea, measured, settings)
        moved = abs(new_ea - ea)
        result = LoopResult(False, history, policy, arrays, tuned, ea, out, "",
                            when_threshold=when_threshold,
                            extra={"accesses_per_episode": chosen_accesses, "zeroed": zeroed},
                            points=tuned.points,
                            when_points=dict(when_points))
        if saturated and len(history) > 1 and history[-2].threshold == 0.0 and \
                settled(measured, history[-2].measured_eviction_age_s, settings) and \
                settled(measured, ea, settings):
            result.reason = (f"saturated: even admitting everything (threshold 0) the policy "
                             f"writes {m['flash_write_rate_mbps']:.2f} MB/s < the target "
                             f"{target_mbps:.2f}, and the eviction age it measures no longer "
                             f"moves ({measured:.0f} s)")
            log.info("convergence loop stops: %s", result.reason)
            break
        if not warm_it and not tuned.reached and not saturated and \
                float(m["flash_write_rate_mbps"]) < target_mbps and settled(ea, new_ea, settings):
            # Out of this model's reach with the eviction age settled: the search bracketed
            # the target between two adjacent thresholds (the rate steps over it: 133.5 ->
            # 150.9 MB/s at a target of 149.3 on the 10 M region1-like sweep), and the next
            # iteration would train on the episodes of about this eviction age again, whose
            # models score as these do (that sweep's trial retrained once more to find the
            # same trees, 11 s), so the loop ends here, unconverged, as a saturated one does
            result.reason = (f"out of reach: no threshold of this model writes within "
                             f"{settings.write_rate_tolerance:.0%} of the target "
                             f"{target_mbps:.2f} MB/s (the nearest below it "
                             f"{m['flash_write_rate_mbps']:.2f}), and the eviction age moved "
                             f"{moved:.0f} s (< max({settings.min_move_s:g} s, "
                             f"{settings.min_move_rel:.0%}))")
            log.info("convergence loop stops: %s", result.reason)
            break
        if should_stop(ea, new_ea, float(m["flash_write_rate_mbps"]), target_mbps, settings):
            result.converged = True
            result.reason = (f"eviction age moved {moved:.0f} s (< max({settings.min_move_s:g}"
                             f" s, {settings.min_move_rel:.0%})) with the write rate within "
                             f"{settings.write_rate_tolerance:.0%} of the target after "
                             f"{it + 1} iteration(s)")
            break
        ea = measured if undamped else new_ea
    assert result is not None
    if not result.converged and not result.reason:
        last = history[-1]
        result.reason = (f"stopped after {settings.max_iter} iterations: last assumed EA "
                         f"{last.eviction_age_s:.0f} s vs measured "
                         f"{last.measured_eviction_age_s:.0f} s, write rate "
                         f"{last.write_rate_mbps:.2f} MB/s vs target {target_mbps:.2f}")
        log.log(logging.WARNING if warn else logging.INFO,
                "convergence loop did not converge: %s", result.reason)
    if final_base is not None and final_base != base:
        check()
        if final_ahead is not None and final_ahead.serves(result.arrays,
                                                          result.when_threshold):
            result.tuned, final_ahead = final_ahead.result(), None
        else:
            if final_ahead is not None:  # for an iteration the loop did not end with
                final_ahead.stop()
            result.tuned = final_search(result.arrays, result.when_threshold)
        result.final_points = result.tuned.points
        log.info("final threshold %.4f under the peak schedule %s (bonus %g): %.2f MB/s, "
                 "peak DT %.4f", result.tuned.knob, final_base.peak_hours,
                 final_base.peak_bonus, result.tuned.result.metrics["flash_write_rate_mbps"],
                 result.tuned.result.metrics["peak_dt_util"])
        if not result.tuned.reached:
            log.warning("the peak schedule cannot meet the target write rate %.2f MB/s: even "
                        "at threshold %.2f the learned policy writes %.2f MB/s (the peak "
                        "hours' threshold is %.2f lower); its figures are not comparable with "
                        "the other policies'; use a smaller --peak-bonus or fewer --peak-hours",
                        target_mbps, result.tuned.knob,
                        result.tuned.result.metrics["flash_write_rate_mbps"],
                        final_base.peak_bonus)
    return result
