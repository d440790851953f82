"""`models.baleen.score_all` scores ML-Range and ML-When once per distinct row of range
features and copies the scores to the accesses: the same arrays, bit for bit, as scoring every
access (and as LightGBM's own predict)."""

from __future__ import annotations

import numpy as np
import pytest

from flashml.compiler.bundle import round_range, when_matrix
from flashml.features.contract import contract
from flashml.features.online import feature_matrix
from flashml.simulation import POLICY_ARRAYS
from flashml.systems.baleen import model as baleen
from flashml.systems.baleen.model import LearnedPolicy, range_rows, score_all

from demo_policy import demo_trace, train_demo_models


@pytest.fixture(scope="module")
def setup(tmp_path_factory):  # type: ignore[no-untyped-def]
    df = demo_trace(tmp_path_factory.mktemp("distinct"), accesses=20_000, seed=7)
    b = train_demo_models(df, num_trees=30, num_leaves=15)
    policy = LearnedPolicy(admission=b["admission"], admission_features=contract().names,
                           range_start=b["range_start"], range_end=b["range_end"],
                           when=b["when"])
    return feature_matrix(df), policy


def test_distinct_rows_give_every_access_its_own_scores(setup, monkeypatch) -> None:
    feats, policy = setup
    monkeypatch.setattr(baleen, "DISTINCT_MIN_ROWS", 0)
    rows, inverse = range_rows(feats)
    assert inverse is not None and len(rows) < 0.8 * len(feats)  # the path is taken
    np.testing.assert_array_equal(rows[inverse], feats[:, contract().indices("range")])
    fast = score_all(policy, feats)
    # every access scored on its own, as before (LightGBM itself, not the tree evaluator)
    rX = np.ascontiguousarray(feats[:, contract().indices("range")], dtype=np.float64)
    ps, pe = round_range(policy.range_start.predict(rX), policy.range_end.predict(rX))
    when = policy.when.predict(when_matrix(None, ps, pe, range_x=rX))
    np.testing.assert_array_equal(fast["prefetch_start"], ps)
    np.testing.assert_array_equal(fast["prefetch_end"], pe)
    np.testing.assert_array_equal(fast["when_score"], when)
    np.testing.assert_array_equal(fast["score"], policy.admission.predict(feats))
    # the range as the simulator reads it (int16), the scores as LightGBM's doubles
    assert fast["prefetch_start"].dtype == POLICY_ARRAYS["prefetch_start"]
    assert fast["when_score"].dtype == when.dtype
    # without the distinct rows: the same arrays
    monkeypatch.setattr(baleen, "DISTINCT_MIN_ROWS", 10**12)
    plain = score_all(policy, feats.copy())
    for k, v in plain.items():
        np.testing.assert_array_equal(fast[k], v)


def test_distinct_rows_are_kept_per_matrix(setup, monkeypatch) -> None:
    feats, _ = setup
    monkeypatch.setattr(baleen, "DISTINCT_MIN_ROWS", 0)
    a = range_rows(feats)
    assert range_rows(feats)[0] is a[0]  # computed once for this matrix
    other = feats.copy()
    other[0, 3] += 1.0  # another matrix (equal shape, other values): its own rows
    b = range_rows(other)
    assert b[0] is not a[0]
    np.testing.assert_array_equal(b[0][b[1]], other[:, contract().indices("range")])


def test_the_hashing_pass_finds_numpys_classes(setup) -> None:
    """The simulator crate's one pass (a C-contiguous float64 matrix) and NumPy's sort (any
    other) put the same rows together: each row's distinct row has its bytes, and two rows
    share a class in one exactly when they do in the other."""
    feats, _ = setup
    cols = contract().indices("range")
    x = np.array(feats)
    x[::7, 1] = -0.0  # -0.0 and 0.0 differ by their bytes, as NumPy's unique tells them
    x[::11, 2] = np.nan
    fast = baleen._distinct(np.ascontiguousarray(x), cols)
    slow = baleen._distinct(np.asfortranarray(x), cols)
    for first, inverse in (fast, slow):
        rows = x[first][:, cols]
        np.testing.assert_array_equal(rows[inverse].view(np.uint64), x[:, cols].view(np.uint64))
    assert len(fast[0]) == len(slow[0])
    # the same partition: the pairs (fast class, slow class) are one to one
    pairs = np.unique(np.stack([fast[1], slow[1]]), axis=1)
    assert pairs.shape[1] == len(fast[0])
