"""The job's memory budget (flashml/systems/baleen/memory.py): when the learned scores are
held, and finished loops' scores kept in mapped files with the same values."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np

from flashml.systems.baleen import memory
from flashml.systems.baleen.memory import (
    HELD_SCORES,
    SCORE_BYTES_PER_ACCESS,
    SCORES_SHARE,
    budget_bytes,
    scores_fit_in,
    spilled,
)


def test_scores_fit_while_the_held_scores_take_their_share_of_the_budget() -> None:
    rows = 1_000_000
    need = rows * SCORE_BYTES_PER_ACCESS * HELD_SCORES
    budget = int(need / SCORES_SHARE)
    assert scores_fit_in(rows, budget)
    assert not scores_fit_in(rows, budget - 2)
    # 10 M accesses fit in this machine's 23 GB; 100 M in a 12 GiB budget do not
    assert scores_fit_in(10_000_000, 23 * 10**9)
    assert not scores_fit_in(100_000_000, 12 * 2**30)


def test_the_budget_is_the_setting_else_the_memory_available_once(monkeypatch) -> None:
    from flashml.systems.baleen.episodes import core

    run = SimpleNamespace(cache={})
    assert budget_bytes(run, SimpleNamespace(memory_gib=1.5)) == 3 * 2**29
    monkeypatch.setattr(core, "available_memory_bytes", lambda: 123_456)
    assert budget_bytes(run, SimpleNamespace(memory_gib=0.0)) == 123_456
    monkeypatch.setattr(core, "available_memory_bytes", lambda: 1)  # the job has grown
    assert budget_bytes(run, SimpleNamespace(memory_gib=0.0)) == 123_456


def test_spilled_scores_are_the_same_values_mapped_read_only(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    arrays = {"score": rng.random(1000), "prefetch_start": rng.integers(0, 64, 1000),
              "prefetch_end": rng.integers(0, 64, 1000), "when_score": rng.random(1000)}
    got = spilled(arrays, tmp_path / "scores")
    assert set(got) == set(arrays)
    for name, a in arrays.items():
        assert isinstance(got[name], np.memmap) and not got[name].flags.writeable
        assert got[name].dtype == a.dtype
        np.testing.assert_array_equal(got[name], a)
    again = spilled(got, tmp_path / "other")  # mapped ones are kept, not written again
    assert all(again[k] is got[k] for k in got) and not list((tmp_path / "other").glob("*"))
    assert memory.SCORE_BYTES_PER_ACCESS == sum(a.itemsize for a in arrays.values())
