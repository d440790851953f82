"""OPT as a policy: one episode build ranks the episodes, and each episode target is a cut of
that ranking equal to a build at that target (systems/baleen/opt.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> tuple[Path, int]:
    from flashml.trace.canonical import read_table
    from flashml.trace.generate import generate_trace
    from flashml.trace.ingest import ingest

    d = tmp_path_factory.mktemp("opt")
    generate_trace("region1-like", 5, d / "t.trace", accesses=20_000, progress=False)
    ingest(d / "t.trace", d / "t.parquet", "tectonic", progress=False)
    return d / "t.parquet", read_table(d / "t.parquet")[0].height


def test_a_cut_of_one_ranking_equals_a_build_at_that_target(table, tmp_path: Path) -> None:
    from flashml.systems.baleen.opt import opt_arrays, opt_ranking

    path, rows = table
    ranking = opt_ranking(path, tmp_path / "ranking", 5400.0, rows)
    admitted = []
    for i, target in enumerate((2.0, 20.0, 80.0, 1e6)):
        want = opt_arrays(path, tmp_path / f"build-{i}", 5400.0, target)
        got = ranking(target)
        for name in ("admit", "prefetch_start", "prefetch_end"):
            assert np.array_equal(got[name].astype(np.int64), want[name].astype(np.int64)), \
                (target, name)
        admitted.append(int(got["admit"].sum()))
    # more budget, more admitted accesses; the last admits every positive-score episode
    assert admitted == sorted(admitted) and 0 < admitted[0] < admitted[-1]


def test_a_finished_build_is_reused_only_where_it_serves(table, tmp_path: Path) -> None:
    from flashml.systems.baleen.episodes.core import EpisodeParams, build, reusable
    from flashml.systems.baleen.opt import opt_ranking

    path, rows = table
    params = EpisodeParams(eviction_age_s=5400.0, target_write_rate_mbps=30.0,
                           accesses_per_episode=6)
    built = build(path, tmp_path / "b", params, engine="polars", plot=False)
    assert reusable(built.out, params).summary == built.summary
    assert reusable(built.out, EpisodeParams(5400.0, 30.0, 4)) is not None  # K <= 6's labels
    assert reusable(built.out, EpisodeParams(5400.0, 30.0, 12)) is None  # labels too short
    assert reusable(built.out, EpisodeParams(5401.0, 30.0, 6)) is None
    assert reusable(built.out, EpisodeParams(5400.0, 31.0, 6)) is None  # labels depend on it
    assert reusable(tmp_path / "nothing", params) is None and reusable(None, params) is None
    # OPT's ranking depends on neither K nor the target: any build at the eviction age
    fresh = {k: v.copy() for k, v in opt_ranking(path, tmp_path / "fresh", 5400.0,
                                                   rows)(25.0).items()}
    reused = opt_ranking(path, tmp_path / "unused", 5400.0, rows, built=built.out)(25.0)
    assert not (tmp_path / "unused").exists()
    for name in fresh:
        assert np.array_equal(fresh[name], reused[name])
