"""MAT in the simulator's object mode (sim/src/mat/object.rs): LRB's eviction features
against the slow reference, the fallback (no predictor = LRU), the oracle table of the seed
notes (../shared/seeds/other-seeds-notes.md §1.5), a slow obvious Python MAT matched exactly,
the compiled .so path with hand-written C policies, Belady, training samples and their labels,
bad input."""

from __future__ import annotations

import math
import shutil
import subprocess
from collections import OrderedDict, defaultdict
from pathlib import Path

import numpy as np
import pytest

import flashml_sim
from flashml.features import eviction
from flashml.features.contract import contract as admission_contract
from flashml.simulation import simulate_objects
from flashml.systems.mat.simulation import eviction_features
from flashml.systems.mat.simulation import simulate_objects_mat as simulate_declared
from flashml.trace.objects import read_objects

from conftest import CLOUDPHYSICS

#: The paper's Algorithm 1 as written (the sign controller, a prediction per candidate taken):
#: what the seed notes' oracle table (other-seeds-notes.md) and the slow reference compute.
#: The declared defaults (the mean controller, reused predictions) are checked in
#: test_the_declared_defaults.
ALGORITHM_1 = {"controller": "sign", "reuse_predictions": False}


def simulate_objects_mat(*args, **kw):
    return simulate_declared(*args, **{**ALGORITHM_1, **kw})

MiB = 1 << 20
W = eviction.contract().memory_window


@pytest.fixture(scope="module")
def cp():
    assert CLOUDPHYSICS.exists(), f"{CLOUDPHYSICS} missing: ../shared must sit beside the repo"
    df = read_objects(CLOUDPHYSICS, "cloudphysics")
    return df["key"].to_numpy(), df["size"].to_numpy()


def synthetic(n: int, objects: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Skewed keys (a few hot ones with long histories), sizes fixed per key but varying a
    little per request for some keys (the size feature is the history's first)."""
    rng = np.random.default_rng(seed)
    keys = np.minimum(rng.integers(0, objects, n), rng.integers(0, objects, n)).astype(np.uint64)
    sizes = (1 + keys % 7 * 100 + (keys % 3 == 0) * rng.integers(0, 5, n)).astype(np.uint64)
    return keys, sizes


# ---------------------------------------------------------------- the contract


def test_contract_constants_agree():
    c = eviction.contract()
    assert c.num_features == 44 == flashml_sim.EVICT_NUM_FEATURES
    assert list(c.names) == list(flashml_sim.EVICT_FEATURE_NAMES)
    assert c.hash == flashml_sim.EVICT_CONTRACT_HASH
    assert c.names[0] == "age" and c.names[32] == "size" and c.names[33] == "n_within"
    assert c.edc_windows == tuple(2 ** (10 + i) for i in range(10))
    assert c.memory_window == 67108864 and c.max_decay_index == 65535
    # the admission contract's hash is unchanged by the eviction contract
    assert admission_contract().hash == flashml_sim.CONTRACT_HASH


def test_contract_rejects_a_changed_layout(tmp_path):
    text = eviction.EVICTION_PATH.read_text().replace('name = "n_within"', 'name = "count"')
    p = tmp_path / "e.toml"
    p.write_text(text)
    with pytest.raises(ValueError, match="LRB's layout"):
        eviction.load(p)


def test_reference_by_hand():
    f = eviction.features([0, 5, 7], [100, 1, 1], 10)
    assert f[0] == 3 and f[1:3] == [2, 5] and all(math.isnan(x) for x in f[3:32])
    assert f[32] == 100 and f[33] == 2 and f[34:] == [3.0] * 10
    # quantised decay: edc_0 halves once per whole 1024 requests of a distance
    f = eviction.features([0, 1500], [1, 1], 1500 + 2100)
    assert f[34] == (0.5 * 1 + 1) * 0.25
    # a gap of the window forgets the history before it
    f = eviction.features([0, 3, 3 + 2048], [9, 9, 4], 3 + 2049, memory_window=2048)
    assert f[32] == 4 and math.isnan(f[1]) and f[33] == 0 and f[34] == 1.0
    assert eviction.label(5) == math.log1p(5) and eviction.label(None) == math.log1p(2 * W)


# ---------------------------------------------------------------- features: Rust == Python


@pytest.mark.parametrize("window", [W, 1024, 4096])
def test_rust_features_equal_reference(window):
    keys, sizes = synthetic(6000, 60, seed=window)
    kl, sl = keys.tolist(), sizes.tolist()
    rng = np.random.default_rng(1)
    queries = []
    for now in sorted(rng.integers(1, len(kl) + 1, 150).tolist()) + [len(kl)]:
        past = set(kl[:now])
        for key in rng.choice(sorted(past), size=min(4, len(past)), replace=False).tolist():
            queries.append((key, now))
    got = eviction_features(keys, sizes, queries, memory_window=window)
    assert got.shape == (len(queries), 44)
    for row, (key, now) in zip(got, queries, strict=True):
        want = eviction.features_in_trace(kl, sl, key, now, memory_window=window)
        np.testing.assert_array_equal(row, np.array(want), err_msg=f"key {key} at {now}")
    # the long histories were exercised: some rows have all 31 distances, some forget
    assert np.isfinite(got[:, 31]).any() and np.isnan(got[:, 1]).any()


# ---------------------------------------------------------------- a slow obvious MAT


def next_index(keys: list[int]) -> list[int | None]:
    nxt: list[int | None] = [None] * len(keys)
    seen: dict[int, int] = {}
    for i in range(len(keys) - 1, -1, -1):
        nxt[i] = seen.get(keys[i])
        seen[keys[i]] = i
    return nxt


def slow_mat(keys, sizes, capacity, unit="objects", predict=None, *, k=2.0, L=10,
             delta=1e-4, t0=None, window=W, collect=False, features=False, controller="sign",
             reuse=False):
    """Algorithm 1 over an OrderedDict LRU (first = tail). predict(last, feats) -> distance
    (None: no predictor, evict the tail). Controller "sign" (the paper's) or "mean" (T *= 1 +
    delta (k - candidates taken)); `reuse`: a prediction kept by (key, last access) and used
    when that candidate comes to the tail again. Returns counters (and samples)."""
    keys, sizes = list(map(int, keys)), list(map(int, sizes))
    od: OrderedDict[int, int] = OrderedDict()
    last: dict[int, int] = {}
    hist: dict[int, list[tuple[int, int]]] = defaultdict(list)
    opened: dict[int, list[int]] = defaultdict(list)
    samples: list[dict] = []
    used = hits = evictions = preds = reins = reused = 0
    kept: dict[tuple[int, int], float] = {}
    miss_bytes = 0
    T = None

    def feats(c, now):
        if not (features or collect):
            return None
        h = hist[c]
        return eviction.features([x for x, _ in h], [s for _, s in h], now, memory_window=window)

    def tag(c, now, f):
        if collect:
            opened[c].append(len(samples))
            samples.append({"features": f, "time": now, "last": last[c], "label": None})

    for t, (key, size) in enumerate(zip(keys, sizes, strict=True)):
        if opened.get(key):
            d = t - last[key]
            lab = math.log1p(2 * window) if d >= window else math.log1p(d)
            for i in opened.pop(key):
                samples[i]["label"] = lab
        hist[key].append((t, size))
        if key in od:
            hits += 1
            od.move_to_end(key)
            last[key] = t
            continue
        miss_bytes += size
        sz = size if unit == "bytes" else 1
        if sz > capacity:
            last[key] = t
            continue
        while used + sz > capacity:
            evictions += 1
            if predict is None:
                c, csz = od.popitem(last=False)
                tag(c, t, feats(c, t))
                used -= csz
                continue
            if T is None:
                T = float(t0) if t0 else float(len(od))
            best, victim, r = None, None, 1
            while r <= L:
                c, csz = od.popitem(last=False)
                f = feats(c, t)
                tag(c, t, f)
                if reuse and (c, last[c]) in kept:
                    reused += 1
                    d = kept[(c, last[c])]
                else:
                    preds += 1
                    d = kept[(c, last[c])] = predict(last[c], f)
                tta = abs(d - (t - last[c]))
                if tta >= T:
                    victim = c
                    break
                if best is None or tta > best[1]:
                    best = (c, tta)
                od[c] = csz
                reins += 1
                r += 1
            if victim is None:
                victim = best[0]
                csz = od.pop(victim)
                reins -= 1
            used -= csz
            if controller == "mean":
                T *= 1 + delta * (k - min(r, L))
            elif r < k:
                T *= 1 + delta
            elif r > k:
                T *= 1 - delta
        od[key] = sz
        used += sz
        last[key] = t
    n = len(keys)
    for s in samples:
        if s["label"] is None:
            s["label"] = math.log1p(2 * window)
            s["censored"] = s["last"] + window > n
        else:
            s["censored"] = False
    return {"hits": hits, "evictions": evictions, "predictions": preds, "reinsertions": reins,
            "reused_predictions": reused, "final_threshold": T,
            "byte_miss_ratio": miss_bytes / sum(sizes), "samples": samples}


def oracle_of(keys):
    nxt = next_index(list(map(int, keys)))
    return lambda last, _f: math.inf if nxt[last] is None else nxt[last] - last


def same_counts(r, want):
    for name in ("hits", "evictions", "predictions", "reinsertions"):
        assert r[name] == want[name], name
    if want["final_threshold"] is None:
        assert math.isnan(r["final_threshold"])
    else:
        assert r["final_threshold"] == pytest.approx(want["final_threshold"], rel=1e-12)


# ---------------------------------------------------------------- fallback: none == LRU


@pytest.mark.parametrize("capacity, unit", [(1000, "objects"), (MiB, "bytes")])
def test_no_predictor_is_exactly_lru(cp, capacity, unit):
    keys, sizes = cp
    lru = simulate_objects(keys, sizes, capacity, "lru", unit)
    r = simulate_objects_mat(keys, sizes, capacity, unit, predictor="none")
    assert (r["hits"], r["evictions"]) == (lru["hits"], lru["evictions"])
    assert r["miss_ratio"] == lru["miss_ratio"] and r["byte_miss_ratio"] == lru["byte_miss_ratio"]
    assert r["predictions"] == 0 and r["reinsertions"] == 0
    assert r["predictions_per_eviction"] == 0 and math.isnan(r["final_threshold"])
    assert r["ns_per_eviction"] > 0 and r["requests"] == 113_872


# ---------------------------------------------------------------- the oracle table (§1.5)

# capacity in objects, k -> (MAT-oracle miss ratio, predictions per eviction), T0 = capacity
SEED_TABLE = [
    (1000, 2, 0.7863, 3.18), (1000, 3, 0.7861, 3.43), (1000, 4, 0.7861, 3.45),
    (5000, 2, 0.6685, 2.15), (5000, 3, 0.6542, 2.99), (5000, 4, 0.6522, 3.40),
    (10000, 2, 0.5888, 1.87), (10000, 3, 0.5831, 3.03), (10000, 4, 0.5828, 3.28),
]


@pytest.mark.parametrize("capacity, k, miss, ppe", SEED_TABLE)
def test_oracle_reproduces_the_seed_table(cp, capacity, k, miss, ppe):
    keys, sizes = cp
    r = simulate_objects_mat(keys, sizes, capacity, "objects", predictor="oracle", k=k)
    assert round(r["miss_ratio"], 4) == miss
    assert round(r["predictions_per_eviction"], 2) == ppe
    assert r["params"]["initial_threshold"] is None  # the default: the capacity in objects
    assert r["evictions"] == r["requests"] - r["hits"] - capacity


@pytest.mark.parametrize("capacity, factor, miss", [
    (1000, 10, 0.7738), (1000, 100, 0.7717), (5000, 10, 0.6453), (5000, 100, 0.6439),
    (10000, 10, 0.5719), (10000, 100, 0.5646)])
def test_oracle_initial_threshold_table(cp, capacity, factor, miss):
    keys, sizes = cp
    r = simulate_objects_mat(keys, sizes, capacity, "objects", predictor="oracle",
                             initial_threshold=factor * capacity)
    assert round(r["miss_ratio"], 4) == miss


def test_oracle_equals_slow_python_mat(cp):
    keys, sizes = cp
    want = slow_mat(keys, sizes, 1000, predict=oracle_of(keys))
    r = simulate_objects_mat(keys, sizes, 1000, "objects", predictor="oracle")
    same_counts(r, want)


@pytest.mark.parametrize("capacity, k, L, t0", [(4000, 2.0, 10, None), (600_000, 3.0, 4, 50.0)])
def test_oracle_bytes_equals_slow_python_mat(cp, capacity, k, L, t0):
    keys, sizes = cp
    keys, sizes = keys[:20_000], sizes[:20_000]
    unit = "bytes" if capacity > 100_000 else "objects"
    want = slow_mat(keys, sizes, capacity, unit, oracle_of(keys), k=k, L=L, t0=t0)
    r = simulate_objects_mat(keys, sizes, capacity, unit, predictor="oracle", k=k,
                             max_candidates=L, initial_threshold=t0)
    same_counts(r, want)
    assert r["byte_miss_ratio"] == pytest.approx(want["byte_miss_ratio"], rel=1e-12)


def test_oracle_closes_most_of_the_gap_to_belady(cp):
    keys, sizes = cp
    for cap in (1000, 5000, 10000):
        lru = simulate_objects(keys, sizes, cap, "lru", "objects")["miss_ratio"]
        bel = simulate_objects(keys, sizes, cap, "belady", "objects")["miss_ratio"]
        mat = simulate_objects_mat(keys, sizes, cap, "objects", predictor="oracle")["miss_ratio"]
        assert bel < mat < lru
        assert 0.6 < (lru - mat) / (lru - bel) < 0.8  # the seed notes: 68-76%


# ---------------------------------------------------------------- Belady


@pytest.mark.parametrize("capacity, miss", [(1000, 0.7642), (5000, 0.6262), (10000, 0.5431)])
def test_belady_reproduces_libcachesim(cp, capacity, miss):
    keys, sizes = cp
    r = simulate_objects(keys, sizes, capacity, "belady", "objects")
    assert round(r["miss_ratio"], 4) == miss


def test_belady_by_hand():
    # a b c a b c, 2 objects: c evicts b (next at 4, a's at 3), a hits, b evicts a, c hits
    r = simulate_objects([1, 2, 3, 1, 2, 3], [1] * 6, 2, "belady", "objects")
    assert (r["hits"], r["evictions"]) == (2, 2)
    # LRU's loop gets nothing from it
    assert simulate_objects([1, 2, 3, 1, 2, 3], [1] * 6, 2, "lru", "objects")["hits"] == 0
    # bytes: 100 B; a(40) b(50) then c(60) evicts b (farther), a hits
    r = simulate_objects([1, 2, 1, 3, 1, 2], [40, 50, 40, 60, 40, 50], 100, "belady", "bytes")
    assert (r["hits"], r["evictions"]) == (2, 2)
    with pytest.raises(ValueError, match="belady"):
        simulate_objects([1], [1], 2, "lfu", "objects")


# ---------------------------------------------------------------- the .so path


def build_so(tmp_path: Path, body: str, name: str = "p") -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    src = tmp_path / f"{name}.c"
    src.write_text("#include <math.h>\n#include <stdint.h>\n" + body)
    so = tmp_path / f"{name}.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(so), str(src), "-lm"], check=True)
    return so


IDENTITY = ("int flashml_evict_num_features(void) { return 44; }\n"
            "const char *flashml_evict_contract_hash(void) { return \""
            + eviction.contract().hash + "\"; }\n")
#: A prediction of the age alone: log1p(3 age).
PREDICT_3AGE = "double flashml_evict_predict(const double *f) { return log1p(3.0 * f[0]); }\n"


def knobs_c(k: float, L: int, delta: float, t0: float, window: int, **flags: int) -> str:
    """C source of the knob exports of an eviction .so (flags: controller, reuse_predictions,
    each an exported int)."""
    return (f"double flashml_evict_k(void) {{ return {k!r}; }}\n"
            f"int flashml_evict_max_candidates(void) {{ return {L}; }}\n"
            f"double flashml_evict_delta(void) {{ return {delta!r}; }}\n"
            f"double flashml_evict_initial_threshold(void) {{ return {t0!r}; }}\n"
            f"int64_t flashml_evict_memory_window(void) {{ return {window}; }}\n"
            + "".join(f"int flashml_evict_{name}(void) {{ return {v}; }}\n"
                      for name, v in flags.items()))


def test_so_huge_prediction_is_lru_with_one_try(cp, tmp_path):
    so = build_so(tmp_path, IDENTITY + "double flashml_evict_predict(const double *f) "
                  "{ (void)f; return 1e300; }\n")
    keys, sizes = cp
    lru = simulate_objects(keys, sizes, 1000, "lru", "objects")
    r = simulate_objects_mat(keys, sizes, 1000, "objects", predictor=so, unverified=True)
    assert (r["hits"], r["evictions"]) == (lru["hits"], lru["evictions"])
    assert r["predictions"] == r["evictions"] and r["reinsertions"] == 0
    # every victim at the first try (r = 1 < k): T rises by (1 + delta) per eviction
    assert r["final_threshold"] == pytest.approx(1000 * (1 + 1e-4) ** r["evictions"], rel=1e-9)


def test_so_of_a_feature_equals_slow_mat(tmp_path):
    # d = delta_1 (NaN when there is none: TTA NaN never reaches T, never the best)
    so = build_so(tmp_path, IDENTITY + "double flashml_evict_predict(const double *f) "
                  "{ return log1p(f[1]) + 1e-3 * f[34]; }\n")
    keys, sizes = synthetic(3000, 150, seed=7)

    def predict(_last, f):
        return math.expm1(math.log1p(f[1]) + 1e-3 * f[34])

    for cap, unit, k in [(40, "objects", 2.0), (3000, "bytes", 3.0)]:
        want = slow_mat(keys, sizes, cap, unit, predict, k=k, features=True)
        r = simulate_objects_mat(keys, sizes, cap, unit, predictor=str(so), unverified=True, k=k)
        same_counts(r, want)
        assert r["predictions"] > r["evictions"] > 0 and r["reinsertions"] > 0


def test_so_exports_are_defaults_and_identity_is_checked(tmp_path):
    keys, sizes = synthetic(2000, 100, seed=3)
    so = build_so(tmp_path, IDENTITY + knobs_c(3.0, 4, 0.01, 77.0, 4096) + PREDICT_3AGE,
                  "knobs")
    r = simulate_objects_mat(keys, sizes, 30, "objects", predictor=so, unverified=True)
    assert r["params"] == {"k": 3.0, "max_candidates": 4, "delta": 0.01,
                           "initial_threshold": 77.0, "memory_window": 4096,
                           "collect_samples": False, "predictor": str(so),
                           # a .so without flashml_evict_controller / _reuse_predictions
                           "controller": "sign", "reuse_predictions": False}
    want = slow_mat(keys, sizes, 30, "objects", lambda _l, f: math.expm1(math.log1p(3 * f[0])),
                    k=3.0, L=4, delta=0.01, t0=77.0, window=4096, features=True)
    same_counts(r, want)
    # explicit arguments win
    r = simulate_objects_mat(keys, sizes, 30, "objects", predictor=so, unverified=True, k=2,
                             max_candidates=10,
                             delta=1e-4, initial_threshold=5, memory_window=W)
    assert r["params"]["k"] == 2 and r["params"]["memory_window"] == W
    # a bundle folder holding policy.so
    (tmp_path / "bundle").mkdir()
    shutil.copy(so, tmp_path / "bundle" / "policy.so")
    assert simulate_objects_mat(keys, sizes, 30, "objects",
                                predictor=tmp_path / "bundle",
                                unverified=True)["params"]["k"] == 3.0
    # no identity exported: accepted (the caller vouches for the layout)
    bare = build_so(tmp_path, PREDICT_3AGE, "bare")
    assert simulate_objects_mat(keys, sizes, 30, "objects", predictor=bare,
                                unverified=True)["evictions"] > 0


@pytest.mark.parametrize("body, match", [
    ("int flashml_evict_num_features(void) { return 18; }\n"
     "double flashml_evict_predict(const double *f) { return f[0]; }\n", "18 eviction features"),
    ('const char *flashml_evict_contract_hash(void) { return "abc"; }\n'
     "double flashml_evict_predict(const double *f) { return f[0]; }\n", "contract mismatch"),
    ("double flashml_admit_score(const double *f) { return f[0]; }\n", "flashml_evict_predict"),
])
def test_so_bad_policies(tmp_path, body, match):
    so = build_so(tmp_path, body)
    with pytest.raises(ValueError, match=match):
        simulate_objects_mat([1, 2, 3], [1, 1, 1], 1, "objects", predictor=so, unverified=True)


# ---------------------------------------------------------------- training samples


@pytest.mark.parametrize("predictor, cap, unit, window", [
    ("none", 25, "objects", W), ("none", 2500, "bytes", 1024), ("oracle", 25, "objects", 1024)])
def test_samples_equal_slow_replay(predictor, cap, unit, window):
    keys, sizes = synthetic(2500, 120, seed=cap)
    predict = oracle_of(keys) if predictor == "oracle" else None
    want = slow_mat(keys, sizes, cap, unit, predict, window=window, collect=True)
    r = simulate_objects_mat(keys, sizes, cap, unit, predictor=predictor, collect_samples=True,
                             memory_window=window)
    same_counts(r, want)
    s, ws = r["samples"], want["samples"]
    assert len(s["label"]) == len(ws) == want["predictions"] or (
        predictor == "none" and len(ws) == want["evictions"])
    assert s["features"].shape == (len(ws), 44) and s["features"].dtype == np.float64
    np.testing.assert_array_equal(s["features"], np.array([w["features"] for w in ws]))
    np.testing.assert_array_equal(s["label"], np.array([w["label"] for w in ws]))
    np.testing.assert_array_equal(s["time"], [w["time"] for w in ws])
    np.testing.assert_array_equal(s["last"], [w["last"] for w in ws])
    np.testing.assert_array_equal(s["censored"], [w["censored"] for w in ws])
    # labels: log1p of a distance within the window, or the not-returned label
    back = s["label"] < math.log1p(window)
    assert back.any() and (~back).any()
    assert np.all(s["label"][~back] == math.log1p(2 * window))


def test_samples_of_lru_tail_on_cloudphysics(cp):
    keys, sizes = cp
    r = simulate_objects_mat(keys, sizes, 1000, "objects", collect_samples=True)
    s = r["samples"]
    assert len(s["label"]) == r["evictions"]
    assert np.all(s["features"][:, 0] >= 1)  # age at tag time
    # nothing returns after the window of 2^26 in a 113,872-request trace: every
    # not-returned sample is censored
    assert np.all(s["censored"] == (s["label"] == math.log1p(2 * W)))


# ---------------------------------------------------------------- bad input


def test_bad_input():
    k, s = [1, 2, 1], [10, 10, 10]
    with pytest.raises(ValueError, match="capacity"):
        simulate_objects_mat(k, s, 0)
    with pytest.raises(ValueError, match="elements"):
        simulate_objects_mat(k, s[:2], 10)
    with pytest.raises(ValueError, match="no requests"):
        simulate_objects_mat([], [], 10)
    with pytest.raises(ValueError, match="unit"):
        simulate_objects_mat(k, s, 10, "pages")
    with pytest.raises(ValueError, match="no such file"):
        simulate_objects_mat(k, s, 10, predictor="/nonexistent/policy.so")
    for kw, match in [({"k": 0}, "k must"), ({"max_candidates": 0}, "max_candidates"),
                      ({"delta": 1.5}, "delta"), ({"initial_threshold": -1}, "initial_thr"),
                      ({"memory_window": 10}, "memory_window")]:
        with pytest.raises(ValueError, match=match):
            simulate_objects_mat(k, s, 10, predictor="oracle", **kw)


def test_capacity_smaller_than_every_object():
    r = simulate_objects_mat([1, 2, 1], [10, 10, 10], 5, "bytes", predictor="oracle")
    assert r["miss_ratio"] == 1.0 and r["evictions"] == 0
    assert math.isnan(r["predictions_per_eviction"]) and math.isnan(r["ns_per_eviction"])


def test_the_mean_controller_against_the_slow_replay(tmp_path):
    """The mean controller (T *= 1 + delta (k - p), p the predictions made, L on exhaustion)
    decides as the slow obvious replay does, asked for explicitly or exported by the .so
    (`flashml_evict_controller` 1); it holds the mean predictions per eviction near k where
    the sign rule's lies above it."""
    keys, sizes = synthetic(4000, 150, seed=5)
    knobs = knobs_c(2.0, 5, 0.02, 30.0, 4096, controller=1)
    so = build_so(tmp_path, IDENTITY + knobs + PREDICT_3AGE, "mean")
    r = simulate_declared(keys, sizes, 30, "objects", predictor=so, unverified=True)
    assert r["params"]["controller"] == "mean"
    want = slow_mat(keys, sizes, 30, "objects", lambda _l, f: math.expm1(math.log1p(3 * f[0])),
                    k=2.0, L=5, delta=0.02, t0=30.0, window=4096, features=True,
                    controller="mean")
    same_counts(r, want)
    sign = simulate_objects_mat(keys, sizes, 30, "objects", predictor=so, unverified=True,
                                controller="sign")
    assert sign["params"]["controller"] == "sign"
    assert sign["hits"] != r["hits"] or sign["predictions"] != r["predictions"]
    assert abs(r["predictions_per_eviction"] - 2.0) < 0.1
    with pytest.raises(ValueError, match="controller"):
        simulate_objects_mat(keys, sizes, 30, "objects", predictor=so, unverified=True,
                             controller="median")


def test_reused_predictions_against_the_slow_replay(tmp_path):
    """Reused predictions (the paper's recorded predictions): a candidate's predicted
    distance is kept until its object's next access and judges it (by its age then) when it
    comes to the tail again, without a new prediction; as the slow replay does, asked for
    or exported by the .so (`flashml_evict_reuse_predictions` 1). Fewer predictions than
    candidates, and fewer than without reuse at the same k."""
    keys, sizes = synthetic(4000, 150, seed=7)
    knobs = knobs_c(4.0, 8, 0.02, 30.0, 4096, controller=1, reuse_predictions=1)
    so = build_so(tmp_path, IDENTITY + knobs + PREDICT_3AGE, "reuse")
    r = simulate_declared(keys, sizes, 30, "objects", predictor=so, unverified=True)
    assert r["params"]["reuse_predictions"] is True
    want = slow_mat(keys, sizes, 30, "objects", lambda _l, f: math.expm1(math.log1p(3 * f[0])),
                    k=4.0, L=8, delta=0.02, t0=30.0, window=4096, features=True,
                    controller="mean", reuse=True)
    same_counts(r, want)
    assert r["reused_predictions"] == want["reused_predictions"] > r["evictions"] // 4
    taken = (r["predictions"] + r["reused_predictions"]) / r["evictions"]
    assert r["candidates_per_eviction"] == pytest.approx(taken)
    fresh = simulate_objects_mat(keys, sizes, 30, "objects", predictor=so, unverified=True,
                                 reuse_predictions=False)
    assert fresh["reused_predictions"] == 0
    assert fresh["predictions_per_eviction"] > r["predictions_per_eviction"]


def test_the_declared_defaults(cp):
    """Without knobs the simulator runs settings.toml's defaults (what `flashml mat run`, the
    compiled bundles and `flashrt mat-replay` use): the mean controller, reused predictions."""
    from flashml.systems.mat.settings import MatParams

    keys, sizes = cp
    keys, sizes = keys[:20_000], sizes[:20_000]
    r = simulate_declared(keys, sizes, 1000, "objects", predictor="oracle")
    d = MatParams()
    p = r["params"]
    assert (p["k"], p["max_candidates"], p["delta"], p["controller"], p["reuse_predictions"]) \
        == (d.k, d.max_candidates, d.delta, d.controller, d.reuse_predictions) \
        == (2.0, 10, 1e-4, "mean", True)
    given = simulate_declared(keys, sizes, 1000, "objects", predictor="oracle",
                              **d.sim_kwargs() | {"initial_threshold": None})
    for key in ("miss_ratio", "predictions_per_eviction", "reused_predictions"):
        assert r[key] == given[key]


def test_a_so_without_the_controller_functions_runs_what_it_was_compiled_for(tmp_path):
    """A .so exporting neither `flashml_evict_controller` nor
    `flashml_evict_reuse_predictions` (compiled before they existed) runs the declared legacy
    values, the paper's sign rule without reuse, not today's defaults; one exporting them
    runs its own."""
    keys, sizes = synthetic(4000, 150, seed=5)
    old = build_so(tmp_path, IDENTITY + knobs_c(2.0, 5, 0.02, 30.0, 4096) + PREDICT_3AGE, "old")
    r = simulate_declared(keys, sizes, 30, "objects", predictor=old, unverified=True)
    assert (r["params"]["controller"], r["params"]["reuse_predictions"]) == ("sign", False)
    new = build_so(tmp_path, IDENTITY + knobs_c(2.0, 5, 0.02, 30.0, 4096, controller=1,
                                                reuse_predictions=1) + PREDICT_3AGE, "new")
    r = simulate_declared(keys, sizes, 30, "objects", predictor=new, unverified=True)
    assert (r["params"]["controller"], r["params"]["reuse_predictions"]) == ("mean", True)
