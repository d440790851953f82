"""MAT's model (issue 16; ../shared/seeds/mat-ml-at-the-tail.txt): a LightGBM regressor of
an eviction candidate's log1p(logical distance from its last access to its next access), on
LRB's 44 features (flashml/features/eviction.toml), with LRB's and MAT's training settings
(32 trees of at most 32 leaves, learning rate 0.1, bagging 0.8 every 5 iterations).

Training rows come only from tail candidates (the simulator tags each one as it leaves the
LRU tail and labels it at its next request: `flashml.simulation.simulate_objects_mat(...,
collect_samples=True)`). The paper retrains online whenever a batch of samples fills; here
training is offline and periodic retraining is emulated window by window: the model that
judges window i+1 is trained on the samples of windows <= i (`train_windows`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import lightgbm as lgb
import numpy as np

from flashml.settings import GbmParams

log = logging.getLogger(__name__)

#: LRB's training parameters, which MAT reuses (brief §1.1 "Model"): 32 trees, <= 32 leaves,
#: learning rate 0.1, bagging 0.8 every 5 iterations; no early stopping (fixed size).
MAT_GBM = GbmParams(num_leaves=32, learning_rate=0.1, bagging_fraction=0.8, bagging_freq=5,
                    feature_fraction=1.0, min_data_in_leaf=20, min_sum_hessian_in_leaf=1e-3,
                    num_boost_round=32, early_stopping_rounds=0)


@dataclass
class TrainedModel:
    booster: lgb.Booster
    rows: int
    metrics: dict[str, float] = field(default_factory=dict)


def train_tta(features: np.ndarray, labels: np.ndarray, names: list[str],
              params: GbmParams = MAT_GBM) -> TrainedModel:
    """Fit the TTA regressor on tail-candidate samples (label: log1p distance). Its own
    metrics: RMSE of the label on the training rows and the rank correlation of prediction
    and label (how well it orders candidates, which is what eviction uses)."""
    x = np.ascontiguousarray(features, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    if x.ndim != 2 or len(x) != len(y):
        raise ValueError(f"features {x.shape} and labels {y.shape} do not match")
    if len(y) < 2:
        raise ValueError(f"only {len(y)} training samples: the cache never evicted a "
                         "returning object; use a smaller capacity or a longer trace")
    p = params.lgb_params("regression")
    p["min_data_in_leaf"] = min(p["min_data_in_leaf"], max(1, len(y) // 4))
    ds = lgb.Dataset(x, label=y, feature_name=names, free_raw_data=True)
    booster = lgb.train(p, ds, num_boost_round=params.num_boost_round)
    pred = booster.predict(x)
    metrics = {"train_rmse": float(np.sqrt(np.mean((pred - y) ** 2))),
               "train_spearman": _spearman(pred, y), "samples": float(len(y))}
    log.info("MAT model: %d samples, %d trees, RMSE %.3f, rank correlation %.3f", len(y),
             booster.num_trees(), metrics["train_rmse"], metrics["train_spearman"])
    return TrainedModel(booster, len(y), metrics)


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    if len(a) < 2:
        return float("nan")
    ra = np.argsort(np.argsort(a, kind="stable"), kind="stable").astype(np.float64)
    rb = np.argsort(np.argsort(b, kind="stable"), kind="stable").astype(np.float64)
    c = np.corrcoef(ra, rb)[0, 1]
    return float(c) if np.isfinite(c) else float("nan")


def window_bounds(n: int, windows: int) -> list[tuple[int, int]]:
    """`windows` equal request-count windows of a trace of `n` requests: [(start, end))."""
    if windows < 2:
        raise ValueError(f"periodic retraining needs at least 2 windows, got {windows}")
    edges = np.linspace(0, n, windows + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:], strict=True)]
