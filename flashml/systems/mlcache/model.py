"""MLCache's partition network (`../shared/seeds/mlcache-iccad20.txt`): per
interval, the monitor's features (features/partition.toml) -> the next interval's share of the
cache for each stream.

    data = interval_dataset(trace, capacity=260, interval=5000, rng=rng)   # one mix
    net = train_network([data, ...], hidden=64, seed=0)
    shares = predict_shares(net, x, streams=4)

Labels are the paper's "discrete optimal partition" (the best split of `steps` equal steps
of the capacity on an interval's exact per-stream hit curves,
flashml.systems.mlcache.partitioning.best_split) of the same interval (`lead` 0, the job's default)
or of the next (`lead` 1): the network sees interval i and is judged on interval i+1 either way
(other-seeds-notes §2.1: the label alignment the paper leaves open; the same interval's split is a
function of the features, the next one's is a noisier target, and on held-out mixes the first judged
better). The streams are shuffled among the slots of every row (the paper's permutation
augmentation), and the label's split is searched in that shuffled order, so ties are not always
broken towards one slot.

The network is scikit-learn's MLPRegressor with one hidden layer of ReLUs (the paper's Fig. 3;
its text says two layers of 256: `hidden` chooses) and one linear output per slot; its outputs
become shares by `shares_from_outputs`, the same rule the C function applies: absent slots
dropped, negatives clipped to 0, normalised to sum 1, and the even split when none is
positive (the paper's constraint check).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from flashml.errors import UserError
from flashml.features import partition as pc
from flashml.systems.mlcache.partitioning import StreamTrace, best_split, partition_curves


@dataclass(frozen=True)
class IntervalData:
    """Rows of one trace: x (rows, num_features), y (rows, max_streams) the label shares
    (zero in absent slots), n_streams, group (an id of the trace, for cross-validation)."""

    x: np.ndarray
    y: np.ndarray
    streams: int
    group: int


def seen_streams(trace: StreamTrace, writes_only: bool) -> np.ndarray:
    """The stream of every request the cache sees (writes only in the paper's setting)."""
    return trace.streams[trace.writes] if writes_only else trace.streams


def trace_features(trace: StreamTrace, capacity: int, interval: int, *,
                   writes_only: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The features of every interval of a trace (intervals, num_features) and its hit
    curves (intervals, n_streams, steps + 1), on the contract's grid."""
    c = pc.contract()
    cur = partition_curves(trace, capacity, interval, c.steps, writes_only=writes_only)
    counts = pc.interval_counts(seen_streams(trace, writes_only), trace.n_streams, interval)
    return pc.interval_features(cur["histograms"], counts, c), cur["curves"]


def interval_dataset(trace: StreamTrace, capacity: int, interval: int, *,
                     rng: np.random.Generator, writes_only: bool = True,
                     permutations: int = 1, group: int = 0, lead: int = 1) -> IntervalData:
    """Training rows of one trace: interval i's features -> interval i+lead's best split
    (lead 1: the next interval's, 0: its own), with the streams shuffled among slots 0..n_streams-1
    (`permutations` shuffles of every row)."""
    if lead not in (0, 1):
        raise ValueError(f"lead must be 0 or 1, got {lead}")
    c = pc.contract()
    n_streams = trace.n_streams
    if n_streams > c.max_streams:
        raise ValueError(f"{n_streams} streams; the partition contract has at most {c.max_streams}")
    cur = partition_curves(trace, capacity, interval, c.steps, writes_only=writes_only)
    hist, curves = cur["histograms"], cur["curves"]
    counts = pc.interval_counts(seen_streams(trace, writes_only), n_streams, interval)
    rows = len(curves) - lead
    xs, ys = [], []
    for _ in range(permutations):
        perm = np.argsort(rng.random((rows, n_streams)), axis=1)
        h = np.take_along_axis(hist[:rows], perm[:, :, None], axis=1)
        n = np.take_along_axis(counts[:rows], perm, axis=1)
        xs.append(pc.interval_features(h, n, c))
        y = np.zeros((rows, c.max_streams))
        for i in range(rows):
            split, _ = best_split(curves[i + lead][perm[i]])
            y[i, :n_streams] = np.asarray(split, dtype=np.float64) / c.steps
        ys.append(y)
    return IntervalData(np.vstack(xs) if xs else np.zeros((0, c.num_features)),
                        np.vstack(ys) if ys else np.zeros((0, c.max_streams)), n_streams, group)


#: Exponents the job chooses the shares' sharpness from (1: the outputs as they are).
SHARPNESS = (1.0, 1.5, 2.0, 3.0)


def shares_from_outputs(out: Any, streams: int, sharpness: float = 1.0
                        ) -> tuple[np.ndarray, np.ndarray]:
    """The network's outputs (rows, max_streams) -> shares (rows, streams) and whether each
    row fell back to even (no positive output among the streams present). The positive
    outputs are raised to `sharpness` before normalising: above 1 the larger shares grow,
    as the optimal splits (often all or nothing for a stream) are sharper than a
    squared-error regression's averages."""
    o = np.asarray(out, dtype=np.float64)[:, :streams]
    o = np.where(np.isfinite(o) & (o > 0), o, 0.0)
    if sharpness != 1.0:
        o = o ** sharpness
    total = o.sum(axis=1, keepdims=True)
    fallback = total[:, 0] <= 0
    shares = np.where(fallback[:, None], 1.0 / streams, o / np.where(total > 0, total, 1.0))
    return shares, fallback


def train_network(data: list[IntervalData], *, hidden: tuple[int, ...] = (64,),
                  seed: int = 0, max_iter: int = 300, alpha: float = 1e-4) -> Any:
    """Fit the network on the rows of `data` (scikit-learn MLPRegressor, ReLU hidden layers,
    Adam, early stopping on 10% of the rows)."""
    from sklearn.neural_network import MLPRegressor

    x = np.vstack([d.x for d in data])
    y = np.vstack([d.y for d in data])
    if len(x) < 20:
        raise UserError(f"{len(x)} training rows; the network needs at least 20 (a longer "
                        "trace or --requests, more --train-mixes or a shorter --interval)")
    net = MLPRegressor(hidden_layer_sizes=hidden, activation="relu", solver="adam",
                       alpha=alpha, max_iter=max_iter, early_stopping=True,
                       validation_fraction=0.1, n_iter_no_change=20, random_state=seed)
    net.fit(x, y)
    return net


def predict_shares(net: Any, x: Any, streams: int, sharpness: float = 1.0) -> np.ndarray:
    """Shares (rows, streams) of a fitted network (scikit-learn, float64)."""
    return shares_from_outputs(net.predict(np.asarray(x, dtype=np.float64)), streams,
                               sharpness)[0]


def schedule(next_shares: np.ndarray, streams: int) -> np.ndarray:
    """The `mlcache` policy's shares per interval from predictions made at the end of each
    interval: interval 0 has no history (even), interval i+1 gets the prediction of i."""
    first = np.full((1, streams), 1.0 / streams)
    return np.vstack([first, np.asarray(next_shares, dtype=np.float64)[:-1]])


def previous_optimal_shares(trace: StreamTrace, capacity: int, interval: int,
                            writes_only: bool, curves: Any = None) -> np.ndarray:
    """Shares for interval i: interval i-1's best split on its own curves (even for the
    first), i.e. predicting that the next interval looks like the last one: the non-learned
    predictor the network has to beat. `curves`: the trace's interval hit curves if already
    computed (trace_features gives them)."""
    if curves is None:
        curves = partition_curves(trace, capacity, interval,
                                  writes_only=writes_only)["curves"]
    n_streams = trace.n_streams
    rows = [np.full(n_streams, 1.0 / n_streams)]
    rows += [np.array(best_split(c)[0], dtype=np.float64) for c in curves[:-1]]
    return np.vstack(rows)


def rule_shares(x: Any, streams: int) -> np.ndarray:
    """The rule "previous_optimal" as the compiled policy computes it from the features
    (compiler/partition_rule.c.in, the same float64 operations in the same order): each
    row's best split of the contract's steps on the curves its histograms give (stream s's
    hits with j steps: the sum of its buckets 0..j-1), best_split's dynamic programming with
    its ties (a later stream's smaller count wins unless the larger is better by 1e-12), as
    shares (rows, streams)."""
    c = pc.contract()
    t = c.steps
    f = np.asarray(x, dtype=np.float64).reshape(len(x), c.max_streams, c.per_stream)
    rows = len(f)
    curve = np.zeros((rows, streams, t + 1))
    for j in range(t):
        curve[:, :, j + 1] = curve[:, :, j] + f[:, :streams, j]
    best = np.zeros((streams, rows, t + 1))
    choice = np.zeros((streams, rows, t + 1), dtype=np.int64)
    best[0] = curve[:, 0, :]
    choice[0] = np.arange(t + 1)
    for i in range(1, streams):
        for b in range(t + 1):
            cur = best[i - 1][:, b] + curve[:, i, 0]
            pick = np.zeros(rows, dtype=np.int64)
            for s in range(1, b + 1):
                v = best[i - 1][:, b - s] + curve[:, i, s]
                better = v > cur + 1e-12
                cur = np.where(better, v, cur)
                pick = np.where(better, s, pick)
            best[i][:, b], choice[i][:, b] = cur, pick
    out = np.empty((rows, streams))
    left = np.full(rows, t)
    for i in range(streams - 1, -1, -1):
        s = choice[i][np.arange(rows), left]
        out[:, i] = s / t
        left = left - s
    return out


def cross_validate(data: list[IntervalData], traces: list[Any], capacity: int, interval: int,
                   *, hidden: tuple[int, ...], folds: int = 4, writes_only: bool = True,
                   seed: int = 0, max_iter: int = 300) -> dict[str, Any]:
    """Held-out-mix cross-validation (data[i] and traces[i] are the same mix): the mixes in
    `folds` groups; each fold's network, trained on the others, is judged on its mixes two
    ways: the shares against the labels per row (mean squared error and mean L1 distance)
    and what matters, the write-hit ratio (hit ratio with reads) the simulator gives mlcache's
    schedule of that network on each held-out mix, at every sharpness of SHARPNESS. One set
    of fold networks serves both the choice of the hidden sizes and of the sharpness.
    Returns {"cv_folds", "cv_mse", "cv_l1", "hit_ratio": {sharpness: mean over the mixes},
    "sharpness": the best (ties: the smaller), "cv_hit_ratio": its mean}."""
    from flashml.systems.mlcache.partitioning import simulate_partitioned

    groups = np.array([d.group for d in data])
    uniq = np.unique(groups)
    folds = min(folds, len(uniq))
    if folds < 2:
        raise ValueError("cross-validation needs traces of at least 2 groups")
    order = np.random.default_rng(seed).permutation(uniq)
    mse, l1 = [], []
    ratio: dict[float, list[float]] = {g: [] for g in SHARPNESS}
    from tqdm import tqdm

    for f in tqdm(range(folds), desc="cross-validation", unit="fold", disable=None,
                  leave=False):
        held = set(order[f::folds].tolist())
        train = [d for d in data if d.group not in held]
        net = train_network(train, hidden=hidden, seed=seed, max_iter=max_iter)
        for d, t in zip(data, traces, strict=True):
            if d.group not in held:
                continue
            p = np.zeros_like(d.y)
            p[:, :d.streams] = predict_shares(net, d.x, d.streams)
            mse.append(float(((p - d.y) ** 2).sum(axis=1).mean()))
            l1.append(float(np.abs(p - d.y).sum(axis=1).mean()))
            x, _ = trace_features(t, capacity, interval, writes_only=writes_only)
            out = net.predict(x)
            for g in SHARPNESS:
                sh = schedule(shares_from_outputs(out, t.n_streams, g)[0], t.n_streams)
                r = simulate_partitioned(t, capacity, interval, "mlcache",
                                         writes_only=writes_only, shares=sh)
                ratio[g].append(r["hits"] / max(r["cached_requests"], 1))
    means = {g: float(np.mean(v)) for g, v in ratio.items()}
    best = max(means, key=lambda g: (means[g], -g))
    return {"cv_folds": float(folds), "cv_mse": float(np.mean(mse)),
            "cv_l1": float(np.mean(l1)), "hit_ratio": means, "sharpness": best,
            "cv_hit_ratio": means[best]}
