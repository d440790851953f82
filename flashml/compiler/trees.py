"""The policy compiler's tree models: LightGBM text models loaded through Treelite, C from
TL2cgen (renamed per model), and the fast (x86-64) and compact (portable) evaluators."""

from __future__ import annotations

import logging
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flashml.compiler import compact_trees
from flashml.compiler.bundle import (
    EVICT_FILE,
    EVICT_MODEL,
    EVICT_PARAMS,
    MODEL_FILES,
    model_features,
)
from flashml.compiler.fast_trees import FastTrees, model_header, plan
from flashml.compiler.toolchain import (
    CompileError,
    _quiet_native,
)
from flashml.files import sha256_file

log = logging.getLogger(__name__)


#: The one layout of TL2cgen's input union the wrapper assumes.
_ENTRY_RE = re.compile(r"union Entry \{\s*int missing;\s*double fvalue;\s*int qvalue;\s*\};")


_PROTO_RE = re.compile(r"^[A-Za-z_][\w \t\*]*?\b([A-Za-z_]\w*)\s*\([^;]*\)\s*;", re.M)


#: A top-level, non-static definition in generated C: `type name(`, `type name[] =`, ...
_GLOBAL_DEF_RE = re.compile(
    r"^(?!static\b|typedef\b|union\b|struct\b|enum\b|extern\b|return\b)"
    r"[A-Za-z_][\w \t\*]*?\b([A-Za-z_]\w*)\s*(?:\(|\[|=)", re.M)



#: Trees per generated translation unit (compiled in parallel).
TREES_PER_UNIT = 25


#: Evaluators of the portable path (compile_policy's `portable`), and the default.
PORTABLE_EVALUATORS = ("compact", "tl2cgen")


PORTABLE_DEFAULT = "compact"


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
