"""The policy compiler: a model bundle (compiler/bundle.py) -> one standalone policy .so.

    compile_policy(out, model_dir=...)   # or model_uri=..., run_id=...

Steps: Treelite imports each LightGBM text model (thresholds and leaves stay float64), TL2cgen
generates C for it (no quantisation), the generated functions are renamed per model
(`-Dpredict=flashml_<model>_predict`, ...), a hand-written wrapper (policy_wrapper.c.in,
compiled with -Wall -Wextra -Werror) exports the ABI of flashml_policy.h with the thresholds,
contract hash, target write rate and eviction age baked in, and the system C compiler links
everything into `policy.so` that needs libc and libm only. Output folder:

    policy.so          the policy
    flashml_policy.h   its one public header (a copy of compiler/flashml_policy.h)
    manifest.json      ABI version, contract hash, sha256 of policy.so, MLflow run id, ...

Everything is built in a temporary folder beside the output and renamed into place at the
end, so a failure never leaves a partial bundle.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import datetime as _dt
import hashlib
import json
import logging
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flashml.compiler.bundle import (
    COMPILED_ARTIFACT_PATH,
    MODEL_FILES,
    fetch_bundle,
    model_features,
    read_policy_json,
    tracking_uri,
)
from flashml.compiler.fast_trees import FastTrees, emit_c, plan
from flashml.config import UNITS
from flashml.errors import UserError
from flashml.features.codegen import ABI_VERSION
from flashml.features.contract import contract
from flashml.files import replace_dir, write_json

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
HEADER = HERE / "flashml_policy.h"
WRAPPER = HERE / "policy_wrapper.c.in"
SO_NAME = "policy.so"
HEADER_NAME = "flashml_policy.h"
MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = "flashml-policy-bundle/1"
CFLAGS = ("-std=c11", "-O2", "-fPIC", "-fvisibility=hidden")
WRAPPER_WARNINGS = ("-Wall", "-Wextra", "-Werror")
#: Shared libraries policy.so may depend on (sonames start with these).
ALLOWED_NEEDED = ("libc.so", "libm.so")
#: The one layout of TL2cgen's input union the wrapper assumes.
_ENTRY_RE = re.compile(r"union Entry \{\s*int missing;\s*double fvalue;\s*int qvalue;\s*\};")
_PROTO_RE = re.compile(r"^[A-Za-z_][\w \t\*]*?\b([A-Za-z_]\w*)\s*\([^;]*\)\s*;", re.M)
#: A top-level, non-static definition in generated C: `type name(`, `type name[] =`, ...
_GLOBAL_DEF_RE = re.compile(
    r"^(?!static\b|typedef\b|union\b|struct\b|enum\b|extern\b|return\b)"
    r"[A-Za-z_][\w \t\*]*?\b([A-Za-z_]\w*)\s*(?:\(|\[|=)", re.M)
_ABI_FN_RE = re.compile(r"^[A-Za-z_][\w \t\*]*?\b(flashml_\w+)\s*\(", re.M)
#: Trees per generated translation unit (compiled in parallel).
TREES_PER_UNIT = 50


class CompileError(UserError):
    """The bundle could not be compiled (bad model, compiler failure, ...)."""


@dataclass(frozen=True)
class ModelInfo:
    name: str
    file: str
    sha256: str
    num_trees: int
    num_features: int
    features: list[str]
    task: str
    postprocessor: str
    sigmoid_alpha: float = 1.0


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def abi_functions(header: Path = HEADER) -> list[str]:
    """The function names flashml_policy.h declares (exactly what policy.so exports)."""
    return sorted(set(_ABI_FN_RE.findall(header.read_text())))


def find_cc(cc: str | None = None) -> str:
    cc = cc or os.environ.get("CC") or "cc"
    path = shutil.which(cc)
    if path is None:
        raise CompileError(f"C compiler {cc!r} not found (set CC or --cc)")
    return path


def cc_version(cc: str) -> str:
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30)
    except OSError as e:
        return f"unknown ({e})"
    first = (out.stdout or out.stderr).strip().splitlines()
    return first[0] if first else "unknown"


def _lightgbm_feature_names(path: Path) -> list[str] | None:
    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith("feature_names="):
                return line.strip().split("=", 1)[1].split(" ")
            if line.startswith("Tree="):
                break
    return None


def load_model(name: str, path: Path) -> tuple[Any, ModelInfo]:
    """Import one LightGBM text model through Treelite and check it against the contract."""
    import treelite

    if not path.is_file():
        raise CompileError(f"{path}: missing model file; a policy bundle needs "
                           f"{', '.join(MODEL_FILES.values())}")
    want = model_features(name)
    try:
        model = treelite.frontend.load_lightgbm_model(str(path))
    except Exception as e:  # treelite raises TreeliteError and others for bad files
        raise CompileError(f"{path}: not a LightGBM text model ({str(e).splitlines()[-1]})") \
            from None
    if model.num_feature != len(want):
        raise CompileError(f"{path}: model '{name}' has {model.num_feature} features, the "
                           f"feature contract gives it {len(want)}: {', '.join(want)}")
    names = _lightgbm_feature_names(path)
    generic = names is not None and names == [f"Column_{i}" for i in range(len(names))]
    if names is not None and not generic and names != want:
        raise CompileError(f"{path}: model '{name}' was trained on features {names}, the "
                           f"feature contract gives it {want}")
    head = json.loads(model.dump_as_json())
    head.pop("trees", None)
    task, post = head.get("task_type", "?"), head.get("postprocessor", "?")
    if head.get("num_target", 1) != 1 or head.get("num_class", [1]) != [1]:
        raise CompileError(f"{path}: model '{name}' must have one output (binary or "
                           f"regression), got num_target={head.get('num_target')}, "
                           f"num_class={head.get('num_class')}")
    if name == "admission" and (task != "kBinaryClf" or post != "sigmoid"):
        raise CompileError(f"{path}: model '{name}' must be a LightGBM binary classifier "
                           f"(objective binary), got task {task}, postprocessor {post}")
    # ML-When may be a constant regression model when its labels had one class.
    if name == "when" and post not in ("sigmoid", "identity"):
        raise CompileError(f"{path}: model '{name}' must be a LightGBM binary classifier "
                           f"or regressor, got task {task}, postprocessor {post}")
    if name.startswith("range_") and post != "identity":
        raise CompileError(f"{path}: model '{name}' must be a LightGBM regressor (identity "
                           f"output), got task {task}, postprocessor {post}")
    for k in ("threshold_type", "leaf_output_type"):
        if head.get(k) != "float64":
            raise CompileError(f"{path}: {k} is {head.get(k)}, expected float64")
    info = ModelInfo(name=name, file=path.name, sha256=sha256_file(path),
                     num_trees=int(model.num_tree), num_features=int(model.num_feature),
                     features=want, task=task, postprocessor=post,
                     sigmoid_alpha=float(head.get("sigmoid_alpha", 1.0)))
    return model, info


def _run(cmd: list[str], what: str) -> None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    except OSError as e:
        raise CompileError(f"C compiler failed on {what}: {e}") from None
    if proc.returncode != 0:
        msg = (proc.stderr or proc.stdout).strip().splitlines()
        detail = "; ".join(msg[:3]) if msg else f"exit status {proc.returncode}"
        raise CompileError(f"C compiler failed on {what} (exit {proc.returncode}): {detail}")


@contextlib.contextmanager
def _quiet_native() -> Iterator[list[str]]:
    """Capture what native code writes to fds 1 and 2 (TL2cgen logs every step there)."""
    captured: list[str] = []
    try:
        saved = (os.dup(1), os.dup(2))
    except OSError:
        yield captured
        return
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(tmp.fileno(), 1)
            os.dup2(tmp.fileno(), 2)
            yield captured
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            tmp.seek(0)
            captured.append(tmp.read().decode(errors="replace"))


def _generate(name: str, model: Any, num_trees: int, gen: Path) -> tuple[list[Path], list[str]]:
    """TL2cgen C for one model; returns its sources and the -D renames of its symbols.

    Every split compares the float64 feature with its float64 threshold. TL2cgen's
    `quantize` mode (integer ranks of thresholds) is off: it changed scores on real rows
    (0.02% of held-out rows moved by up to 0.29 with TL2cgen 1.0), so it is not exact.
    """
    import tl2cgen

    units = num_trees // TREES_PER_UNIT if num_trees > TREES_PER_UNIT else 0
    params: dict[str, Any] = {"quantize": 0}
    if units > 1:
        params["parallel_comp"] = units
    with _quiet_native() as err:
        try:
            tl2cgen.generate_c_code(model, gen, params=params)
        except Exception as e:
            raise CompileError(f"TL2cgen failed on model '{name}': "
                               f"{str(e).strip().splitlines()[-1]}") from None
    log.debug("tl2cgen %s: %s", name, "".join(err).strip())
    header = (gen / "header.h").read_text()
    if not _ENTRY_RE.search(header):
        raise CompileError(f"TL2cgen {tl2cgen.__version__} generated an unexpected input layout "
                           "(union Entry); this compiler supports TL2cgen 1.x")
    symbols = set(_PROTO_RE.findall(header))
    for src in gen.glob("*.c"):  # globals defined without a prototype (e.g. is_categorical)
        symbols.update(_GLOBAL_DEF_RE.findall(src.read_text()))
    symbols = sorted(symbols)
    if "predict" not in symbols:
        raise CompileError(f"TL2cgen generated no predict() for model '{name}'")
    defines = [f"-D{s}=flashml_{name}_{s}" for s in symbols]
    return sorted(gen.glob("*.c")), defines


def _targets_x86_64(cc: str) -> bool:
    try:
        out = subprocess.run([cc, "-dumpmachine"], capture_output=True, text=True, timeout=30)
    except OSError:
        return False
    return out.stdout.strip().startswith("x86_64")


def _fast_trees(models: dict[str, Any], cc: str,
                enabled: bool) -> tuple[dict[str, FastTrees | str], dict[str, str]]:
    """Plan the fast evaluator of each model: (name -> tables or why not, name -> symbol)."""
    if not enabled:
        return {}, {}
    if not _targets_x86_64(cc):
        reason = f"{cc} does not target x86-64"
        return {n: reason for n in models}, {}
    plans = {name: plan(model) for name, model in models.items()}
    for name, p in plans.items():
        if isinstance(p, str):
            log.info("model %s stays on TL2cgen only: %s", name, p)
    return plans, {n: f"flashml_{n}_fast" for n, p in plans.items()
                   if not isinstance(p, str)}


#: How far (relative) a score must be from its threshold for the margin test to decide it.
BAND_REL = 1e-9


def margin_band(postprocessor: str, alpha: float, threshold: float) -> tuple[float, float]:
    """(lo, hi) such that a raw margin m >= hi surely scores >= threshold and m <= lo surely
    scores below it, so flashml_policy_decide needs the postprocessor (exp) only for margins
    strictly between: (nan, nan) where no such band is safe. The band is checked with this
    machine's exp, with BAND_REL of slack for another libm's last-bit differences."""
    if postprocessor == "identity":
        return threshold, threshold
    nan = (math.nan, math.nan)
    if postprocessor != "sigmoid" or not alpha > 0 or not 0.0 < threshold < 1.0:
        return nan

    def score(m: float) -> float:
        try:
            return 1.0 / (1.0 + math.exp(-alpha * m))
        except OverflowError:
            return 0.0

    t = -math.log(1.0 / threshold - 1.0) / alpha
    eps = 1e-6 * max(1.0, abs(t))
    for _ in range(8):
        lo, hi = t - eps, t + eps
        if score(hi) >= threshold * (1 + BAND_REL) and score(lo) <= threshold * (1 - BAND_REL):
            return lo, hi
        eps *= 10
    return nan


def admit_threshold_peak(params: dict[str, Any]) -> float:
    """The admission threshold in a peak hour: threshold - bonus, in float64 (the same
    expression sim/src/config.rs `PeakSchedule::threshold_at` and the runtime evaluate)."""
    return float(params["admit_threshold"]) - float(params.get("peak_bonus", 0.0))


def peak_mask(params: dict[str, Any]) -> int:
    """policy.json's peak hours as the bit mask flashml_admit_peak_hours() returns."""
    return sum(1 << h for h in params.get("peak_hours", ()))


def _c_double(v: float) -> str:
    return "NAN" if math.isnan(v) else float(v).hex()


def _fill_wrapper(params: dict[str, Any], segments_per_block: int,
                  fast: dict[str, str], infos: dict[str, ModelInfo]) -> str:
    """The wrapper source; `fast` maps model name -> symbol of its fast_trees evaluator."""
    c = contract()
    range_idx = c.indices("range")
    if c.model_features("when") != c.model_features("range") + ["predicted_start",
                                                                "predicted_end"]:
        raise CompileError("the contract's 'when' features must be the 'range' features "
                           "followed by predicted_start, predicted_end")
    if len(range_idx) != len(c.model_features("range")):
        raise CompileError("every 'range' feature must be an admission feature")
    values = {
        "NUM_FEATURES": str(c.num_features),
        "ABI_VERSION": str(ABI_VERSION),
        "CONTRACT_HASH": params["contract_hash"],
        "ADMIT_THRESHOLD": repr(float(params["admit_threshold"])),
        "PEAK_HOURS": str(peak_mask(params)),
        "PEAK_BONUS": repr(float(params.get("peak_bonus", 0.0))),
        "ADMIT_THRESHOLD_PEAK": repr(admit_threshold_peak(params)),
        "WHEN_THRESHOLD": repr(float(params["when_threshold"])),
        "TARGET_WRITE_RATE_MBPS": repr(float(params["target_write_rate_mbps"])),
        "EVICTION_AGE_S": repr(float(params["eviction_age_s"])),
        "SEGMENTS_PER_BLOCK": str(int(segments_per_block)),
        "RANGE_N": str(len(range_idx)),
        "RANGE_IDX": ", ".join(str(i) for i in range_idx),
        "HAVE_FAST": "1" if fast else "0",
        "FAST_DECLS": "\n".join(f"double {sym}(const double *x);\n"
                                f"double {sym}_margin(const double *x);\n"
                                f"void {sym}_prefetch(void);" for sym in fast.values()),
        "FAST_PREFETCH_CALLS": "\n".join(f"    {sym}_prefetch();" for sym in fast.values()),
    }
    for name in MODEL_FILES:
        values[f"FAST_{name.upper()}"] = fast.get(name, f"tl2_{name}")
    for name in ("admission", "when"):
        sym = fast.get(name)
        values[f"FAST_{name.upper()}_MARGIN"] = f"{sym}_margin" if sym else f"tl2_{name}_margin"
    for name, key, threshold in (
            ("admission", "ADMIT", float(params["admit_threshold"])),
            ("admission", "ADMIT_PEAK", admit_threshold_peak(params)),
            ("when", "WHEN", float(params["when_threshold"]))):
        i = infos[name]
        lo, hi = margin_band(i.postprocessor, i.sigmoid_alpha, threshold)
        values[f"{key}_MARGIN_LO"], values[f"{key}_MARGIN_HI"] = _c_double(lo), _c_double(hi)
    text = WRAPPER.read_text()
    for k, v in values.items():
        text = text.replace(f"@{k}@", v)
    left = re.findall(r"@[A-Z_]+@", text)
    if left:
        raise CompileError(f"internal: unfilled wrapper placeholders {left}")
    return text


def readelf_needed(so: Path) -> list[str]:
    """NEEDED entries of a shared object (`readelf -d`)."""
    out = subprocess.run(["readelf", "-d", str(so)], capture_output=True, text=True,
                         check=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def exported_functions(so: Path) -> list[str]:
    """Defined dynamic function symbols of a shared object (`nm -D --defined-only`),
    including GNU indirect functions (type i: the ifunc-dispatched scorers)."""
    out = subprocess.run(["nm", "-D", "--defined-only", str(so)], capture_output=True,
                         text=True, check=True).stdout
    return sorted(parts[2] for line in out.splitlines()
                  if len(parts := line.split()) == 3 and parts[1] in ("T", "t", "i"))


def _check_so(so: Path, params: dict[str, Any]) -> None:
    if shutil.which("readelf"):
        bad = [n for n in readelf_needed(so) if not n.startswith(ALLOWED_NEEDED)]
        if bad:
            raise CompileError(f"policy.so depends on {bad}; only libc and libm are allowed")
    if shutil.which("nm"):
        got, want = exported_functions(so), abi_functions()
        if got != want:
            raise CompileError(f"policy.so exports {got}, the ABI declares {want}")
    lib = ctypes.CDLL(str(so))
    lib.flashml_policy_contract_hash.restype = ctypes.c_char_p
    for fn in ("flashml_admit_threshold", "flashml_prefetch_when_threshold",
               "flashml_admit_peak_bonus"):
        getattr(lib, fn).restype = ctypes.c_double
    lib.flashml_admit_peak_hours.restype = ctypes.c_uint32
    checks = {
        "ABI version": (lib.flashml_policy_abi_version(), ABI_VERSION),
        "feature count": (lib.flashml_policy_num_features(), contract().num_features),
        "contract hash": (lib.flashml_policy_contract_hash().decode(), params["contract_hash"]),
        "admit threshold": (lib.flashml_admit_threshold(), params["admit_threshold"]),
        "when threshold": (lib.flashml_prefetch_when_threshold(), params["when_threshold"]),
        "peak hours": (lib.flashml_admit_peak_hours(), peak_mask(params)),
        "peak bonus": (lib.flashml_admit_peak_bonus(), params.get("peak_bonus", 0.0)),
    }
    for what, (got, want) in checks.items():
        if got != want:
            raise CompileError(f"policy.so reports {what} {got!r}, expected {want!r}")


def _versions(cc: str) -> dict[str, str]:
    import lightgbm
    import tl2cgen
    import treelite

    from flashml import __version__

    return {"cc": cc_version(cc), "treelite": treelite.__version__,
            "tl2cgen": tl2cgen.__version__, "lightgbm": lightgbm.__version__,
            "flashml": __version__}


def compile_policy(out: str | os.PathLike[str], *, model_uri: str | None = None,
                   run_id: str | None = None, model_dir: str | os.PathLike[str] | None = None,
                   cc: str | None = None,
                   segments_per_block: int = UNITS.segments_per_block,
                   log_to_mlflow: bool = True, jobs: int | None = None,
                   fast: bool = True) -> dict[str, Any]:
    """Compile a model bundle into `out` (policy.so, flashml_policy.h, manifest.json).

    fast: also build compiler/fast_trees.py's AVX-512 evaluator for every model it accepts
    (x86-64 only; the .so picks it at load time on CPUs that have AVX-512 VBMI).

    Returns the manifest. Raises CompileError/UserError with a one-line message; on any
    failure `out` is left as it was.
    """
    started = time.perf_counter()
    out = Path(out)
    if segments_per_block < 1:
        raise UserError(f"segments per block must be >= 1, got {segments_per_block}")
    cc_path = find_cc(cc)
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.build-", dir=out.parent))
    try:
        folder, rid, source = fetch_bundle(model_uri=model_uri, run_id=run_id,
                                           model_dir=model_dir, dest=work / "download")
        params = read_policy_json(folder)
        if params["contract_hash"] != contract().hash:
            raise CompileError(
                f"{folder / 'policy.json'}: contract mismatch: the models were trained for "
                f"feature contract {params['contract_hash'][:12]}..., this flashml has "
                f"{contract().hash[:12]}... (features/contract.toml); retrain the models")
        for k in ("admit_threshold", "when_threshold"):
            if not 0.0 <= params[k] <= 1.0:
                raise CompileError(f"{folder / 'policy.json'}: '{k}' must be in [0, 1], got "
                                   f"{params[k]}")
        models, infos = {}, {}
        for name, fname in MODEL_FILES.items():
            models[name], infos[name] = load_model(name, folder / fname)
        t_gen = time.perf_counter()
        build = work / "build"
        build.mkdir()
        shutil.copy2(HEADER, build / HEADER_NAME)
        jobs_list: list[tuple[list[str], str]] = []
        objects: list[Path] = []
        for name, model in models.items():
            sources, defines = _generate(name, model, infos[name].num_trees, build / name)
            for src in sources:
                obj = build / f"{name}_{src.stem}.o"
                jobs_list.append(([cc_path, *CFLAGS, "-w", *defines, "-c", str(src),
                                   "-o", str(obj)], f"{name}/{src.name}"))
                objects.append(obj)
        evaluators, fast_syms = _fast_trees(models, cc_path, fast)
        for name, sym in fast_syms.items():
            src = build / f"{name}_fast.c"
            src.write_text(emit_c(evaluators[name], sym))
            obj = build / f"{name}_fast.o"
            jobs_list.append(([cc_path, *CFLAGS, *WRAPPER_WARNINGS, "-c", str(src), "-o",
                               str(obj)], src.name))
            objects.append(obj)
        wrapper = build / "policy_wrapper.c"
        wrapper.write_text(_fill_wrapper(params, segments_per_block, fast_syms, infos))
        wobj = build / "policy_wrapper.o"
        jobs_list.append(([cc_path, *CFLAGS, *WRAPPER_WARNINGS, "-I", str(build), "-c",
                           str(wrapper), "-o", str(wobj)], "policy_wrapper.c"))
        objects.append(wobj)
        codegen_s = time.perf_counter() - t_gen
        t_cc = time.perf_counter()
        workers = jobs or os.cpu_count() or 1
        with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as ex:
            for f in [ex.submit(_run, cmd, what) for cmd, what in jobs_list]:
                f.result()
        result = work / "bundle"
        result.mkdir()
        so = result / SO_NAME
        _run([cc_path, "-shared", "-fPIC", "-Wl,-z,defs", "-Wl,--as-needed", "-o", str(so),
              *map(str, objects), "-lm"], "policy.so (link)")
        cc_s = time.perf_counter() - t_cc
        _check_so(so, params)
        shutil.copy2(HEADER, result / HEADER_NAME)
        c = contract()
        manifest = {
            "format": MANIFEST_FORMAT,
            "abi_version": ABI_VERSION,
            "contract_hash": params["contract_hash"],
            "contract": {"name": c.name, "version": c.version, "num_features": c.num_features,
                         "features": c.names, "hour_seconds": c.hour_seconds,
                         "hours": c.hours},
            "policy_so": SO_NAME,
            "sha256": sha256_file(so),
            "size_bytes": so.stat().st_size,
            "header": HEADER_NAME,
            "mlflow_run_id": rid,
            "source": source,
            "eviction_age_s": params["eviction_age_s"],
            "target_write_rate_mbps": params["target_write_rate_mbps"],
            "admit_threshold": params["admit_threshold"],
            "when_threshold": params["when_threshold"],
            "peak_hours": params["peak_hours"],
            "peak_bonus": params["peak_bonus"],
            "segments_per_block": int(segments_per_block),
            "range_rounding": "floor(x + 0.5) clamped to [0, segments_per_block-1], "
                              "end >= start",
            "metrics": params["metrics"],  # non-finite values become null (write_json)
            "models": {n: {"file": i.file, "sha256": i.sha256, "num_trees": i.num_trees,
                           "num_features": i.num_features, "features": i.features,
                           "task": i.task, "postprocessor": i.postprocessor,
                           "evaluators": (["fast_trees", "tl2cgen"] if n in fast_syms
                                          else ["tl2cgen"]),
                           "fast_trees": (f"not used: {evaluators[n]}"
                                          if isinstance(evaluators.get(n), str) else
                                          "used where the CPU has AVX-512 VBMI"
                                          if n in fast_syms else "disabled (--no-fast-trees)")}
                       for n, i in infos.items()},
            "build": {**_versions(cc_path), "cflags": list(CFLAGS),
                      "wrapper_warnings": list(WRAPPER_WARNINGS), "codegen_s": codegen_s,
                      "cc_s": cc_s, "compile_s": time.perf_counter() - started,
                      "created_utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")},
        }
        write_json(result / MANIFEST_NAME, manifest)
        replace_dir(result, out, marker=MANIFEST_NAME, what="policy bundle", error=CompileError)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if rid and log_to_mlflow and model_dir is None:
        log_bundle(rid, out)
    log.info("compiled %s -> %s (%d bytes, %.1f s)", source, out / SO_NAME,
             manifest["size_bytes"], manifest["build"]["compile_s"])
    return manifest


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
