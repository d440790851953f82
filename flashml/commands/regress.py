"""`flashml regress`: the model-regression check. Simulates a candidate policy and a
baseline policy on the same evaluation trace, each with its own shipped thresholds, prints
them side by side, and exits 1 when the candidate regressed:

  - its peak DT utilisation exceeds the baseline's by more than --tolerance (relative:
    candidate > baseline x (1 + tolerance)), or
  - its flash write rate exceeds the target (--target-write-rate, default the candidate's
    own target) by more than --write-rate-tolerance (relative).

A policy (RUN_OR_BUNDLE) is any of:
  - a compiled bundle folder (`flashml compile -o DIR`: policy.so + manifest.json): the
    simulator loads the .so and computes the features online;
  - a model bundle folder (policy.json + LightGBM text models, or a folder with policy/ in
    it): the models score every access in Python, the simulator applies the thresholds
    and prefetch ranges (the same decisions as the compiled .so);
  - a folder holding `compiled/` (a run folder, an exported `v<N>/`): its compiled bundle;
  - an MLflow run id (the run's `policy/` artifacts, from $MLFLOW_TRACKING_URI or the
    embedded store).
"""

from __future__ import annotations

import argparse
import math
import re
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from flashml.commands.trace import TRACE_OPTIONS
from flashml.config import DEFAULTS
from flashml.errors import UserError
from flashml.files import dumps
from flashml.settings import OPTIONS, Number, Option, add_options, option_table, option_values

#: Rows of the side-by-side table: metric key, label, format.
ROWS = (
    ("peak_dt_util", "peak DT utilisation", "{:.4f}"),
    ("mean_dt_util", "mean DT utilisation", "{:.4f}"),
    ("p99_dt_util", "P99 DT utilisation", "{:.4f}"),
    ("flash_write_rate_mbps", "flash write rate MB/s", "{:.3f}"),
    ("dwpd", "DWPD", "{:.3f}"),
    ("io_hit_ratio", "IO hit ratio", "{:.4f}"),
    ("byte_hit_ratio", "byte hit ratio", "{:.4f}"),
    ("admitted_segments", "admitted segments", "{:.0f}"),
    ("prefetched_segments", "prefetched segments", "{:.0f}"),
)


@dataclass
class Resolved:
    kind: str  # "compiled" | "models"
    path: Path
    source: str
    params: dict[str, Any]


def resolve(spec: str, tmp: Path) -> Resolved:
    """RUN_OR_BUNDLE -> a local compiled or model bundle."""
    from flashml.compiler.bundle import POLICY_JSON, fetch_bundle, read_policy_json

    p = Path(spec)
    if p.is_dir():
        for cand in (p, p / "compiled"):
            if (cand / "manifest.json").is_file():
                from flashml.compiler.loader import read_manifest

                return Resolved("compiled", cand, spec, read_manifest(cand))
        for cand in (p, p / "policy"):
            if (cand / POLICY_JSON).is_file():
                return Resolved("models", cand, spec, read_policy_json(cand))
        raise UserError(f"{p}: neither a compiled bundle (manifest.json) nor a model bundle "
                        "(policy.json + LightGBM models)")
    if p.exists():
        raise UserError(f"{p}: a policy must be a folder or an MLflow run id")
    if not re.fullmatch(r"[0-9a-fA-F]{16,64}", spec):
        raise UserError(f"{spec}: no such folder, and not an MLflow run id")
    from flashml.tracking import setup

    setup()
    folder, _, source = fetch_bundle(run_id=spec, dest=tmp / spec)
    return Resolved("models", folder, source, read_policy_json(folder))


def simulate_resolved(pol: Resolved, df: Any, base: Any) -> dict[str, Any]:
    """Metrics of the policy with its own thresholds on the trace."""
    from flashml.simulation import online_features, simulate, simulate_policy

    if pol.kind == "compiled":
        try:
            return dict(simulate_policy(df, pol.path, base).metrics)
        except ValueError as e:
            raise UserError(f"{pol.source}: {e}") from None
    from flashml.compiler.bundle import sim_peak
    from flashml.systems.baleen.model import score_all
    from flashml.systems.baleen.registry import load_policy_dir

    try:
        policy = load_policy_dir(pol.path)
    except Exception as e:  # LightGBM raises its own error type on a bad model file
        raise UserError(f"{pol.source}: cannot load the LightGBM models: {e}") from None
    arrays = score_all(policy, online_features(df))
    cfg = base.replace(admission="threshold", threshold=pol.params["admit_threshold"],
                       prefetch="range", prefetch_when="score",
                       when_threshold=pol.params["when_threshold"], **sim_peak(pol.params))
    return dict(simulate(df, cfg, **arrays).metrics)


def compare(cand: dict[str, Any], base: dict[str, Any], *, tolerance: float, target: float,
            write_rate_tolerance: float) -> list[str]:
    """Reasons the candidate regressed (empty: it passes)."""
    fails = []
    cp, bp = float(cand["peak_dt_util"]), float(base["peak_dt_util"])
    if cp > bp * (1 + tolerance):
        fails.append(f"peak DT {cp:.4f} is {cp / bp - 1:+.2%} vs the baseline's {bp:.4f} "
                     f"(tolerance {tolerance:.2%})")
    wr = float(cand["flash_write_rate_mbps"])
    if wr > target * (1 + write_rate_tolerance):
        fails.append(f"write rate {wr:.3f} MB/s exceeds the target {target:.3f} MB/s by more "
                     f"than {write_rate_tolerance:.0%}")
    return fails


def table(cand: dict[str, Any], base: dict[str, Any]) -> str:
    head = f"{'metric':24} {'candidate':>12} {'baseline':>12} {'change':>9}"
    lines = [head, "-" * len(head)]
    for key, label, fmt in ROWS:
        c, b = cand.get(key), base.get(key)
        if c is None or b is None:
            continue
        c, b = float(c), float(b)
        ch = f"{c / b - 1:+.2%}" if b and math.isfinite(b) and math.isfinite(c) else "-"
        lines.append(f"{label:24} {fmt.format(c):>12} {fmt.format(b):>12} {ch:>9}")
    return "\n".join(lines)


#: `flashml regress`'s options.
REGRESS_OPTIONS = option_table(
    Option("candidate", "--candidate", str, None, "the policy under test",
           metavar="RUN_OR_BUNDLE", required=True),
    Option("baseline", "--baseline", str, None, "the reference policy (e.g. the champion, or "
           "regress/baseline)", metavar="RUN_OR_BUNDLE", required=True),
    replace(TRACE_OPTIONS["trace"], help="evaluation trace: canonical .parquet or raw (see "
            "--format)"),
    TRACE_OPTIONS["format"],
    TRACE_OPTIONS["sample_ratio"],
    Option("cache_gb", "--cache-gb", OPTIONS["cache_gb"].type, OPTIONS["cache_gb"].default,
           "cache size at full-node scale"),
    Option("tolerance", "--tolerance", Number(float, 0.0, 100.0), 0.01,
           "allowed relative peak-DT increase over the baseline"),
    Option("target_write_rate", "--target-write-rate", OPTIONS["target_write_rate_mbps"].type,
           None, "write-rate limit (default the candidate's own target)", metavar="MBPS"),
    Option("write_rate_tolerance", "--write-rate-tolerance", Number(float, 0.0, 100.0), 0.05,
           "allowed relative write-rate excess over the target"),
    Option("json", "--json", bool, False, "print the comparison as JSON"),
)


def cmd_regress(args: argparse.Namespace) -> int:
    from flashml.simulation import SimConfig
    from flashml.trace.ingest import load_trace

    v = option_values(REGRESS_OPTIONS, args)
    trace, cache_gb, tolerance = v["trace"], v["cache_gb"], v["tolerance"]
    if not trace.exists():
        raise UserError(f"{trace}: no such trace")
    with tempfile.TemporaryDirectory(prefix="flashml-regress-") as tmp:
        cand = resolve(v["candidate"], Path(tmp))
        basep = resolve(v["baseline"], Path(tmp))
        df, meta = load_trace(trace, v["format"], sample_ratio=v["sample_ratio"])
        if df.height == 0:
            raise UserError(f"{trace}: no accesses")
        sim = SimConfig.for_trace(meta, cache_gb=cache_gb)
        cm = simulate_resolved(cand, df, sim)
        bm = simulate_resolved(basep, df, sim)
    target = v["target_write_rate"] or float(cand.params.get("target_write_rate_mbps") or
                                             DEFAULTS.target_write_rate_mbps)
    fails = compare(cm, bm, tolerance=tolerance, target=target,
                    write_rate_tolerance=v["write_rate_tolerance"])
    if v["json"]:
        print(dumps({"candidate": {"source": cand.source, "kind": cand.kind, "metrics": cm},
                     "baseline": {"source": basep.source, "kind": basep.kind, "metrics": bm},
                     "target_write_rate_mbps": target, "tolerance": tolerance,
                     "passed": not fails, "failures": fails}))
    else:
        print(f"trace: {trace} ({df.height} accesses, sample ratio {meta.sample_ratio:g}%,"
              f" cache {cache_gb:g} GB, target {target:.3f} MB/s)")
        print(f"candidate: {cand.source} ({cand.kind})")
        print(f"baseline:  {basep.source} ({basep.kind})")
        print()
        print(table(cm, bm))
        print()
        if fails:
            for f in fails:
                print(f"REGRESSION: {f}")
        else:
            print(f"PASS: candidate peak DT within {tolerance:.2%} of the baseline and "
                  f"write rate within the target")
    return 1 if fails else 0


def degrade_bundle(src: str | Path, dst: str | Path) -> Path:
    """A deliberately worse copy of a model bundle (for drills and tests): the admission
    model's leaf values are negated, so it ranks accesses in reverse. The thresholds stay."""
    import shutil

    from flashml.compiler.bundle import MODEL_FILES, find_bundle

    src = find_bundle(Path(src))
    dst = Path(dst)
    shutil.copytree(src, dst)
    path = dst / MODEL_FILES["admission"]
    out = []
    for line in path.read_text().splitlines():
        if line.startswith("tree_sizes="):  # byte offsets of the trees: no longer valid
            continue
        if line.startswith("leaf_value="):
            vals = line[len("leaf_value="):].split()
            line = "leaf_value=" + " ".join(repr(-float(v)) for v in vals)
        out.append(line)
    path.write_text("\n".join(out) + "\n")
    return dst


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("regress", help="model-regression check: candidate vs baseline policy",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_options(p, options=REGRESS_OPTIONS)
    p.set_defaults(func=cmd_regress)
