"""The mount's overhead on hits (`flashrt mount`, docs/how-to/mount-a-cache.md): p50/p99
latency of reads through the FUSE mount that hit the flash, beside a direct pread of the flash
file of the same size and of the 128 KiB segment the engine reads for it, and the engine's own
hit path (its `hit_path_us`).

    flock /tmp/flashml-timing.lock .venv/bin/python bench/bench_mount.py   # make mount-bench

A 64 MiB file of random bytes is read twice through the mount (admitall: the second pass is
all hits, and every segment is then cached), then READS reads of each size at random aligned
offsets, each through the mount and, right after it, directly from the flash file (with
O_DIRECT when the engine uses it), timed one by one. Figures go to bench/results/mount.json,
with the load average beside them. Needs root, /dev/fuse, fusermount3 and a flashrt built with
libfuse3; without them it says which is missing and writes nothing.
"""

from __future__ import annotations

import json
import mmap
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from machine import machine

ROOT = Path(__file__).resolve().parents[1]
FLASHRT = ROOT / "runtime" / "build" / "flashrt"
OUT = ROOT / "bench" / "results" / "mount.json"
SEG = 128 * 1024
FILE_BYTES = 64 << 20
READS = 3000
SIZES = (4096, SEG)
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "runtime"))  # test_mount


def missing() -> str | None:
    from flashml.device.host import fuse_unavailable

    return fuse_unavailable()


def pct(xs: list[float]) -> dict[str, float]:
    a = np.asarray(xs)
    return {"p50": round(float(np.percentile(a, 50)), 2),
            "p99": round(float(np.percentile(a, 99)), 2), "mean": round(float(a.mean()), 2)}


def counters(proc: subprocess.Popen, stats: Path) -> dict:
    before = json.loads(stats.read_text())["stats_written"] if stats.exists() else 0
    os.kill(proc.pid, signal.SIGUSR1)
    deadline = time.monotonic() + 120
    while True:
        try:
            s = json.loads(stats.read_text())
            if s["stats_written"] > before:
                return s
        except (FileNotFoundError, json.JSONDecodeError):
            pass
        if time.monotonic() > deadline:
            raise SystemExit("the mount wrote no counters")
        time.sleep(0.01)


def main() -> int:
    why = missing()
    if why:
        print(f"bench_mount: skipped: {why}", file=sys.stderr)
        return 0
    from test_mount import is_mounted, release

    subprocess.run(["make", "-s", "-C", str(ROOT / "runtime"), "all"], check=True)
    load_before = os.getloadavg()
    rng = np.random.default_rng(44)
    with tempfile.TemporaryDirectory(dir="/var/tmp", prefix="flashml-bench-mount-") as d:
        work = Path(d)
        backing, mnt = work / "backing", work / "mnt"
        backing.mkdir()
        mnt.mkdir()
        data = rng.integers(0, 256, FILE_BYTES, dtype=np.uint8).tobytes()
        (backing / "data.bin").write_bytes(data)
        flash, stats = work / "flash.img", work / "stats.json"
        proc = subprocess.Popen([str(FLASHRT), "mount", str(backing), str(mnt), "--flash",
                                 str(flash), "--flash-bytes", "256MiB", "--admission",
                                 "admitall", "--stats-out", str(stats), "-f"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 120
            while not is_mounted(mnt):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the mount did not come up: {proc.communicate()}")
                time.sleep(0.01)
            path = mnt / "data.bin"
            for _ in range(2):  # the first pass admits every segment, the second hits
                with open(path, "rb", buffering=0) as f:
                    while f.read(1 << 20):
                        pass
            warm = counters(proc, stats)
            direct = bool(warm["direct_io"])
            cached_bytes = warm["admitted_segments"] * SEG
            assert warm["evicted_regions"] == 0 and cached_bytes >= FILE_BYTES, warm
            fuse_fd = os.open(path, os.O_RDONLY)
            flash_fd = os.open(flash, os.O_RDONLY | (os.O_DIRECT if direct else 0))
            buf = mmap.mmap(-1, SEG)  # page-aligned, as O_DIRECT wants
            by_size: dict[str, dict] = {}
            try:
                for size in SIZES:
                    fuse_us, flash_us, seg_us = [], [], []
                    before = counters(proc, stats)
                    offs = rng.integers(0, FILE_BYTES // size, READS) * size
                    flash_offs = rng.integers(0, cached_bytes // size, READS) * size
                    seg_offs = rng.integers(0, cached_bytes // SEG, READS) * SEG
                    view = memoryview(buf)
                    for i in range(READS):
                        t0 = time.perf_counter_ns()
                        os.pread(fuse_fd, size, int(offs[i]))
                        t1 = time.perf_counter_ns()
                        os.preadv(flash_fd, [view[:size]], int(flash_offs[i]))
                        t2 = time.perf_counter_ns()
                        os.preadv(flash_fd, [view], int(seg_offs[i]))
                        t3 = time.perf_counter_ns()
                        fuse_us.append((t1 - t0) / 1e3)
                        flash_us.append((t2 - t1) / 1e3)
                        seg_us.append((t3 - t2) / 1e3)
                    after = counters(proc, stats)
                    hits = after["hits"] - before["hits"]
                    assert hits == READS and after["misses"] == before["misses"], (before, after)
                    f, r = pct(fuse_us), pct(flash_us)
                    by_size[str(size)] = {
                        "fuse_hit_us": f, "flash_pread_us": r,
                        "flash_segment_pread_us": pct(seg_us),
                        "overhead_us_p50": round(f["p50"] - r["p50"], 2),
                        "overhead_us_p99": round(f["p99"] - r["p99"], 2)}
            finally:
                os.close(fuse_fd)
                os.close(flash_fd)
            final = counters(proc, stats)
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=120)
            if proc.returncode != 0:
                raise SystemExit(f"the mount exited {proc.returncode}")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            release(mnt)
    result = {
        "what": "reads through `flashrt mount` that hit the flash vs direct preads of the "
                "flash file",
        "machine": machine(), "load_avg_before": list(load_before),
        "load_avg_after": list(os.getloadavg()),
        "file_bytes": FILE_BYTES, "reads_per_size": READS, "direct_io": direct,
        "by_size": by_size,
        "engine_hit_path_us": {"p50": final["hit_path_us_p50"], "p99": final["hit_path_us_p99"]},
        "engine_hits": final["hits"],
    }
    from flashml.files import atomic_path

    with atomic_path(OUT) as tmp:
        tmp.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["by_size"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
