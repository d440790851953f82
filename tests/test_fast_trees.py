"""compiler/fast_trees.py: the branch-free evaluator gives LightGBM's scores bit for bit.

Two independent checks: the evaluator's tables, walked in numpy (any CPU), against
LightGBM's raw scores; and the compiled policy.so with the fast evaluator (used where the
CPU has AVX-512 VBMI) and without it (TL2cgen only), both against LightGBM, on held-out
rows and on rows that sit exactly on, just below and just above every split threshold."""

from __future__ import annotations

import ctypes
import json
from pathlib import Path

import lightgbm as lgb
import numpy as np
import pytest

from flashml.compiler.build import compile_policy
from flashml.compiler.bundle import round_range, save_policy_models, when_matrix
from flashml.compiler.demo import demo_trace, split_by_block, train_demo_models
from flashml.compiler.fast_trees import cpu_has_fast_trees, plan, reference_margin
from flashml.compiler.loader import load_policy
from flashml.features.contract import contract
from flashml.features.online import feature_matrix

from conftest import run_cli


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fast_trees")


@pytest.fixture(scope="module")
def data(work):
    df = demo_trace(work / "trace", accesses=60_000, seed=5)
    train, held = split_by_block(df)
    return df, feature_matrix(df), train, held


@pytest.fixture(scope="module")
def boosters(data):
    df, x, train, _ = data
    b = train_demo_models(df, num_trees=30, num_leaves=31, rows=train)
    y = (np.arange(len(x)) % 7 == 0) | (x[:, 6] > 1)  # a label that uses the counts
    params = {"objective": "binary", "num_leaves": 63, "learning_rate": 0.1,
              "min_data_in_leaf": 5, "verbose": -1, "seed": 0, "num_threads": 2,
              "deterministic": True}
    b["admission"] = lgb.train(params, lgb.Dataset(x[train], y[train].astype(int),
                                                   feature_name=contract().names),
                               num_boost_round=80)
    return b


def _treelite(booster):
    import treelite

    return treelite.frontend.from_lightgbm(booster)


def edge_rows(ft, base: np.ndarray) -> np.ndarray:
    """For every feature and each of its thresholds t: rows with the feature at t, just
    below and just above it; plus NaN, +inf and -inf in every feature."""
    rows = []
    for f, ts in enumerate(ft.thresholds):
        for t in ts:
            for v in (t, np.nextafter(t, -np.inf), np.nextafter(t, np.inf)):
                r = base[len(rows) % len(base)].copy()
                r[f] = v
                rows.append(r)
        for v in (np.nan, np.inf, -np.inf, 0.0, -0.0):
            r = base[len(rows) % len(base)].copy()
            r[f] = v
            rows.append(r)
    return np.array(rows)


def test_tables_reproduce_lightgbm_raw_scores(boosters, data) -> None:
    _, x, _, held = data
    adm = boosters["admission"]
    ft = plan(_treelite(adm))
    assert not isinstance(ft, str), ft
    assert ft.num_trees == 80 and ft.doublings >= 3
    assert max(len(t) for t in ft.thresholds) > 20  # real binning, not a toy
    rows = np.vstack([x[held[:3000]], edge_rows(ft, x[held[:50]])])
    want = adm.predict(rows, raw_score=True)
    got = reference_margin(ft, rows)
    np.testing.assert_array_equal(got, want)  # bit for bit


@pytest.fixture(scope="module")
def bundles(work, boosters) -> dict[str, Path]:
    models = save_policy_models(work / "models", boosters, admit_threshold=0.5,
                                when_threshold=0.5, eviction_age_s=3600.0,
                                target_write_rate_mbps=35.599)
    out = {"fast": work / "policy-fast", "portable": work / "policy-portable"}
    compile_policy(out["fast"], model_dir=models)
    # the portable bundle as a user asks for it
    run_cli("compile", "--model-dir", models, "-o", out["portable"], "--no-fast-trees",
            "--no-log", check=True)
    return out


def test_fast_and_portable_policy_so_equal_lightgbm(bundles, boosters, data) -> None:
    _, x, _, held = data
    ft = plan(_treelite(boosters["admission"]))
    rows = np.vstack([x[held[:3000]], edge_rows(ft, x[held[:50]])])
    c = contract()
    want_adm = boosters["admission"].predict(rows)
    xr = rows[:, c.indices("range")]
    want_s, want_e = round_range(boosters["range_start"].predict(xr),
                                 boosters["range_end"].predict(xr))
    want_when = boosters["when"].predict(when_matrix(rows, want_s, want_e))
    for name, path in bundles.items():
        pol = load_policy(path)
        ctypes.CDLL(str(path / "policy.so")).flashml_policy_prefetch()  # a hint: no effect
        np.testing.assert_array_equal(pol.admit_scores(rows), want_adm, err_msg=name)
        got_s, got_e = pol.prefetch_ranges(rows)
        np.testing.assert_array_equal(got_s, want_s, err_msg=name)
        np.testing.assert_array_equal(got_e, want_e, err_msg=name)
        np.testing.assert_array_equal(pol.when_scores(rows), want_when, err_msg=name)
    fast = json.loads((bundles["fast"] / "manifest.json").read_text())["models"]
    portable = json.loads((bundles["portable"] / "manifest.json").read_text())["models"]
    assert all(m["evaluators"] == ["fast_trees", "tl2cgen"] for m in fast.values()), fast
    assert all(m["evaluators"] == ["tl2cgen"] and "--no-fast-trees" in m["fast_trees"]
               for m in portable.values())
    if not cpu_has_fast_trees():
        print("this CPU has no AVX-512 VBMI: both bundles ran TL2cgen's code")


def test_plan_refuses_what_it_cannot_evaluate(work, boosters, data) -> None:
    _, x, train, held = data
    y = np.random.default_rng(0).integers(0, 2, len(x))  # noise: trees grow every leaf
    big = lgb.train({"objective": "binary", "num_leaves": 100, "min_data_in_leaf": 2,
                     "verbose": -1, "num_threads": 2},
                    lgb.Dataset(x[train], y[train], feature_name=contract().names),
                    num_boost_round=5)
    assert max(t["num_leaves"] for t in big.dump_model()["tree_info"]) > 64
    why = plan(_treelite(big))
    assert isinstance(why, str) and "leaves" in why, why
    cat = lgb.train({"objective": "binary", "num_leaves": 15, "verbose": -1,
                     "num_threads": 2, "min_data_per_group": 5, "cat_smooth": 1},
                    lgb.Dataset(x[train], y[train], feature_name=contract().names,
                                categorical_feature=["user"]),
                    num_boost_round=5)
    assert "categorical" in plan(_treelite(cat))
    # the compiler keeps such a model on TL2cgen, still exact
    models = save_policy_models(work / "models-big", {**boosters, "admission": big},
                                admit_threshold=0.5, when_threshold=0.5,
                                eviction_age_s=3600.0, target_write_rate_mbps=35.599)
    m = compile_policy(work / "policy-big", model_dir=models)
    assert m["models"]["admission"]["evaluators"] == ["tl2cgen"]
    assert "leaves" in m["models"]["admission"]["fast_trees"]
    assert m["models"]["when"]["evaluators"] == ["fast_trees", "tl2cgen"]
    rows = x[held[:2000]]
    np.testing.assert_array_equal(load_policy(work / "policy-big").admit_scores(rows),
                                  big.predict(rows))


def test_constant_model_has_no_splits(work, boosters, data) -> None:
    """ML-When is a constant regressor when its labels had one class: one-leaf trees, no
    thresholds at all. The fast evaluator still gives LightGBM's value."""
    _, x, train, held = data
    c = contract()
    xw = np.zeros((len(train), len(c.model_features("when"))))
    const = lgb.train({"objective": "regression", "verbose": -1, "num_threads": 2},
                      lgb.Dataset(xw, np.full(len(train), 0.25),
                                  feature_name=c.model_features("when")),
                      num_boost_round=3)
    ft = plan(_treelite(const))
    assert not isinstance(ft, str), ft
    assert all(len(t) == 0 for t in ft.thresholds)
    models = save_policy_models(work / "models-const", {**boosters, "when": const},
                                admit_threshold=0.5, when_threshold=0.5,
                                eviction_age_s=3600.0, target_write_rate_mbps=35.599)
    m = compile_policy(work / "policy-const", model_dir=models)
    assert m["models"]["when"]["evaluators"] == ["fast_trees", "tl2cgen"]
    rows = x[held[:500]]
    s, e = round_range(boosters["range_start"].predict(rows[:, c.indices("range")]),
                       boosters["range_end"].predict(rows[:, c.indices("range")]))
    want = const.predict(when_matrix(rows, s, e))
    np.testing.assert_array_equal(load_policy(work / "policy-const").when_scores(rows), want)
