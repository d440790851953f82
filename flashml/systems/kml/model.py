"""KML's readahead models (`../shared/seeds/kml-hotstorage21.txt`): the workload
class from one window's five features (features/readahead.toml), the class -> the best
readahead size of that workload (the sweep's label).

    data = dataset(rows_by_workload, best_kib)          # windows of every training workload
    t = fit(data, kind="paper", seed=0)                 # KML's network, 10-fold CV
    kib, _ = sizes_for_confusions(data, t.cv_pred, sweep_ops, sizes)  # class -> readahead
    doc = model_doc(t.model, replace(data, classes_kib=kib))  # -> save_readahead_model

Three models, all on the Z-scored features, all scikit-learn estimators:

- `paper`: KML's network (the paper's Section 3: three linear layers joined by sigmoids,
  5 -> 15 -> 5 -> 4, cross-entropy, SGD with learning rate 0.01 and momentum 0.99);
- `mlp16`: ours, one hidden layer of 16 sigmoid units (5 -> 16 -> 4) fitted by L-BFGS
  (scikit-learn's choice for a few thousand rows: it converges in a second);
- `tree`: a decision tree (the paper's comparison).

`cv` is stratified k-fold accuracy over the windows (the paper's 10-fold figure, 95.5%).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from flashml.features import readahead as rc

KINDS = ("paper", "mlp16", "tree")
#: The networks among the kinds (compiled as the bundle's kind "mlp").
NETWORKS = ("paper", "mlp16")
#: KML's network: hidden layers, SGD's learning rate and momentum (the paper's Section 3).
PAPER_HIDDEN = (15, 5)
PAPER_LR, PAPER_MOMENTUM = 0.01, 0.99
#: SGD's epochs, at most (it stops earlier when the loss stops falling), and its minibatch:
#: the paper gives neither; with scikit-learn's default batch (200 rows) SGD at momentum
#: 0.99 stopped after 19 epochs at chance (25% on four classes the other models tell apart
#: fully), with 32 it learns them (100%, ~80 epochs).
PAPER_EPOCHS = 500
PAPER_BATCH = 32


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
    """An unfitted model of `kind`: KML's network (`paper`), ours (`mlp16`: one hidden layer
    of `hidden` sigmoid units, L-BFGS) or a decision tree of at most `depth` levels."""
    if kind == "paper":
        from sklearn.neural_network import MLPClassifier

        return MLPClassifier(hidden_layer_sizes=PAPER_HIDDEN, activation="logistic",
                             solver="sgd", learning_rate_init=PAPER_LR,
                             momentum=PAPER_MOMENTUM, nesterovs_momentum=False,
                             batch_size=PAPER_BATCH, max_iter=PAPER_EPOCHS,
                             random_state=seed)
    if kind == "mlp16":
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
                         ops: Mapping[str, Mapping[Any, float]], sizes: Sequence[int], *,
                         start_kib: int | None = None, windows: int = 30
                         ) -> tuple[tuple[int, ...], dict[str, float]]:
    """The readahead of each class for a model that confuses classes, chosen by the tuner's
    closed loop. The paper gives a class its own workload's best size; but the tuner feeds
    its choice back (the current readahead is a feature, and a workload's windows look
    different at another size): a reverse scan told "random" once runs at the random
    classes' 16 KiB, and if its windows at 16 KiB look random too, it stays there (a trap
    the per-window accuracy does not show: 0.85x of the best on a real readreverse run).

    The loop as a Markov chain over readahead sizes, per training workload i: from size s the
    next window's class is j with the probability the held-out predictions give workload i's
    windows recorded at s (`cv_pred`; a size with no such window takes the nearest recorded
    size's, in log2), and the next size is the class's size. Its expected relative
    throughput is the mean of ops_i(size) / max ops_i over `windows` windows from
    `start_kib` (the device's default; None: each workload's own best size). Every
    assignment of `sizes` to the classes is scored by the geometric mean over the workloads
    (a loss on one workload weighs more than the same loss spread) and the best is returned;
    ties go to the paper's sizes, then to smaller ones. `ops`: the sweep's record, workload
    -> {KiB as text: ops/s}. Returns the sizes and {cv_relative_throughput_own,
    cv_relative_throughput} (the chain's geometric mean with the paper's sizes and with
    these) and cv_relative_throughput_min (the worst workload with these)."""
    from itertools import product

    n = len(data.workloads)
    own = tuple(int(k) for k in data.classes_kib)
    held = cv_pred >= 0
    if not held.any():
        return own, {"cv_relative_throughput_own": float("nan"),
                     "cv_relative_throughput": float("nan"),
                     "cv_relative_throughput_min": float("nan")}
    states = sorted({int(k) for w in data.workloads for k in ops[w]} | {int(k) for k in sizes})
    idx = {k: m for m, k in enumerate(states)}
    # a size the sweep did not run for a workload earns nothing there
    rel = np.array([[ops[w].get(str(k), 0.0) / max(ops[w].values()) for k in states]
                    for w in data.workloads])
    ra = data.x[:, rc.contract().names.index("readahead_kib")]
    # p[i, s, j]: workload i's held-out windows recorded at size s put in class j
    p = np.zeros((n, len(states), n))
    for i in range(n):
        mine = held & (data.y == i)
        recorded = sorted({int(r) for r in ra[mine]})
        for si, s in enumerate(states):
            near = min(recorded, key=lambda r: (abs(np.log2(r) - np.log2(s)), r))
            sel = mine & (ra == near)
            p[i, si] = np.bincount(cv_pred[sel], minlength=n)[:n] / sel.sum()
    cand = [idx[int(k)] for k in sizes if int(k) in idx]

    def chain(assign: Sequence[int]) -> np.ndarray:
        """Each workload's expected relative throughput with class j -> states[assign[j]]."""
        out = np.empty(n)
        for i in range(n):
            t = np.zeros((len(states), len(states)))
            for j, a in enumerate(assign):
                t[:, a] += p[i, :, j]
            d = np.zeros(len(states))
            d[idx[start_kib] if start_kib in idx else idx[own[i]]] = 1.0
            acc = np.zeros(len(states))
            for _ in range(windows):
                d = d @ t
                acc += d
            out[i] = float(acc @ rel[i] / windows)
        return out

    def score(r: np.ndarray) -> float:
        return float(np.mean(np.log(np.maximum(r, 1e-9))))

    paper = [idx[k] for k in own] if all(k in idx for k in own) else None
    own_r = chain(paper) if paper is not None else np.full(n, np.nan)
    best, best_s, best_r = paper, score(own_r) if paper is not None else -np.inf, own_r
    for assign in product(cand, repeat=n):
        r = chain(assign)
        s = score(r)
        if s > best_s + 1e-12 or (abs(s - best_s) <= 1e-12 and best is not None
                                  and best != paper and list(assign) < list(best)):
            best, best_s, best_r = list(assign), s, r
    return (tuple(states[a] for a in best),
            {"cv_relative_throughput_own": float(np.exp(score(own_r))),
             "cv_relative_throughput": float(np.exp(best_s)),
             "cv_relative_throughput_min": float(np.min(best_r))})


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
