"""MAT's part of the simulator's Python face (flashml/simulation.py has the rest): object-mode
MAT and LRB on MAT's parts (sim/src/mat/object.rs, sim/src/mat/lrb.rs), flash mode with MAT as the
eviction (learned eviction at the tail of the block LRU, sim/src/compose/flash_mat.rs) and the
simulator's eviction features (features/eviction.toml).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from flashml.simulation import (
    SimConfig,
    SimResult,
    _as_array,
    _core,
    _feature_arrays,
    _get_ops,
    _note_unverified,
    _policy_arrays,
    _policy_core_args,
    trace_arrays,
)


def simulate_objects_mat(keys: Any, sizes: Any, capacity: int, unit: str = "bytes", *,
                         predictor: Any = "none", k: float | None = None,
                         max_candidates: int | None = None, delta: float | None = None,
                         initial_threshold: float | None = None, collect_samples: bool = False,
                         memory_window: int | None = None,
                         record_victims: bool = False, controller: str | None = None,
                         reuse_predictions: bool | None = None,
                         unverified: bool = False) -> dict[str, Any]:
    """Object-mode MAT (sim/src/mat/object.rs): learned eviction at the tail of LRU.

    On each eviction the LRU tail candidate's distance d from its last access to its next
    access is predicted, TTA = |d - age|; TTA >= T evicts it, else it is re-inserted at the
    MRU head and the next tail candidate is tried, at most `max_candidates` (L); if none
    reaches T the largest-TTA one goes. Controller "sign" (the paper's): T *= 1 + delta when
    the victim came at a try < k, *= 1 - delta at a try > k (L + 1 on exhaustion); "mean":
    T *= 1 + delta (k - p), p the candidates taken (L on exhaustion), which holds their mean
    per eviction at k. reuse_predictions (the paper's recorded predictions, §4.6): a
    candidate's predicted distance is kept until the object's next access, and a candidate
    seen at the tail again is judged by it (TTA = |d - its age now|) without a new
    prediction; `predictions` counts the model's calls, `reused_predictions` the rest.

    predictor: "none" (evict the LRU tail unpredicted: exactly LRU, zero predictions),
    "oracle" (the true next access, read from the trace ahead of time), or an eviction policy
    .so exporting `flashml_evict_predict` (log1p of the predicted distance), or a compiled
    bundle folder holding one as `policy.so`.
    k, max_candidates, delta, initial_threshold, memory_window, controller,
    reuse_predictions: None takes the .so's exported value if it has one (a .so without the
    controller or reuse function: "sign" and False, what it was compiled for), else the
    declared default (flashml/systems/mat/settings.toml: 2, 10, 1e-4, the number of cached
    objects at the first eviction (= the capacity with unit "objects"), the eviction
    contract's window, "mean" and True). controller="sign", reuse_predictions=False is the
    paper's Algorithm 1 as written.

    An object larger than the whole cache is never inserted (a miss, no eviction), as in
    `simulate_objects`; a capacity smaller than every object gives miss ratio 1, no evictions
    and NaN per-eviction figures.

    Returns miss_ratio, byte_miss_ratio, requests, hits, evictions, predictions,
    predictions_per_eviction, reused_predictions, candidates_per_eviction, reinsertions,
    ns_per_eviction (wall time of the eviction decisions), final_threshold, wall_s, params (the
    knobs used) and, with collect_samples, samples: {"features": (n, 44) float64 at tag time,
    "label": log1p(distance) (not back within the window: log1p(2 * window)), "time": tag time,
    "last": last access at tag time, "censored": window still open at the end of the trace};
    with record_victims, victims: {"time": the request whose miss evicted, "key"} (uint64, one
    per eviction, in order; the C runtime's `flashrt mat-replay --decisions-out` is compared
    with it). ValueError on bad input.
    """
    kk = _as_array(keys, np.uint64, "key")
    ss = _as_array(sizes, np.uint64, "size")
    if len(kk) != len(ss):
        raise ValueError(f"'key' has {len(kk)} elements but 'size' has {len(ss)}")
    pred = _evict_predictor(predictor, unverified)
    out = dict(_core().simulate_objects_mat(
        kk, ss, int(capacity), unit, predictor=pred["predictor"], sha256=pred.get("sha256"),
        size_bytes=pred.get("size_bytes"), k=k, max_candidates=max_candidates,
        delta=delta, initial_threshold=initial_threshold, collect_samples=collect_samples,
        memory_window=memory_window, record_victims=record_victims, controller=controller,
        reuse_predictions=reuse_predictions))
    if pred.get("unverified"):
        out.update(unverified=True, policy_sha256=pred["sha256"])
    return out


def simulate_objects_lrb(keys: Any, sizes: Any, capacity: int, unit: str = "bytes", *,
                         predictor: Any = "none", sample_size: int = 64,
                         memory_window: int | None = None, seed: int = 0,
                         record_victims: bool = False,
                         unverified: bool = False) -> dict[str, Any]:
    """Object-mode LRB on MAT's parts (sim/src/mat/lrb.rs): on each eviction `sample_size` (LRB:
    64) distinct cached objects are sampled at random, each one's distance to its next access
    predicted by `predictor` (as `simulate_objects_mat` takes it: "none" gives a random
    victim, "oracle", or an eviction bundle), and the one whose predicted next access is
    farthest is evicted. Returns miss_ratio, byte_miss_ratio, requests, hits, evictions,
    predictions, predictions_per_eviction (= min(sample_size, cached objects)),
    ns_per_eviction, wall_s, params; with record_victims, victims {"time", "key"}."""
    kk = _as_array(keys, np.uint64, "key")
    ss = _as_array(sizes, np.uint64, "size")
    if len(kk) != len(ss):
        raise ValueError(f"'key' has {len(kk)} elements but 'size' has {len(ss)}")
    pred = _evict_predictor(predictor, unverified)
    return dict(_core().simulate_objects_lrb(
        kk, ss, int(capacity), unit, predictor=pred["predictor"], sha256=pred.get("sha256"),
        size_bytes=pred.get("size_bytes"), sample_size=int(sample_size),
        memory_window=memory_window, seed=int(seed), record_victims=record_victims))


def _evict_predictor(predictor: Any, unverified: bool = False) -> dict[str, Any]:
    """MAT's predictor as the core takes it: {"predictor": "none" | "oracle" | the path of
    the eviction policy .so, "sha256", "size_bytes"}: a bundle folder (or its .so) is
    verified by the one loader (need eviction); a bare .so only with `unverified`.
    ValueError if the file does not exist."""
    from pathlib import Path

    pred = str(predictor)
    if pred.lower() in ("none", "oracle"):
        return {"predictor": pred}
    path = Path(pred)
    if not path.exists():
        raise ValueError(f"predictor {pred!r}: expected 'none', 'oracle', a compiled bundle "
                         f"folder with an eviction model, or (--unverified) an eviction "
                         f"policy .so; {path}: no such file")
    args = _policy_core_args(path, ("eviction",), unverified)
    return {"predictor": args["path"], "sha256": args["sha256"],
            "size_bytes": args["size_bytes"], "unverified": args["unverified"]}


#: The knobs `simulate_mat_flash(mat=...)` takes (None or absent: the .so's value, else the
#: default).
MAT_KNOBS = ("k", "max_candidates", "delta", "initial_threshold", "memory_window",
             "controller", "reuse_predictions")

#: The MAT figures `simulate_mat_flash` adds to the flash metrics.
MAT_METRIC_KEYS = ("mat_predictions", "mat_reused_predictions", "mat_decisions",
                   "mat_reinsertions",
                   "mat_evicted_segments", "predictions_per_eviction", "ns_per_eviction",
                   "final_threshold")


@dataclass
class MatSimResult(SimResult):
    """`simulate_mat_flash`'s result: a `SimResult` whose metrics also hold MAT_METRIC_KEYS,
    and the training samples when collected."""

    samples: dict[str, np.ndarray] | None = None


def simulate_mat_flash(table: Any, config: SimConfig | None = None, *, admit: Any = None,
                       score: Any = None, prefetch_start: Any = None, prefetch_end: Any = None,
                       when_score: Any = None, mat: dict[str, Any] | None = None,
                       predictor: Any = "none", collect_samples: bool = False,
                       unverified: bool = False, policy: Any = None,
                       threshold: float | None = None,
                       when_threshold: float | None = None) -> MatSimResult:
    """Flash-cache mode with MAT as the eviction (sim/src/compose/flash_mat.rs): learned eviction at
    the tail of the block LRU, with any admission/prefetch policy of `config` (and their
    per-access arrays, as `simulate`). Needs eviction "lru" with block-level recency (the
    defaults); ValueError otherwise, or on bad input.

    When the cache must evict and no block is condemned, Algorithm 1 (as
    `simulate_objects_mat`) picks a victim block over the LRU order, with logical time = the
    access index (GETs and PUTs) and LRB's 44 features of each block's GET history; the chosen
    block is condemned and its segments leave one per eviction (lowest first) until it is
    empty or a GET refreshes it. `mat`: {"k", "max_candidates", "delta",
    "initial_threshold", "memory_window", "controller"} (each optional; None: the .so's
    exported value, else 2, 10, 1e-4, the number of cached blocks at the first decision, the
    eviction contract's window, "sign"). `predictor`: "none" (exactly flash LRU), "oracle"
    (the block's next GET), an eviction policy .so or a bundle folder holding one.

    Returns a `MatSimResult`: metrics = `simulate`'s plus mat_predictions, mat_decisions
    (condemned blocks), mat_reinsertions, mat_evicted_segments, predictions_per_eviction and
    ns_per_eviction (per decision), final_threshold; info also has "mat_params"; with
    `collect_samples`, samples = {"features": (n, 44), "label", "time", "last", "censored"}
    as `simulate_objects_mat` gives them (a candidate tagged when it leaves the tail,
    labelled log1p(its block's next GET - its last GET)).

    `policy` (a compiled bundle folder or its .so, verified as `simulate_policy` verifies it):
    Baleen + MAT, the bundle's admission + prefetch on each GET miss exactly as
    `simulate_policy` asks them (the same online features, thresholds: the .so's unless
    `threshold` / `when_threshold`), MAT's eviction as above; `config`'s admission/prefetch
    settings and the admit/score/prefetch arrays do not apply then (ValueError if given)."""
    config = config or SimConfig()
    knobs = dict(mat or {})
    if unknown := sorted(set(knobs) - set(MAT_KNOBS)):
        raise ValueError(f"unknown MAT knob(s) {', '.join(map(repr, unknown))}; known: "
                         f"{', '.join(MAT_KNOBS)}")
    arrays = _policy_arrays(admit=admit, score=score, prefetch_start=prefetch_start,
                            prefetch_end=prefetch_end, when_score=when_score)
    baleen: dict[str, Any] = {}
    if policy is not None:
        if arrays:
            raise ValueError(f"policy {policy}: the bundle decides admission and prefetch; "
                             f"give no {', '.join(sorted(arrays))} array with it")
        args = _policy_core_args(policy, ("admission", "prefetch"), unverified)
        cols = _feature_arrays(table)
        baleen = {"policy": args["path"], "namespace": cols["namespace"], "user": cols["user"],
                  "threshold": threshold, "when_threshold": when_threshold,
                  "get_ops": _get_ops(), "policy_sha256": args["sha256"],
                  "policy_size_bytes": args["size_bytes"]}
    elif threshold is not None or when_threshold is not None:
        raise ValueError("threshold and when_threshold are the policy bundle's: give policy")
    else:
        cols = trace_arrays(table)
    pred = _evict_predictor(predictor, unverified)
    out = _core().simulate_mat_flash(
        cols["time"], cols["key"], cols["offset"], cols["size"], cols["op"], config.to_dict(),
        **arrays, predictor=pred["predictor"], sha256=pred.get("sha256"),
        size_bytes=pred.get("size_bytes"), collect_samples=bool(collect_samples), **knobs,
        **baleen)
    res = MatSimResult(metrics=out["metrics"], series=out["series"], info=out["info"],
                       config=config, samples=out.get("samples"))
    return _note_unverified(res, pred)


def eviction_features(keys: Any, sizes: Any, queries: Any,
                      memory_window: int | None = None) -> np.ndarray:
    """LRB's eviction features (features/eviction.toml) of (key, logical time) `queries` as
    the simulator computes them while streaming requests 0..time-1: a (len(queries), 44)
    array. The slow reference is flashml.features.eviction.features."""
    kk = _as_array(keys, np.uint64, "key")
    ss = _as_array(sizes, np.uint64, "size")
    q = [(int(key), int(t)) for key, t in queries]
    return _core().eviction_features(kk, ss, q, memory_window)
