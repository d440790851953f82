"""OPT as a simulated policy: the episode job's admit flags and OPT-Range at an eviction age,
with the episode job's target adjusted until the simulated write rate meets the real target
(episodes assume an eviction age; the simulated cache decides the real one)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow.parquet as pq

from flashml.simulation import POLICY_ARRAYS, SimConfig, SimResult, simulate
from flashml.systems.baleen.tuning import Tuned, tune_to_write_rate


def opt_arrays(table: Path, out: Path, eviction_age_s: float, target_mbps: float,
               spark: Any = None, engine: str = "auto") -> dict[str, np.ndarray]:
    from flashml.systems.baleen.episodes.core import EpisodeParams, build

    build(table, out, EpisodeParams(eviction_age_s=eviction_age_s,
                                    target_write_rate_mbps=target_mbps),
          engine=engine, spark=spark, plot=False)
    arr = pl.read_parquet(out / "arrays.parquet").sort("row")
    return {"admit": arr["admit"].to_numpy(), "prefetch_start": arr["prefetch_start"].to_numpy(),
            "prefetch_end": arr["prefetch_end"].to_numpy()}


def opt_ranking(table: Path, out: Path, eviction_age_s: float, rows: int, spark: Any = None,
                engine: str = "auto", built: Path | None = None
                ) -> Callable[[float], dict[str, np.ndarray]]:
    """OPT's arrays at any episode target from one episode build: an episode is admitted
    when its score is positive and the write rate of the episodes ranked above it and itself
    (`cum_write_rate_mbps`, independent of the target) is within the target
    (episodes/core.py `ranked_stages`), so the ranking is built once and each target is a
    cut of it, equal to `opt_arrays` at that target (tests/baleen/test_opt.py). `built`: a folder
    of episodes already built from `table` at this eviction age (any target and K: the
    ranking depends on neither), used instead of building them again. The arrays are made
    per episode and gathered into the same three buffers at every cut (a simulation at a
    time reads them: copy them to keep a cut beside the next one)."""
    from flashml.systems.baleen.episodes.core import EpisodeParams, build, finished_build

    found = finished_build(built)
    if built is not None and found is not None and found[0].eviction_age_s == eviction_age_s:
        out = built
    else:
        build(table, out, EpisodeParams(eviction_age_s=eviction_age_s), engine=engine,
              spark=spark, plot=False)
    eps = pl.read_parquet(out / "episodes.parquet", columns=[
        "episode_id", "score", "cum_write_rate_mbps", "range_start", "range_end"])
    n_eps = eps.height
    ids = eps["episode_id"].to_numpy()
    # per episode (index n_eps: no episode, a PUT): where the cut admits it, and its range
    cut_of = np.full(n_eps + 1, np.inf)  # PUTs: never admitted
    cut_of[ids] = np.where(eps["score"].to_numpy() > 0, eps["cum_write_rate_mbps"].to_numpy(),
                           np.inf)
    # (segment indices in the simulator's type: POLICY_ARRAYS)
    start_of = np.full(n_eps + 1, -1, dtype=POLICY_ARRAYS["prefetch_start"])
    end_of = np.full(n_eps + 1, -1, dtype=POLICY_ARRAYS["prefetch_end"])
    start_of[ids] = eps["range_start"].to_numpy()
    end_of[ids] = eps["range_end"].to_numpy()
    del eps, ids
    # each access's episode, read a batch of labels at a time (at 100 M accesses the labels'
    # two columns, joined to the episodes', were 4 GB; this is 0.4 GB)
    episode = np.full(rows, n_eps, dtype=np.int32 if n_eps < 2**31 else np.int64)
    for batch in pq.ParquetFile(out / "labels.parquet").iter_batches(
            batch_size=1 << 20, columns=["row", "episode_id"]):
        episode[batch.column("row").to_numpy()] = batch.column("episode_id").to_numpy()
    admit = np.empty(rows, np.uint8)
    start = np.empty(rows, start_of.dtype)
    end = np.empty(rows, end_of.dtype)

    def arrays(target_mbps: float) -> dict[str, np.ndarray]:
        admitted = cut_of <= target_mbps
        np.take(admitted.view(np.uint8), episode, out=admit)
        np.take(np.where(admitted, start_of, start_of.dtype.type(-1)), episode, out=start)
        np.take(np.where(admitted, end_of, end_of.dtype.type(-1)), episode, out=end)
        return {"admit": admit, "prefetch_start": start, "prefetch_end": end}

    return arrays


def tune_opt(df: pl.DataFrame, table: Path, base: SimConfig, target_mbps: float,
             eviction_age_s: float, workdir: Path, *, prefetch: bool = True,
             engine: str = "auto", spark: Any = None, built: Path | None = None) -> Tuned:
    """OPT (with OPT-Range prefetch by default) at the target write rate in simulation: the
    episode target is tuned (the episodes' write rate assumes an eviction age; the simulated
    cache has its own), each one a cut of one ranking (`opt_ranking`)."""
    cfg = base.replace(admission="opt", prefetch="range" if prefetch else "none")
    ranking = opt_ranking(table, workdir / "opt-ranking", eviction_age_s, df.height,
                          spark=spark, engine=engine, built=built)

    def run(episode_target: float) -> SimResult:
        arrays = ranking(episode_target)
        if not prefetch:
            arrays = {"admit": arrays["admit"]}
        return simulate(df, cfg, **arrays)

    return tune_to_write_rate(run, target_mbps, target_mbps / 20, target_mbps * 4,
                              increasing=True, log_scale=True, max_iter=12, rel_tol=0.02)
