"""The pipeline's sweep worker processes: started beside the sweep stage (job.py `sweep`), each
runs trials of the study the stage opens (sweep_worker.py is a worker's entry point,
sweep.py runs the trials); `study_name` names that study."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from flashml.jobs.run import RunDir
from flashml.settings import BaleenSettings
from flashml.systems.baleen.run_folder import (
    trace_name,
)

if TYPE_CHECKING:  # numpy, the simulator and the tuner load when a stage runs, not with the CLI

    pass

log = logging.getLogger("flashml.pipeline")


def sweep_spawner(run: RunDir, s: BaleenSettings, study: str, storage: str, peak0: float,
                  run_id: str) -> Any:
    """How the sweep starts a parallel worker (`--sweep-workers`): one started when `train`
    finished (`start_sweep_workers`, its data loaded meanwhile), else a new one; either gets
    the sweep's study, storage, sampler seed, parent MLflow run and PeakDT_0 as its first line
    (flashml/systems/baleen/sweep_worker.py)."""
    if s.sweep_workers <= 1:
        return None

    def spawn(seed: int) -> Any:
        started = run.cache.get("sweep_workers") or []
        proc = started.pop(0) if started else _start_sweep_worker(run, s)
        proc.stdin.write(json.dumps({"study": study, "storage": storage, "seed": seed,
                                     "parent_run": run_id, "peak0": peak0}) + "\n")
        proc.stdin.flush()
        return proc

    return spawn


def start_sweep_workers(run: RunDir, s: BaleenSettings) -> Any:
    """The sweep stage's `prepare`: once `train` has finished, start the sweep's worker
    processes (`--sweep-workers N`: N - 1 of them) so that their loading (the run's table,
    features and warm start, 10-20 s at 1-10 M accesses) overlaps the stages before the
    sweep instead of its first round. Nothing when the sweep will not run workers or is
    already recorded. Returns the function that stops the workers the sweep did not take
    (the job failed or stopped before it)."""
    if (s.sweep_workers <= 1 or s.sweep_trials <= 0 or s.candidate_bundle is not None
            or run.done("sweep") is not None or run.cache.get("sweep_workers")):
        return None
    started = run.cache["sweep_workers"] = [_start_sweep_worker(run, s)
                                            for _ in range(s.sweep_workers - 1)]
    log.info("started %d sweep worker process(es) to load the run while the stages before "
             "the sweep run", s.sweep_workers - 1)

    def stop_unused() -> None:
        while started:  # the sweep pops the ones it takes
            proc = started.pop()
            proc.kill()
            proc.wait()
            for pipe in (proc.stdin, proc.stdout):
                pipe.close()

    return stop_unused


def _start_sweep_worker(run: RunDir, s: BaleenSettings) -> Any:
    """A sweep worker process on this run folder (flashml/systems/baleen/sweep_worker.py), points in
    on its stdin and trial numbers out on its stdout, its log in `work/sweep/worker-NN.log`;
    the settings go to the folder for it first."""
    import pickle
    import subprocess
    import sys

    from flashml.files import atomic_path
    from flashml.systems.baleen.sweep_worker import SETTINGS

    path = run.work / SETTINGS
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        tmp.write_bytes(pickle.dumps(s))
    number = run.cache["sweep_worker_count"] = run.cache.get("sweep_worker_count", 0) + 1
    log_path = path.parent / f"worker-{number:02d}.log"
    with open(log_path, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "flashml.systems.baleen.sweep_worker", str(run.path.resolve())],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=out, text=True)
    proc.log_path = log_path  # type: ignore[attr-defined]
    return proc


def study_name(run: RunDir | None, s: BaleenSettings, run_id: str) -> str:
    """The Optuna study of a run: `<trace>-<target>MBps-<UTC date and time>-<run id[:8]>`,
    by trace and target in optuna-dashboard's list, unique per run (a study mixes only one
    run's trials: TCO is relative to that run's RejectX)."""
    import datetime as dt

    when = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M")
    return f"{trace_name(run, s)}-{s.target_write_rate_mbps:.4g}MBps-{when}-{run_id[:8]}"
