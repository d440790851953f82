"""Episodes on Spark: the same tables as the Polars engine, row by row (one SparkSession per
module; Spark start-up is slow, so the tests are few and the traces small)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from test_episodes import HAND, generated_table, write_trace

from flashml.episodes.core import EpisodeParams, build

NAMES = ("episodes", "labels", "arrays")


@pytest.fixture(scope="module")
def spark():
    from flashml.episodes.spark_engine import spark_session

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


def test_cli_default_engine_is_spark(spark, tmp_path, capsys):
    """`flashml episodes build` without --engine runs on Spark (in-process here, so it reuses
    the module's session instead of starting a second JVM; the fixture itself shows that
    `spark_session` starts a local Spark with no setup)."""
    from flashml.cli import main

    trace = write_trace(tmp_path / "hand.parquet", HAND)
    rc = main(["episodes", "build", "--trace", str(trace), "--eviction-age", "100",
               "--target-write-rate", "0.001", "-o", str(tmp_path / "o")])
    out = capsys.readouterr().out
    assert rc == 0
    assert "4 episodes" in out and "(spark," in out
    assert pl.read_parquet(tmp_path / "o" / "arrays.parquet")["admit"].sum() == 5
