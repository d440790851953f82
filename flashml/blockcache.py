"""Block mode from Python: a canonical access table -> block requests -> the simulator's
per-block and container caches (sim/src/blocks.rs, sim/src/pannier.rs; Pannier).

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

#: Per-block policies (over the FTL) and container policies, in the order tables show them.
PER_BLOCK = ("lru", "s2lru", "mq", "belady")
CONTAINER = ("lru_plus", "s2lru_plus", "ripq_plus", "pannier")
POLICIES = PER_BLOCK + CONTAINER
#: Defaults of the simulator's knobs (sim/src/blocks.rs BlockConfig), for help texts.
PAGE_BYTES = 4096
CONTAINER_BYTES = 2 * 1024 * 1024


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


def preset_requests(preset: Any, seed: int = 0, requests: int | None = None,
                    page_bytes: int = PAGE_BYTES) -> BlockRequests:
    """The requests of a block preset (`flashml.trace.blockgen.BlockPreset`)."""
    from flashml.trace.blockgen import generate_block_requests

    r = generate_block_requests(preset, seed, requests)
    return from_arrays(r["time"], r["block"], r["blocks"], r["write"], page_bytes)


def simulate(req: BlockRequests, policy: str, cache_bytes: int, **knobs: Any) -> dict[str, Any]:
    """One policy over the requests (`flashml_sim.simulate_blocks`; knobs: container_bytes,
    op, tire_epbpd, tire_slack, tire_steps, quantum_s, promotion_pct, sample_pct,
    lifetime_pct, ghost_factor, survival, aging, invalidation_aware, packing,
    fixed_lifetime, open_in_cache, ram_pct: the RAM cache in front, % of the flash cache, 0 if
    not given). ValueError with the simulator's message for bad input.

    The RAM cache's pass depends on the trace and sizes only: it is computed once for the
    policies run in turn on the same requests, cache size and ram_pct, and its time counts in
    each run's wall_s as if it had been computed there."""
    import flashml_sim

    ram_pct = float(knobs.get("ram_pct", 0.0))
    if ram_pct > 0 and "ram_served" not in knobs:
        key = (int(cache_bytes), ram_pct)
        if key not in req._ram:
            req._ram.clear()
            req._ram[key] = flashml_sim.block_ram_served(
                req.times, req.pages, req.lens, req.writes, int(cache_bytes),
                page_bytes=req.page_bytes, ram_pct=ram_pct)
        mask, secs = req._ram[key]
        knobs = {**knobs, "ram_served": mask, "ram_served_s": secs}
    return flashml_sim.simulate_blocks(req.times, req.pages, req.lens, req.writes, policy,
                                       int(cache_bytes), page_bytes=req.page_bytes, **knobs)


#: The figures a summary keeps per policy (the rest stay in the per-run records).
SUMMARY_FIELDS = ("read_hit_ratio", "write_hit_ratio", "ram_read_hits", "fue", "erasures",
                  "flash_write_bytes", "host_write_bytes", "internal_write_bytes",
                  "flash_read_bytes", "dwpd",
                  "epbpd", "write_amplification", "final_credit", "quota", "wall_s",
                  "blocks_per_s")


def fue_with_internal_reads(r: dict[str, Any]) -> float:
    """FUE counting the flash reads of internal writes too: every block copied forward (or
    moved by the FTL's GC) is read from flash before it is written again, so the reads are
    the client's flash hits plus the internal writes. The paper defines FUE as flash reads /
    flash writes "including client writes and internal copy-forward writes" and does not say
    whether copy-forward's reads count; its src11 figures (Pannier +70% FUE over LRU+ at a
    similar read-hit ratio and +8% EPBPD, Table 5) need them counted."""
    w = int(r["flash_write_bytes"])
    return (int(r["flash_read_bytes"]) + int(r["internal_write_bytes"])) / w if w else 0.0


def brief(r: dict[str, Any]) -> dict[str, Any]:
    """The summary figures of one run (numbers as plain Python), with
    `fue_with_internal_reads` (see there)."""
    out: dict[str, Any] = {k: (float(r[k]) if isinstance(r[k], float) else int(r[k]))
                           for k in SUMMARY_FIELDS}
    out["fue_with_internal_reads"] = fue_with_internal_reads(r)
    return out
