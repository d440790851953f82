"""Policy quality across generated traces: the main job (`flashml pipeline run`) on every
preset and several seeds, Baleen's peak-DT reduction vs RejectX next to OPT's.

    .venv/bin/python bench/bench_quality.py             # 3 presets x 3 seeds, ~8 minutes
    .venv/bin/python bench/bench_quality.py --quick     # region1-like, one seed

Each run: default trace size and write rate, Polars episodes, no sweep, no registry, no
compile (those do not change the policies). Figures go to bench/results/quality.json:
per run `baleen_vs_rejectx` and `opt_vs_rejectx` (peak-DT reduction on the evaluation days),
the chosen K and eviction age, wall time; per preset and overall the mean and range.
Target (issue 5): >= 10% on the default trace (region1-like, seed 0); the paper reports 12%
on average, 5-29% by trace.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import machine

ROOT = Path(__file__).resolve().parents[1]
PRESETS = ("region1-like", "region2-like", "region3-like")


def run_one(preset: str, seed: int, work: Path) -> dict:
    out = work / f"{preset}-{seed}"
    env = {**os.environ, "FLASHML_HOME": str(work / "state"), "MLFLOW_TRACKING_URI": ""}
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "flashml.cli", "pipeline", "run", "--preset",
                        preset, "--seed", str(seed), "--out", str(out), "--engine", "polars",
                        "--sweep-trials", "0", "--no-register", "--no-compile"],
                       capture_output=True, text=True, cwd=ROOT, env=env)
    if p.returncode != 0:
        raise SystemExit(f"pipeline run {preset} seed {seed} failed:\n{p.stderr[-3000:]}")
    s = json.loads((out / "summary.json").read_text())
    pol = s["policies"]
    rx = pol["rejectx"]["peak_dt_util"]
    return {"preset": preset, "seed": seed,
            "baleen_vs_rejectx": 1.0 - pol["baleen"]["peak_dt_util"] / rx,
            "opt_vs_rejectx": 1.0 - pol["opt"]["peak_dt_util"] / rx,
            "cachelib_ml_vs_rejectx": 1.0 - pol["cachelib_ml"]["peak_dt_util"] / rx,
            "write_rate_mbps": {k: v["flash_write_rate_mbps"] for k, v in pol.items()},
            "accesses_per_episode": s["convergence"].get("accesses_per_episode"),
            "eviction_age_s": s["eviction_age_s"], "wall_s": time.perf_counter() - t0}


def _stats(xs: list[float]) -> dict:
    return {"mean": statistics.fmean(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="region1-like seed 0 only")
    ap.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 per preset (default 3)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "quality.json")
    args = ap.parse_args()
    plan = [("region1-like", 0)] if args.quick else \
        [(p, s) for p in PRESETS for s in range(args.seeds)]
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-quality-") as d:
        for preset, seed in plan:
            r = run_one(preset, seed, Path(d))
            runs.append(r)
            print(f"{preset} seed {seed}: baleen {r['baleen_vs_rejectx']:+.1%}, opt "
                  f"{r['opt_vs_rejectx']:+.1%} (K={r['accesses_per_episode']}, "
                  f"{r['wall_s']:.0f} s)", flush=True)
    by_preset = {p: _stats([r["baleen_vs_rejectx"] for r in runs if r["preset"] == p])
                 for p in dict.fromkeys(r["preset"] for r in runs)}
    default = next(r for r in runs if r["preset"] == "region1-like" and r["seed"] == 0)
    res = {"runs": runs, "baleen_by_preset": by_preset,
           "baleen_overall": _stats([r["baleen_vs_rejectx"] for r in runs]),
           "opt_overall": _stats([r["opt_vs_rejectx"] for r in runs]),
           "default_trace": {"preset": "region1-like", "seed": 0,
                             "baleen_vs_rejectx": default["baleen_vs_rejectx"]},
           # issue 5: >= 10% on the generated Region-like traces (the paper: 12% on average,
           # 5-29% by trace); met per trace, per preset's mean, and over all runs
           "targets": {"min_reduction": 0.10},
           "meets_target": {
               "default_trace": default["baleen_vs_rejectx"] >= 0.10,
               "every_preset_mean": all(v["mean"] >= 0.10 for v in by_preset.values()),
               "overall_mean": statistics.fmean(r["baleen_vs_rejectx"] for r in runs) >= 0.10,
               "every_trace": all(r["baleen_vs_rejectx"] >= 0.10 for r in runs)},
           "machine": machine(), "quick": args.quick}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps({k: v for k, v in res.items() if k != "runs"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
