"""The in-house LRB (sim/src/mat/lrb.rs, `simulate_objects_lrb`): LRB's decision (64 sampled
candidates, evict the farthest predicted next access) on MAT's predictor, features and
loop; and how bench/bench_mat.py counts MAT against libCacheSim's LRB only where that LRB
trained, and renders the MAT tables of docs/systems/mat.md from the committed JSON."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from flashml.simulation import simulate_objects
from flashml.systems.mat.simulation import simulate_objects_lrb, simulate_objects_mat

from conftest import REPO

sys.path.insert(0, str(REPO / "bench"))


def skewed(n: int, objects: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    keys = np.minimum(rng.integers(0, objects, n), rng.integers(0, objects, n))
    return keys.astype(np.uint64), (1 + keys % 9 * 50).astype(np.uint64)


def test_predictions_per_eviction_equal_the_sample_size() -> None:
    """Every eviction predicts `sample_size` candidates while the cache holds more, and
    MAT on the same predictor makes a handful: the cost ratio the paper's headline is."""
    keys, sizes = skewed(30_000, 3_000, 1)
    for m in (64, 8):
        r = simulate_objects_lrb(keys, sizes, 300, "objects", predictor="oracle",
                                 sample_size=m)
        assert r["evictions"] > 1_000
        assert r["predictions"] == m * r["evictions"]
        assert r["predictions_per_eviction"] == m
    mat = simulate_objects_mat(keys, sizes, 300, "objects", predictor="oracle")
    assert mat["predictions_per_eviction"] <= 10


def test_oracle_over_the_whole_cache_is_belady() -> None:
    """With the true next access and a sample holding every cached object, the farthest
    predicted next access is Belady's victim: the same hits as Belady."""
    keys, sizes = skewed(8_000, 400, 2)
    for cap in (10, 50):
        r = simulate_objects_lrb(keys, sizes, cap, "objects", predictor="oracle")
        b = simulate_objects(keys, sizes, cap, "belady", "objects")
        assert (r["hits"], r["evictions"]) == (b["hits"], b["evictions"])


def test_seeded_and_bad_input() -> None:
    keys, sizes = skewed(5_000, 500, 3)
    a = simulate_objects_lrb(keys, sizes, 4_000, record_victims=True)
    b = simulate_objects_lrb(keys, sizes, 4_000, record_victims=True)
    assert np.array_equal(a["victims"]["key"], b["victims"]["key"])
    assert a["predictions"] == 0  # no model: a random victim, unpredicted
    with pytest.raises(ValueError, match="sample_size"):
        simulate_objects_lrb(keys, sizes, 4_000, sample_size=0)
    with pytest.raises(ValueError, match="capacity"):
        simulate_objects_lrb(keys, sizes, 0)


def _size(lrb_hits: int, lru_hits: int) -> dict:
    row = {"miss_ratio": 0.5, "byte_miss_ratio": 0.6, "predictions_per_eviction": 1.5,
           "ns_per_eviction": 100.0}
    return {"fraction": 0.05, "lcs_lrb_trained": lrb_hits != lru_hits,
            "libcachesim": {"lru": {"hits": lru_hits, "miss_ratio": 0.7,
                                    "byte_miss_ratio": 0.8},
                            "lrb": {"hits": lrb_hits, "miss_ratio": 0.4,
                                    "byte_miss_ratio": 0.65},
                            "arc": {"miss_ratio": 0.55, "byte_miss_ratio": 0.62},
                            "belady": {"miss_ratio": 0.3, "byte_miss_ratio": 0.4}},
            "extra": {"mat": row, "lrb_inhouse": {**row, "byte_miss_ratio": 0.605,
                                                  "predictions_per_eviction": 64.0,
                                                  "ns_per_eviction": 6_400.0}}}


def test_lrb_counted_only_where_it_trained() -> None:
    """libCacheSim's LRB evicts LRU's victim until its first model: a run with exactly
    LRU's hits never trained, and such points are not counted as MAT "at or below LRB"
    (the old count took three CloudPhysics points where LRB equals LRU)."""
    from bench_mat import lrb_trained, targets

    assert lrb_trained({"lru": {"hits": 10}, "lrb": {"hits": 10}}) is False
    assert lrb_trained({"lru": {"hits": 10}, "lrb": {"hits": 12}}) is True
    assert lrb_trained({"lru": {"hits": 10}}) is None
    t = targets({"a": {"sizes": [_size(10, 10), _size(12, 10)]}})
    assert t["n"] == 2 and t["lcs_lrb_trained"] == 1
    assert t["at_or_below_lcs_lrb_bytes"] == 1 and t["at_or_below_lcs_lrb_requests"] == 0
    assert t["at_or_below_lru"] == 2 and t["within_lrb_inhouse"] == 2
    assert t["fewer_predictions"] == 2
    assert t["points"][0]["prediction_ratio"] == pytest.approx(64 / 1.5)


def test_a_merge_keeps_the_earlier_timings_and_says_so() -> None:
    """Rows of a run not under the timing lock take the ns per eviction of the earlier
    result (`--timings-from`), keep their own beside them, and the docs table marks them;
    the miss ratios stay this run's."""
    import copy

    from bench_mat import docs_table, keep_timings

    earlier = {"date": "2026-01-01 00:00:00", "traces": {"a": {"sizes": [_size(12, 10)]}}}
    now = {"a": {"sizes": [copy.deepcopy(_size(12, 10))]}}
    ex = now["a"]["sizes"][0]["extra"]
    ex["mat"] |= {"ns_per_eviction": 900.0, "byte_miss_ratio": 0.59}
    ex["lrb_inhouse"]["ns_per_eviction"] = 90_000.0
    keep_timings(now, earlier)
    assert ex["mat"]["ns_per_eviction"] == 100.0 and ex["mat"]["byte_miss_ratio"] == 0.59
    assert ex["mat"]["ns_per_eviction_this_run"] == 900.0
    assert ex["lrb_inhouse"]["ns_per_eviction"] == 6_400.0
    assert ex["mat"]["ns_from"] == "the run of 2026-01-01 00:00:00"
    assert "| 100 / 6400 (earlier run) |" in docs_table(now)
    keep_timings(now, {"date": "later", "traces": {"a": {"sizes": [_size(12, 10)]}}})
    assert ex["mat"]["ns_from"] == "the run of 2026-01-01 00:00:00"  # applied once
    same = copy.deepcopy(earlier)
    keep_timings(same["traces"], earlier)  # the earlier rows themselves: left as they are
    assert same == earlier and "(earlier run)" not in docs_table(same["traces"])


def test_mat_docs_tables_are_rendered_from_the_results() -> None:
    """docs/systems/mat.md's measured tables are what bench/render_mat_docs.py renders from
    bench/results/mat.json and mat_flash.json (the flash table's ns per decision were once
    typed by hand and disagreed with the JSON)."""
    import json

    import render_mat_docs
    from bench_mat_flash import docs_table

    page = render_mat_docs.PAGE.read_text()
    for name, section in render_mat_docs.sections().items():
        assert render_mat_docs.marked(page, name) == section, (
            f"docs/systems/mat.md: the {name}.json section is stale: run "
            ".venv/bin/python bench/render_mat_docs.py --write")
    flash = json.loads((REPO / "bench" / "results" / "mat_flash.json").read_text())
    ns = round(flash["policies"]["admit_all"]["mat"]["ns_per_eviction"])
    assert f"| {ns} |" in docs_table(flash)
