"""The C runtime's MAT object cache (`flashrt mat-replay`, runtime/src/mat/mat.c): on
the same trace and capacity its decisions are the simulator's (victim keys in order, hits,
predictions, the final threshold T, bit for bit), its features at every tail candidate are
the simulator's, the bytes it serves are real and verified, and bad input is refused
before any output. The bundles are real: LightGBM trained on the simulator's MAT samples,
compiled by `flashml.compiler`."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import lightgbm as lgb
import numpy as np
import pytest
from runtime_support import FLASHRT, build_runtime

import flashml_sim
from flashml.compiler.build import HEADER, compile_policy, sha256_file
from flashml.compiler.bundle import save_evict_model
from flashml.features import eviction
from flashml.simulation import simulate_objects
from flashml.systems.mat.simulation import eviction_features, simulate_objects_mat
from flashml.trace.generate import generate_objects
from flashml.trace.objects import read_objects

from conftest import REPO

WINDOW = 4096  # a short memory window: forgetting and the EDC clamp happen in these traces


def flashrt(*args: object, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(FLASHRT), "mat-replay", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout)


def small_trace(path: Path, n: int = 20_000, objects: int = 1500, seed: int = 1) -> Path:
    """Skewed keys (a few hot ones with long histories), sizes of 0.5-9 KB fixed per key."""
    rng = np.random.default_rng(seed)
    keys = np.minimum(rng.integers(0, objects, n), rng.integers(0, objects, n)).astype(np.uint64)
    keys = keys * np.uint64(2654435761) % np.uint64(2**61)
    sizes = 512 + (keys % np.uint64(13)) * np.uint64(700)
    with open(path, "w") as f:
        f.write("time,key,size\n")
        f.writelines(f"{i * 0.01:.3f},{k},{s}\n"
                     for i, (k, s) in enumerate(zip(keys, sizes, strict=True)))
    return path


def train_bundle(out: Path, keys: np.ndarray, sizes: np.ndarray, capacity: int,
                 window: int | None) -> Path:
    """MAT's model trained on the simulator's samples of this trace, compiled."""
    r = simulate_objects_mat(keys, sizes, capacity, "objects", collect_samples=True,
                             memory_window=window)
    s = r["samples"]
    booster = lgb.train({"objective": "regression", "num_leaves": 16, "verbose": -1,
                         "seed": 0, "deterministic": True, "num_threads": 2},
                        lgb.Dataset(s["features"], s["label"],
                                    feature_name=list(eviction.contract().names)),
                        num_boost_round=20)
    save_evict_model(out / "models", booster, k=2.0, max_candidates=10, delta=1e-3,
                     initial_threshold=capacity * 0.7, memory_window=window)
    compile_policy(out / "bundle", model_dir=out / "models", log_to_mlflow=False)
    return out / "bundle"


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> tuple[Path, Path]:
    build_runtime()
    tmp = tmp_path_factory.mktemp("mat_small")
    trace = small_trace(tmp / "small.csv")
    df = read_objects(trace, "objects-csv")
    return trace, train_bundle(tmp, df["key"].to_numpy(), df["size"].to_numpy(), 150, WINDOW)


@pytest.fixture(scope="module")
def cdn(tmp_path_factory) -> tuple[Path, Path]:
    """The cdn-like preset (objects-csv, MiB-sized objects), the contract's memory window."""
    build_runtime()
    tmp = tmp_path_factory.mktemp("mat_cdn")
    trace = tmp / "cdn.csv"
    generate_objects("cdn-like", 7, trace, accesses=30_000, progress=False)
    df = read_objects(trace, "objects-csv")
    return trace, train_bundle(tmp, df["key"].to_numpy(), df["size"].to_numpy(), 1000, None)


def decisions(path: Path) -> dict[str, np.ndarray]:
    text = path.read_text().splitlines()
    assert text[0] == "time,key,size,tries,threshold"
    rows = [line.split(",") for line in text[1:]]
    return {"time": np.array([int(r[0]) for r in rows], dtype=np.uint64),
            "key": np.array([int(r[1]) for r in rows], dtype=np.uint64),
            "size": np.array([int(r[2]) for r in rows], dtype=np.uint64),
            "tries": np.array([int(r[3]) for r in rows]),
            "threshold": np.array([float(r[4]) for r in rows])}


def replay(tmp: Path, bundle: Path | None, trace: Path, capacity: int, unit: str,
           *extra: object, data: bool = True) -> tuple[dict, dict[str, np.ndarray]]:
    out = tmp / f"dec-{unit}-{capacity}.csv"
    model = ["--bundle", bundle] if bundle else ["--no-model"]
    store = ["--cache-file", tmp / "cache.bin"] if data else ["--no-data"]
    p = flashrt(*model, "--trace", trace, "--capacity", capacity, "--unit", unit, *store,
                "--decisions-out", out, "--json", *extra)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout), decisions(out)


# ---------------------------------------------------------------- the same decisions


@pytest.mark.parametrize("which, capacity, unit, data", [
    ("small", 150, "objects", True), ("small", 400_000, "bytes", True),
    ("cdn", 1000, "objects", False), ("cdn", 2 << 30, "bytes", False)])
def test_decisions_equal_the_simulator(request, tmp_path, which, capacity, unit, data):
    trace, bundle = request.getfixturevalue(which)
    df = read_objects(trace, "objects-csv")
    keys, sizes = df["key"].to_numpy(), df["size"].to_numpy()
    c, dec = replay(tmp_path, bundle, trace, capacity, unit, "--bypass-oversize", data=data)
    sim = simulate_objects_mat(keys, sizes, capacity, unit, predictor=str(bundle),
                               record_victims=True)
    # the victims, in order, and when
    assert len(dec["key"]) == sim["evictions"] == c["evictions"]
    np.testing.assert_array_equal(dec["time"], sim["victims"]["time"])
    np.testing.assert_array_equal(dec["key"], sim["victims"]["key"])
    for k in ("requests", "hits", "evictions", "predictions", "reinsertions"):
        assert c[k] == sim[k], k
    # the controller's T, bit for bit, after every decision and at the end
    assert c["final_threshold"] == sim["final_threshold"] == dec["threshold"][-1]
    assert (c["miss_ratio"], c["byte_miss_ratio"]) == (sim["miss_ratio"],
                                                        sim["byte_miss_ratio"])
    L = sim["params"]["max_candidates"]
    assert np.minimum(dec["tries"], L).sum() == sim["predictions"]
    assert c["k"] == sim["params"]["k"] and c["memory_window"] == sim["params"]["memory_window"]
    # the model really decides: candidates are kept and the victims are not LRU's
    assert sim["predictions"] > sim["evictions"] > 1000 and sim["reinsertions"] > 0
    assert (dec["tries"] > L).any() and (dec["tries"] == 1).any()
    _, lru = replay(tmp_path, None, trace, capacity, unit, "--bypass-oversize", data=False)
    assert not np.array_equal(lru["key"][:len(dec["key"])], dec["key"][:len(lru["key"])])
    if data:
        # every hit was read back from the cache file and verified
        assert c["integrity_errors"] == 0 and c["verified_bytes"] == c["bytes_read"] > 0
        hit_bytes = c["request_bytes"] - c["miss_bytes"]
        assert c["bytes_read"] == hit_bytes and c["bytes_written"] == c["miss_bytes"]
        assert (tmp_path / "cache.bin").stat().st_size == c["cache_file_bytes"] > 0


@pytest.mark.parametrize("which, capacity, unit, how", [
    ("small", 150, "objects", "bundle"), ("cdn", 2 << 30, "bytes", "flag"),
    ("small", 400_000, "bytes", "reuse"), ("cdn", 1000, "objects", "reuse flag")])
def test_the_mean_controller_decides_as_the_simulator(request, tmp_path, which, capacity,
                                                       unit, how):
    """MAT's mean controller (T *= 1 + delta (k - candidates taken)) and reused predictions
    (a candidate's prediction kept until its next access) in the runtime: taken from a bundle
    compiled with them (`flashml_evict_controller` 1, `flashml_evict_reuse_predictions` 1) or
    asked for with `--controller mean` (`--reuse-predictions on`); the same victims, counts
    and T bit for bit as the simulator's."""
    reuse = how.startswith("reuse")
    trace, bundle = request.getfixturevalue(which)
    df = read_objects(trace, "objects-csv")
    keys, sizes = df["key"].to_numpy(), df["size"].to_numpy()
    extra: list[object] = ["--bypass-oversize"]
    if how in ("bundle", "reuse"):  # the same model, compiled with the mean controller
        models = bundle.parent / "models"
        booster = lgb.Booster(model_file=str(models / "evict.txt"))
        ev = json.loads((models / "policy.json").read_text())["eviction"]
        save_evict_model(tmp_path / "models", booster, k=4.0 if reuse else ev["k"],
                         controller="mean", reuse_predictions=reuse,
                         max_candidates=ev["max_candidates"], delta=ev["delta"],
                         initial_threshold=ev["initial_threshold"],
                         memory_window=ev["memory_window"])
        bundle = tmp_path / "bundle"
        compile_policy(bundle, model_dir=tmp_path / "models", log_to_mlflow=False)
    else:
        extra += ["--controller", "mean"]
        if reuse:
            extra += ["--reuse-predictions", "on", "--k", "4"]
    c, dec = replay(tmp_path, bundle, trace, capacity, unit, *extra, data=False)
    flags = {} if how in ("bundle", "reuse") else {"controller": "mean"} | (
        {"reuse_predictions": True, "k": 4.0} if reuse else {})
    sim = simulate_objects_mat(keys, sizes, capacity, unit, predictor=str(bundle),
                               record_victims=True, **flags)
    assert c["controller"] == sim["params"]["controller"] == "mean"
    assert c["reuse_predictions"] == sim["params"]["reuse_predictions"] == reuse
    assert c["reused_predictions"] == sim["reused_predictions"]
    assert (sim["reused_predictions"] > 0) == reuse
    np.testing.assert_array_equal(dec["key"], sim["victims"]["key"])
    np.testing.assert_array_equal(dec["time"], sim["victims"]["time"])
    for k in ("requests", "hits", "evictions", "predictions", "reinsertions"):
        assert c[k] == sim[k], k
    assert c["final_threshold"] == sim["final_threshold"] == dec["threshold"][-1]
    sign = simulate_objects_mat(keys, sizes, capacity, unit, predictor=str(bundle),
                                controller="sign", reuse_predictions=False)
    assert sign["final_threshold"] != sim["final_threshold"]  # the controllers differ here


def test_no_model_is_lru(small, tmp_path):
    trace, _ = small
    df = read_objects(trace, "objects-csv")
    for capacity, unit in ((150, "objects"), (400_000, "bytes")):
        c, dec = replay(tmp_path, None, trace, capacity, unit, data=False)
        lru = simulate_objects(df["key"], df["size"], capacity, "lru", unit)
        assert (c["hits"], c["evictions"], c["predictions"]) == (lru["hits"], lru["evictions"], 0)
        assert c["final_threshold"] is None and (dec["tries"] == 1).all()


# ---------------------------------------------------------------- the same features


def test_features_equal_the_simulator(small, tmp_path):
    trace, bundle = small
    df = read_objects(trace, "objects-csv")
    keys, sizes = df["key"].to_numpy(), df["size"].to_numpy()
    cand = tmp_path / "cand.csv"
    p = flashrt("--bundle", bundle, "--trace", trace, "--capacity", 150, "--unit", "objects",
                "--no-data", "--candidates-out", cand, "--json")
    assert p.returncode == 0, p.stderr
    header = cand.read_text().split("\n", 1)[0].split(",")
    assert header[:6] == ["time", "key", "last", "prediction", "tta", "threshold"]
    assert len(header) == 6 + flashml_sim.EVICT_NUM_FEATURES
    rows = np.loadtxt(cand, delimiter=",", skiprows=1, dtype=np.float64)
    sim = simulate_objects_mat(keys, sizes, 150, "objects", predictor=str(bundle),
                               collect_samples=True)["samples"]
    # every tail candidate (the simulator tags each one it examines), in order
    assert len(rows) == len(sim["time"]) > 10_000
    np.testing.assert_array_equal(rows[:, 0].astype(np.uint64), sim["time"])
    np.testing.assert_array_equal(rows[:, 2].astype(np.uint64), sim["last"])
    np.testing.assert_array_equal(rows[:, 1].astype(np.uint64), keys[sim["last"]])
    feats = rows[:, 6:]
    np.testing.assert_array_equal(feats, sim["features"])  # NaN where the simulator's are
    assert np.isnan(feats).any() and (feats[:, 1] > 0).any()  # missing and present distances
    assert (feats[:, 33] < feats[:, 1:32].shape[1]).all()
    # at some queries, also the streaming features of the simulator's other entry point and
    # the slow Python reference
    pick = np.random.default_rng(0).choice(len(rows), 40, replace=False)
    queries = [(int(rows[i, 1]), int(rows[i, 0])) for i in pick]
    ref = eviction_features(keys, sizes, queries, memory_window=WINDOW)
    np.testing.assert_array_equal(feats[pick], ref)
    for i, (key, t) in zip(pick[:5], queries[:5], strict=True):
        slow = eviction.features_in_trace(keys.tolist(), sizes.tolist(), key, t, WINDOW)
        np.testing.assert_array_equal(feats[i], np.array(slow, dtype=np.float64))
    # the TTA the decision used: |expm1(prediction) - age| (libm's expm1, as C and Rust)
    tta = [abs(math.expm1(p) - a) for p, a in zip(rows[:, 3], feats[:, 0], strict=True)]
    np.testing.assert_array_equal(rows[:, 4], tta)


def test_edc_window_constant_is_the_contracts():
    """lrb_features.h restates one constant the generated header lacks: checked here."""
    text = (REPO / "runtime" / "src" / "mat" / "lrb_features.h").read_text()
    got = int(re.search(r"#define FRT_EVICT_EDC_BASE_LOG2 (\d+)", text).group(1))
    assert got == eviction.contract().edc_base_log2
    h = HEADER.read_text()
    assert f'#define FLASHML_EVICT_CONTRACT_HASH "{eviction.contract().hash}"' in h


# ---------------------------------------------------------------- bad input


def _tampered(bundle: Path, dst: Path, **manifest) -> Path:
    shutil.copytree(bundle, dst)
    m = json.loads((dst / "manifest.json").read_text())
    m.update(manifest)
    (dst / "manifest.json").write_text(json.dumps(m))
    return dst


@pytest.mark.parametrize("case", ["no_evict_fn", "no_capability", "capacity0", "oversize",
                                  "bad_line", "bad_header", "no_trace", "window"])
def test_bad_input_is_refused_before_any_output(small, tmp_path, case):
    trace, bundle = small
    args: dict[str, object] = {"--bundle": bundle, "--trace": trace, "--capacity": 150,
                               "--unit": "objects"}
    want, code = "", 1
    if case == "no_evict_fn":
        # a .so that lists the eviction capability but lacks flashml_evict_predict
        d = _tampered(bundle, tmp_path / "b")
        src = tmp_path / "p.c"
        src.write_text('#include "flashml_policy.h"\n'
                       "int flashml_policy_abi_version(void) { return 1; }\n")
        subprocess.run(["cc", "-shared", "-fPIC", f"-I{HEADER.parent}", "-o",
                        str(d / "policy.so"), str(src)], check=True)
        _tampered(d, tmp_path / "b2", sha256=sha256_file(d / "policy.so"),
                  size_bytes=(d / "policy.so").stat().st_size)
        shutil.copy(d / "policy.so", tmp_path / "b2" / "policy.so")
        args["--bundle"] = tmp_path / "b2"
        want = "no symbol flashml_evict_"
    elif case == "no_capability":
        args["--bundle"] = _tampered(bundle, tmp_path / "b", capabilities=["admission"])
        want = "no eviction capability"
    elif case == "capacity0":
        args["--capacity"] = 0
        want, code = "--capacity must be > 0", 2
    elif case == "oversize":
        args.update({"--capacity": 5000, "--unit": "bytes"})
        df = read_objects(trace, "objects-csv")
        line = int(np.argmax(df["size"].to_numpy() > 5000)) + 2
        want = f"{trace}:{line}: field 'size': an object of"
    elif case == "bad_line":
        bad = tmp_path / "bad.csv"
        lines = trace.read_text().splitlines()
        lines[500] = lines[500].rsplit(",", 1)[0] + ",12x"
        bad.write_text("\n".join(lines) + "\n")
        args["--trace"] = bad
        want = f"{bad}:501: field 'size': expected an integer, found '12x'"
    elif case == "bad_header":
        bad = tmp_path / "bad.csv"
        bad.write_text("time,id,size\n0,1,2\n")
        args["--trace"] = bad
        want = f"{bad}:1: field 'key': missing column"
    elif case == "no_trace":
        args["--trace"] = tmp_path / "missing.csv"
        want = "missing.csv: No such file"
    elif case == "window":  # the feature history's range, named by the option and its unit
        args["--memory-window"] = 2**63
        want, code = "--memory-window: invalid value '9223372036854775808' (must be at most " \
            "4294967295 logical requests)", 2
    dec, cache = tmp_path / "dec.csv", tmp_path / "cache.bin"
    flat = [str(x) for kv in args.items() for x in kv]
    p = flashrt(*flat, "--cache-file", cache, "--decisions-out", dec, "--json")
    assert p.returncode == code, p.stderr
    assert want in p.stderr, p.stderr
    assert p.stdout == ""
    assert not dec.exists() and not cache.exists()
    assert not list(tmp_path.glob("dec.csv.tmp*"))


def test_oversize_objects_can_bypass_as_in_the_simulator(small, tmp_path):
    trace, bundle = small
    df = read_objects(trace, "objects-csv")
    c, dec = replay(tmp_path, bundle, trace, 8000, "bytes", "--bypass-oversize")
    sim = simulate_objects_mat(df["key"], df["size"], 8000, "bytes", predictor=str(bundle),
                               record_victims=True)
    big = int((df["size"].to_numpy() > 8000).sum())
    assert c["bypassed"] == big > 0
    assert c["hits"] == sim["hits"] and np.array_equal(dec["key"], sim["victims"]["key"])


def test_help():
    build_runtime()
    p = flashrt("--help")
    assert p.returncode == 0
    for opt in ("--bundle", "--trace", "--capacity", "--unit", "--cache-file",
                "--decisions-out", "--json"):
        assert opt in p.stdout
    p = flashrt("--trace", "x")
    assert p.returncode == 2 and "--bundle" in p.stderr
