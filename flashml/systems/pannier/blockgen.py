"""Block-level trace presets for Pannier, written as MSR Cambridge CSV.

Pannier (Middleware '15) is judged on block traces with reads and overwrites: MSR Cambridge
prn0 (a print server: small IOs, small working set, more writes than reads), src11 (source
control: many overwrites of data that is also read), MS map (a large working set) and
ProWGen-style synthetic web traces (read-only objects, Zipf 0.5-1, median object 60 KB, with
overwrites injected). The real traces are not in the repository, so these presets are
modelled on what the paper's Table 2 says of them (read:write ratio, KB per IO, working set
relative to the cache), scaled to a working set a test can replay in seconds. They are models,
not the traces: compare shapes (orderings, ratios), not absolute numbers.

The model: a catalogue of extents (files, objects) laid out back to back in one disk's address
space, extent sizes log-normal; a read picks an extent by Zipf(`read_alpha`) rank and reads
`io_kib` (geometric mean) from a random aligned offset inside it (a web object is read whole);
a write either overwrites an extent picked by Zipf(`write_alpha`) rank over the same catalogue
(`overwrite_share`) or appends to a log region that is never read back (new data: spool
files, logs); the rank -> extent map is partly re-drawn every `shift_every_h` hours (a
popularity shift); times follow a diurnal rate over `hours`.

`flashml trace generate --preset prn0-like -o prn0.csv` writes one as MSR CSV (one host, disk
0); `flashml pannier run --trace prn0.csv --format msr` reads it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flashml.config import KiB
from flashml.errors import UserError

if TYPE_CHECKING:
    import numpy as np

# NumPy and the MSR reader are imported inside the functions: `flashml --help` builds its
# parser from BLOCK_PRESETS and must not load them (tests/kernel/test_sim_cli.py).

#: The block (page) size of the presets' address space and of Pannier's cache.
BLOCK_BYTES = 4 * KiB
#: Trace epoch: 2026-01-01 00:00 UTC (as the other presets).
EPOCH_S = 1_767_225_600.0
#: The largest Zipf exponent of a preset's popularity (`--zipf`, from 0: uniform).
MAX_ZIPF = 2.0
#: The most overwrites per read (`--overwrites`, from 0; the paper's Fig. 13b: 0-100%).
MAX_OVERWRITES = 1.0


@dataclass(frozen=True)
class BlockPreset:
    name: str
    description: str
    requests: int
    """Default number of requests."""
    hours: float
    extents: int
    """Catalogue size (extents)."""
    extent_kib_median: float
    extent_sigma: float
    read_share: float
    """Fraction of requests that are reads."""
    io_kib: float
    """Mean IO size (geometric in blocks); 0: a read covers its whole extent (web objects)."""
    read_alpha: float
    write_alpha: float
    overwrite_share: float
    """Fraction of writes that overwrite catalogue extents (the rest append to a log)."""
    shift_every_h: float = 4.0
    shift_fraction: float = 0.1
    diurnal_amplitude: float = 0.4
    max_extent_kib: float = 2048.0

    def working_set_hint(self) -> str:
        gib = self.extents * self.extent_kib_median * math.exp(self.extent_sigma ** 2 / 2)
        return f"~{gib / 2**20:.1f} GiB of catalogue"


BLOCK_PRESETS: dict[str, BlockPreset] = {p.name: p for p in (
    BlockPreset(
        name="prn0-like", description="print server (MSR prn0): small IOs (~24 KiB), a small "
        "working set, more writes than reads (R:W 1:1.2), most writes new spool data",
        requests=400_000, hours=24.0, extents=6_000, extent_kib_median=64, extent_sigma=1.0,
        read_share=0.45, io_kib=24, read_alpha=1.0, write_alpha=0.9, overwrite_share=0.3),
    BlockPreset(
        name="src11-like", description="source control (MSR src11): ~51 KiB IOs, R:W 3:1, "
        "many overwrites of data that is also read",
        requests=400_000, hours=24.0, extents=12_000, extent_kib_median=128, extent_sigma=1.0,
        read_share=0.75, io_kib=51, read_alpha=0.85, write_alpha=1.0, overwrite_share=0.85),
    BlockPreset(
        name="map-like", description="map imagery hosts (MS map): a large working set, "
        "~40 KiB IOs, R:W 3.2:1, flatter popularity",
        requests=400_000, hours=24.0, extents=40_000, extent_kib_median=96, extent_sigma=0.8,
        read_share=0.76, io_kib=40, read_alpha=0.7, write_alpha=0.8, overwrite_share=0.5),
    BlockPreset(
        name="web-like", description="ProWGen-style web objects: read whole, Zipf 0.8, "
        "median 60 KB (log-normal), no overwrites (set --zipf and --overwrites to vary)",
        requests=300_000, hours=24.0, extents=20_000, extent_kib_median=60, extent_sigma=1.2,
        read_share=1.0, io_kib=0, read_alpha=0.8, write_alpha=0.8, overwrite_share=1.0),
)}


def get_block_preset(name: str, *, zipf: float | None = None,
                     overwrites: float | None = None) -> BlockPreset:
    """The preset `name`; `zipf` sets its read (and write) Zipf exponent; `overwrites` R adds
    R overwrites per read (the paper's Fig. 13b "0-100% overwrites": R in [0, 1]), each
    rewriting an extent chosen by the same popularity law."""
    if name not in BLOCK_PRESETS:
        raise UserError(f"unknown block preset {name!r}; block presets: "
                        f"{', '.join(BLOCK_PRESETS)}")
    p = BLOCK_PRESETS[name]
    if zipf is not None:
        if not 0.0 <= zipf <= MAX_ZIPF:
            raise UserError(f"--zipf must be in [0, {MAX_ZIPF:g}], got {zipf}")
        p = replace(p, read_alpha=zipf, write_alpha=zipf)
    if overwrites is not None:
        if not 0.0 <= overwrites <= MAX_OVERWRITES:
            raise UserError(f"--overwrites must be in [0, {MAX_OVERWRITES:g}] (overwrites per "
                            f"read), got {overwrites}")
        p = replace(p, read_share=1.0 / (1.0 + overwrites), overwrite_share=1.0)
    return p


def _zipf_ranks(rng: np.random.Generator, n: int, m: int, alpha: float) -> np.ndarray:
    import numpy as np

    w = 1.0 / np.arange(1, m + 1, dtype=np.float64) ** alpha
    cdf = np.cumsum(w)
    return np.searchsorted(cdf, rng.random(n) * cdf[-1], side="right").clip(0, m - 1)


def generate_block_requests(p: BlockPreset, seed: int = 0, requests: int | None = None
                            ) -> dict[str, np.ndarray]:
    """The requests of preset `p`: `time` (Unix s), `block` (first 4 KiB block), `blocks`
    (count), `write` (bool), sorted by time. Deterministic in (p, seed, requests)."""
    import numpy as np

    from flashml.trace.limits import check_accesses, check_seed

    check_seed(seed)
    n = check_accesses(p.requests if requests is None else requests)
    rng = np.random.default_rng(seed)
    dur = p.hours * 3600.0
    # diurnal times: rejection-free by inverting a fine-grained rate table
    grid = np.linspace(0.0, dur, 4097)
    rate = 1.0 + p.diurnal_amplitude * np.cos(2 * np.pi * (grid / 86_400.0 - 0.6))
    cum = np.concatenate([[0.0], np.cumsum((rate[1:] + rate[:-1]) / 2)])
    t = np.sort(np.interp(rng.random(n) * cum[-1], cum, grid))
    # the catalogue
    blk = max(BLOCK_BYTES // KiB, 1)
    size_kib = np.exp(rng.normal(math.log(p.extent_kib_median), p.extent_sigma, p.extents))
    size = np.clip(np.ceil(size_kib.clip(1, p.max_extent_kib) / blk), 1, None).astype(np.int64)
    start = np.concatenate([[0], np.cumsum(size)[:-1]])
    log_base = int(size.sum())
    # rank -> extent per popularity epoch
    epochs = max(int(math.ceil(p.hours / p.shift_every_h)), 1)
    perm = np.empty((epochs, p.extents), dtype=np.int64)
    perm[0] = rng.permutation(p.extents)
    for e in range(1, epochs):
        perm[e] = perm[e - 1]
        k = int(p.shift_fraction * p.extents)
        idx = rng.choice(p.extents, size=k, replace=False)
        perm[e, idx] = perm[e, rng.permutation(idx)]
    epoch = np.minimum((t / 3600.0 / p.shift_every_h).astype(np.int64), epochs - 1)
    write = rng.random(n) >= p.read_share
    overwrite = write & (rng.random(n) < p.overwrite_share)
    alpha = np.where(write, p.write_alpha, p.read_alpha)
    ranks = np.empty(n, dtype=np.int64)
    for a in np.unique(alpha):
        sel = alpha == a
        ranks[sel] = _zipf_ranks(rng, int(sel.sum()), p.extents, float(a))
    ext = perm[epoch, ranks]
    if p.io_kib > 0:
        mean_blocks = max(p.io_kib / blk, 1.0)
        io = rng.geometric(1.0 / mean_blocks, n).astype(np.int64)
        io = np.minimum(io, size[ext])
        off = (rng.random(n) * (size[ext] - io + 1)).astype(np.int64)
    else:
        io = size[ext]
        off = np.zeros(n, dtype=np.int64)
    block = start[ext] + off
    # appends: a log region after the catalogue, written sequentially and never read
    appends = write & ~overwrite
    if appends.any():
        ln = io[appends]
        block[appends] = log_base + np.concatenate([[0], np.cumsum(ln)[:-1]])
    return {"time": EPOCH_S + t, "block": block.astype(np.uint64),
            "blocks": io.astype(np.uint32), "write": write}


def write_block_msr(p: BlockPreset, seed: int, out: str | Path, requests: int | None = None
                    ) -> dict[str, Any]:
    """Write preset `p` as an MSR Cambridge CSV (Timestamp as a Windows filetime, host = the
    preset's name, disk 0, Read/Write, byte offset and size, response time 0), atomically.
    Returns a summary: path, preset, seed, requests, reads, writes, blocks (accessed)."""
    import numpy as np

    from flashml.files import atomic_path
    from flashml.trace.readers.msr import FILETIME_UNIX_OFFSET_TICKS

    r = generate_block_requests(p, seed, requests)
    ticks = (np.round(r["time"] * 1e7).astype(np.int64) + FILETIME_UNIX_OFFSET_TICKS)
    off = r["block"].astype(np.int64) * BLOCK_BYTES
    size = r["blocks"].astype(np.int64) * BLOCK_BYTES
    typ = np.where(r["write"], "Write", "Read")
    host = p.name.replace("-", "_")
    with atomic_path(out) as tmp, open(tmp, "w") as f:
        f.write("Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime\n")
        lines = [f"{a},{host},0,{b},{c},{d},0" for a, b, c, d in
                 zip(ticks.tolist(), typ.tolist(), off.tolist(), size.tolist(), strict=True)]
        f.write("\n".join(lines) + "\n")
    return {"path": str(out), "preset": p.name, "seed": seed, "requests": len(ticks),
            "reads": int((~r["write"]).sum()), "writes": int(r["write"].sum()),
            "blocks": int(r["blocks"].sum())}
