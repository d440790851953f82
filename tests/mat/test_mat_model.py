"""MAT's training rows (flashml/systems/mat/model.py `label_samples`) against a slow obvious
labelling of the simulator's tail candidates straight from the trace, the size-aware label, and the
model size settings."""

from __future__ import annotations

import math

import numpy as np
import pytest

from flashml.systems.mat.model import AGE, MAT_GBM, SIZE, label_samples, mat_gbm
from flashml.systems.mat.simulation import simulate_objects_mat


@pytest.fixture(scope="module")
def replay() -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray], int]:
    """An LRU replay of the first `end` requests of a skewed random trace, with samples."""
    rng = np.random.default_rng(7)
    keys = (rng.zipf(1.15, 12_000) % 1_500).astype(np.uint64)
    sizes = (100 + (keys * 37) % 900).astype(np.uint64)  # one size per key
    end = 9_000
    r = simulate_objects_mat(keys[:end], sizes[:end], 60_000, "bytes", collect_samples=True,
                             memory_window=10**6)
    return keys, sizes, r["samples"], end


def _slow_rows(keys: np.ndarray, samples: dict[str, np.ndarray], end: int,
               horizon: int) -> list[tuple[int, float]]:
    """(sample index, distance or 2 * horizon) of every sample whose horizon the replay of
    [0, end) saw whole, by scanning the trace for the candidate's next request."""
    rows = []
    seq = keys[:end].tolist()
    for i, (last, tag) in enumerate(zip(samples["last"].tolist(), samples["time"].tolist(),
                                        strict=True)):
        assert tag > last
        if last + horizon > end:
            continue
        key = seq[last]  # the candidate's last request
        assert key not in seq[last + 1:tag]  # no request between its last access and tagging
        nxt = next((j for j in range(tag, end) if seq[j] == key), None)
        d = nxt - last if nxt is not None else math.inf
        rows.append((i, d if d < horizon else 2.0 * horizon))
    return rows


@pytest.mark.parametrize("horizon", [200, 1_500, 5_000])
def test_rows_are_those_whose_horizon_the_replay_saw(replay, horizon: int) -> None:
    keys, _, samples, end = replay
    lab = label_samples(samples, end, horizon)
    want = _slow_rows(keys, samples, end, horizon)
    assert len(want) > 100
    assert len(lab.label) == len(want) and lab.dropped == len(samples["label"]) - len(want)
    idx = [i for i, _ in want]
    np.testing.assert_array_equal(lab.features, samples["features"][idx])
    np.testing.assert_allclose(lab.label, np.log1p([d for _, d in want]), rtol=1e-12)
    np.testing.assert_array_equal(lab.returned, [d < horizon for _, d in want])
    # the dropped rows include candidates the simulator could only call "not back" unverified
    late = samples["last"] + horizon > end
    assert (late & samples["censored"]).any()
    assert 0.0 < lab.returned.mean() < 1.0


def test_start_keeps_only_rows_tagged_from_it(replay) -> None:
    keys, _, samples, end = replay
    whole = label_samples(samples, end, 1_000)
    late = label_samples(samples, end, 1_000, start=4_000)
    keep = (samples["last"] + 1_000 <= end) & (samples["time"] >= 4_000)
    np.testing.assert_array_equal(late.features, samples["features"][keep])
    assert 0 < len(late.label) < len(whole.label)


def test_size_aware_label(replay) -> None:
    """log1p(age + (distance - age) * (size / size_ref)^a): the remaining time scaled by the
    relative size, so a larger object at the same distance and age gets a larger TTA."""
    _, _, samples, end = replay
    plain = label_samples(samples, end, 1_000)
    sized = label_samples(samples, end, 1_000, size_exponent=0.5)
    assert sized.size_ref == pytest.approx(plain.features[:, SIZE].mean())
    age, size = plain.features[:, AGE], plain.features[:, SIZE]
    dist = np.expm1(plain.label)
    assert (dist >= age).all()  # the next request comes after tagging
    want = np.log1p(age + (dist - age) * (size / sized.size_ref) ** 0.5)
    np.testing.assert_allclose(sized.label, want, rtol=1e-12)
    big, small = size > sized.size_ref, size < sized.size_ref
    assert (sized.label[big] >= plain.label[big]).all()
    assert (sized.label[small] <= plain.label[small]).all()
    fixed = label_samples(samples, end, 1_000, size_exponent=1.0, size_ref=500.0)
    np.testing.assert_allclose(fixed.label, np.log1p(age + (dist - age) * size / 500.0),
                               rtol=1e-12)


def test_bad_arguments(replay) -> None:
    _, _, samples, end = replay
    with pytest.raises(ValueError, match="horizon"):
        label_samples(samples, end, 0)
    with pytest.raises(ValueError, match="size_exponent"):
        label_samples(samples, end, 10, size_exponent=-1.0)
    assert mat_gbm() == MAT_GBM
    assert (mat_gbm(64, 16).num_boost_round, mat_gbm(64, 16).num_leaves) == (64, 16)
    with pytest.raises(ValueError, match="tree"):
        mat_gbm(0, 32)
