"""Conformance with the Baleen artifact's simulator (BCacheSim), side by side.

    .venv/bin/python bench/bench_conformance.py --bcachesim DIR --bcachesim-python PY
    FLASHML_BCACHESIM=DIR FLASHML_BCACHESIM_PYTHON=PY make bench   # the same, from make

DIR is a checkout of github.com/wonglkd/BCacheSim at commit ddeb2d8 (the Baleen artifact's)
and PY a Python with its pinned requirements (install/requirements.txt, Python 3.11). Nothing
is fetched at run time; without DIR the bench says so and keeps the last results.

On generated Tectonic traces (3 presets, 3 days, the presets' sample ratios, cache 366.475 GB,
LRU, 10-minute windows, the first day skipped), each policy runs in both simulators:
admit-all, RejectX (X=1) at history factors 0.5 and 2, CoinFlip p=0.3, OPT given the same
episode decisions (flashml's episode job writes BCacheSim's offline decisions file), with
and without OPT-Range prefetch. Every shared metric is written with both values and the
relative difference to bench/results/conformance.json, with the wall time of each simulator
and the speed ratio. Targets: admit-all, RejectX and OPT (the same decisions)
equal to 4 significant digits (both simulators are deterministic); CoinFlip with flashml's
own coin within 2% on whole-trace figures; flashml >= 1000x BCacheSim's speed.

`--record` also writes the BCacheSim figures of the exact policies to
tests/fixtures/bcachesim_conformance.json, which tests/kernel/test_conformance.py checks flashml
against in CI (facts measured here, not code: no BCacheSim code is in this repository).
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

from conformance_cases import (  # noqa: E402
    BCACHESIM_COMMIT,
    CACHE_GB,
    METRIC_MAP,
    POLICIES,
    TRACES,
    bcachesim_decisions,
    flashml_metrics,
    generate,
    opt_episodes,
)
from machine import machine  # noqa: E402

from flashml.errors import UserError  # noqa: E402
from flashml.files import write_json  # noqa: E402

OUT = ROOT / "bench" / "results" / "conformance.json"
FIXTURE = ROOT / "tests" / "fixtures" / "bcachesim_conformance.json"


def check_checkout(path: Path, python: Path) -> None:
    if not (path / "cachesim" / "simulate_ap.py").is_file():
        raise UserError(f"{path}: not a BCacheSim checkout (no cachesim/simulate_ap.py)")
    try:
        head = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], check=True,
                              capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as e:
        raise UserError(f"{path}: cannot read its git commit ({e})") from e
    if not head.startswith(BCACHESIM_COMMIT):
        raise UserError(f"{path}: BCacheSim at commit {head[:12]}, the bench needs "
                        f"{BCACHESIM_COMMIT} (the Baleen artifact's)")
    if not python.is_file():
        raise UserError(f"{python}: no such Python for BCacheSim (--bcachesim-python)")


def write_decisions(trace: Path, policy: dict[str, Any], out: Path) -> Path:
    """flashml's OPT episodes as BCacheSim's offline decisions file (a gzipped pickle of
    plain tuples and dicts: no BCacheSim code involved)."""
    import gzip
    import pickle

    from flashml.config import UNITS

    out.mkdir(parents=True, exist_ok=True)
    labels = opt_episodes(trace, policy["opt_episodes"], out)
    path = out / "decisions.pkl.gz"
    with gzip.open(path, "wb") as f:
        pickle.dump(bcachesim_decisions(labels, UNITS.segment_bytes), f, protocol=4)
    return path


def bcachesim_args(policy: dict[str, Any], trace: Path, work: Path) -> list[str]:
    args = ["--ap", policy["bcachesim_ap"], "--ap-threshold", "1"]
    if "bcachesim_probability" in policy:
        args += ["--ap-probability", repr(policy["bcachesim_probability"])]
    args += policy.get("bcachesim_args", [])
    if "opt_episodes" in policy:
        args += ["--offline-ap-decisions", str(write_decisions(trace, policy, work))]
    return args


def run_bcachesim(checkout: Path, python: Path, trace: Path, policy: dict[str, Any],
                  out: Path) -> dict[str, Any]:
    """One BCacheSim run; returns its `results` dict (and the process wall time)."""
    args = bcachesim_args(policy, trace, out.parent / f"{out.name}-decisions")
    cmd = [str(python), "-m", f"{checkout.name}.cachesim.simulate_ap", "-o", str(out),
           "--size_gb", repr(CACHE_GB), "--log-interval", "600", "--stats-start", "86400",
           "--eviction-policy", "LRU", "--ignore-existing", *args,
           str(trace)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=checkout.parent, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    found = list(out.glob("*/*_cache_perf.txt.lzma"))
    if proc.returncode != 0 or not found:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-15:])
        raise RuntimeError(f"BCacheSim failed on {trace} {policy['name']}:\n{tail}")
    with lzma.open(found[0]) as f:
        results = json.load(f)["results"]
    results["_process_wall_s"] = wall
    return results


def compare(ours: dict[str, float], theirs: dict[str, Any]) -> dict[str, Any]:
    rows = {}
    for key, (their_key, scale) in METRIC_MAP.items():
        v = theirs[their_key]
        if isinstance(v, list):  # [logical, physical]: the physical one
            v = v[1]
        b = float(v) * scale
        a = float(ours[key])
        rel = abs(a - b) / abs(b) if b else abs(a - b)
        rows[key] = {"flashml": a, "bcachesim": b, "bcachesim_key": their_key, "rel_diff": rel}
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bcachesim", type=Path, default=os.environ.get("FLASHML_BCACHESIM"),
                    help="BCacheSim checkout at ddeb2d8 (default $FLASHML_BCACHESIM)")
    ap.add_argument("--bcachesim-python", type=Path,
                    default=os.environ.get("FLASHML_BCACHESIM_PYTHON"),
                    help="Python with BCacheSim's requirements (default "
                    "$FLASHML_BCACHESIM_PYTHON, else DIR/../venv/bin/python)")
    ap.add_argument("--record", action="store_true",
                    help=f"also write the exact policies' BCacheSim figures to {FIXTURE}")
    ap.add_argument("--jobs", type=int, default=2, help="BCacheSim runs in parallel")
    args = ap.parse_args()
    if args.bcachesim is None:
        print("conformance: no BCacheSim checkout (--bcachesim or $FLASHML_BCACHESIM); "
              f"skipped, {OUT.relative_to(ROOT)} kept as it was")
        return 0
    checkout = args.bcachesim.resolve()
    python = (args.bcachesim_python or checkout.parent / "venv" / "bin" / "python").absolute()
    try:
        check_checkout(checkout, python)
    except UserError as e:
        print(f"flashml: error: {e}", file=sys.stderr)
        return 2
    runs = []
    with tempfile.TemporaryDirectory(prefix="flashml-conformance-") as tmp:
        jobs = []
        for tr in TRACES:
            path = generate(tr, Path(tmp))
            for pol in POLICIES:
                jobs.append((tr, pol, path, Path(tmp) / "out" / tr["name"] / pol["name"]))
        print(f"conformance: {len(jobs)} BCacheSim runs ({args.jobs} at a time)...", flush=True)
        with ThreadPoolExecutor(args.jobs) as pool:
            theirs = list(pool.map(lambda j: run_bcachesim(checkout, python, j[2], j[1], j[3]),
                                   jobs))
        for (tr, pol, path, _), th in zip(jobs, theirs, strict=True):
            t0 = time.perf_counter()
            ours = flashml_metrics(path, pol)
            ours_wall = time.perf_counter() - t0
            rows = compare(ours, th)
            judged = pol.get("judged", list(rows))
            worst = max(rows[k]["rel_diff"] for k in judged)
            tol = pol["tolerance"]
            runs.append({
                "trace": tr, "policy": pol["name"], "tolerance": tol, "judged": judged,
                "passed": worst <= tol, "worst_rel_diff": worst, "metrics": rows,
                "bcachesim_sim_wall_s": th["SimWallClockTime"],
                "bcachesim_process_wall_s": th["_process_wall_s"],
                "flashml_sim_wall_s": ours["wall_s"], "flashml_total_wall_s": ours_wall,
                "speedup_sim": th["SimWallClockTime"] / ours["wall_s"],
                "speedup_end_to_end": th["_process_wall_s"] / ours_wall,
            })
            print(f"  {tr['name']:<12} {pol['name']:<12} worst rel diff {worst:.2e} "
                  f"(tolerance {tol:g}) {'ok' if worst <= tol else 'FAIL'}; "
                  f"sim {th['SimWallClockTime']:.1f} s vs {ours['wall_s'] * 1e3:.1f} ms "
                  f"= {th['SimWallClockTime'] / ours['wall_s']:,.0f}x", flush=True)
            if args.record and pol["tolerance"] <= 1e-4:
                runs[-1]["fixture"] = {k: r["bcachesim"] for k, r in rows.items()}
    speed = sorted(r["speedup_sim"] for r in runs)
    result = {
        "bcachesim_commit": BCACHESIM_COMMIT, "machine": machine(), "cache_gb": CACHE_GB,
        "all_passed": all(r["passed"] for r in runs),
        "speedup_sim_min": speed[0], "speedup_sim_median": speed[len(speed) // 2],
        "runs": runs,
    }
    write_json(OUT, result)
    print(f"conformance: {sum(r['passed'] for r in runs)}/{len(runs)} within tolerance; "
          f"simulator speed-up {speed[0]:,.0f}x - {speed[-1]:,.0f}x -> {OUT.relative_to(ROOT)}")
    if args.record:
        fixture = {
            "about": "BCacheSim (github.com/wonglkd/BCacheSim @ ddeb2d8) figures on traces "
                     "generated by `flashml trace generate`; recorded by "
                     "bench/bench_conformance.py --record, checked by "
                     "tests/kernel/test_conformance.py",
            "cases": [{"trace": r["trace"], "policy": r["policy"], "bcachesim": r["fixture"]}
                      for r in runs if "fixture" in r],
        }
        write_json(FIXTURE, fixture)
        print(f"conformance: fixtures -> {FIXTURE.relative_to(ROOT)}")
    return 0 if result["all_passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
