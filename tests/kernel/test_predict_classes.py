"""`models.forest.predict_classes` scores each class of rows a model's splits cannot tell apart
(equal ranks among every feature's thresholds) once: the same doubles, bit for bit, as
scoring every row (the tree evaluator and LightGBM's own predict), on threshold edges, NaN,
values LightGBM reads as zero and infinities too; `score_all` uses it for ML-Range and
ML-When."""

from __future__ import annotations

import lightgbm as lgb
import numpy as np
import pytest

from flashml.features.contract import contract
from flashml.features.online import feature_matrix
from flashml.models import forest
from flashml.models.forest import predict, predict_classes
from flashml.systems.baleen import model as baleen
from flashml.systems.baleen.model import LearnedPolicy, score_all

from demo_policy import demo_trace, train_demo_models


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float64).view(np.uint64)


@pytest.fixture(scope="module")
def model() -> tuple[lgb.Booster, np.ndarray]:
    rng = np.random.default_rng(5)
    n = 4000
    # column 4 in {-1, 0, 1}: LightGBM splits around zero at +-kZeroThreshold
    X = np.column_stack([rng.integers(0, 40, n), np.round(rng.normal(size=n), 1),
                         rng.integers(0, 3, n),
                         np.round(rng.exponential(size=n), 1),
                         rng.integers(-1, 2, n)]).astype(np.float64)
    X[rng.random(n) < 0.05, 1] = np.nan
    y = (X[:, 0] > 20) ^ (np.nan_to_num(X[:, 1]) > 0.3) ^ (X[:, 3] > 1.0) ^ (X[:, 4] == 0)
    b = lgb.train({"objective": "binary", "num_leaves": 15, "verbose": -1, "seed": 1,
                   "deterministic": True, "num_threads": 1},
                  lgb.Dataset(X, y.astype(np.float64)), num_boost_round=40)
    return b, X


def rows_for(b: lgb.Booster, X: np.ndarray, n: int) -> np.ndarray:
    """`n` rows drawn from X's values, with every split threshold, its neighbours, NaN,
    +-0.0, values LightGBM reads as zero and infinities mixed in."""
    rng = np.random.default_rng(9)
    forest.forest_of(b)
    cuts = getattr(b, forest._THRESHOLDS)
    out = X[rng.integers(0, len(X), n)].copy()
    for j, t in enumerate(cuts):
        edge = np.concatenate([t, np.nextafter(t, np.inf), np.nextafter(t, -np.inf),
                               [np.nan, 0.0, -0.0, 1e-36, -1e-36, 1e-35, 2e-35, np.inf,
                                -np.inf, forest.ZERO_THRESHOLD, -forest.ZERO_THRESHOLD]])
        pick = rng.random(n) < 0.3
        out[pick, j] = rng.choice(edge, int(pick.sum()))
    return out


def test_classes_give_every_row_its_own_score(model, monkeypatch) -> None:
    b, X = model
    x = rows_for(b, X, 20_000)
    monkeypatch.setattr(forest, "CLASSES_MIN_ROWS", 0)
    scored: list[int] = []
    real = forest.predict

    def spy(booster, rows):  # type: ignore[no-untyped-def]
        scored.append(len(rows))
        return real(booster, rows)

    monkeypatch.setattr(forest, "predict", spy)
    assert forest.ZERO_THRESHOLD in np.abs(getattr(b, forest._THRESHOLDS)[4])
    fast = predict_classes(b, x)
    assert scored and scored[0] < 0.7 * len(x)  # classes were scored, not rows
    np.testing.assert_array_equal(bits(fast), bits(real(b, x)))
    np.testing.assert_array_equal(bits(fast), bits(b.predict(x)))


def test_few_rows_or_no_evaluator_score_every_row(model, monkeypatch) -> None:
    b, X = model
    x = rows_for(b, X, 1000)
    scored: list[int] = []
    real = forest.predict
    monkeypatch.setattr(forest, "predict",
                        lambda booster, rows: scored.append(len(rows)) or real(booster, rows))
    np.testing.assert_array_equal(bits(predict_classes(b, x)), bits(b.predict(x)))
    assert scored == [len(x)]  # below CLASSES_MIN_ROWS


def test_score_all_with_classes_equals_every_row(tmp_path, monkeypatch) -> None:
    df = demo_trace(tmp_path, accesses=20_000, seed=3)
    m = train_demo_models(df, num_trees=30, num_leaves=15)
    policy = LearnedPolicy(admission=m["admission"], admission_features=contract().names,
                           range_start=m["range_start"], range_end=m["range_end"],
                           when=m["when"])
    feats = feature_matrix(df)
    monkeypatch.setattr(baleen, "DISTINCT_MIN_ROWS", 0)
    monkeypatch.setattr(forest, "CLASSES_MIN_ROWS", 0)
    fast = score_all(policy, feats)
    monkeypatch.setattr(baleen, "predict_classes", predict)
    monkeypatch.setattr(baleen, "DISTINCT_MIN_ROWS", 10**12)
    plain = score_all(policy, feats.copy())
    for k, v in plain.items():
        assert v.dtype == fast[k].dtype
        np.testing.assert_array_equal(fast[k], v)


def test_columns_of_a_wider_matrix_are_read_in_place(model) -> None:
    """`predict(b, wide, columns)`: the model's features as columns of a wider matrix, in any
    order, give the doubles of the copied columns (the evaluator and LightGBM's own)."""
    b, X = model
    rows = rows_for(b, X, 3000)
    rng = np.random.default_rng(3)
    width = rows.shape[1] + 4
    columns = [int(c) for c in rng.permutation(width)[: rows.shape[1]]]
    wide = rng.normal(size=(len(rows), width))
    wide[:, columns] = rows
    want = b.predict(rows)
    assert forest.forest_of(b, tuple(columns))[0] is not None  # the evaluator, not LightGBM
    np.testing.assert_array_equal(bits(predict(b, wide, columns)), bits(predict(b, rows)))
    np.testing.assert_array_equal(bits(predict(b, wide, columns)), bits(want))
    # a column beyond the matrix: LightGBM's own error, no out-of-bounds read
    with pytest.raises(IndexError):
        predict(b, wide[:, :3], columns)
