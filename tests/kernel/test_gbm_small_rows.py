"""`models.gbm.fit` trains a model of fewer than `ONE_THREAD_ROWS` rows on one LightGBM
thread whatever thread count it is given: the same model text, bit for bit, as a training
on that many threads (the text records the nominal count), and the same predictions."""

from __future__ import annotations

from dataclasses import replace

import lightgbm as lgb
import numpy as np

from flashml.models import gbm as gbm_mod
from flashml.models.gbm import fit
from flashml.settings import BaleenSettings


def test_small_models_train_on_one_thread_with_the_same_text(monkeypatch) -> None:
    params = replace(BaleenSettings().gbm, num_threads=2)
    rng = np.random.default_rng(7)
    n = 8_000
    X = rng.normal(size=(n, 8))
    y = ((X[:, 0] + 0.5 * X[:, 1] * X[:, 2] + rng.normal(size=n)) > 0.3).astype(np.float64)
    keys = rng.integers(0, n // 4, size=n)
    names = [f"f{i}" for i in range(8)]
    used: list[int] = []
    real_train = lgb.train

    def spy(p, *a, **kw):  # type: ignore[no-untyped-def]
        used.append(int(p["num_threads"]))
        return real_train(p, *a, **kw)

    monkeypatch.setattr(gbm_mod.lgb, "train", spy)
    small = fit(X, y, keys, "binary", params, names)
    given = fit(X, y, keys, "binary", params, names, threads=2)
    monkeypatch.setattr(gbm_mod, "ONE_THREAD_ROWS", 0)  # the slow path: two threads
    two = fit(X, y, keys, "binary", params, names)
    assert used == [1, 1, 2]
    assert two.num_trees() > 10
    text = two.model_to_string()
    assert "[num_threads: 2]" in text
    assert small.model_to_string() == text and given.model_to_string() == text
    np.testing.assert_array_equal(small.predict(X), two.predict(X))
    for k, v in two.flashml_curve.items():
        np.testing.assert_allclose(small.flashml_curve[k], v, rtol=1e-12)
    # at or above the bound the given count is used
    monkeypatch.setattr(gbm_mod, "ONE_THREAD_ROWS", n)
    fit(X, y, keys, "binary", params, names)
    assert used[-1] == 2
