"""The tables of docs/measurements.md, rendered from the committed bench/results/*.json (the
benchmarks that measured them: `make bench`), and the figures that go with them.

Each results file with a table on the page owns one marked section of it:

    <!-- NAME.json: begin (bench/render_measurements.py renders this) -->
    ...
    <!-- NAME.json: end -->

The page's summary at the top is the README's headline table (bench/render_headlines.py,
its own markers). tests/kernel/test_docs_measurements.py fails when a marked section differs from
what these scripts render from the committed JSON. Prose outside the markers is hand-written.

    .venv/bin/python bench/render_measurements.py           # print the sections
    .venv/bin/python bench/render_measurements.py --write   # replace them in the page
    .venv/bin/python bench/render_measurements.py --plots   # (re)draw quality.png too
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
RESULTS = REPO / "bench" / "results"
PAGE = REPO / "docs" / "measurements.md"
QUALITY_PNG = RESULTS / "quality.png"


def begin(name: str) -> str:
    return f"<!-- {name}.json: begin (bench/render_measurements.py renders this) -->"


def end(name: str) -> str:
    return f"<!-- {name}.json: end -->"


def _load(name: str) -> dict[str, Any]:
    return json.loads((RESULTS / f"{name}.json").read_text())


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def mat_section(res: dict[str, Any]) -> str:
    """Byte miss ratio (MAT's objective) and miss ratio per trace, size and policy:
    bench_mat.py's own tables (`lrb_inhouse`: LRB's decision with MAT's model)."""
    from bench_mat import markdown, targets_text

    head = ["MAT against its targets (byte miss ratio):", "", targets_text(res["targets"]),
            ""] if "targets" in res else []
    return "\n".join([*head, "Byte miss ratio:", "",
                      markdown(res["traces"], "byte_miss_ratio"), "", "Miss ratio:", "",
                      markdown(res["traces"], "miss_ratio")])


def _stage(r: dict[str, Any], prefix: str | tuple[str, ...]) -> float | None:
    hits = [v for k, v in r["timings_s"].items() if k.startswith(prefix)]
    return sum(hits) if hits else None


def pipeline_section(res: dict[str, Any]) -> str:
    """One row per recorded run of the main job (bench_pipeline.py keeps one per size and
    mode, each with its commit): the job's time, its two longest stages, peak memory and the
    sweep's choice."""
    lines = ["| `region1-like` accesses | sweep | workers | cores per worker | commit | job (s) "
             "| sweep (s) | convergence + training (s) | peak memory (GB) "
             "| memory cgroup: limit / anonymous peak (GiB) "
             "| chosen write rate (MB/s) | TCO |",
             "|---:|---|---:|---|---|---:|---:|---:|---:|---|---:|---:|"]
    for r in res["runs"]:
        sweep, conv = _stage(r, "sweep"), _stage(r, "convergence")
        peak = max(r["peak_rss_mb"].values()) / 1000
        bounded = (f"{r['memory_limit_gib']:g} / {r['anon_peak_mb'] / 1024:.1f}"
                   if r.get("memory_limit_gib") else "none")
        lines.append(
            f"| {r['accesses']:,} | {r['sweep']} | {r.get('sweep_workers') or 1} "
            f"| {r.get('cores_per_worker') or 'all'} | {r.get('commit', 'n/a')} "
            f"| {r['wall_s']:.0f} | {sweep:.0f} | {conv:.0f} | {peak:.1f} | {bounded} "
            f"| {r['chosen_write_rate_mbps']:.1f} | {r['chosen_tco']:.3f} |")
    if "compare" in res:
        lines += ["", *pipeline_compare(res["compare"])]
    return "\n".join(lines)


#: The stages of the before/after table, by the prefix(es) of their timer's name (the
#: baselines: one stage since they run side by side, three before).
COMPARE_STAGES = (("convergence + training", "convergence"),
                  ("validation (schedule, features)", "validation"),
                  ("baselines (cachelib_ml, rejectx, coinflip, opt)",
                   ("baselines", "cachelib_ml", "opt")),
                  ("sweep", "sweep"), ("compile", "compile"))


def pipeline_compare(cmp: dict[str, Any]) -> list[str]:
    """bench_pipeline.py --compare: each stage's seconds with the baseline's code and with
    this tree's, per trace, then the compile repeated with a warm cache and whether the
    figures are the same."""
    pairs = cmp["runs"]
    head = " | ".join(f"{p['accesses'] / 1e6:g} M seed {p['seed']} before "
                      f"({p['before']['commit']}) | {p['accesses'] / 1e6:g} M seed {p['seed']} "
                      f"after ({p['after']['commit']})" for p in pairs)
    out = ["Before and after (the commits in the heads), side by side on the same traces "
           "(`bench_pipeline.py --compare`), seconds:", "",
           f"| stage | {head} |", "|---|" + "---:|---:|" * len(pairs)]

    def cell(r: dict[str, Any], prefix: str | tuple[str, ...]) -> str:
        v = _stage(r, prefix)
        return "-" if v is None else f"{v:.1f}"

    for label, prefix in COMPARE_STAGES:
        out.append(f"| {label} | " + " | ".join(
            f"{cell(p['before'], prefix)} | {cell(p['after'], prefix)}" for p in pairs) + " |")
    out.append("| **whole job** | " + " | ".join(
        f"**{p['before']['wall_s']:.0f}** | **{p['after']['wall_s']:.0f}**" for p in pairs)
        + " |")
    if all("cpu_s" in p[side] for p in pairs for side in ("before", "after")):
        out.append("| CPU seconds (user + system, all processes) | " + " | ".join(
            f"{p['before']['cpu_s']:.0f} | {p['after']['cpu_s']:.0f}" for p in pairs) + " |")
    if all(p[side].get("peak_rss_sum_mb") for p in pairs for side in ("before", "after")):
        out.append("| peak memory (MiB, the job's processes together) | " + " | ".join(
            f"{p['before']['peak_rss_sum_mb']:,.0f} | "
            f"{p['after']['peak_rss_sum_mb']:,.0f}" for p in pairs) + " |")
    out.append("| load average (1 min) at the start | " + " | ".join(
        f"{p['before'].get('load_avg_1m_before', float('nan')):.1f} | "
        f"{p['after'].get('load_avg_1m_before', float('nan')):.1f}" for p in pairs) + " |")
    out.append("")
    for p in pairs:
        again, same = p["compile_again"], p["results"]
        out.append(f"- {p['accesses'] / 1e6:g} M seed {p['seed']}: {p['speedup']:.2f}x faster; "
                   "the compile repeated with "
                   f"the cache the run filled: {again['compile_s']:.1f} s "
                   f"({(again.get('object_cache') or {}).get('hits', 0)} objects reused, "
                   f"the same policy.so: {again['sha256'] == p['after']['compiled_sha256']}); "
                   + ("every policy's figures and the sweep's choice identical"
                      if same["identical"] else
                      f"figures differ by up to {100 * same['max_relative_difference']:.2g}% "
                      f"({same['where']})"))
    return out


def quality_section(res: dict[str, Any]) -> str:
    """Baleen's peak-DT reduction vs RejectX per preset and seed (OPT's in brackets), for
    each protocol, and the means over all runs."""
    out: list[str] = []
    for name, p in res["protocols"].items():
        days = p["days"] or 3
        seeds = range(p["seeds"])
        s = p["summary"]
        by = {(r["preset"], r["seed"]): r for r in p["runs"]}
        presets = [k for k in s["baleen_vs_rejectx"] if k != "overall"]
        out.append(f"| {days:g} days ({name}) | " + " | ".join(f"seed {i}" for i in seeds)
                   + " | mean |")
        out.append("|---|" + "---|" * (len(seeds) + 1))
        for pr in presets:
            cells = [f"{_pct(by[pr, i]['baleen_vs_rejectx'])} "
                     f"({_pct(by[pr, i]['opt_vs_rejectx'])})" if (pr, i) in by else ""
                     for i in seeds]
            out.append(f"| `{pr}` | " + " | ".join(cells)
                       + f" | {_pct(s['baleen_vs_rejectx'][pr]['mean'])} |")
        out.append("")
        out += quality_means_table(name, p)
        out.append("")
    lines = []
    for p in res["protocols"].values():
        s = p["summary"]
        lines.append(
            f"- {p['days'] or 3:g} days: Baleen {_pct(s['baleen_vs_rejectx']['overall']['mean'])}"
            f", with a flat threshold "
            f"{_pct(s['baleen_flat_threshold_vs_rejectx']['overall']['mean'])}, CacheLib-ML "
            f"{_pct(s['cachelib_ml_vs_rejectx']['overall']['mean'])}, OPT "
            f"{_pct(s['opt_vs_rejectx']['overall']['mean'])}; share of OPT's reduction "
            f"{s['opt_share']['overall']:.2f} (the paper: {s['opt_share']['paper']:.2f}); "
            f"mean of every preset >= {_pct(res['targets']['min_reduction'])}: "
            f"{'met' if s['meets_target']['every_preset_mean'] else 'missed'}")
    out.append("Means over all runs (peak-DT reduction vs RejectX):")
    out.append("")
    out += lines
    out += quality_previous(res)
    return "\n".join(out)


def quality_previous(res: dict[str, Any]) -> list[str]:
    """The presets of `res['previous']` (the runs before the shipped default changed) that
    were not run again, with their figures then, said to be the previous default's."""
    prev = res.get("previous")
    if not prev:
        return []
    out = ["", f"Not re-run with the current default, so their figures are the previous "
           f"default's ({prev['note'].removeprefix('the runs before (').rstrip(')')}), "
           "means over seeds, Baleen / flat threshold / CacheLib-ML / OPT:", ""]
    for name, p in prev["protocols"].items():
        now = {r["preset"] for r in res["protocols"].get(name, {}).get("runs", [])}
        s = p["summary"]
        for pr in (k for k in s["baleen_vs_rejectx"] if k != "overall" and k not in now):
            out.append(f"- {p['days'] or 3:g} days, `{pr}` (seeds 0-{p['seeds'] - 1}): "
                       + " / ".join(_pct(s[k][pr]["mean"]) for k in (
                           "baleen_vs_rejectx", "baleen_flat_threshold_vs_rejectx",
                           "cachelib_ml_vs_rejectx", "opt_vs_rejectx")))
    return out


def quality_means_table(name: str, p: dict[str, Any]) -> list[str]:
    """Baleen's shipped default beside its simple competitors (the flat threshold,
    CacheLib-ML) and OPT, means by preset, with the bars bench_quality checks."""
    s = p["summary"]
    if "bars" not in s:
        return []
    by = {r["preset"]: [] for r in p["runs"]}
    for r in p["runs"]:
        by[r["preset"]].append(r)
    out = [f"| {p['days'] or 3:g} days, mean | Baleen (shipped) | flat threshold | "
           "CacheLib-ML | OPT | share of OPT | runs below RejectX | shipped: flat / "
           "schedule, CacheLib-ML features | bars met |",
           "|---|---|---|---|---|---|---|---|---|"]
    for pr, rs in by.items():
        b = s["bars"][pr]
        flat = sum(not (r.get("choice") or {}).get("peak_hours") for r in rs)
        cl = sum((r.get("choice") or {}).get("feature_set") == "cachelib_like" for r in rs)
        missed = ", ".join(v for k, v in QUALITY_BARS.items() if not b[k])
        out.append(
            f"| `{pr}` | {_pct(s['baleen_vs_rejectx'][pr]['mean'])} "
            f"| {_pct(s['baleen_flat_threshold_vs_rejectx'][pr]['mean'])} "
            f"| {_pct(s['cachelib_ml_vs_rejectx'][pr]['mean'])} "
            f"| {_pct(s['opt_vs_rejectx'][pr]['mean'])} | {b['opt_share']:.2f} "
            f"| {b['runs_below_rejectx']} of {len(rs)} | {flat} / {len(rs) - flat}, {cl} "
            f"| {'missed: ' + missed if missed else 'all'} |")
    return out


def mlcache_section(res: dict[str, Any]) -> str:
    """What MLCache ships (the job's default) against the best simple rule and
    previous_optimal: held-out mixes and the independent MSR-like trace (bench_mlcache.py's
    shipped table), the flash trace at the same write rate, and the paper's network on
    held-out mixes (opt-in)."""
    from bench_mlcache import flash_table, network_table, shipped_table

    out = [shipped_table(res)]
    for key, what in (("flash", "the shipped default"), ("flash_network", "the network")):
        if key in res:
            f = res[key]
            h = f["flash"]["headline"]
            rival = h.get("rival", "shared")
            vs = h.get("mlcache_vs_rival_peak_dt", h["mlcache_vs_shared_peak_dt"])
            out += ["", f"Flash mode with {what} as `mlcache` ({f['trace']}, "
                    f"{f['capacity_segments']} segments, intervals of "
                    f"{f['flash']['interval']} page requests): peak DT at "
                    f"{h['target_write_mbps']:.1f} MB/s, mlcache {h['mlcache_peak_dt_util']:.4f}"
                    f" vs {rival} {h.get('rival_peak_dt_util', h['shared_peak_dt_util']):.4f}"
                    f" ({100 * vs:+.1f}%)", "", flash_table(f)]
    if "network" in res:
        out += ["", "The paper's network (`--policy network --interval 1000`), on 10 held-out "
                "mixes:", "", network_table(res["network"])]
    return "\n".join(out)


def plot_mlcache(res: dict[str, Any], out: Path = RESULTS / "mlcache.png") -> Path:
    """Write hit ratio of shared, even, previous_optimal, the shipped mlcache and the oracle
    on each judged set of the shipped table."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    sets = [(f"{k} streams", r) for k, r in res.get("shipped", {}).items()]
    sets += [(f"MSR-like, {r['interval']}", r)
             for r in res.get("msr", {}).get("runs", {}).values()]
    pols = ("shared", "even", "previous_optimal", "mlcache", "discrete_optimal")
    fig, ax = plt.subplots(figsize=(8, 3.6), dpi=110)
    w = 0.16
    for i, p in enumerate(pols):
        ax.bar(np.arange(len(sets)) + (i - 2) * w,
               [r["policies"][p]["write_hit_ratio"] for _, r in sets], w, label=p)
    ax.set_xticks(np.arange(len(sets)), [n for n, _ in sets], fontsize=8)
    ax.set_ylabel("write hit ratio")
    ax.set_title("MLCache: the shipped policy vs the simple rules and the oracle", fontsize=9)
    ax.legend(fontsize=7, ncol=5, loc="upper center", bbox_to_anchor=(0.5, -0.12))
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return out


def pannier_section(res: dict[str, Any]) -> str:
    """Pannier on the block presets: every policy's means, Pannier against each simple rival
    (LRU+, MQ, RIPQ+) per trace and size, the tuned knobs on the held-out half, FUE with and
    without the RAM cache in front (bench_pannier.py's tables)."""
    from bench_pannier import tables

    s = res["table"]["presets"]
    nr = s.get("fue_without_ram")
    g = s["pannier_vs_lru_plus"]
    lines = [f"Strongest simple rival on the presets: {s['best_rival']} (mean read-hit ratio); "
             f"Pannier vs it {_pct(s['pannier_vs_best_rival']['read_hit_gain'])}. FUE vs LRU+: "
             f"{_pct(g['fue_gain'])} with the RAM cache in front"
             + (f", {_pct(nr['pannier_vs_lru_plus']['fue_gain'])} without it" if nr else "")
             + f"; counting copy-forward's flash reads {_pct(g['fue_with_internal_reads_gain'])}."]
    return "\n\n".join([*lines, *tables(res)])


def plot_pannier(res: dict[str, Any], out: Path = RESULTS / "pannier.png") -> Path:
    """Read-hit ratio of Pannier and its simple rivals per judged trace and size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rows = [(f"{v['trace'] if k == 'presets' else k}\n{v['size']}", v)
            for k, t in res["table"].items() for v in t["versus_rivals"]]
    pols = ("lru_plus", "mq", "ripq_plus", "pannier")
    fig, ax = plt.subplots(figsize=(11, 3.8), dpi=110)
    w = 0.2
    for i, p in enumerate(pols):
        ax.bar(np.arange(len(rows)) + (i - 1.5) * w, [v[p] for _, v in rows], w, label=p)
    ax.set_xticks(np.arange(len(rows)), [n for n, _ in rows], fontsize=6)
    ax.set_ylabel("read-hit ratio")
    ax.set_title("Pannier vs its simple rivals (the RAM cache of 5% in front)", fontsize=9)
    ax.legend(fontsize=7, ncol=4)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return out


def engine_section(res: dict[str, Any]) -> str:
    """The engine's slots on flashrt replay's paths (before the slots vs LRU in the eviction
    slot) and Baleen + MAT composed: one miss decision + one eviction decision, inside a
    replay and from C in a loop (bench_engine.py)."""
    p, r, bm = res["paths"], res["lru_vs_before"], res["baleen_mat"]
    rows = [("hit path p50", "hit_path_us_p50", "us", 1),
            ("miss path p50", "miss_path_us_p50", "us", 1),
            ("miss decision p50", "decision_ns_p50", "ns", 0)]
    lines = ["| `flashrt replay` | before the slots | LRU in the eviction slot | LRU / before |",
             "|---|---|---|---|"]
    lines += [f"| {name} | {p['before'][k]:,.{d}f} {u} | {p['lru'][k]:,.{d}f} {u} | {r[k]:.2f}x |"
              for name, k, u, d in rows]
    load = res["load_avg"]["timed_runs_start"][0], res["load_avg"]["timed_runs_end"][0]
    c = res["cache"]
    out = [f"Trace {res['trace']['preset']} ({res['trace']['accesses']:,} accesses, "
           f"{res['trace']['gets']:,} GETs), {c['regions']} regions of "
           f"{c['region_bytes'] >> 20} MiB; medians of {res['repeats']} alternated runs' p50s; "
           f"load average (1 min) {load[0]:.1f} at the start of the timed runs, {load[1]:.1f} at "
           f"the end (2 cores); same decisions as before the slots: "
           f"{'yes' if res['lru_decisions_equal_before'] else '**no**'}.", "", *lines, ""]
    tgt = bm["target_ns"]
    both = bm["miss_plus_eviction_ns_p50"]
    mat = ["| Baleen + MAT composed | miss decision p50 | eviction decision p50 | sum | target |",
           "|---|---|---|---|---|",
           f"| inside a replay (`flashrt replay --eviction mat`) | "
           f"{bm['miss_decision_ns_p50']:,.0f} ns | {bm['eviction_decision_ns_p50']:,.0f} ns | "
           f"{both:,.0f} ns | <= {tgt:,} ns: {'met' if both <= tgt else '**not met**'} |"]
    loop = res.get("from_c_loop")
    if loop:
        for kind, what in (("hot", "from C in a loop, back to back"),
                           ("cold", "from C in a loop, 8 MiB written between calls")):
            total = loop[f"{kind}_decide_plus_evict_predict_ns"]
            mat.append(f"| {what} | {loop[f'{kind}_decide_ns_p50']:,.0f} ns | "
                       f"{loop[f'{kind}_evict_predict_ns_p50']:,.0f} ns (model call) | "
                       f"{total:,.0f} ns | <= {tgt:,} ns: "
                       f"{'met' if total <= tgt else '**not met**'} |")
    tl2, tl2_loop = res.get("baleen_mat_tl2cgen"), res.get("from_c_loop_tl2cgen")
    if tl2 and tl2_loop:  # the same models with TL2cgen's code as the portable evaluator
        mat.append(f"| inside a replay, TL2cgen's code (`--portable tl2cgen`) | "
                   f"{tl2['miss_decision_ns_p50']:,.0f} ns | "
                   f"{tl2['eviction_decision_ns_p50']:,.0f} ns | "
                   f"{tl2['miss_plus_eviction_ns_p50']:,.0f} ns | |")
        for kind, what in (("hot", "back to back"), ("cold", "8 MiB written between calls")):
            mat.append(f"| from C, {what}, TL2cgen's code | "
                       f"{tl2_loop[f'{kind}_decide_ns_p50']:,.0f} ns | "
                       f"{tl2_loop[f'{kind}_evict_predict_ns_p50']:,.0f} ns (model call) | "
                       f"{tl2_loop[f'{kind}_decide_plus_evict_predict_ns']:,.0f} ns | |")
    out += mat
    if tl2 and tl2_loop:
        out += ["", "The bundles' portable evaluator is the compact one "
                "(compiler/compact_trees.py, `flashml compile`'s default; this CPU has no "
                "AVX-512 VBMI); the TL2cgen rows are the same models compiled with "
                "`--portable tl2cgen`, replays alternated with the others, the same decisions."]
    out += ["", f"MAT: {bm['eviction_decisions']:,} eviction decisions, "
            f"{bm['predictions_per_decision']:.2f} model calls each; IO hit ratio "
            f"{bm['io_hit_ratio']:.4f} (LRU {bm['io_hit_ratio_lru']:.4f})."]
    return "\n".join(out)


def plot_engine(res: dict[str, Any], out: Path = RESULTS / "engine.png") -> Path:
    """Baleen + MAT: the miss and the eviction decision's p50, stacked, inside a replay and
    from C in a loop (hot, cold), against the target."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bm, loop = res["baleen_mat"], res.get("from_c_loop") or {}
    rows = [("inside a replay", bm["miss_decision_ns_p50"], bm["eviction_decision_ns_p50"])]
    rows += [(f"C loop, {k}", loop[f"{k}_decide_ns_p50"], loop[f"{k}_evict_predict_ns_p50"])
             for k in ("hot", "cold") if loop]
    fig, ax = plt.subplots(figsize=(7, 2.8), dpi=110)
    names = [r[0] for r in rows]
    ax.barh(names, [r[1] for r in rows], label="miss decision (admission + prefetch)")
    ax.barh(names, [r[2] for r in rows], left=[r[1] for r in rows],
            label="eviction decision (loop: MAT's model call)")
    ax.axvline(bm["target_ns"], color="k", ls="--", lw=1, label="target")
    ax.set_xlabel("ns (p50)")
    ax.set_title(f"Baleen + MAT decisions (load average {res['load_avg']['timed_runs_end'][0]:.1f}"
                 ", 2 cores)", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return out


#: bench_quality's bars on the shipped default, as the table says them.
QUALITY_BARS = {"at_or_above_cachelib_ml": ">= CacheLib-ML",
                "at_or_above_flat_threshold": ">= flat threshold",
                "never_below_rejectx": "never below RejectX",
                "half_of_opt": ">= 0.5 of OPT"}


SECTIONS: dict[str, Callable[[dict[str, Any]], str]] = {
    "mat": mat_section,
    "pipeline": pipeline_section,
    "quality": quality_section,
    "mlcache": mlcache_section,
    "pannier": pannier_section,
    "engine": engine_section,
}


def sections() -> dict[str, str]:
    """name -> the whole marked section (markers included) rendered from NAME.json."""
    return {name: "\n".join([begin(name), fn(_load(name)), end(name)])
            for name, fn in SECTIONS.items()}


def marked(text: str, name: str) -> str:
    """The marked section of `name` in `text`, markers included (ValueError when absent)."""
    a = text.index(begin(name))
    b = text.index(end(name), a) + len(end(name))
    return text[a:b]


def replace_sections(text: str) -> str:
    import render_headlines

    for name, new in sections().items():
        text = text.replace(marked(text, name), new)
    return render_headlines.replace_section(text, render_headlines.section())


def plot_quality(res: dict[str, Any], out: Path = QUALITY_PNG) -> Path:
    """Bars of the mean peak-DT reduction vs RejectX per preset, one panel per protocol."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    protos = list(res["protocols"].items())
    fig, axes = plt.subplots(1, len(protos), figsize=(5.2 * len(protos), 3.8), dpi=110,
                             squeeze=False, sharey=True)
    series = (("baleen_vs_rejectx", "Baleen"),
              ("baleen_flat_threshold_vs_rejectx", "Baleen, flat threshold"),
              ("cachelib_ml_vs_rejectx", "CacheLib-ML"), ("opt_vs_rejectx", "OPT"))
    for ax, (name, p) in zip(axes[0], protos, strict=True):
        s = p["summary"]
        groups = [k for k in s["baleen_vs_rejectx"] if k != "overall"] + ["overall"]
        w = 0.8 / len(series)
        for i, (key, label) in enumerate(series):
            ax.bar([g + (i - 1.5) * w for g in range(len(groups))],
                   [100 * s[key][g]["mean"] for g in groups], w, label=label)
        ax.axhline(100 * res["targets"]["min_reduction"], color="black", ls="--", lw=0.8,
                   label="target")
        ax.set_xticks(range(len(groups)), groups)
        ax.set_title(f"{p['days'] or 3:g} days ({name}), mean over seeds")
        ax.set_ylabel("peak disk-head time reduction vs RejectX (%)")
        ax.grid(axis="y", alpha=0.3)
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return out


def main(argv: list[str]) -> int:
    if "--plots" in argv:
        print(plot_quality(_load("quality")).relative_to(REPO))
        print(plot_mlcache(_load("mlcache")).relative_to(REPO))
        print(plot_pannier(_load("pannier")).relative_to(REPO))
        print(plot_engine(_load("engine")).relative_to(REPO))
    if "--write" in argv:
        PAGE.write_text(replace_sections(PAGE.read_text()))
    elif "--plots" not in argv:
        print("\n\n".join(sections().values()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
