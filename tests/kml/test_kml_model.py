"""KML's readahead models (flashml/systems/kml/model.py) and their compiled form (capability
"readahead", flashml/compiler/readahead.py): the .so's choice equals scikit-learn's on every
row, for the network and the tree; the bundle's files are checked field by field; loaders
refuse a bundle of another contract or without the capability."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from flashml.compiler import readahead as ra
from flashml.errors import UserError
from flashml.features import readahead as rc
from flashml.systems.kml import model


def windows(rng: np.random.Generator, n: int, absdiff: float, tp: float) -> list[dict]:
    """Windows like a workload's: the offset jump and the tracepoint count tell it apart."""
    return [{"tracepoints": rng.normal(tp, tp / 5), "offset_mean": rng.normal(8000, 500),
             "offset_std": rng.normal(4000, 300), "offset_absdiff_mean": abs(
                 rng.normal(absdiff, absdiff / 4)),
             "readahead_kib": float(rng.choice([8, 64, 512, 2560]))} for _ in range(n)]


@pytest.fixture(scope="module")
def data() -> model.Dataset:
    rng = np.random.default_rng(7)
    rows = {"readrandom": windows(rng, 150, 5000, 400), "readseq": windows(rng, 150, 1.2, 3000),
            "readreverse": windows(rng, 150, 40, 900), "mixed": windows(rng, 150, 2000, 1500)}
    return model.dataset(rows, {"readrandom": 16, "readseq": 1024, "readreverse": 128,
                                "mixed": 32})


def test_dataset_classes_and_standardisation(data: model.Dataset) -> None:
    assert data.workloads == ("readrandom", "readseq", "readreverse", "mixed")
    assert data.classes_kib == (16, 1024, 128, 32)
    assert data.x.shape == (600, rc.contract().num_features)
    np.testing.assert_allclose(data.z.mean(axis=0), 0, atol=1e-9)
    np.testing.assert_allclose(data.z.std(axis=0), 1, atol=1e-9)
    const = model.dataset({"a": [dict(r, readahead_kib=8.0) for r in windows(
        np.random.default_rng(1), 5, 1, 10)], "b": [dict(r, readahead_kib=8.0) for r in windows(
            np.random.default_rng(2), 5, 100, 10)]}, {"a": 8, "b": 16})
    assert const.std[4] == 1.0  # a constant feature is not divided by 0
    with pytest.raises(ValueError, match="at least two workloads"):
        model.dataset({"a": [{}]}, {"a": 8})


@pytest.mark.parametrize("kind", model.KINDS)
def test_compiled_model_equals_scikit_learn(kind: str, data: model.Dataset,
                                            tmp_path: Path) -> None:
    from flashml.compiler.build import compile_policy
    from flashml.compiler.loader import PolicyLibrary, verify_bundle

    t = model.fit(data, kind, folds=5, seed=0)
    est, metrics = t.model, t.metrics
    assert metrics["cv_accuracy"] > 0.9 and metrics["cv_folds"] == 5
    assert metrics["cv_size_accuracy"] >= metrics["cv_accuracy"]  # a right class is a right size
    doc = model.model_doc(est, data)
    ra.save_readahead_model(tmp_path / "b", doc, metrics=metrics)
    manifest = compile_policy(tmp_path / "c", model_dir=tmp_path / "b", log_to_mlflow=False)
    assert manifest["capabilities"] == ["readahead"]
    assert manifest["readahead_contract_hash"] == rc.contract().hash
    verify_bundle(tmp_path / "c", need=("readahead",))
    lib = PolicyLibrary(tmp_path / "c" / "policy.so", need="readahead")
    # the training rows and fresh rows around (and beyond) them
    rng = np.random.default_rng(3)
    x = np.vstack([data.x, data.x * rng.uniform(0.5, 1.5, data.x.shape),
                   rng.uniform(-1e6, 1e6, (200, data.x.shape[1]))])
    want = model.predict_kib(est, data, x)
    np.testing.assert_array_equal(lib.readahead_kib(x), want)
    np.testing.assert_array_equal(ra.predict_kib(doc, x), want)
    assert set(np.unique(want)) <= set(data.classes_kib)


def test_the_papers_network_is_kmls_own(data: model.Dataset) -> None:
    """KML's network (the paper's Section 3): three linear layers joined by sigmoids,
    5 -> 15 -> 5 -> 4, cross-entropy, SGD with learning rate 0.01 and momentum 0.99; ours,
    mlp16, is one hidden layer of 16 fitted by L-BFGS. Before, only ours existed and was
    called "the paper's network"."""
    paper = model.estimator("paper")
    assert paper.hidden_layer_sizes == (15, 5) and paper.activation == "logistic"
    assert (paper.solver, paper.learning_rate_init, paper.momentum) == ("sgd", 0.01, 0.99)
    est = model.fit(data, "paper", folds=2).model
    assert [w.shape for w in est.coefs_] == [(5, 15), (15, 5), (5, 4)]
    ours = model.estimator("mlp16")
    assert (ours.hidden_layer_sizes, ours.solver) == ((16,), "lbfgs")
    doc = model.model_doc(est, data)
    assert [len(layer["biases"]) for layer in doc["layers"]] == [15, 5, 4]


def test_bundle_errors_name_the_file_and_field(data: model.Dataset, tmp_path: Path) -> None:
    from flashml.compiler.build import compile_policy

    est = model.fit(data, "tree", folds=2).model
    doc = model.model_doc(est, data)
    n = len(doc["tree"]["left"])
    cases = {"format": dict(doc, format="x"), "kind": dict(doc, kind="forest"),
             "std": dict(doc, std=[1, 1, 0, 1, 1]),
             "classes_kib": dict(doc, classes_kib=[8, 0, 16, 32]),
             "tree[0]": dict(doc, tree=dict(doc["tree"], feature=[99] * n))}
    for field, bad in cases.items():
        folder = tmp_path / field
        ra.save_readahead_model(folder, doc)
        (folder / ra.READAHEAD_FILE).write_text(json.dumps(bad))
        with pytest.raises(UserError, match=re.escape(f"readahead.json: field '{field}")):
            compile_policy(tmp_path / f"out-{field}", model_dir=folder, log_to_mlflow=False)
        assert not (tmp_path / f"out-{field}").exists()  # no half-written output
    folder = tmp_path / "nohash"
    ra.save_readahead_model(folder, doc)
    pj = json.loads((folder / "policy.json").read_text())
    pj["readahead"]["contract_hash"] = "0" * 64
    (folder / "policy.json").write_text(json.dumps(pj))
    with pytest.raises(UserError, match="contract"):
        compile_policy(tmp_path / "out-nohash", model_dir=folder, log_to_mlflow=False)


def test_model_json_refuses_what_the_c_cannot_run(data: model.Dataset) -> None:
    from sklearn.neural_network import MLPClassifier

    relu = MLPClassifier((4,), activation="relu", max_iter=500).fit(data.z, data.y)
    with pytest.raises(ValueError, match="logistic"):
        ra.model_json(relu, mean=data.mean, std=data.std, classes_kib=data.classes_kib)
    est = model.fit(data, "mlp16", folds=2, max_iter=200).model
    with pytest.raises(ValueError, match="classes_kib"):
        ra.model_json(est, mean=data.mean, std=data.std, classes_kib=[8, 16])


def test_loaders_refuse_another_contract_or_capability(data: model.Dataset,
                                                      tmp_path: Path) -> None:
    from flashml.compiler.build import compile_policy
    from flashml.compiler.loader import verify_bundle

    est = model.fit(data, "tree", folds=2).model
    ra.save_readahead_model(tmp_path / "b", model.model_doc(est, data))
    compile_policy(tmp_path / "c", model_dir=tmp_path / "b", log_to_mlflow=False)
    with pytest.raises(UserError, match="no eviction capability|eviction"):
        verify_bundle(tmp_path / "c", need=("eviction",))
    m = json.loads((tmp_path / "c" / "manifest.json").read_text())
    m["readahead_contract_hash"] = "f" * 64
    (tmp_path / "c" / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(UserError, match="readahead contract mismatch"):
        verify_bundle(tmp_path / "c", need=("readahead",))


def test_sizes_for_confusions_by_hand() -> None:
    """Two workloads A (best 16 KiB) and B (best 8 KiB, 16 within 1%): a model that never
    confuses them keeps the paper's sizes; one that confuses them half the time, whatever
    the size, gives both classes 16 KiB (the tuner's loop then runs A at 1.0 and B at 0.99:
    better than flipping between 8 and 16)."""
    x = np.zeros((24, 5))
    x[:, 4] = [16] * 10 + [8] * 10 + [32] * 4  # the readahead each window was recorded at
    d = model.Dataset(x=x, y=np.repeat([0, 1, 1], [10, 10, 4]), workloads=("A", "B"),
                      classes_kib=(16, 8), mean=np.zeros(5), std=np.ones(5))
    ops = {"A": {"8": 95.0, "16": 100.0, "32": 50.0}, "B": {"8": 100.0, "16": 99.0, "32": 20.0}}
    sure = d.y.copy()
    kib, rel = model.sizes_for_confusions(d, sure, ops, [8, 16, 32], start_kib=32)
    assert kib == (16, 8)
    # from 32 KiB the first window already moves each to its own size
    assert rel["cv_relative_throughput"] == rel["cv_relative_throughput_own"]
    assert rel["cv_relative_throughput_min"] == pytest.approx(1.0)
    coin = np.array([0, 1] * 12)  # each workload's windows half A, half B
    kib, rel = model.sizes_for_confusions(d, coin, ops, [8, 16, 32])
    assert kib == (16, 16)
    assert rel["cv_relative_throughput_own"] == pytest.approx(np.sqrt(0.975 * 0.995))
    assert rel["cv_relative_throughput"] == pytest.approx(np.sqrt(1.0 * 0.99))
    # a class the model never chose: any size scores the same, the paper's is kept
    kib, _ = model.sizes_for_confusions(d, np.zeros(24, dtype=np.int64), ops, [8, 16, 32])
    assert kib == (16, 8)


def test_sizes_for_confusions_escape_a_trap() -> None:
    """The closed loop: a scan R (best 64 KiB, 0.4x at 16) told from a random workload X
    (best 16) at 64 KiB 90% of the time, but whose windows at 16 KiB all look random. With
    the paper's sizes one wrong window traps R at 16 KiB for good; the window-by-window view
    (R's windows at 64 KiB are 90% right) cannot see it. Giving X 32 KiB (0.95x for X) lets
    R's next window out (at 32 KiB R is told right), so that is the choice."""
    # R at 64 (9 told R, 1 told X), R at 16 (all told X), R at 32 (all told R); X at 16, 32
    # and 64 (all told X)
    ra = [64] * 10 + [16] * 10 + [32] * 10 + [16] * 10 + [32] * 10 + [64] * 10
    x = np.zeros((60, 5))
    x[:, 4] = ra
    y = np.repeat([0, 1], [30, 30])  # class 0 = R, 1 = X
    pred = np.concatenate([[0] * 9 + [1], [1] * 10, [0] * 10, [1] * 30])
    d = model.Dataset(x=x, y=y, workloads=("R", "X"), classes_kib=(64, 16),
                      mean=np.zeros(5), std=np.ones(5))
    ops = {"R": {"16": 40.0, "32": 70.0, "64": 100.0}, "X": {"16": 100.0, "32": 95.0, "64": 50.0}}
    kib, rel = model.sizes_for_confusions(d, pred, ops, [16, 32, 64], start_kib=64)
    assert kib == (64, 32)
    assert rel["cv_relative_throughput"] > rel["cv_relative_throughput_own"]
    # the paper's sizes: R leaves 64 KiB with probability 0.1 per window and never returns
    r_own = np.mean([0.4 + 0.6 * 0.9 ** t for t in range(1, 31)])
    assert rel["cv_relative_throughput_own"] == pytest.approx(np.sqrt(r_own * 1.0))
