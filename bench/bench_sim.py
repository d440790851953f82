"""Simulator benchmark: speed of the Rust core (flashml_sim), absolute and relative to the
pure-Python reference simulator (tests/reference_sim.py) on the same traces.

    .venv/bin/python bench/bench_sim.py            # full run (10M-access trace), ~1 minute
    .venv/bin/python bench/bench_sim.py --quick    # 1M accesses, for a smoke test

Figures go to bench/results/sim.json:
  flash_lru_rejectx: accesses/s of flash-cache mode, LRU + RejectX, on a generated trace
                     (flashml.trace.generate region1-like preset, else a numpy Zipf trace)
  object_lru:        requests/s of object-cache mode, LRU, on a Zipf request stream
  vs_reference:      Rust / Python-reference speed ratio on the same (prefix) traces
Targets: flash >= 5M accesses/s, object LRU >= 10M requests/s, on one core.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from machine import machine  # noqa: E402

from flashml.simulation import SimConfig, simulate, simulate_objects  # noqa: E402

import reference_sim as ref  # noqa: E402

SEG = 131072


def generated_trace(n: int, seed: int) -> tuple[dict[str, np.ndarray], float, str]:
    """(columns, sample ratio, source) of an n-access generated trace."""
    try:
        from flashml.trace.generate import PRESETS, _resolve_size, build_accesses
    except ImportError:
        return zipf_trace(n, seed)
    p = PRESETS["region1-like"]
    n, days, ratio = _resolve_size(p, n, None)
    df = build_accesses(p, seed, n, days * 86400.0)
    cols = {
        "time": df["op_time"].to_numpy(),
        "key": df["block_id"].to_numpy().astype(np.uint64, copy=False),
        "offset": df["io_offset"].to_numpy().astype(np.uint64),
        "size": df["io_size"].to_numpy().astype(np.uint64),
        "op": df["op_name"].to_numpy(),
    }
    return cols, ratio, f"flashml.trace.generate preset region1-like, {days:g} days"


def zipf_trace(n: int, seed: int) -> tuple[dict[str, np.ndarray], float, str]:
    rng = np.random.default_rng(seed)
    days = 3.0
    seg_lo = rng.integers(0, 64, n)
    nseg = np.minimum(rng.geometric(0.3, n), 64 - seg_lo)
    cols = {
        "time": np.sort(rng.uniform(0, days * 86400, n)),
        "key": (rng.zipf(1.2, n) % (n // 5)).astype(np.uint64),
        "offset": (seg_lo * SEG).astype(np.uint64),
        "size": (nseg * SEG).astype(np.uint64),
        "op": rng.choice(np.array([1, 2, 3], np.uint8), n, p=[0.45, 0.4, 0.15]),
    }
    return cols, 100.0 * n / (244.0 * days * 86400), "numpy Zipf(1.2) synthetic, 3 days"


def prefix(cols: dict[str, np.ndarray], n: int) -> dict[str, np.ndarray]:
    return {k: np.ascontiguousarray(v[:n]) for k, v in cols.items()}


def best_of(fn, repeats: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--accesses", type=int, default=10_000_000)
    ap.add_argument("--object-requests", type=int, default=10_000_000)
    ap.add_argument("--reference-accesses", type=int, default=200_000,
                    help="prefix length for the Python-reference comparison")
    ap.add_argument("--quick", action="store_true", help="1M accesses (smoke test)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "sim.json")
    args = ap.parse_args(argv)
    if args.quick:
        args.accesses = args.object_requests = 1_000_000
        args.reference_accesses = 50_000
    repeats = 3

    t = time.perf_counter()
    cols, ratio, source = generated_trace(args.accesses, seed=1)
    gen_s = time.perf_counter() - t
    n = len(cols["time"])
    print(f"trace: {n:,} accesses ({source}), sample ratio {ratio:.4g}%, made in {gen_s:.1f}s",
          file=sys.stderr)

    # --- flash-cache mode, LRU + RejectX, the headline figure ---------------------
    cfg = SimConfig(admission="rejectx", sample_ratio=ratio)
    call_s, res = best_of(lambda: simulate(cols, cfg), repeats)
    core_s = res.metrics["wall_s"]
    flash = {
        "trace": source, "accesses": n, "sample_ratio": ratio,
        "capacity_segments": res.info["capacity_segments"],
        "core_wall_s": core_s, "call_wall_s": call_s,
        "accesses_per_s": n / core_s, "accesses_per_s_incl_python": n / call_s,
        "target_accesses_per_s": 5e6,
        "peak_cached_blocks": res.info["peak_cached_blocks"],
        "rejectx_history_keys": res.info["rejectx_history"],
        "metrics": {k: v for k, v in res.metrics.items() if k != "wall_s"},
    }
    print(f"flash LRU+RejectX: {n / core_s / 1e6:.2f} M accesses/s "
          f"(call incl. Python {n / call_s / 1e6:.2f} M/s)", file=sys.stderr)
    others = {}
    for name, c in [("lru_admitall", SimConfig(sample_ratio=ratio)),
                    ("fifo_rejectx", SimConfig(sample_ratio=ratio, admission="rejectx",
                                               eviction="fifo")),
                    ("lru_admitall_block_prefetch", SimConfig(sample_ratio=ratio,
                                                              prefetch="block"))]:
        r = simulate(cols, c)
        others[name] = {"accesses_per_s": n / r.metrics["wall_s"],
                        "io_hit_ratio": r.metrics["io_hit_ratio"]}
        print(f"flash {name}: {n / r.metrics['wall_s'] / 1e6:.2f} M accesses/s",
              file=sys.stderr)

    # --- object-cache mode, LRU ------------------------------------------------------------
    rng = np.random.default_rng(2)
    m = args.object_requests
    okeys = (rng.zipf(1.1, m) % (m // 4)).astype(np.uint64)
    osizes = rng.integers(512, 65536, m).astype(np.uint64)
    obj = {}
    for unit, cap in (("bytes", 256 << 20), ("objects", 100_000)):
        call_s, r = best_of(lambda u=unit, c=cap: simulate_objects(okeys, osizes, c, "lru", u),
                            repeats)
        obj[unit] = {"requests": m, "capacity": cap, "core_wall_s": r["wall_s"],
                     "requests_per_s": m / r["wall_s"], "requests_per_s_incl_python": m / call_s,
                     "miss_ratio": r["miss_ratio"]}
        print(f"object LRU ({unit}): {m / r['wall_s'] / 1e6:.2f} M requests/s, "
              f"miss ratio {r['miss_ratio']:.4f}", file=sys.stderr)
    object_lru = {"trace": "numpy Zipf(1.1) keys, sizes 512 B..64 KiB",
                  "target_requests_per_s": 1e7, **obj}

    # --- Rust vs the Python reference on the same traces -------------------------------------
    k = min(args.reference_accesses, n)
    pre = prefix(cols, k)
    rcfg = cfg.replace(warmup_s=0.0)
    ref_s, want = best_of(lambda: ref.simulate(pre["time"], pre["key"], pre["offset"],
                                               pre["size"], pre["op"], rcfg.to_dict()), 1)
    got = simulate(pre, rcfg)
    rust_s = got.metrics["wall_s"]
    agree = all(got.metrics[x] == want["metrics"][x] for x in want["metrics"]
                if not (isinstance(want["metrics"][x], float) and np.isnan(want["metrics"][x])))
    ok_keys = okeys[: min(m, 1_000_000)]
    ok_sizes = osizes[: len(ok_keys)]
    oref_s, owant = best_of(lambda: ref.simulate_objects(ok_keys.tolist(), ok_sizes.tolist(),
                                                         256 << 20, "lru"), 1)
    ogot = simulate_objects(ok_keys, ok_sizes, 256 << 20, "lru")
    vs_reference = {
        "flash_lru_rejectx": {"accesses": k, "python_s": ref_s, "rust_s": rust_s,
                              "speedup": ref_s / rust_s, "metrics_agree": agree},
        "object_lru": {"requests": len(ok_keys), "python_s": oref_s,
                       "rust_s": ogot["wall_s"], "speedup": oref_s / ogot["wall_s"],
                       "hits_agree": ogot["hits"] == owant["hits"]},
    }
    print(f"vs Python reference: flash x{ref_s / rust_s:.0f} (agree={agree}), "
          f"object x{oref_s / ogot['wall_s']:.0f}", file=sys.stderr)

    out = {
        "benchmark": "bench/bench_sim.py", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": {**machine(), "threads_used_by_core": 1},
        "flash_lru_rejectx": flash, "flash_other_policies": others, "object_lru": object_lru,
        "vs_reference": vs_reference,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "targets_met": {
            "flash_5M_accesses_per_s": flash["accesses_per_s"] >= 5e6,
            "object_lru_10M_requests_per_s": obj["bytes"]["requests_per_s"] >= 1e7,
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(out, indent=2) + "\n")
    os.replace(tmp, args.out)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
