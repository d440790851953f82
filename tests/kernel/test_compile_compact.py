"""compiler/compact_trees.py: the compact evaluator (the default portable path of policy.so)
gives LightGBM's scores, and TL2cgen's code's, bit for bit.

Three levels: the evaluator's tables walked in numpy; its C alone (emit_c, compiled here and
called through ctypes) against LightGBM under both missing-value rules, on rows at, just below
and just above every threshold, with NaN in every feature and in runs, infinities, signed
zeros and numbers whose low 32 bits are all ones; and whole policy bundles compiled with
`--portable compact` and `--portable tl2cgen` (fast_trees off, so the portable path runs on
any CPU) against each other and LightGBM, through every ABI call."""

from __future__ import annotations

import ctypes
import json
import subprocess
from pathlib import Path

import lightgbm as lgb
import numpy as np
import pytest

from flashml.compiler.build import PORTABLE_DEFAULT, PORTABLE_EVALUATORS, compile_policy
from flashml.compiler.bundle import round_range, save_policy_models, when_matrix
from flashml.compiler.compact_trees import LEAF_BASE, emit_c, plan, reference_margin
from flashml.compiler.loader import load_policy
from flashml.errors import UserError
from flashml.features.contract import contract
from flashml.features.online import feature_matrix

from conftest import run_cli
from demo_policy import (
    DEMO_PARAMS,
    demo_trace,
    split_by_block,
    threshold_edge_rows,
    train_demo_models,
)


def _treelite(booster: lgb.Booster):
    import treelite

    return treelite.frontend.from_lightgbm(booster)


def low_word_ones(x: np.ndarray) -> np.ndarray:
    """x with the low 32 bits of every double set: numbers still (NaN stays NaN), the bit
    pattern TL2cgen's own missing-value test (an int over the double's low half) took for
    missing."""
    b = np.ascontiguousarray(x, dtype=np.float64).view(np.uint64) | np.uint64(0xFFFFFFFF)
    out = b.view(np.float64)
    assert np.array_equal(np.isnan(out), np.isnan(x))
    return out


def edge_rows(ct, base: np.ndarray) -> np.ndarray:
    """For every feature and each of its thresholds t: rows with the feature at t, just
    below and just above it; plus NaN, +-inf, +-0.0 in every feature, NaN in runs of features
    (f to the last) and base rows with their low words all ones."""
    return np.vstack([threshold_edge_rows(ct.thresholds, base, nan_tail=True),
                      low_word_ones(base)])


def c_scorer(ct, tmp: Path, name: str = "m"):
    """emit_c's code alone as a shared object: (margin, score) callables over rows."""
    src = tmp / f"{name}.c"
    src.write_text(emit_c(ct, name) + f"""
__attribute__((visibility("default"))) double {name}_call_margin(const double *x) {{
    return {name}_margin(x);
}}
__attribute__((visibility("default"))) double {name}_call(const double *x) {{ return {name}(x); }}
""")
    so = tmp / f"{name}.so"
    subprocess.run(["cc", "-std=c11", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-Wall",
                    "-Wextra", "-Werror", "-o", str(so), str(src), "-lm"], check=True)
    lib = ctypes.CDLL(str(so))

    def fn(sym: str):
        f = getattr(lib, sym)
        f.restype = ctypes.c_double
        f.argtypes = [ctypes.POINTER(ctypes.c_double)]

        def over(rows: np.ndarray) -> np.ndarray:
            rows = np.ascontiguousarray(rows, dtype=np.float64)
            p = ctypes.POINTER(ctypes.c_double)
            return np.array([f(r.ctypes.data_as(p)) for r in rows])
        return over

    return fn(f"{name}_call_margin"), fn(f"{name}_call")


@pytest.mark.parametrize("objective", ["regression", "binary"])
@pytest.mark.parametrize("missing", ["nan", "none"])
def test_emitted_c_equals_lightgbm(tmp_path, missing, objective) -> None:
    """Both missing-value rules: trained with NaNs (each split's learned default side: bins
    f and F + f differ for NaN) and without (NaN goes where 0.0 goes, and features have
    negative thresholds, so 0.0's bin is not 0); 13 trees (4 interleaved + a tail of 1)."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(4000, 6))
    y = x[:, 0] - 2 * (x[:, 1] > 0.3) + x[:, 2] * x[:, 3] + 0.1 * rng.normal(size=4000)
    if missing == "nan":
        x[rng.random(x.shape) < 0.2] = np.nan
        y = np.where(np.isnan(x[:, 0]), 3.0, y) - np.where(np.isnan(x[:, 2]), 2.0, 0.0)
    label = (y > 0).astype(int) if objective == "binary" else y
    booster = lgb.train({"objective": objective, "num_leaves": 15, "verbose": -1, "seed": 0,
                         "num_threads": 2, "deterministic": True},
                        lgb.Dataset(x, label), num_boost_round=13)
    ct = plan(_treelite(booster))
    assert not isinstance(ct, str), ct
    assert ct.num_trees == 13
    defaults = ct.nodes[:, :, 0] >= ct.num_features  # nodes that send NaN right
    if missing == "none":
        assert any(len(t) and t[0] < 0.0 for t in ct.thresholds)
    else:
        assert defaults.any() and (~defaults).any()
    rows = np.vstack([x[:500], edge_rows(ct, np.nan_to_num(x[:40], nan=0.5))])
    raw = booster.predict(rows, raw_score=True)
    np.testing.assert_array_equal(reference_margin(ct, rows), raw)
    margin, score = c_scorer(ct, tmp_path)
    np.testing.assert_array_equal(margin(rows), raw)
    np.testing.assert_array_equal(score(rows), booster.predict(rows))


def test_constant_and_single_tree_models(tmp_path) -> None:
    """One-leaf trees (no thresholds at all: ML-When with one label class) and a model of one
    tree (no interleaved group, only the tail)."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2000, 4))
    const = lgb.train({"objective": "regression", "verbose": -1, "num_threads": 2},
                      lgb.Dataset(x, np.full(len(x), 0.25)), num_boost_round=5)
    one = lgb.train({"objective": "regression", "num_leaves": 7, "verbose": -1,
                     "num_threads": 2}, lgb.Dataset(x, x[:, 0] * 2 + x[:, 1]),
                    num_boost_round=1)
    for name, b in (("cst", const), ("one", one)):
        ct = plan(_treelite(b))
        assert not isinstance(ct, str), ct
        rows = np.vstack([x[:200], edge_rows(ct, x[:20])])
        np.testing.assert_array_equal(c_scorer(ct, tmp_path, name)[0](rows),
                                      b.predict(rows, raw_score=True), err_msg=name)
    assert all(len(t) == 0 for t in plan(_treelite(const)).thresholds)


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("compile_compact")


@pytest.fixture(scope="module")
def data(work):
    df = demo_trace(work / "trace", accesses=40_000, seed=7)
    train, held = split_by_block(df)
    return df, feature_matrix(df), train, held


@pytest.fixture(scope="module")
def boosters(data):
    df, _, train, _ = data
    b = train_demo_models(df, num_trees=22, num_leaves=31, rows=train)
    # a 15-leaf, 21-tree model too (another node stride, a tail of one tree)
    b["range_end"] = train_demo_models(df, num_trees=21, num_leaves=15, rows=train)["range_end"]
    return b


@pytest.fixture(scope="module")
def bundles(work, boosters) -> dict[str, Path]:
    models = save_policy_models(work / "models", boosters, **DEMO_PARAMS)
    out = {ev: work / f"policy-{ev}" for ev in PORTABLE_EVALUATORS}
    for ev, path in out.items():  # fast_trees off: the portable path runs on every CPU
        compile_policy(path, model_dir=models, fast=False, portable=ev, log_to_mlflow=False)
    return out


def _rows(data, boosters) -> np.ndarray:
    _, x, _, held = data
    base = x[held[:3000]].copy()
    nan = base[:500].copy()
    nan[np.random.default_rng(0).random(nan.shape) < 0.3] = np.nan
    ct = plan(_treelite(boosters["admission"]))
    return np.vstack([base, nan, edge_rows(ct, base[:50])])


def test_policy_so_compact_equals_tl2cgen_and_lightgbm(bundles, boosters, data) -> None:
    rows = _rows(data, boosters)
    c = contract()
    want_adm = boosters["admission"].predict(rows)
    xr = rows[:, c.indices("range")]
    want_s, want_e = round_range(boosters["range_start"].predict(xr),
                                 boosters["range_end"].predict(xr))
    want_when = boosters["when"].predict(when_matrix(rows, want_s, want_e))
    got = {}
    for ev, path in bundles.items():
        pol = load_policy(path)
        np.testing.assert_array_equal(pol.admit_scores(rows), want_adm, err_msg=ev)
        s, e = pol.prefetch_ranges(rows)
        np.testing.assert_array_equal(s, want_s, err_msg=ev)
        np.testing.assert_array_equal(e, want_e, err_msg=ev)
        np.testing.assert_array_equal(pol.when_scores(rows), want_when, err_msg=ev)
        got[ev] = pol.decisions(rows)
        m = json.loads((path / "manifest.json").read_text())["models"]
        assert all(i["evaluators"] == [ev] for i in m.values()), m
    for a, b in zip(got["compact"], got["tl2cgen"], strict=True):
        np.testing.assert_array_equal(a, b)
    flags = got["compact"][0]
    assert 0 < (flags & 1).mean() < 1 and (flags & 2).any()


def test_tl2cgen_takes_low_word_all_ones_for_a_number(bundles, boosters, data) -> None:
    """TL2cgen's generated test of a missing input reads an int over the low half of the
    double: a number whose low 32 bits are all ones went to every split's default side. The
    compiler rewrites the test into a NaN test; both evaluators now follow LightGBM."""
    _, x, _, held = data
    rows = low_word_ones(x[held[:2000]])
    want = boosters["admission"].predict(rows)
    for ev, path in bundles.items():
        np.testing.assert_array_equal(load_policy(path).admit_scores(rows), want, err_msg=ev)


def test_refused_models_stay_on_tl2cgen(work, boosters, data) -> None:
    """Categorical splits and trees of more than 128 leaves: the compact evaluator refuses
    them (plan says why), the compiler keeps that model on TL2cgen's code, still exact, and
    the manifest says so; the bundle's other models stay compact."""
    _, x, train, held = data
    y = np.random.default_rng(0).integers(0, 2, len(x))  # noise: trees grow every leaf
    big = lgb.train({"objective": "binary", "num_leaves": 160, "min_data_in_leaf": 2,
                     "verbose": -1, "num_threads": 2},
                    lgb.Dataset(x[train], y[train], feature_name=contract().names),
                    num_boost_round=2)
    assert max(t["num_leaves"] for t in big.dump_model()["tree_info"]) > LEAF_BASE
    why = plan(_treelite(big))
    assert isinstance(why, str) and "leaves" in why, why
    cat = lgb.train({"objective": "binary", "num_leaves": 15, "verbose": -1,
                     "num_threads": 2, "min_data_per_group": 5, "cat_smooth": 1},
                    lgb.Dataset(x[train], y[train], feature_name=contract().names,
                                categorical_feature=["user"]),
                    num_boost_round=3)
    why = plan(_treelite(cat))
    assert isinstance(why, str) and "categorical" in why, why
    models = save_policy_models(work / "models-cat", {**boosters, "admission": cat},
                                **DEMO_PARAMS)
    m = compile_policy(work / "policy-cat", model_dir=models, fast=False,
                       log_to_mlflow=False)["models"]
    assert m["admission"]["evaluators"] == ["tl2cgen"]
    assert "categorical" in m["admission"]["compact"]
    assert m["when"]["evaluators"] == ["compact"]
    rows = x[held[:2000]]
    np.testing.assert_array_equal(load_policy(work / "policy-cat").admit_scores(rows),
                                  cat.predict(rows))


def test_portable_option(work, boosters) -> None:
    models = work / "models"  # the bundles fixture's
    if not models.exists():
        save_policy_models(models, boosters, **DEMO_PARAMS)
    assert PORTABLE_DEFAULT == "compact"
    out = work / "cli-tl2cgen"
    p = run_cli("compile", "--model-dir", models, "-o", out, "--portable", "tl2cgen",
                "--no-fast-trees", "--no-log", "--json", check=True)
    m = json.loads(p.stdout)["models"]
    assert all(i["evaluators"] == ["tl2cgen"] and "--portable tl2cgen" in i["compact"]
               for i in m.values()), m
    p = run_cli("compile", "--model-dir", models, "-o", work / "cli-bad", "--portable", "fast")
    assert p.returncode == 2 and "--portable" in p.stderr and "compact" in p.stderr
    with pytest.raises(UserError, match="portable evaluator must be one of compact, tl2cgen"):
        compile_policy(work / "api-bad", model_dir=models, portable="fast")
