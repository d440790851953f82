"""C runtime benchmark (runtime/, `flashrt replay`): decision and hit-path latency, throughput,
and agreement with the simulator, with a real compiled policy (demo LightGBM models trained on
the trace by demo_policy, compiled by `flashml compile`).

    .venv/bin/python bench/bench_runtime.py            # ~1-2 minutes
    .venv/bin/python bench/bench_runtime.py --quick    # smaller trace

The trace: `flashml trace generate --preset region1-like` cut to every 3rd block id with IOs of
at most 1 MiB (so the backing file stays a few GB, sparse). Figures go to
bench/results/runtime.json:
  agreement:   io_hit_ratio and flash_write_rate_mbps of replay vs `flashml sim run --policy`
               on the same trace, policy and capacity (target: within 2%)
  latency:     decision_ns_p50 in replay, the median of REPEATS page-cache replays
               (features + flashml_policy_decide_at on each miss,
               with the policy's prefetch hints; without_hint: --no-policy-prefetch) and the
               .so alone in a warm loop (target <= 1 us); hit_path_us_p50 and
               hit_overhead_us_p50 = p50 of (hit path - raw read of the same flash bytes, same
               device), from a --measure-raw replay (target <= 5 us)
  throughput:  accesses/s and MB/s served (verified) from file-backed devices: first_touch
               (the backing file read from disk into the page cache), page cache, O_DIRECT
Runs, in order: first_touch, page_cache, page_cache_measure_raw, page_cache_no_hint,
direct_io, then REPEATS - 1 more page-cache replays (each on a fresh flash file).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from machine import machine

ROOT = Path(__file__).resolve().parents[1]
FLASHRT = ROOT / "runtime" / "build" / "flashrt"
#: Page-cache replays whose median decision latency is reported.
REPEATS = 5
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "runtime"))  # test_runtime


def sh(*args, **kw) -> subprocess.CompletedProcess[str]:
    p = subprocess.run([str(a) for a in args], capture_output=True, text=True, cwd=ROOT, **kw)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, args))} failed:\n{p.stdout}\n{p.stderr}")
    return p


WARM_DECISION_C = r"""
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>
/* warm-cache decision, the same rows two ways: admit score + when score + range as
 * separate calls, and flashml_policy_decide (what replay calls); prints ns per row of each */
int main(int argc, char **argv) {
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) return 1;
    double (*adm)(const double *) = (double (*)(const double *))dlsym(h, "flashml_admit_score");
    double (*when)(const double *) =
        (double (*)(const double *))dlsym(h, "flashml_prefetch_when_score");
    void (*rng)(const double *, int32_t *, int32_t *) =
        (void (*)(const double *, int32_t *, int32_t *))dlsym(h, "flashml_prefetch_range");
    int (*dec)(const double *, int32_t *, int32_t *) =
        (int (*)(const double *, int32_t *, int32_t *))dlsym(h, "flashml_policy_decide");
    if (!adm || !when || !rng || !dec) return 1;
    double x[18] = {1, 1, 1, 3, 10, 1310720, 2, 0, 1, 0, 0, 0, 5, 0, 2, 0, 0, 0};
    struct timespec a, b;
    double s = 0;
    int32_t lo = 0, hi = 0;
    const int n = 200000;
    for (int way = 0; way < 2; way++) {
        clock_gettime(CLOCK_MONOTONIC, &a);
        for (int i = 0; i < n; i++) {
            x[6] = i % 7; x[3] = i % 50; x[4] = x[3] + i % 9;
            if (way == 0) {
                s += adm(x) + when(x);
                rng(x, &lo, &hi);
            } else {
                s += dec(x, &lo, &hi);
            }
            s += lo;
        }
        clock_gettime(CLOCK_MONOTONIC, &b);
        printf("%.3f ", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n);
    }
    printf("%g\n", s);
    return 0;
}
"""


def warm_decision_ns(policy_so: Path, tmp: Path) -> tuple[float, float]:
    """ns per row in a warm loop: (separate calls, flashml_policy_decide)."""
    src, exe = tmp / "warm.c", tmp / "warm"
    src.write_text(WARM_DECISION_C)
    sh("cc", "-O2", src, "-o", exe, "-ldl")
    separate, decide, _ = sh(exe, policy_so).stdout.split()
    return float(separate), float(decide)


def prepare_replay_inputs(d: Path, accesses: int) -> tuple[Path, dict[str, Any]]:
    """The replay benches' inputs in `d`: a `region1-like` trace of `accesses` (every third
    line, IOs up to 1 MiB) as d/bench.trace, its backing d/backing.img, and the demo admission
    policy compiled into d/policy; returns the trace and prepare-backing's statistics."""
    from test_runtime import small_trace

    from flashml.trace.ingest import load_trace

    from demo_policy import write_demo_bundle

    raw, trace = d / "gen.trace", d / "bench.trace"
    sh(sys.executable, "-m", "flashml.cli", "trace", "generate", "--preset", "region1-like",
       "--seed", "0", "--accesses", accesses, "--days", "2", "--quiet", "-o", raw)
    small_trace(raw, trace, keep_every=3, max_size=1 << 20)
    prep = json.loads(sh(FLASHRT, "prepare-backing", "--backing", d / "backing.img",
                         "--trace", trace).stdout)
    df, _ = load_trace(trace, "tectonic")
    write_demo_bundle(df, d / "models")
    sh(sys.executable, "-m", "flashml.cli", "compile", "--model-dir", d / "models", "-o",
       d / "policy", "--no-log")
    return trace, prep


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "runtime.json"))
    args = ap.parse_args()
    sh("make", "-s", "-C", "runtime", "all")
    accesses = 8000 if args.quick else 24000
    flash_bytes = 96 << 20
    with tempfile.TemporaryDirectory(prefix="bench-runtime-", dir=os.environ.get("TMPDIR")) as d:
        d = Path(d)
        trace, prep = prepare_replay_inputs(d, accesses)
        common = ["--trace", trace, "--flash-bytes", flash_bytes, "--backing",
                  d / "backing.img", "--warmup-s", "0", "--json"]
        runs = {}
        # the first replay reads the backing file from disk into the page cache: its
        # throughput is reported as first_touch, the other runs find the backing cached
        for name, extra in (("first_touch", ["--direct", "off"]),
                            ("page_cache", ["--direct", "off"]),
                            ("page_cache_measure_raw", ["--direct", "off", "--measure-raw"]),
                            ("page_cache_no_hint", ["--direct", "off", "--no-policy-prefetch"]),
                            ("direct_io", ["--direct", "auto"])):
            p = subprocess.run([str(FLASHRT), "replay", "--policy", str(d / "policy"),
                                "--flash", str(d / f"flash-{name}.img"),
                                *map(str, common), *extra],
                               capture_output=True, text=True)
            if p.returncode != 0:
                raise SystemExit(f"replay failed ({p.returncode}): {p.stderr}")
            runs[name] = json.loads(p.stdout)
        m = runs["page_cache"]
        # the decision latency swings between runs on a shared VM: the page-cache replay is
        # repeated and the median of the runs' p50s is the figure (all runs are kept)
        repeats = [m]
        for i in range(REPEATS - 1):
            p = subprocess.run([str(FLASHRT), "replay", "--policy", str(d / "policy"),
                                "--flash", str(d / f"flash-repeat-{i}.img"),
                                *map(str, common), "--direct", "off"],
                               capture_output=True, text=True)
            if p.returncode != 0:
                raise SystemExit(f"replay failed ({p.returncode}): {p.stderr}")
            repeats.append(json.loads(p.stdout))
        med = {k: statistics.median(r[k] for r in repeats)
               for k in ("decision_ns_p50", "features_ns_p50", "policy_ns_p50")}
        raw = runs["page_cache_measure_raw"]  # hits also re-read their bytes raw, timed
        warm_separate_ns, warm_decide_ns = warm_decision_ns(d / "policy" / "policy.so", d)
        sim = json.loads(sh(sys.executable, "-m", "flashml.cli", "sim", "run", "--trace", trace,
                            "--policy", d / "policy", "--capacity-segments",
                            m["capacity_segments"], "--warmup-s", "0", "--json").stdout)
        agree = {}
        for k in ("io_hit_ratio", "flash_write_rate_mbps", "byte_hit_ratio",
                  "segment_hit_ratio", "peak_dt_util", "admitted_segments",
                  "prefetched_segments"):
            agree[k] = {"runtime": m[k], "simulator": sim[k],
                        "rel_diff": abs(m[k] - sim[k]) / sim[k] if sim[k] else None}
        result = {
            "trace": {"preset": "region1-like", "seed": 0, "generated_accesses": accesses,
                      "kept": "every 3rd block id, IOs <= 1 MiB", "accesses": m["accesses"],
                      "gets": m["gets"], "blocks": prep["blocks"],
                      "backing_bytes_written": prep["bytes_written"],
                      "sample_ratio": m["sample_ratio"]},
            "policy": "demo_policy models (LightGBM, 20 trees) via flashml compile",
            "cache": {"flash_bytes": flash_bytes, "region_bytes": m["region_bytes"],
                      "regions": m["regions"], "capacity_segments": m["capacity_segments"],
                      "eviction": "lru"},
            "agreement": agree,
            "agreement_within_2pct": all(agree[k]["rel_diff"] <= 0.02
                                         for k in ("io_hit_ratio", "flash_write_rate_mbps")),
            "latency": {
                "decision_ns_p50": med["decision_ns_p50"],
                "decision_ns_p50_runs": [r["decision_ns_p50"] for r in repeats],
                "decision_ns_p99": m["decision_ns_p99"],
                "policy_ns_warm_mean_decide": warm_decide_ns,
                "policy_ns_warm_mean_separate_calls": warm_separate_ns,
                "features_ns_p50": med["features_ns_p50"], "policy_ns_p50": med["policy_ns_p50"],
                "policy_prefetch_hint_ns_p50": m["policy_prefetch_ns_p50"],
                "without_hint": {k: runs["page_cache_no_hint"][k] for k in
                                 ("decision_ns_p50", "features_ns_p50", "policy_ns_p50")},
                "decision_note": f"median over {REPEATS} page-cache replays (each run's p50 in "
                                 "decision_ns_p50_runs; features_ns_p50 and policy_ns_p50 "
                                 "likewise medians); "
                                 "decision_ns_p50 is measured inside replay on each miss "
                                 "(features from the count-min tracker + the policy's "
                                 "flashml_policy_decide_at: admit + when + range), after the "
                                 "previous access streamed MBs through the CPU caches "
                                 "(features_ns, policy_ns: its parts); the policy's prefetch "
                                 "hint runs when each GET arrives and between accesses "
                                 "(flashrt_idle; its own cost per call: "
                                 "policy_prefetch_hint_ns_p50; without_hint: the same replay "
                                 "with --no-policy-prefetch); policy_ns_warm_mean_*: the .so "
                                 "alone in a loop, decide vs the separate ABI calls",
                "decision_ns_p50_measure_raw": raw["decision_ns_p50"],
                "hit_path_us_p50": raw["hit_path_us_p50"],
                "raw_read_us_p50": raw["raw_read_us_p50"],
                "hit_overhead_us_p50": raw["hit_overhead_us_p50"],
                "hit_note": "hit_path_us_p50, raw_read_us_p50 and hit_overhead_us_p50 come "
                            "from a replay with --measure-raw (each hit also re-reads its "
                            "bytes raw from the flash file, alternately before and after the "
                            "served read); its decision_ns_p50_measure_raw is higher because "
                            "of that extra IO",
                "miss_path_us_p50": m["miss_path_us_p50"],
                "decision_ns_p50_direct_io": runs["direct_io"]["decision_ns_p50"],
                "hit_path_us_p50_direct_io": runs["direct_io"]["hit_path_us_p50"],
                "backend_wall_ms_p50": m["backend_wall_ms_p50"],
                "backend_dt_ms_p50_modelled": m["backend_dt_ms_p50"],
            },
            "throughput": {
                name: {"accesses_per_s": r["throughput_accesses_per_s"],
                       "mb_per_s_served_verified": r["throughput_mb_per_s"],
                       "direct_io": bool(r["direct_io"]), "wall_s": r["wall_s"]}
                for name, r in runs.items()},
            "integrity_errors": sum(r["integrity_errors"] for r in runs.values()),
            "device_errors": sum(r["device_errors"] for r in runs.values()),
            "machine": {**machine(), "platform": platform.platform()},
        }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n")
    os.replace(tmp, out)
    print(json.dumps({k: result[k] for k in ("agreement_within_2pct", "latency",
                                             "integrity_errors")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
