"""Partitioned caching across streams (MLCache): the Python side of
`sim/src/mlcache/reuse.rs`, `optimal.rs` and `partition.rs` (layer 4, beside flashml.simulation).

    from flashml.systems.mlcache.partitioning import page_requests, compare
    trace = page_requests(df, "namespace")          # canonical table -> one page per request
    compare(trace, capacity=260, interval=2000)     # {policy: {hit_ratio, write_hit_ratio, ...}}

A cache of `capacity` pages is shared by the streams (the values of one column of the
canonical table: namespace, user, src_hostname, ...). Policies: `shared` (one LRU), `even`,
`static_optimal` (the best fixed split for the whole trace), `discrete_optimal` (the best
split of each interval, in hindsight) and `mlcache` (shares supplied per interval; the model
comes later). Every interval of `interval` requests the quotas are reset; a partition that
shrinks evicts its LRU pages. The optima maximise hits on the grid of `steps` equal steps of
the capacity (the paper's t = 10), using each stream's exact LRU stack distances (a request
hits a partition of c pages iff its per-stream distance is <= c).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from flashml.config import PUT_OPS
from flashml.features.partition import contract
from flashml.simulation import _as_array, _core

#: The paper's t, equal steps of the capacity for the search and the monitor's histograms:
#: the partition contract's (features/partition.toml).
DEFAULT_STEPS: int = contract().steps

POLICIES = ("shared", "even", "static_optimal", "discrete_optimal", "mlcache")
#: The policies that need nothing but the trace (mlcache needs shares).
TRACE_POLICIES = POLICIES[:4]
#: A key's first request: its distance is infinite (2^64 - 1 here).
COLD = np.uint64(2**64 - 1)


def stack_distances(keys: Any, streams: Any = None, n_streams: int | None = None) -> np.ndarray:
    """Exact LRU stack distances (1-based, `COLD` for first requests), over the whole
    sequence or per stream (each request's distance within its own stream)."""
    k = _as_array(keys, np.uint64, "keys")
    if streams is None:
        return _core().stack_distances(k)
    s = _as_array(streams, np.uint32, "streams")
    return _core().stack_distances(k, s, n_streams)


def hit_curve(distances: Any, capacities: Any) -> np.ndarray:
    """Hits of an LRU cache at each capacity (items): #{requests with distance <= c}."""
    d = np.sort(np.asarray(distances, dtype=np.uint64))
    caps = np.asarray(capacities, dtype=np.uint64)
    return np.searchsorted(d, caps, side="right").astype(np.int64)


def miss_ratio_curve(distances: Any, capacities: Any) -> np.ndarray:
    """Miss ratio of an LRU cache at each capacity: 1 - hits / requests."""
    n = len(distances)
    if n == 0:
        return np.full(len(np.atleast_1d(capacities)), np.nan)
    return 1.0 - hit_curve(distances, capacities) / n


def best_split(curves: Any) -> tuple[list[int], int]:
    """The split of `steps` steps (curves: (streams, steps + 1), hits of stream i with s
    steps) that maximises the total; dynamic programming. (steps per stream, hits)."""
    c = np.ascontiguousarray(np.asarray(curves, dtype=np.uint64))
    if c.ndim != 2:
        raise ValueError(f"curves must be 2-D (streams, steps + 1), got shape {c.shape}")
    split, hits = _core().best_split(c)
    return list(split), int(hits)


@dataclass(frozen=True)
class StreamTrace:
    """A multi-stream page trace: request i is page keys[i] of stream streams[i] (dense ids
    0..len(names)-1), a write iff writes[i]."""

    keys: np.ndarray
    streams: np.ndarray
    writes: np.ndarray
    names: tuple[str, ...]

    @property
    def n_streams(self) -> int:
        return len(self.names)

    def __len__(self) -> int:
        return len(self.keys)


def stream_trace(keys: Any, streams: Any, writes: Any,
                 names: tuple[str, ...] | None = None) -> StreamTrace:
    """A StreamTrace from arrays; stream values become dense ids (in sorted order)."""
    k = _as_array(keys, np.uint64, "keys")
    values, dense = np.unique(np.asarray(streams), return_inverse=True)
    w = np.asarray(writes, dtype=bool)
    if not (len(k) == len(dense) == len(w)):
        raise ValueError(f"keys, streams and writes differ in length: {len(k)}, {len(dense)}, "
                         f"{len(w)}")
    if names is None:
        names = tuple(str(v) for v in values)
    return StreamTrace(k, dense.astype(np.uint32), np.ascontiguousarray(w), tuple(names))


def page_requests(table: Any, stream_column: str = "namespace",
                  page_bytes: int | None = None, block_bytes: int | None = None) -> StreamTrace:
    """One request per page of every access of a canonical table: the pages
    `offset // page_bytes .. (offset + size - 1) // page_bytes` of its block, a write iff
    its op is a PUT. `page_bytes` None: one page per access (the block is the page). The
    stream of a request is the value of `stream_column`. ValueError naming the field for a
    column that does not exist or has a single value."""
    import polars as pl

    df = table if isinstance(table, pl.DataFrame) else pl.DataFrame(table)
    if stream_column not in df.columns:
        raise ValueError(f"field '{stream_column}': no such column; columns: "
                         f"{', '.join(df.columns)}")
    if df.height == 0:
        raise ValueError("no requests")
    n_values = df[stream_column].n_unique()
    if n_values < 2:
        raise ValueError(f"field '{stream_column}': one value ({df[stream_column][0]!r}) in "
                         f"all {df.height} requests; partitioning needs >= 2 streams")
    key_ids = df["key"].rank("dense").cast(pl.UInt64).to_numpy() - np.uint64(1)
    writes = df["op"].is_in(list(PUT_OPS)).to_numpy()
    streams = df[stream_column].to_numpy()
    if page_bytes is None:
        keys = key_ids
    else:
        if page_bytes <= 0:
            raise ValueError(f"page_bytes must be > 0, got {page_bytes}")
        first, last = _page_span(df, page_bytes)
        per_block = int(last.max()) + 1
        if block_bytes is not None:
            per_block = max(per_block, -(-block_bytes // page_bytes))
        if int(key_ids.max()) * per_block >= 2**63:
            raise ValueError("too many pages to number in 64 bits; use larger pages")
        count = (last - first + np.uint64(1)).astype(np.int64)
        row = np.repeat(np.arange(df.height), count)
        start = np.repeat(np.cumsum(count) - count, count)
        page = first[row] + (np.arange(len(row)) - start).astype(np.uint64)
        keys = key_ids[row] * np.uint64(per_block) + page
        writes, streams = writes[row], streams[row]
    values, dense = np.unique(streams, return_inverse=True)
    return StreamTrace(np.ascontiguousarray(keys, dtype=np.uint64), dense.astype(np.uint32),
                       np.ascontiguousarray(writes, dtype=bool),
                       tuple(str(v) for v in values))


def _page_span(df: Any, page_bytes: int) -> tuple[np.ndarray, np.ndarray]:
    """The first and last page of every access (offset, size; a size of 0 is one byte)."""
    off = df["offset"].to_numpy().astype(np.uint64)
    size = np.maximum(df["size"].to_numpy().astype(np.uint64), np.uint64(1))
    return off // np.uint64(page_bytes), (off + size - np.uint64(1)) // np.uint64(page_bytes)


def page_rows(table: Any, page_bytes: int) -> np.ndarray:
    """The row of `table` each of `page_requests(table, ..., page_bytes)`'s requests comes
    from (int64, non-decreasing): one definition of how an access becomes pages."""
    import polars as pl

    df = table if isinstance(table, pl.DataFrame) else pl.DataFrame(table)
    first, last = _page_span(df, page_bytes)
    return np.repeat(np.arange(df.height, dtype=np.int64),
                     (last - first + np.uint64(1)).astype(np.int64))


def write_page_csv(trace: StreamTrace, path: Any) -> Any:
    """The trace as the C runtime's page CSV (`flashrt partition-replay --trace`): the header
    stream,page,write, one request per line (stream ids from 0, write 0/1). Written under a
    temporary name, then renamed."""
    import polars as pl

    from flashml.files import atomic_path

    with atomic_path(path) as tmp:
        pl.DataFrame({"stream": trace.streams, "page": trace.keys,
                      "write": trace.writes.astype(np.uint8)}).write_csv(tmp)
    return path


def partition_curves(trace: StreamTrace, capacity: int, interval: int,
                     steps: int = DEFAULT_STEPS, *, writes_only: bool = False,
                     objective: str = "hits") -> dict[str, np.ndarray]:
    """Per-interval, per-stream hit curves on the grid floor(j * capacity / steps) and the
    monitor's histograms (the paper's A_i, the network's input): {"curves": (intervals,
    streams, steps + 1), "histograms": (intervals, streams, steps), "grid": (steps + 1,)}."""
    return dict(_core().partition_curves(
        trace.keys, trace.streams, trace.writes, trace.n_streams, int(capacity), int(interval),
        int(steps), writes_only, objective))


def simulate_partitioned(trace: StreamTrace, capacity: int, interval: int, policy: str, *,
                         steps: int = DEFAULT_STEPS, writes_only: bool = False,
                         objective: str = "hits", shares: Any = None) -> dict[str, Any]:
    """One policy over the trace (module doc). `shares`: (intervals, streams) fractions of the
    capacity for `mlcache` (a row that is not finite and >= 0 with a positive sum falls back
    to an even split, counted in "fallbacks"; rows are normalised to sum 1). Returns requests,
    hits, reads, read_hits, writes, write_hits, hit_ratio, read_hit_ratio, write_hit_ratio,
    cached_requests, intervals, evictions, resize_evictions, fallbacks, wall_s,
    stream_requests, stream_hits, interval_hits and allocations ((intervals, streams) pages;
    (0, streams) for shared)."""
    sh = None
    if shares is not None:
        sh = np.ascontiguousarray(np.asarray(shares, dtype=np.float64))
        if sh.ndim != 2:
            raise ValueError(f"shares must be 2-D (intervals, streams), got shape {sh.shape}")
    return dict(_core().simulate_partitioned(
        trace.keys, trace.streams, trace.writes, trace.n_streams, int(capacity), int(interval),
        policy, steps=int(steps), writes_only=writes_only, objective=objective, shares=sh))


def compare(trace: StreamTrace, capacity: int, interval: int,
            policies: tuple[str, ...] = TRACE_POLICIES, *, steps: int = DEFAULT_STEPS,
            writes_only: bool = False, objective: str = "hits",
            shares: Any = None) -> dict[str, dict[str, Any]]:
    """Every policy of `policies` on the same trace: name -> hit_ratio, write_hit_ratio,
    read_hit_ratio, hits, write_hits, requests, writes, intervals, resize_evictions,
    mean_shares (the mean quota of each stream as a fraction of the capacity; None for
    shared), wall_s."""
    out = {}
    for p in policies:
        r = simulate_partitioned(trace, capacity, interval, p, steps=steps,
                                 writes_only=writes_only, objective=objective,
                                 shares=shares if p == "mlcache" else None)
        alloc = r["allocations"]
        out[p] = {k: r[k] for k in ("hit_ratio", "write_hit_ratio", "read_hit_ratio", "hits",
                                    "write_hits", "requests", "writes", "intervals",
                                    "resize_evictions", "fallbacks", "wall_s")}
        out[p]["mean_shares"] = (None if len(alloc) == 0 else
                                 (alloc.mean(axis=0) / capacity).round(6).tolist())
    return out
