"""Block requests: a canonical access table -> the requests a block cache sees (the
simulator's block mode, sim/src/pannier/blocks.rs; Pannier's job and KML's twin read them).

A request of the canonical table (one row: `offset`, `size` inside block `key`) covers the
`page_bytes` blocks from `offset // page_bytes` to `(offset + size - 1) // page_bytes`; blocks
of different keys never collide (each key gets its own range). An IO that the reader split at
a canonical block boundary (8 MiB by default) stays two requests: for 4-50 KiB IOs that is
about 0.5% of them. Writes are the rows whose op is a PUT.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from flashml.config import PUT_OPS

#: The simulator's default block (page) size (sim/src/pannier/blocks.rs BlockConfig).
PAGE_BYTES = 4096


@dataclass(frozen=True)
class BlockRequests:
    """Request i at `times[i]` covers blocks `pages[i] .. pages[i] + lens[i]`."""

    times: np.ndarray
    pages: np.ndarray
    lens: np.ndarray
    writes: np.ndarray
    page_bytes: int
    #: The last RAM-cache pass computed for these requests: {(cache_bytes, ram_pct): (mask,
    #: seconds)} (one entry: runs come grouped by size). See `simulate`.
    _ram: dict[tuple[int, float], tuple[np.ndarray, float]] = field(
        default_factory=dict, compare=False, repr=False)

    def __len__(self) -> int:
        return len(self.pages)

    @property
    def blocks(self) -> int:
        return int(self.lens.sum())

    def subset(self, sel: Any) -> BlockRequests:
        """The requests `sel` selects (a slice or a boolean mask), in order."""
        return from_arrays(self.times[sel], self.pages[sel], self.lens[sel], self.writes[sel],
                           self.page_bytes)

    def block_keys(self) -> np.ndarray:
        """Every block access in trace order (request i's blocks pages[i] .. + lens[i])."""
        n = self.lens.astype(np.int64)
        first = np.repeat(self.pages, n)
        step = np.arange(int(n.sum()), dtype=np.int64) - np.repeat(np.cumsum(n) - n, n)
        return first + step.astype(np.uint64)

    def working_set_bytes(self) -> int:
        """Bytes of the distinct blocks the trace touches."""
        return int(len(np.unique(self.block_keys()))) * self.page_bytes


def block_requests(table: Any, block_bytes: int, page_bytes: int = PAGE_BYTES) -> BlockRequests:
    """The block requests of a canonical table (module doc). ValueError naming the field for
    an empty table or an access that does not fit its block."""
    import polars as pl

    df = table if isinstance(table, pl.DataFrame) else pl.DataFrame(table)
    if df.height == 0:
        raise ValueError("no requests")
    if page_bytes <= 0:
        raise ValueError(f"page_bytes must be > 0, got {page_bytes}")
    off = df["offset"].to_numpy().astype(np.uint64)
    size = np.maximum(df["size"].to_numpy().astype(np.uint64), np.uint64(1))
    end = off + size
    if int(end.max()) > block_bytes:
        i = int(np.argmax(end > block_bytes))
        raise ValueError(f"row {i + 1}: field 'offset'+'size' = {int(end[i])} is past the block "
                         f"size {block_bytes}")
    first = off // np.uint64(page_bytes)
    last = (end - np.uint64(1)) // np.uint64(page_bytes)
    per_key = -(-block_bytes // page_bytes)
    key_ids = df["key"].rank("dense").cast(pl.UInt64).to_numpy() - np.uint64(1)
    if int(key_ids.max()) * per_key >= 2**62:
        raise ValueError("too many blocks to number in 64 bits; use larger pages")
    pages = key_ids * np.uint64(per_key) + first
    return BlockRequests(
        times=np.ascontiguousarray(df["time"].to_numpy(), dtype=np.float64),
        pages=np.ascontiguousarray(pages, dtype=np.uint64),
        lens=np.ascontiguousarray(last - first + np.uint64(1), dtype=np.uint32),
        writes=np.ascontiguousarray(df["op"].is_in(list(PUT_OPS)).to_numpy(), dtype=bool),
        page_bytes=page_bytes)


def from_arrays(times: Any, pages: Any, lens: Any, writes: Any,
                page_bytes: int = PAGE_BYTES) -> BlockRequests:
    return BlockRequests(np.ascontiguousarray(times, dtype=np.float64),
                         np.ascontiguousarray(pages, dtype=np.uint64),
                         np.ascontiguousarray(lens, dtype=np.uint32),
                         np.ascontiguousarray(writes, dtype=bool), page_bytes)
