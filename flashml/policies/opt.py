"""OPT as a simulated policy: the episode job's admit flags and OPT-Range at an eviction age,
with the episode job's target adjusted until the simulated write rate meets the real target
(episodes assume an eviction age; the simulated cache decides the real one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from flashml.policies.tuning import Tuned, tune_to_write_rate
from flashml.simulation import SimConfig, SimResult, simulate


def opt_arrays(table: Path, out: Path, eviction_age_s: float, target_mbps: float,
               spark: Any = None, engine: str = "polars") -> dict[str, np.ndarray]:
    from flashml.episodes.core import EpisodeParams, build

    build(table, out, EpisodeParams(eviction_age_s=eviction_age_s,
                                    target_write_rate_mbps=target_mbps),
          engine=engine, spark=spark, plot=False)
    arr = pl.read_parquet(out / "arrays.parquet").sort("row")
    return {"admit": arr["admit"].to_numpy(), "prefetch_start": arr["prefetch_start"].to_numpy(),
            "prefetch_end": arr["prefetch_end"].to_numpy()}


def tune_opt(df: pl.DataFrame, table: Path, base: SimConfig, target_mbps: float,
             eviction_age_s: float, workdir: Path, *, prefetch: bool = True,
             engine: str = "polars", spark: Any = None) -> Tuned:
    """OPT (with OPT-Range prefetch by default) at the target write rate in simulation."""
    cfg = base.replace(admission="opt", prefetch="range" if prefetch else "none")
    calls = 0

    def run(episode_target: float) -> SimResult:
        nonlocal calls
        calls += 1
        arrays = opt_arrays(table, workdir / f"opt-{calls:02d}", eviction_age_s, episode_target,
                            spark=spark, engine=engine)
        if not prefetch:
            arrays = {"admit": arrays["admit"]}
        return simulate(df, cfg, **arrays)

    return tune_to_write_rate(run, target_mbps, target_mbps / 20, target_mbps * 4,
                              increasing=True, log_scale=True, max_iter=12, rel_tol=0.02)
