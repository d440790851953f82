"""The job's memory budget (`--memory`, GiB; 0: the memory available when the job first asks)
and what it decides: whether the learned policies' per-access scores are held in memory or,
once a loop has finished, kept in files and mapped (their pages the kernel's to take back),
and whether the sweep runs two trials' loops side by side. One learned policy's scores are
`SCORE_BYTES_PER_ACCESS` per access (score and ML-When's score as float64, the prefetch range
as two int16: 2 GB at 100 M accesses), and a job holds up to `HELD_SCORES` of them at once
(the main loop's, two loops side by side with their previous iterations', CacheLib-ML's)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from flashml.errors import UserError
from flashml.jobs.run import RunDir
from flashml.settings import BaleenSettings

#: Bytes per access of one learned policy's scores (`model.score_all`'s arrays).
SCORE_BYTES_PER_ACCESS = 20
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
    budget beyond the job's fixed part (else finished loops' scores go to files and sweep
    loops run one at a time)."""
    return scores_fit_in(rows, budget_bytes(run, s))


def scores_fit_in(rows: int, budget: int) -> bool:
    """`scores_fit` for a budget of `budget` bytes (what it leaves beyond the job's fixed
    part, `JOB_BASE_BYTES`)."""
    return rows * SCORE_BYTES_PER_ACCESS * HELD_SCORES <= SCORES_SHARE * (budget - JOB_BASE_BYTES)


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


#: The main job's peak memory: a fixed part and a part per access (bench_pipeline.py, the
#: job's processes together: 1,022 MiB at 1 M region1-like accesses, 3,898 MiB at 10 M, so
#: about 335 B per access above 700 MiB; the features alone are 48 B per access,
#: flashml/features/matrix.py), rounded up.
JOB_BASE_BYTES = 800 * 2**20

JOB_BYTES_PER_ACCESS = 350
#: The same with the learned scores kept on disk and the sweep's loops one at a time
#: (a trace whose scores would not fit in the budget, `scores_fit_in`): the process's own memory,
#: the mapped files' pages being the kernel's to take back (bench_pipeline.py --memory-limit
#: 12: a 100 M-access week's anonymous memory peaked at 9,885 MiB, 95 B per access above the
#: fixed part).
JOB_BYTES_PER_ACCESS_MAPPED = 100


def job_bytes_per_access(rows: int, available: int) -> int:
    """The main job's estimated bytes per access of a trace of `rows` accesses in a budget of
    `available` bytes (its scores held, or kept on disk when they would not fit)."""
    return JOB_BYTES_PER_ACCESS if scores_fit_in(rows, available) else \
        JOB_BYTES_PER_ACCESS_MAPPED


def check_memory(run: RunDir, available: int | None = None) -> None:
    """UserError, before the first model is trained, when the trace's accesses would not fit
    in the available memory (`available`: the job's budget, default MemAvailable): the job
    keeps every access's features, scores and the simulator's columns in memory or mapped
    (`job_bytes_per_access`), so a trace too large would be killed half-way instead."""
    import pyarrow.parquet as pq

    from flashml.systems.baleen.episodes.core import available_memory_bytes

    rows = pq.ParquetFile(run.table).metadata.num_rows
    avail = available_memory_bytes() if available is None else available
    per = job_bytes_per_access(rows, avail)
    need = JOB_BASE_BYTES + rows * per
    if need <= avail:
        return
    fit = max(0, (avail - JOB_BASE_BYTES) // JOB_BYTES_PER_ACCESS_MAPPED)
    share = 100.0 * fit / rows
    raise UserError(
        f"{run.table}: the main job on {rows:,} accesses needs about {need / 2**30:.1f} GiB "
        f"(the features, scores and simulator columns of every access: ~"
        f"{per} B each, plus {JOB_BASE_BYTES / 2**30:.1f} GiB), and "
        f"{avail / 2**30:.1f} GiB are available (--memory). Sample the trace by key to about "
        f"{fit:,} "
        f"accesses (`flashml trace sample TRACE --size {max(share, 0.01):.2g} -o "
        f"sample.parquet`: the sample keeps whole blocks, as the artifact's traces do), or "
        f"build the episodes alone, which scale out on Spark (`flashml episodes build "
        f"--engine spark`)")
