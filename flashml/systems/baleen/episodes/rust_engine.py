"""Episodes and OPT, in-memory engine (the semantics: `flashml.systems.baleen.episodes.core`).

The per-GET work (the sort by key and time, the episode splits, the per-segment replay) is
one sort and one pass in the simulator crate (`flashml_sim.episode_split`,
sim/src/flash/episodes.rs); the OPT ranking and the derived columns are the shared Polars
stages (`polars_engine.rank_episodes`), so every float is the other engines'; labels and the
simulator arrays are gathers by episode id. The table's GETs and their outputs are held in
memory (`BYTES_PER_ACCESS`); the Polars engine, chunked by key, is the one for tables that
do not fit (`core.choose_engine`). At 10 M region1-like accesses a build takes 4.1 s here
and 7.6 s on Polars (three key buckets, each a scan of the table, Parquet parts written and
merged).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from flashml.systems.baleen.episodes.core import SCHEMAS, Job, conform, prepared
from flashml.systems.baleen.episodes.polars_engine import COMPRESSION, rank_episodes

#: Peak memory per access of the table, rounded up: 10 M region1-like accesses built in
#: 1.48 GB peak RSS, the interpreter and libraries included (1 M in 0.37 GB; `/usr/bin/time
#: -v flashml episodes build --engine rust`; Polars' chunked engine: 1.25 GB at 10 M).
BYTES_PER_ACCESS = 200

#: Per-episode integer columns `episode_split` returns, as `polars_engine.episode_gets`
#: aggregates them.
_EPISODE_COLUMNS = ("first_row", "first_time", "last_time", "gets", "range_start",
                    "range_end", "get_segments", "replay_ios", "replay_segments",
                    "accessed_segments")


def run_rust(src: Path, outdir: Path, job: Job) -> None:
    """Write episodes.parquet, labels.parquet, arrays.parquet into `outdir`."""
    from flashml_sim import episode_split

    logical = job.params.time_mode == "logical"
    # (segments as bytes: trace_info checked that a block has at most 64)
    gets = (prepared(src, job.info.segment_bytes, with_gidx=logical)
            .filter("is_get").drop("is_get")
            .with_columns(pl.col("s0").cast(pl.UInt8), pl.col("s1").cast(pl.UInt8))
            .collect())
    row = gets["row"].to_numpy()
    key = gets["key"].to_numpy().view(np.uint64)
    time = gets["time"].to_numpy()
    gap = gets["gidx"].to_numpy().astype(np.float64) if logical else time
    split = episode_split(row, key, time, gap, gets["s0"].to_numpy(), gets["s1"].to_numpy(),
                          float(job.split_threshold))
    del gets, gap
    eps = pl.DataFrame({"key": split["key"].view(np.int64),
                        **{c: split[c] for c in _EPISODE_COLUMNS}})
    eps = rank_episodes(eps, job)  # episode ids in order of first row: split's order
    conform(eps.lazy(), "episodes").sink_parquet(outdir / "episodes.parquet",
                                                 compression=COMPRESSION)
    episode = split["episode"]
    position = split["position"]
    del split
    admitted_of = eps["admitted"].to_numpy()
    start_of = eps["range_start"].to_numpy()
    end_of = eps["range_end"].to_numpy()
    when_of = eps["when_label"].to_numpy()
    del eps
    k = job.params.accesses_per_episode
    admitted = admitted_of[episode]
    # built in the published schemas (no conform copy: the labels of 10 M accesses are 0.5 GB)
    _write(pl.DataFrame({
        "row": row.view(np.uint64), "key": key, "time": time,
        "episode_id": episode.astype(np.uint64), "position": position,
        "opt_label": np.where(position < k, admitted.astype(np.int8), np.int8(-1)),
        "admitted": admitted, "range_start": start_of[episode], "range_end": end_of[episode],
        "when_label": when_of[episode]}), "labels", outdir)
    del position
    n = job.info.rows
    adm = np.zeros(n, bool)
    adm[row] = admitted
    at = np.zeros(n, np.int64)  # each GET's episode (read only where admitted)
    at[row] = episode
    del episode, admitted
    _write(pl.DataFrame({
        "row": np.arange(n, dtype=np.uint64), "admit": adm.astype(np.uint8),
        "prefetch_start": np.where(adm, start_of[at], -1),
        "prefetch_end": np.where(adm, end_of[at], -1)}), "arrays", outdir)


def _write(frame: pl.DataFrame, name: str, outdir: Path) -> None:
    if frame.schema != pl.Schema(SCHEMAS[name]):
        raise AssertionError(f"{name}: {frame.schema} is not the published schema")
    frame.write_parquet(outdir / f"{name}.parquet", compression=COMPRESSION)
