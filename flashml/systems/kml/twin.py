"""KML's offline twin: evaluate a readahead tuner on a trace without root.

The testbed (`testbed.py`) runs db_bench over a throttled loop device; the twin replays a
page-level trace through `flashml_sim.ReadaheadSim` (sim/src/kml/readahead.rs: an LRU page cache
with Linux-like mmap read-around and async readahead, closed loop over a device of `riops`
read IOs/s and `rbps` bytes/s, `cpu_us` per request) one feature window at a time, and asks
the tuner for the next window's readahead from the contract's five features
(features/readahead.toml).

    trace = workload_trace("readseq", requests=200_000, seed=1)
    evaluate(trace, 128)["ops_per_s"]                      # a fixed readahead, KiB
    evaluate(trace, lambda f: 1024 if f[3] < 1.5 else 8)   # a tuner: features -> KiB
    best_fixed(trace)                                      # the label: best fixed size

Workloads are modelled on db_bench over an LSM database of `files` SST files of `file_pages`
pages each (values of 400 B, ~10 to a 4 KiB page); "ops" are trace requests (updaterandom's
read and log append are two). numpy is imported inside the functions (the CLI imports this
module).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from flashml.features.readahead import contract
from flashml.systems.kml.settings import KNOBS, LINUX_KIB, SIZES

#: The generated workloads: KML's four training workloads, updaterandom and mixgraph.
WORKLOADS = ("readrandom", "readseq", "readreverse", "readrandomwriterandom", "updaterandom",
             "mixgraph")
#: Readahead sizes of the sweep (KiB), as the testbed's.
READAHEAD_KIB = SIZES
#: db_bench's default value size (bytes).
VALUE_BYTES = 400
#: The testbed's memory cgroup in pages (settings.toml's twin_cache_pages).
CACHE_PAGES: int = KNOBS["twin_cache_pages"].default
#: Keyword arguments `evaluate` passes to the device model.
DEVICE_KEYS = ("riops", "rbps", "cpu_us", "page_bytes", "window_ms")
TRACE_KEYS = ("files", "pages", "npages", "writes")

_PAGE = contract().page_bytes
_WRITE_FRACTION = 0.1     # readrandomwriterandom
_SCAN_FRACTION = 0.05     # mixgraph: share of requests that are short forward scans
_SKEW = 4.0               # mixgraph: rank = N * u**_SKEW (10% of the pages get ~56% of reads)


def workload_trace(name: str, *, requests: int, files: int = 16, file_pages: int = 16384,
                   seed: int = 0) -> dict[str, Any]:
    """A db_bench-like page trace: {"files" u32, "pages" u64, "npages" u32, "writes" bool}.

    readrandom: a uniform random file and page per request. readseq: the keys in order
    (file by file, ~10 consecutive requests per page). readreverse: the same from the last
    key backwards. readrandomwriterandom: 90% random reads, 10% writes appended to a log
    (file id = `files`). updaterandom: each op a random read then a log append.
    mixgraph: Zipf-like skewed random reads (hot pages scattered over the files), 5% of them
    short forward scans of 1-64 pages (clipped at the file's end)."""
    import numpy as np

    if name not in WORKLOADS:
        raise ValueError(f"workload must be one of {', '.join(WORKLOADS)}, got {name!r}")
    for arg, v in (("requests", requests), ("files", files), ("file_pages", file_pages)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{arg} must be an int >= 1, got {v!r}")
    n = int(requests)
    rng = np.random.default_rng(seed)
    keys_per_file = file_pages * _PAGE // VALUE_BYTES
    total_keys = files * keys_per_file
    npages = np.ones(n, np.uint32)
    writes = np.zeros(n, bool)

    def random_reads(m: int) -> tuple[Any, Any]:
        return rng.integers(0, files, m), rng.integers(0, file_pages, m)

    def log_pages(m: int) -> Any:
        return np.arange(m, dtype=np.uint64) * VALUE_BYTES // _PAGE

    if name in ("readseq", "readreverse"):
        k = np.arange(n, dtype=np.int64) % total_keys
        if name == "readreverse":
            k = total_keys - 1 - k
        f, p = k // keys_per_file, (k % keys_per_file) * VALUE_BYTES // _PAGE
    elif name == "readrandom":
        f, p = random_reads(n)
    elif name == "readrandomwriterandom":
        f, p = random_reads(n)
        writes = rng.random(n) < _WRITE_FRACTION
        f[writes] = files
        p[writes] = log_pages(int(writes.sum()))
    elif name == "updaterandom":
        f, p = random_reads(n)
        writes[1::2] = True
        f[1::2] = files
        p[1::2] = log_pages(len(f[1::2]))
    else:  # mixgraph
        total = files * file_pages
        rank = np.minimum((total * rng.random(n) ** _SKEW).astype(np.int64), total - 1)
        mult = 2_654_435_761                     # an odd multiplier coprime to the total
        while np.gcd(mult, total) != 1:
            mult += 2
        g = (rank * (mult % total) + int(rng.integers(total))) % total
        f, p = g // file_pages, g % file_pages
        scan = rng.random(n) < _SCAN_FRACTION
        length = rng.integers(1, 65, n)
        npages = np.where(scan, np.minimum(length, file_pages - p), 1).astype(np.uint32)
    return {"files": np.asarray(f, np.uint32), "pages": np.asarray(p, np.uint64),
            "npages": np.asarray(npages, np.uint32), "writes": np.asarray(writes, bool)}


def _sim(trace: dict[str, Any], cache_pages: int, device: dict[str, Any]) -> Any:
    import numpy as np

    import flashml_sim

    unknown = sorted(set(device) - set(DEVICE_KEYS))
    if unknown:
        raise ValueError(f"unknown device argument(s) {', '.join(unknown)}; known: "
                         f"{', '.join(DEVICE_KEYS)}")
    missing = [k for k in TRACE_KEYS if k not in trace]
    if missing:
        raise ValueError(f"trace lacks {', '.join(missing)} (needs {', '.join(TRACE_KEYS)})")
    dtypes = (np.uint32, np.uint64, np.uint32, np.bool_)
    cols = [np.ascontiguousarray(trace[k], dtype=t)
            for k, t in zip(TRACE_KEYS, dtypes, strict=True)]
    return flashml_sim.ReadaheadSim(*cols, cache_pages=cache_pages, **device)


def _kib(value: Any, what: str) -> int:
    try:
        kib = int(round(float(value)))
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{what} must be a readahead size in KiB, got {value!r}") from None
    if kib <= 0:
        raise ValueError(f"{what} must be > 0 KiB, got {value!r}")
    return kib


def evaluate(trace: dict[str, Any], policy: int | Callable[[list[float]], float], *,
             cache_pages: int = CACHE_PAGES, initial_kib: int = LINUX_KIB,
             **device: Any) -> dict[str, Any]:
    """Replay `trace` window by window. `policy` is a fixed readahead (KiB) or a callable
    from the window's five features (contract order) to the next window's readahead (KiB);
    the first window runs at `initial_kib`, and a window without events keeps the readahead.
    Returns the totals (ops_per_s = requests per simulated second, clock_s, requests, ios,
    read_bytes, hits, misses, hit_ratio) and "windows": one row per window (window,
    features, kib, empty, requests, ios, elapsed_s) for plots."""
    fixed = not callable(policy)
    kib = _kib(policy if fixed else initial_kib, "policy" if fixed else "initial_kib")
    sim = _sim(trace, cache_pages, device)
    rows: list[dict[str, Any]] = []
    tot = {"requests": 0, "ios": 0, "read_bytes": 0, "hits": 0, "misses": 0, "events": 0}
    while True:
        r = sim.run_window(kib)
        for k in tot:
            tot[k] += r[k]
        rows.append({"window": r["window"], "features": r["features"], "kib": kib,
                     "empty": r["empty"], "requests": r["requests"], "ios": r["ios"],
                     "elapsed_s": r["elapsed_s"]})
        if r["done"]:
            break
        if not fixed and not r["empty"]:
            kib = _kib(policy(list(r["features"])), "policy's readahead")  # type: ignore[operator]
    clock = sim.clock_s
    reads = tot["hits"] + tot["misses"]
    return {**tot, "clock_s": clock,
            "ops_per_s": tot["requests"] / clock if clock > 0 else 0.0,
            "hit_ratio": tot["hits"] / reads if reads else 0.0, "windows": rows}


def best_fixed(trace: dict[str, Any], sizes: Sequence[int] = READAHEAD_KIB, *,
               cache_pages: int = CACHE_PAGES, **device: Any) -> dict[str, Any]:
    """Every fixed readahead's ops/s on `trace` and the best one (the lowest size on a tie):
    {"best_kib", "best_ops_per_s", "ops_per_s": {kib: ops/s}, "runs": {kib: totals}}."""
    if not sizes:
        raise ValueError("sizes must name at least one readahead size")
    kibs = [_kib(s, "sizes") for s in sizes]
    sim = _sim(trace, cache_pages, device)
    runs = {k: sim.run_fixed(k) for k in kibs}
    ops = {k: r["ops_per_s"] for k, r in runs.items()}
    best = max(kibs, key=lambda k: (ops[k], -k))
    return {"best_kib": best, "best_ops_per_s": ops[best], "ops_per_s": ops, "runs": runs}
