"""KML's readahead models (issue 19, `../shared/seeds/kml-hotstorage21.txt`): the workload
class from one window's five features (features/readahead.toml), the class -> the best
readahead size of that workload (the sweep's label).

    data = dataset(rows_by_workload, best_kib)          # windows of every training workload
    t = fit(data, kind="mlp", seed=0)                   # the paper's network, 10-fold CV
    kib, _ = sizes_for_confusions(data, t.cv_pred, sweep_ops, sizes)  # class -> readahead
    doc = model_doc(t.model, replace(data, classes_kib=kib))  # -> save_readahead_model

The paper's network: the features Z-scored, one hidden layer of sigmoid units, a softmax
over the workload classes ("3-layer": input, hidden, output); its comparison: a decision tree.
Both are scikit-learn estimators; `cv` is stratified k-fold accuracy over the windows (the
paper's 10-fold figure, 95.5%).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from flashml.features import readahead as rc

KINDS = ("mlp", "tree")


@dataclass(frozen=True)
class Dataset:
    """Training windows: x (rows, 5 raw features), y (rows,) the workload's class index,
    workloads (class index -> name), classes_kib (class index -> readahead KiB), mean and
    std (the Z-score of x; std floored so constant features do not divide by 0)."""

    x: np.ndarray
    y: np.ndarray
    workloads: tuple[str, ...]
    classes_kib: tuple[int, ...]
    mean: np.ndarray
    std: np.ndarray

    @property
    def z(self) -> np.ndarray:
        return (self.x - self.mean) / self.std


def dataset(rows: Mapping[str, Sequence[Mapping[str, Any]]], best_kib: Mapping[str, int],
            *, max_per_workload: int | None = None, seed: int = 0) -> Dataset:
    """Windows of each workload (dicts with the contract's features, as
    `features.readahead.window_features` gives them) -> a Dataset; the class of a workload
    is its position in `rows`, its size `best_kib[workload]`. With `max_per_workload` a
    workload with more windows keeps a random sample of that many (slow workloads give many
    more windows per run than fast ones; the classes stay balanced)."""
    names = tuple(rows)
    if len(names) < 2:
        raise ValueError(f"at least two workloads to tell apart, got {list(names)}")
    rng = np.random.default_rng(seed)
    xs, ys = [], []
    for i, w in enumerate(names):
        if not rows[w]:
            raise ValueError(f"workload {w}: no windows with page-cache events")
        x = np.array([rc.feature_vector(r) for r in rows[w]], dtype=np.float64)
        if max_per_workload is not None and len(x) > max_per_workload:
            x = x[np.sort(rng.choice(len(x), max_per_workload, replace=False))]
        xs.append(x)
        ys.append(np.full(len(x), i, dtype=np.int64))
    x = np.vstack(xs)
    mean, std = x.mean(axis=0), x.std(axis=0)
    std = np.where(std > 1e-9 * np.maximum(1.0, np.abs(mean)), std, 1.0)
    return Dataset(x=x, y=np.concatenate(ys), workloads=names,
                   classes_kib=tuple(int(best_kib[w]) for w in names), mean=mean, std=std)


def estimator(kind: str, *, hidden: int = 16, depth: int = 6, seed: int = 0,
              max_iter: int = 2000) -> Any:
    """An unfitted model of `kind`: the paper's network (one hidden layer of `hidden`
    sigmoid units, softmax output) or a decision tree of at most `depth` levels."""
    if kind == "mlp":
        from sklearn.neural_network import MLPClassifier

        # L-BFGS: scikit-learn's choice for small data (a few thousand windows): converges in
        # a second where Adam takes minutes
        return MLPClassifier(hidden_layer_sizes=(hidden,), activation="logistic",
                             solver="lbfgs", max_iter=max_iter, random_state=seed)
    if kind == "tree":
        from sklearn.tree import DecisionTreeClassifier

        return DecisionTreeClassifier(max_depth=depth, random_state=seed)
    raise ValueError(f"kind {kind!r}: expected one of {KINDS}")


@dataclass(frozen=True)
class Trained:
    """A fitted model, its cross-validation figures and the class it was given for every
    window when that window was held out (`cv_pred`, aligned with the dataset's rows)."""

    model: Any
    metrics: dict[str, float]
    cv_pred: np.ndarray


def fit(data: Dataset, kind: str, *, folds: int = 10, seed: int = 0, **kw: Any) -> Trained:
    """Fit `kind` on every window (Z-scored) and measure it by stratified `folds`-fold
    cross-validation (folds capped by the smallest class): `cv_accuracy`, the share of
    windows whose workload is told right, and `cv_size_accuracy`, the share whose readahead
    is (two workloads with the same best size may be told apart or not: KML's choice is the
    same); `train_accuracy` and `rows` beside them."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.model_selection import StratifiedKFold, cross_val_predict

    k = int(min(folds, np.bincount(data.y).min()))
    kib = np.asarray(data.classes_kib)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        if k >= 2:
            pred = cross_val_predict(estimator(kind, seed=seed, **kw), data.z, data.y,
                                     cv=StratifiedKFold(k, shuffle=True, random_state=seed))
            acc = float(np.mean(pred == data.y))
            size_acc = float(np.mean(kib[pred] == kib[data.y]))
        else:
            pred = np.full(len(data.y), -1, dtype=np.int64)
            acc = size_acc = float("nan")
        model = estimator(kind, seed=seed, **kw).fit(data.z, data.y)
    return Trained(model, {"cv_accuracy": acc, "cv_size_accuracy": size_acc,
                           "cv_folds": float(k),
                           "train_accuracy": float(model.score(data.z, data.y)),
                           "rows": float(len(data.y))}, pred)


def sizes_for_confusions(data: Dataset, cv_pred: np.ndarray,
                         ops: Mapping[str, Mapping[Any, float]], sizes: Sequence[int]
                         ) -> tuple[tuple[int, ...], dict[str, float]]:
    """The readahead of each class for a model that confuses classes: the paper gives a
    class its own workload's best size, so two workloads the features cannot tell apart
    window by window (readrandom and readrandomwriterandom) whose best sizes differ within
    the sweep's noise make the tuner flip between them. Here each class j gets the size s
    (of `sizes`) with the highest expected relative throughput over the held-out
    steady-state windows the model put in j: sum over workloads i of n(i -> j) * ops_i(s) /
    max ops_i (`ops`: the sweep's record, workload -> {KiB as text: ops/s}); ties go to the
    smaller size; a class the model never chose keeps its own size. Identical to the
    paper's mapping when nothing is confused. Steady state: only a workload's windows
    recorded at its own best size count (the tuner, once it has settled, classifies those).
    Counting every window of the sweep measured the wrong thing: a scan at 8 KiB looks
    random, so random classes were pulled to 32 KiB, where the next window would have
    corrected the scan anyway, and mixgraph at 32 KiB runs at half its speed. Returns the
    sizes and {cv_relative_throughput_own, cv_relative_throughput}: the mean relative
    throughput of those windows under the paper's sizes and under these."""
    n = len(data.workloads)
    ra = data.x[:, rc.contract().names.index("readahead_kib")]
    held = (cv_pred >= 0) & (ra == np.asarray(data.classes_kib, dtype=np.float64)[data.y])
    conf = np.zeros((n, n))
    np.add.at(conf, (data.y[held], cv_pred[held]), 1.0)
    col = {int(k): m for m, k in enumerate(sizes)}
    rel = np.array([[ops[w][str(k)] / max(ops[w].values()) for k in sizes]
                    for w in data.workloads])
    out = []
    for j, own in enumerate(data.classes_kib):
        if conf[:, j].sum() == 0 or own not in col:
            out.append(int(own))
            continue
        score = conf[:, j] @ rel  # per size
        best = max(range(len(sizes)), key=lambda m: (round(score[m], 12), -sizes[m]))
        out.append(int(sizes[best]))
    total = conf.sum()

    def mean_rel(kib: Sequence[int]) -> float:
        if not total or any(k not in col for k in kib):
            return float("nan")
        return float(sum(conf[:, j] @ rel[:, col[k]] for j, k in enumerate(kib)) / total)

    return tuple(out), {"cv_relative_throughput_own": mean_rel(data.classes_kib),
                        "cv_relative_throughput": mean_rel(out)}


def model_doc(model: Any, data: Dataset) -> dict[str, Any]:
    """The bundle's readahead.json document of a fitted model (compiler/readahead.py)."""
    from flashml.compiler.readahead import model_json

    kib = [data.classes_kib[int(c)] for c in model.classes_]
    return model_json(model, mean=data.mean, std=data.std, classes_kib=kib)


def predict_kib(model: Any, data: Dataset, x: Any) -> np.ndarray:
    """scikit-learn's own choice (KiB) for raw feature rows: the reference the compiled
    flashml_readahead_kib must equal."""
    z = (np.atleast_2d(np.asarray(x, dtype=np.float64)) - data.mean) / data.std
    return np.asarray(data.classes_kib)[model.predict(z)]
