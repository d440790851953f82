"""The README's headline figures, rendered from the committed bench/results/*.json (the
benchmarks that measured them: `make bench`). tests/kernel/test_docs.py checks that README.md holds
exactly this section, so a figure on the front page always has its source.

    .venv/bin/python bench/render_headlines.py           # print the section
    .venv/bin/python bench/render_headlines.py --write   # replace it in README.md
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
BEGIN = "<!-- headlines: begin (bench/render_headlines.py renders this from bench/results) -->"
END = "<!-- headlines: end -->"


def _load(name: str) -> dict[str, Any]:
    return json.loads((RESULTS / f"{name}.json").read_text())


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def rows() -> list[tuple[str, str, str]]:
    """(what, measured, source) of each headline."""
    q = _load("quality")
    d = q["protocols"]["default"]["summary"]
    t = q["default_trace"]
    out = [("Baleen: peak disk-head time vs RejectX, at the same flash write rate",
            f"**-{_pct(t['baleen_vs_rejectx'])}** on the demo trace (flat threshold "
            f"-{_pct(t['baleen_flat_threshold_vs_rejectx'])}, CacheLib-ML "
            f"-{_pct(t['cachelib_ml_vs_rejectx'])}); "
            f"-{_pct(d['baleen_vs_rejectx']['overall']['mean'])} on average over "
            f"{d['baleen_vs_rejectx']['overall']['n']} "
            f"trace{'s' if d['baleen_vs_rejectx']['overall']['n'] != 1 else ''} of "
            f"{', '.join(f'`{k}`' for k in d['baleen_vs_rejectx'] if k != 'overall')} "
            "(flat threshold "
            f"-{_pct(d['baleen_flat_threshold_vs_rejectx']['overall']['mean'])}, CacheLib-ML "
            f"-{_pct(d['cachelib_ml_vs_rejectx']['overall']['mean'])}, OPT "
            f"-{_pct(d['opt_vs_rejectx']['overall']['mean'])})", "quality.json")]
    runs = [r for r in _load("pipeline")["runs"]
            if r.get("sweep") == "warm" and r.get("sweep_workers") == 1
            and not r.get("cores_per_worker")]
    best = {n: min((r for r in runs if r["accesses"] == n), key=lambda r: r["wall_s"])
            for n in sorted({r["accesses"] for r in runs if r["accesses"] >= 1_000_000})}

    def job(n: int, r: dict[str, Any]) -> str:
        s = r["wall_s"]
        text = f"{n / 1e6:g} M accesses in **{s:.0f} s**" if s < 600 else \
            f"{n / 1e6:g} M accesses in **{s / 60:.1f} min**"
        if r.get("memory_limit_gib"):  # bench_pipeline.py --memory-limit
            text += (f" ({r['days']:g} days, in a {r['memory_limit_gib']:g} GiB memory cgroup: "
                     f"the job's own memory at most {r['anon_peak_mb'] / 1024:.1f} GiB, "
                     f"{r['oom_kills']} OOM kills)")
        return text

    out.append(("The main job end to end on 2 cores (train, judge, sweep, compile)",
                ", ".join(job(n, r) for n, r in best.items()), "pipeline.json"))
    mat_res = _load("mat")
    mat = mat_res["traces"]["cdn-like"]["sizes"]
    mid = mat[len(mat) // 2]
    m, lrbi = mid["extra"]["mat"], mid["extra"].get("lrb_inhouse")
    bmr, lru = m["byte_miss_ratio"], mid["libcachesim"]["lru"]["byte_miss_ratio"]
    t = mat_res.get("targets")
    value = f"**{bmr:.4f}** vs LRU {lru:.4f} ({100 * (bmr / lru - 1):+.1f}%)"
    if lrbi and t:  # results of bench_mat.py with the in-house LRB
        value += (f"; LRB's decision with the same model {lrbi['byte_miss_ratio']:.4f} at "
                  f"{lrbi['predictions_per_eviction']:.0f} vs "
                  f"{m['predictions_per_eviction']:.2f} predictions per eviction; at or "
                  f"below LRU at {t['at_or_below_lru']}/{t['n']} points")
    out.append((f"MAT: byte miss ratio (the paper's metric), `cdn-like` at "
                f"{100 * mid['fraction']:g}% of its bytes", value, "mat.json"))
    out.append(pannier_row(_load("pannier")))
    out.append(mlcache_row(_load("mlcache")))
    out.append(kml_row(_load("kml")))
    comp = _load("compile")
    out.append((f"`policy.so`: one admission decision in C ({comp['model']['trees']} trees)",
                f"**{comp['c_ns_per_decision'] / 1000:.2f} us**", "compile.json"))
    out.append(engine_row(_load("engine")))
    out.append(device_row(_load("device")))
    adv = _load("adversarial")
    t = adv["totals"]
    bad = sum(t[k] for k in ("unverified_code_executions", "user_files_changed",
                             "tracebacks", "hangs", "aborts", "partial_outputs",
                             "accepted_nonsense"))
    out.append(("Adversarial inputs (hostile numbers, tampered bundles, races, FIFOs)",
                f"{adv['cases']:,} cases, **{bad}** tracebacks, hangs, partial outputs or "
                "unverified code run", "adversarial.json"))
    return out


def engine_row(res: dict[str, Any]) -> tuple[str, str, str]:
    """flashrt's engine: Baleen + MAT composed, one miss + one eviction decision's p50 inside
    a replay (the figure the target is about) and from C in a hot loop, and the slots' cost on
    the hit and miss paths."""
    bm, r = res["baleen_mat"], res["lru_vs_before"]
    value = (f"**{bm['miss_plus_eviction_ns_p50'] / 1000:.1f} us** inside a replay (target "
             f"{bm['target_ns'] / 1000:g} us, load average "
             f"{res['load_avg']['timed_runs_end'][0]:.0f} on 2 cores)")
    loop = res.get("from_c_loop")
    if loop:
        value += (f", {loop['hot_decide_plus_evict_predict_ns'] / 1000:.2f} us from C in a "
                  "hot loop (MAT's part: its model call)")
    value += (f"; policy slots vs before: hit path {r['hit_path_us_p50']:.2f}x, miss path "
              f"{r['miss_path_us_p50']:.2f}x")
    return ("`flashrt` engine: Baleen admission + MAT eviction, one miss decision + one "
            "eviction decision (p50)", value, "engine.json")


def device_row(res: dict[str, Any]) -> tuple[str, str, str]:
    """`flashml device check` (bench_device.py): per policy, the simulator's peak DT beside
    the throttled device's measured peak busy time over the windows, and whether the two
    rank the policies alike."""
    pol = res["policies"]
    rho = [p["spearman"] for p in pol.values() if p["spearman"] is not None]
    t = res["throttle"]
    value = "; ".join(
        f"{n} **{p['peak_simulated_s']:.2f} s** vs {p['peak_measured_s']:.2f} s "
        f"({100 * p['peak_rel_error']:+.0f}%)" for n, p in pol.items()
        if p["peak_rel_error"] is not None)
    value += (f"; ranking by peak {'the same' if res['ranking_equal'] else 'NOT the same'} "
              f"on both sides; Spearman over windows {min(rho):.2f}-{max(rho):.2f} "
              "(targets: peak within 10%, Spearman >= 0.9)")
    eq = res.get("equal_write_rate")
    if eq:
        ch = eq["bundle_peak_vs_rejectx"]
        w = eq["flash_written_bytes"]
        value += (f"; at near-equal flash writes ({w['baleen_bundle_equal_write'] / 2**20:.0f} "
                  f"vs {w['rejectx'] / 2**20:.0f} MiB), the bundle's peak busy time vs RejectX: "
                  f"measured **{100 * ch['measured']:+.0f}%**, simulated "
                  f"{100 * ch['simulated']:+.0f}%")
    return (f"The mount on a loop device throttled to {t['read_iops']} IOPS and "
            f"{t['read_bps'] / (1 << 20):g} MiB/s: simulated peak DT vs measured peak busy "
            f"time, {res['windows']} windows", value, "device.json")


def mlcache_row(res: dict[str, Any]) -> tuple[str, str, str]:
    """MLCache's shipped policy (previous_optimal, compiled) against the best simple rule
    (shared or even) on held-out mixes and the independent MSR-like trace, and against
    previous_optimal; why the network does not ship."""
    ship, msr = res["shipped"], res["msr"]["runs"]["default"]
    fl = res["flash"]["flash"]["headline"]
    ks = sorted(ship, key=int)
    mixes = " / ".join(f"{100 * ship[k]['verdict']['vs_rival']:+.0f}%" for k in ks)
    v = msr["verdict"]
    level = max(abs(r["verdict"]["vs_previous_optimal"])
                for r in (*ship.values(), *res["msr"]["runs"].values()))
    net = res["network"]
    frac = " / ".join(f"{100 * net[k]['policies'][p]['oracle_gain_fraction']:.0f}%"
                      for p in ("mlcache", "previous_optimal") for k in sorted(net, key=int))
    half = len(net)
    parts = frac.split(" / ")
    return ("MLCache: write hit ratio of the shipped policy (`previous_optimal`, the last "
            "interval's best split in `policy.so`) vs the best simple rule (shared or even)",
            f"**{mixes}** on held-out mixes of {' / '.join(ks)} streams, "
            f"**{100 * v['vs_rival']:+.1f}%** vs {v['rival']} on a 4-host MSR-like trace; "
            f"flash mode, peak DT at the same write rate: "
            f"**{100 * fl['mlcache_vs_rival_peak_dt']:+.1f}%** vs {fl['rival']}; "
            f"level with previous_optimal everywhere (at most {100 * level:.1f}% apart). The "
            f"paper's network took {' / '.join(parts[:half])} of the oracle's gain on the "
            f"mixes, previous_optimal {' / '.join(parts[half:])}: it does not ship",
            "mlcache.json")


def kml_row(res: dict[str, Any]) -> tuple[str, str, str]:
    """KML's headline: the shipped tuner against Linux's 128 KiB readahead on the random
    workloads and against the best fixed size on every workload, on the throttled device
    (the twin where the real one did not run), means of its runs with 95% intervals."""
    name = "real" if "real" in res else "twin"
    r = res[name]
    if "shipped" not in r:  # kml.json of before the intervals (one tuner, medians)
        ratios = [x["kml_vs_best_fixed"] for x in r["workloads"].values()]
        return ("KML on RocksDB: tuner vs the best fixed readahead, per workload",
                f"**{min(ratios):.2f}-{max(ratios):.2f}x** on all {len(ratios)}", "kml.json")
    w, p = r["workloads"], r["shipped"]
    where = f"db_bench, throttled {r['backend']} device" if name == "real" else "the twin"

    def q(x: dict[str, Any]) -> str:
        return (f"{x['ratio']:.2f}x" if x["lo"] == x["hi"] else
                f"{x['ratio']:.2f}x [{x['lo']:.2f}-{x['hi']:.2f}]")

    best = [x["ratios"][p]["best_fixed"] for x in w.values()]
    low = [k for k, x in w.items() if x["ratios"][p]["best_fixed"]["ratio"] < 0.95]
    return (f"KML on RocksDB ({where}): the shipped tuner (`{p}`) vs Linux's 128 KiB readahead "
            "/ vs the best fixed size",
            f"**{q(w['readrandom']['ratios'][p]['linux_128'])}** readrandom, "
            f"{q(w['readrandomwriterandom']['ratios'][p]['linux_128'])} "
            f"readrandomwriterandom / **{min(b['ratio'] for b in best):.2f}-"
            f"{max(b['ratio'] for b in best):.2f}x** on {len(best)} workloads"
            + (f" (below 0.95 on {', '.join(low)})" if low else "")
            + (f"; means of {r['repeats']} runs, 95% intervals" if r["repeats"] > 1 else ""),
            "kml.json")


_RIVAL_NAMES = {"lru_plus": "LRU+", "mq": "MQ", "ripq_plus": "RIPQ+"}


def pannier_row(res: dict[str, Any]) -> tuple[str, str, str]:
    """Pannier against the strongest of its simple rivals (LRU+, MQ, RIPQ+) on the presets,
    where it is below its best rival, and its flash usage against LRU+ with and without the
    RAM cache in front."""
    s = res["table"]["presets"]
    rival = s["best_rival"]
    g, lru = s["pannier_vs_best_rival"], s["pannier_vs_lru_plus"]
    below: dict[str, dict[str, list[str]]] = {}
    for v in s["versus_rivals"]:
        if not v["pannier_at_or_above"]:
            below.setdefault(v["trace"], {}).setdefault(
                _RIVAL_NAMES[v["best_rival"]], []).append(v["size"])
    where = "; ".join(f"`{t}` (" + ", ".join(r + " at " + "/".join(z) for r, z in x.items())
                      + ")" for t, x in below.items())
    nr = s.get("fue_without_ram")
    fue = f"FUE {100 * lru['fue_gain']:+.1f}% vs LRU+"
    if nr:
        fue += (f" ({100 * nr['pannier_vs_lru_plus']['fue_gain']:+.1f}% without the RAM "
                "cache in front)")
    return ("Pannier: read-hit ratio vs the strongest simple rival (of LRU+, MQ, RIPQ+), "
            f"{len(s['traces'])} block presets x {len(s['per_run']) // len(s['traces'])} sizes",
            f"**{100 * g['read_hit_gain']:+.1f}%** vs {_RIVAL_NAMES[rival]} (at or above it in "
            f"{g['runs_at_or_above']}/{g['runs']} runs), {100 * lru['read_hit_gain']:+.1f}% vs "
            f"LRU+; {fue}"
            + (f"; below the run's best rival on {where}" if where else ""), "pannier.json")


def section() -> str:
    lines = [BEGIN, "| what | measured | source |", "|---|---|---|"]
    lines += [f"| {what} | {value} | `bench/results/{src}` |" for what, value, src in rows()]
    lines.append(END)
    return "\n".join(lines)


def replace_section(text: str, new: str) -> str:
    """`text` with its marked section replaced by `new` (ValueError when absent)."""
    a, b = text.index(BEGIN), text.index(END) + len(END)
    return text[:a] + new + text[b:]


def main(argv: list[str]) -> int:
    s = section()
    if "--write" in argv:
        readme = REPO / "README.md"
        readme.write_text(replace_section(readme.read_text(), s))
    else:
        print(s)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
