"""A learned policy (Baleen): admission GBM + ML-Range (start, end) + ML-When, trained on
episode labels of the training window, and scored for every access in one pass.

Training rows (baleen-artifact-notes.md "Training facts"):
- admission: every GET in the training window that carries an OPT label (the first K
  accesses of each episode), features = the 18 admission features (or a subset, e.g. the
  CacheLib-ML-like baseline without the size features);
- ML-Range: one row per OPT-admitted episode (its first access), range features, targets the
  episode's OPT-Range start and end (inclusive segment indices);
- ML-When: the same rows, range features plus the predicted range, label = the episode's
  ML-When label (net prefetch benefit > 5 ms).
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import lightgbm as lgb
import numpy as np

from flashml.compiler.bundle import round_range, when_matrix
from flashml.features.contract import Contract, contract
from flashml.features.matrix import FeatureMatrix, Features
from flashml.models.forest import predict, predict_classes
from flashml.models.gbm import fit, side_by_side
from flashml.settings import GbmParams
from flashml.simulation import POLICY_ARRAYS

log = logging.getLogger(__name__)


@dataclass
class TrainingData:
    """Rows for the three models, already selected from the training window."""

    adm_X: np.ndarray
    adm_y: np.ndarray
    adm_keys: np.ndarray
    ep_X: np.ndarray          # range features of each OPT-admitted episode's first access
    ep_start: np.ndarray
    ep_end: np.ndarray
    ep_when: np.ndarray
    ep_keys: np.ndarray


@dataclass
class LearnedPolicy:
    admission: lgb.Booster
    admission_features: list[str]
    range_start: lgb.Booster | None = None
    range_end: lgb.Booster | None = None
    when: lgb.Booster | None = None

    def boosters(self) -> dict[str, lgb.Booster]:
        out = {"admission": self.admission}
        if self.range_start is not None:
            out |= {"range_start": self.range_start, "range_end": self.range_end,
                    "when": self.when}
        return out


def train_policy(data: TrainingData, params: GbmParams, *, features: list[str] | None = None,
                 with_prefetch: bool = True, c: Contract | None = None,
                 admission: lgb.Booster | None = None,
                 zeroed: tuple[str, ...] = (), threads: int | None = None,
                 then: Callable[[lgb.Booster, lgb.Booster, lgb.Booster], None] | None = None
                 ) -> LearnedPolicy:
    """Train the admission model (on `features`, default all 18; `admission`: one already
    trained on these rows with these parameters, kept as it is) and, optionally, ML-Range
    and ML-When. `zeroed`: features held at 0 in the admission model's rows, so it cannot
    split on them yet keeps every input (a model of CacheLib-ML's feature set that the
    compiled ABI, which passes all 18, still takes). `threads`: LightGBM threads to use
    (default `params.num_threads`), shared by the models trained side by side (the
    admission model beside ML-Range's two, then ML-When: `gbm.side_by_side`). `then`: called
    with ML-Range's two models and ML-When's as soon as they are trained, on their thread
    (beside the admission model's training, within that thread's cores)."""
    c = c or contract()
    names = features or c.names
    cols = [c.names.index(n) for n in names]
    X = data.adm_X[:, cols]
    if zeroed:
        X = np.array(X)  # a copy: the rows may be the mapped feature matrix
        X[:, [names.index(n) for n in zeroed]] = 0.0
    threads = threads or params.num_threads

    def train_admission(n: int) -> lgb.Booster:
        return fit(X, data.adm_y, data.adm_keys, "binary", params, names, threads=n)

    if not with_prefetch:
        adm = admission if admission is not None else train_admission(threads)
        return LearnedPolicy(admission=adm, admission_features=names)
    if len(data.ep_start) == 0:
        raise ValueError("no OPT-admitted episodes in the training window: cannot train "
                         "ML-Range (is the target write rate too low?)")
    rnames = c.model_features("range")

    def train_range(which: str) -> Callable[[int], lgb.Booster]:
        y = (data.ep_start if which == "start" else data.ep_end).astype(np.float64)
        return lambda n: fit(data.ep_X, y, data.ep_keys, "regression", params, rnames,
                             threads=n)

    def train_prefetch(n: int) -> tuple[lgb.Booster, lgb.Booster, lgb.Booster]:
        start, end, when = train_prefetch_models(n)
        if then is not None:
            then(start, end, when)
        return start, end, when

    def train_prefetch_models(n: int) -> tuple[lgb.Booster, lgb.Booster, lgb.Booster]:
        # ML-Range's two models side by side, then ML-When on their predictions
        start, end = side_by_side([train_range("start"), train_range("end")], n)
        ps, pe = round_range(predict(start, data.ep_X), predict(end, data.ep_X))
        wX = np.column_stack([data.ep_X, ps, pe]).astype(np.float64)
        p = params
        if len(np.unique(data.ep_when)) < 2:
            log.warning("ML-When labels are all %s; training a constant model",
                        data.ep_when[:1])
            p = p.with_overrides(num_boost_round=1)
            return start, end, fit(wX, data.ep_when.astype(np.float64), data.ep_keys,
                                   "regression", p, c.model_features("when"), threads=n)
        return start, end, fit(wX, data.ep_when.astype(np.float64), data.ep_keys, "binary",
                               p, c.model_features("when"), threads=n)

    # the admission model and the prefetch models (independent) side by side
    if admission is not None:
        adm, (start, end, when) = admission, train_prefetch(threads)
    else:
        adm, pre = side_by_side([train_admission, train_prefetch], threads)
        start, end, when = pre  # type: ignore[misc]
    return LearnedPolicy(admission=adm, admission_features=names, range_start=start,
                         range_end=end, when=when)


def score_all(policy: LearnedPolicy, feats: Features, c: Contract | None = None
              ) -> dict[str, np.ndarray]:
    """Per-access arrays for the simulator: `score`, and with prefetch models
    `prefetch_start`, `prefetch_end` and `when_score`."""
    c = c or contract()
    cols = [c.names.index(n) for n in policy.admission_features]
    # the matrix itself, not a copy of the model's columns (CacheLib-ML's 15 of 18 at 10 M
    # rows: 1.2 GB): every feature in contract order (Baleen's model), else those columns
    # read in place
    out = {"score": predict(policy.admission, feats,
                            None if cols == list(range(feats.shape[1])) else cols)}
    if policy.range_start is not None:
        assert policy.range_end is not None and policy.when is not None
        out |= score_prefetch(policy.range_start, policy.range_end, policy.when, feats, c)
    return out


def score_prefetch(range_start: lgb.Booster, range_end: lgb.Booster, when_model: lgb.Booster,
                   feats: Features, c: Contract | None = None) -> dict[str, np.ndarray]:
    """`score_all`'s prefetch arrays: `prefetch_start`, `prefetch_end` and `when_score`."""
    c = c or contract()
    # ML-Range and ML-When read only the range features, and far fewer accesses differ
    # in them than there are accesses (35% at 1 M region1-like accesses): each distinct
    # row is scored once and its scores copied to its accesses (the same doubles: a
    # row's score depends on that row alone), 2-3x less work for 85% of the trees
    # (and of those, each class of rows a model's splits cannot tell apart is scored
    # once: `predict_classes`, 38% of the distinct rows for ML-Range at 1 M)
    rX, inverse = range_rows(feats, c)
    ps, pe = round_range(predict_classes(range_start, rX), predict_classes(range_end, rX))
    when = predict_classes(when_model, when_matrix(None, ps, pe, range_x=rX))
    # segment indices as the simulator reads them (2 bytes an access: 1.2 GB less per
    # scored policy at 100 M accesses than int64)
    ps, pe = ps.astype(POLICY_ARRAYS["prefetch_start"]), pe.astype(POLICY_ARRAYS["prefetch_end"])
    if inverse is not None:
        ps, pe, when = ps[inverse], pe[inverse], when[inverse]
    return {"prefetch_start": ps, "prefetch_end": pe, "when_score": when}


def train_and_score(data: TrainingData, params: GbmParams, feats: Features, *,
                    features: list[str] | None = None, c: Contract | None = None,
                    admission: lgb.Booster | None = None, zeroed: tuple[str, ...] = ()
                    ) -> tuple[LearnedPolicy, dict[str, np.ndarray]]:
    """`train_policy(data, params, with_prefetch=True, ...)` and `score_all` of its policy on
    `feats`: the same models and the same doubles, but ML-Range's and ML-When's scores are
    computed on the prefetch models' thread as soon as they are trained, beside the
    admission model's training (one LightGBM thread below `gbm.ONE_THREAD_ROWS` rows: the
    prefetch models, a quarter of its time, left the other core idle for the rest)."""
    c = c or contract()
    pre: dict[str, np.ndarray] = {}

    def then(start: lgb.Booster, end: lgb.Booster, when: lgb.Booster) -> None:
        pre.update(score_prefetch(start, end, when, feats, c))

    policy = train_policy(data, params, features=features, with_prefetch=True, c=c,
                          admission=admission, zeroed=zeroed, then=then)
    out = score_all(LearnedPolicy(policy.admission, policy.admission_features), feats, c)
    return policy, out | pre


#: `range_rows` of the feature matrices scored lately: (weak reference to the matrix, its
#: shape, the distinct rows, the inverse), newest last.
_RANGE_ROWS: list[tuple[weakref.ref[np.ndarray], tuple[int, ...], np.ndarray,
                        np.ndarray | None]] = []
_RANGE_ROWS_LOCK = threading.Lock()
#: Below this many rows the distinct rows are not looked for (no time to save).
DISTINCT_MIN_ROWS = 50_000
#: With more distinct rows than this share of the rows, every row is scored.
DISTINCT_MAX_SHARE = 0.8


def range_rows(feats: Features, c: Contract | None = None
               ) -> tuple[np.ndarray, np.ndarray | None]:
    """The distinct rows of `feats`'s range features (float64, C order) and, for each row of
    `feats`, the index of its distinct row (None when every row is kept: a small matrix, or
    one whose rows mostly differ). Rows are distinct by their bytes, so equal rows are equal
    inputs. Computed once per matrix (the job's feature matrix is scored by every iteration
    and every sweep trial) and kept while the matrix lives."""
    c = c or contract()
    with _RANGE_ROWS_LOCK:
        _RANGE_ROWS[:] = [e for e in _RANGE_ROWS if e[0]() is not None]
        for ref, shape, rows, inverse in _RANGE_ROWS:
            if ref() is feats and shape == feats.shape:
                return rows, inverse
    cols = c.indices("range")
    rows, inverse = None, None
    if len(feats) >= DISTINCT_MIN_ROWS:
        first, inv = _distinct(feats, cols)
        if len(first) <= DISTINCT_MAX_SHARE * len(feats):
            # (kept while the matrix lives: 4 bytes an access where they fit, not 8)
            if len(first) < 2**31:
                inv = inv.astype(np.int32)
            rows, inverse = np.ascontiguousarray(feats[first][:, cols], dtype=np.float64), inv
    if rows is None:
        rows = np.ascontiguousarray(feats[:, cols], dtype=np.float64)
    try:
        ref = weakref.ref(feats)
    except TypeError:
        return rows, inverse
    with _RANGE_ROWS_LOCK:
        _RANGE_ROWS.append((ref, feats.shape, rows, inverse))
        del _RANGE_ROWS[:-2]
    return rows, inverse


def _distinct(feats: Features, cols: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """The first row of each distinct row of `feats` in `cols` (by their bytes) and each row's
    index into those: the simulator crate's one hashing pass (flashml_sim.distinct_rows) on a
    C-contiguous float64 matrix (NumPy's `unique` over the rows as bytes sorts them: 9.4 s
    at 10 M rows of 6 columns), else NumPy's (its distinct rows sorted; the same classes)."""
    if isinstance(feats, FeatureMatrix):
        return feats.distinct(list(cols))
    if feats.dtype == np.float64 and feats.ndim == 2 and feats.flags.c_contiguous:
        from flashml_sim import distinct_rows

        return distinct_rows(feats, list(cols))
    x = np.ascontiguousarray(feats[:, cols], dtype=np.float64)
    keys = x.view(np.dtype((np.void, x.dtype.itemsize * x.shape[1]))).ravel()
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    return first, inverse.reshape(-1)
