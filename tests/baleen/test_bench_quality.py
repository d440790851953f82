"""bench/bench_quality.py's bars on Baleen's shipped default (by hand: no pipeline runs), its
runs read from kept summary.json files, and the rendered table's columns."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from conftest import REPO

sys.path.insert(0, str(REPO / "bench"))

import bench_quality  # noqa: E402
import render_measurements  # noqa: E402


def run(preset: str, seed: int, baleen: float, flat: float, cl: float, opt: float,
        peak_hours: list[int] | None = None) -> dict:
    return {"preset": preset, "seed": seed, "baleen_vs_rejectx": baleen,
            "baleen_vs_rejectx_mean_dt": baleen / 2, "baleen_flat_threshold_vs_rejectx": flat,
            "cachelib_ml_vs_rejectx": cl, "opt_vs_rejectx": opt,
            "opt_vs_rejectx_mean_dt": opt / 2,
            "choice": {"feature_set": "baleen", "peak_hours": peak_hours or []}}


def test_bars_by_hand() -> None:
    runs = [run("a", 0, 0.20, 0.18, 0.19, 0.35, [10, 11]), run("a", 1, 0.16, 0.16, 0.18, 0.30),
            # b: ahead of both on the mean, but one run below RejectX and under half of OPT
            run("b", 0, 0.30, 0.10, 0.10, 0.40), run("b", 1, -0.02, 0.10, 0.10, 0.40)]
    s = bench_quality.summarise(runs)
    a, b = s["bars"]["a"], s["bars"]["b"]
    assert a["at_or_above_cachelib_ml"] is False  # 0.18 vs 0.185
    assert abs(a["margin_vs_cachelib_ml"] + 0.005) < 1e-12
    assert a["at_or_above_flat_threshold"] and a["never_below_rejectx"] and a["half_of_opt"]
    assert b["at_or_above_cachelib_ml"] and b["at_or_above_flat_threshold"]
    assert not b["never_below_rejectx"] and b["runs_below_rejectx"] == 1
    assert not b["half_of_opt"] and abs(b["opt_share"] - 0.14 / 0.40) < 1e-12
    assert s["bars"]["all_met"] is False
    assert s["flat_chosen"] == 3 and s["cachelib_features_chosen"] == 0


def test_collect_reads_kept_summaries(tmp_path: Path) -> None:
    """A bench that could not finish: its runs' summary.json files make the results, the
    7-day runs' K analysis carried over from the runs before."""
    pol = {n: {"peak_dt_util": v, "mean_dt_util": v / 2, "flash_write_rate_mbps": 37.0}
           for n, v in {"rejectx": 0.30, "baleen": 0.24, "baleen_flat_threshold": 0.25,
                        "cachelib_ml": 0.245, "opt": 0.12}.items()}
    summary = {"policies": pol, "convergence": {"accesses_per_episode": 6},
               "eviction_age_s": 6000.0, "seconds": 100.0,
               "choice": {"feature_set": "baleen", "peak_hours": [10], "peak_bonus": 0.1,
                          "beats_rejectx": True}}
    for proto in ("default", "artifact"):
        d = tmp_path / proto / "region1-like-1"
        d.mkdir(parents=True)
        (d / "summary.json").write_text(json.dumps(summary))
    prev = {("artifact", "region1-like", 1): {"k_choice": {
        "loss_choosing_by_train_mean_dt": 0.0, "loss_choosing_by_train_peak_dt": 0.01}}}
    res = bench_quality.collect(tmp_path, prev)
    r = res["default"]["runs"][0]
    assert (r["preset"], r["seed"]) == ("region1-like", 1)
    assert abs(r["baleen_vs_rejectx"] - 0.2) < 1e-12
    assert abs(r["cachelib_ml_vs_rejectx"] - (1 - 0.245 / 0.30)) < 1e-12
    assert r["choice"]["peak_bonus"] == 0.1 and "k_choice" not in r
    art = res["artifact"]
    assert art["runs"][0]["analysis_from_previous_run"] is True
    assert art["k_choice"]["by_train_peak_dt"]["worse_picks"] == 1
    assert art["seeds"] == 2  # seeds 0..1 as table columns (seed 0 not run: an empty cell)
    text = render_measurements.quality_section(
        {"protocols": res, "targets": {"min_reduction": 0.1}})
    assert "| Baleen (shipped) | flat threshold | CacheLib-ML | OPT |" in text
    assert ("| `region1-like` | 20.0% | 16.7% | 18.3% | 60.0% | 0.33 | 0 of 1 | 0 / 1, 0 "
            "| missed: >= 0.5 of OPT |") \
        in text
