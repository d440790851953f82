"""LightGBM models of a learned policy: admission classifier, ML-Range regressors (start,
end) and the ML-When classifier, with the artifact's hyperparameters (overridable).

Rows are split 70/30 by block (cache key) for early stopping, as in the artifact, so that no
block's accesses are on both sides.
"""

from __future__ import annotations

import logging

import lightgbm as lgb
import numpy as np

from flashml.settings import GbmParams
from flashml.trace.keys import splitmix64

log = logging.getLogger(__name__)


def split_by_key(keys: np.ndarray, train_share: float = 0.7, seed: int = 0) -> np.ndarray:
    """Boolean mask of rows whose key falls in the training share (stable hash of the key)."""
    h = splitmix64(keys.astype(np.uint64) ^ np.uint64(seed))
    return (h % np.uint64(10_000)).astype(np.float64) < train_share * 10_000


def fit(X: np.ndarray, y: np.ndarray, keys: np.ndarray, objective: str, params: GbmParams,
        feature_names: list[str]) -> lgb.Booster:
    """Train with early stopping on a 30% split of the keys (all rows if it would be empty)."""
    if len(y) == 0:
        raise ValueError("no training rows")
    mask = split_by_key(keys, seed=params.seed)
    if mask.all() or not mask.any():
        mask = np.ones(len(y), dtype=bool)
    train = lgb.Dataset(X[mask], label=y[mask], feature_name=feature_names,
                        free_raw_data=False)
    curve: dict[str, dict[str, list[float]]] = {}
    callbacks = [lgb.log_evaluation(period=0), lgb.record_evaluation(curve)]
    valid_sets = []
    if (~mask).any():
        valid = lgb.Dataset(X[~mask], label=y[~mask], reference=train)
        valid_sets = [valid]
        callbacks.append(lgb.early_stopping(params.early_stopping_rounds, verbose=False))
    if objective == "binary" and len(np.unique(y[mask])) < 2:
        raise ValueError("training labels are all one class; cannot train a classifier")
    booster = lgb.train(params.lgb_params(objective), train,
                        num_boost_round=params.num_boost_round, valid_sets=valid_sets,
                        valid_names=["valid"] * len(valid_sets), callbacks=callbacks)
    # the held-out loss per boosting round (the job logs it to MLflow as a stepped metric)
    booster.flashml_curve = {f"{ds}_{metric}": [float(v) for v in vals]
                             for ds, by_metric in curve.items()
                             for metric, vals in by_metric.items()}
    log.info("trained %s model: %d rows, %d trees", objective, int(mask.sum()),
             booster.num_trees())
    return booster
