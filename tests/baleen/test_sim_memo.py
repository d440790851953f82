"""`policies.baselines.simulate_threshold`: a threshold simulation of the same table, arrays
(the same objects) and config is run once; another config, another array (even an equal
copy) or a freed one runs the simulator again, and a search started on a measured point
gives the figures of a fresh simulation."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from flashml.simulation import SimConfig, simulate
from flashml.systems.baleen import baselines

from demo_policy import demo_trace


@pytest.fixture(scope="module")
def df(tmp_path_factory):  # type: ignore[no-untyped-def]
    return demo_trace(tmp_path_factory.mktemp("memo"), accesses=20_000, seed=5)


@pytest.fixture
def calls(monkeypatch) -> list[float]:
    seen: list[float] = []

    def counting(table, cfg, **arrays):  # type: ignore[no-untyped-def]
        seen.append(cfg.threshold)
        return simulate(table, cfg, **arrays)

    monkeypatch.setattr(baselines, "simulate", counting)
    return seen


def _figures(res) -> dict:  # type: ignore[no-untyped-def]
    return {k: v for k, v in res.metrics.items() if k != "wall_s"}


def _cfg() -> SimConfig:
    return SimConfig(cache_gb=0.05, admission="threshold", threshold=0.5, warmup_s=0.0)


def test_the_same_simulation_runs_once(df, calls) -> None:
    score = np.random.default_rng(0).random(len(df))
    arrays = {"score": score}
    a = baselines.simulate_threshold(df, _cfg(), arrays)
    b = baselines.simulate_threshold(df, _cfg(), {"score": score})  # another dict, same array
    assert b is a and len(calls) == 1
    baselines.simulate_threshold(df, _cfg().replace(threshold=0.4), arrays)
    assert len(calls) == 2
    c = baselines.simulate_threshold(df, _cfg(), {"score": score.copy()})  # equal, not same
    assert len(calls) == 3 and _figures(c) == _figures(a)
    fresh = simulate(df, _cfg(), score=score)
    assert _figures(a) == _figures(fresh)


def test_a_freed_array_is_not_kept(df, calls) -> None:
    score = np.random.default_rng(1).random(len(df))
    baselines.simulate_threshold(df, _cfg(), {"score": score})
    n = len(baselines._RECENT)
    del score
    gc.collect()
    other = np.random.default_rng(2).random(len(df))  # may take the freed array's id
    baselines.simulate_threshold(df, _cfg(), {"score": other})
    assert len(calls) == 2
    assert len(baselines._RECENT) <= n  # the freed array's entry went


def test_a_search_started_on_a_measured_point_needs_no_simulation(df, calls) -> None:
    score = np.random.default_rng(3).random(len(df))
    base = SimConfig(cache_gb=0.05, warmup_s=0.0)
    first = baselines.tune_threshold(df, base, 5.0, {"score": score})
    n = len(calls)
    again = baselines.tune_threshold(df, base, 5.0, {"score": score}, known=first.points)
    assert len(calls) == n  # its on-target point was just simulated
    assert again.knob == first.knob and _figures(again.result) == _figures(first.result)
