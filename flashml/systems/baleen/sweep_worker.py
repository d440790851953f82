"""A parallel worker of the main job's Optuna sweep (`flashml pipeline run --sweep-workers N`):

    python -m flashml.systems.baleen.sweep_worker RUN_DIR

loads what the sweep's trials need from the run folder (the settings the job pickled, the
accesses table, the features, the trained policy bundle for the warm start), then reads its
sweep from the first line on stdin (JSON: `study`, `storage`, `seed`, `parent_run`, `peak0`)
and serves points: each further line is a point (JSON, `flashml.systems.baleen.sweep.serve`), whose
trial runs in the study in `storage` with its MLflow run nested under `parent_run`; its trial
number goes back as a line on stdout. The job starts it as soon as `train` has finished, so
its loading overlaps the stages before the sweep. Everything else the process prints goes to
stderr (kept in `work/sweep/worker-NN.log`). It ends when stdin closes (before the first
line: the job ended without a sweep). It is not meant to be run by hand.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import sys
from pathlib import Path

#: Where the sweep stage leaves the run's settings for its workers (under the run's work/).
SETTINGS = Path("sweep") / "settings.pkl"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    # stdout carries the replies only: whatever a library prints (Python or C) goes to stderr
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    from dataclasses import replace

    from flashml.config import DEFAULTS
    from flashml.heap import bound

    bound()  # as the main job's process (flashml/heap.py)
    from flashml.jobs.run import RunDir
    from flashml.systems.baleen import run_folder as baleen
    from flashml.systems.baleen.sweep import TrialSetup, serve, trial_cores
    from flashml.tracking import setup as tracking_setup

    run = RunDir(argv[0])
    with open(run.work / SETTINGS, "rb") as f:
        s = pickle.load(f)
    tracking_setup()
    df, _ = run.frame()
    # everything but the sweep's own names, loaded before the sweep starts
    loaded = TrialSetup(df, run.table, baleen.features(run), baleen.base_config(run, s),
                        math.nan, DEFAULTS.target_write_rate_mbps, run.work / "sweep",
                        s.gbm, s.loop, "", baleen.learned_config(run, s),
                        None if s.sweep_cold else baleen.warm_start(run, s),
                        cores=trial_cores(s.sweep_workers))
    first = sys.stdin.readline()
    if not first.strip():
        return 0  # the job ended (or failed) before its sweep
    sweep = json.loads(first)
    setup = replace(loaded, peak0=float(sweep["peak0"]), study_name=str(sweep["study"]))
    serve(setup, str(sweep["storage"]), int(sweep["seed"]), str(sweep["parent_run"]),
          sys.stdin, replies)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
