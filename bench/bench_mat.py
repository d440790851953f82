"""Object-cache eviction baselines for MAT: libCacheSim's policies (the `libcachesim`
package, libCacheSim's own bindings) beside our simulator's, on the real CloudPhysics sample
and the generated object presets, at several cache sizes.

    .venv/bin/python bench/bench_mat.py            # full run, ~10 minutes on 2 cores (LRB)
    .venv/bin/python bench/bench_mat.py --quick    # small traces, no LRB: a smoke test
    # on a busy machine: one process per trace and size, libCacheSim's rows reused, merged
    .venv/bin/python bench/bench_mat.py --traces cdn-like --fractions 0.05 \
        --reuse-baselines bench/results/mat.json --out /tmp/cdn-5.json    # ... x 9
    .venv/bin/python bench/bench_mat.py --merge /tmp/*-*.json             # -> mat.json
    .venv/bin/python bench/bench_mat.py --render-only   # tables, targets, plot from mat.json

For each trace (CloudPhysics sample; cdn-like and kv-like at their default size, seed 0) and
each cache size (fractions of the trace's unique bytes: --fractions, default 1%, 5%, 10%):
every policy of flashml.systems.mat.object_baselines.POLICIES (lru, fifo, lfu, arc, s3fifo,
sieve, lhd, lrb, glcache, belady, belady-size) run by libCacheSim, and our simulator's lru,
fifo and belady (flashml.simulation.simulate_objects) side by side, with whether they agree
exactly (hit counts). Rows of MAT, or any other policy of ours, come from `extra_policies`
(the hook below). Writes bench/results/mat.json (with `targets`: MAT against LRU and the
in-house LRB on byte miss ratio and predictions per eviction, and against libCacheSim's LRB
where it trained) and
the byte-miss-ratio and miss-ratio-vs-size plot bench/results/mat_miss_ratio.png, and prints
the tables of docs/measurements.md (object-cache baselines) and docs/systems/mat.md.
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

from flashml.simulation import simulate_objects  # noqa: E402
from flashml.systems.mat import object_baselines as ob  # noqa: E402
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


# Rows of our own learned policies: `extra_policies(trace, capacity, unit)` returns {policy
# name: row} for one trace and one cache size, where a row has at least `miss_ratio` and
# `byte_miss_ratio` (and, for MAT, `predictions_per_eviction`, `ns_per_eviction`). The
# benchmark puts the rows beside libCacheSim's in bench/results/mat.json, the docs table and
# the plot (a policy named `mat` is drawn bold).
def extra_policies(trace: TraceCase, capacity: int, unit: str) -> dict[str, dict[str, Any]]:
    """MAT's row at `capacity` (bytes, or objects) on `trace`: `flashml mat run`'s job
    (flashml/systems/mat/job.py) with its defaults at this one capacity (objective: byte miss
    ratio): trained on the first 30% of the requests, T0, k and the model (size and label
    horizon) tuned on the next 20%, judged on the whole trace (the row's miss ratios,
    comparable with libCacheSim's) and on the held-out last 50%; and its periodic-retraining
    emulation (4 windows, each of windows 1-3 judged by a model trained on MAT's own tail in
    the window before). Beside it, from the same job run, `lrb_inhouse`: LRB's decision (64 sampled
    candidates, the farthest predicted next access; sim/src/mat/lrb.rs) with MAT's very model
    and features, so that both decisions' predictions and time per eviction are measured
    in one run."""
    from flashml.jobs.run import run_job
    from flashml.systems.mat import job as mat

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
    keep = ("miss_ratio", "byte_miss_ratio", "held_out_miss_ratio", "held_out_byte_miss_ratio",
            "predictions_per_eviction", "candidates_per_eviction", "ns_per_eviction",
            "reinsertions")
    tuned = summary["tuned"][cap]
    row = {**{k: pol["mat"].get(k) for k in keep},
           "lru_held_out_miss_ratio": pol["lru"]["held_out_miss_ratio"],
           "lru_held_out_byte_miss_ratio": pol["lru"]["held_out_byte_miss_ratio"],
           "objective": summary["objective"],
           "model_size": res["model_size"], "label_horizon": res.get("label_horizon"),
           "k": tuned["k"],
           "controller": s.mat.controller, "reuse_predictions": s.mat.reuse_predictions,
           "initial_threshold": tuned["initial_threshold"],
           "val_predictions_per_eviction": tuned.get("predictions_per_eviction"),
           "val_miss_ratio_by_label_horizon": tuned.get("val_miss_ratio_by_label_horizon")}
    if "periodic" in res:
        per = res["periodic"]
        row |= {"periodic_miss_ratio": per["mat_miss_ratio"],
                "periodic_lru_miss_ratio": per["lru_miss_ratio"],
                "periodic_byte_miss_ratio": per["mat_byte_miss_ratio"],
                "periodic_lru_byte_miss_ratio": per["lru_byte_miss_ratio"],
                "periodic_predictions_per_eviction": per["predictions_per_eviction"],
                "periodic_window_requests": summary["periodic_window_requests"],
                "periodic_windows": per["windows"]}
    return {"mat": row, "lrb_inhouse": pol["lrb_inhouse"] | {"sample_size": 64,
                                                            "model": "MAT's"}}


def lrb_trained(rows: dict[str, dict[str, Any]]) -> bool | None:
    """Whether libCacheSim's LRB ever trained a model at this point: until its first model
    LRB evicts LRU's victim, so a run that never trained has exactly LRU's hits (on
    CloudPhysics at every size, where its training window never fills); None when either
    row is missing."""
    lrb, lru = rows.get("lrb", {}), rows.get("lru", {})
    if "hits" not in lrb or "hits" not in lru:
        return None
    return lrb["hits"] != lru["hits"]


#: The targets MAT's rows are checked against (docs/systems/mat.md): byte miss ratio at or
#: below LRU's; at or below the in-house LRB's within 1 point; >= 20x fewer predictions per
#: eviction than it.
LRB_SLACK = 0.01
MIN_PREDICTION_RATIO = 20.0


def targets(results: dict[str, Any]) -> dict[str, Any]:
    """Per point and in all: MAT against LRU and the in-house LRB on byte miss ratio (the
    objective) and predictions per eviction, and against libCacheSim's LRB only where that
    LRB trained (`lrb_trained`)."""
    points = []
    for name, r in results.items():
        for s in r["sizes"]:
            mat, lrbi = s["extra"].get("mat"), s["extra"].get("lrb_inhouse")
            lru, lcs_lrb = s["libcachesim"].get("lru", {}), s["libcachesim"].get("lrb", {})
            if not mat or not lrbi or "byte_miss_ratio" not in lru:
                continue
            ratio = lrbi["predictions_per_eviction"] / mat["predictions_per_eviction"]
            p = {"trace": name, "fraction": s["fraction"],
                 "byte_vs_lru": mat["byte_miss_ratio"] - lru["byte_miss_ratio"],
                 "byte_vs_lrb_inhouse": mat["byte_miss_ratio"] - lrbi["byte_miss_ratio"],
                 "prediction_ratio": ratio,
                 "time_ratio": lrbi["ns_per_eviction"] / mat["ns_per_eviction"],
                 "lcs_lrb_trained": s.get("lcs_lrb_trained")}
            p["at_or_below_lru"] = p["byte_vs_lru"] <= 0
            p["within_lrb_inhouse"] = p["byte_vs_lrb_inhouse"] <= LRB_SLACK
            p["fewer_predictions"] = ratio >= MIN_PREDICTION_RATIO
            if s.get("lcs_lrb_trained") and "byte_miss_ratio" in lcs_lrb:
                p["byte_vs_lcs_lrb"] = mat["byte_miss_ratio"] - lcs_lrb["byte_miss_ratio"]
                p["request_vs_lcs_lrb"] = mat["miss_ratio"] - lcs_lrb["miss_ratio"]
            points.append(p)
    trained = [p for p in points if "byte_vs_lcs_lrb" in p]
    return {"points": points, "n": len(points),
            "at_or_below_lru": sum(p["at_or_below_lru"] for p in points),
            "within_lrb_inhouse": sum(p["within_lrb_inhouse"] for p in points),
            "fewer_predictions": sum(p["fewer_predictions"] for p in points),
            "all_three": sum(p["at_or_below_lru"] and p["within_lrb_inhouse"]
                             and p["fewer_predictions"] for p in points),
            "lcs_lrb_trained": len(trained),
            "at_or_below_lcs_lrb_bytes": sum(p["byte_vs_lcs_lrb"] <= 0 for p in trained),
            "at_or_below_lcs_lrb_requests": sum(p["request_vs_lcs_lrb"] <= 0
                                                for p in trained),
            "lrb_slack": LRB_SLACK, "min_prediction_ratio": MIN_PREDICTION_RATIO}


def load_traces(presets: tuple[str, ...], accesses: int | None, tmp: Path,
                only: tuple[str, ...] | None = None) -> list[TraceCase]:
    cases = []
    if only is not None:
        presets = tuple(p for p in presets if p in only)
    if only is not None and "cloudphysics" not in only:
        pass  # not asked for
    elif CLOUDPHYSICS.exists():
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


def reused_rows(case: TraceCase, caps: list[int], unit: str, policies: tuple[str, ...],
                earlier: dict[str, Any] | None) -> dict[int, dict[str, Any]] | None:
    """libCacheSim's rows of `case` at `caps` from an earlier result of this benchmark
    (--reuse-baselines), when it ran the same trace (requests, objects, unique bytes), unit,
    libCacheSim version and policies at the same capacities: they are deterministic, and
    `run_case` still checks them against our own LRU, FIFO and Belady hit for hit. None when
    anything differs."""
    if not earlier or earlier.get("libcachesim") != ob.libcachesim_version() \
            or earlier.get("unit") != unit:
        return None
    old = earlier["traces"].get(case.name)
    if not old or (old["requests"], old["objects"], old["unique_bytes"]) != (
            case.df.height, case.df["key"].n_unique(), case.unique_bytes):
        return None
    by_cap = {s["capacity"]: s["libcachesim"] for s in old["sizes"]}
    if not all(c in by_cap and set(policies) <= set(by_cap[c]) for c in caps):
        return None
    return {c: {p: by_cap[c][p] for p in policies} for c in caps}


def run_case(case: TraceCase, fractions: tuple[float, ...], policies: tuple[str, ...],
             unit: str, jobs: int, timeout_s: float | None,
             earlier: dict[str, Any] | None = None) -> dict[str, Any]:
    df = case.df
    total = case.unique_bytes if unit == "bytes" else df["key"].n_unique()
    caps = [max(1, int(f * total)) for f in fractions]
    t0 = time.perf_counter()
    lcs_rows = reused_rows(case, caps, unit, policies, earlier)
    reused = lcs_rows is not None
    if lcs_rows is None:
        lcs_rows = ob.run_baselines(df["key"], df["size"], caps, unit=unit, policies=policies,
                                    times=df["time"] if "time" in df.columns else None,
                                    jobs=jobs, timeout_s=timeout_s)
    sizes = []
    for f, c in zip(fractions, caps, strict=True):
        mine = ours(case, c, unit)
        agree = {p: lcs_rows[c][p].get("hits") == mine[p]["hits"]
                 for p in OURS if p in lcs_rows[c]}
        sizes.append({"fraction": f, "capacity": c, "unit": unit,
                      "libcachesim": lcs_rows[c], "ours": mine, "ours_equal_libcachesim": agree,
                      "lcs_lrb_trained": lrb_trained(lcs_rows[c]),
                      "extra": extra_policies(case, c, unit)})
        line = ", ".join(f"{p} {r['miss_ratio']:.4f}" if "miss_ratio" in r else f"{p} ERROR"
                         for p, r in lcs_rows[c].items())
        print(f"  {case.name} {100 * f:g}% ({c:,} {unit}): {line}", file=sys.stderr)
    return {"source": case.source, "requests": df.height, "objects": df["key"].n_unique(),
            "unique_bytes": case.unique_bytes, "generate": case.info, "sizes": sizes,
            "libcachesim_rows": (f"reused from the run of {earlier['date']}" if reused
                                 else "run here"),
            "wall_s": time.perf_counter() - t0}


def plot(results: dict[str, Any], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    metrics = (("byte_miss_ratio", "byte miss ratio"), ("miss_ratio", "miss ratio"))
    fig, axes = plt.subplots(len(metrics), len(names), figsize=(5.2 * len(names), 8.4),
                             dpi=110, squeeze=False)
    for row, (metric, label) in zip(axes, metrics, strict=True):
        for ax, name in zip(row, names, strict=True):
            sizes = results[name]["sizes"]
            x = [100 * s["fraction"] for s in sizes]
            curves: dict[str, list[float]] = {}
            for s in sizes:
                for p, r in {**s["libcachesim"], **s["extra"]}.items():
                    curves.setdefault(p, []).append(r.get(metric, np.nan))
            colours = plt.get_cmap("tab20").colors
            for i, (p, y) in enumerate(curves.items()):
                ax.plot(x, y, marker="o", ms=3, lw=2.4 if p == "mat" else 1.1, label=p,
                        ls="--" if p.startswith("belady") else "-", color=colours[i % 20])
            for p, mk in (("lru", "x"), ("fifo", "+")):
                ax.plot(x, [s["ours"][p][metric] for s in sizes], ls="none", marker=mk,
                        ms=9, color="black", label=f"{p} (ours)")
            ax.set_xscale("log")
            ax.set_xticks(x, [f"{v:g}%" for v in x])
            ax.set_xlabel("cache size (% of unique bytes)")
            ax.set_ylabel(label)
            ax.set_title(f"{name} ({results[name]['requests']:,} requests): {label}")
            ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7, ncol=2, loc="best")
    fig.suptitle("Object-cache byte miss ratio and miss ratio vs cache size: libCacheSim's "
                 "policies and ours")
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


def _best_heuristic(lcs: dict[str, dict[str, Any]], metric: str) -> tuple[str, float]:
    rows = {p: r[metric] for p, r in lcs.items()
            if metric in r and not p.startswith("belady") and p != "lrb"}
    best = min(rows, key=lambda p: rows[p])
    return best, rows[best]


def docs_table(results: dict[str, Any]) -> str:
    """docs/systems/mat.md's table (bench/render_mat_docs.py): per trace and size, byte miss
    ratio / miss ratio of LRU, MAT, the in-house LRB (MAT's model, 64 sampled candidates)
    and libCacheSim's LRB (marked where it never trained), the best simple heuristic and
    Belady; MAT's and the in-house LRB's predictions and ns per eviction, side by side from
    one run (the ns marked "earlier run" where they were kept from one: `keep_timings`)."""
    lines = ["| trace | size | LRU | MAT (byte vs LRU) | in-house LRB | MAT - in-house LRB "
             "(byte) | predictions / eviction MAT / LRB (ratio) | ns / eviction MAT / LRB "
             "| libCacheSim LRB | best heuristic (byte) | Belady |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]

    def pair(r: dict[str, Any]) -> str:
        return f"{r['byte_miss_ratio']:.4f} / {r['miss_ratio']:.4f}"

    for name, r in results.items():
        for s in r["sizes"]:
            lcs, ex = s["libcachesim"], s["extra"]
            if "mat" not in ex or "lru" not in lcs:
                continue
            mat, lrbi, lru = ex["mat"], ex["lrb_inhouse"], lcs["lru"]
            cut = mat["byte_miss_ratio"] / lru["byte_miss_ratio"] - 1
            lrb = lcs.get("lrb")
            lcs_cell = "" if not lrb or "miss_ratio" not in lrb else pair(lrb) + (
                "" if s.get("lcs_lrb_trained") else " (never trained: = LRU)")
            hname, hval = _best_heuristic(lcs, "byte_miss_ratio")
            ppe_m, ppe_l = mat["predictions_per_eviction"], lrbi["predictions_per_eviction"]
            lines.append(
                f"| {name} | {100 * s['fraction']:g}% | {pair(lru)} | {pair(mat)} "
                f"({100 * cut:+.1f}%) | {pair(lrbi)} "
                f"| {mat['byte_miss_ratio'] - lrbi['byte_miss_ratio']:+.4f} "
                f"| {ppe_m:.2f} / {ppe_l:.1f} ({ppe_l / ppe_m:.0f}x) "
                f"| {mat['ns_per_eviction']:.0f} / {lrbi['ns_per_eviction']:.0f}"
                f"{' (earlier run)' if 'ns_from' in mat else ''} "
                f"| {lcs_cell} | {hval:.4f} ({hname}) "
                f"| {lcs['belady']['byte_miss_ratio']:.4f} |")
    return "\n".join(lines)


def held_out_table(results: dict[str, Any]) -> str:
    """MAT on the held-out last 50% and under periodic retraining, byte miss ratio / miss
    ratio against LRU's, with the tuned k and predictions / candidates per eviction."""
    lines = ["| trace | size | held-out LRU | held-out MAT | periodic LRU | periodic MAT "
             "(pred./ev.) | MAT predictions / candidates per eviction (k) | model |",
             "|---|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        for s in r["sizes"]:
            m = s["extra"].get("mat")
            if not m:
                continue
            per = (f"{m['periodic_lru_byte_miss_ratio']:.4f} / "
                   f"{m['periodic_lru_miss_ratio']:.4f} | {m['periodic_byte_miss_ratio']:.4f}"
                   f" / {m['periodic_miss_ratio']:.4f} "
                   f"({m['periodic_predictions_per_eviction']:.2f})"
                   if "periodic_miss_ratio" in m else " | ")
            lines.append(
                f"| {name} | {100 * s['fraction']:g}% "
                f"| {m['lru_held_out_byte_miss_ratio']:.4f} / {m['lru_held_out_miss_ratio']:.4f}"
                f" | {m['held_out_byte_miss_ratio']:.4f} / {m['held_out_miss_ratio']:.4f} "
                f"| {per} | {m['predictions_per_eviction']:.2f} / "
                f"{m['candidates_per_eviction']:.2f} ({m['k']:.1f}) | {m['model_size']} |")
    return "\n".join(lines)


def targets_text(t: dict[str, Any]) -> str:
    """The targets, met or not, point by point where missed."""
    def missed(key: str) -> str:
        bad = [f"{p['trace']} {100 * p['fraction']:g}%" for p in t["points"] if not p[key]]
        return f" (missed at {', '.join(bad)})" if bad else ""

    n = t["n"]
    worst_lru = max((p["byte_vs_lru"] for p in t["points"]), default=float("nan"))
    worst_lrb = max((p["byte_vs_lrb_inhouse"] for p in t["points"]), default=float("nan"))
    ratios = [p["prediction_ratio"] for p in t["points"]]
    times = [p["time_ratio"] for p in t["points"]]
    lines = [
        f"- byte miss ratio at or below LRU's: **{t['at_or_below_lru']}/{n}** points"
        f"{missed('at_or_below_lru')}; the largest excess {worst_lru:+.4f}.",
        f"- byte miss ratio at or below the in-house LRB's + {t['lrb_slack']:g}: "
        f"**{t['within_lrb_inhouse']}/{n}**{missed('within_lrb_inhouse')}; the largest "
        f"excess over it {worst_lrb:+.4f}.",
        f"- >= {t['min_prediction_ratio']:g}x fewer predictions per eviction than the "
        f"in-house LRB: **{t['fewer_predictions']}/{n}**{missed('fewer_predictions')} "
        f"({min(ratios, default=0):.0f}x-{max(ratios, default=0):.0f}x); time per eviction "
        f"{min(times, default=0):.1f}x-{max(times, default=0):.1f}x less.",
        f"- all three at once: **{t['all_three']}/{n}**.",
        f"- against libCacheSim's LRB, counted only where it trained ({t['lcs_lrb_trained']}"
        f"/{n} points; it never trained where its hits equal libCacheSim's LRU's exactly): "
        f"at or below it in byte miss ratio at {t['at_or_below_lcs_lrb_bytes']}/"
        f"{t['lcs_lrb_trained']}, in miss ratio at {t['at_or_below_lcs_lrb_requests']}/"
        f"{t['lcs_lrb_trained']}."]
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
    ap.add_argument("--traces", default=None, metavar="NAME[,NAME...]",
                    help="run only these traces (cloudphysics, cdn-like, kv-like) and keep "
                    "the others' rows from --out")
    ap.add_argument("--reuse-baselines", type=Path, default=None, metavar="JSON",
                    help="take libCacheSim's rows from an earlier result of this benchmark "
                    "where it ran the same trace, sizes, version and policies (they are "
                    "deterministic; still checked against ours hit for hit)")
    ap.add_argument("--render-only", action="store_true",
                    help="re-derive the tables, targets and plot of --out from its rows")
    ap.add_argument("--merge", nargs="+", type=Path, default=None, metavar="JSON",
                    help="combine results of runs over parts of the traces and sizes (e.g. "
                    "one process per trace and size: --traces T --fractions F --out P) "
                    "into --out")
    ap.add_argument("--timings-from", type=Path, default=None, metavar="JSON",
                    help="with --merge: keep the ns per eviction of MAT and the in-house LRB "
                    "from this earlier result (for parts not run under the timing lock)")
    args = ap.parse_args(argv)
    if args.merge:
        return merge(args.merge, args.out, json.loads(args.timings_from.read_text())
                     if args.timings_from else None)
    if args.render_only:
        out = json.loads(args.out.read_text())
        return write(out, out["traces"], args.out)
    fractions = tuple(float(f) for f in args.fractions.split(","))
    policies = tuple(p for p in args.policies.split(",") if p)
    if args.quick:
        args.accesses = args.accesses or 100_000
        policies = tuple(p for p in policies if p != "lrb")
    if ob.libcachesim_version() is None:
        print(f"bench_mat: {ob.INSTALL_HINT}", file=sys.stderr)
        return 1

    t0 = time.perf_counter()
    only = tuple(t.strip() for t in args.traces.split(",")) if args.traces else None
    results: dict[str, Any] = {}
    if only and args.out.exists():
        old = json.loads(args.out.read_text())["traces"]
        results = {k: v for k, v in old.items() if k not in only}
    partial = Path(tempfile.gettempdir()) / f"{args.out.stem}.partial.json"
    earlier = (json.loads(args.reuse_baselines.read_text()) if args.reuse_baselines
               else None)
    with tempfile.TemporaryDirectory(prefix="flashml-bench-mat-") as tmp:
        for case in load_traces(PRESETS, args.accesses, Path(tmp), only):
            print(f"{case.name}: {case.df.height:,} requests, {case.unique_bytes:,} unique "
                  "bytes", file=sys.stderr)
            results[case.name] = run_case(case, fractions, policies, args.unit, args.jobs,
                                          args.timeout, earlier)
            partial.write_text(json.dumps(results, indent=1))  # salvage on a later failure
    order = ["cloudphysics", *PRESETS]
    results = {k: results[k] for k in sorted(results, key=lambda k: order.index(k)
                                             if k in order else len(order))}
    out = {
        "benchmark": "bench/bench_mat.py", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": machine(), "libcachesim": ob.libcachesim_version(),
        "policies": {p: ob.POLICIES[p][0] for p in policies},
        "unavailable": {p: why for p, why in ob.available().items() if why},
        "unit": args.unit, "fractions": fractions, "quick": args.quick,
        "wall_s": time.perf_counter() - t0,
    }
    return write(out, results, args.out)


def keep_timings(results: dict[str, Any], earlier: dict[str, Any]) -> None:
    """MAT's and the in-house LRB's ns per eviction taken from `earlier` (a result of this
    benchmark) at every trace and size both hold, for rows whose run could not time them
    (only a run under the timing lock may): each such row keeps its own figure as
    `ns_per_eviction_this_run` and says where the kept one comes from (`ns_from`). A row
    that already kept a figure, or is the earlier row itself, is left as it is."""
    old = {(name, s["fraction"]): s["extra"] for name, t in earlier["traces"].items()
           for s in t["sizes"]}
    for name, t in results.items():
        for s in t["sizes"]:
            ex, prev = s["extra"], old.get((name, s["fraction"]))
            if not prev or prev == ex or "mat" not in ex or "ns_from" in ex["mat"]:
                continue  # none earlier, the earlier row itself, or already kept
            for pol in ("mat", "lrb_inhouse"):
                if pol in ex and pol in prev:
                    row = ex[pol]
                    row["ns_per_eviction_this_run"] = row["ns_per_eviction"]
                    row["ns_per_eviction"] = prev[pol]["ns_per_eviction"]
                    row["ns_from"] = prev[pol].get("ns_from", f"the run of {earlier['date']}")


def merge(parts: list[Path], path: Path, timings: dict[str, Any] | None = None) -> int:
    """Results of runs over parts of the traces and sizes -> one result at `path`: each
    trace's sizes in order of their fraction, the parts' wall times summed."""
    runs = [json.loads(p.read_text()) for p in parts]
    results: dict[str, Any] = {}
    for r in runs:
        for name, t in r["traces"].items():
            if name in results:
                results[name]["sizes"] += t["sizes"]
                results[name]["wall_s"] += t["wall_s"]
            else:
                results[name] = t
    order = ["cloudphysics", *PRESETS]
    results = {k: results[k] for k in sorted(results, key=lambda k: order.index(k)
                                             if k in order else len(order))}
    for t in results.values():
        t["sizes"].sort(key=lambda s: s["fraction"])
    if timings is not None:
        keep_timings(results, timings)
    out = {k: v for k, v in runs[0].items()
           if k not in ("traces", "table", "byte_table", "targets", "plot")}
    out |= {"date": max(r["date"] for r in runs),
            "fractions": sorted({s["fraction"] for t in results.values() for s in t["sizes"]}),
            "wall_s": sum(r["wall_s"] for r in runs), "parts": len(runs)}
    return write(out, results, path)


def write(out: dict[str, Any], results: dict[str, Any], path: Path) -> int:
    """`out` with the rows `results` and what is derived from them (tables, targets, plot)
    -> `path` (atomically) and the plot beside it; the tables printed."""
    png = plot(results, path.with_name(path.stem + "_miss_ratio.png"))
    table = markdown(results)
    byte_table = markdown(results, "byte_miss_ratio")
    print(f"byte miss ratio:\n{byte_table}\n\nmiss ratio:\n{table}\n\n"
          f"{docs_table(results)}\n\n{targets_text(targets(results))}")
    out |= {"traces": results, "plot": os.path.relpath(png, ROOT), "table": table,
            "byte_table": byte_table, "targets": targets(results),
            "all_ours_equal_libcachesim": all(
                v for r in results.values() for s in r["sizes"]
                for v in s["ours_equal_libcachesim"].values())}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = path.with_suffix(".json.tmp")
    tmp_out.write_text(json.dumps(out, indent=2) + "\n")
    os.replace(tmp_out, path)
    print(f"wrote {path} and {png}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
