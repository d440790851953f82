"""The runtime engine's policy slots (runtime/src/engine/policy_slots.h): what the slots cost on
`flashrt replay`'s paths, and Baleen + MAT composed in one cache, timed from C.

    flock /tmp/flashml-timing.lock .venv/bin/python bench/bench_engine.py   # ~2-3 minutes
    flock /tmp/flashml-timing.lock .venv/bin/python bench/bench_engine.py --quick

(under the timing lock and not niced: its figures are latencies; the load averages at the
start and the end of the runs are recorded beside them, "load_avg").

The trace and the Baleen policy are bench_runtime.py's (region1-like cut to every 3rd block id
with IOs <= 1 MiB; demo_policy's LightGBM models compiled by `flashml compile`). MAT's model is
trained as bench_mat_flash.py trains it, on the tail candidates of a simulated flash LRU
replay of the same trace (`simulate_mat_flash(..., predictor="none", collect_samples=True)`,
`models/mat.label_samples`, `train_tta`), and compiled into an eviction bundle.

Runs, alternated REPEATS times, each on a fresh flash file with the page cache holding the
backing file: `before` = flashrt built from the commit before the slots existed (git archive
of runtime/), `lru` = this checkout's default (the eviction slot holding LRU), `mat` = this
checkout with `--eviction mat --eviction-bundle` (Baleen's admission + MAT's eviction). The
figures are medians over the runs of each run's p50:
  hit_path_us_p50, miss_path_us_p50, decision_ns_p50 (features + admission + prefetch on a
  miss): before vs lru (the slots' cost on today's paths; target: within 5%);
  mat: decision_ns_p50 + eviction_decision_ns_p50 (one MAT decision: Algorithm 1 with its
  model calls, timed in C around frt_mat_choose) = one miss decision + one eviction decision
  (target <= 1.5 us; the sum of the two p50s).
"portable_evaluator": the bundles are compiled with `flashml compile`'s default portable
evaluator (compiler/compact_trees.py: this CPU has no AVX-512 VBMI, so the portable path is
the one timed); `mat_tl2cgen` / "baleen_mat_tl2cgen" and "from_c_loop_tl2cgen" are the same
models compiled with --portable tl2cgen (TL2cgen's if/else code), replays alternated with the
others (same decisions asserted).
"from_c_loop": the same bundles called from C in a loop (bench/engine_decide_loop.c):
  flashml_policy_decide over every access's admission features and flashml_evict_predict over
  CANDIDATES rows of MAT features (objects of the trace at random points), hot (back to back)
  and cold (8 MiB written between calls, as a replay's IOs do); the eviction figure is the
  model call, without Algorithm 1's bookkeeping and feature computation.
Writes bench/results/engine.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_runtime import FLASHRT, ROOT, prepare_replay_inputs, sh
from machine import machine

REPEATS = 5
CANDIDATES = 3000


def decide_loop(trace: Path, admit: Path, evict: Path, tmp: Path) -> dict:
    """engine_decide_loop.c over the trace's admission features and MAT candidate features."""
    import random

    import numpy as np

    from flashml.features.eviction import features
    from flashml.features.online import feature_matrix
    from flashml.trace.ingest import load_trace

    df, _ = load_trace(trace, "tectonic")
    feature_matrix(df).astype(np.float64).tofile(tmp / "adm.f64")
    window = json.loads((evict / "manifest.json").read_text())["eviction"]["memory_window"]
    keys, rng = df["key"].to_list(), random.Random(0)
    seen: dict[int, list[int]] = {}
    rows = []
    for i, k in enumerate(keys):
        if seen and len(rows) < CANDIDATES and rng.random() < 0.5:
            ts = seen[keys[rng.randrange(i)]]
            rows.append(features(ts, [128 << 10] * len(ts), i, window))
        seen.setdefault(k, []).append(i)
    np.array(rows, dtype=np.float64).tofile(tmp / "ev.f64")
    exe = tmp / "engine_decide_loop"
    sh("cc", "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-o", exe,
       ROOT / "bench" / "engine_decide_loop.c", "-ldl")
    return json.loads(sh(exe, admit / "policy.so", evict / "policy.so", tmp / "adm.f64",
                         tmp / "ev.f64").stdout)


def build_before(tmp: Path) -> tuple[str, Path]:
    """flashrt of the commit before runtime/src/engine/policy_slots.h was added."""
    added = sh("git", "log", "--diff-filter=A", "--format=%H", "--",
               "runtime/src/engine/policy_slots.h").stdout.split()
    base = sh("git", "rev-parse", f"{added[-1]}^").stdout.strip()
    src = tmp / "before"
    src.mkdir()
    archive = subprocess.run(["git", "archive", base, "runtime",
                              "flashml/compiler/flashml_policy.h", "pyproject.toml"],
                             capture_output=True, cwd=ROOT, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    sh("make", "-s", "-C", src / "runtime", "build/flashrt")
    return base, src / "runtime" / "build" / "flashrt"


def compile_tl2cgen(models: Path, out: Path) -> Path:
    """The same models compiled with TL2cgen's code on the portable path (the reference)."""
    from flashml.compiler.build import compile_policy

    compile_policy(out, model_dir=models, log_to_mlflow=False, portable="tl2cgen")
    return out


def train_mat(trace: Path, capacity: int, tmp: Path) -> Path:
    """MAT's TTA model on the LRU tail candidates of the trace's first half, compiled."""
    from flashml.compiler.build import compile_policy
    from flashml.compiler.bundle import save_evict_model
    from flashml.features.eviction import contract as evict_contract
    from flashml.simulation import SimConfig
    from flashml.systems.mat.model import label_samples, mat_gbm, train_tta
    from flashml.systems.mat.simulation import simulate_mat_flash
    from flashml.trace.ingest import load_trace

    df, meta = load_trace(trace, "tectonic")
    cfg = SimConfig(capacity_segments=capacity, admission="admitall", warmup_s=0.0,
                    sample_ratio=meta.sample_ratio, block_bytes=meta.block_bytes)
    end = df.height // 2
    window = max(end, 1024)
    replay = simulate_mat_flash(df, cfg, predictor="none", collect_samples=True,
                                mat={"memory_window": window})
    rows = label_samples(replay.samples, end=end, horizon=max(end // 4, 1))
    model = train_tta(rows.features, rows.label, list(evict_contract().names), mat_gbm())
    save_evict_model(tmp / "evict-models", model.booster, k=2.0, max_candidates=10, delta=1e-4,
                     initial_threshold=float(replay.info["peak_cached_blocks"]),
                     memory_window=window, metrics=model.metrics)
    compile_policy(tmp / "evict", model_dir=tmp / "evict-models", log_to_mlflow=False)
    return tmp / "evict"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "engine.json"))
    args = ap.parse_args()
    from flashml.files import write_json

    sh("make", "-s", "-C", "runtime", "all")
    load_start = os.getloadavg()
    accesses = 8000 if args.quick else 24000
    flash_bytes = 96 << 20
    with tempfile.TemporaryDirectory(prefix="bench-engine-", dir=os.environ.get("TMPDIR")) as d:
        d = Path(d)
        base, before = build_before(d)
        trace, _ = prepare_replay_inputs(d, accesses)
        evict = train_mat(trace, flash_bytes // (128 << 10), d)
        policy_tl2 = compile_tl2cgen(d / "models", d / "policy-tl2cgen")
        evict_tl2 = compile_tl2cgen(d / "evict-models", d / "evict-tl2cgen")
        evaluator = json.loads((d / "policy" / "manifest.json").read_text()
                               )["models"]["admission"]["evaluators"]
        common = ["--trace", trace, "--flash-bytes", flash_bytes,
                  "--backing", d / "backing.img", "--warmup-s", "0", "--direct", "off", "--json"]
        pol = ["--policy", d / "policy"]
        variants = {"before": (before, pol), "lru": (FLASHRT, pol),
                    "mat": (FLASHRT, [*pol, "--eviction", "mat", "--eviction-bundle", evict]),
                    "mat_tl2cgen": (FLASHRT, ["--policy", policy_tl2, "--eviction", "mat",
                                              "--eviction-bundle", evict_tl2])}
        runs: dict[str, list[dict]] = {k: [] for k in variants}
        # the backing into the page cache
        sh(FLASHRT, "replay", "--flash", d / "warm.img", *common, *pol)
        timed_from = os.getloadavg()
        for i in range(REPEATS):
            for name, (exe, extra) in variants.items():
                flash = d / f"flash-{name}-{i}.img"
                runs[name].append(json.loads(sh(exe, "replay", "--flash", flash, *common,
                                                *extra).stdout))
                flash.unlink()
        timed_to = os.getloadavg()
        loops = {}
        for name, (adm, ev) in {"compact": (d / "policy", evict),
                                "tl2cgen": (policy_tl2, evict_tl2)}.items():
            loop = decide_loop(trace, adm, ev, d)
            loop["hot_decide_plus_evict_predict_ns"] = (loop["hot_decide_ns_p50"]
                                                        + loop["hot_evict_predict_ns_p50"])
            loop["cold_decide_plus_evict_predict_ns"] = (loop["cold_decide_ns_p50"]
                                                         + loop["cold_evict_predict_ns_p50"])
            loop["load_avg_end"] = list(os.getloadavg())
            loops[name] = loop
        loop = loops["compact"]
        keys = ("hit_path_us_p50", "miss_path_us_p50", "decision_ns_p50")
        med = {name: {k: statistics.median(r[k] for r in rs) for k in keys}
               for name, rs in runs.items()}
        mat_ev = statistics.median(r["eviction_decision_ns_p50"] for r in runs["mat"])
        tl2_ev = statistics.median(r["eviction_decision_ns_p50"] for r in runs["mat_tl2cgen"])
        m, lru = runs["mat"][0], runs["lru"][0]
        for k in ("hits", "admitted_segments", "evicted_segments"):  # the same decisions
            assert runs["mat_tl2cgen"][0][k] == m[k], k
        assert all(r["integrity_errors"] == 0 for rs in runs.values() for r in rs)
        for k in ("hits", "admitted_segments", "evicted_segments"):  # the same decisions
            assert runs["before"][0][k] == lru[k], k
        result = {
            "trace": {"preset": "region1-like", "seed": 0, "generated_accesses": accesses,
                      "kept": "every 3rd block id, IOs <= 1 MiB", "accesses": m["accesses"],
                      "gets": m["gets"]},
            "cache": {"flash_bytes": flash_bytes, "region_bytes": m["region_bytes"],
                      "regions": m["regions"]},
            "admission": "demo_policy models (LightGBM, 20 trees) via flashml compile",
            "eviction_model": "MAT TTA model (LightGBM) on the LRU tail candidates of a "
                              "simulated flash LRU replay of the trace's first half",
            "before_commit": base,
            "repeats": REPEATS,
            "paths": {name: med[name] for name in ("before", "lru")},
            "lru_vs_before": {k: med["lru"][k] / med["before"][k] for k in keys},
            "lru_decisions_equal_before": True,
            "baleen_mat": {
                "miss_decision_ns_p50": med["mat"]["decision_ns_p50"],
                "eviction_decision_ns_p50": mat_ev,
                "miss_plus_eviction_ns_p50": med["mat"]["decision_ns_p50"] + mat_ev,
                "target_ns": 1500,
                "hit_path_us_p50": med["mat"]["hit_path_us_p50"],
                "miss_path_us_p50": med["mat"]["miss_path_us_p50"],
                "eviction_decisions": m["eviction_decisions"],
                "predictions_per_decision": m["eviction_predictions"] / m["eviction_decisions"]
                if m["eviction_decisions"] else None,
                "io_hit_ratio": m["io_hit_ratio"], "io_hit_ratio_lru": lru["io_hit_ratio"],
            },
            "portable_evaluator": {"admission": evaluator,
                                   "flashml_compile": "default (--portable compact)"},
            "baleen_mat_tl2cgen": {
                "miss_decision_ns_p50": med["mat_tl2cgen"]["decision_ns_p50"],
                "eviction_decision_ns_p50": tl2_ev,
                "miss_plus_eviction_ns_p50": med["mat_tl2cgen"]["decision_ns_p50"] + tl2_ev,
                "decisions_equal_compact": True,
            },
            "from_c_loop": loop,
            "from_c_loop_tl2cgen": loops["tl2cgen"],
            "note": "medians over the runs of each run's p50; miss_plus_eviction_ns_p50 is the "
                    "sum of the two p50s (one miss decision + one MAT decision); a MAT decision "
                    "condemns a block whose segments then leave without new decisions; every "
                    "latency grows with the machine's load (machine.load_avg_1m, 2 cores shared), "
                    "the before/lru ratios come from runs alternated on the same load",
            "load_avg": {"start": list(load_start), "timed_runs_start": list(timed_from),
                         "timed_runs_end": list(timed_to),
                         "note": "os.getloadavg() (1, 5, 15 min) at the start of the bench "
                                 "and around the timed replays"},
            "machine": machine(),
        }
    write_json(Path(args.out), result)
    shown = ("paths", "lru_vs_before", "baleen_mat", "baleen_mat_tl2cgen", "from_c_loop",
             "from_c_loop_tl2cgen")
    print(json.dumps({k: result[k] for k in shown}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
