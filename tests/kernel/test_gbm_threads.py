"""LightGBM's trees do not depend on its thread count (deterministic, row-wise histograms),
which `models.gbm.side_by_side` relies on to train a policy's independent models at once,
one thread each: the same trees, bit for bit, as one after the other on every thread."""

from __future__ import annotations

import threading
from dataclasses import replace

import numpy as np

from flashml.cores import available
from flashml.models.gbm import fit, side_by_side
from flashml.settings import BaleenSettings
from flashml.systems.baleen.model import TrainingData, train_policy


def _model_text(booster) -> str:  # type: ignore[no-untyped-def]
    return booster.model_to_string()


def _data(n: int, seed: int = 3) -> TrainingData:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 18))
    X[:, 3] = np.round(X[:, 3] * 3)
    y = ((X[:, 0] + 0.5 * X[:, 1] ** 2 + rng.normal(size=n)) > 0.8).astype(np.float64)
    keys = rng.integers(0, n // 5, size=n).astype(np.uint64)
    m = n // 4
    ep_X = rng.normal(size=(m, 6))
    start = np.clip(np.round(3 + 2 * ep_X[:, 0] + rng.normal(size=m)), 0, 63)
    end = np.clip(start + np.round(np.abs(10 + 5 * ep_X[:, 1] + rng.normal(size=m))), 0, 63)
    when = (ep_X[:, 2] + rng.normal(size=m) > 0).astype(np.int32)
    return TrainingData(X, y, keys, ep_X, start, end, when,
                        rng.integers(0, m // 3, size=m).astype(np.uint64))


def test_trees_do_not_depend_on_the_thread_count(monkeypatch) -> None:
    import flashml.models.gbm as gbm_mod

    monkeypatch.setattr(gbm_mod, "ONE_THREAD_ROWS", 0)  # two threads really used
    gbm = BaleenSettings().gbm
    rng = np.random.default_rng(1)
    n = 20_000
    X = rng.normal(size=(n, 18))
    y = ((X[:, 0] + rng.normal(size=n)) > 0.5).astype(np.float64)
    keys = rng.integers(0, n // 5, size=n)
    names = [f"f{i}" for i in range(18)]
    one = fit(X, y, keys, "binary", replace(gbm, num_threads=1), names)
    two = fit(X, y, keys, "binary", replace(gbm, num_threads=2), names)
    assert one.num_trees() > 10
    # the trees are the same; only the parameters the text records differ
    assert _model_text(one).split("\nparameters:")[0] == _model_text(two).split(
        "\nparameters:")[0]
    assert "[num_threads: 1]" in _model_text(one)
    # trained on one thread for a model of two: the text of a model trained on two
    side = fit(X, y, keys, "binary", replace(gbm, num_threads=2), names, threads=1)
    assert _model_text(side) == _model_text(two)
    # the held-out loss per round (summed in parallel) only to its last bits
    for k, v in two.flashml_curve.items():
        np.testing.assert_allclose(side.flashml_curve[k], v, rtol=1e-12)
    np.testing.assert_array_equal(side.predict(X), two.predict(X))


def test_a_policy_trained_side_by_side_equals_one_trained_in_turn(monkeypatch) -> None:
    """train_policy's admission and prefetch models, trained side by side, against the
    same models trained one after the other on two threads (side_by_side on one core)."""
    import flashml.systems.baleen.model as baleen_mod

    data = _data(12_000)
    gbm = BaleenSettings().gbm
    together = train_policy(data, gbm)
    monkeypatch.setattr(baleen_mod, "side_by_side",
                        lambda jobs, threads: [job(threads) for job in jobs])
    in_turn = train_policy(data, gbm)
    for name, b in together.boosters().items():
        assert _model_text(b) == _model_text(in_turn.boosters()[name]), name


def test_side_by_side_keeps_order_and_shares_the_threads() -> None:
    seen: list[tuple[int, int, str]] = []
    lock = threading.Lock()

    def job(i: int):  # type: ignore[no-untyped-def]
        def run(threads: int) -> int:
            with lock:
                seen.append((i, threads, threading.current_thread().name))
            return i * 10
        return run

    assert side_by_side([job(i) for i in range(5)], 2) == [0, 10, 20, 30, 40]
    if available() >= 2:
        assert {t for _, t, _ in seen} == {1}  # two at a time, one thread each
    assert side_by_side([job(7)], 2) == [70]
    assert seen[-1][1] == 2  # one job: all the threads
