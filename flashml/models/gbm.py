"""LightGBM models of a learned policy: admission classifier, ML-Range regressors (start,
end) and the ML-When classifier, with the artifact's hyperparameters (overridable).

Rows are split 70/30 by block (cache key) for early stopping, as in the artifact, so that no
block's accesses are on both sides.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import lightgbm as lgb
import numpy as np

from flashml.settings import GbmParams
from flashml.trace.keys import splitmix64

log = logging.getLogger(__name__)

R = TypeVar("R")

#: Below this many rows a model trains on one LightGBM thread whatever it is given: each
#: boosting round of so few rows is too short for a second thread to gain anything, and
#: OpenMP's threads waiting for each other at every round's barriers cost far more (on a
#: loaded machine a 7.5 k-row ML-When model took 46 s on two threads, 2 s of CPU on one).
#: The trees are the same (`side_by_side`); the model text records the nominal count.
ONE_THREAD_ROWS = 150_000


def _as_trained_with(booster: lgb.Booster, used: int, nominal: int) -> lgb.Booster:
    """The booster whose model text records `nominal` threads instead of the `used` it
    trained with (the only difference the thread count makes to it): the same trees and
    text as a training on `nominal` threads (reloaded from that text)."""
    text = booster.model_to_string()
    line = f"[num_threads: {used}]"
    if text.count(line) != 1:
        return booster
    return lgb.Booster(model_str=text.replace(line, f"[num_threads: {nominal}]"))


def side_by_side(jobs: Sequence[Callable[[int], R]], threads: int) -> list[R]:
    """`[job(threads) for job in jobs]`, run side by side: min(len(jobs), threads, the
    available cores) at a time, each job told how many LightGBM threads it may use (the
    `threads` shared among them) and limited to as many cores (flashml/cores.py) for its
    scoring. LightGBM's trees do not depend on its thread count (deterministic, row-wise
    histograms: bit for bit, tests/kernel/test_gbm_threads.py; `fit(threads=...)` records the
    nominal count in the model's text, and only the held-out loss curve, summed in
    parallel, can differ in its last bits), so this changes only when they are done:
    independent trainings of 7-100 k rows each on one core instead of one after the other
    on two, where LightGBM's second thread gains little (and, on a busy machine, its
    threads wait for each other). Results keep the jobs' order; exceptions propagate."""
    from flashml.cores import available, limited

    workers = min(len(jobs), max(1, threads), available())
    if workers <= 1:
        return [job(threads) for job in jobs]
    each = max(1, threads // workers)

    def call(job: Callable[[int], R]) -> R:
        with limited(each):
            return job(each)

    with ThreadPoolExecutor(max_workers=workers) as ex:
        return list(ex.map(call, jobs))


def split_by_key(keys: np.ndarray, train_share: float = 0.7, seed: int = 0) -> np.ndarray:
    """Boolean mask of rows whose key falls in the training share (stable hash of the key)."""
    h = splitmix64(keys.astype(np.uint64) ^ np.uint64(seed))
    return (h % np.uint64(10_000)).astype(np.float64) < train_share * 10_000


def fit(X: np.ndarray, y: np.ndarray, keys: np.ndarray, objective: str, params: GbmParams,
        feature_names: list[str], threads: int | None = None) -> lgb.Booster:
    """Train with early stopping on a 30% split of the keys (all rows if it would be empty).
    `threads`: LightGBM threads to train with instead of `params.num_threads` (side_by_side);
    one below `ONE_THREAD_ROWS` rows. The trees are the same, and the model records
    `params.num_threads` as it would have."""
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
    lgb_params = params.lgb_params(objective)
    nominal = int(lgb_params["num_threads"])
    if threads is not None:
        lgb_params["num_threads"] = threads
    if int(lgb_params["num_threads"]) > 1 and len(y) < ONE_THREAD_ROWS:
        # the same trees on one thread (row-wise, deterministic), recorded as `nominal`
        lgb_params["num_threads"] = 1
    booster = lgb.train(lgb_params, train,
                        num_boost_round=params.num_boost_round, valid_sets=valid_sets,
                        valid_names=["valid"] * len(valid_sets), callbacks=callbacks)
    if int(lgb_params["num_threads"]) != nominal:
        booster = _as_trained_with(booster, int(lgb_params["num_threads"]), nominal)
    # the held-out loss per boosting round (the job logs it to MLflow as a stepped metric)
    booster.flashml_curve = {f"{ds}_{metric}": [float(v) for v in vals]
                             for ds, by_metric in curve.items()
                             for metric, vals in by_metric.items()}
    log.info("trained %s model: %d rows, %d trees", objective, int(mask.sum()),
             booster.num_trees())
    return booster
