"""A parallel worker of the main job's Optuna sweep (`flashml pipeline run --sweep-workers N`):

    python -m flashml.jobs.sweep_worker RUN_DIR STUDY STORAGE N_TRIALS LO HI SEED PARENT_RUN PEAK0

rebuilds the sweep's trial set-up from the run folder (the settings the sweep stage pickled,
the accesses table, the features, the trained policy bundle for the warm start) and runs
N_TRIALS trials of the study in STORAGE drawn from LO..HI MB/s, their MLflow runs nested
under PARENT_RUN. The sweep stage starts it; it is not meant to be run by hand.
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

#: Where the sweep stage leaves the run's settings for its workers (under the run's work/).
SETTINGS = Path("sweep") / "settings.pkl"


def main(argv: list[str]) -> int:
    from flashml.config import DEFAULTS
    from flashml.cores import machine
    from flashml.jobs import baleen
    from flashml.jobs.run import RunDir
    from flashml.models.sweep import TrialSetup, work
    from flashml.tracking import setup as tracking_setup

    if len(argv) != 9:
        print(__doc__, file=sys.stderr)
        return 2
    run_dir, study, storage, n, lo, hi, seed, parent, peak0 = argv
    run = RunDir(run_dir)
    with open(run.work / SETTINGS, "rb") as f:
        s = pickle.load(f)
    tracking_setup()
    df, _ = run.frame()
    setup = TrialSetup(df, run.table, baleen.features(run), baleen.base_config(run, s),
                       float(peak0), DEFAULTS.target_write_rate_mbps, run.work / "sweep",
                       s.gbm, s.loop, study, baleen.learned_config(run, s),
                       None if s.sweep_cold else baleen.warm_start(run, s),
                       cores=max(1, machine() // max(1, s.sweep_workers)))
    work(setup, storage, [float(lo), float(hi)], int(n), int(seed), parent)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
