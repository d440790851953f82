"""Block mode from Python: block requests (flashml/trace/blocks.py) -> the simulator's
per-block and container caches (sim/src/pannier/blocks.rs, sim/src/pannier/mod.rs; Pannier)."""

from __future__ import annotations

from typing import Any

from flashml.systems.pannier.settings import KNOBS
from flashml.trace.blocks import PAGE_BYTES, BlockRequests, from_arrays

#: Per-block policies (over the FTL) and container policies, in the order tables show them.
PER_BLOCK = ("lru", "s2lru", "mq", "belady")
CONTAINER = ("lru_plus", "s2lru_plus", "ripq_plus", "pannier")
POLICIES = PER_BLOCK + CONTAINER
#: Defaults of the simulator's knobs (sim/src/pannier/blocks.rs BlockConfig), for help texts
#: (PAGE_BYTES: flashml/trace/blocks.py).
CONTAINER_BYTES = 2 * 1024 * 1024


def preset_requests(preset: Any, seed: int = 0, requests: int | None = None,
                    page_bytes: int = PAGE_BYTES) -> BlockRequests:
    """The requests of a block preset (`flashml.systems.pannier.blockgen.BlockPreset`)."""
    from flashml.systems.pannier.blockgen import generate_block_requests

    r = generate_block_requests(preset, seed, requests)
    return from_arrays(r["time"], r["block"], r["blocks"], r["write"], page_bytes)


def simulate(req: BlockRequests, policy: str, cache_bytes: int, **knobs: Any) -> dict[str, Any]:
    """One policy over the requests (`flashml_sim.simulate_blocks`; knobs: container_bytes,
    op, lifespan_epbpd, tire_slack, tire_steps, quantum_s, promotion_pct, sample_pct,
    lifetime_pct, ghost_factor, survival, aging, invalidation_aware, packing,
    fixed_lifetime, open_in_cache, ram_pct: the RAM cache in front, % of the flash cache;
    unset: settings.toml's default, the simulator's too). ValueError with the simulator's
    message for bad input.

    The RAM cache's pass depends on the trace and sizes only: it is computed once for the
    policies run in turn on the same requests, cache size and ram_pct, and its time counts in
    each run's wall_s as if it had been computed there."""
    import flashml_sim

    ram_pct = float(knobs.get("ram_pct", KNOBS["ram_pct"].default))
    knobs = {**knobs, "ram_pct": ram_pct}
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
