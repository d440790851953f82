"""The policy compiler's wrapper: policy_wrapper.c.in filled with a bundle's thresholds, margin
bands, peak schedule and MAT's knob exports."""

from __future__ import annotations

import logging
import math
import re
from typing import Any

from flashml.compiler.bundle import (
    ALL_MODEL_FILES,
    EVICT_KNOBS,
    EVICT_MODEL,
    EVICT_PARAMS,
    MODEL_FILES,
)
from flashml.compiler.layout import (
    WRAPPER,
)
from flashml.compiler.toolchain import (
    CompileError,
)
from flashml.compiler.trees import (
    ModelInfo,
    tl2_prefix,
)
from flashml.features import eviction
from flashml.features.abi import ABI_VERSION
from flashml.features.contract import contract

log = logging.getLogger(__name__)



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
