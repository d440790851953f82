"""Synthetic multi-stream page traces for MLCache: several streams with distinct
reuse profiles and shifting intensities, interleaved by time, as a canonical access table.

The paper combines MSR Cambridge traces into 2, 4 and 8 streams; with no multi-stream trace
at hand, `generate_mix` makes one the same way: each stream is its own page trace, its request
rate changes from phase to phase, and the streams are merged in time order. Stream kinds
(the reuse profiles of other-seeds-notes §2.5):

- `loop`: cycles over a working set of W pages, W drawn anew every phase (an LRU partition
  below W gets nothing, at W everything);
- `zipf`: Zipf(alpha) popularity over M pages (a concave hit curve);
- `scan`: new pages only (no reuse: a partition is wasted on it);
- `shift`: Zipf over a working set that moves to new pages every phase;
- `hotset`: 90% of requests to a small hot set (its size drawn anew every phase), the rest to
  a large cold one.

The table: `time` (seconds), `key` (the page: stream << 40 | page), `offset` 0, `size` =
`page_bytes`, `op` PUT_PERM for writes and GET_PERM for reads, `namespace` = the stream,
`user` 0, `src_line`; the metadata's block size is the page, so each row is one page.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from flashml.config import OP_CODES
from flashml.errors import UserError
from flashml.systems.mlcache.settings import PAGE_BYTES
from flashml.trace.canonical import TraceMeta, write_table
from flashml.trace.limits import MAX_PHASES, MAX_SCALE, MAX_STREAMS, PHASES, SCALE

STREAM_KINDS = ("loop", "zipf", "scan", "shift", "hotset")



def _pages(kind: str, n: int, phase: np.ndarray, rng: np.random.Generator,
           scale: int) -> np.ndarray:
    """`n` page numbers of one stream of `kind` (phase[i]: the phase of request i)."""
    n_phases = int(phase.max()) + 1
    if kind == "loop":
        # the loop's length changes from phase to phase: the best split moves with it
        w = rng.integers(max(scale // 4, 1), scale * 2, n_phases)[phase]
        start = np.searchsorted(phase, phase)  # first request of each request's phase
        return ((np.arange(n) - start) % w).astype(np.uint64)
    if kind == "scan":
        return np.arange(n, dtype=np.uint64)
    if kind in ("zipf", "shift"):
        m = int(rng.integers(scale * 2, scale * 20))
        alpha = float(rng.uniform(0.7, 1.1))
        p = 1.0 / np.arange(1, m + 1) ** alpha
        ranks = rng.choice(m, size=n, p=p / p.sum())
        perm = rng.permutation(m).astype(np.uint64)
        pages = perm[ranks]
        if kind == "shift":
            pages = pages + phase.astype(np.uint64) * np.uint64(m)
        return pages
    if kind == "hotset":
        hot = rng.integers(max(scale // 5, 1), scale, n_phases)[phase]
        cold = scale * 50
        is_hot = rng.random(n) < 0.9
        return np.where(is_hot, rng.integers(0, hot, n),
                        hot + rng.integers(0, cold, n)).astype(np.uint64)
    raise ValueError(f"unknown stream kind {kind!r}; expected one of {STREAM_KINDS}")


def generate_mix(n_streams: int, requests: int, seed: int = 0, *,
                 kinds: tuple[str, ...] | None = None, phases: int = PHASES,
                 scale: int = SCALE, duration_s: float = 3600.0,
                 page_bytes: int = PAGE_BYTES) -> tuple[pl.DataFrame, tuple[str, ...]]:
    """A canonical table of `requests` page requests from `n_streams` streams (module doc),
    and the kind of each stream.

    kinds: one per stream (default: drawn at random from STREAM_KINDS, every kind once before
    any repeats); phases: how often the streams' intensities change (each stream's rate in a
    phase is its base rate times a factor drawn from [0.2, 3]); scale: the typical working
    set in pages (loops of scale/4 .. 2*scale pages, Zipf catalogues of 2 .. 20 x scale);
    each stream writes a fraction of its requests drawn from [0.5, 0.95].
    """
    from flashml.trace.limits import check_accesses, check_seed

    check_seed(seed)
    check_accesses(requests, "--requests")
    if not (1 <= n_streams <= MAX_STREAMS and 1 <= phases <= MAX_PHASES
            and 5 <= scale <= MAX_SCALE):
        raise UserError(f"--streams must be in 1..{MAX_STREAMS}, --phases in 1..{MAX_PHASES}, "
                        f"--scale in 5..{MAX_SCALE} pages; got {n_streams}, {phases}, {scale}")
    rng = np.random.default_rng(seed)
    if kinds is None:
        pool = list(rng.permutation(STREAM_KINDS))
        while len(pool) < n_streams:
            pool += list(rng.permutation(STREAM_KINDS))
        kinds = tuple(str(k) for k in pool[:n_streams])
    if len(kinds) != n_streams:
        raise ValueError(f"{len(kinds)} kinds for {n_streams} streams")
    base = rng.uniform(0.5, 2.0, n_streams)
    intensity = base[:, None] * rng.uniform(0.2, 3.0, (n_streams, phases))
    counts = rng.multinomial(requests, (intensity / intensity.sum()).ravel())
    counts = counts.reshape(n_streams, phases)
    phase_len = duration_s / phases
    parts = []
    for s, kind in enumerate(kinds):
        n = int(counts[s].sum())
        if n == 0:
            continue
        phase = np.repeat(np.arange(phases), counts[s])
        # uniform times within each phase, sorted: the stream keeps its own page order
        t = np.sort(rng.uniform(0, phase_len, n) + phase * phase_len)
        pages = _pages(kind, n, phase, rng, scale)
        writes = rng.random(n) < rng.uniform(0.5, 0.95)
        parts.append(pl.DataFrame({
            "time": t, "key": (np.uint64(s) << np.uint64(40)) | pages,
            "op": np.where(writes, OP_CODES["PUT_PERM"], OP_CODES["GET_PERM"]).astype(np.uint8),
            "namespace": np.full(n, s, np.uint32)}))
    df = pl.concat(parts).sort("time", maintain_order=True)
    return df.select(
        pl.col("time").cast(pl.Float64), pl.col("key").cast(pl.UInt64),
        pl.lit(0, pl.UInt64).alias("offset"), pl.lit(page_bytes, pl.UInt64).alias("size"),
        pl.col("op").cast(pl.UInt8), pl.col("namespace").cast(pl.UInt32),
        pl.lit(0, pl.UInt32).alias("user"),
        pl.int_range(1, pl.len() + 1, dtype=pl.UInt64).alias("src_line"),
    ), kinds


def write_mix(df: pl.DataFrame, path: str | Path, page_bytes: int = PAGE_BYTES) -> Path:
    """Write a `generate_mix` table as canonical Parquet (atomically), block size = page."""
    path = Path(path)
    write_table(df, path, TraceMeta(sample_ratio=100.0, source_format="multistream",
                                    block_bytes=page_bytes, source_file=""))
    return path
