"""libCacheSim's own Python bindings (`libcachesim`) as the external oracle of object mode:
our simulator's LRU, FIFO and Belady against libCacheSim's on the real CloudPhysics sample and
on the generated object presets; the oracle trace against libCacheSim's own converter; and the
baseline runner (policies, crash isolation, bad input)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from flashml.simulation import simulate_objects
from flashml.trace.generate import generate_trace
from flashml.trace.objects import read_objects

lcs = pytest.importorskip(
    "libcachesim", reason="libcachesim (libCacheSim's Python bindings, a dev dependency in "
    "requirements.lock) is not installed: run `make setup`")

from flashml.systems.mat import object_baselines as ob  # noqa: E402

from conftest import CLOUDPHYSICS  # noqa: E402

MiB = 1 << 20
# ../shared/traces/README.md: libCacheSim's cachesim on the CloudPhysics sample
REFERENCE = [("lru", 1 * MiB, "bytes", 0.8646), ("lru", 16 * MiB, "bytes", 0.8346),
             ("lru", 1000, "objects", 0.8327), ("fifo", 1 * MiB, "bytes", 0.8766),
             ("fifo", 1000, "objects", 0.8388)]
CROSS = ("lru", "fifo", "belady")  # the policies our simulator has too
FRACTIONS = (0.01, 0.05, 0.10)  # of the unique bytes (or objects)


def unique(df: pl.DataFrame, unit: str) -> int:
    u = df.unique("key")
    return u.height if unit == "objects" else int(u["size"].sum())


def assert_same(df: pl.DataFrame, caps: list[int], unit: str, where: str) -> None:
    """Our simulator and libCacheSim agree exactly (hits) on every cross-checked policy."""
    theirs = ob.run_baselines(df["key"], df["size"], caps, unit=unit, policies=CROSS,
                              times=df["time"], jobs=2, isolate=False)
    for c in caps:
        for p in CROSS:
            ours = simulate_objects(df["key"], df["size"], c, p, unit)
            row = theirs[c][p]
            assert row["requests"] == ours["requests"] == df.height
            assert row["hits"] == ours["hits"], (where, p, c, unit, row, ours)
            assert row["miss_ratio"] == pytest.approx(ours["miss_ratio"], abs=1e-12)
            if unit == "bytes":
                assert row["byte_miss_ratio"] == pytest.approx(ours["byte_miss_ratio"],
                                                               abs=1e-12)
            else:
                assert row["byte_miss_ratio"] is None


@pytest.fixture(scope="module")
def cloudphysics() -> pl.DataFrame:
    assert CLOUDPHYSICS.exists(), f"{CLOUDPHYSICS} missing: ../shared must sit beside the repo"
    return read_objects(CLOUDPHYSICS, "cloudphysics")


@pytest.fixture(scope="module")
def presets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, pl.DataFrame]:
    d = tmp_path_factory.mktemp("object-presets")
    out = {}
    for name in ("cdn-like", "kv-like"):
        generate_trace(name, 0, d / f"{name}.csv", accesses=150_000, progress=False)
        out[name] = read_objects(d / f"{name}.csv", "objects-csv")
    return out


def test_every_issue_policy_is_available() -> None:
    status = ob.available()
    assert set(status) == set(ob.POLICIES)
    missing = {p: why for p, why in status.items() if why is not None}
    assert not missing, missing  # libcachesim 0.3.5's wheel has every policy MAT is compared with


@pytest.mark.parametrize("policy, capacity, unit, expected", REFERENCE)
def test_libcachesim_reproduces_the_reference_table(cloudphysics, policy, capacity, unit,
                                                    expected) -> None:
    """The bindings, fed our oracle trace, give the cachesim figures of ../shared."""
    row = ob.run_baselines(cloudphysics["key"], cloudphysics["size"], capacity, unit=unit,
                           policies=[policy], times=cloudphysics["time"])[capacity][policy]
    assert row["requests"] == 113_872
    assert round(row["miss_ratio"], 4) == expected


@pytest.mark.parametrize("unit", ["bytes", "objects"])
def test_cloudphysics_ours_equals_libcachesim(cloudphysics, unit) -> None:
    caps = [max(1, int(f * unique(cloudphysics, unit))) for f in FRACTIONS]
    caps += [1 * MiB, 16 * MiB] if unit == "bytes" else [1000]
    assert_same(cloudphysics, caps, unit, "cloudphysics")


@pytest.mark.parametrize("name", ["cdn-like", "kv-like"])
@pytest.mark.parametrize("unit", ["bytes", "objects"])
def test_generated_presets_ours_equals_libcachesim(presets, name, unit) -> None:
    df = presets[name]
    caps = [max(1, int(f * unique(df, unit))) for f in FRACTIONS]
    assert_same(df, caps, unit, name)


def test_oracle_trace_is_libcachesims_own(tmp_path: Path) -> None:
    """Our oracleGeneral file is byte for byte what libCacheSim's converter writes from the
    same requests read by its own CSV reader (next access: 1-based index, -1 for none)."""
    rng = np.random.default_rng(5)
    n = 5_000
    keys = rng.zipf(1.3, n).astype(np.uint64) % 700 + 1
    sizes = rng.integers(1, 50_000, n)
    times = np.sort(rng.integers(0, 3_000, n))
    src = tmp_path / "t.csv"
    pl.DataFrame({"time": times, "key": keys, "size": sizes}).write_csv(src)
    params = lcs.ReaderInitParam(has_header=True, delimiter=",", obj_id_is_num=True)
    params.time_field, params.obj_id_field, params.obj_size_field = 1, 2, 3
    reader = lcs.TraceReader(str(src), lcs.TraceType.CSV_TRACE, params)
    theirs = tmp_path / "theirs.bin"
    lcs.Util.convert_to_oracleGeneral(reader._reader, str(theirs))
    ours = ob.write_oracle_trace(tmp_path / "ours.bin", keys, sizes, times)
    assert ours.read_bytes() == theirs.read_bytes()
    nxt = ob.next_access(keys)
    i = int(np.flatnonzero(nxt > 0)[0])
    assert keys[nxt[i] - 1] == keys[i] and not (keys[i + 1:nxt[i] - 1] == keys[i]).any()


def test_all_policies_run_and_belady_is_the_bound(presets) -> None:
    """Every policy gives ratios in [0, 1]; with unit sizes Belady is optimal, so no
    policy misses less."""
    df = presets["kv-like"]
    cap = int(0.05 * df["key"].n_unique())
    rows = ob.run_baselines(df["key"], df["size"], cap, unit="objects", jobs=2)[cap]
    assert set(rows) == set(ob.POLICIES)
    errors = {p: r["error"] for p, r in rows.items() if "error" in r}
    assert not errors, errors
    for r in rows.values():
        assert 0.0 < r["miss_ratio"] < 1.0 and r["byte_miss_ratio"] is None
    best = rows["belady"]["miss_ratio"]
    assert all(r["miss_ratio"] >= best - 1e-12 for r in rows.values())
    assert rows["belady"]["miss_ratio"] < rows["lru"]["miss_ratio"]


def test_a_crashing_policy_is_an_error_row_not_a_crash() -> None:
    """libCacheSim aborts the process for S3-FIFO with a 1-object cache (its small queue
    would be empty); the runner reports it and goes on."""
    keys = np.array([1, 1, 2, 1, 3, 3], dtype=np.uint64)
    rows = ob.run_baselines(keys, np.ones(6), 1, unit="objects", policies=["s3fifo", "lru"])[1]
    assert "error" in rows["s3fifo"] and "S3FIFO failed" in rows["s3fifo"]["error"]
    assert rows["lru"]["hits"] == 2 and rows["lru"]["miss_ratio"] == pytest.approx(4 / 6)


def test_bad_input() -> None:
    k = np.array([1, 2, 1], dtype=np.uint64)
    with pytest.raises(ValueError, match="unknown policies"):
        ob.run_baselines(k, k, 10, policies=["mat"])
    with pytest.raises(ValueError, match="capacities"):
        ob.run_baselines(k, k, 0)
    with pytest.raises(ValueError, match=">= 1 byte"):
        ob.run_baselines(k, np.array([1, 0, 1]), 10)
    with pytest.raises(ValueError, match="4 GiB"):
        ob.run_baselines(k, np.array([1, 1 << 32, 1]), 10)
    with pytest.raises(ValueError, match="one length"):
        ob.run_baselines(k, k[:2], 10)
    with pytest.raises(ValueError, match="no requests"):
        ob.run_baselines(k[:0], k[:0], 10)
    with pytest.raises(ValueError, match="unit"):
        ob.run_baselines(k, k, 10, unit="pages")
