"""The compact feature matrix (flashml/features/matrix.py) gives the float64 matrix's rows,
bit for bit, however it is read: views, row indices, masks, strided slices, columns; the
tree evaluator's scores and the distinct rows come out the same; counts that a uint32 cannot
hold exactly are refused."""

from __future__ import annotations

import lightgbm as lgb
import numpy as np
import pytest

from flashml.config import UNITS
from flashml.features.contract import contract
from flashml.features.matrix import count_columns, counts_of
from flashml.models.forest import predict
from flashml.simulation import compact_features, online_counts, online_features

from demo_policy import demo_trace


@pytest.fixture(scope="module")
def both(tmp_path_factory):  # type: ignore[no-untyped-def]
    df = demo_trace(tmp_path_factory.mktemp("matrix"), accesses=30_000, seed=5)
    full = online_features(df, segment_bytes=UNITS.segment_bytes)
    counts = online_counts(df, segment_bytes=UNITS.segment_bytes)
    # the Rust counts, straight into uint32, are the float64 matrix's count columns
    assert counts.dtype == np.uint32
    np.testing.assert_array_equal(counts, counts_of(full))
    return full, compact_features(df, counts, UNITS.segment_bytes)


def same(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == np.float64 and a.shape == b.shape
    np.testing.assert_array_equal(a.view(np.uint64), np.ascontiguousarray(b).view(np.uint64))


def test_every_way_of_reading_gives_the_float64_rows(both) -> None:
    full, m = both
    assert m.shape == full.shape and len(m) == len(full)
    same(np.asarray(m), full)
    same(m.block(100, 5000), full[100:5000])
    same(m.block(0, 10, [3, 4, 17]), full[:10, [3, 4, 17]])
    view = m[1000:20_000]
    assert len(view) == 19_000 and view.shape == (19_000, full.shape[1])
    same(np.asarray(view), full[1000:20_000])
    same(np.asarray(view[500:600]), full[1500:1600])  # a view of a view
    # a view reads its matrix's segments, not derived again from the whole trace
    for name in ("segment_start", "segment_end"):
        assert view.columns[name] is m.columns[name] and view[5:9].columns[name] is m.columns[name]
    rows = np.array([0, 7, 7, 29_999, -1, 12_345])
    same(m[rows], full[rows])
    mask = np.zeros(len(full), dtype=bool)
    mask[::3] = True
    same(m[mask], full[mask])
    same(view[mask[:19_000]], full[1000:20_000][mask[:19_000]])
    same(m[::150][:200], full[::150][:200])
    same(m[rows, [0, 5]], full[rows][:, [0, 5]])
    same(m[:, [1, 2]], full[:, [1, 2]])
    same(m[42], full[42])
    with pytest.raises(IndexError):
        m[np.array([len(full)])]


def test_scores_and_distinct_rows_are_the_float64_matrixs(both) -> None:
    from flashml_sim import distinct_rows

    full, m = both
    c = contract()
    rng = np.random.default_rng(3)
    y = (full[:, 6] + rng.random(len(full)) > 1.5).astype(np.float64)
    b = lgb.train({"objective": "binary", "num_leaves": 15, "verbose": -1, "seed": 1},
                  lgb.Dataset(full, label=y), num_boost_round=20)
    same(predict(b, m), predict(b, full))
    cols = c.indices("cachelib_like")
    b2 = lgb.train({"objective": "binary", "num_leaves": 7, "verbose": -1, "seed": 1},
                   lgb.Dataset(full[:, cols], label=y), num_boost_round=10)
    same(predict(b2, m, cols), predict(b2, full, cols))
    same(predict(b2, m[5000:9000], cols), predict(b2, full[5000:9000], cols))
    for cols in (c.indices("range"), [0, 3], [2], [4, 5, 1], [0, 6, 12]):
        got = m.distinct(cols)
        want = distinct_rows(np.ascontiguousarray(full), cols)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
    first, inverse = m[10_000:].distinct(c.indices("range"))
    want = distinct_rows(np.ascontiguousarray(full[10_000:]), c.indices("range"))
    np.testing.assert_array_equal(first, want[0])
    np.testing.assert_array_equal(inverse, want[1])


def test_counts_a_uint32_cannot_hold_are_refused(both) -> None:
    full, _ = both
    j = count_columns(contract())[0]
    for bad in (0.5, -1.0, 2.0**32):
        x = full[:100].copy()
        x[3, j] = bad
        with pytest.raises(ValueError):
            counts_of(x)


def test_online_counts_refuse_what_is_no_count(tmp_path) -> None:
    """The Rust counts take contract indices and give exact uint32s, else a ValueError that
    names the access and the feature (the size, a row source, past 4 GiB is no count)."""
    from flashml.simulation import _core, _feature_arrays

    df = demo_trace(tmp_path, accesses=200, seed=2)
    cols = _feature_arrays(df)
    args = [cols[k] for k in ("time", "key", "offset", "size", "op", "namespace", "user")]
    c = contract()
    with pytest.raises(ValueError, match="not a contract index"):
        _core().online_features(*args, segment_bytes=UNITS.segment_bytes,
                                counts=[c.num_features])
    size = next(f.index for f in c.admission if f.source == "size")
    big = args[3].copy()
    big[7] = 2**32 + 5
    args[3] = big
    with pytest.raises(ValueError, match=r"access 7: feature .* not an integer in u32"):
        _core().online_features(*args, segment_bytes=UNITS.segment_bytes, counts=[size])


def test_online_counts_into_a_mapped_file(tmp_path) -> None:
    """The counts written into a memory-mapped .npy (what the job keeps them in) are the
    returned ones; an `out` of another shape or type is refused."""
    df = demo_trace(tmp_path, accesses=5_000, seed=3)
    want = online_counts(df, segment_bytes=UNITS.segment_bytes)
    out = np.lib.format.open_memmap(tmp_path / "c.npy", mode="w+", dtype=np.uint32,
                                    shape=want.shape)
    assert online_counts(df, segment_bytes=UNITS.segment_bytes, out=out) is out
    out.flush()
    del out
    np.testing.assert_array_equal(np.load(tmp_path / "c.npy", mmap_mode="r"), want)
    with pytest.raises(ValueError, match="shape"):
        online_counts(df, segment_bytes=UNITS.segment_bytes,
                      out=np.zeros((want.shape[0], want.shape[1] - 1), np.uint32))
    with pytest.raises(TypeError):
        online_counts(df, segment_bytes=UNITS.segment_bytes, out=want.astype(np.int64))
