"""MLCache's network (flashml/systems/mlcache/model.py, features/partition.py) and its compiled form
(capability "partition"): the features against a slow obvious monitor, the labels against a
brute-force split of the next interval, the shares rule, the .so against the network's own
arithmetic, its fallback and argument checks, and bad bundles."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from flashml.compiler.build import compile_policy
from flashml.compiler.bundle import PARTITION_FILE, save_partition_model
from flashml.compiler.loader import PolicyLibrary, verify_bundle
from flashml.errors import UserError
from flashml.features.partition import contract
from flashml.systems.mlcache import model
from flashml.systems.mlcache.partitioning import stream_trace

C = contract()


def small_trace(seed: int, n: int = 3000, k: int = 3) -> object:
    rng = np.random.default_rng(seed)
    streams = rng.integers(0, k, n)
    keys = rng.zipf(1.3, n) % (40 + 30 * streams) + 1000 * streams
    return stream_trace(keys, streams, rng.random(n) < 0.7)


def slow_features(tr: object, capacity: int, interval: int) -> np.ndarray:
    """The monitor walked by hand: per-stream LRU stacks (lists), over the writes."""
    keys = tr.keys[tr.writes]
    streams = tr.streams[tr.writes]
    stacks: dict[int, list[int]] = {}
    rows = []
    for start in range(0, len(keys), interval):
        x = np.zeros((C.max_streams, C.steps + 1))
        n = min(interval, len(keys) - start)
        for key, s in zip(keys[start:start + n], streams[start:start + n], strict=True):
            st = stacks.setdefault(int(s), [])
            x[s, C.steps] += 1
            if key in st:
                d = st.index(key) + 1
                st.remove(key)
                if d <= capacity:
                    x[s, (d - 1) * C.steps // capacity] += 1
            st.insert(0, key)
        rows.append((x / n).ravel())
    return np.array(rows)


def brute_split(curves: np.ndarray) -> int:
    """The most hits over every split of the steps (by enumeration)."""
    k, t = curves.shape[0], curves.shape[1] - 1
    return max(sum(curves[i][c[i]] for i in range(k))
               for c in itertools.product(range(t + 1), repeat=k) if sum(c) == t)


def test_features_equal_a_slow_monitor() -> None:
    tr = small_trace(1)
    x, _ = model.trace_features(tr, capacity=50, interval=400)
    np.testing.assert_allclose(x, slow_features(tr, 50, 400), rtol=0, atol=1e-12)
    assert x.shape[1] == C.num_features == C.max_streams * (C.steps + 1)


def test_labels_are_the_next_intervals_best_split_in_shuffled_slots() -> None:
    tr = small_trace(2)
    x, curves = model.trace_features(tr, capacity=50, interval=400)
    d = model.interval_dataset(tr, 50, 400, rng=np.random.default_rng(0), permutations=2)
    n = len(curves) - 1
    assert d.x.shape == (2 * n, C.num_features) and d.y.shape == (2 * n, C.max_streams)
    k = tr.n_streams
    for row in range(2 * n):
        i = row % n
        # recover the slot order from the features: each slot is one stream's block
        slots = d.x[row].reshape(C.max_streams, C.steps + 1)[:k]
        orig = x[i].reshape(C.max_streams, C.steps + 1)[:k]
        perm = [next(j for j in range(k) if np.array_equal(slots[s], orig[j]))
                for s in range(k)]
        assert sorted(perm) == list(range(k))
        steps = np.rint(d.y[row, :k] * C.steps).astype(int)
        assert steps.sum() == C.steps and not d.y[row, k:].any()
        got = sum(curves[i + 1][perm[s]][steps[s]] for s in range(k))
        assert got == brute_split(curves[i + 1]), row


def test_shares_rule() -> None:
    out = np.zeros((3, C.max_streams))
    out[0, :3] = [1.0, 3.0, -2.0]
    out[1, :3] = [-1.0, -1.0, np.nan]
    out[2, :3] = [np.inf, 1.0, 1.0]
    out[:, 3:] = 5.0  # absent slots never count
    shares, fb = model.shares_from_outputs(out, 3)
    np.testing.assert_allclose(shares[0], [0.25, 0.75, 0.0])
    np.testing.assert_allclose(shares[1], [1 / 3] * 3)
    np.testing.assert_allclose(shares[2], [0.0, 0.5, 0.5])
    assert fb.tolist() == [False, True, False]
    sched = model.schedule(shares, 3)
    np.testing.assert_allclose(sched[0], [1 / 3] * 3)
    np.testing.assert_allclose(sched[1:], shares[:-1])


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object, np.ndarray]:
    tmp = tmp_path_factory.mktemp("partition")
    data = [model.interval_dataset(small_trace(s), 50, 300, rng=np.random.default_rng(s),
                                   group=s) for s in range(4)]
    net = model.train_network(data, hidden=(24,), max_iter=40)
    save_partition_model(tmp / "bundle", net, metrics={"cv_l1": 0.5}, capacity=50)
    compile_policy(tmp / "out", model_dir=tmp / "bundle", log_to_mlflow=False)
    return tmp, net, np.vstack([d.x for d in data])


def test_compiled_network_equals_the_network(compiled: tuple) -> None:
    tmp, net, x = compiled
    m = verify_bundle(tmp / "out", need="partition")
    assert m["capabilities"] == ["partition"] and m["partition"]["hidden"] == [24]
    lib = PolicyLibrary(tmp / "out" / "policy.so", need="partition")
    for k in (1, 3, C.max_streams):
        so, status = lib.partition(x, k)
        py, fb = model.shares_from_outputs(net.predict(x), k)
        assert np.abs(so - py).max() < 1e-5  # float32 in C, float64 in scikit-learn
        np.testing.assert_allclose(so.sum(axis=1), 1.0, atol=1e-12)
        assert (status == fb).all()
    with pytest.raises(UserError, match="no eviction capability"):
        PolicyLibrary(tmp / "out" / "policy.so", need="eviction")


def test_compiled_network_falls_back_to_even_and_checks_streams(compiled: tuple,
                                                                tmp_path: Path) -> None:
    import copy
    import ctypes

    _, net, x = compiled
    net = copy.deepcopy(net)
    net.intercepts_[-1][:] = -1.0
    for w in net.coefs_:
        w[:] = 0.0
    save_partition_model(tmp_path / "b", net)
    compile_policy(tmp_path / "o", model_dir=tmp_path / "b", log_to_mlflow=False)
    lib = PolicyLibrary(tmp_path / "o" / "policy.so", need="partition")
    shares, status = lib.partition(x[:5], 4)
    assert (status == 1).all() and np.allclose(shares, 0.25)
    buf = (ctypes.c_double * C.max_streams)(*([7.0] * C.max_streams))
    row = np.ascontiguousarray(x[0])
    dp = ctypes.POINTER(ctypes.c_double)
    for bad in (0, C.max_streams + 1, -3):
        assert lib.lib.flashml_partition(row.ctypes.data_as(dp), bad, buf) == -1
    assert list(buf) == [7.0] * C.max_streams


def test_bad_partition_bundles(compiled: tuple, tmp_path: Path) -> None:
    tmp, _, _ = compiled
    import shutil

    for i, (mutate, fragment) in enumerate((
        (lambda d: d.pop("layers"), "'layers'"),
        (lambda d: d["layers"][0].update(weights=[[1.0]]), "'layers[0]'"),
        (lambda d: d["layers"][1].update(biases=[float("nan")] * C.max_streams), "'layers[1]'"),
        (lambda d: d.update(format="onnx"), "'format'"),
    )):
        b = tmp_path / f"b{i}"
        shutil.copytree(tmp / "bundle", b)
        raw = json.loads((b / PARTITION_FILE).read_text())
        mutate(raw)
        (b / PARTITION_FILE).write_text(json.dumps(raw).replace("NaN", "1e999"))
        with pytest.raises(UserError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
            compile_policy(tmp_path / "out", model_dir=b, log_to_mlflow=False)
        assert not (tmp_path / "out").exists()
    b = tmp_path / "nofile"
    shutil.copytree(tmp / "bundle", b)
    (b / PARTITION_FILE).unlink()
    with pytest.raises(UserError, match="partition.json: missing"):
        compile_policy(tmp_path / "out", model_dir=b, log_to_mlflow=False)


def test_partition_merges_with_an_eviction_model(compiled: tuple, tmp_path: Path) -> None:
    """One .so with MAT's eviction model and MLCache's network: both capabilities, exactly
    their functions, each answering as alone."""
    import lightgbm as lgb

    from flashml.compiler.bundle import save_evict_model
    from flashml.compiler.so_checks import exported_functions
    from flashml.features import eviction
    from flashml.features.abi import capability_functions

    tmp, net, x = compiled
    rng = np.random.default_rng(0)
    xe = rng.random((300, eviction.contract().num_features))
    booster = lgb.train({"objective": "regression", "num_leaves": 4, "verbose": -1},
                        lgb.Dataset(xe, xe[:, 0] * 3), num_boost_round=3)
    save_evict_model(tmp_path / "b", booster, k=2.0, max_candidates=10, delta=1e-4,
                     initial_threshold=100.0)
    save_partition_model(tmp_path / "b", net, merge=True, capacity=50)
    assert (tmp_path / "b" / "evict.txt").is_file()
    m = compile_policy(tmp_path / "o", model_dir=tmp_path / "b", log_to_mlflow=False)
    assert m["capabilities"] == ["eviction", "partition"]
    so = tmp_path / "o" / "policy.so"
    assert exported_functions(so) == capability_functions(["eviction", "partition"])
    lib = PolicyLibrary(so, need=("eviction", "partition"))
    alone = PolicyLibrary(tmp / "out" / "policy.so", need="partition")
    assert np.array_equal(lib.partition(x, 3)[0], alone.partition(x, 3)[0])
    np.testing.assert_allclose(lib.evict_predict(xe), booster.predict(xe), rtol=1e-12)


def test_our_loop_equals_emlearns_inference_bit_for_bit(compiled: tuple, tmp_path: Path) -> None:
    """partition_net.c evaluates emlearn's layers with its own (vectorisable) loop; on the same
    float32 inputs it gives exactly what emlearn's eml_net_regress gives."""
    import subprocess

    from flashml.compiler.bundle import read_partition_model
    from flashml.compiler.partition_build import _emlearn_include, _partition_sources

    tmp, _, x = compiled
    ws, bs = read_partition_model(tmp / "bundle" / PARTITION_FILE)
    (net_c, _), _ = _partition_sources(tmp_path, ws, bs, C.hash)
    harness = tmp_path / "harness.c"
    harness.write_text(f"""#include <stdio.h>
#include "{net_c.name}"
int main(void) {{
    float in[{C.num_features}], ours[{C.max_streams}], theirs[{C.max_streams}];
    float b1[256], b2[256];
    EmlNet m = flashml_pnet;
    m.activations1 = b1; m.activations2 = b2; m.activations_length = 256;
    while (fread(in, sizeof in, 1, stdin) == 1) {{
        if (flashml_partition_net(in, ours) != 0) return 2;
        if (eml_net_regress(&m, in, {C.num_features}, theirs, {C.max_streams}) != EmlOk) return 3;
        fwrite(ours, sizeof ours, 1, stdout);
        fwrite(theirs, sizeof theirs, 1, stdout);
    }}
    return 0;
}}
""")
    exe = tmp_path / "harness"
    subprocess.run(["cc", "-std=c11", "-O2", "-w", "-I", str(tmp_path), "-I",
                    str(_emlearn_include()), str(harness), "-lm", "-o", str(exe)], check=True)
    rows = np.ascontiguousarray(x[:300], dtype=np.float32)
    out = subprocess.run([str(exe)], input=rows.tobytes(), capture_output=True, check=True).stdout
    both = np.frombuffer(out, dtype=np.float32).reshape(len(rows), 2, C.max_streams)
    assert np.array_equal(both[:, 0].view(np.uint32), both[:, 1].view(np.uint32))


def test_sharpness_in_the_compiled_rule(compiled: tuple, tmp_path: Path) -> None:
    """The shares' sharpness travels in the bundle: the .so raises the positive outputs to it
    as shares_from_outputs does; a bad value is refused naming the field."""
    tmp, net, x = compiled
    save_partition_model(tmp_path / "b", net, sharpness=2.0)
    compile_policy(tmp_path / "o", model_dir=tmp_path / "b", log_to_mlflow=False)
    lib = PolicyLibrary(tmp_path / "o" / "policy.so", need="partition")
    so, _ = lib.partition(x, 3)
    sharp, _ = model.shares_from_outputs(net.predict(x), 3, 2.0)
    flat, _ = model.shares_from_outputs(net.predict(x), 3)
    assert np.abs(so - sharp).max() < 1e-5 and np.abs(so - flat).max() > 1e-3
    raw = json.loads((tmp_path / "b" / "policy.json").read_text())
    raw["partition"]["sharpness"] = 0
    (tmp_path / "b" / "policy.json").write_text(json.dumps(raw))
    with pytest.raises(UserError, match="partition.sharpness"):
        compile_policy(tmp_path / "o2", model_dir=tmp_path / "b", log_to_mlflow=False)


def test_compiling_leaves_numpys_error_state_alone() -> None:
    """emlearn's bayes module sets numpy.seterr(all='raise') at import; compiling a partition
    network (which imports emlearn) must not leak that into the process (it turned a later MLP
    predict's harmless underflow into a FloatingPointError). Fresh interpreter: emlearn may
    already be imported in this one."""
    import subprocess
    import sys

    code = ("import numpy as np\n"
            "from flashml.compiler import partition_build as build\n"
            "before = np.geterr()\n"
            "build._emlearn_include()\n"
            "build._emlearn().net.c_generate_net_loadable\n"
            "assert np.geterr() == before, np.geterr()\n"
            "np.ones((2, 2)) * 1e-320 @ np.ones((2, 2)) * 1e-10\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_cross_validation_judges_each_fold_network_on_its_held_out_mixes() -> None:
    """cross_validate's hit ratios are those of each fold's network (trained on the other
    mixes) running mlcache's schedule on the mixes it did not see, simulated one by one here;
    the sharpness it returns is the best of them."""
    from flashml.systems.mlcache.partitioning import simulate_partitioned

    cap, iv = 60, 300
    traces = [small_trace(s) for s in range(4)]
    rng = np.random.default_rng(0)
    data = [model.interval_dataset(t, cap, iv, rng=rng, permutations=2, group=g, lead=0)
            for g, t in enumerate(traces)]
    cv = model.cross_validate(data, traces, cap, iv, hidden=(8,), folds=2, max_iter=40)
    order = np.random.default_rng(0).permutation(4)
    want: dict[float, list[float]] = {g: [] for g in model.SHARPNESS}
    for f in range(2):
        held = set(order[f::2].tolist())
        net = model.train_network([d for d in data if d.group not in held], hidden=(8,),
                                  max_iter=40)
        for g in sorted(held):
            t = traces[g]
            x, _ = model.trace_features(t, cap, iv)
            for sh in model.SHARPNESS:
                shares = model.schedule(model.predict_shares(net, x, 3, sh), 3)
                r = simulate_partitioned(t, cap, iv, "mlcache", writes_only=True, shares=shares)
                want[sh].append(r["hits"] / r["cached_requests"])
    assert cv["hit_ratio"] == pytest.approx({g: np.mean(v) for g, v in want.items()}, abs=1e-12)
    assert cv["cv_hit_ratio"] == max(cv["hit_ratio"].values())
    assert cv["hit_ratio"][cv["sharpness"]] == cv["cv_hit_ratio"] and cv["cv_folds"] == 2
    assert 0 < cv["cv_l1"] <= 2 and 0 < cv["cv_mse"] <= 2
