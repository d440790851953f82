"""KML's readahead model in a policy bundle (capability "readahead"): the file it is
saved as (`readahead.json`), its parameters in policy.json (`readahead`), and the C it
compiles to (`flashml_readahead_kib` and friends, flashml_policy.h).

The model is a classifier of the workload from the five window features
(features/readahead.toml), standardised with the training rows' means and standard
deviations; the class maps to a readahead size (KiB). Two kinds:

- `mlp`: a network of one or more hidden layers of logistic units and a softmax output (its
  argmax is the class, so the C takes the argmax of the output layer's sums): KML's own
  (5 -> 15 -> 5 -> 4) or one hidden layer (systems/kml/model.py NETWORKS).
- `tree`: a decision tree (the paper's comparison), as its node arrays.

Why our own C and not emlearn's (which MLCache's network uses): emlearn evaluates networks in
float32 with activations in static buffers (not reentrant), and prints tree thresholds with
six decimals; this model is ~150 multiply-adds or a few comparisons, so the C here evaluates
in double with every weight and threshold written as an exact hexadecimal literal, which
makes the compiled model agree with scikit-learn's own prediction (tests/kml/test_kml_model.py),
and keeps flashml_readahead_kib reentrant.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from flashml import knobs
from flashml.errors import UserError
from flashml.features import readahead as readahead_contract
from flashml.files import atomic_dir

READAHEAD_FILE = "readahead.json"
READAHEAD_PARAMS = "readahead"
FORMAT = "flashml-readahead/1"
KINDS = ("mlp", "tree")
#: Readahead sizes a model may choose, KiB: KML's declared readahead_kib range
#: (flashml/systems/kml/settings.toml; the kernel's read_ahead_kb accepts more; the tuner
#: clamps to this range too).
_RA = knobs.load("kml")["readahead_kib"]
MIN_KIB, MAX_KIB = int(_RA.min), int(_RA.max)
#: A network's layers (hidden ones and the output), at most.
MAX_LAYERS = 8


def model_json(model: Any, *, mean: Sequence[float], std: Sequence[float],
               classes_kib: Sequence[int]) -> dict[str, Any]:
    """A fitted scikit-learn MLPClassifier (hidden layers of logistic units) or
    DecisionTreeClassifier as the bundle's JSON: the standardisation, the class -> KiB map
    (by the estimator's class index) and the model's arrays."""
    n = readahead_contract.contract().num_features
    mean_a, std_a = np.asarray(mean, dtype=np.float64), np.asarray(std, dtype=np.float64)
    if mean_a.shape != (n,) or std_a.shape != (n,) or not (std_a > 0).all():
        raise ValueError(f"mean and std: {n} numbers each, std > 0")
    kib = [int(k) for k in classes_kib]
    if len(kib) != len(model.classes_) or not all(MIN_KIB <= k <= MAX_KIB for k in kib):
        raise ValueError(f"classes_kib: one size in {MIN_KIB}..{MAX_KIB} KiB per class "
                         f"({len(model.classes_)}), got {kib}")
    out: dict[str, Any] = {"format": FORMAT, "mean": mean_a.tolist(), "std": std_a.tolist(),
                           "classes_kib": kib}
    if hasattr(model, "coefs_"):
        if model.activation != "logistic" or len(model.coefs_) < 2:
            raise ValueError("the network: hidden layers of logistic units expected, got "
                             f"{len(model.coefs_) - 1} of {model.activation}")
        out["kind"] = "mlp"
        out["layers"] = [{"weights": np.asarray(w, dtype=np.float64).tolist(),
                          "biases": np.asarray(b, dtype=np.float64).tolist()}
                         for w, b in zip(model.coefs_, model.intercepts_, strict=True)]
        if len(model.classes_) == 2:
            raise ValueError("the network: at least 3 classes (scikit-learn's binary output "
                             "is one logistic unit)")
    elif hasattr(model, "tree_"):
        t = model.tree_
        out["kind"] = "tree"
        out["tree"] = {"left": t.children_left.tolist(), "right": t.children_right.tolist(),
                       "feature": t.feature.tolist(), "threshold": t.threshold.tolist(),
                       "leaf_class": np.argmax(t.value[:, 0, :], axis=1).tolist()}
    else:
        raise ValueError(f"unsupported model {type(model).__name__}: an MLPClassifier or a "
                         "DecisionTreeClassifier")
    return out


def save_readahead_model(directory: str | os.PathLike[str], model_doc: Mapping[str, Any], *,
                         metrics: Mapping[str, float] | None = None,
                         mlflow_run_id: str | None = None, **extra: Any) -> Path:
    """Write a readahead bundle folder: readahead.json (`model_json`'s document) and
    policy.json's `readahead` object (contract hash, kind, classes, metrics, `extra`).
    Written to a temporary folder first, then renamed."""
    doc = checked_model("save_readahead_model", dict(model_doc))
    params = {READAHEAD_PARAMS: {
        "contract_hash": readahead_contract.contract().hash, "kind": doc["kind"],
        "classes_kib": doc["classes_kib"],
        "metrics": {k: float(v) for k, v in (metrics or {}).items()}, **extra},
        "metrics": {}}
    if mlflow_run_id:
        params["mlflow_run_id"] = mlflow_run_id
    out = Path(directory)
    with atomic_dir(out) as tmp:
        (tmp / READAHEAD_FILE).write_text(json.dumps(doc) + "\n")
        (tmp / "policy.json").write_text(json.dumps(params, indent=2, sort_keys=True) + "\n")
    return out


def checked_params(where: str, rp: dict[str, Any]) -> dict[str, Any]:
    """policy.json's `readahead` object, checked beyond what every group has (bundle.py's
    _checked_group: an object, contract_hash, metrics): its kind."""
    if rp.get("kind") not in KINDS:
        raise UserError(f"{where}: field '{READAHEAD_PARAMS}.kind': expected one of {KINDS}, "
                        f"got {rp.get('kind')!r}")
    return rp


def read_readahead_model(path: Path) -> dict[str, Any]:
    """A bundle's readahead.json, checked (a UserError names the file and field)."""
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{path}: missing; a bundle with a readahead group ('readahead' in "
                        "policy.json) needs it") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: not valid JSON ({e})") from None
    return checked_model(str(path), raw)


def checked_model(where: str, raw: Any) -> dict[str, Any]:
    n = readahead_contract.contract().num_features

    def bad(field: str, want: str) -> UserError:
        return UserError(f"{where}: field '{field}': expected {want}")

    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise bad("format", repr(FORMAT))
    if raw.get("kind") not in KINDS:
        raise bad("kind", f"one of {KINDS}")
    for f in ("mean", "std"):
        v = raw.get(f)
        if not (isinstance(v, list) and len(v) == n
                and all(isinstance(x, int | float) and math.isfinite(x) for x in v)):
            raise bad(f, f"{n} finite numbers")
    if not all(s > 0 for s in raw["std"]):
        raise bad("std", "positive numbers")
    kib = raw.get("classes_kib")
    if not (isinstance(kib, list) and kib and all(
            isinstance(k, int) and not isinstance(k, bool) and MIN_KIB <= k <= MAX_KIB
            for k in kib)):
        raise bad("classes_kib", f"a list of sizes in {MIN_KIB}..{MAX_KIB} KiB")
    classes = len(kib)
    if raw["kind"] == "mlp":
        layers = raw.get("layers")
        if not (isinstance(layers, list) and 2 <= len(layers) <= MAX_LAYERS):
            raise bad("layers", f"2..{MAX_LAYERS} layers (hidden ones, then the output)")
        n_in = n
        for i, layer in enumerate(layers):
            try:
                w = np.asarray(layer["weights"], dtype=np.float64)
                b = np.asarray(layer["biases"], dtype=np.float64)
            except (KeyError, TypeError, ValueError):
                raise bad(f"layers[{i}]", "'weights' (a matrix) and 'biases'") from None
            if w.ndim != 2 or w.shape[0] != n_in or b.shape != (w.shape[1],) \
                    or not (np.isfinite(w).all() and np.isfinite(b).all()):
                raise bad(f"layers[{i}]", f"finite weights ({n_in}, m) and biases (m,)")
            n_in = w.shape[1]
        if n_in != classes:
            raise bad("layers", f"{classes} outputs (one per class), got {n_in}")
    else:
        t = raw.get("tree")
        keys = ("left", "right", "feature", "threshold", "leaf_class")
        if not (isinstance(t, dict) and all(isinstance(t.get(k), list) for k in keys)
                and len({len(t[k]) for k in keys}) == 1 and t["left"]):
            raise bad("tree", f"arrays {', '.join(keys)} of one length")
        m = len(t["left"])
        for i in range(m):
            lf, rt, f = t["left"][i], t["right"][i], t["feature"][i]
            leaf = lf == -1
            if leaf != (rt == -1) or not (0 <= t["leaf_class"][i] < classes) or (
                    not leaf and not (i < lf < m and i < rt < m and 0 <= f < n
                                      and math.isfinite(t["threshold"][i]))):
                raise bad(f"tree[{i}]", "a leaf (-1, -1) with a class, or a split on a "
                          "feature with children after it")
    return raw


def predict_kib(doc: Mapping[str, Any], rows: Any) -> np.ndarray:
    """The model's readahead (KiB) for rows of raw features, in numpy (double): what the
    compiled flashml_readahead_kib returns."""
    x = (np.atleast_2d(np.asarray(rows, dtype=np.float64)) - doc["mean"]) / np.asarray(doc["std"])
    kib = np.asarray(doc["classes_kib"])
    if doc["kind"] == "mlp":
        *hidden, out = [(np.asarray(layer["weights"]), np.asarray(layer["biases"]))
                        for layer in doc["layers"]]
        h = x
        for w, b in hidden:
            with np.errstate(over="ignore"):  # exp(large) = inf -> the unit is 0, as in C
                h = 1.0 / (1.0 + np.exp(-(h @ w + b)))
        return kib[np.argmax(h @ out[0] + out[1], axis=1)]
    t = doc["tree"]
    out = np.empty(len(x), dtype=np.int64)
    for r, row in enumerate(x.astype(np.float32)):  # scikit-learn compares float32 features
        i = 0
        while t["left"][i] != -1:
            i = t["left"][i] if row[t["feature"][i]] <= t["threshold"][i] else t["right"][i]
        out[r] = kib[t["leaf_class"][i]]
    return out


def c_source(doc: Mapping[str, Any], contract_hash: str) -> str:
    """The capability's C: the model with exact literals and the four ABI functions."""
    c = readahead_contract.contract()
    n = c.num_features

    def arr(name: str, xs: Sequence[float]) -> str:
        body = ", ".join(float(x).hex() for x in xs)
        return f"static const double {name}[{len(xs)}] = {{{body}}};"

    lines = [f"/* KML's readahead model ({doc['kind']}), generated by flashml/compiler/"
             "readahead.py; see flashml_policy.h (compiled with -Wmissing-prototypes: an "
             "ABI function it does not declare fails the build). */",
             "#include <math.h>", '#include "flashml_policy.h"',
             '#define FLASHML_EXPORT __attribute__((visibility("default")))',
             arr("ra_mean", doc["mean"]), arr("ra_std", doc["std"]),
             f"static const int ra_kib[{len(doc['classes_kib'])}] = "
             f"{{{', '.join(str(k) for k in doc['classes_kib'])}}};"]
    if doc["kind"] == "mlp":
        ws = [np.asarray(layer["weights"]) for layer in doc["layers"]]
        bs = [np.asarray(layer["biases"]) for layer in doc["layers"]]
        for i, (w, b) in enumerate(zip(ws, bs, strict=True)):
            lines += [arr(f"ra_w{i + 1}", w.ravel()), arr(f"ra_b{i + 1}", b)]
        width = max([n] + [w.shape[1] for w in ws])
        body = [f"    double a[{width}], z[{width}];",
                f"    for (int i = 0; i < {n}; ++i) a[i] = x[i];"]
        for i, w in enumerate(ws[:-1]):
            m_in, m_out = w.shape
            body += [f"    for (int j = 0; j < {m_out}; ++j) {{",
                     "        double s = 0.0;",
                     f"        for (int i = 0; i < {m_in}; ++i) s += a[i] * ra_w{i + 1}"
                     f"[i * {m_out} + j];",
                     f"        z[j] = 1.0 / (1.0 + exp(-(s + ra_b{i + 1}[j])));",
                     "    }",
                     f"    for (int j = 0; j < {m_out}; ++j) a[j] = z[j];"]
        m_in, k = ws[-1].shape
        last = len(ws)
        body += ["    int best = 0;", "    double best_v = -INFINITY;",
                 f"    for (int o = 0; o < {k}; ++o) {{",
                 "        double s = 0.0;",
                 f"        for (int j = 0; j < {m_in}; ++j) s += a[j] * ra_w{last}[j * {k} + o];",
                 f"        s += ra_b{last}[o];",
                 "        if (s > best_v) { best_v = s; best = o; }",
                 "    }", "    return best;"]
        lines.append("""
/* hidden layers of logistic units; the class is the argmax of the output sums (softmax is
 * monotone); weights row-major (inputs x outputs) as scikit-learn's coefs_ */
static int ra_class(const double *x) {
""" + "\n".join(body) + "\n}")
    else:
        t = doc["tree"]
        m = len(t["left"])
        lines += [f"static const int ra_left[{m}] = {{{', '.join(map(str, t['left']))}}};",
                  f"static const int ra_right[{m}] = {{{', '.join(map(str, t['right']))}}};",
                  f"static const int ra_feature[{m}] = "
                  f"{{{', '.join(str(max(f, 0)) for f in t['feature'])}}};",
                  arr("ra_threshold", t["threshold"]),
                  f"static const int ra_leaf[{m}] = {{{', '.join(map(str, t['leaf_class']))}}};",
                  """
/* scikit-learn's tree: float32 features, go left when x <= threshold (a double) */
static int ra_class(const double *x) {
    int i = 0;
    while (ra_left[i] != -1) {
        i = (double)(float)x[ra_feature[i]] <= ra_threshold[i] ? ra_left[i] : ra_right[i];
    }
    return ra_leaf[i];
}"""]
    lines.append(f"""
FLASHML_EXPORT int flashml_readahead_num_features(void) {{ return FLASHML_READAHEAD_NUM_FEATURES; }}
FLASHML_EXPORT const char *flashml_readahead_contract_hash(void) {{ return "{contract_hash}"; }}
FLASHML_EXPORT int flashml_readahead_window_ms(void) {{ return FLASHML_READAHEAD_WINDOW_MS; }}
FLASHML_EXPORT int flashml_readahead_kib(const double *features) {{
    double x[FLASHML_READAHEAD_NUM_FEATURES];
    for (int i = 0; i < FLASHML_READAHEAD_NUM_FEATURES; ++i) {{
        x[i] = (features[i] - ra_mean[i]) / ra_std[i];
    }}
    return ra_kib[ra_class(x)];
}}
""")
    return "\n".join(lines)


def manifest_fields(params: Mapping[str, Any], folder: Path) -> dict[str, Any]:
    """The manifest's readahead fields: `readahead_contract_hash` and `readahead`."""
    from flashml.compiler.build import sha256_file

    c = readahead_contract.contract()
    rp = params[READAHEAD_PARAMS]
    return {"readahead_contract_hash": rp["contract_hash"],
            "readahead": {"contract": {"name": c.name, "version": c.version,
                                       "features": list(c.names), "window_ms": c.window_ms},
                          "model": {"file": READAHEAD_FILE,
                                    "sha256": sha256_file(folder / READAHEAD_FILE)},
                          **rp}}

