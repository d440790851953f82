"""The job's memory budget (`--memory`, GiB; 0: the memory available when the job first asks)
and what it decides: whether the learned policies' per-access scores are held in memory or,
once a loop has finished, kept in files and mapped (their pages the kernel's to take back),
and whether the sweep runs two trials' loops side by side. One learned policy's scores are
`SCORE_BYTES_PER_ACCESS` per access (score and ML-When's score as float64, the prefetch range
as two int64: 3.2 GB at 100 M accesses), and a job holds up to `HELD_SCORES` of them at once
(the main loop's, two loops side by side with their previous iterations', CacheLib-ML's)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from flashml.jobs.run import RunDir
from flashml.settings import BaleenSettings

#: Bytes per access of one learned policy's scores (`model.score_all`'s arrays).
SCORE_BYTES_PER_ACCESS = 32
#: Scored policies a job may hold at once.
HELD_SCORES = 6
#: The share of the budget the held scores may take (the rest: the frame's and the features'
#: pages, an episode build, a training, the simulator).
SCORES_SHARE = 0.5


def budget_bytes(run: RunDir, s: BaleenSettings) -> int:
    """The job's memory budget in bytes: `s.memory_gib`, else the memory available the first
    time the job asks (then fixed for the run, as the job's own use grows)."""
    if s.memory_gib > 0:
        return int(s.memory_gib * 2**30)
    if "memory_budget" not in run.cache:
        from flashml.systems.baleen.episodes.core import available_memory_bytes

        run.cache["memory_budget"] = available_memory_bytes()
    return int(run.cache["memory_budget"])


def scores_fit(run: RunDir, s: BaleenSettings, rows: int) -> bool:
    """Whether `HELD_SCORES` policies' scores of `rows` accesses fit in `SCORES_SHARE` of the
    budget (else finished loops' scores go to files and sweep loops run one at a time)."""
    return scores_fit_in(rows, budget_bytes(run, s))


def scores_fit_in(rows: int, budget: int) -> bool:
    """`scores_fit` for a budget of `budget` bytes."""
    return rows * SCORE_BYTES_PER_ACCESS * HELD_SCORES <= SCORES_SHARE * budget


def spilled(arrays: dict[str, np.ndarray], folder: Path) -> dict[str, np.ndarray]:
    """`arrays` each written to `folder/<name>.npy` and mapped read-only (the same values:
    the simulator reads them as it read the arrays); arrays already mapped are kept."""
    from flashml.files import atomic_path

    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, a in arrays.items():
        if isinstance(a, np.memmap):
            out[name] = a
            continue
        path = folder / f"{name}.npy"
        with atomic_path(path) as tmp, open(tmp, "wb") as f:
            np.save(f, np.ascontiguousarray(a))
        out[name] = np.load(path, mmap_mode="r")
    return out
