"""Trace benchmarks: generation speed, Tectonic ingest on one core (with a pure-Python peer on
the same file), gzip ingest, and peak memory at two input sizes to show it stays bounded.

Writes bench/results/trace.json. Sizes: FLASHML_BENCH_ACCESSES (default 10 M)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import machine

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench" / "results" / "trace.json"
N = int(os.environ.get("FLASHML_BENCH_ACCESSES", 10_000_000))
FLASHML = [sys.executable, "-m", "flashml.cli"]


_INGEST = """
import json, re, sys, time
from flashml.trace.ingest import ingest
t0 = time.perf_counter()
r = ingest(sys.argv[1], sys.argv[2], "tectonic", progress=False)
print(json.dumps({"seconds": time.perf_counter() - t0, "lines": r.lines,
                  # VmHWM: this process's peak RSS since exec (ru_maxrss would count the
                  # parent's memory at fork time)
                  "peak_rss_mib": int(re.search(r"VmHWM:\\s+(\\d+)",
                                      open("/proc/self/status").read()).group(1)) / 1024}))
"""


def ingest_one_core(src: Path, out: Path) -> dict:
    """Ingest in a fresh interpreter pinned to one core; time excludes interpreter start-up."""
    env = dict(os.environ, POLARS_MAX_THREADS="1", OMP_NUM_THREADS="1")
    pin = ["taskset", "-c", "0"] if shutil.which("taskset") else []
    proc = subprocess.run(pin + [sys.executable, "-c", _INGEST, str(src), str(out)], check=True,
                          env=env, cwd=REPO, capture_output=True, text=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def python_peer(path: Path, limit: int) -> float:
    """The obvious pure-Python parse of the first `limit` lines: lines/s."""
    t0 = time.perf_counter()
    rows = []
    with open(path) as f:
        for i, line in enumerate(f):
            if line.startswith("#"):
                continue
            b, off, size, t, op, pipe, ns, user = line.split(" ")
            rows.append((float(t), int(b), int(off), int(size), int(op), int(ns), int(user)))
            if i >= limit:
                break
    return len(rows) / (time.perf_counter() - t0)


def main() -> None:
    from flashml.trace.generate import generate_trace

    res: dict = {"machine": machine()}
    with tempfile.TemporaryDirectory(prefix="flashml-bench-") as tmp:
        tmp = Path(tmp)
        big = tmp / "big.trace"
        t0 = time.perf_counter()
        generate_trace("region1-like", 1, big, accesses=N, progress=False)
        gen_s = time.perf_counter() - t0
        res["generate"] = {"accesses": N, "seconds": round(gen_s, 2),
                           "accesses_per_s": round(N / gen_s), "target_seconds_for_10M": 60}
        full = ingest_one_core(big, tmp / "b.pq")
        small = tmp / "small.trace"
        with open(big) as src, open(small, "w") as dst:
            for i, line in enumerate(src):
                if i > N // 10:
                    break
                dst.write(line)
        tenth = ingest_one_core(small, tmp / "s.pq")
        peer = python_peer(big, min(N, 1_000_000))
        gz = tmp / "big.trace.gz"
        with open(big, "rb") as f, gzip.open(gz, "wb", compresslevel=1) as g:
            shutil.copyfileobj(f, g, 1 << 24)
        gzr = ingest_one_core(gz, tmp / "g.pq")
        rate = full["lines"] / full["seconds"]
        res["ingest_tectonic_one_core"] = {
            "lines": full["lines"], "input_mb": round(big.stat().st_size / 2**20, 1),
            "seconds": round(full["seconds"], 2), "lines_per_s": round(rate),
            "target_lines_per_s": 1_000_000,
            "peak_rss_mib": round(full["peak_rss_mib"]),
            "peak_rss_mib_at_tenth_size": round(tenth["peak_rss_mib"]),
            "python_parse_only_peer_lines_per_s": round(peer),
            "ratio_vs_python_parse_only_peer": round(rate / peer, 2),
            "gzip_lines_per_s": round(gzr["lines"] / gzr["seconds"]),
        }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
