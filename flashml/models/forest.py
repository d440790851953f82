"""LightGBM's scores, exactly, in a fraction of `Booster.predict`'s time (sim/src/core/forest.rs).

The training loop scores every access of the trace with each model it trains (admission,
ML-Range's two, ML-When): at 1 M accesses LightGBM's own predict took 65% of the main job.
`predict(booster, x)` reads the booster's trees once through Treelite (the compiler's
frontend: the same trees, up to the best iteration, that `Booster.predict` uses) into the
simulator crate's evaluator, which returns the same doubles (tests/kernel/test_forest.py checks
them bit for bit, on threshold edges and NaN too). A model the evaluator does not take
(categorical splits, several outputs, another postprocessor) is scored by LightGBM itself.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

from flashml.features.matrix import FeatureMatrix

log = logging.getLogger(__name__)

#: The attribute a booster keeps its evaluator in (or the reason it has none).
_ATTR = "_flashml_forest"
#: The attribute a booster keeps its split thresholds in: per model feature, sorted.
_THRESHOLDS = "_flashml_thresholds"
#: The booster's attribute with its evaluators that read their features from given columns
#: of a wider matrix (by the columns), and the function that builds one.
_BY_COLUMNS = "_flashml_forest_by_columns"
_MAKE = "_flashml_forest_make"
#: LightGBM's kZeroThreshold (1e-35f widened): a value with |x| <= it is read as 0.0.
ZERO_THRESHOLD = float(np.float32(1e-35))
#: Fewer rows than this are scored row by row (`predict_classes` looks for no classes).
CLASSES_MIN_ROWS = 50_000


def threads() -> int:
    """Scoring threads: the cores this work may use (flashml/cores.py)."""
    from flashml.cores import available

    return available()


def forest_of(booster: Any, columns: tuple[int, ...] | None = None) -> tuple[Any, str | None]:
    """The evaluator of `booster` (built once, kept on it), or (None, why not). With
    `columns`: one whose model feature j is column `columns[j]` of the rows it is given."""
    got = getattr(booster, _ATTR, None)
    if got is None:
        got = _build(booster)
        setattr(booster, _ATTR, got)
    if columns is None or got[0] is None:
        return got
    by = getattr(booster, _BY_COLUMNS, None)
    if by is None:
        by = {}
        setattr(booster, _BY_COLUMNS, by)
    if columns not in by:
        try:
            by[columns] = getattr(booster, _MAKE)(list(columns)), None
        except ValueError as e:
            by[columns] = None, str(e)
    return by[columns]


def _build(booster: Any) -> tuple[Any, str | None]:
    import treelite

    from flashml.compiler.fast_trees import (
        LEAF,
        header_refusal,
        model_header,
        split_refusal,
        tree_arrays,
    )
    from flashml_sim import Forest

    model = treelite.frontend.from_lightgbm(booster)
    head = model_header(model)
    why = header_refusal(head)
    base = [float(b) for b in np.ravel(head.get("base_scores", [0.0]))]
    if why is None and (len(base) != 1 or not math.isfinite(base[0])):
        why = f"base scores {base}"
    trees = tree_arrays(model) if why is None else []
    why = why or split_refusal(trees)
    if why:
        return None, why
    nf = int(head["num_feature"])
    cuts: list[list[float]] = [[] for _ in range(nf)]
    for t in trees:
        inner = t["node_type"] != LEAF
        for f, th in zip(t["split_index"][inner], t["threshold"][inner], strict=True):
            if 0 <= int(f) < nf:
                cuts[int(f)].append(float(th))
    setattr(booster, _THRESHOLDS, [np.unique(np.asarray(c, dtype=np.float64)) for c in cuts])
    # copies (np.array), not views: treelite's arrays go with `model`, and `_MAKE` builds
    # evaluators from these after it
    args = [(np.ascontiguousarray(t["node_type"] == LEAF),
             *(np.array(t[k], dtype=d, order="C") for k, d in (
                 ("split_index", np.uint32), ("threshold", np.float64),
                 ("default_left", bool), ("cleft", np.int32), ("cright", np.int32),
                 ("leaf_value", np.float64)))) for t in trees]
    alpha = float(head.get("sigmoid_alpha", 1.0)) if head["postprocessor"] == "sigmoid" else None
    try:
        forest = Forest(args, nf, base_score=base[0], sigmoid_alpha=alpha)
    except ValueError as e:
        return None, str(e)
    setattr(booster, _MAKE, lambda cols: Forest(args, nf, base_score=base[0],
                                                 sigmoid_alpha=alpha, cols=cols))
    return forest, None


def predict(booster: Any, x: np.ndarray, columns: list[int] | None = None) -> np.ndarray:
    """`booster.predict(x)`, the same doubles, faster where the evaluator takes the model.
    `columns`: the model's features are these columns of `x` (`booster.predict(x[:, columns])`
    without that copy: at 10 M rows, 15 of the contract's 18 features are 1.2 GB). `x` may be
    a `flashml.features.matrix.FeatureMatrix`: scored block by block (rows built as read)."""
    if isinstance(x, FeatureMatrix):
        out = np.empty(len(x), dtype=np.float64)
        for lo, block in x.blocks(cols=columns):
            out[lo:lo + len(block)] = predict(booster, block)
        return out
    x = np.ascontiguousarray(x, dtype=np.float64)
    key = None if columns is None else tuple(int(c) for c in columns)
    forest, why = forest_of(booster, key)
    if forest is None or x.ndim != 2 or (
            x.shape[1] != forest.num_features if key is None else
            len(key) != forest.num_features or max(key, default=0) >= x.shape[1]):
        if forest is None:
            log.debug("LightGBM scores this model itself: %s", why)
        return booster.predict(x if key is None else x[:, list(key)])
    return forest.predict(x, threads())


def predict_classes(booster: Any, x: np.ndarray) -> np.ndarray:
    """`predict(booster, x)`, each class of rows the model cannot tell apart scored once: the
    evaluator decides every split `x <= t` on the rank of x among the feature's thresholds
    (`#{t < x}`, |x| <= ZERO_THRESHOLD read as 0.0, NaN apart), so rows of equal ranks get
    the same doubles, and each row takes its class's (its first row's) score. Rows of range
    features at 1 M accesses: 38% of the distinct rows are distinct classes. Without the
    evaluator (LightGBM scores), with few rows, or with more rank combinations than an int64
    holds, every row is scored."""
    forest, _ = forest_of(booster)
    cuts = getattr(booster, _THRESHOLDS, None)
    x = np.ascontiguousarray(x, dtype=np.float64)
    if forest is None or cuts is None or x.ndim != 2 or x.shape[1] != len(cuts) or \
            len(x) < CLASSES_MIN_ROWS:
        return predict(booster, x)
    key = np.zeros(len(x), dtype=np.int64)
    radix = 1
    for j, t in enumerate(cuts):
        if len(t) == 0:
            continue
        if radix * (len(t) + 2) >= 2**62:
            return predict(booster, x)
        col = x[:, j]
        col = np.where(np.abs(col) <= ZERO_THRESHOLD, 0.0, col)
        rank = np.searchsorted(t, col, side="left").astype(np.int64)
        rank[np.isnan(col)] = len(t) + 1  # NaN: a class of its own (its default side)
        key += rank * radix
        radix *= len(t) + 2
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    return predict(booster, x[first])[inverse.reshape(-1)]
