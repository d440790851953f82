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
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

#: The attribute a booster keeps its evaluator in (or the reason it has none).
_ATTR = "_flashml_forest"


def threads() -> int:
    """Scoring threads: the cores this work may use (flashml/cores.py)."""
    from flashml.cores import available

    return available()


def forest_of(booster: Any) -> tuple[Any, str | None]:
    """The evaluator of `booster` (built once, kept on it), or (None, why not)."""
    got = getattr(booster, _ATTR, None)
    if got is None:
        got = _build(booster)
        setattr(booster, _ATTR, got)
    return got


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
    args = [(np.ascontiguousarray(t["node_type"] == LEAF),
             *(np.ascontiguousarray(t[k], dtype=d) for k, d in (
                 ("split_index", np.uint32), ("threshold", np.float64),
                 ("default_left", bool), ("cleft", np.int32), ("cright", np.int32),
                 ("leaf_value", np.float64)))) for t in trees]
    alpha = float(head.get("sigmoid_alpha", 1.0)) if head["postprocessor"] == "sigmoid" else None
    try:
        return Forest(args, int(head["num_feature"]), base_score=base[0],
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
