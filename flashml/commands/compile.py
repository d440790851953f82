"""`flashml compile`: trained policy models -> one standalone policy .so (compiler/)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from flashml.config import UNITS
from flashml.settings import Number, Option, add_options, option_table, option_values

EPILOG = """\
sources (exactly one):
  --model-uri URI   an MLflow artifact URI of the model bundle, e.g. runs:/<run id>/policy
  --run-id ID       an MLflow run; its bundle is at artifact path policy/
  --model-dir DIR   a local bundle folder, or a folder holding policy/

a bundle holds one or both model groups (each all there or not at all) and policy.json:
  admission         admission.txt, range_start.txt, range_end.txt, when.txt (Baleen: the
                    18 admission features); policy.json: contract_hash, admit_threshold,
                    when_threshold, eviction_age_s, target_write_rate_mbps
  eviction          evict.txt (MAT: a LightGBM regressor on the 44 eviction features of
                    features/eviction.toml predicting log1p of the logical distance from
                    the last access to the next; NaN = missing); policy.json: eviction =
                    {contract_hash, k, max_candidates, delta, initial_threshold,
                    memory_window, controller} (compiler.bundle.save_evict_model writes it)
MLflow: $MLFLOW_TRACKING_URI, default sqlite:///.flashml/mlflow.db. When compiling from a
run, the compiled bundle is logged back to it under policy_so/ (skip with --no-log).

output folder (replaced atomically; never left half-written):
  policy.so         the policy; needs libc and libm only. It exports the functions of its
                    capabilities (flashml_policy.h): admission + prefetch (flashml_admit_*,
                    flashml_prefetch_*, flashml_policy_decide*) from the admission models,
                    eviction (flashml_evict_predict, flashml_evict_predict_batch,
                    flashml_evict_k, ..._max_candidates, ..._delta,
                    ..._initial_threshold, ..._memory_window, ..._controller) from
                    evict.txt. Each model is
                    compiled twice when it qualifies: TL2cgen's if/else C, and
                    compiler/fast_trees.py's branch-free AVX-512 VBMI evaluator (about 7x
                    faster for 500 trees); the .so binds one at load time from the CPU's
                    flags (ifunc), both give LightGBM's scores bit for bit (missing values
                    included)
  flashml_policy.h  its C ABI
  manifest.json     ABI version, capabilities (e.g. ["admission", "prefetch",
                    "eviction"]), contract hashes (contract_hash, evict_contract_hash),
                    sha256 of policy.so, MLflow run id, thresholds, eviction age, target
                    write rate, MAT's parameters (eviction), metrics, tool versions
Loaders (flashml sim run --policy, flashrt replay --policy, compiler.loader) refuse a
bundle that lacks the capability they use.

example:
  flashml compile --run-id 0123abcd -o out/policy
  flashml sim run --trace t.parquet --policy out/policy
"""


#: `flashml compile`'s options: exactly one source (`source`), the output and the build's.
COMPILE_OPTIONS = option_table(
    Option("model_uri", "--model-uri", str, None, "MLflow URI of the model bundle",
           metavar="URI", exclusive="source", required=True),
    Option("run_id", "--run-id", str, None, "MLflow run id (bundle at policy/)", metavar="ID",
           exclusive="source", required=True),
    Option("model_dir", "--model-dir", Path, None, "local model bundle folder", metavar="DIR",
           exclusive="source", required=True),
    Option("out", "--out", Path, None, "output folder (replaced if it holds an earlier bundle)",
           metavar="DIR", required=True, aliases=("-o",)),
    Option("cc", "--cc", str, None, "C compiler (default $CC, else cc)"),
    Option("segments_per_block", "--segments-per-block",
           Number(int, 1, 1 << 20, unit="segments"), UNITS.segments_per_block,
           "clamp prefetch ranges to [0, N-1]", metavar="N"),
    Option("jobs", "--jobs", Number(int, 1, 1024, unit="processes"), None,
           "parallel C compiler jobs (default: CPU count)", metavar="N"),
    Option("no_fast_trees", "--no-fast-trees", bool, False, "build the portable evaluator "
           "only (--portable), without the AVX-512 evaluator the .so otherwise picks on CPUs "
           "with AVX-512 VBMI (scores are identical)"),
    # compiler/build.py PORTABLE_EVALUATORS, PORTABLE_DEFAULT (not imported: CLI start-up)
    Option("portable", "--portable", str, "compact", "the evaluator of CPUs without AVX-512 "
           "VBMI: compact (the trees as data walked by one small loop; a model it cannot "
           "take, e.g. with categorical splits, stays on TL2cgen's code) or tl2cgen (TL2cgen's "
           "if/else code); scores are identical", choices=("compact", "tl2cgen")),
    Option("no_log", "--no-log", bool, False, "do not log the compiled bundle to the MLflow "
           "run"),
    Option("json", "--json", bool, False, "print the manifest as JSON"),
)


def cmd_compile(args: argparse.Namespace) -> int:
    from flashml.compiler.build import SO_NAME, compile_policy
    from flashml.files import check_outputs

    v = option_values(COMPILE_OPTIONS, args)
    check_outputs({"-o": v["out"]}, {"--model-dir": v["model_dir"]}, folders=("-o",))
    m = compile_policy(v["out"], model_uri=v["model_uri"], run_id=v["run_id"],
                       model_dir=v["model_dir"], cc=v["cc"],
                       segments_per_block=v["segments_per_block"],
                       log_to_mlflow=not v["no_log"], jobs=v["jobs"],
                       fast=not v["no_fast_trees"], portable=v["portable"])
    if v["json"]:
        print(json.dumps(m))
    else:
        caps = m["capabilities"]
        print(f"{Path(v['out']) / SO_NAME}: {m['size_bytes']} bytes, sha256 {m['sha256'][:16]}, "
              f"ABI {m['abi_version']}, capabilities {', '.join(caps)}, "
              f"{m['build']['compile_s']:.1f} s"
              + (f", run {m['mlflow_run_id']}" if m["mlflow_run_id"] else ""))
        for name, info in m["models"].items():
            print(f"  {name}: {info['num_trees']} trees, {' + '.join(info['evaluators'])}"
                  + ("" if "fast_trees" in info["evaluators"] else f" ({info['fast_trees']})"))
        if "admission" in caps:
            hours = m.get("peak_hours") or []
            print(f"  admission: contract {m['contract_hash'][:12]}, thresholds: admit "
                  f"{m['admit_threshold']:.4g}"
                  + (f" ({m['admit_threshold'] - m['peak_bonus']:.4g} in peak hours "
                     f"{','.join(map(str, hours))} UTC)" if hours else "")
                  + f", when {m['when_threshold']:.4g}")
        if "eviction" in caps:
            ev = m["eviction"]
            print(f"  eviction: contract {m['evict_contract_hash'][:12]}, k {ev['k']:g}, "
                  f"max candidates {ev['max_candidates']}, delta {ev['delta']:g}, initial "
                  f"threshold {ev['initial_threshold']:g}, memory window {ev['memory_window']}, "
                  f"controller {ev.get('controller', 'sign')}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compile", help="compile trained policy models into one standalone policy .so",
        description="Compile the LightGBM models of a run (Baleen's admission, ML-Range and "
        "ML-When models, MAT's eviction model, or both; Treelite + TL2cgen + the system C "
        "compiler) into one policy.so with the C ABI of flashml_policy.h, plus a manifest "
        "listing its capabilities.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_options(p, options=COMPILE_OPTIONS)
    p.set_defaults(func=cmd_compile)
