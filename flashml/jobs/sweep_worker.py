"""A parallel worker of the main job's Optuna sweep (`flashml pipeline run --sweep-workers N`):

    python -m flashml.jobs.sweep_worker RUN_DIR STUDY STORAGE SEED PARENT_RUN PEAK0

rebuilds the sweep's trial set-up from the run folder (the settings the sweep stage pickled,
the accesses table, the features, the trained policy bundle for the warm start), then serves
points: each line on stdin is a point (JSON, `flashml.models.sweep.serve`), whose trial runs
in the study in STORAGE with its MLflow run nested under PARENT_RUN; its trial number goes
back as a line on stdout. Everything else the process prints goes to stderr (the sweep keeps
it in `work/sweep/worker-NN.log`). It ends when stdin closes. The sweep stage starts it; it is
not meant to be run by hand.
"""

from __future__ import annotations

import os
import pickle
import sys
from pathlib import Path

#: Where the sweep stage leaves the run's settings for its workers (under the run's work/).
SETTINGS = Path("sweep") / "settings.pkl"


def main(argv: list[str]) -> int:
    if len(argv) != 6:
        print(__doc__, file=sys.stderr)
        return 2
    # stdout carries the replies only: whatever a library prints (Python or C) goes to stderr
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    from flashml.config import DEFAULTS
    from flashml.jobs import baleen
    from flashml.jobs.run import RunDir
    from flashml.models.sweep import TrialSetup, serve, trial_cores
    from flashml.tracking import setup as tracking_setup

    run_dir, study, storage, seed, parent, peak0 = argv
    run = RunDir(run_dir)
    with open(run.work / SETTINGS, "rb") as f:
        s = pickle.load(f)
    tracking_setup()
    df, _ = run.frame()
    setup = TrialSetup(df, run.table, baleen.features(run), baleen.base_config(run, s),
                       float(peak0), DEFAULTS.target_write_rate_mbps, run.work / "sweep",
                       s.gbm, s.loop, study, baleen.learned_config(run, s),
                       None if s.sweep_cold else baleen.warm_start(run, s),
                       cores=trial_cores(s.sweep_workers))
    serve(setup, storage, int(seed), parent, sys.stdin, replies)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
