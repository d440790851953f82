"""Object-cache eviction baselines for MAT (issue 16): libCacheSim's policies (the `libcachesim`
package, libCacheSim's own bindings) beside our simulator's, on the real CloudPhysics sample
and the generated object presets, at several cache sizes.

    .venv/bin/python bench/bench_mat.py            # full run, ~10 minutes on 2 cores (LRB)
    .venv/bin/python bench/bench_mat.py --quick    # small traces, no LRB: a smoke test

For each trace (CloudPhysics sample; cdn-like and kv-like at their default size, seed 0) and
each cache size (fractions of the trace's unique bytes: --fractions, default 1%, 5%, 10%):
every policy of flashml.policies.object_baselines.POLICIES (lru, fifo, lfu, arc, s3fifo,
sieve, lhd, lrb, glcache, belady, belady-size) run by libCacheSim, and our simulator's lru,
fifo and belady (flashml.simulation.simulate_objects) side by side, with whether they agree
exactly (hit counts). Rows of MAT, or any other policy of ours, come from `extra_policies`
(the hook below). Writes bench/results/mat.json and the miss-ratio-vs-size plot
bench/results/mat_miss_ratio.png, and prints the tables of docs/measurements.md (object-cache
baselines).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from machine import machine  # noqa: E402

from flashml.policies import object_baselines as ob  # noqa: E402
from flashml.simulation import simulate_objects  # noqa: E402
from flashml.trace.generate import generate_trace  # noqa: E402
from flashml.trace.objects import read_objects  # noqa: E402

CLOUDPHYSICS = ROOT.parent / "shared" / "traces" / "cloudphysics-sample.csv"
RESULTS = ROOT / "bench" / "results"
OURS = ("lru", "fifo", "belady")  # policies our simulator has as well as libCacheSim
FRACTIONS = (0.01, 0.05, 0.10)
PRESETS = ("cdn-like", "kv-like")


@dataclass
class TraceCase:
    """One trace of the benchmark: its requests and where they came from."""

    name: str
    source: str
    df: pl.DataFrame  # key, size[, time]
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def unique_bytes(self) -> int:
        return int(self.df.unique("key")["size"].sum())


# ==========================================================================================
# HOOK: rows of our own learned policies (MAT, issue 16) go here.
#
# `extra_policies(trace, capacity, unit)` returns {policy name: row} for one trace and one
# cache size, where a row has at least `miss_ratio` and `byte_miss_ratio` (and, for MAT,
# `predictions_per_eviction`, `ns_per_eviction`). The benchmark puts the rows beside
# libCacheSim's in bench/results/mat.json, the docs table and the plot (a policy named
# `mat` is drawn bold). It returns {} until `flashml mat` lands; its owner fills it in,
# e.g. by training on the trace's first window and simulating with the compiled bundle.
# ==========================================================================================
def extra_policies(trace: TraceCase, capacity: int, unit: str) -> dict[str, dict[str, Any]]:
    """MAT's row at `capacity` (bytes, or objects) on `trace`: `flashml mat run`'s job
    (flashml/jobs/mat.py) with its defaults at this one capacity: trained on the first 30%
    of the requests, T0, k and the model size tuned on the next 20%, judged on the whole
    trace (the row's miss ratios, comparable with libCacheSim's) and on the held-out last
    50%; and its periodic-retraining emulation (4 windows, each of windows 1-3 judged by a
    model trained on MAT's own tail in the window before)."""
    from flashml.jobs import mat
    from flashml.jobs.run import run_job

    with tempfile.TemporaryDirectory(prefix="flashml-bench-mat-job-") as tmp:
        src = Path(tmp) / "objects.parquet"
        trace.df.select("key", "size").write_parquet(src)
        cap = f"{capacity}obj" if unit == "objects" else f"{capacity}B"
        s = mat.MatSettings(trace=src, format="parquet", capacities=(cap,), baselines=())
        if "FLASHML_HOME" not in os.environ:  # MLflow/Optuna state for the whole benchmark
            os.environ["FLASHML_HOME"] = tempfile.mkdtemp(prefix="flashml-bench-mat-state-")
        summary, _, _ = run_job(mat, s, Path(tmp) / "run")
    res = summary["per_capacity"][cap]
    pol = res["policies"]
    keep = ("miss_ratio", "byte_miss_ratio", "held_out_miss_ratio", "predictions_per_eviction",
            "candidates_per_eviction", "ns_per_eviction", "reinsertions")
    tuned = summary["tuned"][cap]
    row = {**{k: pol["mat"].get(k) for k in keep},
           "lru_held_out_miss_ratio": pol["lru"]["held_out_miss_ratio"],
           "model_size": res["model_size"], "k": tuned["k"],
           "controller": s.mat.controller, "reuse_predictions": s.mat.reuse_predictions,
           "initial_threshold": tuned["initial_threshold"],
           "val_predictions_per_eviction": tuned.get("predictions_per_eviction")}
    if "periodic" in res:
        per = res["periodic"]
        row |= {"periodic_miss_ratio": per["mat_miss_ratio"],
                "periodic_lru_miss_ratio": per["lru_miss_ratio"],
                "periodic_predictions_per_eviction": per["predictions_per_eviction"],
                "periodic_window_requests": summary["periodic_window_requests"],
                "periodic_windows": per["windows"]}
    return {"mat": row}


def load_traces(presets: tuple[str, ...], accesses: int | None, tmp: Path) -> list[TraceCase]:
    cases = []
    if CLOUDPHYSICS.exists():
        cases.append(TraceCase("cloudphysics", f"{CLOUDPHYSICS.name} (real, libCacheSim's "
                               "CloudPhysics sample; key = lbn)",
                               read_objects(CLOUDPHYSICS, "cloudphysics")))
    else:
        print(f"warning: {CLOUDPHYSICS} missing, skipped", file=sys.stderr)
    for name in presets:
        path = tmp / f"{name}.csv"
        info = generate_trace(name, 0, path, accesses=accesses, progress=False)
        info.pop("path")
        cases.append(TraceCase(name, f"flashml trace generate --preset {name} --seed 0"
                               + (f" --accesses {accesses}" if accesses else ""),
                               read_objects(path, "objects-csv"), info))
    return cases


def ours(case: TraceCase, capacity: int, unit: str) -> dict[str, dict[str, Any]]:
    out = {}
    for p in OURS:
        r = simulate_objects(case.df["key"], case.df["size"], capacity, p, unit)
        out[p] = {"miss_ratio": r["miss_ratio"], "byte_miss_ratio": r["byte_miss_ratio"],
                  "hits": r["hits"], "seconds": r["wall_s"]}
    return out


def run_case(case: TraceCase, fractions: tuple[float, ...], policies: tuple[str, ...],
             unit: str, jobs: int, timeout_s: float | None) -> dict[str, Any]:
    df = case.df
    total = case.unique_bytes if unit == "bytes" else df["key"].n_unique()
    caps = [max(1, int(f * total)) for f in fractions]
    t0 = time.perf_counter()
    lcs_rows = ob.run_baselines(df["key"], df["size"], caps, unit=unit, policies=policies,
                                times=df["time"] if "time" in df.columns else None, jobs=jobs,
                                timeout_s=timeout_s)
    sizes = []
    for f, c in zip(fractions, caps, strict=True):
        mine = ours(case, c, unit)
        agree = {p: lcs_rows[c][p].get("hits") == mine[p]["hits"]
                 for p in OURS if p in lcs_rows[c]}
        sizes.append({"fraction": f, "capacity": c, "unit": unit,
                      "libcachesim": lcs_rows[c], "ours": mine, "ours_equal_libcachesim": agree,
                      "extra": extra_policies(case, c, unit)})
        line = ", ".join(f"{p} {r['miss_ratio']:.4f}" if "miss_ratio" in r else f"{p} ERROR"
                         for p, r in lcs_rows[c].items())
        print(f"  {case.name} {100 * f:g}% ({c:,} {unit}): {line}", file=sys.stderr)
    return {"source": case.source, "requests": df.height, "objects": df["key"].n_unique(),
            "unique_bytes": case.unique_bytes, "generate": case.info, "sizes": sizes,
            "wall_s": time.perf_counter() - t0}


def plot(results: dict[str, Any], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    fig, axes = plt.subplots(1, len(names), figsize=(5.2 * len(names), 4.4), dpi=110,
                             squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        sizes = results[name]["sizes"]
        x = [100 * s["fraction"] for s in sizes]
        curves: dict[str, list[float]] = {}
        for s in sizes:
            for p, r in {**s["libcachesim"], **s["extra"]}.items():
                curves.setdefault(p, []).append(r.get("miss_ratio", np.nan))
        colours = plt.get_cmap("tab20").colors
        for i, (p, y) in enumerate(curves.items()):
            ax.plot(x, y, marker="o", ms=3, lw=2.4 if p == "mat" else 1.1, label=p,
                    ls="--" if p.startswith("belady") else "-", color=colours[i % 20])
        for p, mk in (("lru", "x"), ("fifo", "+")):
            ax.plot(x, [s["ours"][p]["miss_ratio"] for s in sizes], ls="none", marker=mk,
                    ms=9, color="black", label=f"{p} (ours)")
        ax.set_xscale("log")
        ax.set_xticks(x, [f"{v:g}%" for v in x])
        ax.set_xlabel("cache size (% of unique bytes)")
        ax.set_ylabel("miss ratio")
        ax.set_title(f"{name} ({results[name]['requests']:,} requests)")
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7, ncol=2, loc="best")
    fig.suptitle("Object-cache miss ratio vs cache size: libCacheSim's policies and ours")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out


def markdown(results: dict[str, Any], metric: str = "miss_ratio") -> str:
    """A docs table (docs/measurements.md) of `metric` (miss_ratio or byte_miss_ratio) per
    trace, size and policy; the best of each row in bold (Belady's are bounds, not contenders)."""
    policies: list[str] = []
    for r in results.values():
        for s in r["sizes"]:
            for p in [*s["libcachesim"], *s["extra"]]:
                if p not in policies:
                    policies.append(p)
    head = ["trace", "size", *policies]
    if metric == "miss_ratio":
        head.append("ours = libCacheSim (lru, fifo, belady)")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, r in results.items():
        for s in r["sizes"]:
            rows = {**s["libcachesim"], **s["extra"]}
            vals = {p: rows.get(p, {}).get(metric) for p in policies}
            real = [v for p, v in vals.items() if v is not None and not p.startswith("belady")]
            best = min(real) if real else None
            cells = []
            for p in policies:
                v = vals[p]
                if v is None:
                    cells.append("error" if "error" in rows.get(p, {}) else "")
                else:
                    cells.append(f"**{v:.4f}**" if v == best and not p.startswith("belady")
                                 else f"{v:.4f}")
            row = [name, f"{100 * s['fraction']:g}%", *cells]
            if metric == "miss_ratio":
                row.append("yes" if all(s["ours_equal_libcachesim"].values()) else "NO")
            lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fractions", default=",".join(f"{f:g}" for f in FRACTIONS),
                    help="cache sizes as fractions of the unique bytes (default 0.01,0.05,0.1)")
    ap.add_argument("--unit", choices=ob.UNITS, default="bytes",
                    help="capacity in bytes (default) or objects (fractions of the objects)")
    ap.add_argument("--accesses", type=int, default=None,
                    help="requests of the generated traces (default: each preset's own)")
    ap.add_argument("--policies", default=",".join(ob.DEFAULT_POLICIES),
                    help="libCacheSim policies (default: all)")
    ap.add_argument("--jobs", type=int, default=2, help="policies run at once (default 2)")
    ap.add_argument("--timeout", type=float, default=None, metavar="S",
                    help="give up on one policy run after S seconds (an error row)")
    ap.add_argument("--quick", action="store_true",
                    help="100,000-request generated traces and no LRB: a smoke test")
    ap.add_argument("--out", type=Path, default=RESULTS / "mat.json")
    args = ap.parse_args(argv)
    fractions = tuple(float(f) for f in args.fractions.split(","))
    policies = tuple(p for p in args.policies.split(",") if p)
    if args.quick:
        args.accesses = args.accesses or 100_000
        policies = tuple(p for p in policies if p != "lrb")
    if ob.libcachesim_version() is None:
        print(f"bench_mat: {ob.INSTALL_HINT}", file=sys.stderr)
        return 1

    t0 = time.perf_counter()
    results = {}
    with tempfile.TemporaryDirectory(prefix="flashml-bench-mat-") as tmp:
        for case in load_traces(PRESETS, args.accesses, Path(tmp)):
            print(f"{case.name}: {case.df.height:,} requests, {case.unique_bytes:,} unique "
                  "bytes", file=sys.stderr)
            results[case.name] = run_case(case, fractions, policies, args.unit, args.jobs,
                                          args.timeout)
    png = plot(results, args.out.with_name(args.out.stem + "_miss_ratio.png"))
    table = markdown(results)
    byte_table = markdown(results, "byte_miss_ratio")
    print(f"miss ratio:\n{table}\n\nbyte miss ratio:\n{byte_table}")
    out = {
        "benchmark": "bench/bench_mat.py", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": machine(), "libcachesim": ob.libcachesim_version(),
        "policies": {p: ob.POLICIES[p][0] for p in policies},
        "unavailable": {p: why for p, why in ob.available().items() if why},
        "unit": args.unit, "fractions": fractions, "quick": args.quick,
        "traces": results, "plot": os.path.relpath(png, ROOT), "table": table,
        "byte_table": byte_table,
        "all_ours_equal_libcachesim": all(
            v for r in results.values() for s in r["sizes"]
            for v in s["ours_equal_libcachesim"].values()),
        "wall_s": time.perf_counter() - t0,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = args.out.with_suffix(".json.tmp")
    tmp_out.write_text(json.dumps(out, indent=2) + "\n")
    os.replace(tmp_out, args.out)
    print(f"wrote {args.out} and {png} in {out['wall_s']:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
