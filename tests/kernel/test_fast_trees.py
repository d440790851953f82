"""compiler/fast_trees.py: the branch-free evaluator gives LightGBM's scores bit for bit.

Two independent checks: the evaluator's tables, walked in numpy (any CPU), against
LightGBM's raw scores; and the compiled policy.so with the fast evaluator (used where the
CPU has AVX-512 VBMI) and without it (TL2cgen only), both against LightGBM, on held-out
rows and on rows that sit exactly on, just below and just above every split threshold."""

from __future__ import annotations

import ctypes
import json
import math
from pathlib import Path

import lightgbm as lgb
import numpy as np
import pytest

from flashml.compiler.build import compile_policy
from flashml.compiler.bundle import round_range, save_policy_models, when_matrix
from flashml.compiler.fast_trees import cpu_has_fast_trees, plan, reference_margin
from flashml.compiler.loader import load_policy
from flashml.compiler.wrapper import margin_band
from flashml.features.contract import contract
from flashml.features.online import feature_matrix

from conftest import run_cli
from demo_policy import demo_trace, split_by_block, threshold_edge_rows, train_demo_models


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
    # a 15-leaf model too: each table width (16, 32, 64 lanes) is compiled and checked
    b["range_end"] = train_demo_models(df, num_trees=30, num_leaves=15, rows=train)["range_end"]
    # and tree counts that leave the last group of a vector part-filled (2 trees of 32 lanes,
    # 4 of 16 share one vector): 29 x 31 leaves, 30 x 15 leaves above
    b["when"] = train_demo_models(df, num_trees=29, num_leaves=31, rows=train)["when"]
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
    return threshold_edge_rows(ft.thresholds, base)


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
    widths = {n: plan(_treelite(b)).width for n, b in boosters.items()}
    assert widths == {"admission": 64, "range_start": 32, "range_end": 16, "when": 32}
    xr = rows[:, contract().indices("range")]
    np.testing.assert_array_equal(reference_margin(plan(_treelite(boosters["range_end"])), xr),
                                  boosters["range_end"].predict(xr, raw_score=True))


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
    assert all(m["evaluators"] == ["fast_trees", "compact"] for m in fast.values()), fast
    assert all(m["evaluators"] == ["compact"] and "--no-fast-trees" in m["fast_trees"]
               for m in portable.values())
    if not cpu_has_fast_trees():
        print("this CPU has no AVX-512 VBMI: both bundles ran TL2cgen's code")


def assert_decide_equals_separate_calls(path: Path, rows: np.ndarray) -> None:
    """flashml_policy_decide == the separate ABI calls with the .so's own thresholds."""
    pol = load_policy(path)
    flags, first, last = pol.decisions(rows)
    admit = pol.admit_scores(rows) >= pol.admit_threshold
    prefetch = admit & (pol.when_scores(rows) >= pol.when_threshold)
    start, end = pol.prefetch_ranges(rows)
    np.testing.assert_array_equal(flags, admit * 1 + prefetch * 2, err_msg=str(path))
    np.testing.assert_array_equal(first, np.where(prefetch, start, -1), err_msg=str(path))
    np.testing.assert_array_equal(last, np.where(prefetch, end, -1), err_msg=str(path))
    assert 0 < admit.mean() < 1 and 0 < prefetch.sum() < admit.sum(), (admit.mean(),
                                                                        prefetch.mean())


def test_decide_equals_the_separate_calls(bundles, boosters, data) -> None:
    _, x, _, held = data
    ft = plan(_treelite(boosters["admission"]))
    rows = np.vstack([x[held[:3000]], edge_rows(ft, x[held[:50]])])
    for path in bundles.values():
        assert_decide_equals_separate_calls(path, rows)


def test_decide_at_thresholds_equal_to_scores(work, bundles, boosters, data) -> None:
    """Thresholds set to scores that rows really have: those rows' margins fall inside the
    band where decide applies the sigmoid, and the >= must still hold exactly."""
    _, x, _, held = data
    rows = x[held[:2000]]
    pol = load_policy(bundles["fast"])
    adm = pol.admit_scores(rows)
    admit_thr = float(np.quantile(adm, 0.4, method="nearest"))
    when = pol.when_scores(rows[adm >= admit_thr])
    when_thr = float(np.quantile(when, 0.5, method="nearest"))
    models = save_policy_models(work / "models-edge", boosters, admit_threshold=admit_thr,
                                when_threshold=when_thr, eviction_age_s=3600.0,
                                target_write_rate_mbps=35.599)
    for fast in (True, False):
        out = work / f"policy-edge-{fast}"
        compile_policy(out, model_dir=models, fast=fast)
        assert (load_policy(out).admit_scores(rows) == admit_thr).any()
        assert_decide_equals_separate_calls(out, rows)


@pytest.mark.parametrize("thr", [1e-300, 1e-12, 0.01, 0.3, 0.5, 0.9, 1 - 1e-6, 1 - 1e-12])
@pytest.mark.parametrize("alpha", [1.0, 0.25, 3.0])
def test_margin_band_brackets_the_sigmoid_threshold(thr, alpha) -> None:
    lo, hi = margin_band("sigmoid", alpha, thr)

    def sig(m: float) -> float:  # as C: exp overflows to inf, the score to 0
        with np.errstate(over="ignore"):
            return float(1.0 / (1.0 + np.exp(-alpha * m)))

    if math.isnan(lo):  # no safe band: decide always applies the sigmoid
        assert math.isnan(hi) and thr > 1 - 1e-8
        return
    assert lo < hi and hi - lo < 1e-3 * max(1.0, abs(hi))
    for m in np.linspace(hi, hi + 50, 200):
        assert sig(m) >= thr
    for m in np.linspace(lo - 50, lo, 200):
        assert sig(m) < thr
    assert margin_band("identity", 1.0, thr) == (thr, thr)
    for bad in (0.0, 1.0, -0.5, 2.0):
        assert all(math.isnan(v) for v in margin_band("sigmoid", alpha, bad))


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
    # the compiler keeps such a model on the portable evaluator, still exact
    models = save_policy_models(work / "models-big", {**boosters, "admission": big},
                                admit_threshold=0.5, when_threshold=0.5,
                                eviction_age_s=3600.0, target_write_rate_mbps=35.599)
    m = compile_policy(work / "policy-big", model_dir=models)
    assert m["models"]["admission"]["evaluators"] == ["compact"]
    assert "leaves" in m["models"]["admission"]["fast_trees"]
    assert m["models"]["when"]["evaluators"] == ["fast_trees", "compact"]
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
    assert m["models"]["when"]["evaluators"] == ["fast_trees", "compact"]
    rows = x[held[:500]]
    s, e = round_range(boosters["range_start"].predict(rows[:, c.indices("range")]),
                       boosters["range_end"].predict(rows[:, c.indices("range")]))
    want = const.predict(when_matrix(rows, s, e))
    np.testing.assert_array_equal(load_policy(work / "policy-const").when_scores(rows), want)


@pytest.mark.parametrize("missing", ["nan", "none"])
def test_emitted_c_follows_lightgbm_on_missing_values(tmp_path, missing) -> None:
    """emit_c's code alone (compiled here, called through ctypes) against LightGBM on rows
    with NaN in every feature in turn and in runs, for both missing-value rules: trained with
    NaNs (each split's learned default side: the two-bin path) and without (NaN read as 0.0,
    whose bin is not 0 where a feature has negative thresholds)."""
    if not cpu_has_fast_trees():
        pytest.skip("this CPU has no AVX-512 VBMI: emit_c's code cannot run here "
                    "(the numpy tables are checked by test_tables_reproduce_lightgbm_raw_scores)")
    import subprocess

    import treelite

    from flashml.compiler.fast_trees import emit_c

    rng = np.random.default_rng(3)
    x = rng.normal(size=(4000, 6))
    y = x[:, 0] - 2 * (x[:, 1] > 0.3) + x[:, 2] * x[:, 3] + 0.1 * rng.normal(size=4000)
    if missing == "nan":
        x[rng.random(x.shape) < 0.2] = np.nan
        # missing values that carry signal: their learned side differs between splits
        y = np.where(np.isnan(x[:, 0]), 3.0, y) - np.where(np.isnan(x[:, 2]), 2.0, 0.0)
    booster = lgb.train({"objective": "regression", "num_leaves": 15, "verbose": -1,
                         "seed": 0, "num_threads": 2, "deterministic": True},
                        lgb.Dataset(x, y), num_boost_round=12)
    ft = plan(treelite.frontend.from_lightgbm(booster))
    assert not isinstance(ft, str), ft
    assert (ft.nan_right is not None) == (missing == "nan")
    if missing == "none":
        assert any(len(t) and t[0] < 0.0 for t in ft.thresholds)  # NaN's bin (of 0.0) > 0
    src = tmp_path / "m.c"
    src.write_text(emit_c(ft, "m") + "\n__attribute__((visibility(\"default\"))) "
                   "double m_call(const double *x) { return m(x); }\n")
    so = tmp_path / "m.so"
    subprocess.run(["cc", "-std=c11", "-O2", "-fPIC", "-shared", "-fvisibility=hidden",
                    "-o", str(so), str(src)], check=True)
    fn = ctypes.CDLL(str(so)).m_call
    fn.restype = ctypes.c_double
    fn.argtypes = [ctypes.POINTER(ctypes.c_double)]
    base = np.nan_to_num(x[:40], nan=0.5)
    rows = [base]
    for f in range(x.shape[1]):  # NaN in one feature, and from it to the last (a run)
        one, run = base.copy(), base.copy()
        one[:, f] = np.nan
        run[:, f:] = np.nan
        rows += [one, run]
    rows = np.ascontiguousarray(np.vstack(rows + [edge_rows(ft, base)]))
    got = np.array([fn(r.ctypes.data_as(ctypes.POINTER(ctypes.c_double))) for r in rows])
    np.testing.assert_array_equal(got, booster.predict(rows, raw_score=True))
