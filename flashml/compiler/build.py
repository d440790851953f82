"""The policy compiler: a model bundle (compiler/bundle.py) -> one standalone policy .so.

    compile_policy(out, model_dir=...)   # or model_uri=..., run_id=...

Steps: Treelite imports each LightGBM text model (thresholds and leaves stay float64), TL2cgen
generates C for it (no quantisation), the generated functions are renamed per model
(`-Dpredict=flashml_<model>_predict`, ...), a hand-written wrapper (policy_wrapper.c.in,
compiled with -Wall -Wextra -Werror -Wmissing-prototypes) exports the ABI of flashml_policy.h
with the thresholds, contract hashes, target write rate, eviction age and MAT's parameters
baked in, and the system C compiler links everything into `policy.so` that needs libc and libm
only. Output folder:

    policy.so          the policy
    flashml_policy.h   its one public header (a copy of compiler/flashml_policy.h)
    manifest.json      ABI version, capabilities, contract hashes, sha256 of policy.so, ...

The .so exports the functions of the capabilities its bundle's models give it
(features/abi.toml): the admission models give "admission" and "prefetch",
MAT's evict model "eviction"; the manifest lists them under `capabilities`.

Everything is built in a temporary folder beside the output and renamed into place at the
end, so a failure never leaves a partial bundle. The steps' parts, each a module beside this
one: `toolchain` (the C compiler, the object cache), `trees` (Treelite, TL2cgen and the fast
and compact evaluators), `wrapper` (policy_wrapper.c.in filled in), `partition_build`
(MLCache's network), `so_checks` (the built .so read back), `layout` (the bundle's files).
"""

from __future__ import annotations

import concurrent.futures
import datetime as _dt
import logging
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from flashml.compiler import compact_trees
from flashml.compiler import manifest as manifest_schema
from flashml.compiler import readahead as ra
from flashml.compiler.bundle import (
    ALL_MODEL_FILES,
    COMPILED_ARTIFACT_PATH,
    EVICT_MODEL,
    EVICT_PARAMS,
    PARTITION_FILE,
    PARTITION_PARAMS,
    bundle_groups,
    fetch_bundle,
    read_partition_model,
    read_policy_json,
    tracking_uri,
)
from flashml.compiler.fast_trees import emit_c
from flashml.compiler.layout import (
    HEADER,
    HEADER_NAME,
    MANIFEST_FORMAT,
    MANIFEST_NAME,
    SO_NAME,
)
from flashml.compiler.partition_build import (
    _emlearn_include,
    _partition_manifest,
    _partition_rule_sources,
    _partition_sources,
)
from flashml.compiler.so_checks import (
    _check_so,
)
from flashml.compiler.toolchain import (
    CFLAGS,
    WRAPPER_WARNINGS,
    CompileError,
    _compile_one,
    _object_cache,
    _run,
    _versions,
    find_cc,
)
from flashml.compiler.trees import (
    PORTABLE_DEFAULT,
    PORTABLE_EVALUATORS,
    _compact_trees,
    _fast_trees,
    _generate,
    load_model,
)
from flashml.compiler.wrapper import (
    _fill_wrapper,
)
from flashml.config import UNITS
from flashml.errors import UserError
from flashml.features import eviction
from flashml.features import partition as partition_contract
from flashml.features import readahead as readahead_contract
from flashml.features.abi import ABI_VERSION
from flashml.features.contract import contract
from flashml.files import jsonable, replace_dir, sha256_file, write_json

log = logging.getLogger(__name__)

_ABI_FN_RE = re.compile(r"^[A-Za-z_][\w \t\*]*?\b(flashml_\w+)\s*\(", re.M)

#: TL2cgen's generated trees (nested ifs, one per node) at -O1: gcc spends 2.3x longer on them
#: at -O2 (a 94-tree model: 7.6 s vs 3.3 s; bench_compile.py's 500 trees: 10 s vs 16-19 s)
#: for branchy code -O2 hardly speeds up (one decision through TL2cgen's code: 16.6 us vs
#: 15.0-16.3 us, measured side by side); the AVX-512 evaluator and the wrapper keep -O2.
TL2CGEN_OPT = "-O1"


def abi_functions(header: Path = HEADER) -> list[str]:
    """The function names flashml_policy.h declares (every capability's)."""
    return sorted(set(_ABI_FN_RE.findall(header.read_text())))




def capabilities_of(groups: dict[str, bool]) -> list[str]:
    """The capabilities a bundle's model groups give its policy.so (manifest order)."""
    return (["admission", "prefetch"] if groups["admission"] else []) + \
        (["eviction"] if groups["eviction"] else []) + \
        (["partition"] if groups.get("partition") else []) + \
        (["readahead"] if groups.get("readahead") else [])


def compile_policy(out: str | os.PathLike[str], *, model_uri: str | None = None,
                   run_id: str | None = None, model_dir: str | os.PathLike[str] | None = None,
                   cc: str | None = None,
                   segments_per_block: int = UNITS.segments_per_block,
                   log_to_mlflow: bool = True, jobs: int | None = None,
                   fast: bool = True, portable: str = PORTABLE_DEFAULT,
                   cache: bool | str | os.PathLike[str] = True) -> dict[str, Any]:
    """Compile a model bundle into `out` (policy.so, flashml_policy.h, manifest.json).

    fast: also build compiler/fast_trees.py's AVX-512 evaluator for every model it accepts
    (x86-64 only; the .so picks it at load time on CPUs that have AVX-512 VBMI).

    portable: the evaluator of the portable path (every CPU without AVX-512 VBMI), one of
    PORTABLE_EVALUATORS: "compact" (compiler/compact_trees.py: the trees as data walked by
    one small loop; a model it cannot take stays on TL2cgen's code) or "tl2cgen" (TL2cgen's
    if/else code, the reference). Both give the same bits.

    cache: reuse compiled objects (compiler/objcache.py) from the user's cache folder
    (True: flashml.config.cache_dir(); a path: that folder; False: compile everything).
    Every command runs in the build folder with relative names, so an object's bytes
    depend only on its key's inputs; each cached object is verified by sha256 before it is
    linked, and the linked .so is checked as always.

    Returns the manifest. Raises CompileError/UserError with a one-line message; on any
    failure `out` is left as it was.
    """
    started = time.perf_counter()
    out = Path(out)
    if segments_per_block < 1:
        raise UserError(f"segments per block must be >= 1, got {segments_per_block}")
    if portable not in PORTABLE_EVALUATORS:
        raise UserError(f"portable evaluator must be one of {', '.join(PORTABLE_EVALUATORS)}, "
                        f"got {portable!r}")
    cc_path = find_cc(cc)
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.build-", dir=out.parent))
    try:
        folder, rid, source = fetch_bundle(model_uri=model_uri, run_id=run_id,
                                           model_dir=model_dir, dest=work / "download")
        params = read_policy_json(folder)
        groups = bundle_groups(folder, params)
        capabilities = capabilities_of(groups)
        if groups["admission"]:
            _check_admission_params(folder, params)
        if groups["eviction"]:
            _check_contract(folder, "eviction", "the evict model", "the model",
                            params[EVICT_PARAMS]["contract_hash"], eviction.contract().hash)
        if groups["partition"]:
            _check_contract(folder, "partition", "the network", "the network",
                            params[PARTITION_PARAMS]["contract_hash"],
                            partition_contract.contract().hash)
            if params[PARTITION_PARAMS]["rule"] == "network":
                net_layers = read_partition_model(folder / PARTITION_FILE)
        if groups["readahead"]:
            _check_contract(folder, "readahead", "the model", "the model",
                            params[ra.READAHEAD_PARAMS]["contract_hash"],
                            readahead_contract.contract().hash)
            ra_doc = ra.read_readahead_model(folder / ra.READAHEAD_FILE)
        models, infos = {}, {}
        for name, fname in ALL_MODEL_FILES.items():
            if groups["eviction" if name == EVICT_MODEL else "admission"]:
                models[name], infos[name] = load_model(name, folder / fname)
        t_gen = time.perf_counter()
        build = work / "build"
        build.mkdir()
        shutil.copy2(HEADER, build / HEADER_NAME)
        # every command runs in `build` with relative names (no temporary path in an object)
        jobs_list: list[tuple[list[str], str]] = []
        objects: list[Path] = []
        tl2_flags = [TL2CGEN_OPT if f == "-O2" else f for f in CFLAGS]

        def rel(p: Path) -> str:
            return str(p.relative_to(build))

        compact_plans, compact_syms = _compact_trees(models, portable)
        for name, sym in compact_syms.items():
            ct = compact_plans[name]
            assert not isinstance(ct, str)
            src = build / f"{name}_compact.c"
            src.write_text(compact_trees.emit_c(ct, sym))
            obj = build / f"{name}_compact.o"
            jobs_list.append(([cc_path, *CFLAGS, *WRAPPER_WARNINGS, "-c", rel(src), "-o",
                               rel(obj)], src.name))
            objects.append(obj)
        for name, model in models.items():
            if name in compact_syms:  # TL2cgen's code would never run
                continue
            sources, defines = _generate(name, model, infos[name].num_trees, build / name)
            for src in sources:
                obj = build / f"{name}_{src.stem}.o"
                jobs_list.append(([cc_path, *tl2_flags, "-w", *defines, "-c", rel(src),
                                   "-o", rel(obj)], f"{name}/{src.name}"))
                objects.append(obj)
        evaluators, fast_syms = _fast_trees(models, cc_path, fast)
        for name, sym in fast_syms.items():
            src = build / f"{name}_fast.c"
            src.write_text(emit_c(evaluators[name], sym))
            obj = build / f"{name}_fast.o"
            jobs_list.append(([cc_path, *CFLAGS, *WRAPPER_WARNINGS, "-c", rel(src), "-o",
                               rel(obj)], src.name))
            objects.append(obj)
        if groups["partition"]:
            pp = params[PARTITION_PARAMS]
            for src, warn in (_partition_sources(build, *net_layers, pp["contract_hash"],
                                                 pp["sharpness"])
                              if pp["rule"] == "network" else
                              _partition_rule_sources(build, pp["contract_hash"])):
                obj = build / f"{src.stem}.o"
                jobs_list.append(([cc_path, *CFLAGS, *warn, "-I", ".", "-I",
                                   str(_emlearn_include()), "-c", rel(src), "-o", rel(obj)],
                                  src.name))
                objects.append(obj)
        if groups["readahead"]:
            src = build / "readahead_model.c"
            src.write_text(ra.c_source(ra_doc, params[ra.READAHEAD_PARAMS]["contract_hash"]))
            obj = build / "readahead_model.o"
            jobs_list.append(([cc_path, *CFLAGS, *WRAPPER_WARNINGS, "-I", ".", "-c",
                               rel(src), "-o", rel(obj)], src.name))
            objects.append(obj)
        wrapper = build / "policy_wrapper.c"
        wrapper.write_text(_fill_wrapper(params, segments_per_block, fast_syms, infos,
                                         compact_syms))
        wobj = build / "policy_wrapper.o"
        jobs_list.append(([cc_path, *CFLAGS, *WRAPPER_WARNINGS, "-I", ".", "-c",
                           rel(wrapper), "-o", rel(wobj)], "policy_wrapper.c"))
        objects.append(wobj)
        codegen_s = time.perf_counter() - t_gen
        t_cc = time.perf_counter()
        objcache = _object_cache(cache)
        workers = jobs or os.cpu_count() or 1
        with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as ex:
            # the largest units first, so the pool's last job is a short one
            order = sorted(jobs_list, key=lambda j: -(build / j[0][-3]).stat().st_size)
            for f in [ex.submit(_compile_one, cmd, what, build, objcache)
                      for cmd, what in order]:
                f.result()
        if objcache is not None and objcache.stats.stored:
            objcache.prune()  # once per compile: the cache within its byte budget
        result = work / "bundle"
        result.mkdir()
        so = result / SO_NAME
        _run([cc_path, "-shared", "-fPIC", "-Wl,-z,defs", "-Wl,--as-needed", "-o", str(so),
              *map(str, objects), "-lm"], "policy.so (link)")
        cc_s = time.perf_counter() - t_cc
        so_sha256, so_size = sha256_file(so), so.stat().st_size
        _check_so(so, params, capabilities, so_sha256, so_size)
        shutil.copy2(HEADER, result / HEADER_NAME)
        manifest: dict[str, Any] = {
            "format": MANIFEST_FORMAT,
            "abi_version": ABI_VERSION,
            "capabilities": capabilities,
        }
        if groups["admission"]:
            c = contract()
            manifest.update({
                "contract_hash": params["contract_hash"],
                "contract": {"name": c.name, "version": c.version,
                             "num_features": c.num_features, "features": c.names,
                             "hour_seconds": c.hour_seconds, "hours": c.hours}})
        if groups["eviction"]:
            manifest.update(_evict_manifest(params[EVICT_PARAMS]))
        if groups["partition"]:
            manifest.update(_partition_manifest(params[PARTITION_PARAMS], folder))
        if groups["readahead"]:
            manifest.update(ra.manifest_fields(params, folder))
        manifest.update({
            "policy_so": SO_NAME,
            "sha256": so_sha256,
            "size_bytes": so_size,
            "header": HEADER_NAME,
            "mlflow_run_id": rid,
            "source": source,
        })
        if groups["admission"]:
            manifest.update({
                "eviction_age_s": params["eviction_age_s"],
                "target_write_rate_mbps": params["target_write_rate_mbps"],
                "admit_threshold": params["admit_threshold"],
                "when_threshold": params["when_threshold"],
                "peak_hours": params["peak_hours"],
                "peak_bonus": params["peak_bonus"],
                "segments_per_block": int(segments_per_block),
                "range_rounding": "floor(x + 0.5) clamped to [0, segments_per_block-1], "
                                  "end >= start"})
        manifest.update({
            "metrics": params["metrics"],  # non-finite values become null (write_json)
            "models": {n: {"file": i.file, "sha256": i.sha256, "num_trees": i.num_trees,
                           "num_features": i.num_features, "features": i.features,
                           "task": i.task, "postprocessor": i.postprocessor,
                           "evaluators": ((["fast_trees"] if n in fast_syms else [])
                                          + ["compact" if n in compact_syms else "tl2cgen"]),
                           "fast_trees": (f"not used: {evaluators[n]}"
                                          if isinstance(evaluators.get(n), str) else
                                          "used where the CPU has AVX-512 VBMI"
                                          if n in fast_syms else "disabled (--no-fast-trees)"),
                           "compact": ("used on the portable path" if n in compact_syms
                                       else f"not used: {compact_plans[n]}"
                                       if isinstance(compact_plans.get(n), str)
                                       else "disabled (--portable tl2cgen)")}
                       for n, i in infos.items()},
            "build": {**_versions(cc_path), "cflags": list(CFLAGS), "tl2cgen_opt": TL2CGEN_OPT,
                      "wrapper_warnings": list(WRAPPER_WARNINGS), "codegen_s": codegen_s,
                      "cc_s": cc_s, "compile_s": time.perf_counter() - started,
                      "object_cache": ({"hits": objcache.stats.hits,
                                        "compiled": objcache.stats.misses,
                                        "refused": objcache.stats.refused}
                                       if objcache is not None else None),
                      "created_utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")},
        })
        # what every loader will check it against (compiler/manifest.schema.json)
        manifest_schema.validate(jsonable(manifest), str(out / MANIFEST_NAME))
        write_json(result / MANIFEST_NAME, manifest)
        replace_dir(result, out, marker=MANIFEST_NAME, what="policy bundle", error=CompileError)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if rid and log_to_mlflow and model_dir is None:
        log_bundle(rid, out)
    log.info("compiled %s -> %s (%d bytes, %.1f s)", source, out / SO_NAME,
             manifest["size_bytes"], manifest["build"]["compile_s"])
    return manifest


def _check_contract(folder: Path, kind: str, model: str, retrain: str, have: str,
                    want: str) -> None:
    """A model group trained for another feature contract (features/<kind>.toml) than this
    flashml's: a CompileError saying to retrain it."""
    if have != want:
        raise CompileError(
            f"{folder / 'policy.json'}: {kind} contract mismatch: {model} was trained for "
            f"{kind} feature contract {have[:12]}..., this flashml has {want[:12]}... "
            f"(features/{kind}.toml); retrain {retrain}")


def _check_admission_params(folder: Path, params: dict[str, Any]) -> None:
    if params["contract_hash"] != contract().hash:
        raise CompileError(
            f"{folder / 'policy.json'}: contract mismatch: the models were trained for "
            f"feature contract {params['contract_hash'][:12]}..., this flashml has "
            f"{contract().hash[:12]}... (features/contract.toml); retrain the models")
    for k in ("admit_threshold", "when_threshold"):
        if not 0.0 <= params[k] <= 1.0:
            raise CompileError(f"{folder / 'policy.json'}: '{k}' must be in [0, 1], got "
                               f"{params[k]}")


def _evict_manifest(ev: dict[str, Any]) -> dict[str, Any]:
    """The manifest's eviction fields: `evict_contract_hash` (top level, where the C runtime's
    reader finds it) and `eviction` (the contract, MAT's parameters, the model's metrics)."""
    e = eviction.contract()
    return {
        "evict_contract_hash": ev["contract_hash"],
        "eviction": {
            "contract": {"name": e.name, "version": e.version, "num_features": e.num_features,
                         "features": list(e.names), "memory_window": e.memory_window},
            "k": ev["k"], "max_candidates": ev["max_candidates"], "delta": ev["delta"],
            "initial_threshold": ev["initial_threshold"],
            "memory_window": ev["memory_window"], "controller": ev["controller"],
            "reuse_predictions": ev["reuse_predictions"],
            "prediction": "log1p(logical requests from the last access to the next access); "
                          "TTA = |expm1(prediction) - age|",
            "metrics": ev["metrics"],
            **{k: v for k, v in ev.items() if k not in (
                "contract_hash", "k", "max_candidates", "delta", "initial_threshold",
                "memory_window", "metrics", "controller", "reuse_predictions")},
        },
    }


def log_bundle(run_id: str, bundle: Path) -> None:
    """Log a compiled bundle to its MLflow run under `policy_so/`."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    try:
        MlflowClient(tracking_uri()).log_artifacts(run_id, str(bundle),
                                                   artifact_path=COMPILED_ARTIFACT_PATH)
    except (MlflowException, OSError) as e:
        raise UserError(f"{bundle}: compiled, but logging it to MLflow run {run_id} failed: "
                        f"{str(e).splitlines()[0]}") from None
