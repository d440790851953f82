"""Episodes benchmark: Polars and Spark (local) engines on a generated 10M-access trace.

    .venv/bin/python bench/bench_episodes.py            # 10M accesses (a few minutes)
    .venv/bin/python bench/bench_episodes.py --quick    # 1M accesses, smoke test

Each engine runs in its own subprocess (`flashml episodes build`) so its peak RSS is its own.
Figures go to bench/results/episodes.json: wall seconds per engine, Spark/Polars ratio,
peak RSS of the Polars engine unchunked and chunked by key (memory bound), whether the
engines' tables are identical, and OPT simulated vs the target write rate.
Targets: 10M accesses, Polars < 30 s, Spark local < 180 s on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl
from machine import machine

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "episodes.json"


def make_trace(n: int, path: Path) -> dict:
    from flashml.trace.canonical import TraceMeta, write_table
    from flashml.trace.generate import PRESETS, _resolve_size, build_accesses

    p = PRESETS["region1-like"]
    n, days, ratio = _resolve_size(p, n, None)
    t = time.perf_counter()
    df = build_accesses(p, 11, n, days * 86400.0)
    df = df.select(
        pl.col("op_time").cast(pl.Float64).alias("time"),
        pl.col("block_id").cast(pl.UInt64).alias("key"),
        pl.col("io_offset").cast(pl.UInt64).alias("offset"),
        pl.col("io_size").cast(pl.UInt64).alias("size"),
        pl.col("op_name").cast(pl.UInt8).alias("op"),
        pl.col("user_namespace").cast(pl.UInt32).alias("namespace"),
        pl.col("user_name").cast(pl.UInt32).alias("user"),
        pl.int_range(1, pl.len() + 1, dtype=pl.UInt64).alias("src_line"),
    )
    write_table(df, path, TraceMeta(sample_ratio=ratio, source_format="generated"))
    return {"accesses": n, "days": days, "sample_ratio": ratio, "keys": df["key"].n_unique(),
            "make_seconds": round(time.perf_counter() - t, 2)}


def run_engine(trace: Path, out: Path, engine: str, ea: float, *extra: str) -> dict:
    cmd = [sys.executable, "-m", "flashml.cli", "episodes", "build", "--trace", str(trace),
           "--eviction-age", str(ea), "--engine", engine, "--no-plot", "--json",
           "-o", str(out), *extra]
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t
    if p.returncode != 0:
        raise SystemExit(f"{engine} failed:\n{p.stderr[-3000:]}")
    s = json.loads(p.stdout)
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {"wall_s": round(wall, 2), "engine_s": round(s["timings"]["engine_s"], 2),
            "episodes": s["episodes"], "admitted_episodes": s["admitted_episodes"],
            "dt_saved_ratio": s["dt_saved_ratio"],
            # ru_maxrss of children is the max over all children so far (KiB on Linux)
            "peak_rss_mib_children_max": round(max(rss, before) / 1024),
            "simulation": s.get("simulation")}


def identical(a: Path, b: Path) -> bool:
    for n in ("episodes", "labels", "arrays"):
        if not pl.read_parquet(a / f"{n}.parquet").equals(pl.read_parquet(b / f"{n}.parquet")):
            return False
    return True


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--accesses", type=int, default=None)
    ap.add_argument("--eviction-age", type=float, default=3600.0)
    ap.add_argument("--no-spark", action="store_true")
    args = ap.parse_args()
    n = args.accesses or (1_000_000 if args.quick else 10_000_000)
    work = Path(tempfile.mkdtemp(prefix="bench-episodes-"))
    try:
        trace = work / "trace.parquet"
        info = make_trace(n, trace)
        print(f"trace: {info}", flush=True)
        res: dict = {"machine": machine(),
                     "trace": info, "eviction_age_s": args.eviction_age}
        # Peak RSS is tracked per child: run the chunked Polars build first (lowest memory).
        res["polars_chunked_8"] = run_engine(trace, work / "pc", "polars", args.eviction_age,
                                             "--chunks", "8")
        print("polars chunks=8:", res["polars_chunked_8"], flush=True)
        res["polars"] = run_engine(trace, work / "p", "polars", args.eviction_age,
                                   "--simulate")
        print("polars:", res["polars"], flush=True)
        res["polars_chunked_identical"] = identical(work / "p", work / "pc")
        if not args.no_spark:
            res["spark_local"] = run_engine(trace, work / "s", "spark", args.eviction_age)
            print("spark:", res["spark_local"], flush=True)
            res["spark_polars_identical"] = identical(work / "p", work / "s")
            res["spark_over_polars_wall"] = round(res["spark_local"]["wall_s"]
                                                  / res["polars"]["wall_s"], 2)
        res["targets"] = {"accesses": 10_000_000, "polars_s": 30, "spark_local_s": 180}
        if n == 10_000_000:
            res["meets_targets"] = {
                "polars": res["polars"]["wall_s"] < 30,
                "spark_local": (res.get("spark_local", {}).get("wall_s", 1e9) < 180),
            }
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(json.dumps(res, indent=2) + "\n")
        print(f"wrote {OUT}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
