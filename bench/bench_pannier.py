"""Pannier (issue 17): the comparison table and the simulator's speed.

    .venv/bin/python bench/bench_pannier.py           # about 5 minutes
    .venv/bin/python bench/bench_pannier.py --quick   # smaller traces: a smoke test

1. `flashml pannier run` on the block presets (prn0-like, src11-like, map-like, web-like at
   Zipf 0.8) and on web-like at Zipf 0.5 and 1.0 (the paper's Fig. 13 range), each at 2.5%,
   5% and 10% of its working set, and on the CloudPhysics sample (../shared/traces): every
   policy's read-hit ratio, FUE, erasures and DWPD; Pannier against LRU+ and MQ; TIRE at half
   of Pannier's own erasure rate (worst quantum against K x quota, final credit, read-hit
   loss).
2. Pannier's parts (the paper's Fig. 8): S2LRU+ -> S2LRU* (promotion threshold, hot/cold
   packing) -> + survival queue -> + invalidation-awareness -> + ageing (= Pannier), read-hit
   ratio on src11-, prn0- and map-like at 5% of the working set; and overwrites (Fig. 13b):
   web-like at Zipf 0.8 with 0, 0.5 and 1 overwrite per read, LRU+, S2LRU+, Pannier and MQ.
3. TIRE's budget: on the four presets at 2.5/5/10%, Pannier under TIRE at 50% and 75% of its
   own erasure rate (the issue's target, loss < 10%, is stated at 75%): the read-hit loss
   against no TIRE, the worst quantum against K x q, the total against the budget (final
   credit >= 0: at most q per quantum plus the one-quantum starting credit) and the quanta
   blocked whole (credit <= 0 at their start).
4. Speed: block accesses per second of every policy on a 2 M-request src11-like trace, and
   per-block LRU side by side with libCacheSim's LRU on the same block stream (reads only,
   count capacity; the hits must be equal).

Writes bench/results/pannier.json and prints the table of docs/systems/pannier.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from machine import machine  # noqa: E402

from flashml.blockcache import POLICIES, preset_requests, simulate  # noqa: E402
from flashml.files import atomic_path, dumps, jsonable  # noqa: E402
from flashml.jobs.pannier import PannierSettings  # noqa: E402
from flashml.trace.blockgen import get_block_preset, write_block_msr  # noqa: E402

CLOUDPHYSICS = ROOT.parent / "shared" / "traces" / "cloudphysics-sample.csv"
RESULTS = ROOT / "bench" / "results"
FLASHML = ROOT / ".venv" / "bin" / "flashml"
#: the job's RAM cache in front of the flash cache (the paper's simulator: 5%)
RAM_PCT = PannierSettings().ram_pct


def sim(req: Any, policy: str, cache: int, **knobs: Any) -> dict[str, Any]:
    """One policy as the job runs it: with the job's RAM cache in front."""
    return simulate(req, policy, cache, **{"ram_pct": RAM_PCT, **knobs})


def run_job(args: list[str], out: Path) -> dict[str, Any]:
    subprocess.run([str(FLASHML), "pannier", "run", *args, "-o", str(out)], check=True,
                   cwd=ROOT, stdout=subprocess.DEVNULL)
    return json.loads((out / "summary.json").read_text())


def table(quick: bool, work: Path) -> dict[str, Any]:
    n = ["--requests", "40000"] if quick else []
    out: dict[str, Any] = {}
    out["presets"] = run_job(["--presets", "prn0-like,src11-like,map-like,web-like", *n],
                             work / "presets")
    for z in (0.5, 1.0):
        p = get_block_preset("web-like", zipf=z)
        csv = work / f"web-zipf{z}.csv"
        write_block_msr(p, 0, csv, requests=40_000 if quick else None)
        out[f"web_zipf{z}"] = run_job(["--trace", str(csv), "--format", "msr"],
                                      work / f"web{z}")
    if CLOUDPHYSICS.exists():
        out["cloudphysics"] = run_job(["--trace", str(CLOUDPHYSICS), "--format",
                                       "cloudphysics"], work / "cp")
    return out


def speed(quick: bool) -> dict[str, Any]:
    n = 200_000 if quick else 2_000_000
    req = preset_requests(get_block_preset("src11-like"), 0, n)
    cache = int(req.working_set_bytes() * 0.05)
    rows: dict[str, Any] = {}
    for p in POLICIES:
        best = None
        for _ in range(2):
            m = sim(req, p, cache)
            best = m if best is None or m["wall_s"] < best["wall_s"] else best
        rows[p] = {"blocks_per_s": best["blocks_per_s"], "requests_per_s": best["requests_per_s"],
                   "wall_s": best["wall_s"]}
        print(f"  {p:11} {best['blocks_per_s'] / 1e6:6.2f} M blocks/s "
              f"{best['requests_per_s'] / 1e6:6.2f} M requests/s")
    out: dict[str, Any] = {"requests": len(req), "blocks": req.blocks, "cache_bytes": cache,
                           "policies": rows}
    try:
        from flashml.policies.object_baselines import run_baselines

        rq = req.subset(~req.writes)
        keys = rq.block_keys()
        blocks = cache // 4096
        t0 = time.perf_counter()
        ours = simulate(rq, "lru", blocks * 4096, container_bytes=1 << 20)
        t_ours = time.perf_counter() - t0
        lcs = run_baselines(keys, np.ones(len(keys), dtype=np.int64), blocks, unit="objects",
                            policies=("lru",), isolate=False)[blocks]["lru"]
        out["vs_libcachesim_lru"] = {
            "blocks": int(len(keys)), "ours_s": t_ours, "ours_sim_s": ours["wall_s"],
            "libcachesim_s": lcs["seconds"], "libcachesim_wall_s": lcs["wall_s"],
            "hits_equal": int(lcs["hits"]) == int(ours["page_read_hits"]),
            "speedup_wall": lcs["wall_s"] / t_ours}
        print(f"  per-block LRU vs libCacheSim LRU: {out['vs_libcachesim_lru']}")
    except Exception as e:  # noqa: BLE001 (the peer is optional: say why it is missing)
        out["vs_libcachesim_lru"] = {"error": str(e)}
    return out


def parts(quick: bool) -> dict[str, Any]:
    n = 50_000 if quick else 200_000
    steps = {"s2lru_plus": ("s2lru_plus", {}),
             "s2lru_star": ("pannier", {"survival": False, "aging": False,
                                        "invalidation_aware": False}),
             "survival": ("pannier", {"aging": False, "invalidation_aware": False}),
             "invalidation": ("pannier", {"aging": False}),
             "aging (pannier)": ("pannier", {})}
    out: dict[str, Any] = {"ablation": {}, "overwrites": {}}
    for pre in ("src11-like", "prn0-like", "map-like"):
        req = preset_requests(get_block_preset(pre), 0, n)
        c = int(req.working_set_bytes() * 0.05)
        out["ablation"][pre] = {k: sim(req, p, c, **kw)["read_hit_ratio"]
                                for k, (p, kw) in steps.items()}
        print(f"  {pre}: " + ", ".join(f"{k} {v:.4f}" for k, v in out["ablation"][pre].items()))
    for ow in (0.0, 0.5, 1.0):
        req = preset_requests(get_block_preset("web-like", overwrites=ow), 0, n)
        c = int(req.working_set_bytes() * 0.05)
        out["overwrites"][str(ow)] = {p: sim(req, p, c)["read_hit_ratio"]
                                      for p in ("lru_plus", "s2lru_plus", "pannier", "mq")}
        print(f"  web-like, {ow} overwrites per read: {out['overwrites'][str(ow)]}")
    return out


def tire_budgets(quick: bool) -> dict[str, Any]:
    n = 50_000 if quick else None
    rows: dict[str, list[dict[str, Any]]] = {"0.5": [], "0.75": []}
    for pre in ("prn0-like", "src11-like", "map-like", "web-like"):
        req = preset_requests(get_block_preset(pre), 0, n)
        ws = req.working_set_bytes()
        for pct in (0.025, 0.05, 0.10):
            c = int(ws * pct)
            free = sim(req, "pannier", c)
            for frac in rows:
                t = sim(req, "pannier", c, tire_epbpd=free["epbpd"] * float(frac))
                rows[frac].append({
                    "trace": pre, "size": pct,
                    "loss": 1 - t["read_hit_ratio"] / free["read_hit_ratio"],
                    "within": bool(t["quanta_erasures"].max() <= 4 * t["quota"] + 1),
                    "max_quantum_erasures": int(t["quanta_erasures"].max()),
                    "quota": float(t["quota"]), "erasures": int(t["erasures"]),
                    "erasure_cut": 1 - t["erasures"] / max(free["erasures"], 1),
                    "final_credit": float(t["final_credit"]),
                    "within_budget": bool(t["final_credit"] >= 0),
                    "blocked_quanta": int(np.sum(t["quanta_blocked"])),
                    "quanta": len(t["quanta_erasures"])})
    out = {f: {"mean_loss": float(np.mean([x["loss"] for x in v])),
               "max_loss": float(np.max([x["loss"] for x in v])),
               "within": sum(x["within"] for x in v),
               "within_budget": sum(x["within_budget"] for x in v),
               "blocked_quanta": sum(x["blocked_quanta"] for x in v), "runs": len(v),
               "rows": v}
           for f, v in rows.items()}
    for f, v in out.items():
        print(f"  TIRE at {f} of Pannier's rate: read-hit loss {v['mean_loss']:.1%} mean, "
              f"{v['max_loss']:.1%} max (target < 10% at 0.75); within K x q "
              f"{v['within']}/{v['runs']}, within the budget {v['within_budget']}/{v['runs']}, "
              f"{v['blocked_quanta']} quanta blocked whole")
    return out


def readme(res: dict[str, Any]) -> str:
    s = res["table"]["presets"]
    lines = ["| policy | read-hit ratio | FUE | erasures | DWPD |", "|---|---|---|---|---|"]
    for p, m in s["policies"].items():
        lines.append(f"| {p} | {m['read_hit_ratio']:.4f} | {m['fue']:.3f} | "
                     f"{m['erasures']:.0f} | {m['dwpd']:.1f} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    work = ROOT / ".flashml" / "bench-pannier"
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    print("speed:")
    sp = speed(args.quick)
    print("Pannier's parts and overwrites:")
    pa = parts(args.quick)
    print("TIRE's budget:")
    tb = tire_budgets(args.quick)
    print("comparison table (flashml pannier run):")
    tab = table(args.quick, work)
    res = {"machine": machine(), "quick": args.quick, "speed": sp, "parts": pa,
           "tire_budgets": tb, "table": tab,
           "seconds": time.perf_counter() - t0}
    for name, s in tab.items():
        g, m = s["pannier_vs_lru_plus"], s["pannier_vs_mq"]
        tires = [r for r in s["tire"] if r["policy"] == "pannier_tire"]
        print(f"{name}: pannier vs lru_plus read-hit {g['read_hit_gain']:+.1%} (ahead "
              f"{g['runs_ahead']}/{g['runs']}), FUE {g['fue_gain']:+.1%}; vs mq read-hit "
              f"{m['read_hit_gain']:+.1%}; TIRE within K x q "
              f"{sum(r['within_slack'] for r in tires)}/{len(tires)}, read-hit loss "
              f"{np.mean([r['read_hit_loss'] for r in tires]):.1%}")
    print(readme(res))
    RESULTS.mkdir(parents=True, exist_ok=True)
    with atomic_path(RESULTS / "pannier.json") as tmp:
        Path(tmp).write_text(dumps(jsonable(res)))
    print(f"wrote {RESULTS / 'pannier.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
