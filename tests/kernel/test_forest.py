"""models/forest.py (sim/src/core/forest.rs): the simulator crate's tree evaluator gives exactly
LightGBM's `Booster.predict` doubles, on the training rows, on rows sitting on, just below and
just above every split threshold, on missing values, after early stopping (the best
iteration), on any number of threads, by both evaluators (the byte-vector one runs where
the CPU has AVX-512 VBMI: `vectorised` says which); a model it does not take is scored by
LightGBM itself."""

from __future__ import annotations

import lightgbm as lgb
import numpy as np
import pytest

from flashml.models import forest


def _rows(n: int, seed: int, nan: float = 0.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = np.column_stack([rng.normal(0, 1, n), rng.integers(0, 20, n).astype(float),
                         rng.exponential(3.0, n), rng.uniform(-1, 1, n)])
    if nan:
        x[rng.random(x.shape) < nan] = np.nan
    return x


def _train(objective: str, x: np.ndarray, seed: int = 0, rounds: int = 60,
           early: bool = False, **params) -> lgb.Booster:
    rng = np.random.default_rng(seed)
    z = np.nan_to_num(x[:, 0]) + 0.3 * np.nan_to_num(x[:, 1]) * np.nan_to_num(x[:, 3])
    y = (z + rng.normal(0, 0.5, len(z)) > 1).astype(float) if objective == "binary" else z
    p = {"objective": objective, "verbosity": -1, "num_leaves": 31, "learning_rate": 0.1,
         "min_data_in_leaf": 5, "deterministic": True, "num_threads": 1, **params}
    if not early:
        return lgb.train(p, lgb.Dataset(x, label=y), num_boost_round=rounds)
    k = len(y) * 7 // 10
    train = lgb.Dataset(x[:k], label=y[:k])
    return lgb.train(p, train, num_boost_round=400,
                     valid_sets=[lgb.Dataset(x[k:], label=y[k:], reference=train)],
                     callbacks=[lgb.early_stopping(5, verbose=False)])


def _edges(booster: lgb.Booster, like: np.ndarray) -> np.ndarray:
    """Rows whose every feature sits on, just below or just above a split threshold, or is
    missing."""
    model = booster.dump_model()
    thr: list[set[float]] = [set() for _ in range(like.shape[1])]

    def visit(node: dict) -> None:
        if "split_index" in node:
            thr[node["split_feature"]].add(float(node["threshold"]))
            visit(node["left_child"])
            visit(node["right_child"])

    for t in model["tree_info"]:
        visit(t["tree_structure"])
    rng = np.random.default_rng(7)
    out = like[rng.integers(0, len(like), 3000)].copy()
    for f, ts in enumerate(thr):
        vals = np.array(sorted(ts) or [0.0])
        cand = np.concatenate([vals, np.nextafter(vals, -np.inf), np.nextafter(vals, np.inf),
                               [np.nan, 0.0, -0.0, np.inf, -np.inf, 1e-36, -1e-40,
                               np.float32(1e-35), -np.float64(np.float32(1e-35))]])
        out[:, f] = cand[rng.integers(0, len(cand), len(out))]
    return out


@pytest.mark.parametrize("objective,nan,early", [("binary", 0.0, False),
                                                 ("binary", 0.05, True),
                                                 ("regression", 0.05, False),
                                                 ("regression", 0.0, True)])
def test_scores_equal_lightgbm_bit_for_bit(objective: str, nan: float, early: bool) -> None:
    x = _rows(4000, seed=1, nan=nan)
    b = _train(objective, x, early=early)
    if early:
        assert 0 < b.best_iteration < 400
    f, why = forest.forest_of(b)
    assert why is None and f.num_trees == b.num_trees()
    for rows in (x, _rows(3000, seed=2, nan=0.1), _edges(b, x)):
        want = b.predict(rows)
        for threads, vector in ((1, True), (3, True), (2, False)):
            got = f.predict(np.ascontiguousarray(rows), threads, vector)
            assert np.array_equal(got, want), (vector, np.abs(got - want).max())
    assert np.array_equal(forest.predict(b, x[:, :][::2]), b.predict(x[::2]))  # strided input


def test_models_it_does_not_take_are_scored_by_lightgbm() -> None:
    x = _rows(2000, seed=3)
    x[:, 1] = np.floor(x[:, 1])
    p = {"objective": "regression", "verbosity": -1, "min_data_in_leaf": 5, "num_threads": 1}
    b = lgb.train(p, lgb.Dataset(x, label=x[:, 0] * (x[:, 1] % 3), categorical_feature=[1]),
                  num_boost_round=20)
    f, why = forest.forest_of(b)
    assert f is None and "categorical" in why
    assert np.array_equal(forest.predict(b, x), b.predict(x))


def test_bad_rows() -> None:
    b = _train("regression", _rows(500, seed=4), rounds=5)
    f, _ = forest.forest_of(b)
    with pytest.raises(ValueError, match="C-contiguous"):
        f.predict(np.asfortranarray(_rows(10, seed=5)), 1)
    with pytest.raises(ValueError, match="column"):
        f.predict(np.zeros((3, 2)), 1)
