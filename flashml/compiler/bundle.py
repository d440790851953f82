"""The model bundle the policy compiler reads, and where it comes from.

A bundle is a directory (a local folder, or the artifact path `policy/` of an MLflow run)
holding:

| file              | what                                                                  |
|-------------------|-----------------------------------------------------------------------|
| `admission.txt`   | LightGBM binary classifier on the admission features (contract order) |
| `range_start.txt` | LightGBM regressor on `contract.models["range"]`: first segment       |
| `range_end.txt`   | LightGBM regressor on `contract.models["range"]`: last segment        |
| `when.txt`        | LightGBM binary classifier on `contract.models["when"]`               |
| `policy.json`     | contract_hash, admit_threshold, when_threshold, eviction_age_s,       |
|                   | target_write_rate_mbps, metrics {...}, mlflow_run_id (optional)       |

Prefetch range convention (the policy .so applies it, training must too, use
`round_range`): the range regressors predict inclusive segment indices; each prediction is
rounded half up (`floor(x + 0.5)`), clamped to `[0, segments_per_block - 1]`, and the end is
raised to the start if it came out below it. ML-When reads the range features followed by
these rounded, clamped `predicted_start`, `predicted_end`.

A bundle may hold MAT's eviction model instead of, or as well as, the admission models
(`save_evict_model`); each group is all there or not at all:

| file              | what                                                                  |
|-------------------|-----------------------------------------------------------------------|
| `evict.txt`       | LightGBM regressor on the 44 eviction features (features/eviction.toml)|
|                   | predicting log1p(logical distance from the last access to the next)   |
| `policy.json`     | `eviction`: {contract_hash, k, max_candidates, delta,                 |
|                   | initial_threshold, memory_window, metrics, controller: sign or mean,  |
|                   | reuse_predictions: bool}                                              |

The admission fields of policy.json are needed only with the admission models.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from flashml import knobs

# KML's readahead model lives in its own module (compiler/readahead.py); its names here too
from flashml.compiler.readahead import (  # noqa: E402
    READAHEAD_FILE,
    READAHEAD_PARAMS,
)
from flashml.compiler.readahead import checked_params as _checked_readahead  # noqa: E402
from flashml.config import UNITS
from flashml.errors import UserError
from flashml.features import eviction
from flashml.features import partition as partition_contract
from flashml.features.contract import contract
from flashml.files import atomic_dir

#: Model name -> file name inside a bundle, in ABI order.
MODEL_FILES: dict[str, str] = {
    "admission": "admission.txt",
    "range_start": "range_start.txt",
    "range_end": "range_end.txt",
    "when": "when.txt",
}
#: The eviction model (MAT) of a bundle, and its parameters' object in policy.json.
EVICT_MODEL = "evict"
EVICT_FILE = "evict.txt"
EVICT_PARAMS = "eviction"
#: MLCache's partition network (weights as JSON) and its parameters' object in policy.json.
PARTITION_FILE = "partition.json"
PARTITION_PARAMS = "partition"
#: How a partition policy turns the monitor's features into shares: the network
#: (partition.json) or the rule "previous_optimal" (the last interval's best split, in C).
PARTITION_RULES = ("network", "previous_optimal")
POLICY_JSON = "policy.json"
#: Artifact path of the model bundle inside an MLflow run.
ARTIFACT_PATH = "policy"
#: Artifact path the compiled bundle (policy.so, header, manifest) is logged under.
COMPILED_ARTIFACT_PATH = "policy_so"
REQUIRED_PARAMS = ("admit_threshold", "when_threshold", "eviction_age_s",
                   "target_write_rate_mbps")
#: Every model file a bundle may hold, by model name (the admission group, then MAT's).
ALL_MODEL_FILES: dict[str, str] = {**MODEL_FILES, EVICT_MODEL: EVICT_FILE}
#: policy.json `eviction` fields (MAT's controller and the features' memory window).
EVICT_REQUIRED = ("contract_hash", "k", "max_candidates", "delta", "initial_threshold",
                  "memory_window")
#: MAT's knobs as declared (flashml/systems/mat/settings.toml): each `eviction` field's bounds;
#: `controller` and `reuse_predictions` are optional (absent: the declared legacy values).
EVICT_KNOBS = knobs.load("mat")


def tracking_uri() -> str:
    """MLflow tracking URI: $MLFLOW_TRACKING_URI, else the embedded sqlite store under the
    state dir (`sqlite:///.flashml/mlflow.db`, artifacts in `.flashml/mlartifacts`). The one
    definition lives in flashml.tracking; this re-export keeps compiler/ self-describing."""
    from flashml.tracking import tracking_uri as _uri

    return _uri()


def model_features(model: str) -> list[str]:
    """The feature names a bundle model reads, in order."""
    c = contract()
    if model == "admission":
        return c.names
    if model in ("range_start", "range_end"):
        return c.model_features("range")
    if model == "when":
        return c.model_features("when")
    if model == EVICT_MODEL:
        return list(eviction.contract().names)
    raise KeyError(model)


def bundle_groups(bundle: Path, params: Mapping[str, Any] | None = None) -> dict[str, bool]:
    """Which model groups a bundle folder holds: {"admission": ..., "eviction": ...,
    "partition": ..., "readahead": ...}. A group
    is there when any of its model files is, or policy.json has its parameters (then all
    of its files must be: the compiler says which is missing)."""
    params = params or {}
    return {"admission": any((bundle / f).exists() for f in MODEL_FILES.values())
            or "admit_threshold" in params,
            "eviction": (bundle / EVICT_FILE).exists() or EVICT_PARAMS in params,
            "partition": (bundle / PARTITION_FILE).exists() or PARTITION_PARAMS in params,
            "readahead": (bundle / READAHEAD_FILE).exists() or READAHEAD_PARAMS in params}


def round_range(start: Any, end: Any,
                segments_per_block: int = UNITS.segments_per_block) -> tuple[np.ndarray,
                                                                              np.ndarray]:
    """The range models' raw predictions -> inclusive segment indices, exactly as the .so
    does it: floor(x + 0.5), clamped to [0, spb-1], end raised to start. int64 arrays."""
    hi = segments_per_block - 1
    s = np.clip(np.floor(np.asarray(start, dtype=np.float64) + 0.5), 0, hi)
    e = np.clip(np.floor(np.asarray(end, dtype=np.float64) + 0.5), 0, hi)
    s = np.nan_to_num(s, nan=0.0)
    e = np.nan_to_num(e, nan=0.0)
    return s.astype(np.int64), np.maximum(e, s).astype(np.int64)


def when_matrix(features: np.ndarray | None, start: np.ndarray, end: np.ndarray, *,
                range_x: np.ndarray | None = None) -> np.ndarray:
    """ML-When's input rows: the range features of the admission matrix + predicted range.
    `range_x`: those range features already taken out of `features` (then `features` is
    not read). One output array filled in place (at 10 M rows a gather, a column_stack and
    a copy took 2.4 s)."""
    if range_x is None:
        range_x = np.asarray(features, dtype=np.float64)[:, contract().indices("range")]
    r = range_x.shape[1]
    out = np.empty((range_x.shape[0], r + 2), dtype=np.float64)
    out[:, :r] = range_x
    out[:, r] = start
    out[:, r + 1] = end
    return out


def _finite(name: str, v: Any) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise UserError(f"{POLICY_JSON}: '{name}' must be a number, got {v!r}") from None
    if not math.isfinite(f):
        raise UserError(f"{POLICY_JSON}: '{name}' must be finite, got {v!r}")
    return f


def save_policy_models(directory: str | os.PathLike[str], boosters: Mapping[str, Any], *,
                       admit_threshold: float, when_threshold: float, eviction_age_s: float,
                       target_write_rate_mbps: float, metrics: Mapping[str, float] | None = None,
                       mlflow_run_id: str | None = None,
                       contract_hash: str | None = None, peak_hours: Sequence[int] = (),
                       peak_bonus: float = 0.0, **extra: Any) -> Path:
    """Write a bundle: the four LightGBM Boosters (keys of MODEL_FILES) as text models and
    policy.json (thresholds, the peak schedule of the admission threshold, ...). Written to
    a temporary folder first, then renamed. Returns the folder.

    Log it with `mlflow.log_artifacts(directory, artifact_path="policy")`.
    """
    missing = [m for m in MODEL_FILES if m not in boosters]
    if missing:
        raise ValueError(f"save_policy_models: missing boosters {missing}; "
                         f"need {list(MODEL_FILES)}")
    out = Path(directory)
    with atomic_dir(out) as tmp:
        for name, fname in MODEL_FILES.items():
            want = len(model_features(name))
            got = boosters[name].num_feature()
            if got != want:
                raise ValueError(f"save_policy_models: model '{name}' has {got} features, "
                                 f"the contract gives it {want}: {model_features(name)}")
            boosters[name].save_model(str(tmp / fname))
        params = {
            "contract_hash": contract_hash or contract().hash,
            "admit_threshold": float(admit_threshold),
            "when_threshold": float(when_threshold),
            "eviction_age_s": float(eviction_age_s),
            "target_write_rate_mbps": float(target_write_rate_mbps),
            **_checked_peak("save_policy_models", list(peak_hours), peak_bonus),
            "metrics": {k: float(v) for k, v in (metrics or {}).items()},
            **extra,
        }
        if mlflow_run_id:
            params["mlflow_run_id"] = mlflow_run_id
        (tmp / POLICY_JSON).write_text(json.dumps(params, indent=2, sort_keys=True) + "\n")
    return out


def save_evict_model(directory: str | os.PathLike[str], booster: Any, *, k: float,
                     max_candidates: int, delta: float, initial_threshold: float,
                     memory_window: int | None = None, controller: str = "sign",
                     reuse_predictions: bool = False,
                     metrics: Mapping[str, float] | None = None,
                     mlflow_run_id: str | None = None, contract_hash: str | None = None,
                     merge: bool = False, **extra: Any) -> Path:
    """Write MAT's eviction model into a bundle: `evict.txt` (a LightGBM regressor on the 44
    eviction features predicting log1p of the logical distance from the last access to the
    next) and policy.json's `eviction` object: MAT's controller (k: the target number of
    predictions per eviction, max_candidates: L, delta, initial_threshold: T0 in logical
    requests, controller: "sign" or "mean" (EVICT_KNOBS), reuse_predictions: keep a
    candidate's prediction until its next access), the memory window the features
    were computed with (default: the contract's), the model's metrics and `extra` fields.

    merge=False writes a bundle with the eviction model only (capabilities ["eviction"]);
    merge=True adds it to the bundle already in `directory` (e.g. one save_policy_models
    wrote: one .so then has admission, prefetch and eviction), replacing an earlier
    eviction model there. Written to a temporary folder first, then renamed.
    """
    c = eviction.contract()
    want = c.num_features
    got = booster.num_feature()
    if got != want:
        raise ValueError(f"save_evict_model: the model has {got} features, the eviction "
                         f"contract has {want}: {list(c.names)}")
    ev = {"contract_hash": contract_hash or c.hash, "k": k, "max_candidates": max_candidates,
          "delta": delta, "initial_threshold": initial_threshold, "controller": controller,
          "reuse_predictions": bool(reuse_predictions),
          "memory_window": c.memory_window if memory_window is None else memory_window,
          "metrics": {name: float(v) for name, v in (metrics or {}).items()}, **extra}
    try:
        ev = _checked_evict("save_evict_model", ev)
    except UserError as e:
        raise ValueError(str(e)) from None
    out = Path(directory)
    params: dict[str, Any] = {"metrics": {}}
    if merge:
        if not (out / POLICY_JSON).is_file():
            raise ValueError(f"save_evict_model(merge=True): {out} holds no {POLICY_JSON}")
        params = json.loads((out / POLICY_JSON).read_text())
    with atomic_dir(out) as tmp:
        if merge:
            for f in (*MODEL_FILES.values(), PARTITION_FILE):
                if (out / f).is_file():
                    shutil.copy2(out / f, tmp / f)
        booster.save_model(str(tmp / EVICT_FILE))
        params[EVICT_PARAMS] = ev
        if mlflow_run_id:
            params["mlflow_run_id"] = mlflow_run_id
        (tmp / POLICY_JSON).write_text(json.dumps(params, indent=2, sort_keys=True) + "\n")
    return out


def read_policy_json(bundle: Path) -> dict[str, Any]:
    """policy.json of a bundle folder, checked: numbers are finite, keys present."""
    path = bundle / POLICY_JSON
    if not path.is_file():
        raise UserError(f"{path}: missing; a policy bundle needs {POLICY_JSON} and "
                        f"{', '.join(MODEL_FILES.values())}, {EVICT_FILE}, "
                        f"{PARTITION_FILE} and/or {READAHEAD_FILE}")
    try:
        params = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(params, dict):
        raise UserError(f"{path}: expected a JSON object")
    groups = bundle_groups(bundle, params)
    if not any(groups.values()):
        raise UserError(f"{bundle}: no models: a policy bundle holds the admission models "
                        f"({', '.join(MODEL_FILES.values())}), the eviction model "
                        f"({EVICT_FILE}), the partition network ({PARTITION_FILE}), the "
                        f"readahead model ({READAHEAD_FILE}), or several")
    metrics = params.get("metrics") or {}
    if not isinstance(metrics, dict):
        raise UserError(f"{path}: field 'metrics': expected an object")
    params["metrics"] = metrics
    if groups["eviction"]:
        params[EVICT_PARAMS] = _checked_evict(str(path), params.get(EVICT_PARAMS))
    if groups["partition"]:
        params[PARTITION_PARAMS] = _checked_partition(str(path), params.get(PARTITION_PARAMS))
    if groups["readahead"]:
        params[READAHEAD_PARAMS] = _checked_readahead(
            str(path), _checked_group(str(path), READAHEAD_PARAMS, params.get(READAHEAD_PARAMS)))
    if not groups["admission"]:
        return params
    for k in REQUIRED_PARAMS + ("contract_hash",):
        if k not in params:
            raise UserError(f"{path}: field '{k}': missing")
    # the manifest's own schema (compiler/manifest.schema.json): typed, finite, in range
    from flashml.compiler.manifest import check_knobs

    check_knobs({k: params[k] for k in (*REQUIRED_PARAMS, "peak_hours", "peak_bonus")
                 if k in params}, str(path))
    for k in REQUIRED_PARAMS:
        params[k] = _finite(k, params[k])
    params.update(_checked_peak(str(path), params.get("peak_hours", []),
                                params.get("peak_bonus", 0.0)))
    return params


def save_partition_model(directory: str | os.PathLike[str], net: Any, *,
                         metrics: Mapping[str, float] | None = None,
                         mlflow_run_id: str | None = None, contract_hash: str | None = None,
                         merge: bool = False, sharpness: float = 1.0, **extra: Any) -> Path:
    """Write MLCache's partition network into a bundle: `partition.json` (a fitted
    scikit-learn MLPRegressor's layers: weights (inputs x outputs), biases, activations;
    float64 as JSON numbers) and policy.json's `partition` object (the contract hash, the
    hidden layer sizes, the metrics and `extra` fields, e.g. capacity and interval).
    merge=True adds it to the bundle already in `directory`. Written to a temporary folder
    first, then renamed."""
    c = partition_contract.contract()
    weights = [np.asarray(w, dtype=np.float64) for w in net.coefs_]
    biases = [np.asarray(b, dtype=np.float64) for b in net.intercepts_]
    if weights[0].shape[0] != c.num_features or weights[-1].shape[1] != c.max_streams:
        raise ValueError(f"save_partition_model: the network maps {weights[0].shape[0]} "
                         f"inputs to {weights[-1].shape[1]} outputs; the partition contract "
                         f"has {c.num_features} features and {c.max_streams} streams")
    if net.activation != "relu" or net.out_activation_ != "identity":
        raise ValueError("save_partition_model: expected ReLU hidden layers and a linear "
                         f"output, got {net.activation} and {net.out_activation_}")
    model = {"format": "flashml-mlp/1", "activation": "relu", "out_activation": "identity",
             "layers": [{"weights": w.tolist(), "biases": b.tolist()}
                        for w, b in zip(weights, biases, strict=True)]}
    pp = {"contract_hash": contract_hash or c.hash, "sharpness": float(sharpness),
          "hidden": [int(w.shape[1]) for w in weights[:-1]],
          "metrics": {name: float(v) for name, v in (metrics or {}).items()}, **extra}
    out = Path(directory)
    params: dict[str, Any] = {"metrics": {}}
    if merge:
        if not (out / POLICY_JSON).is_file():
            raise ValueError(f"save_partition_model(merge=True): {out} holds no {POLICY_JSON}")
        params = json.loads((out / POLICY_JSON).read_text())
    with atomic_dir(out) as tmp:
        if merge:
            for f in (*MODEL_FILES.values(), EVICT_FILE):
                if (out / f).is_file():
                    shutil.copy2(out / f, tmp / f)
        (tmp / PARTITION_FILE).write_text(json.dumps(model) + "\n")
        params[PARTITION_PARAMS] = pp
        if mlflow_run_id:
            params["mlflow_run_id"] = mlflow_run_id
        (tmp / POLICY_JSON).write_text(json.dumps(params, indent=2, sort_keys=True) + "\n")
    return out


def save_partition_rule(directory: str | os.PathLike[str], rule: str = "previous_optimal", *,
                        metrics: Mapping[str, float] | None = None,
                        mlflow_run_id: str | None = None, **extra: Any) -> Path:
    """Write a partition bundle with no network: policy.json's `partition` object names the
    rule compiled in its place (PARTITION_RULES) and holds `extra` fields (capacity,
    interval, ...). Written to a temporary folder first, then renamed."""
    if rule not in PARTITION_RULES[1:]:
        raise ValueError(f"save_partition_rule: rule must be one of {PARTITION_RULES[1:]}, "
                         f"got {rule!r}")
    pp = {"contract_hash": partition_contract.contract().hash, "rule": rule,
          "metrics": {name: float(v) for name, v in (metrics or {}).items()}, **extra}
    params: dict[str, Any] = {"metrics": {}, PARTITION_PARAMS: pp}
    if mlflow_run_id:
        params["mlflow_run_id"] = mlflow_run_id
    out = Path(directory)
    with atomic_dir(out) as tmp:
        (tmp / POLICY_JSON).write_text(json.dumps(params, indent=2, sort_keys=True) + "\n")
    return out


def read_partition_model(path: Path) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The layers of a bundle's partition.json, checked: (weights, biases), float64; a
    UserError names the file and field of anything malformed."""
    c = partition_contract.contract()
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{path}: missing; a bundle with a partition group ('partition' in "
                        "policy.json) needs it") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(raw, dict) or raw.get("format") != "flashml-mlp/1":
        raise UserError(f"{path}: field 'format': expected 'flashml-mlp/1'")
    if raw.get("activation") != "relu" or raw.get("out_activation") != "identity":
        raise UserError(f"{path}: fields 'activation'/'out_activation': expected relu and "
                        "identity")
    layers = raw.get("layers")
    if not isinstance(layers, list) or len(layers) < 2:
        raise UserError(f"{path}: field 'layers': expected at least 2 layers (one hidden)")
    ws, bs = [], []
    n_in = c.num_features
    for i, layer in enumerate(layers):
        try:
            w = np.asarray(layer["weights"], dtype=np.float64)
            b = np.asarray(layer["biases"], dtype=np.float64)
        except (KeyError, TypeError, ValueError):
            raise UserError(f"{path}: field 'layers[{i}]': expected 'weights' (a matrix) and "
                            "'biases' (a vector) of numbers") from None
        if w.ndim != 2 or w.shape[0] != n_in or b.shape != (w.shape[1],):
            raise UserError(f"{path}: field 'layers[{i}]': weights {w.shape} and biases "
                            f"{b.shape}, expected ({n_in}, n) and (n,)")
        if not (np.isfinite(w).all() and np.isfinite(b).all()):
            raise UserError(f"{path}: field 'layers[{i}]': non-finite weights or biases")
        ws.append(w)
        bs.append(b)
        n_in = w.shape[1]
    if n_in != c.max_streams:
        raise UserError(f"{path}: field 'layers': {n_in} outputs, the partition contract has "
                        f"{c.max_streams} streams")
    return ws, bs


def _checked_group(where: str, key: str, obj: Any) -> dict[str, Any]:
    """A model group's object in policy.json (`key`), checked for what every group has: an
    object with its contract's hash and (optional) metrics."""
    if not isinstance(obj, dict):
        raise UserError(f"{where}: field '{key}': expected an object")
    if not isinstance(obj.get("contract_hash"), str):
        raise UserError(f"{where}: field '{key}.contract_hash': missing")
    m = obj.get("metrics", {})
    if not isinstance(m, dict):
        raise UserError(f"{where}: field '{key}.metrics': expected an object")
    return {**obj, "metrics": m}


def _checked_partition(where: str, pp: Any) -> dict[str, Any]:
    pp = _checked_group(where, PARTITION_PARAMS, pp)
    rule = pp.get("rule", "network")
    if rule not in PARTITION_RULES:
        raise UserError(f"{where}: field '{PARTITION_PARAMS}.rule': expected one of "
                        f"{', '.join(PARTITION_RULES)}, got {rule!r}")
    g = pp.get("sharpness", 1.0)
    if isinstance(g, bool) or not isinstance(g, int | float) or not 0.0 < g <= 16.0:
        raise UserError(f"{where}: field '{PARTITION_PARAMS}.sharpness': expected a number in "
                        f"(0, 16], got {g!r}")
    return {**pp, "sharpness": float(g), "rule": rule}


def _checked_evict(where: str, ev: Any) -> dict[str, Any]:
    """policy.json's `eviction` object, checked: MAT's k in [1, max_candidates], at least one
    candidate, delta in (0, 1), a finite initial threshold >= 0 (logical requests), a memory
    window >= 1 (logical requests), a controller of EVICT_KNOBS (absent: its legacy, sign)."""
    if not isinstance(ev, dict):
        raise UserError(f"{where}: field '{EVICT_PARAMS}': missing or not an object (the "
                        f"eviction model's parameters: {', '.join(EVICT_REQUIRED)})")
    for k in EVICT_REQUIRED:
        if k not in ev:
            raise UserError(f"{where}: field '{EVICT_PARAMS}.{k}': missing")
    out = dict(ev)
    if not isinstance(ev["contract_hash"], str):
        raise UserError(f"{where}: field '{EVICT_PARAMS}.contract_hash': expected a string")

    def integer(k: str, lo: int) -> int:
        v = ev[k]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v) \
                or not lo <= v <= 2**62:
            raise UserError(f"{where}: field '{EVICT_PARAMS}.{k}': expected an integer >= "
                            f"{lo}, got {v!r}")
        return int(v)

    for name in ("k", "max_candidates", "delta", "initial_threshold", "memory_window"):
        knob = EVICT_KNOBS[name]
        out[name] = knob.check(f"{where}: field '{EVICT_PARAMS}.{name}'", ev[name])
        if knob.kind == "float":
            out[name] = float(out[name])
    out["controller"] = EVICT_KNOBS["controller"].check(
        f"{where}: field '{EVICT_PARAMS}.controller'",
        ev.get("controller", EVICT_KNOBS["controller"].legacy))
    out["reuse_predictions"] = EVICT_KNOBS["reuse_predictions"].check(
        f"{where}: field '{EVICT_PARAMS}.reuse_predictions'",
        ev.get("reuse_predictions", EVICT_KNOBS["reuse_predictions"].legacy))
    EVICT_KNOBS.check_rules(f"{where}: field '{EVICT_PARAMS}'", out)
    metrics = ev.get("metrics") or {}
    if not isinstance(metrics, dict):
        raise UserError(f"{where}: field '{EVICT_PARAMS}.metrics': expected an object")
    out["metrics"] = metrics
    return out


def _checked_peak(where: str, hours: Any, bonus: Any) -> dict[str, Any]:
    """The peak schedule (systems/baleen/peak.py) as policy.json stores it, checked: distinct hours
    of the day in 0..23, a bonus in [0, 1]. Bundles without one have a flat threshold."""
    if not isinstance(hours, list) or not all(
            isinstance(h, int) and not isinstance(h, bool) and 0 <= h < 24 for h in hours) \
            or len(set(hours)) != len(hours):
        raise UserError(f"{where}: field 'peak_hours': expected distinct hours 0..23, "
                        f"got {hours!r}")
    b = _finite("peak_bonus", bonus) if not isinstance(bonus, bool) else None
    if b is None or not 0.0 <= b <= 1.0:
        raise UserError(f"{where}: field 'peak_bonus': expected a number in [0, 1], "
                        f"got {bonus!r}")
    return {"peak_hours": sorted(hours), "peak_bonus": b}


def sim_peak(params: Mapping[str, Any]) -> dict[str, Any]:
    """A bundle's peak schedule as SimConfig fields (`peak_hours`, `peak_bonus`)."""
    return {"peak_hours": tuple(params.get("peak_hours", ())),
            "peak_bonus": float(params.get("peak_bonus", 0.0))}


def find_bundle(root: Path) -> Path:
    """The folder under `root` (itself, `policy/`, or `artifacts/policy/` of the registered
    pyfunc policy model, flashml/systems/baleen/policy_model.py) that holds policy.json."""
    for cand in (root, root / ARTIFACT_PATH, root / "artifacts" / ARTIFACT_PATH):
        if (cand / POLICY_JSON).is_file():
            return cand
    raise UserError(f"{root}: no {POLICY_JSON} here or under {ARTIFACT_PATH}/; not a policy "
                    "model bundle")


def parse_run_uri(uri: str) -> str | None:
    """The run id of a `runs:/<id>/...` URI, else None."""
    if uri.startswith("runs:/"):
        rest = uri[len("runs:/"):].strip("/")
        return rest.split("/", 1)[0] or None
    return None


def fetch_bundle(*, model_uri: str | None = None, run_id: str | None = None,
                 model_dir: str | os.PathLike[str] | None = None,
                 dest: Path) -> tuple[Path, str | None, str]:
    """Resolve the source to a local bundle folder.

    Returns (folder, MLflow run id or None, source description). MLflow sources are
    downloaded into `dest`.
    """
    given = [x is not None for x in (model_uri, run_id, model_dir)]
    if sum(given) != 1:
        raise UserError("give exactly one of --model-uri, --run-id, --model-dir")
    if model_dir is not None:
        root = Path(model_dir)
        if not root.is_dir():
            raise UserError(f"{root}: no such directory")
        folder = find_bundle(root)
        rid = read_policy_json(folder).get("mlflow_run_id")
        return folder, rid, str(root)
    import mlflow
    from mlflow.exceptions import MlflowException

    if run_id is not None:
        model_uri = f"runs:/{run_id}/{ARTIFACT_PATH}"
    assert model_uri is not None
    dest.mkdir(parents=True, exist_ok=True)
    try:
        local = mlflow.artifacts.download_artifacts(artifact_uri=model_uri, dst_path=str(dest),
                                                    tracking_uri=tracking_uri())
    except MlflowException as e:
        raise UserError(f"{model_uri}: cannot download from MLflow ({tracking_uri()}): "
                        f"{e.message.splitlines()[0] if e.message else e}") from None
    except OSError as e:
        raise UserError(f"{model_uri}: cannot download from MLflow: {e}") from None
    folder = find_bundle(Path(local))
    rid = parse_run_uri(model_uri) or read_policy_json(folder).get("mlflow_run_id")
    return folder, rid, model_uri
