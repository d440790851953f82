"""Optuna sweep over target write rates: each trial runs Baleen's convergence loop at its
target and is scored by TCO; Baleen-TCO picks the write rate with the lowest TCO. Trials
start from the main loop's converged state (eviction age, K, model: converge.WarmStart) and
retrain only when that model misses their target at that eviction age; cold (no state
given), each runs the loop from scratch and the starting eviction age is swept too. sqlite
storage under .flashml/ by default, any RDB URL for parallel workers.

The search is over one dimension, so its points are a grid, not TPE's draws: the user's
target, then points evenly spaced on a log scale from the bottom of the range to its top
(`grid`), each enqueued in the study (the eviction age of a cold trial is still drawn). Six
random draws could leave the top of the range unvisited, and the best point and whether the
range grows would depend on the seed (a warm and a cold sweep of the same trace chose 68 and
135 MB/s so). Optuna's pruners are not used: a trial's TCO depends first on its write rate,
so the median of the other trials' first iterations says nothing about it; the screen below
compares each point's own first iteration instead.

A warm sweep screens each round's points before it runs them: the main loop's model, its
threshold tuned to the point (the trial's first, warm iteration: no training, a few
simulations) gives a TCO for every point, and only the points within `promote_within` of
the best screened TCO run their convergence loop; the others are PRUNED trials that keep
their screened figures. A screen that converges is its trial's loop already. On the 1 M
region1-like jobs (seeds 3 and 5, every point's loop run beside its screen) the loops ended
from 12.5% below their screens' TCO (at 16 MB/s, a target the peak schedule cannot get down
to: its screen is the schedule's floor) to 25% above, every loop of a point screened more than
15% above the best ended at least 30% above the chosen point, and those points cost most of
the sweep (each retrained 1-2 models).

The write-rate range starts at `rate_range` times the target and grows while the best point
sits at its top edge (`widened_range`): TCO (Baleen eq. 4b) charges flash wear only 1/36 of
an HDD's cost per WR_0, so on a trace whose peak keeps falling with more admissions the
optimum lies well above 4x the target; a fixed range would report its own edge as the
optimum. It stops growing once the policy cannot write more (a trial falls short of its
target: the cache admits everything it could) or after `max_widen` steps.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import warnings
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any, NoReturn

import numpy as np
import polars as pl

from flashml.config import optuna_storage
from flashml.cores import limited as limited_cores
from flashml.cores import machine as machine_cores
from flashml.features.matrix import Features
from flashml.policies.tco import tco
from flashml.settings import BaleenSettings, GbmParams, LoopSettings
from flashml.simulation import SimConfig
from flashml.systems.baleen.converge import Cancelled, WarmStart, run_loop
from flashml.systems.baleen.tuning import parallel_map

log = logging.getLogger(__name__)

#: The study's one objective, as optuna-dashboard and `study.metric_names` show it.
METRIC = "tco"
#: MLflow tag of a trial's nested run: its Optuna state (COMPLETE, PRUNED, FAIL).
STATE_TAG = "optuna.trial_state"
#: A best trial whose target lies in the top EDGE of the range (on a log scale) is at the edge.
EDGE = 0.15
#: Each widening multiplies the top of the range by this.
WIDEN = 4.0
#: A trial or screen whose write rate is further than this (relative) from its target fell
#: short of it: the policy may not write that much.
SHORT_OF_TARGET = 0.05
#: Fewer trials than this are not a curve: the range is not widened.
MIN_TRIALS_TO_WIDEN = 4
#: Study user attribute: every screened point's (write rate, TCO), ascending.
SCREENED_ATTR = "screen_tco_by_write_rate"
#: A warm sweep runs the loop of a point whose screened TCO is within this (relative) of the
#: best screened one; the rest are pruned (`--sweep-screen-margin`; None: no screen).
PROMOTE_WITHIN: float | None = BaleenSettings.sweep_screen_margin


def default_storage() -> str:
    """$FLASHML_OPTUNA_STORAGE, else sqlite under the state dir (flashml.config)."""
    return optuna_storage()


@dataclass
class SweepResult:
    study_name: str
    storage: str
    trials: list[dict[str, Any]]
    chosen_write_rate_mbps: float
    chosen_tco: float
    #: The write-rate range (MB/s) the last trials were drawn from.
    range_mbps: tuple[float, float] = (math.nan, math.nan)
    #: How many times the range grew because the best point sat at its top edge.
    widened: int = 0

    def curve(self) -> list[tuple[float, float]]:
        return [(t["write_rate_mbps"], t["tco"]) for t in self.trials if t["state"] == "COMPLETE"]


def widened_range(trials: list[dict[str, Any]], lo: float, hi: float,
                  tolerance: float = SHORT_OF_TARGET) -> tuple[float, float] | None:
    """The next write-rate range (MB/s) when the best complete trial's target lies in the
    top `EDGE` of [lo, hi] on a log scale and the policy reached that target (it could write
    more); None when the range already brackets the optimum or the policy is saturated."""
    done = [t for t in trials if t["state"] == "COMPLETE" and t["tco"] is not None]
    if not done:
        return None
    best = min(done, key=lambda t: t["tco"])
    target, measured = best["target_write_rate_mbps"], best["write_rate_mbps"]
    if target is None or measured is None or hi <= lo:
        return None
    at_edge = math.log(target / lo) >= (1 - EDGE) * math.log(hi / lo)
    saturated = any(t["write_rate_mbps"] is not None and t["target_write_rate_mbps"]
                    and t["write_rate_mbps"] < (1 - tolerance) * t["target_write_rate_mbps"]
                    for t in done)
    if not at_edge or saturated:
        return None
    return max(lo, target / 2), hi * WIDEN


@dataclass
class TrialSetup:
    """What every trial of one sweep needs: the same in the main process and in a worker
    process (`work`), which builds it from the run folder."""

    df: pl.DataFrame
    table: Path
    feats: Features
    base: SimConfig
    peak0: float
    wr0_mbps: float
    workdir: Path
    gbm: GbmParams
    loop: LoopSettings
    study_name: str
    final_base: SimConfig | None = None
    warm: WarmStart | None = None
    #: Cores one trial may use (None: all): the machine's shared by the trials that run at
    #: the same time on it (flashml/cores.py; the results do not depend on it).
    cores: int | None = None


def trial_cores(workers: int) -> int | None:
    """`TrialSetup.cores` for a sweep of `workers` processes on this machine (the same machine
    assumed): the machine's cores shared by the trials that run at once; None with one."""
    return max(1, machine_cores() // workers) if workers > 1 else None


def open_study(study_name: str, storage: str, seed: int) -> Any:
    """The sweep's study (created on first use). Its write rates are enqueued (`grid`); the
    sampler draws only a cold trial's starting eviction age. A sqlite storage waits up to a
    minute for a lock, so parallel workers queue instead of failing."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    store: Any = storage
    if storage.startswith("sqlite"):
        store = optuna.storages.RDBStorage(storage,
                                           engine_kwargs={"connect_args": {"timeout": 60}})
    return optuna.create_study(study_name=study_name, storage=store, direction="minimize",
                               sampler=optuna.samplers.TPESampler(seed=seed),
                               pruner=optuna.pruners.NopPruner(),
                               load_if_exists=True)


def loop_at(setup: TrialSetup, wr: float, ea0: float, workdir: Path,
            cancel: threading.Event | None = None, *, screen: bool = False,
            warm: WarmStart | None = None, cores: int | None = None,
            build_lock: Any = None) -> Any:
    """A trial's convergence loop at target `wr` from eviction age `ea0` (`run_loop`, within
    the trial's cores, or `cores`; `cancel` stops it at its next stage). `screen`: its first
    iteration only (a warm start's: the given model tuned to `wr`, nothing trained). `warm`:
    the warm start, if not `setup.warm` (a screen's own copy of its search points).
    `build_lock`: `run_loop`'s, for loops run side by side."""
    loop = setup.loop
    settings = replace(loop, start_eviction_age_s=ea0,
                       max_iter=1 if screen else min(loop.max_iter, 6))
    cores = cores or setup.cores or machine_cores()
    with limited_cores(cores):
        return run_loop(setup.df, setup.table, setup.feats, setup.base, wr, workdir,
                        replace(setup.gbm, num_threads=min(setup.gbm.num_threads, cores)),
                        settings, final_base=setup.final_base, warm=warm or setup.warm,
                        cancel=cancel, warn=not screen, build_lock=build_lock)


def loop_tco(setup: TrialSetup, res: Any) -> float:
    """The TCO of a loop's result (its final search's figures)."""
    m = res.tuned.result.metrics
    return tco(m["peak_dt_util"], m["flash_write_rate_mbps"], setup.peak0, setup.wr0_mbps)


@dataclass
class Screened:
    """A point's screen (`loop_at(..., screen=True)`) and its TCO, handed to its trial through
    `objective_for`'s `ready`: the trial is pruned for the reason `pruned` says, or (None: the
    screen converged) takes the screen as its loop."""

    result: Any
    tco: float
    pruned: str | None


def ahead_of_time(setup: TrialSetup, wr: float, cancel: threading.Event | None = None) -> Any:
    """The loop a warm trial at `wr` will run, run before its trial exists (a point of the
    sweep's next round, on a process that would otherwise wait for the others at the end of
    this round): its trial takes it from `objective_for`'s `ready` instead of running it.
    Only warm sweeps (a cold trial's starting eviction age is drawn when the trial starts)."""
    if setup.warm is None:
        raise ValueError("only a warm sweep's trials can run ahead of time")
    return loop_at(setup, wr, setup.warm.eviction_age_s, setup.workdir / f"ahead-{wr:.6g}",
                   cancel)


def objective_for(setup: TrialSetup, bounds: list[float],
                  parent_run_id: str | None = None,
                  ready: dict[float, Any] | None = None) -> Any:
    """The Optuna objective of one round of trials: target write rate drawn from `bounds`
    (log scale), a convergence loop (warm-started from `setup.warm` if given), TCO. Each
    trial is an MLflow run nested under the active run, or under `parent_run_id` (a worker
    process, which has no active run). `ready`: loops run ahead of time by target
    (`ahead_of_time`); a trial at one of them takes it (and removes it) instead of running
    it again."""
    import optuna

    def objective(trial: optuna.Trial) -> float:
        import mlflow

        lo, hi = bounds
        wr = trial.suggest_float("write_rate_mbps", lo, hi, log=True)
        if setup.warm is None:
            ea0 = trial.suggest_float("start_eviction_age_s", 1800.0, 4 * 3600.0, log=True)
        else:
            ea0 = setup.warm.eviction_age_s
        early = (ready or {}).pop(wr, None) if setup.warm is not None else None
        if isinstance(early, Screened):
            if early.pruned is not None:
                return pruned(trial, wr, early)
            early = early.result
        cap = saturated_below(trial.study, wr)
        if cap is not None:
            # the policy already wrote all it could at a lower target: this one ends the same
            log.info("sweep trial %d: %.4g MB/s is beyond what the policy can write (trial %d "
                     "reached %.4g of %.4g MB/s); its result is that trial's", trial.number,
                     wr, cap.number, cap.user_attrs["measured_write_rate_mbps"],
                     cap.params["write_rate_mbps"])
            for k, v in cap.user_attrs.items():
                trial.set_user_attr(k, v)
            trial.set_user_attr("trained", 0)
            trial.set_user_attr("same_as_trial", cap.number)
            return float(cap.value)
        start_trial_run(trial)
        status = "FAILED"
        try:
            mlflow.log_params({"write_rate_mbps": wr, "start_eviction_age_s": ea0,
                               "write_rate_range_mbps": f"{lo:.4g}-{hi:.4g}"})
            if early is not None:
                log.info("sweep trial %d: %.4g MB/s was run ahead of time", trial.number, wr)
                mlflow.set_tag("flashml.ran_ahead", "true")
                res = early
            else:
                res = loop_at(setup, wr, ea0, setup.workdir / f"trial-{trial.number:03d}")
            for step, it in enumerate(res.iterations):
                val = tco(it.peak_dt_util, it.write_rate_mbps, setup.peak0, setup.wr0_mbps)
                trial.report(val, step)
                mlflow.log_metrics({"loop_tco": val, "loop_peak_dt_util": it.peak_dt_util,
                                    "loop_write_rate_mbps": it.write_rate_mbps,
                                    "loop_eviction_age_s": it.measured_eviction_age_s},
                                   step=step)
            m = res.tuned.result.metrics
            value = tco(m["peak_dt_util"], m["flash_write_rate_mbps"], setup.peak0,
                        setup.wr0_mbps)
            mlflow.log_metrics({k: float(v) for k, v in m.items()
                                if isinstance(v, (int, float)) and math.isfinite(v)})
            mlflow.log_metric(METRIC, value)
            trial.set_user_attr("measured_write_rate_mbps", float(m["flash_write_rate_mbps"]))
            trial.set_user_attr("peak_dt_util", float(m["peak_dt_util"]))
            trial.set_user_attr("converged", res.converged)
            trial.set_user_attr("loop_iterations", len(res.iterations))
            trial.set_user_attr("trained", sum(not it.warm for it in res.iterations))
            mlflow.set_tag(STATE_TAG, "COMPLETE")
            status = "FINISHED"
        finally:
            if status == "FAILED":
                mlflow.set_tag(STATE_TAG, "FAIL")
            mlflow.end_run(status)
        return value

    def start_trial_run(trial: optuna.Trial, **tags: str) -> Any:
        """The trial's MLflow run, nested under the job's (or `parent_run_id`)."""
        import mlflow

        return mlflow.start_run(run_name=f"sweep-trial-{trial.number}", nested=True,
                                parent_run_id=parent_run_id,
                                tags={"optuna.study": setup.study_name,
                                      "optuna.trial": str(trial.number),
                                      # which process ran it (the main one or a worker)
                                      "flashml.pid": str(os.getpid()), **tags})

    def pruned(trial: optuna.Trial, wr: float, sc: Screened) -> NoReturn:
        import mlflow

        m, why = sc.result.tuned.result.metrics, sc.pruned
        assert why is not None
        log.info("sweep trial %d: %.4g MB/s pruned: %s", trial.number, wr, why)
        trial.set_user_attr("measured_write_rate_mbps", float(m["flash_write_rate_mbps"]))
        trial.set_user_attr("peak_dt_util", float(m["peak_dt_util"]))
        trial.set_user_attr("screen_tco", sc.tco)  # on the trial too, as the dashboard shows it
        trial.set_user_attr("pruned", why)
        trial.set_user_attr("trained", 0)
        trial.report(sc.tco, 0)
        with start_trial_run(trial, **{STATE_TAG: "PRUNED", "flashml.pruned": why}):
            mlflow.log_params({"write_rate_mbps": wr,
                               "write_rate_range_mbps": f"{bounds[0]:.4g}-{bounds[1]:.4g}"})
            mlflow.log_metrics({"screen_tco": sc.tco,
                                "screen_write_rate_mbps": float(m["flash_write_rate_mbps"]),
                                "screen_peak_dt_util": float(m["peak_dt_util"])})
        raise optuna.TrialPruned(why)

    return objective


def saturated_below(study: Any, target: float, tolerance: float = SHORT_OF_TARGET) -> Any:
    """A complete trial at a target at most `target` that fell short of its own target by
    more than `tolerance` (the policy admits all it can there), or None."""
    import optuna

    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        want = t.params.get("write_rate_mbps")
        got = t.user_attrs.get("measured_write_rate_mbps")
        if want is not None and got is not None and want <= target and \
                got < (1 - tolerance) * want:
            return t
    return None


def run_point(setup: TrialSetup, study: Any, bounds: list[float], params: dict[str, float],
              parent_run_id: str | None = None, ready: dict[float, Any] | None = None) -> int:
    """One trial of `study` at `params` (its write rate; a cold sweep's first trial also its
    starting eviction age), the rest drawn by the study's sampler; returns its number. The
    point is given to this process, not taken from a queue the processes share, so two
    processes never run the same point nor leave one waiting (Optuna's enqueued trials are
    popped by a read-then-update on the storage, which threads on sqlite were seen to race)."""
    import optuna

    base = study.sampler
    with warnings.catch_warnings():  # experimental since Optuna 2.4, stable in use
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.sampler = optuna.samplers.PartialFixedSampler(params, base)
    try:
        numbers: list[int] = []
        study.optimize(objective_for(setup, bounds, parent_run_id, ready), n_trials=1,
                       callbacks=[lambda _s, t: numbers.append(t.number)])
    finally:
        study.sampler = base
    return numbers[0]


def serve(setup: TrialSetup, storage: str, seed: int, parent_run_id: str,
          commands: IO[str], replies: IO[str]) -> None:
    """A worker process's loop: once set up it says so (`{"ready": true}`); then each line of
    `commands` is a point (JSON: `params`, `bounds`) whose trial runs (`run_point`), its
    number going back as a line of `replies` (`{"trial": N}`), or a point of a round that may
    come (`{"ahead": write rate}`) whose loop runs ahead of time and is kept for its trial
    (`ahead_of_time`; reply `{"ahead": write rate}`); an error goes back as `{"error": ...}`
    and ends the loop by raising. Ends at the end of `commands` (the sweep closes them when
    no point is left)."""
    study = open_study(setup.study_name, storage, seed)
    replies.write(json.dumps({"ready": True}) + "\n")
    replies.flush()
    ready: dict[float, Any] = {}
    for line in commands:
        if not line.strip():
            continue
        msg = json.loads(line)
        try:
            if "ahead" in msg:
                wr = float(msg["ahead"])
                ready[wr] = ahead_of_time(setup, wr)
                reply: dict[str, Any] = {"ahead": wr}
            else:
                reply = {"trial": run_point(setup, study, list(msg["bounds"]),
                                            dict(msg["params"]), parent_run_id, ready)}
        except BaseException as e:
            replies.write(json.dumps({"error": f"{type(e).__name__}: {e}"}) + "\n")
            replies.flush()
            raise
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


class Worker:
    """A sweep worker process started by a `SpawnWorker` (stdin and stdout pipes, text): it
    serves points (`serve`) until its stdin closes; one process per sweep, which loads the
    run's data once (the job starts it while its stages before the sweep run)."""

    def __init__(self, proc: Any) -> None:
        self.proc = proc
        self._ready = False

    def where(self) -> str:
        return (f"worker pid {self.proc.pid} (its output: "
                f"{getattr(self.proc, 'log_path', 'not kept')})")

    def ready(self) -> None:
        """Wait until it has loaded what its trials need (it takes no point before: the
        other processes take them meanwhile). Raises if it fails first."""
        if not self._ready:
            self._reply()
            self._ready = True

    def _reply(self) -> dict[str, Any]:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"sweep {self.where()} exited {self.proc.wait()}")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"sweep {self.where()} failed: {reply['error']}")
        return reply

    def run(self, params: dict[str, float], bounds: list[float]) -> int:
        """Run one point there; its trial number. Raises if the worker fails or dies."""
        try:
            self.proc.stdin.write(json.dumps({"params": params, "bounds": bounds}) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise RuntimeError(f"sweep {self.where()} is gone") from None
        return int(self._reply()["trial"])

    def run_ahead(self, wr: float) -> None:
        """Run the loop of a point that may come (a trial at `wr` of the next round) there,
        kept for its trial; returns when it is done. Raises if the worker fails or dies."""
        try:
            self.proc.stdin.write(json.dumps({"ahead": wr}) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise RuntimeError(f"sweep {self.where()} is gone") from None
        self._reply()

    def kill(self) -> None:
        """Stop it now (it is running ahead a point no round will ask for)."""
        self.proc.kill()
        self.proc.wait()

    def close(self) -> str | None:
        """Close its stdin and wait for it; why it failed, or None."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        rc = self.proc.wait()
        return None if rc == 0 else f"{self.where()} exit {rc}"


#: Starts a worker process with sampler `seed`: a Popen with text pipes on stdin and stdout
#: running `serve` (the job knows how a worker rebuilds its TrialSetup:
#: `flashml/systems/baleen/sweep_worker.py`).
SpawnWorker = Callable[[int], Any]


def grid(lo: float, hi: float, n: int, target: float | None = None) -> list[float]:
    """`n` write rates for one round: evenly spaced on a log scale from `lo` to `hi`, both
    ends included; with `target`, the target first in place of the grid point nearest to it
    (on a log scale), so the user's rate is on the curve."""
    if n <= 0:
        return []
    if n == 1:
        return [target if target is not None else math.sqrt(lo * hi)]
    pts = [float(x) for x in np.geomspace(lo, hi, n)]
    if target is None:
        return pts
    # a tie (target at the geometric middle of two points) goes to the upper point, decided
    # on distances rounded to 1e-9 so the last bits of geomspace do not decide it
    near = min(range(n), key=lambda i: (round(abs(math.log(pts[i] / target)), 9), -i))
    return [target] + [p for i, p in enumerate(pts) if i != near]


def run_sweep(df: pl.DataFrame, table: Path, feats: Features, base: SimConfig,
              target_mbps: float, peak0: float, wr0_mbps: float, workdir: Path,
              gbm: GbmParams, loop: LoopSettings, *, trials: int = 6,
              storage: str | None = None, study_name: str = "flashml-sweep",
              rate_range: tuple[float, float] = (0.25, 4.0), seed: int = 0,
              parent_run: Any = None, final_base: SimConfig | None = None,
              user_attrs: dict[str, Any] | None = None, max_widen: int = 2,
              warm: WarmStart | None = None, workers: int = 1,
              spawn: SpawnWorker | None = None,
              promote_within: float | None = PROMOTE_WITHIN,
              side_by_side: bool = True) -> SweepResult:
    """Optuna over target write rate (and, without `warm`, the starting eviction age); each
    trial is a convergence loop scored by TCO. With `warm` (the main loop's converged state)
    every trial starts from it (run_loop's warm start: its eviction age, K and model first),
    so a trial whose target the main model already meets at that eviction age costs one
    threshold search instead of a loop from scratch. With `final_base` (the peak schedule,
    systems/baleen/peak.py) each trial's final threshold is tuned under it, as the shipped policy's
    is (run_loop). `user_attrs` go onto the study (trace, target, git commit: what
    optuna-dashboard shows). When the best point sits at the top of the range (and `trials`
    >= MIN_TRIALS_TO_WIDEN), up to `max_widen` rounds of max(2, trials // 2) more trials
    search a range `WIDEN` times higher (`widened_range`). With `workers` > 1 and `spawn`,
    `workers - 1` worker processes (asked of `spawn` once, at the first round; the job starts
    them when its training ends, so they load meanwhile) share the trials with
    the main process on the same storage (an RDB: sqlite here, Postgres across machines):
    each point goes to whichever process is free next (`serve`, `run_point`), so a process
    that drew cheap trials (a saturated point costs nothing, a retrained one most) takes
    more. Trials running at once on this machine share its cores (`TrialSetup.cores`). In a
    warm sweep, a process left without a point while another still runs the round's last one
    runs the next round's first point ahead of time (`ahead_of_time`: a worker in its process,
    this process in a thread); if the range widens its trial takes that loop and runs before
    the round's other points (so a point it saturates is copied, as with one process), else
    the worker is stopped (this process's loop cancelled). The trials are those of a
    one-process sweep; only the time the last trial of a round ran alone is saved.
    `promote_within`: a warm sweep's screen (the module's docstring); this process screens
    every point of a round and runs the trials of the pruned and the converged ones before
    the others are shared out."""
    import mlflow

    storage = storage or default_storage()
    study = open_study(study_name, storage, seed)
    with warnings.catch_warnings():  # experimental since Optuna 3.2, stable in use
        warnings.simplefilter("ignore")
        study.set_metric_names([METRIC])
    attrs = {"target_write_rate_mbps": target_mbps, "peak_dt0": peak0,
             "write_rate0_mbps": wr0_mbps, "objective": "TCO, Baleen eq. 4b, relative to "
             "RejectX at the default write rate (lower is better)", **(user_attrs or {})}
    for k, v in attrs.items():
        study.set_user_attr(k, v)
    bounds = [target_mbps * rate_range[0], target_mbps * rate_range[1]]
    study.set_user_attr("warm_start", warm is not None)
    workers = max(1, workers) if spawn is not None else 1
    study.set_user_attr("workers", workers)
    study.set_user_attr("design", "grid: the target, then log-spaced points over the range")
    setup = TrialSetup(df, table, feats, base, peak0, wr0_mbps, workdir, gbm, loop, study_name,
                       final_base, warm, cores=trial_cores(workers))

    from tqdm import tqdm

    bar = tqdm(total=trials, desc="sweep", unit="trial", disable=None)

    pool: list[Worker] = []
    # A process still running a point of the next round ahead of time (a worker, or None for
    # this one): its write rate, the thread running or waiting for it and its error, if any.
    ahead: dict[Worker | None, tuple[float, threading.Thread, list[str]]] = {}
    mine: dict[float, Any] = {}  # the loops this process ran ahead of time, by write rate
    stop_mine = threading.Event()

    more = max(2, trials // 2)  # points per widening round

    def widening_points(new_hi: float) -> list[float]:
        # the new points extend the range upwards: below the old top it has been searched
        return grid(bounds[1], new_hi, more + 1)[1:]

    def next_points() -> list[float]:
        """The points of the round that follows this one if the range widens (they depend only
        on its top: `widened_range` makes the new top WIDEN x this one), when one may follow
        and can run ahead."""
        if warm is None or len(pool) == 0 or trials < MIN_TRIALS_TO_WIDEN or \
                widened >= max_widen:
            return []
        return widening_points(bounds[1] * WIDEN)

    def round_of(points: list[float]) -> None:
        # the points go to whichever process is free next, the main process included (the
        # first point carries a cold sweep's starting eviction age); the worker processes are
        # started at the first round and serve every round
        todo: deque[dict[str, float]] = deque()
        for i, wr in enumerate(points):
            params: dict[str, float] = {"write_rate_mbps": wr}
            if warm is None and i == 0 and not widened:
                params["start_eviction_age_s"] = loop.start_eviction_age_s
            todo.append(params)
        if workers > 1 and not pool:
            if mlflow.active_run() is None:
                raise RuntimeError("parallel sweep workers need an active MLflow run")
            pool.extend(Worker(spawn(seed + 1000 * i))  # type: ignore[misc]
                        for i in range(1, workers))
        # A point run ahead of time in the last round goes first, alone, on its process (its
        # loop is done): a point above it that it saturates is then copied, as with one process
        ran_ahead = {wr for wr, _, _ in ahead.values()}
        for w, (wr, thread, err) in list(ahead.items()):
            thread.join()
            del ahead[w]
            if err:
                raise RuntimeError("sweep workers failed: " + "; ".join(err))
            for params in [p for p in todo if p["write_rate_mbps"] == wr]:
                todo.remove(params)
                if w is None:
                    run_point(setup, study, list(bounds), params, ready=mine)
                else:
                    w.run(params, list(bounds))
                bar.update(1)
        if warm is not None and promote_within is not None:
            for params in screen_round([p for p in points if p not in ran_ahead]):
                todo.remove(params)
                run_point(setup, study, list(bounds), params, ready=mine)
                bar.update(1)
            if not pool:
                loops_side_by_side([p["write_rate_mbps"] for p in todo])
        lock = threading.Lock()
        failed: list[str] = []
        spare = deque(next_points()[:1])  # one point of the next round may run ahead
        running = [0]  # trials of this round running now

        def take() -> dict[str, float] | None:
            with lock:
                if todo and not failed:
                    running[0] += 1
                    return todo.popleft()
                return None

        def finished() -> None:
            with lock:
                running[0] -= 1
                bar.update(1)

        def take_ahead() -> float | None:
            # a worker with nothing left to take while another process still runs a trial
            # of this round would wait: it runs the next round's first point instead
            with lock:
                if spare and running[0] > 0 and not failed:
                    return spare.popleft()
                return None

        def feed(w: Worker, free: threading.Event) -> None:
            err: list[str] = []
            try:
                w.ready()
                while (params := take()) is not None:
                    w.run(params, list(bounds))
                    finished()
                wr = take_ahead()
                if wr is not None:
                    log.info("sweep: %.4g MB/s, the next round's first point if the range "
                             "widens, runs ahead of time on %s", wr, w.where())
                    ahead[w] = (wr, threading.current_thread(), err)
                    free.set()
                    w.run_ahead(wr)
            except Exception as e:  # the worker failed or died: the sweep fails
                with lock:
                    (err if w in ahead else failed).append(str(e))
            finally:
                free.set()

        frees = [threading.Event() for _ in pool]
        feeders = [threading.Thread(target=feed, args=(w, f), daemon=True)
                   for w, f in zip(pool, frees, strict=True)]
        for f in feeders:
            f.start()
        try:
            while (params := take()) is not None:
                run_point(setup, study, list(bounds), params, ready=mine)
                finished()
            wr = take_ahead()
            if wr is not None:  # in a thread: cancelled at its next stage if not needed
                log.info("sweep: %.4g MB/s, the next round's first point if the range "
                         "widens, runs ahead of time in this process", wr)
                err: list[str] = []

                def run_mine(wr: float = wr, err: list[str] = err) -> None:
                    try:
                        mine[wr] = ahead_of_time(setup, wr, stop_mine)
                    except Cancelled:
                        pass
                    except Exception as e:
                        err.append(f"{type(e).__name__}: {e}")

                thread = threading.Thread(target=run_mine, daemon=True)
                ahead[None] = (wr, thread, err)
                thread.start()
        finally:
            with lock:
                todo.clear()  # on an error here the workers end after their current trial
            for f in frees:  # a worker running ahead is free: the round does not wait for it
                f.wait()
        if failed:
            raise RuntimeError("sweep workers failed: " + "; ".join(failed))

    screened: dict[float, float] = {}  # every screened point's TCO, by write rate
    # whether each screened point's model wrote within SHORT_OF_TARGET of its target (else
    # the policy may not write that much: a trial above it may end as that one's copy)
    screen_reached: dict[float, bool] = {}

    def loops_from_known(points: list[float], folder: str, **kw: Any) -> list[Any]:
        """`loop_at` at each of `points` (in that order), side by side on this process's
        cores, each from its own copy of the search points measured before them, so what
        one finds does not depend on which ran first; then every loop's points join the
        warm start's, in that order (later loops start from them)."""
        assert warm is not None
        known = list(warm.points)

        def loop(wr: float) -> tuple[Any, list[tuple[float, float]]]:
            own = replace(warm, points=list(known))
            return loop_at(setup, wr, warm.eviction_age_s, workdir / f"{folder}-{wr:.6g}",
                           warm=own, **kw), own.points

        out = []
        for res, found in parallel_map(loop, points):
            out.append(res)
            warm.points.extend(p for p in found if p not in warm.points)
        return out

    def loops_side_by_side(promoted: list[float]) -> None:
        """The loops of a round's promoted points, two at a time in this process (their
        trials then take them, as loops run ahead of time: `loops_from_known`), building
        one at a time (a build's memory is not held twice); only the lowest points
        up to the first whose screen fell short of its target (a point above it may end as
        its copy, `saturated_below`, without a loop), only when two or more qualify, and
        not without `side_by_side` (two loops' scores would not fit in memory)."""
        chosen: list[float] = []
        for wr in sorted(promoted):
            chosen.append(wr)
            if not screen_reached.get(wr, False):
                break
        if len(chosen) < 2 or machine_cores() < 2 or not side_by_side:
            return
        log.info("sweep: the loops at %s MB/s run side by side",
                 ", ".join(f"{wr:.4g}" for wr in chosen))
        loops = loops_from_known(chosen, "ahead", build_lock=threading.Lock())
        mine.update(zip(chosen, loops, strict=True))

    def screen_round(points: list[float]) -> list[dict[str, float]]:
        """Screen `points` (this process, one per core at a time: a few simulations each);
        the params of those whose trials take their screen (pruned or converged), kept in
        `mine` for them."""
        assert promote_within is not None
        # the highest rates first: their searches are the longest (a target in the steep
        # top of the curve, or beyond what the policy writes)
        order = sorted(points, reverse=True)
        done = dict(zip(order, loops_from_known(order, "screen", screen=True, cores=1),
                        strict=True))
        results = {wr: done[wr] for wr in points}
        for wr in order:
            screened[wr] = loop_tco(setup, done[wr])
            screen_reached[wr] = abs(done[wr].iterations[0].write_rate_mbps - wr) <= \
                SHORT_OF_TARGET * wr
        study.set_user_attr(SCREENED_ATTR, sorted(screened.items()))
        best = min(screened.values(), default=math.inf)
        taken, pruned = [], 0
        for wr, res in results.items():
            prune = not res.converged and screened[wr] > (1 + promote_within) * best
            if prune or res.converged:
                why = (f"screened TCO {screened[wr]:.4f} is more than {promote_within:.0%} "
                       f"above the best screened {best:.4f}") if prune else None
                mine[wr] = Screened(res, screened[wr], why)
                taken.append({"write_rate_mbps": wr})
                pruned += prune
        log.info("sweep: screened %d point(s) with the main loop's model, TCO by MB/s %s: %d "
                 "pruned (more than %.0f%% above the best, %.4f)", len(results),
                 {round(wr, 3): round(screened[wr], 4) for wr in results}, pruned,
                 100 * promote_within, best)
        return taken

    widened = 0
    try:
        round_of(grid(bounds[0], bounds[1], trials, target_mbps))
        while widened < max_widen and trials >= MIN_TRIALS_TO_WIDEN:
            nxt = widened_range(_rows(study), *bounds)
            if nxt is None:
                break
            log.info("sweep: the best write rate is at the top of %.3g-%.3g MB/s; searching "
                     "%.3g-%.3g MB/s", *bounds, *nxt)
            points = widening_points(nxt[1])
            widened += 1
            bounds[:] = nxt
            bar.total += more
            bar.refresh()
            round_of(points)
    finally:
        bar.close()
        stop_mine.set()
        for w, (wr, thread, _) in list(ahead.items()):  # no round asks for it: stop it
            log.info("sweep: the range did not widen; stopping %s, which ran %.4g MB/s "
                     "ahead of time", "this process's loop" if w is None else w.where(), wr)
            if w is not None:
                w.kill()
            thread.join()
        why = [w for w in (p.close() for p in pool if p not in ahead) if w]
    if why:
        raise RuntimeError("sweep workers failed: " + "; ".join(why))
    study.set_user_attr("write_rate_range_mbps", list(bounds))
    study.set_user_attr("range_widened", widened)
    best = study.best_trial
    return SweepResult(study_name, storage, _rows(study),
                       float(best.user_attrs["measured_write_rate_mbps"]), float(best.value),
                       (bounds[0], bounds[1]), widened)


def _rows(study: Any) -> list[dict[str, Any]]:
    """The trials as the summary records them, with their screen's TCO where the point was
    screened (`screen_tco`; a pruned trial has no `tco`)."""
    screens = {float(wr): v for wr, v in study.user_attrs.get(SCREENED_ATTR, [])}
    return [{"number": t.number, "state": t.state.name,
             "tco": t.value if t.state.name == "COMPLETE" else None,
             "screen_tco": screens.get(t.params.get("write_rate_mbps")),
             "target_write_rate_mbps": t.params.get("write_rate_mbps"),
             "write_rate_mbps": t.user_attrs.get("measured_write_rate_mbps"),
             "peak_dt_util": t.user_attrs.get("peak_dt_util"),
             "start_eviction_age_s": t.params.get("start_eviction_age_s"),
             "converged": t.user_attrs.get("converged"),
             "models_trained": t.user_attrs.get("trained"),
             "same_as_trial": t.user_attrs.get("same_as_trial")} for t in study.trials]
