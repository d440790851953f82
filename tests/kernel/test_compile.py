"""The policy compiler: exact scores, a self-contained .so, the manifest, and the simulator's
.so path giving exactly the decisions of the precomputed-score path (the CI guard that what
we ship is what we measured)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import lightgbm as lgb
import numpy as np
import pytest

from flashml.compiler.build import (
    HEADER,
    abi_functions,
    compile_policy,
    sha256_file,
)
from flashml.compiler.bundle import round_range, save_policy_models, when_matrix
from flashml.compiler.loader import load_policy, verify_bundle
from flashml.compiler.so_checks import exported_functions, readelf_needed
from flashml.features.abi import ABI_VERSION, capability_functions
from flashml.features.contract import contract
from flashml.features.online import feature_matrix
from flashml.simulation import (
    SimConfig,
    online_features,
    policy_info,
    simulate,
    simulate_policy,
)

from demo_policy import demo_trace, split_by_block, train_demo_models

TOL = 1e-6
#: The test bundle's peak schedule: the threshold is 0.15 lower in these hours (UTC).
PEAK_HOURS, PEAK_BONUS = [10, 11, 12, 13, 14, 15], 0.15


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("compile")


@pytest.fixture(scope="module")
def trace(work):
    return demo_trace(work / "trace")


@pytest.fixture(scope="module")
def split(trace):
    return split_by_block(trace)


@pytest.fixture(scope="module")
def models(work, trace, split) -> Path:
    boosters = train_demo_models(trace, num_trees=40, num_leaves=31, rows=split[0])
    return save_policy_models(work / "models", boosters, admit_threshold=0.6,
                              when_threshold=0.4, eviction_age_s=5400.0,
                              target_write_rate_mbps=35.599,
                              metrics={"auc": 0.81, "peak_dt_util": 0.5},
                              peak_hours=PEAK_HOURS, peak_bonus=PEAK_BONUS)


@pytest.fixture(scope="module")
def bundle(work, models) -> Path:
    out = work / "policy"
    compile_policy(out, model_dir=models)
    return out


def test_bundle_layout_and_manifest(bundle, models) -> None:
    assert sorted(p.name for p in bundle.iterdir()) == ["flashml_policy.h", "manifest.json",
                                                        "policy.so"]
    assert (bundle / "flashml_policy.h").read_text() == HEADER.read_text()
    m = json.loads((bundle / "manifest.json").read_text())
    assert m["abi_version"] == ABI_VERSION
    assert m["contract_hash"] == contract().hash
    assert m["sha256"] == sha256_file(bundle / "policy.so")
    assert m["size_bytes"] == (bundle / "policy.so").stat().st_size
    assert m["mlflow_run_id"] is None
    assert (m["admit_threshold"], m["when_threshold"]) == (0.6, 0.4)
    assert (m["peak_hours"], m["peak_bonus"]) == (PEAK_HOURS, PEAK_BONUS)
    assert (m["eviction_age_s"], m["target_write_rate_mbps"]) == (5400.0, 35.599)
    assert m["metrics"] == {"auc": 0.81, "peak_dt_util": 0.5}
    assert m["segments_per_block"] == 64
    assert set(m["models"]) == {"admission", "range_start", "range_end", "when"}
    assert m["models"]["admission"]["num_trees"] == 40
    assert m["models"]["admission"]["features"] == contract().names
    assert m["models"]["when"]["features"] == contract().model_features("when")
    for k in ("cc", "treelite", "tl2cgen", "lightgbm", "flashml", "compile_s"):
        assert m["build"][k], k
    assert verify_bundle(bundle) == m
    # no temporary folders left beside the output
    assert sorted(p.name for p in bundle.parent.iterdir() if p.name.startswith(".")) == []


def test_so_depends_on_libc_and_libm_only(bundle) -> None:
    so = bundle / "policy.so"
    needed = readelf_needed(so)
    assert needed, "readelf found no NEEDED entries"
    assert all(n.startswith(("libc.so", "libm.so")) for n in needed), needed
    # and exports exactly the ABI of its capabilities (admission + prefetch: every function
    # of the header but the eviction, partition and readahead ones), nothing of TL2cgen's
    assert exported_functions(so) == capability_functions(["admission", "prefetch"])
    assert exported_functions(so) == [f for f in abi_functions()
                                      if not f.startswith(("flashml_evict_",
                                                           "flashml_partition",
                                                           "flashml_readahead"))]
    assert {"flashml_policy_abi_version", "flashml_policy_num_features",
            "flashml_policy_contract_hash", "flashml_admit_score", "flashml_prefetch_range",
            "flashml_prefetch_when_score", "flashml_admit_threshold",
            "flashml_prefetch_when_threshold"} <= set(exported_functions(so))
    m = json.loads((bundle / "manifest.json").read_text())
    assert m["capabilities"] == ["admission", "prefetch"]
    assert "evict_contract_hash" not in m and "eviction" not in m


def test_identity_and_thresholds(bundle) -> None:
    info = policy_info(bundle)
    assert info == {"abi_version": ABI_VERSION, "contract_hash": contract().hash,
                    "admit_threshold": 0.6, "when_threshold": 0.4,
                    "target_write_rate_mbps": 35.599, "eviction_age_s": 5400.0,
                    "peak_hours": PEAK_HOURS, "peak_bonus": PEAK_BONUS}
    pol = load_policy(bundle)
    assert (pol.admit_threshold, pol.when_threshold) == (0.6, 0.4)
    assert (list(pol.peak_hours), pol.peak_bonus) == (PEAK_HOURS, PEAK_BONUS)


def test_decide_at_applies_the_peak_threshold(bundle, trace) -> None:
    """flashml_policy_decide_at admits score >= 0.6 off-peak and >= 0.6 - 0.15 in the peak
    hours (hour of the trace time, UTC), exactly as the scores say; decide is off-peak."""
    from flashml.systems.baleen.peak import hour_of_day

    pol = load_policy(bundle)
    x = feature_matrix(trace)
    t = trace["time"].to_numpy()
    score = pol.admit_scores(x)
    peak = np.isin(hour_of_day(t), PEAK_HOURS)
    flags, _, _ = pol.decisions(x, t)
    want = score >= np.where(peak, 0.6 - PEAK_BONUS, 0.6)
    np.testing.assert_array_equal((flags & 1).astype(bool), want)
    between = (score >= 0.6 - PEAK_BONUS) & (score < 0.6)
    assert (between & peak).sum() > 100 and (between & ~peak).sum() > 100  # both rules ran
    flat, _, _ = pol.decisions(x)
    np.testing.assert_array_equal((flat & 1).astype(bool), score >= 0.6)
    # the hour rule at the edges (one second either side of 10:00 and 16:00 UTC)
    day = 86_400.0 * 20_000
    edge = np.array([day + 10 * 3600 - 1, day + 10 * 3600, day + 16 * 3600 - 1,
                     day + 16 * 3600, day - 3600 * 14 + 1])
    row = x[np.flatnonzero(between)[:1].repeat(len(edge))]
    f, _, _ = pol.decisions(row, edge)
    assert list(f & 1) == [0, 1, 1, 0, 1]


def test_scores_equal_lightgbm_on_held_out_rows(bundle, models, trace, split) -> None:
    x = feature_matrix(trace)[split[1]]
    assert len(x) >= 5_000
    pol = load_policy(bundle)
    c = contract()
    adm = lgb.Booster(model_file=str(models / "admission.txt")).predict(x)
    got = pol.admit_scores(x)
    assert np.abs(got - adm).max() <= TOL
    assert 0.0 < adm.min() < adm.max() < 1.0  # a real, non-constant model
    xr = x[:, c.indices("range")]
    raw_s = lgb.Booster(model_file=str(models / "range_start.txt")).predict(xr)
    raw_e = lgb.Booster(model_file=str(models / "range_end.txt")).predict(xr)
    want_s, want_e = round_range(raw_s, raw_e)
    got_s, got_e = pol.prefetch_ranges(x)
    np.testing.assert_array_equal(got_s, want_s)
    np.testing.assert_array_equal(got_e, want_e)
    assert len(np.unique(got_s)) > 1 and (got_e >= got_s).all() and got_e.max() <= 63
    when = lgb.Booster(model_file=str(models / "when.txt")).predict(when_matrix(x, want_s,
                                                                                 want_e))
    assert np.abs(pol.when_scores(x) - when).max() <= TOL


def test_header_drives_the_so_from_c(bundle, tmp_path) -> None:
    """A C program built against DIR/flashml_policy.h and linked to DIR/policy.so."""
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc
    src = tmp_path / "driver.c"
    src.write_text("""
#include <stdio.h>
#include <string.h>
#include "flashml_policy.h"
int main(void) {
    double f[FLASHML_POLICY_NUM_FEATURES] = {0};
    int32_t a = -1, b = -1;
    f[FLASHML_F_OP] = 2; f[FLASHML_F_END] = 3; f[FLASHML_F_SIZE] = 4 * 131072.0;
    f[FLASHML_F_BLOCK_COUNT_H1] = 2;
    if (flashml_policy_abi_version() != FLASHML_POLICY_ABI_VERSION) return 2;
    if (flashml_policy_num_features() != FLASHML_POLICY_NUM_FEATURES) return 3;
    if (strcmp(flashml_policy_contract_hash(), FLASHML_POLICY_CONTRACT_HASH) != 0) return 4;
    flashml_prefetch_range(f, &a, &b);
    printf("%.17g %d %d %.17g %.17g %.17g\\n", flashml_admit_score(f), a, b,
           flashml_prefetch_when_score(f), flashml_admit_threshold(),
           flashml_eviction_age_s());
    return 0;
}
""")
    exe = tmp_path / "driver"
    subprocess.run([cc, "-std=c11", "-Wall", "-Werror", "-I", str(bundle), str(src), "-o",
                    str(exe), str(bundle / "policy.so"), f"-Wl,-rpath,{bundle}"], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()
    row = np.zeros((1, contract().num_features))
    row[0, [0, 4, 5, 6]] = [2, 3, 4 * 131072.0, 2]
    pol = load_policy(bundle)
    assert float(out[0]) == pol.admit_scores(row)[0]
    assert (int(out[1]), int(out[2])) == tuple(int(v[0]) for v in pol.prefetch_ranges(row))
    assert float(out[3]) == pol.when_scores(row)[0]
    assert (float(out[4]), float(out[5])) == (0.6, 5400.0)


def test_rust_online_features_equal_python(trace, work) -> None:
    np.testing.assert_array_equal(online_features(trace), feature_matrix(trace))
    other = demo_trace(work / "trace2", accesses=20_000, preset="region2-like", seed=5)
    np.testing.assert_array_equal(online_features(other), feature_matrix(other))


def _metrics(res) -> dict:
    return {k: v for k, v in res.metrics.items() if k != "wall_s"}


@pytest.mark.parametrize("cache_frac,admit_t,when_t", [
    (0.05, None, None),   # the thresholds baked into the .so
    (0.25, 0.3, 0.7),
    (1.0, 0.8, 0.2),
])
def test_so_path_equals_precomputed_path(bundle, trace, cache_frac, admit_t, when_t) -> None:
    """The CI regression guard: same trace, cache size and thresholds -> same decisions."""
    pol = load_policy(bundle)
    arrays = pol.arrays(feature_matrix(trace))
    sr = 0.06  # any fixed sample ratio
    th = pol.admit_threshold if admit_t is None else admit_t
    wt = pol.when_threshold if when_t is None else when_t
    cfg = SimConfig(sample_ratio=sr, cache_gb=cache_frac * 366.475, admission="threshold",
                    threshold=th, prefetch="range", prefetch_when="score", when_threshold=wt,
                    warmup_s=3600.0, peak_hours=tuple(PEAK_HOURS), peak_bonus=PEAK_BONUS)
    fast = simulate(trace, cfg, **arrays)
    so = simulate_policy(trace, bundle, cfg.replace(admission="admitall", prefetch="none"),
                         threshold=admit_t, when_threshold=when_t)
    assert _metrics(so) == _metrics(fast)
    assert so.info == fast.info
    for k in fast.series:
        np.testing.assert_array_equal(so.series[k], fast.series[k])
    m = fast.metrics
    assert 0 < m["admitted_segments"] and 0 < m["prefetched_segments"]
    assert 0 < m["io_hit_ratio"] < 1
    # the policy really decides: admitting everything would write more
    allin = simulate(trace, cfg.replace(admission="admitall", prefetch="none"))
    assert allin.metrics["admitted_segments"] != m["admitted_segments"]
    if admit_t is None:  # and the peak schedule is in force: a flat threshold admits less
        flat = simulate(trace, cfg.replace(peak_hours=()), **arrays)
        assert flat.metrics["admitted_segments"] < m["admitted_segments"]


def test_sim_cli_with_policy(bundle, work, cli) -> None:
    table = next((work / "trace").glob("*.parquet"))
    r = cli("sim", "run", "--trace", table, "--policy", bundle, "--warmup-s", "3600",
            "--cache-gb", "30", "--json", check=True)
    cli_metrics = json.loads(r.stdout)
    from flashml.trace.canonical import read_table

    df, meta = read_table(table)
    res = simulate_policy(df, bundle, SimConfig(sample_ratio=meta.sample_ratio, cache_gb=30.0,
                                                warmup_s=3600.0))
    cli_metrics.pop("wall_s")
    assert cli_metrics == json.loads(json.dumps(_metrics(res)))


def test_when_matrix_is_the_range_features_then_the_range() -> None:
    """ML-When's rows: the contract's range features of each row, then its predicted start
    and end (a slow obvious column_stack), the same from the features or from the range
    features already taken out."""
    from flashml.features.contract import contract

    rng = np.random.default_rng(3)
    feats = rng.random((50, contract().num_features))
    start, end = rng.integers(0, 60, 50), rng.integers(0, 60, 50)
    idx = contract().indices("range")
    want = np.column_stack([feats[:, idx], start.astype(float), end.astype(float)])
    assert np.array_equal(when_matrix(feats, start, end), want)
    assert np.array_equal(when_matrix(None, start, end, range_x=feats[:, idx]), want)
    assert when_matrix(feats, start, end).flags.c_contiguous
