"""MAT's model (../shared/seeds/mat-ml-at-the-tail.txt): a LightGBM regressor of
an eviction candidate's log1p(logical distance from its last access to its next access), on
LRB's 44 features (flashml/features/eviction.toml), with LRB's and MAT's training settings
(32 trees of at most 32 leaves, learning rate 0.1, bagging 0.8 every 5 iterations).

Training rows come only from tail candidates (the simulator tags each one as it leaves the
LRU tail and labels it at its next request:
`flashml.systems.mat.simulation.simulate_objects_mat(..., collect_samples=True)`). The paper
retrains online whenever a batch of samples fills; here training is offline, and periodic retraining
is emulated window by window (flashml/systems/mat/job.py: the model that judges window i+1 is
trained on the tail candidates of window i).

Labels (`label_samples`). A replay that stops at request `end` cannot see the next access of a
candidate tagged near its end: the simulator labels such a candidate "not back within the
window" (and flags it `censored`). Trained on as they come, those rows teach the model that
recent candidates never return (on cdn-like at 5%, 62% of an LRU replay's rows; the learned
MAT's miss ratio 0.486 instead of 0.439 without them). So a row is kept only if its whole
label horizon H (logical requests after its last access) lies inside the replay, whether or
not it came back, and labelled log1p(distance) if back within H, else log1p(2 H) (LRB's
convention with the horizon as the window): no survivor bias either way.

Size-awareness (`size_exponent` a > 0): MAT's TTA = |d - age| ignores object size, while the
object miss ratio of a byte-sized cache rewards keeping small objects. The label becomes
log1p(age + (d - age) * (size / size_ref)^a): the model then predicts a distance whose TTA is
the remaining time to the next access scaled by the object's relative size, and Algorithm 1
(unchanged) evicts large objects sooner at equal remaining time. a = 0 is the paper's label.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

import lightgbm as lgb
import numpy as np

from flashml.features.eviction import contract as evict_contract
from flashml.settings import GbmParams

log = logging.getLogger(__name__)

#: LRB's training parameters, which MAT reuses (the paper's "Model"): 32 trees, <= 32 leaves,
#: learning rate 0.1, bagging 0.8 every 5 iterations; no early stopping (fixed size).
MAT_GBM = GbmParams(num_leaves=32, learning_rate=0.1, bagging_fraction=0.8, bagging_freq=5,
                    feature_fraction=1.0, min_data_in_leaf=20, min_sum_hessian_in_leaf=1e-3,
                    num_boost_round=32, early_stopping_rounds=0)

#: Columns of LRB's feature layout (flashml/features/eviction.toml) the labels use.
AGE, SIZE = (list(evict_contract().names).index(n) for n in ("age", "size"))


def mat_gbm(trees: int = MAT_GBM.num_boost_round, leaves: int = MAT_GBM.num_leaves) -> GbmParams:
    """MAT's LightGBM settings with another model size (trees x leaves)."""
    if trees < 1 or leaves < 2:
        raise ValueError(f"a MAT model needs >= 1 tree of >= 2 leaves, got {trees} x {leaves}")
    return replace(MAT_GBM, num_boost_round=int(trees), num_leaves=int(leaves))


@dataclass
class Labelled:
    """Training rows from tail-candidate samples (`label_samples`)."""

    features: np.ndarray
    label: np.ndarray
    #: Per row: the object came back within the horizon.
    returned: np.ndarray
    #: Samples dropped because their horizon reached past the replay's end.
    dropped: int
    horizon: int
    size_exponent: float
    size_ref: float

    def info(self) -> dict[str, float]:
        return {"rows": float(len(self.label)), "dropped_unobserved": float(self.dropped),
                "returned_fraction": float(self.returned.mean()) if len(self.returned)
                else float("nan"), "label_horizon": float(self.horizon),
                "size_exponent": self.size_exponent, "size_ref": self.size_ref}


def label_samples(samples: dict[str, np.ndarray], end: int, horizon: int, *,
                  start: int = 0, size_exponent: float = 0.0,
                  size_ref: float | None = None) -> Labelled:
    """Training rows from the simulator's samples of a replay of requests [0, end)
    (`simulate_objects_mat(..., collect_samples=True)` with a memory window >= `horizon`):
    the rows tagged at or after `start` whose horizon [last access, last access + horizon] ends
    within the replay; label log1p(d) if the object came back within the horizon (d: its
    distance from the last access to the next), else log1p(2 * horizon); with size_exponent
    a > 0 the size-aware label log1p(age + (d - age) * (size / size_ref)^a) (size_ref: the
    rows' mean size unless given). The module docstring says why."""
    if horizon < 1:
        raise ValueError(f"the label horizon must be >= 1 request, got {horizon}")
    if size_exponent < 0:
        raise ValueError(f"size_exponent must be >= 0, got {size_exponent}")
    x = np.asarray(samples["features"], dtype=np.float64)
    lab = np.asarray(samples["label"], dtype=np.float64)
    last = np.asarray(samples["last"], dtype=np.int64)
    tag = np.asarray(samples["time"], dtype=np.int64)
    censored = np.asarray(samples["censored"], dtype=bool)
    keep = (last + horizon <= end) & (tag >= start)
    d = np.expm1(lab)
    back = ~censored & (d < horizon - 0.5)
    x, d, back = x[keep], d[keep], back[keep]
    dist = np.where(back, d, 2.0 * horizon)
    ref = float(size_ref) if size_ref else (float(x[:, SIZE].mean()) if len(x) else 1.0)
    if size_exponent > 0 and len(x):
        age = x[:, AGE]
        rem = np.maximum(dist - age, 0.0)
        dist = age + rem * (np.maximum(x[:, SIZE], 1.0) / ref) ** size_exponent
    return Labelled(np.ascontiguousarray(x), np.log1p(dist), back, int((~keep).sum()),
                    int(horizon), float(size_exponent), ref)


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
