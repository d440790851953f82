"""LightGBM's scores, exactly, in a fraction of `Booster.predict`'s time (sim/src/forest.rs).

The training loop scores every access of the trace with each model it trains (admission,
ML-Range's two, ML-When): at 1 M accesses LightGBM's own predict took 65% of the main job.
`predict(booster, x)` reads the booster's trees once through Treelite (the compiler's
frontend: the same trees, up to the best iteration, that `Booster.predict` uses) into the
simulator crate's evaluator, which returns the same doubles (tests/test_forest.py checks
them bit for bit, on threshold edges and NaN too). A model the evaluator does not take
(categorical splits, several outputs, another postprocessor) is scored by LightGBM itself.
"""

from __future__ import annotations

import logging
import math
import os
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

#: Treelite's node types and its `<=` operator (the tree accessor's node_type and cmp).
_LEAF, _NUMERICAL, _LE = 0, 1, 3
#: The attribute a booster keeps its evaluator in (or the reason it has none).
_ATTR = "_flashml_forest"


def threads() -> int:
    """Scoring threads: the cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def forest_of(booster: Any) -> tuple[Any, str | None]:
    """The evaluator of `booster` (built once, kept on it), or (None, why not)."""
    got = getattr(booster, _ATTR, None)
    if got is None:
        got = _build(booster)
        setattr(booster, _ATTR, got)
    return got


def _build(booster: Any) -> tuple[Any, str | None]:
    import treelite

    from flashml.compiler.fast_trees import model_header
    from flashml_sim import Forest

    model = treelite.frontend.from_lightgbm(booster)
    head = model_header(model)
    if head.get("num_target", 1) != 1 or head.get("num_class", [1]) != [1]:
        return None, "more than one output"
    if head.get("average_tree_output"):
        return None, "averaged tree outputs"
    post = head.get("postprocessor")
    if post not in ("identity", "sigmoid"):
        return None, f"postprocessor {post}"
    base = [float(b) for b in np.ravel(head.get("base_scores", [0.0]))]
    if len(base) != 1 or not math.isfinite(base[0]):
        return None, f"base scores {base}"
    trees = []
    for ti in range(int(model.num_tree)):
        acc = model.get_tree_accessor(ti)
        kind = np.asarray(acc.get_field("node_type"))
        inner = kind != _LEAF
        if (kind[inner] != _NUMERICAL).any():
            return None, "categorical splits"
        if (np.asarray(acc.get_field("cmp"))[inner] != _LE).any():
            return None, "a split other than <="
        trees.append((
            np.ascontiguousarray(~inner),
            np.ascontiguousarray(acc.get_field("split_index"), dtype=np.uint32),
            np.ascontiguousarray(acc.get_field("threshold"), dtype=np.float64),
            np.ascontiguousarray(acc.get_field("default_left"), dtype=bool),
            np.ascontiguousarray(acc.get_field("cleft"), dtype=np.int32),
            np.ascontiguousarray(acc.get_field("cright"), dtype=np.int32),
            np.ascontiguousarray(acc.get_field("leaf_value"), dtype=np.float64)))
    alpha = float(head.get("sigmoid_alpha", 1.0)) if post == "sigmoid" else None
    try:
        return Forest(trees, int(head["num_feature"]), base_score=base[0],
                      sigmoid_alpha=alpha), None
    except ValueError as e:
        return None, str(e)


def predict(booster: Any, x: np.ndarray) -> np.ndarray:
    """`booster.predict(x)`, the same doubles, faster where the evaluator takes the model."""
    forest, why = forest_of(booster)
    x = np.ascontiguousarray(x, dtype=np.float64)
    if forest is None or x.ndim != 2 or x.shape[1] != forest.num_features:
        if forest is None:
            log.debug("LightGBM scores this model itself: %s", why)
        return booster.predict(x)
    return forest.predict(x, threads())
