"""MLCache: exact stack distances / miss-ratio curves, the partition policies on
generated multi-stream page traces, and the learned network (`flashml mlcache run`).

    .venv/bin/python bench/bench_mlcache.py           # full run, about 10 minutes
    .venv/bin/python bench/bench_mlcache.py --quick   # smaller traces: a smoke test

1. Stack distances (sim/src/mlcache/reuse.rs, Fenwick tree, O(n log n)) in requests per second: on
   Zipf traces of 10^5..10^7 requests and on the CloudPhysics sample; against the slow
   obvious O(n*m) LRU-stack walk (Python, tests/mlcache/test_partitioning.py's reference) on
   small n, and against libCacheSim: its Python bindings have no MRC or stack-distance API, so
   its way to a t-point MRC is t LRU simulations (`object_baselines.run_baselines`, count
   capacity), timed here for the paper's t = 10 points; the points must equal ours.
2. Hit ratios of shared, even, static_optimal, discrete_optimal and previous_optimal (the
   `mlcache` hook fed the previous interval's best split) on generated mixes
   (`flashml.systems.mlcache.multistream.generate_mix`) of 2, 4 and 8 streams at the paper's cache
   sizes (220, 260, 680 pages), several seeds each: reads and writes cached (hit and write-hit
   ratio), and writes only (the paper's Alg. 1: write-hit ratio).
3. What ships (shipped_bench): `flashml mlcache run --streams k --test-mixes 10` for k = 2, 4,
   8 with the job's defaults (previous_optimal compiled into policy.so, intervals of twice
   the pages): write hit ratios on held-out mixes of every policy, the shipped one against
   the best simple rule (shared or even) and previous_optimal.
4. An independent trace (msr_bench): a 4-host MSR-format trace (the four block presets,
   50,000 lines each, merged by time; pages of 4 KiB, a 64 MiB cache = 16,384 pages),
   `flashml mlcache run --trace --format msr --stream-column src_hostname` with the defaults
   and with intervals of 1,000 requests (the earlier default).
5. The network: `flashml mlcache run --policy network --interval 1000 --streams k` for k = 2,
   4, 8 (network_bench): write hit ratios on held-out mixes of even, shared, static_optimal,
   previous_optimal, mlcache (the compiled network) and discrete_optimal, each one's gain
   over even and share of the oracle's gain; the job's time and one flashml_partition
   call's.
6. Flash mode (flash_bench): `flashml mlcache run --trace --flash` (the shipped default) on a
   generated Tectonic-like trace with 4 namespaces (region1-like, seed 3, 300k accesses):
   peak DT, write rate and IO hit ratio of shared, even, static_optimal, discrete_optimal,
   previous_optimal and mlcache with admit-all and at the same write rate (half of
   shared's). `flash_network` in the results: the same with the network (measured before
   the default changed; `--only flash --policy network` measures it again).
   One section alone: `.venv/bin/python bench/bench_mlcache.py --only shipped` (or msr,
   network, flash), merged into the results file.

Writes bench/results/mlcache.json and prints the tables of docs/systems/mlcache.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "mlcache"))  # test_partitioning

from machine import machine  # noqa: E402
from test_partitioning import slow_distances as _slow  # noqa: E402  (the tests' reference)

from flashml.files import atomic_path, dumps, jsonable  # noqa: E402
from flashml.systems.mlcache import partitioning as part  # noqa: E402
from flashml.systems.mlcache.model import previous_optimal_shares  # noqa: E402
from flashml.systems.mlcache.multistream import generate_mix  # noqa: E402
from flashml.systems.mlcache.settings import MlcacheSettings  # noqa: E402

CLOUDPHYSICS = ROOT.parent / "shared" / "traces" / "cloudphysics-sample.csv"
RESULTS = ROOT / "bench" / "results"
CAPACITY = {2: 220, 4: 260, 8: 680}  # pages: the paper's Fig. 8a and §4.1
#: the four trace policies, and `mlcache` fed the previous interval's optimum (the natural
#: non-learned predictor, other-seeds-notes §2.2: the network has to beat it)
POLICIES = (*part.TRACE_POLICIES, "previous_optimal")


def compare_all(trace: part.StreamTrace, capacity: int, interval: int,
                writes_only: bool) -> dict[str, dict[str, Any]]:
    res = part.compare(trace, capacity, interval, writes_only=writes_only)
    shares = previous_optimal_shares(trace, capacity, interval, writes_only)
    res["previous_optimal"] = part.compare(trace, capacity, interval, ("mlcache",),
                                           writes_only=writes_only, shares=shares)["mlcache"]
    return res


def zipf_keys(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.zipf(1.2, n) % max(n // 5, 10)).astype(np.uint64)


def slow_distances(keys: np.ndarray) -> list[int]:
    return _slow(keys.tolist())


def timed(fn, *args, repeat: int = 1) -> tuple[Any, float]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn(*args)
        best = min(best, time.perf_counter() - t0)
    return out, best


def distance_bench(quick: bool) -> dict[str, Any]:
    rows = []
    sizes = (10**5, 10**6) if quick else (10**5, 10**6, 10**7)
    for n in sizes:
        keys = zipf_keys(n)
        _, s = timed(part.stack_distances, keys, repeat=1 if n >= 10**7 else 3)
        grid = np.linspace(0, n // 5, 11).astype(np.uint64)
        _, s_mrc = timed(lambda k=keys, g=grid: part.miss_ratio_curve(part.stack_distances(k), g))
        rows.append({"trace": f"zipf-1.2 n={n}", "requests": n,
                     "distinct": int(np.unique(keys).size), "fast_s": s,
                     "fast_per_s": n / s, "mrc_11_points_s": s_mrc})
    cp = pl.read_csv(CLOUDPHYSICS, schema_overrides={"lbn": pl.UInt64})["lbn"].to_numpy()
    _, s = timed(part.stack_distances, cp, repeat=3)
    rows.append({"trace": "cloudphysics-sample", "requests": len(cp),
                 "distinct": int(np.unique(cp).size), "fast_s": s, "fast_per_s": len(cp) / s})

    slow_rows = []
    for n in (2000, 20000) if not quick else (2000,):
        keys = zipf_keys(n, seed=1)
        slow, s_slow = timed(slow_distances, keys)
        fast, s_fast = timed(part.stack_distances, keys, repeat=5)
        assert fast.tolist() == slow, "fast and slow stack distances differ"
        slow_rows.append({"requests": n, "distinct": int(np.unique(keys).size),
                          "slow_python_s": s_slow, "slow_per_s": n / s_slow,
                          "fast_s": s_fast, "fast_per_s": n / s_fast,
                          "speedup": s_slow / s_fast, "equal": True})

    lcs_rows = []
    try:
        from flashml.systems.mat import object_baselines as ob

        cases = [("cloudphysics-sample", cp)]
        if not quick:
            cases.append(("zipf-1.2 n=1000000", zipf_keys(10**6)))
        for name, keys in cases:
            distinct = int(np.unique(keys).size)
            caps = [max(1, distinct * j // 10) for j in range(1, 11)]
            t0 = time.perf_counter()
            rows_l = ob.run_baselines(keys, np.ones(len(keys), np.uint64), caps, unit="objects",
                                      policies=["lru"], isolate=False)
            s_lcs = time.perf_counter() - t0
            t0 = time.perf_counter()
            ours = part.hit_curve(part.stack_distances(keys), caps)
            s_ours = time.perf_counter() - t0
            same = all(rows_l[c]["lru"]["hits"] == h for c, h in zip(caps, ours, strict=True))
            lcs_rows.append({"trace": name, "requests": len(keys), "points": len(caps),
                             "libcachesim_lru_sims_s": s_lcs,
                             "libcachesim_per_s": len(keys) / s_lcs,
                             "ours_s": s_ours, "ours_per_s": len(keys) / s_ours,
                             "speedup": s_lcs / s_ours, "points_equal": same})
    except ImportError as e:  # libcachesim not installed
        lcs_rows.append({"error": str(e)})
    return {"fast": rows, "slow": slow_rows, "libcachesim": lcs_rows}


def policy_bench(quick: bool) -> dict[str, Any]:
    seeds = (0, 1) if quick else (0, 1, 2, 3, 4)
    requests = 50_000 if quick else 200_000
    interval = MlcacheSettings().interval  # the job's default: one definition
    rows = []
    for k, cap in CAPACITY.items():
        for seed in seeds:
            df, kinds = generate_mix(k, requests, seed=100 * k + seed)
            trace = part.page_requests(df, "namespace")
            both = compare_all(trace, cap, interval, writes_only=False)
            wo = compare_all(trace, cap, interval, writes_only=True)
            rows.append({
                "streams": k, "seed": 100 * k + seed, "kinds": list(kinds), "capacity": cap,
                "interval": interval, "requests": requests,
                "hit_ratio": {p: both[p]["hit_ratio"] for p in POLICIES},
                "write_hit_ratio": {p: both[p]["write_hit_ratio"] for p in POLICIES},
                "writes_only_write_hit_ratio": {p: wo[p]["write_hit_ratio"] for p in POLICIES},
                "discrete_optimal_mean_shares": both["discrete_optimal"]["mean_shares"],
            })
    summary = {}
    for k in CAPACITY:
        mine = [r for r in rows if r["streams"] == k]
        s: dict[str, Any] = {}
        for metric in ("hit_ratio", "write_hit_ratio", "writes_only_write_hit_ratio"):
            s[metric] = {p: float(np.mean([r[metric][p] for r in mine])) for p in POLICIES}
            # the gain of the mean over even's mean (the table), and the mean of the mixes'
            # own gains (larger: a mix where even does badly counts for more)
            s[metric + "_gain_over_even"] = {
                p: s[metric][p] / s[metric]["even"] - 1 for p in POLICIES}
            s[metric + "_mean_gain_of_mixes"] = {
                p: float(np.mean([r[metric][p] / r[metric]["even"] - 1 for r in mine]))
                for p in POLICIES}
        summary[str(k)] = s
    return {"rows": rows, "summary": summary, "interval": interval, "requests": requests}


def network_bench(quick: bool) -> dict[str, Any]:
    """`flashml mlcache run --streams k` for k = 2, 4, 8 at the paper's cache sizes, as a user
    runs it (a fresh interpreter and state folder each): the network trained on generated
    mixes (seeds 0..), judged on held-out ones (seeds 10000..) beside even, the oracle and
    previous_optimal on the same mixes; the time of the job and of one flashml_partition
    call (from Python through ctypes: an upper bound on the C call)."""
    import subprocess
    import tempfile

    from flashml.compiler.loader import PolicyLibrary
    from flashml.features.partition import contract
    from flashml.systems.mlcache.settings import TEST_SEED

    out: dict[str, Any] = {}
    extra = ["--policy", "network", "--interval", "1000"] + (
        ["--requests", "50000", "--train-mixes", "6", "--test-mixes", "2", "--max-iter",
         "60", "--folds", "2"] if quick else ["--test-mixes", "10"])
    for k in CAPACITY:
        with tempfile.TemporaryDirectory() as tmp:
            env = {**os.environ, "FLASHML_HOME": f"{tmp}/state", "MLFLOW_TRACKING_URI": ""}
            t0 = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "flashml.cli", "mlcache", "run",
                                   "--streams", str(k), "--out", f"{tmp}/run", *extra],
                                  capture_output=True, text=True, env=env)
            wall = time.perf_counter() - t0
            if proc.returncode != 0:
                raise SystemExit(f"mlcache run --streams {k} failed:\n{proc.stderr[-3000:]}")
            summ = json.loads(Path(f"{tmp}/run/summary.json").read_text())
            lib = PolicyLibrary(Path(f"{tmp}/run/compiled/policy.so"), need="partition")
            x = np.random.default_rng(0).random((20000, contract().num_features)) * 0.1
            t1 = time.perf_counter()
            lib.partition(x, k)
            per_call = (time.perf_counter() - t1) / len(x)
            # from C: the runtime's own timing of each flashml_partition call, on a held-out
            # mix re-divided every 50 requests (many calls)
            mix = part.page_requests(generate_mix(k, 50_000, TEST_SEED)[0], "namespace")
            part.write_page_csv(mix, f"{tmp}/pages.csv")
            rt = subprocess.run([str(ROOT / "runtime" / "build" / "flashrt"), "partition-replay",
                                 "--bundle", f"{tmp}/run/compiled", "--trace",
                                 f"{tmp}/pages.csv", "--capacity", str(CAPACITY[k]),
                                 "--interval", "50", "--writes-only", "--no-data", "--json"],
                                capture_output=True, text=True, check=True)
            c_ns = json.loads(rt.stdout)["partition_ns_mean"]
        per = summ["per_trace"].values()
        wh = [(t["policies"]["mlcache"]["write_hit_ratio"],
               t["policies"]["even"]["write_hit_ratio"]) for t in per]
        out[str(k)] = {"capacity": summ["capacity"], "job_wall_s": wall,
                       "mixes_mlcache_above_even": sum(m > e for m, e in wh),
                       "mixes": len(wh),
                       "policies": summ["policies"], "network": summ["network"],
                       "judged": [j["name"] for j in summ["judged"]],
                       "so_vs_python_max_abs": summ["so_vs_python_max_abs"],
                       "partition_call_us_via_ctypes": per_call * 1e6,
                       "partition_call_us_from_c": c_ns / 1e3}
    return out


#: Flash mode's cache, in segments at trace scale (= the network's pages). On the 300k-access
#: region1-like trace (about 6.8M GET segments, 3 days), shared LRU's IO hit ratio is about
#: 0.09 at 250 segments, 0.33 at 1000, 0.48 at 2000, 0.65 at the default 366.475 GB (about
#: 14k segments): at 1000 the three reading namespaces compete (one of them holds 2/3 of the
#: GETs, the best fixed split gives it 90%) while the cache still hits, and the generated
#: training mixes (working sets of ~50..4000 pages) are not all cached whole at that size.
FLASH_CAPACITY = 1000


def flash_bench(quick: bool, policy: str = "previous_optimal") -> dict[str, Any]:
    """`flashml mlcache run --trace --flash` on a region1-like trace (4 namespaces, one of
    which only writes), as a user runs it: the flash table (module doc, 6.) and the job's
    wall time."""
    import subprocess
    import tempfile

    from flashml.trace.generate import generate_trace

    accesses = 60_000 if quick else 300_000
    extra = ["--policy", policy] + (
        ["--requests", "50000", "--train-mixes", "6", "--max-iter", "60", "--folds", "2"]
        if quick and policy == "network" else []) + (
        ["--interval", "1000"] if policy == "network" else [])
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "region1.trace"
        generate_trace("region1-like", 3, trace, accesses=accesses, progress=False)
        env = {**os.environ, "FLASHML_HOME": f"{tmp}/state", "MLFLOW_TRACKING_URI": ""}
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "flashml.cli", "mlcache", "run",
                               "--trace", str(trace), "--stream-column", "namespace",
                               "--flash", "--capacity", str(FLASH_CAPACITY),
                               "--out", f"{tmp}/run", *extra],
                              capture_output=True, text=True, env=env)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise SystemExit(f"mlcache run --flash failed:\n{proc.stderr[-3000:]}")
        summ = json.loads(Path(f"{tmp}/run/summary.json").read_text())
    return {"trace": f"region1-like seed 3, {accesses} accesses", "job_wall_s": wall,
            "policy": policy, "capacity_segments": FLASH_CAPACITY, "flash": summ["flash"],
            "object_mode": summ["policies"], "network": summ.get("network"),
            "text": proc.stdout.strip().splitlines()[-12:]}


def _job(args: list[str], tmp: str) -> tuple[dict[str, Any], float, str]:
    """`flashml mlcache run ARGS --out TMP/run` as a user runs it (a fresh interpreter and
    state folder): its summary, wall time and text output."""
    import subprocess

    env = {**os.environ, "FLASHML_HOME": f"{tmp}/state", "MLFLOW_TRACKING_URI": ""}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "flashml.cli", "mlcache", "run", *args,
                           "--out", f"{tmp}/run"], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"mlcache run {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    return json.loads(Path(f"{tmp}/run/summary.json").read_text()), wall, proc.stdout


def _shipped_record(summ: dict[str, Any], wall: float, text: str) -> dict[str, Any]:
    return {"capacity": summ["capacity"], "interval": summ["interval"],
            "interval_from": summ["interval_from"], "job_wall_s": wall,
            "shipped": summ["shipped"]["rule"], "policies": summ["policies"],
            "verdict": summ["verdict"], "judged": [j["name"] for j in summ["judged"]],
            "per_trace_verdicts": {n: _verdict(r["policies"])
                                   for n, r in summ["per_trace"].items()},
            "so_vs_python_max_abs": summ["so_vs_python_max_abs"],
            "text": text.strip().splitlines()[-4:]}


def _verdict(policies: dict[str, Any]) -> dict[str, Any]:
    from flashml.systems.mlcache.report import headline

    return headline(policies)


def shipped_bench(quick: bool) -> dict[str, Any]:
    """`flashml mlcache run --streams k --test-mixes 10` (the defaults otherwise) for k = 2,
    4, 8: what ships, judged on held-out mixes (module doc, 3.)."""
    import tempfile

    extra = ["--requests", "50000", "--test-mixes", "2"] if quick else ["--test-mixes", "10"]
    out: dict[str, Any] = {}
    for k in CAPACITY:
        with tempfile.TemporaryDirectory() as tmp:
            out[str(k)] = _shipped_record(*_job(["--streams", str(k), *extra], tmp))
    return out


#: The independent trace: four block presets as four hosts of one MSR-format trace.
MSR_LINES = 200_000
MSR_CACHE = "64MiB"
MSR_PAGE = 4096


def msr_trace(path: Path, lines: int) -> Path:
    """A 4-host MSR Cambridge CSV: each block preset (flashml/systems/pannier/blockgen.py) one
    host of lines / 4 requests (seeds 100..103), merged by timestamp."""
    from flashml.files import atomic_path
    from flashml.systems.pannier.blockgen import BLOCK_PRESETS, write_block_msr

    rows: list[tuple[int, str]] = []
    for i, name in enumerate(BLOCK_PRESETS):
        part = path.with_name(f"{name}.csv")
        write_block_msr(BLOCK_PRESETS[name], 100 + i, part, requests=lines // 4)
        rows += [(int(r.split(",", 1)[0]), r) for r in part.read_text().splitlines()[1:]]
        part.unlink()
    rows.sort(key=lambda r: r[0])
    with atomic_path(path) as tmp:
        Path(tmp).write_text("Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime\n"
                             + "\n".join(r for _, r in rows) + "\n")
    return path


def msr_bench(quick: bool) -> dict[str, Any]:
    """The shipped default on an independent 4-host MSR-format trace, with the default
    interval and with 1,000 requests (module doc, 4.)."""
    import tempfile

    lines = 40_000 if quick else MSR_LINES
    out: dict[str, Any] = {"trace": f"4 hosts ({', '.join(_hosts())}), {lines} lines, "
                                    f"pages of {MSR_PAGE} B, cache {MSR_CACHE}",
                           "lines": lines, "runs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        trace = msr_trace(Path(tmp) / "msr4.csv", lines)
        base = ["--trace", str(trace), "--format", "msr", "--stream-column", "src_hostname",
                "--page-bytes", str(MSR_PAGE), "--cache-size", MSR_CACHE]
        for name, more in (("default", []), ("interval_1000", ["--interval", "1000"])):
            with tempfile.TemporaryDirectory(dir=tmp) as run_tmp:
                out["runs"][name] = _shipped_record(*_job([*base, *more], run_tmp))
    return out


def _hosts() -> list[str]:
    from flashml.systems.pannier.blockgen import BLOCK_PRESETS

    return [n.replace("-", "_") for n in BLOCK_PRESETS]


def shipped_table(res: dict[str, Any]) -> str:
    pols = ("shared", "even", "static_optimal", "previous_optimal", "mlcache",
            "discrete_optimal")
    lines = ["| judged on (pages, interval) | " + " | ".join(pols) +
             " | mlcache vs the best simple rule |", "|---|" + "---:|" * (len(pols) + 1)]
    rows = [(f"{k} streams, 10 held-out mixes ({r['capacity']}, {r['interval']})", r)
            for k, r in res.get("shipped", {}).items()]
    rows += [(f"4-host MSR-like trace ({r['capacity']}, {r['interval']})", r)
             for r in res.get("msr", {}).get("runs", {}).values()]
    for label, r in rows:
        cells = [f"{r['policies'][p]['write_hit_ratio']:.3f}" for p in pols]
        v = r["verdict"]
        lines.append(f"| {label} | " + " | ".join(cells) +
                     f" | {100 * v['vs_rival']:+.1f}% vs {v['rival']} |")
    return "\n".join(lines)


def flash_table(res: dict[str, Any]) -> str:
    f = res["flash"]
    lines = ["| policy | peak DT (admit-all) | write MB/s | IO hit | p (same rate) | write MB/s "
             "| peak DT (same rate) | IO hit |", "|---|" + "---:|" * 7]
    for p, r in f["policies"].items():
        q = f["same_write_rate"][p]
        lines.append(f"| {p} | {r['peak_dt_util']:.4f} | {r['flash_write_rate_mbps']:.1f} | "
                     f"{r['io_hit_ratio']:.3f} | {q['p']:.4f} | "
                     f"{q['achieved_write_mbps']:.1f} | {q['peak_dt_util']:.4f} | "
                     f"{q['io_hit_ratio']:.3f} |")
    return "\n".join(lines)


def network_table(net: dict[str, Any]) -> str:
    pols = ("even", "shared", "static_optimal", "previous_optimal", "mlcache",
            "discrete_optimal")
    lines = ["| streams (pages) | " + " | ".join(pols) + " | network | job |",
             "|---|" + "---:|" * len(pols) + "---|---:|"]
    for k, r in net.items():
        cells = [f"{r['policies'][p]['write_hit_ratio']:.3f}" + (
            "" if p == "even" else f" ({100 * r['policies'][p]['gain_over_even']:+.0f}%, "
            f"{100 * r['policies'][p]['oracle_gain_fraction']:.0f}%)") for p in pols]
        lines.append(f"| {k} ({r['capacity']}) | " + " | ".join(cells) +
                     f" | {r['network']['hidden']} | {r['job_wall_s']:.0f} s |")
    return "\n".join(lines)


def table(res: dict[str, Any]) -> str:
    lines = ["| streams (pages) | metric | " + " | ".join(POLICIES) + " |",
             "|---|---|" + "---:|" * len(POLICIES)]
    for k, s in res["policies"]["summary"].items():
        for metric, label in (("hit_ratio", "hit ratio (reads + writes)"),
                              ("write_hit_ratio", "write hit ratio (reads + writes)"),
                              ("writes_only_write_hit_ratio", "write hit ratio (writes only)")):
            cells = [f"{s[metric][p]:.3f}" + (
                "" if p == "even" else f" ({100 * s[metric + '_gain_over_even'][p]:+.0f}%)")
                for p in POLICIES]
            lines.append(f"| {k} ({CAPACITY[int(k)]}) | {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller traces (a smoke test)")
    ap.add_argument("-o", "--output", type=Path, default=RESULTS / "mlcache.json")
    ap.add_argument("--only", choices=("shipped", "msr", "network", "flash"), default=None,
                    help="run one section and merge it into the results file")
    ap.add_argument("--policy", choices=("previous_optimal", "network"),
                    default="previous_optimal",
                    help="--only flash: the policy the job ships (network: the results' "
                    "flash_network section)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    if args.only is not None:
        old = json.loads(args.output.read_text()) if args.output.is_file() else {}
        section = args.only
        bench, show = {"shipped": (shipped_bench, lambda r: shipped_table({"shipped": r})),
                       "msr": (msr_bench, lambda r: shipped_table({"msr": r})),
                       "network": (network_bench, network_table),
                       "flash": (lambda q: flash_bench(q, args.policy), flash_table)}[section]
        if section == "flash" and args.policy == "network":
            section = "flash_network"
        old[section] = bench(args.quick)
        old.setdefault("section_machine", {})[section] = machine()
        with atomic_path(args.output) as tmp:
            Path(tmp).write_text(dumps(jsonable(old), indent=1) + "\n")
        print(show(old[section]))
        print(f"wrote {args.output} ({section}) in {time.perf_counter() - t0:.0f} s")
        return 0
    res = {"machine": machine(), "quick": args.quick,
           "stack_distances": distance_bench(args.quick),
           "policies": policy_bench(args.quick),
           "shipped": shipped_bench(args.quick),
           "msr": msr_bench(args.quick),
           "network": network_bench(args.quick),
           "flash": flash_bench(args.quick),
           "flash_network": flash_bench(args.quick, "network")}
    res["wall_s"] = time.perf_counter() - t0
    with atomic_path(args.output) as tmp:
        Path(tmp).write_text(dumps(jsonable(res), indent=1) + "\n")
    for r in res["stack_distances"]["fast"]:
        print(f"{r['trace']:>24}: {r['fast_per_s'] / 1e6:7.2f} M requests/s ({r['fast_s']:.3f} s)")
    for r in res["stack_distances"]["slow"]:
        print(f"slow O(n*m) n={r['requests']}: {r['slow_per_s']:.0f}/s; fast {r['speedup']:.0f}x")
    for r in res["stack_distances"]["libcachesim"]:
        print("libcachesim:", json.dumps(r))
    print(table(res))
    print(shipped_table(res))
    print(network_table(res["network"]))
    print(flash_table(res["flash"]))
    print(f"wrote {args.output} in {res['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
