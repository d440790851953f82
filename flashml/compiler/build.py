"""The policy compiler: a model bundle (compiler/bundle.py) -> one standalone policy .so.

    compile_policy(out, model_dir=...)   # or model_uri=..., run_id=...

Steps: Treelite imports each LightGBM text model (thresholds and leaves stay float64), TL2cgen
generates C for it (no quantisation), the generated functions are renamed per model
(`-Dpredict=flashml_<model>_predict`, ...), a hand-written wrapper (policy_wrapper.c.in,
compiled with -Wall -Wextra -Werror) exports the ABI of flashml_policy.h with the thresholds,
contract hashes, target write rate, eviction age and MAT's parameters baked in, and the system
C compiler links everything into `policy.so` that needs libc and libm only. Output folder:

    policy.so          the policy
    flashml_policy.h   its one public header (a copy of compiler/flashml_policy.h)
    manifest.json      ABI version, capabilities, contract hashes, sha256 of policy.so, ...

The .so exports the functions of the capabilities its bundle's models give it
(features/codegen.py CAPABILITIES): the admission models give "admission" and "prefetch",
MAT's evict model "eviction"; the manifest lists them under `capabilities`.

Everything is built in a temporary folder beside the output and renamed into place at the
end, so a failure never leaves a partial bundle.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import datetime as _dt
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

from flashml import knobs
from flashml.compiler import compact_trees
from flashml.compiler import manifest as manifest_schema
from flashml.compiler import readahead as ra
from flashml.compiler.bundle import (
    COMPILED_ARTIFACT_PATH,
    EVICT_FILE,
    EVICT_KNOBS,
    EVICT_MODEL,
    EVICT_PARAMS,
    MODEL_FILES,
    PARTITION_FILE,
    PARTITION_PARAMS,
    bundle_groups,
    fetch_bundle,
    model_features,
    read_partition_model,
    read_policy_json,
    tracking_uri,
)
from flashml.compiler.fast_trees import FastTrees, emit_c, model_header, plan
from flashml.config import UNITS
from flashml.errors import UserError
from flashml.features import eviction
from flashml.features import partition as partition_contract
from flashml.features import readahead as readahead_contract
from flashml.features.codegen import ABI_VERSION, capability_functions
from flashml.features.contract import contract
from flashml.files import jsonable, replace_dir, sha256_file, write_json

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
HEADER = HERE / "flashml_policy.h"
WRAPPER = HERE / "policy_wrapper.c.in"
PARTITION_WRAPPER = HERE / "partition_wrapper.c.in"
PARTITION_RULE = HERE / "partition_rule.c.in"
SO_NAME = "policy.so"
HEADER_NAME = "flashml_policy.h"
MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = "flashml-policy-bundle/1"
CFLAGS = ("-std=c11", "-O2", "-fPIC", "-fvisibility=hidden")
WRAPPER_WARNINGS = ("-Wall", "-Wextra", "-Werror")
#: TL2cgen's generated trees (nested ifs, one per node) at -O1: gcc spends 2.3x longer on them
#: at -O2 (a 94-tree model: 7.6 s vs 3.3 s; bench_compile.py's 500 trees: 10 s vs 16-19 s)
#: for branchy code -O2 hardly speeds up (one decision through TL2cgen's code: 16.6 us vs
#: 15.0-16.3 us, measured side by side); the AVX-512 evaluator and the wrapper keep -O2.
TL2CGEN_OPT = "-O1"
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
TREES_PER_UNIT = 25
#: Evaluators of the portable path (compile_policy's `portable`), and the default.
PORTABLE_EVALUATORS = ("compact", "tl2cgen")
PORTABLE_DEFAULT = "compact"


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


def abi_functions(header: Path = HEADER) -> list[str]:
    """The function names flashml_policy.h declares (every capability's)."""
    return sorted(set(_ABI_FN_RE.findall(header.read_text())))


#: Every model file a bundle may hold, by model name (the admission group, then MAT's).
ALL_MODEL_FILES: dict[str, str] = {**MODEL_FILES, EVICT_MODEL: EVICT_FILE}


def capabilities_of(groups: dict[str, bool]) -> list[str]:
    """The capabilities a bundle's model groups give its policy.so (manifest order)."""
    return (["admission", "prefetch"] if groups["admission"] else []) + \
        (["eviction"] if groups["eviction"] else []) + \
        (["partition"] if groups.get("partition") else []) + \
        (["readahead"] if groups.get("readahead") else [])


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
        if name == EVICT_MODEL:
            raise CompileError(f"{path}: missing model file; a bundle with an eviction model "
                               f"('{EVICT_PARAMS}' in policy.json) needs {EVICT_FILE}")
        raise CompileError(f"{path}: missing model file; a policy bundle needs "
                           f"{', '.join(MODEL_FILES.values())}")
    want = model_features(name)
    contract_file = ("features/eviction.toml" if name == EVICT_MODEL
                     else "features/contract.toml")
    try:
        model = treelite.frontend.load_lightgbm_model(str(path))
    except Exception as e:  # treelite raises TreeliteError and others for bad files
        raise CompileError(f"{path}: not a LightGBM text model ({str(e).splitlines()[-1]})") \
            from None
    if model.num_feature != len(want):
        raise CompileError(f"{path}: model '{name}' has {model.num_feature} features, the "
                           f"feature contract gives it {len(want)} ({contract_file}): "
                           f"{', '.join(want)}")
    names = _lightgbm_feature_names(path)
    generic = names is not None and names == [f"Column_{i}" for i in range(len(names))]
    if names is not None and not generic and names != want:
        raise CompileError(f"{path}: model '{name}' was trained on features {names}, the "
                           f"feature contract gives it {want}")
    zero = _zero_as_missing_splits(path)
    if zero:
        raise CompileError(f"{path}: model '{name}' has {zero} splits that treat zero as "
                           "missing (LightGBM zero_as_missing=true); the compiled code cannot "
                           "reproduce them exactly: train with zero_as_missing=false (missing "
                           "values are NaN)")
    head = model_header(model)
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
    if name == EVICT_MODEL and post != "identity":
        raise CompileError(f"{path}: model '{name}' must be a LightGBM regressor (identity "
                           f"output: log1p of the distance to the next access), got task "
                           f"{task}, postprocessor {post}")
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


def _zero_as_missing_splits(path: Path) -> int:
    """How many splits of a LightGBM text model have missing_type Zero (decision_type bits
    2-3 == 1): zero and NaN both go to the default side there, which Treelite does not
    represent exactly."""
    n = 0
    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith("decision_type="):
                n += sum(1 for v in line.split("=", 1)[1].split() if (int(v) >> 2) & 3 == 1)
    return n


def _run(cmd: list[str], what: str, cwd: Path | None = None) -> None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, cwd=cwd)
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
    for src in gen.glob("*.c"):
        _test_nan_not_missing_word(src)
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
    defines = [f"-D{s}={tl2_prefix(name)}{s}" for s in symbols]
    return sorted(gen.glob("*.c")), defines


#: TL2cgen's test of a missing input: the int `missing` member of `union Entry`, which shares
#: its 4 bytes with the low half of `fvalue`.
_MISSING_TEST_RE = re.compile(r"data\[(\d+)\]\.missing != -1")


def _test_nan_not_missing_word(src: Path) -> None:
    """Rewrite TL2cgen's "input i is present" tests (`data[i].missing != -1`) in one generated
    file into `data[i].fvalue == data[i].fvalue` (not NaN), the wrapper storing every input,
    NaN included, as fvalue. TL2cgen's own test reads the low 32 bits of the double: a number
    whose low word is all ones (0xffffffff) was taken for a missing value and sent to the
    default side, where LightGBM compares it."""
    text = _MISSING_TEST_RE.sub(r"data[\1].fvalue == data[\1].fvalue", src.read_text())
    if ".missing" in text:
        raise CompileError(f"TL2cgen generated an unexpected missing-value test in {src.name} "
                           "(this compiler supports TL2cgen 1.x)")
    src.write_text(text)


def tl2_prefix(name: str) -> str:
    """Prefix of a model's renamed TL2cgen symbols: flashml_<model>_ for the admission
    group's, flashml_tl2_<model>_ for the others (flashml_evict_predict is an ABI name)."""
    return f"flashml_{name}_" if name in MODEL_FILES else f"flashml_tl2_{name}_"


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


def _compact_trees(models: dict[str, Any], portable: str
                   ) -> tuple[dict[str, compact_trees.CompactTrees | str], dict[str, str]]:
    """Plan the compact evaluator of each model when the portable path is "compact":
    (name -> tables or why not, name -> symbol of the models it takes)."""
    if portable != "compact":
        return {}, {}
    plans = {name: compact_trees.plan(model) for name, model in models.items()}
    for name, p in plans.items():
        if isinstance(p, str):
            log.info("model %s stays on TL2cgen's code: %s", name, p)
    return plans, {n: f"flashml_compact_{n}" for n, p in plans.items()
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
    expression sim/src/core/config.rs `PeakSchedule::threshold_at` and the runtime evaluate)."""
    return float(params["admit_threshold"]) - float(params.get("peak_bonus", 0.0))


def peak_mask(params: dict[str, Any]) -> int:
    """policy.json's peak hours as the bit mask flashml_admit_peak_hours() returns."""
    return sum(1 << h for h in params.get("peak_hours", ()))


def _c_double(v: float) -> str:
    return "NAN" if math.isnan(v) else float(v).hex()


def _fill_wrapper(params: dict[str, Any], segments_per_block: int,
                  fast: dict[str, str], infos: dict[str, ModelInfo],
                  compact: dict[str, str] | None = None) -> str:
    """The wrapper source; `fast` maps model name -> symbol of its fast_trees evaluator,
    `compact` model name -> symbol of its compact evaluator (the portable path of those
    models; the others' is TL2cgen's code), `infos` holds the bundle's models (the admission
    group's, MAT's evict model, or both)."""
    compact = compact or {}
    have_adm = "admission" in infos
    have_evict = EVICT_MODEL in infos
    values = {
        **{f"TL2_{n.upper()}": "1" if n in infos and n not in compact else "0"
           for n in ALL_MODEL_FILES},
        "COMPACT_DECLS": "\n".join(f"double {sym}(const double *x);\n"
                                   f"double {sym}_margin(const double *x);\n"
                                   f"void {sym}_prefetch(void);"
                                   for sym in compact.values()),
        "ABI_VERSION": str(ABI_VERSION),
        "HAVE_ADMISSION": "1" if have_adm else "0",
        "HAVE_EVICTION": "1" if have_evict else "0",
        "HAVE_FAST": "1" if fast else "0",
        "FAST_DECLS": "\n".join(f"double {sym}(const double *x);\n"
                                f"double {sym}_margin(const double *x);\n"
                                f"void {sym}_prefetch(void);" for sym in fast.values()),
    }
    values.update(_admission_values(params, segments_per_block, fast, infos, compact)
                  if have_adm else dict.fromkeys(_ADMISSION_PLACEHOLDERS, "0"))
    if have_evict:
        ev = params[EVICT_PARAMS]
        values.update({
            "EVICT_TL2_PREDICT": f"{tl2_prefix(EVICT_MODEL)}predict",
            "EVICT_NUM_FEATURES": str(eviction.contract().num_features),
            "EVICT_CONTRACT_HASH": ev["contract_hash"],
            "EVICT_KNOB_EXPORTS": _evict_knob_exports(ev),
            "FAST_EVICT": fast.get(EVICT_MODEL, "evict_portable"),
            "FAST_EVICT_PREFETCH": f"{fast[EVICT_MODEL]}_prefetch" if EVICT_MODEL in fast
            else "evict_prefetch_portable",
            "PORT_EVICT": compact.get(EVICT_MODEL, "0"),
        })
    else:
        values.update(dict.fromkeys(_EVICT_PLACEHOLDERS, "0"))
    text = WRAPPER.read_text()
    for k, v in values.items():
        text = text.replace(f"@{k}@", v)
    left = re.findall(r"@[A-Z_]+@", text)
    if left:
        raise CompileError(f"internal: unfilled wrapper placeholders {left}")
    return text


_ADMISSION_PLACEHOLDERS = (
    "NUM_FEATURES", "CONTRACT_HASH", "ADMIT_THRESHOLD", "PEAK_HOURS", "PEAK_BONUS",
    "ADMIT_THRESHOLD_PEAK", "WHEN_THRESHOLD", "TARGET_WRITE_RATE_MBPS", "EVICTION_AGE_S",
    "SEGMENTS_PER_BLOCK", "RANGE_N", "RANGE_IDX", "FAST_PREFETCH_CALLS", "FAST_ADMISSION",
    "FAST_RANGE_START", "FAST_RANGE_END", "FAST_WHEN", "FAST_ADMISSION_MARGIN",
    "FAST_WHEN_MARGIN", "ADMIT_MARGIN_LO", "ADMIT_MARGIN_HI", "ADMIT_PEAK_MARGIN_LO",
    "ADMIT_PEAK_MARGIN_HI", "WHEN_MARGIN_LO", "WHEN_MARGIN_HI", "PORT_ADMISSION",
    "PORT_RANGE_START", "PORT_RANGE_END", "PORT_WHEN", "PORT_ADMISSION_MARGIN",
    "PORT_WHEN_MARGIN", "PORT_PREFETCH_CALLS")
def _evict_knob_exports(ev: dict[str, Any]) -> str:
    """C source of the function that exports each of MAT's knobs (EVICT_KNOBS: its ABI name
    and type) with policy.json's value; `ev` is read_policy_json's, checked (a bundle written
    before the controller and reuse fields has their legacy values, sign and off)."""
    out = []
    for k in EVICT_KNOBS:
        v = ev[k.name]
        if k.kind == "float":
            lit = repr(float(v))
        elif k.kind == "choice":
            lit = str(k.code(v))
        elif k.c_type == "int64_t":
            lit = f"INT64_C({int(v)})"
        else:
            lit = str(int(v))
        out.append(f"FLASHML_EXPORT {k.c_type} {k.abi}(void) {{ return {lit}; }}")
    return "\n\n".join(out)


_EVICT_PLACEHOLDERS = (
    "EVICT_TL2_PREDICT", "EVICT_NUM_FEATURES", "EVICT_CONTRACT_HASH", "EVICT_KNOB_EXPORTS",
    "FAST_EVICT", "FAST_EVICT_PREFETCH", "PORT_EVICT")


def _admission_values(params: dict[str, Any], segments_per_block: int,
                      fast: dict[str, str], infos: dict[str, ModelInfo],
                      compact: dict[str, str]) -> dict[str, str]:
    """The admission part's placeholders: thresholds, hash, rate, age, range indices, the
    evaluators of each of the four models (fast and portable) and the margin bands of the
    two classifiers."""
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
        "FAST_PREFETCH_CALLS": "\n".join(f"    {sym}_prefetch();" for name, sym in fast.items()
                                         if name in MODEL_FILES),
        "PORT_PREFETCH_CALLS": "\n".join(f"    {sym}_prefetch();"
                                         for name, sym in compact.items()
                                         if name in MODEL_FILES),
    }
    for name in MODEL_FILES:
        port = compact.get(name, f"tl2_{name}")
        values[f"PORT_{name.upper()}"] = port
        values[f"FAST_{name.upper()}"] = fast.get(name, port)
    for name in ("admission", "when"):
        port = f"{compact[name]}_margin" if name in compact else f"tl2_{name}_margin"
        values[f"PORT_{name.upper()}_MARGIN"] = port
        sym = fast.get(name)
        values[f"FAST_{name.upper()}_MARGIN"] = f"{sym}_margin" if sym else port
    for name, key, threshold in (
            ("admission", "ADMIT", float(params["admit_threshold"])),
            ("admission", "ADMIT_PEAK", admit_threshold_peak(params)),
            ("when", "WHEN", float(params["when_threshold"]))):
        i = infos[name]
        lo, hi = margin_band(i.postprocessor, i.sigmoid_alpha, threshold)
        values[f"{key}_MARGIN_LO"], values[f"{key}_MARGIN_HI"] = _c_double(lo), _c_double(hi)
    assert set(values) == set(_ADMISSION_PLACEHOLDERS), set(values) ^ set(_ADMISSION_PLACEHOLDERS)
    return values


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


def _check_so(so: Path, params: dict[str, Any], capabilities: list[str], sha256: str,
              size_bytes: int) -> None:
    """The linked policy.so against its bundle: its dependencies, its exports, and what it
    reports once loaded through the one loader (compiler/loader.py: the bytes of sha256 and
    size_bytes, checked, mapped from a sealed memfd)."""
    from flashml.compiler.loader import map_verified, verify_so_file

    if shutil.which("readelf"):
        bad = [n for n in readelf_needed(so) if not n.startswith(ALLOWED_NEEDED)]
        if bad:
            raise CompileError(f"policy.so depends on {bad}; only libc and libm are allowed")
    if shutil.which("nm"):
        got, want = exported_functions(so), capability_functions(capabilities)
        if got != want:
            raise CompileError(f"policy.so exports {got}, its capabilities {capabilities} "
                               f"declare {want}")
    lib = map_verified(verify_so_file(so, sha256, size_bytes))
    checks: dict[str, tuple[Any, Any]] = {
        "ABI version": (lib.flashml_policy_abi_version(), ABI_VERSION)}
    if "admission" in capabilities:
        lib.flashml_policy_contract_hash.restype = ctypes.c_char_p
        for fn in ("flashml_admit_threshold", "flashml_prefetch_when_threshold",
                   "flashml_admit_peak_bonus"):
            getattr(lib, fn).restype = ctypes.c_double
        lib.flashml_admit_peak_hours.restype = ctypes.c_uint32
        checks.update({
            "feature count": (lib.flashml_policy_num_features(), contract().num_features),
            "contract hash": (lib.flashml_policy_contract_hash().decode(),
                              params["contract_hash"]),
            "admit threshold": (lib.flashml_admit_threshold(), params["admit_threshold"]),
            "when threshold": (lib.flashml_prefetch_when_threshold(), params["when_threshold"]),
            "peak hours": (lib.flashml_admit_peak_hours(), peak_mask(params)),
            "peak bonus": (lib.flashml_admit_peak_bonus(), params.get("peak_bonus", 0.0)),
        })
    if "eviction" in capabilities:
        ev = params[EVICT_PARAMS]
        lib.flashml_evict_contract_hash.restype = ctypes.c_char_p
        checks.update({
            "eviction feature count": (lib.flashml_evict_num_features(),
                                       eviction.contract().num_features),
            "eviction contract hash": (lib.flashml_evict_contract_hash().decode(),
                                       ev["contract_hash"]),
        })
        # every knob the .so exports equals policy.json's (systems/mat/settings.toml)
        got = knobs.read_exports(lib, EVICT_KNOBS)
        checks.update({f"eviction {name.replace('_', ' ')}": (got[name], ev[name])
                       for name in EVICT_KNOBS.knobs})
    if "readahead" in capabilities:
        rc = readahead_contract.contract()
        lib.flashml_readahead_contract_hash.restype = ctypes.c_char_p
        checks.update({
            "readahead feature count": (lib.flashml_readahead_num_features(), rc.num_features),
            "readahead contract hash": (lib.flashml_readahead_contract_hash().decode(),
                                        params[ra.READAHEAD_PARAMS]["contract_hash"]),
            "readahead window": (lib.flashml_readahead_window_ms(), rc.window_ms),
        })
    if "partition" in capabilities:
        pc = partition_contract.contract()
        lib.flashml_partition_contract_hash.restype = ctypes.c_char_p
        checks.update({
            "partition feature count": (lib.flashml_partition_num_features(),
                                        pc.num_features),
            "partition contract hash": (lib.flashml_partition_contract_hash().decode(),
                                        params[PARTITION_PARAMS]["contract_hash"]),
            "partition max streams": (lib.flashml_partition_max_streams(), pc.max_streams),
            "partition steps": (lib.flashml_partition_steps(), pc.steps),
        })
    for what, (got, want) in checks.items():
        if got != want:
            raise CompileError(f"policy.so reports {what} {got!r}, expected {want!r}")


def _emlearn() -> Any:
    """emlearn, imported without its side effect: `emlearn.bayes` calls
    `numpy.seterr(all='raise')` at import, which would turn every later underflow in the
    process (scikit-learn's MLP predict, for one) into a FloatingPointError."""
    import numpy as np

    with np.errstate():  # restores numpy's error state on exit
        import emlearn
        import emlearn.net
    return emlearn


def _emlearn_include() -> Path:
    return Path(_emlearn().__file__).resolve().parent


def _partition_sources(build: Path, weights: list[Any], biases: list[Any],
                       contract_hash: str, sharpness: float = 1.0
                       ) -> list[tuple[Path, tuple[str, ...]]]:
    """MLCache's network as C: emlearn's generated layers and its eml_net inference
    (`partition_net.c`, compiled without warnings like TL2cgen's code: it is a library's
    output), and the ABI functions around it (`partition_wrapper.c`, -Wall -Wextra
    -Werror). The net file evaluates emlearn's layers with its own loop (faster, same
    results; see its comment) and activations on the stack, so flashml_partition is
    reentrant."""
    import numpy as np

    c_generate_net_loadable = _emlearn().net.c_generate_net_loadable
    c = partition_contract.contract()
    width = max(int(np.asarray(w).shape[1]) for w in weights)
    acts = ["relu"] * (len(weights) - 1) + ["identity"]
    net = c_generate_net_loadable(acts, [np.asarray(w) for w in weights],
                                  [np.asarray(b) for b in biases], prefix="flashml_pnet")
    net_c = build / "partition_net.c"
    net_c.write_text(f"""/* MLCache's partition network: emlearn {_emlearn_version()}'s layers
 * (weights, biases, activations), evaluated here. emlearn's own eml_net_forward walks the weights
 * output by output (stride n_outputs) with one dependent add chain per output: ~30 us for the
 * 176 x 64 x 16 network. This loop goes input by input over contiguous weights, so the
 * compiler vectorises across outputs; each output still sums w * x over the inputs in the
 * same order from 0.0f, then adds its bias, as eml_net_forward does: the same float32
 * results (zero inputs skipped: see below). Activations live on the caller's stack (emlearn
 * keeps them in statics). */
#include <eml_net.h>
{net}
#define FLASHML_PNET_WIDTH {width}
/* One body per ISA (GCC's target_clones: the loader's ifunc picks the widest the CPU has, so
 * the .so stays portable); -ffp-contract=off (the build's flags) keeps separate multiplies
 * and adds, so every width gives the same bits. */
__attribute__((target_clones("avx512f", "avx2", "default")))
static void flashml_pnet_layer(const EmlNetLayer *l, const float *in, float *out) {{
    for (int o = 0; o < l->n_outputs; o++) out[o] = 0.0f;
    for (int i = 0; i < l->n_inputs; i++) {{
        const float x = in[i];
        /* a zero input (absent streams' slots, ReLUs at 0: about half) adds w * 0 = +-0 to
         * a sum that started at +0.0f and so is never -0: skipping it changes no bit (the
         * weights are finite) and halves the work */
        if (x == 0.0f) continue;
        const float *w = l->weights + (long)i * l->n_outputs;
        for (int o = 0; o < l->n_outputs; o++) out[o] += w[o] * x;
    }}
    for (int o = 0; o < l->n_outputs; o++) {{
        out[o] += l->biases[o];
        if (l->activation == EmlNetActivationRelu) out[o] = out[o] <= 0.0f ? 0.0f : out[o];
    }}
}}
int flashml_partition_net(const float *in, float *out);
int flashml_partition_net(const float *in, float *out) {{
    float a[2][FLASHML_PNET_WIDTH];
    const float *x = in;
    const int n = flashml_pnet.n_layers;
    if (flashml_pnet.layers[0].n_inputs != {c.num_features} ||
        flashml_pnet.layers[n - 1].n_outputs != {c.max_streams}) return -1;
    for (int k = 0; k < n; k++) {{
        float *y = k == n - 1 ? out : a[k % 2];
        flashml_pnet_layer(&flashml_pnet.layers[k], x, y);
        x = y;
    }}
    return 0;
}}
""")
    wrap = build / "partition_wrapper.c"
    wrap.write_text(PARTITION_WRAPPER.read_text()
                    .replace("@PARTITION_CONTRACT_HASH@", contract_hash)
                    .replace("@PARTITION_SHARPNESS@", float(sharpness).hex()))
    return [(net_c, ("-w", "-O3", "-ffp-contract=off")), (wrap, WRAPPER_WARNINGS)]


def _partition_rule_sources(build: Path, contract_hash: str
                            ) -> list[tuple[Path, tuple[str, ...]]]:
    """MLCache's partition rule "previous_optimal" (no network): the last interval's best
    split, searched in C on the monitor's histograms (`partition_rule.c.in`)."""
    src = build / "partition_rule.c"
    src.write_text(PARTITION_RULE.read_text().replace("@PARTITION_CONTRACT_HASH@",
                                                      contract_hash))
    return [(src, WRAPPER_WARNINGS)]


def _emlearn_version() -> str:
    from importlib.metadata import version

    return version("emlearn")


def _partition_manifest(pp: dict[str, Any], folder: Path) -> dict[str, Any]:
    """The manifest's partition fields: `partition_contract_hash` (top level) and
    `partition` (the contract, the network's shape, its parameters and metrics)."""
    c = partition_contract.contract()
    return {
        "partition_contract_hash": pp["contract_hash"],
        "partition": {"contract": {"name": c.name, "version": c.version,
                                   "max_streams": c.max_streams, "steps": c.steps,
                                   "num_features": c.num_features},
                      **({"network": {"file": PARTITION_FILE,
                                      "sha256": sha256_file(folder / PARTITION_FILE),
                                      "emlearn": _emlearn_version(),
                                      "arithmetic": "float32"}}
                         if pp["rule"] == "network" else {}),
                      **pp},
    }


def _versions(cc: str) -> dict[str, str]:
    # the installed distributions' versions: importing lightgbm only for its version loads
    # scikit-learn, SciPy and pandas (5-30 s of a compile whose objects were all cached)
    from importlib.metadata import version

    from flashml import __version__

    return {"cc": cc_version(cc), "treelite": version("treelite"),
            "tl2cgen": version("tl2cgen"), "lightgbm": version("lightgbm"),
            "flashml": __version__}


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


def _object_cache(cache: bool | str | os.PathLike[str]) -> Any:
    """compile_policy's object cache (compiler/objcache.py), or None."""
    from flashml.compiler.objcache import ObjectCache
    from flashml.config import cache_dir

    if cache is False:
        return None
    return ObjectCache.open(cache_dir() if cache is True else Path(cache))


def _compile_one(cmd: list[str], what: str, build: Path, objcache: Any) -> None:
    """Run one compiler command (`... -c SRC -o OBJ`, names relative to `build`), or take its
    object from `objcache` when it holds a verified one of the same key; a fresh object goes
    into the cache."""
    src, obj = cmd[-3], cmd[-1]
    assert cmd[-4] == "-c" and cmd[-2] == "-o", cmd
    key = None
    if objcache is not None:
        from flashml.compiler.objcache import object_key, toolchain_id

        key = object_key(toolchain_id(cmd[0]), cmd, build, src)
        if objcache.fetch(key, build / obj):
            return
    _run(cmd, what, cwd=build)
    if objcache is not None and key is not None:
        objcache.store(key, build / obj, cmd)


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
