"""libCacheSim's eviction policies on a whole-object request stream: the external baselines
(and oracle) of object-mode eviction (MAT).

The policies come from `libcachesim` on PyPI, libCacheSim's own Python bindings (a dev/test
dependency: `make setup` installs it; nothing else in flashml needs it). Nothing here
reimplements a policy: a (key, size) stream is written once as libCacheSim's
`oracleGeneral` binary trace and each policy is run on it by libCacheSim's own C loop
(`cache.process_trace(reader)`, i.e. `c_process_trace`), which returns the miss ratio and
the byte miss ratio.

The oracle trace (24-byte records: u32 clock_time, u64 obj_id, u32 obj_size, i64
next_access_vtime) carries each request's next access, which Belady needs; it is written
exactly as libCacheSim's own converter (`Util.convert_to_oracleGeneral`) writes it: the
1-based index of the key's next request, -1 for none (tests/mat/test_object_baselines.py checks
the bytes). clock_time is seconds since the first request (0 without times).

Capacity is bytes, or objects with `unit="objects"`: then every size is written as 1, so
libCacheSim counts objects (its byte miss ratio then equals the miss ratio and is reported
as None; our simulator's object-count mode still reports bytes).

Each (policy, capacity) runs in a child process: libCacheSim aborts the process on some
configurations (S3-FIFO with a 1-object small queue, for one), and a crash must not take the
caller down: it becomes that row's `error`.

Policies (`POLICIES`, lower-case names as in the issue) and their libCacheSim classes:
lru LRU, fifo FIFO, lfu LFU, arc ARC, s3fifo S3FIFO, sieve Sieve, lhd LHD, lrb LRB (objective
`object-miss-ratio` here: the table's headline is the miss ratio; libCacheSim's default is
byte-miss-ratio; LRB trains its GBM only after 131,072 labelled samples, so on a short trace
it is LRU), glcache GLCache (learned, retrains every 86,400 s of clock_time), belady Belady
(evicts the object whose next access is furthest; not size-aware) and belady-size BeladySize
(libCacheSim's size-aware variant, sampled). `available()` says which the installed wheel
provides and why any is missing.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

#: Policy name -> (libcachesim class, keyword arguments). Lower-case names, as the CLI takes them.
POLICIES: dict[str, tuple[str, dict[str, Any]]] = {
    "lru": ("LRU", {}),
    "fifo": ("FIFO", {}),
    "lfu": ("LFU", {}),
    "arc": ("ARC", {}),
    "s3fifo": ("S3FIFO", {}),
    "sieve": ("Sieve", {}),
    "lhd": ("LHD", {}),
    "lrb": ("LRB", {"objective": "object-miss-ratio"}),
    "glcache": ("GLCache", {}),
    "belady": ("Belady", {}),
    "belady-size": ("BeladySize", {}),
}
#: What `run_baselines` runs by default (every policy above).
DEFAULT_POLICIES: tuple[str, ...] = tuple(POLICIES)
UNITS = ("bytes", "objects")
ORACLE_DTYPE = np.dtype([("clock_time", "<u4"), ("obj_id", "<u8"), ("obj_size", "<u4"),
                         ("next_access_vtime", "<i8")])
MAX_OBJ_SIZE = (1 << 32) - 1  # oracleGeneral's obj_size is 32 bits
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # libCacheSim colours its log lines
INSTALL_HINT = ("libcachesim is not installed: it is a dev/test dependency "
                "(`make setup`, or `.venv/bin/uv pip install -r requirements.lock`)")


class BaselineUnavailable(RuntimeError):
    """libcachesim (or one of its policies) cannot be used here; the message says why."""


def libcachesim_version() -> str | None:
    """The installed libcachesim's version, None if it is not installed."""
    try:
        import libcachesim
    except ImportError:
        return None
    return str(getattr(libcachesim, "__version__", "unknown"))


def available() -> dict[str, str | None]:
    """Every policy of `POLICIES` -> None if the installed libcachesim provides it, else the
    reason it cannot run (libcachesim missing, or a wheel built without that policy)."""
    try:
        import libcachesim as lcs
        from libcachesim import libcachesim_python as core
    except ImportError as e:
        return {name: f"{INSTALL_HINT} ({e})" for name in POLICIES}
    out: dict[str, str | None] = {}
    for name, (cls, _) in POLICIES.items():
        if not hasattr(lcs, cls):
            out[name] = f"libcachesim {lcs.__version__} has no class {cls}"
        elif not hasattr(core, f"{cls}_init"):
            out[name] = (f"libcachesim {lcs.__version__} was built without {cls} "
                         f"(its native {cls}_init is missing)")
        else:
            out[name] = None
    return out


# --- the oracle trace -----------------------------------------------------------------------


def next_access(keys: np.ndarray) -> np.ndarray:
    """libCacheSim's next_access_vtime of every request: the 1-based index of the same key's
    next request, -1 if there is none."""
    keys = np.asarray(keys)
    n = keys.size
    order = np.argsort(keys, kind="stable")  # by key, then by position
    nxt = np.full(n, -1, dtype=np.int64)
    same = keys[order[1:]] == keys[order[:-1]]
    nxt[order[:-1][same]] = order[1:][same] + 1
    return nxt


def oracle_records(keys: Any, sizes: Any, times: Any = None, *,
                   unit: str = "bytes") -> np.ndarray:
    """The oracleGeneral records of a request stream (ORACLE_DTYPE); ValueError on input
    libCacheSim cannot take (a size of 0 or >= 4 GiB, lengths that disagree)."""
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {UNITS}, got {unit!r}")
    k = np.ascontiguousarray(keys, dtype=np.uint64)
    s = np.asarray(sizes)
    if k.ndim != 1 or s.shape != k.shape:
        raise ValueError(f"keys and sizes must be 1-d of one length, got {k.shape} and "
                         f"{s.shape}")
    if k.size == 0:
        raise ValueError("no requests")
    rec = np.zeros(k.size, dtype=ORACLE_DTYPE)
    if unit == "objects":
        rec["obj_size"] = 1
    else:
        if s.min() < 1:
            raise ValueError("every size must be >= 1 byte (libCacheSim skips size-0 "
                             f"requests); request {int(np.argmin(s))} has {s.min()}")
        if s.max() > MAX_OBJ_SIZE:
            raise ValueError(f"sizes must be < 4 GiB (oracleGeneral's 32-bit obj_size); "
                             f"request {int(np.argmax(s))} has {s.max()}")
        rec["obj_size"] = s
    rec["obj_id"] = k
    if times is not None:
        t = np.asarray(times, dtype=np.float64)
        if t.shape != k.shape:
            raise ValueError(f"times has {t.size} values for {k.size} requests")
        rel = np.floor(t - t[0])
        if not (np.all(np.isfinite(rel)) and rel.min() >= 0 and rel.max() <= MAX_OBJ_SIZE):
            raise ValueError("times must be finite, non-decreasing seconds spanning < 2^32 s")
        rec["clock_time"] = rel.astype(np.uint32)
    rec["next_access_vtime"] = next_access(k)
    return rec


def write_oracle_trace(path: str | Path, keys: Any, sizes: Any, times: Any = None, *,
                       unit: str = "bytes") -> Path:
    """Write the stream as libCacheSim's oracleGeneral binary trace at `path`."""
    path = Path(path)
    oracle_records(keys, sizes, times, unit=unit).tofile(path)
    return path


# --- running the policies ---------------------------------------------------------------------


def _run_one(oracle: Path, policy: str, capacity: int, timeout_s: float | None) -> dict[str, Any]:
    """One (policy, capacity) in a child process (this module's `_worker`)."""
    cmd = [sys.executable, "-m", "flashml.systems.mat.object_baselines", "_worker", str(oracle),
           policy, str(int(capacity))]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                              env=os.environ | {"PYTHONUNBUFFERED": "1"}, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout_s:g} s"}
    wall = time.perf_counter() - t0
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        text = _ANSI.sub("", proc.stderr).strip().splitlines()
        tail = " | ".join(ln.strip() for ln in text[-3:] if ln.strip())
        how = (f"killed by signal {-proc.returncode}" if proc.returncode < 0
               else f"exit {proc.returncode}")
        return {"error": f"libCacheSim {POLICIES[policy][0]} failed ({how}): {tail}"}
    out = json.loads(lines[-1])
    out["wall_s"] = wall
    return out


def run_baselines(keys: Any, sizes: Any, capacities: int | Iterable[int], *,
                  unit: str = "bytes", policies: Sequence[str] = DEFAULT_POLICIES,
                  times: Any = None, jobs: int = 1, timeout_s: float | None = None,
                  isolate: bool = True,
                  workdir: str | Path | None = None) -> dict[int, dict[str, dict[str, Any]]]:
    """Run libCacheSim's `policies` over the stream at each capacity.

    Returns {capacity: {policy: row}}; a row is {miss_ratio, byte_miss_ratio (None in
    object-count mode), hits, requests, seconds (libCacheSim's replay), wall_s} or {error}
    when the policy crashed, timed out or is unavailable. `jobs` runs go at once (child
    processes; with `isolate=False` threads of this process instead, which is faster but
    lets a libCacheSim abort end the caller: only for policies known not to, such as
    lru/fifo/belady). Raises BaselineUnavailable if libcachesim is not installed,
    ValueError on bad input (unknown policy or unit, capacity < 1, sizes libCacheSim cannot
    take)."""
    caps = [int(capacities)] if isinstance(capacities, int | np.integer) else \
        [int(c) for c in capacities]
    if not caps or min(caps) < 1:
        raise ValueError(f"capacities must be >= 1, got {caps}")
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        raise ValueError(f"unknown policies {unknown}; known: {', '.join(POLICIES)}")
    if libcachesim_version() is None:
        raise BaselineUnavailable(INSTALL_HINT)
    status = available()
    with tempfile.TemporaryDirectory(prefix="flashml-lcs-", dir=workdir) as tmp:
        oracle = write_oracle_trace(Path(tmp) / "trace.oracleGeneral.bin", keys, sizes, times,
                                    unit=unit)
        tasks = [(c, p) for c in caps for p in policies]
        out: dict[int, dict[str, dict[str, Any]]] = {c: {} for c in caps}

        def one(task: tuple[int, str]) -> dict[str, Any]:
            c, p = task
            if status[p] is not None:
                return {"error": status[p]}
            if not isolate:
                t0 = time.perf_counter()
                return _simulate(str(oracle), p, c) | {"wall_s": time.perf_counter() - t0}
            return _run_one(oracle, p, c, timeout_s)

        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            for (c, p), row in zip(tasks, pool.map(one, tasks), strict=True):
                if unit == "objects" and "byte_miss_ratio" in row:
                    row["byte_miss_ratio"] = None
                out[c][p] = row
    return out


def _simulate(oracle: str, policy: str, capacity: int) -> dict[str, Any]:
    """libCacheSim's `policy` at `capacity` over the oracle trace, by its own C loop."""
    import libcachesim as lcs

    cls, kwargs = POLICIES[policy]
    reader = lcs.TraceReader(oracle, lcs.TraceType.ORACLE_GENERAL_TRACE)
    cache = getattr(lcs, cls)(int(capacity), **kwargs)
    t0 = time.perf_counter()
    miss, byte_miss = cache.process_trace(reader)
    secs = time.perf_counter() - t0
    n = int(reader.get_num_of_req())
    return {"miss_ratio": miss, "byte_miss_ratio": byte_miss,
            "hits": int(round((1.0 - miss) * n)), "requests": n, "seconds": secs}


def _worker(oracle: str, policy: str, capacity: str) -> int:
    """Child process: run one policy on the oracle trace; print one JSON line."""
    print(json.dumps(_simulate(oracle, policy, int(capacity))), flush=True)
    return 0


if __name__ == "__main__":  # the child process of `_run_one`
    if len(sys.argv) == 5 and sys.argv[1] == "_worker":
        sys.exit(_worker(*sys.argv[2:]))
    sys.exit("usage: python -m flashml.systems.mat.object_baselines _worker ORACLE POLICY CAPACITY")
