"""Episodes on Spark: the same tables as the Polars engine, row by row (one SparkSession per
module; Spark start-up is slow, so the tests are few and the traces small)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from test_episodes import HAND, generated_table, write_trace

from flashml.systems.baleen.episodes.core import EpisodeParams, build

NAMES = ("episodes", "labels", "arrays")


@pytest.fixture(scope="module")
def spark():
    from flashml.systems.baleen.episodes.spark_engine import spark_session

    s = spark_session("local[2]", shuffle_partitions=2)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    return generated_table(tmp_path_factory.mktemp("gen"), "region2-like", 3, 15_000)


def _same(a: Path, b: Path) -> None:
    for n in NAMES:
        assert_frame_equal(pl.read_parquet(a / f"{n}.parquet"), pl.read_parquet(b / f"{n}.parquet"))


@pytest.mark.parametrize("mode,ea", [("seconds", 1800.0), ("logical", 7200.0)])
def test_spark_equals_polars(spark, generated, tmp_path, mode, ea):
    p = EpisodeParams(eviction_age_s=ea, time_mode=mode, accesses_per_episode=15)
    rp = build(generated, tmp_path / "p", p, engine="polars", plot=False)
    rs = build(generated, tmp_path / "s", p, engine="spark", spark=spark, plot=False)
    _same(tmp_path / "p", tmp_path / "s")
    assert rp.summary["admitted_episodes"] == rs.summary["admitted_episodes"] > 0
    assert rp.summary["cutoff_score"] == rs.summary["cutoff_score"]


def test_spark_hand_example(spark, tmp_path):
    trace = write_trace(tmp_path / "hand.parquet", HAND)
    p = EpisodeParams(eviction_age_s=100, target_write_rate_mbps=0.001, accesses_per_episode=2)
    build(trace, tmp_path / "p", p, engine="polars", plot=False)
    r = build(trace, tmp_path / "s", p, engine="spark", spark=spark, plot=False)
    _same(tmp_path / "p", tmp_path / "s")
    ep = pl.read_parquet(tmp_path / "s" / "episodes.parquet")
    assert ep.select("range_start", "range_end").rows() == [(1, 3), (0, 0), (0, 5), (2, 3)]
    assert r.summary["admitted_episodes"] == 2


def test_cli_auto_engine_by_size(spark, tmp_path, capsys, monkeypatch):
    """`flashml episodes build` without --engine picks by the table's size: the in-process
    engine (rust) while its BASE_BYTES + accesses x its BYTES_PER_ACCESS fit in half the
    available memory, Polars while accesses x POLARS_BYTES_PER_ACCESS do, Spark beyond (here
    the machine is made to look full; in-process, so the build reuses the module's Spark
    session; the fixture itself shows that `spark_session` starts a local Spark with no
    setup). Both give the same admissions."""
    import flashml.systems.baleen.episodes.core as core
    import flashml.systems.baleen.episodes.rust_engine as rust_engine
    from flashml.cli import main

    trace = write_trace(tmp_path / "hand.parquet", HAND)
    args = ["episodes", "build", "--trace", str(trace), "--eviction-age", "100",
            "--target-write-rate", "0.001", "--no-plot"]
    rows = len(HAND)
    rust_need = rust_engine.BASE_BYTES + rows * rust_engine.BYTES_PER_ACCESS
    # half of this is the in-process engine's estimate: it fits
    monkeypatch.setattr(core, "available_memory_bytes", lambda: 2 * rust_need)
    assert main([*args, "-o", str(tmp_path / "a")]) == 0
    assert "(rust," in capsys.readouterr().out
    # one byte short of it: Polars' (far smaller for a table this small) fits
    monkeypatch.setattr(core, "available_memory_bytes", lambda: 2 * rust_need - 2)
    assert main([*args, "-o", str(tmp_path / "b")]) == 0
    assert "(polars," in capsys.readouterr().out
    # one byte short of Polars' too: Spark's
    monkeypatch.setattr(core, "available_memory_bytes",
                        lambda: 2 * rows * core.POLARS_BYTES_PER_ACCESS - 2)
    assert core.choose_engine(trace)[0] == "spark"
    monkeypatch.setattr("flashml.systems.baleen.episodes.spark_engine.spark_session",
                        lambda master=None: spark)
    assert main([*args, "-o", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "4 episodes" in out and "(spark," in out
    s = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert s["engine"] == "spark" and "> 50% of" in s["engine_choice"], s["engine_choice"]
    for d in ("a", "b", "o"):
        assert pl.read_parquet(tmp_path / d / "arrays.parquet")["admit"].sum() == 5
