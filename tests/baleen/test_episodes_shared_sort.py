"""Polars episode builds of one table at several eviction ages share the table's sorted GETs
(`polars_engine.sorted_gets`) and keep a one-bucket build's frames in memory: every table
they write equals the one the plain path writes (scratch parts, a fresh sort each build),
and a rewritten table is read again, not served from the frame of the old file."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from test_episodes import generated_table, read_out

from flashml.systems.baleen.episodes import polars_engine
from flashml.systems.baleen.episodes.core import EpisodeParams, build

EAS = (900.0, 3600.0, 14400.0, 3600.0)


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> Path:
    return generated_table(tmp_path_factory.mktemp("gen"), "region1-like", 11, 40_000)


def summary(d: Path) -> dict:
    s = json.loads((d / "summary.json").read_text())
    for k in ("seconds", "timings"):
        s.pop(k)
    return s


def plain(table: Path, out: Path, params: EpisodeParams, monkeypatch) -> None:
    """The obvious path: scratch parts on disk, no shared sort."""
    with monkeypatch.context() as m:
        m.setattr(polars_engine, "MEMORY_GETS", 0)
        m.setattr(polars_engine, "_SORTED", {})
        build(table, out, params, engine="polars", chunks=1, plot=False)


@pytest.mark.parametrize("time_mode", ["seconds", "logical"])
def test_shared_sort_equals_plain_builds(table, tmp_path, monkeypatch, time_mode):
    polars_engine._SORTED.clear()
    made = []
    real = polars_engine.sort_gets

    def counting(gets: pl.DataFrame) -> pl.DataFrame:
        made.append(gets.height)
        return real(gets)

    monkeypatch.setattr(polars_engine, "sort_gets", counting)
    for i, ea in enumerate(EAS):
        p = EpisodeParams(eviction_age_s=ea, accesses_per_episode=6, time_mode=time_mode)
        fast, slow = tmp_path / f"fast-{i}", tmp_path / f"slow-{i}"
        build(table, fast, p, engine="polars", plot=False)
        plain(table, slow, p, monkeypatch)
        a, b = read_out(fast), read_out(slow)
        for n in a:
            assert_frame_equal(a[n], b[n])
        assert summary(fast) == summary(slow)
    # the shared path sorted the table once; each plain build sorted it again
    assert len(made) == 1 + len(EAS), made
    assert not any(p.name.startswith("gets-") for p in tmp_path.rglob("*.parquet"))


def test_rewritten_table_is_read_again(table, tmp_path, monkeypatch):
    polars_engine._SORTED.clear()
    copy = tmp_path / "t.parquet"
    shutil.copy(table, copy)
    p = EpisodeParams(eviction_age_s=3600.0)
    build(copy, tmp_path / "a", p, engine="polars", plot=False)
    # another table written in its place (a new file, as atomic_path writes it)
    (tmp_path / "other").mkdir()
    other = generated_table(tmp_path / "other", "region1-like", 12, 20_000)
    os.replace(other, copy)
    build(copy, tmp_path / "b", p, engine="polars", plot=False)
    plain(copy, tmp_path / "c", p, monkeypatch)
    a, b = read_out(tmp_path / "b"), read_out(tmp_path / "c")
    for n in a:
        assert_frame_equal(a[n], b[n])
    assert read_out(tmp_path / "a")["labels"].height != a["labels"].height
