"""The job's memory budget (flashml/systems/baleen/memory.py): when the learned scores are
held, and finished loops' scores kept in mapped files with the same values."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow.parquet as pq

from flashml.systems.baleen import memory
from flashml.systems.baleen.memory import (
    HELD_SCORES,
    JOB_BASE_BYTES,
    JOB_BYTES_PER_ACCESS_MAPPED,
    SCORE_BYTES_PER_ACCESS,
    SCORES_SHARE,
    budget_bytes,
    scores_fit_in,
    spilled,
)

from conftest import REPO, seed_mlflow_store


def test_scores_fit_while_the_held_scores_take_their_share_of_the_budget() -> None:
    """... of what the budget leaves beyond the job's fixed part."""
    rows = 1_000_000
    need = rows * SCORE_BYTES_PER_ACCESS * HELD_SCORES
    budget = JOB_BASE_BYTES + int(need / SCORES_SHARE)
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
    arrays = {"score": rng.random(1000),
              "prefetch_start": rng.integers(0, 64, 1000).astype(np.int16),
              "prefetch_end": rng.integers(0, 64, 1000).astype(np.int16),
              "when_score": rng.random(1000)}
    got = spilled(arrays, tmp_path / "scores")
    assert set(got) == set(arrays)
    for name, a in arrays.items():
        assert isinstance(got[name], np.memmap) and not got[name].flags.writeable
        assert got[name].dtype == a.dtype
        np.testing.assert_array_equal(got[name], a)
    again = spilled(got, tmp_path / "other")  # mapped ones are kept, not written again
    assert all(again[k] is got[k] for k in got) and not list((tmp_path / "other").glob("*"))
    assert memory.SCORE_BYTES_PER_ACCESS == sum(a.itemsize for a in arrays.values())


def test_a_bounded_run_gives_the_figures_of_one_that_holds_its_scores(tmp_path: Path) -> None:
    """The main job with a `--memory` budget its scores do not fit in (the main loop's scores
    kept in mapped files, the sweep's loops one at a time) writes the summary of the same job
    with them held: every policy's figures, the sweep's trials and its choice."""
    def run(out: Path, *extra: str) -> dict:
        env = {**os.environ, "FLASHML_HOME": str(seed_mlflow_store(tmp_path / "home")),
               "MLFLOW_TRACKING_URI": ""}
        env.pop("FLASHML_OPTUNA_STORAGE", None)
        p = subprocess.run(
            [sys.executable, "-m", "flashml.cli", "pipeline", "run", "--accesses", "20000",
             "--sweep-trials", "2", "--no-register", "--no-compile", "--max-iterations", "2",
             "--out", str(out), *extra], cwd=REPO, env=env, text=True, capture_output=True,
            timeout=1800)
        assert p.returncode == 0, p.stderr[-3000:]
        return json.loads((out / "summary.json").read_text())

    held = run(tmp_path / "held")
    rows = pq.ParquetFile(tmp_path / "held" / "accesses.parquet").metadata.num_rows
    # room for the job's estimate with its scores on disk, not for six policies' scores
    gib = (JOB_BASE_BYTES + rows * (JOB_BYTES_PER_ACCESS_MAPPED + 50)) / 2**30
    assert not scores_fit_in(rows, int(gib * 2**30))
    bounded = run(tmp_path / "bounded", "--memory", f"{gib:.9f}")
    assert sorted(p.name for p in (tmp_path / "bounded" / "work" / "baleen" / "scores")
                  .glob("*.npy")) == ["prefetch_end.npy", "prefetch_start.npy", "score.npy",
                                      "when_score.npy"]
    assert not (tmp_path / "held" / "work" / "baleen" / "scores").exists()

    def same(x):  # the summary's figures, not its timings
        if isinstance(x, dict):
            return {k: same(v) for k, v in x.items()
                    if not k.endswith(("wall_s", "seconds", "timings_s", "peak_rss_mb", "study"))}
        return [same(v) for v in x] if isinstance(x, list) else x

    keys = ("policies", "chosen_write_rate_mbps", "chosen_tco", "sweep")
    bounded, held = ({k: s[k] for k in keys} for s in (bounded, held))
    assert same(bounded) == same(held)
