"""LightGBM models of a learned policy: admission classifier, ML-Range regressors (start,
end) and the ML-When classifier, with the artifact's hyperparameters (overridable).

Rows are split 70/30 by block (cache key) for early stopping, as in the artifact, so that no
block's accesses are on both sides.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import lightgbm as lgb
import numpy as np

from flashml.trace.keys import splitmix64

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GbmParams:
    """Baleen artifact's LightGBM settings (baleen-artifact-notes.md, "Training facts")."""

    num_leaves: int = 63
    learning_rate: float = 0.005
    max_bin: int = 255
    feature_fraction: float = 0.9
    bagging_fraction: float = 0.9
    bagging_freq: int = 5
    min_data_in_leaf: int = 50
    min_sum_hessian_in_leaf: float = 5.0
    num_boost_round: int = 2000
    early_stopping_rounds: int = 25
    num_threads: int = 2
    seed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def lgb_params(self, objective: str) -> dict[str, Any]:
        d = asdict(self)
        for k in ("num_boost_round", "early_stopping_rounds", "extra"):
            d.pop(k)
        return {"objective": objective, "verbosity": -1, "deterministic": True,
                "force_row_wise": True, **d, **self.extra}

    def with_overrides(self, **kw: Any) -> GbmParams:
        known = {k: v for k, v in kw.items() if k in self.__dataclass_fields__}
        extra = {k: v for k, v in kw.items() if k not in self.__dataclass_fields__}
        return replace(self, **known, extra={**self.extra, **extra})


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
    callbacks = [lgb.log_evaluation(period=0)]
    valid_sets = []
    if (~mask).any():
        valid = lgb.Dataset(X[~mask], label=y[~mask], reference=train)
        valid_sets = [valid]
        callbacks.append(lgb.early_stopping(params.early_stopping_rounds, verbose=False))
    if objective == "binary" and len(np.unique(y[mask])) < 2:
        raise ValueError("training labels are all one class; cannot train a classifier")
    booster = lgb.train(params.lgb_params(objective), train,
                        num_boost_round=params.num_boost_round, valid_sets=valid_sets,
                        callbacks=callbacks)
    log.info("trained %s model: %d rows, %d trees", objective, int(mask.sum()),
             booster.num_trees())
    return booster
