"""Where the prefetching gain goes: Baleen's learned prefetcher against OPT's ranges.

    .venv/bin/python bench/bench_prefetch.py            # 3 presets, seed 0, ~3 minutes
    .venv/bin/python bench/bench_prefetch.py --quick    # region3-like only

For each preset the main job runs as in bench_quality.py (Polars episodes, no sweep). With
its trained models (`OUT/policy`) and the OPT labels of its final eviction age
(`OUT/episodes`), every variant below is simulated at the target write rate (the admission
threshold re-tuned each time) and reported as the peak-DT reduction vs RejectX on the
evaluation days:

  admission_only          ML admission, no prefetch
  ml_range_every_miss     + ML-Range on every admitted miss
  ml_range_ml_when        + ML-Range where ML-When >= 0.5 (the artifact's rule)
  ml_range_partial_hit    + ML-Range on partial hits only (the paper's other option, §3.6)
  ml_range_oracle_when    + ML-Range where the episode's ML-When label is 1 (OPT knowledge)
  opt_range               + OPT-Range of each access's episode on every admitted miss
                            (OPT knowledge: what a perfect range model would give)
  opt_admission_only      OPT admission, no prefetch (what a perfect admission model would
                          give without prefetching)
  opt                     OPT admission + OPT-Range (the bound)

plus the range quality of ML-Range on the OPT-admitted episodes of the evaluation days: the
mean share of OPT-Range covered and of the predicted range outside it (overfetch), and the
mean absolute error of its ends in segments. Figures go to bench/results/prefetch.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import polars as pl
from bench_quality import run_one
from machine import machine

ROOT = Path(__file__).resolve().parents[1]
PRESETS = ("region1-like", "region2-like", "region3-like")


def ablation(out: Path) -> dict:
    from flashml.features.contract import contract
    from flashml.features.online import feature_matrix
    from flashml.simulation import SimConfig
    from flashml.systems.baleen.baselines import tune_threshold
    from flashml.systems.baleen.model import score_all
    from flashml.systems.baleen.opt import tune_opt
    from flashml.systems.baleen.registry import load_policy_dir
    from flashml.trace.canonical import read_table

    s = json.loads((out / "summary.json").read_text())
    df, meta = read_table(out / "accesses.parquet")
    feats = feature_matrix(df)
    arrays = score_all(load_policy_dir(out / "policy"), feats)
    base = SimConfig.for_trace(meta, cache_gb=s["cache_gb"])
    target = s["target_write_rate_mbps"]
    rx = s["policies"]["rejectx"]["peak_dt_util"]
    n = len(feats)
    labels = pl.read_parquet(out / "episodes" / "labels.parquet")
    rows = labels["row"].to_numpy().astype(np.int64)
    opt_start, opt_end, when_label = np.full(n, -1), np.full(n, -1), np.zeros(n)
    opt_start[rows] = labels["range_start"].to_numpy()
    opt_end[rows] = labels["range_end"].to_numpy()
    when_label[rows] = labels["when_label"].to_numpy()

    def reduction(a: dict[str, np.ndarray], **prefetch: object) -> float:
        t = tune_threshold(df, base.replace(**prefetch.pop("cfg", {})), target, a, **prefetch)
        return 1.0 - t.result.metrics["peak_dt_util"] / rx

    ml = {k: arrays[k] for k in ("score", "prefetch_start", "prefetch_end")}
    variants = {
        "admission_only": reduction({"score": arrays["score"]}),
        "ml_range_every_miss": reduction(ml, prefetch="range"),
        "ml_range_ml_when": reduction(arrays, prefetch="range", prefetch_when="score",
                                      cfg={"when_threshold": 0.5}),
        "ml_range_partial_hit": reduction(ml, prefetch="range", prefetch_when="partial"),
        "ml_range_oracle_when": reduction({**ml, "when_score": when_label}, prefetch="range",
                                          prefetch_when="score", cfg={"when_threshold": 0.5}),
        "opt_range": reduction({"score": arrays["score"], "prefetch_start": opt_start,
                                "prefetch_end": opt_end}, prefetch="range"),
        "opt_admission_only": 1.0 - tune_opt(
            df, out / "accesses.parquet", base, target, s["eviction_age_s"],
            out / "work" / "opt-admission-only", prefetch=False
        ).result.metrics["peak_dt_util"] / rx,
        "opt": 1.0 - s["policies"]["opt"]["peak_dt_util"] / rx,
    }
    # ML-Range at the first access of each OPT-admitted episode of the evaluation days
    eps = pl.read_parquet(out / "episodes" / "episodes.parquet").filter(pl.col("admitted"))
    first = eps["first_row"].to_numpy().astype(np.int64)
    times = df["time"].to_numpy()
    ev = times[first] >= times[0] + 86_400.0
    f, r0, r1 = first[ev], eps["range_start"].to_numpy()[ev], eps["range_end"].to_numpy()[ev]
    c = contract()
    p0 = np.minimum(arrays["prefetch_start"][f], feats[f, c.names.index("start")])
    p1 = np.maximum(arrays["prefetch_end"][f], feats[f, c.names.index("end")])
    inter = np.clip(np.minimum(p1, r1) - np.maximum(p0, r0) + 1, 0, None)
    quality = {"episodes": int(len(f)),
               "coverage": float((inter / (r1 - r0 + 1)).mean()),
               "overfetch": float((1 - inter / (p1 - p0 + 1)).mean()),
               "start_abs_error_segments": float(np.abs(p0 - r0).mean()),
               "end_abs_error_segments": float(np.abs(p1 - r1).mean())}
    return {"vs_rejectx": variants, "ml_range_quality": quality,
            "pipeline_baleen_vs_rejectx": s["baleen_vs_rejectx_peak_reduction"],
            "accesses_per_episode": s["convergence"].get("accesses_per_episode")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="region3-like only")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "prefetch.json")
    args = ap.parse_args()
    presets = ("region3-like",) if args.quick else PRESETS
    res: dict = {"seed": args.seed, "runs": {}}
    with tempfile.TemporaryDirectory(prefix="bench-prefetch-") as d:
        for preset in presets:
            run_one(preset, args.seed, Path(d))
            r = ablation(Path(d) / f"{preset}-{args.seed}")
            res["runs"][preset] = r
            print(preset, " ".join(f"{k} {v:+.1%}" for k, v in r["vs_rejectx"].items()),
                  "| ML-Range coverage {coverage:.0%} overfetch {overfetch:.0%}".format(
                      **r["ml_range_quality"]), flush=True)
    res["machine"] = machine()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
