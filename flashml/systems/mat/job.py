"""MAT's main job: learned eviction at the tail of LRU, in object mode.

    ingest -> samples -> train -> tune -> compile -> periodic -> evaluate -> plots

`flashml mat run --trace FILE --format cloudphysics|objects-csv|parquet --capacity 1%,5%,10%`
(default: a generated `cdn-like` object trace). Per capacity: an LRU replay of the training
window (the first `train_fraction` of the requests) tags every candidate that leaves the
tail and labels it at its next request (rows whose label horizon the replay saw whole;
flashml/systems/mat/model.py `label_samples`: the paper's label for `--objective bytes`, the
default, the size-aware one for `--objective requests`); LightGBM regressors of the label,
one per model size of `model_sizes` and label horizon of `label_horizons`, are trained on
them; Optuna picks k, T0 and the model (size and horizon) on the validation window by the
objective's miss ratio (byte miss ratio by default; within the prediction budget); the
chosen one is compiled into a policy .so exporting `flashml_evict_predict`; the simulator
then runs MAT
(Algorithm 1: at most L candidates from the LRU tail, evict the first whose predicted
time-to-next-access is at least the adaptive threshold T) with that .so on the whole trace,
beside the baselines (ours: LRU, FIFO, Belady, and LRB's decision with MAT's model,
`lrb_inhouse`: 64 sampled candidates a decision, sim/src/mat/lrb.rs; libCacheSim's from the
`libcachesim` package where installed). `periodic` emulates the paper's online
retraining: the trace cut into `windows` equal windows, the model judging window i+1 is
trained on MAT's own tail candidates of window i (those of the model before it; LRU's for window 0).

Capacities are sizes (4MiB, 1000obj) or percentages of the trace's working set (unique
bytes, or unique objects with `--unit objects`). The summary has per capacity every policy's
miss ratio, byte miss ratio, predictions per eviction and ns per eviction decision;
`policies` repeats the middle capacity's table. The policy shipped in `compiled/` is the
middle capacity's model.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flashml.errors import UserError
from flashml.jobs.run import RunDir, Stage, Timer, finite_numbers
from flashml.systems.mat.report import SCORE, describe, headlines, miss_ratio_curves, summary
from flashml.systems.mat.settings import (
    K_MAX,
    K_MAX_REUSED,
    LRB_SAMPLE,
    MIN_MEMORY_WINDOW,
    MatParams,
    MatSettings,
    add_cli,
    objective_key,
    size_exponent,
)
from flashml.trace.formats import OBJECT_FORMATS

if TYPE_CHECKING:  # numpy loads when a stage runs, not with the CLI
    import numpy as np

log = logging.getLogger("flashml.mat")

COMMAND = "mat"
HELP = "MAT: learned eviction at the tail of LRU (object mode) -> policy.so"
#: --format's choices and default (object traces: flashml/trace/formats.py).
FORMATS = OBJECT_FORMATS
DEFAULT_FORMAT = "cloudphysics"
OBJECTS = "objects.parquet"

#: The job module's interface (ARCHITECTURE.md, "A system's five parts"); the settings and
#: the options are in settings.py, the summary and its text in report.py.
__all__ = ["COMMAND", "DEFAULT_FORMAT", "FORMATS", "HELP", "SCORE", "STAGES", "Settings",
           "add_cli", "describe", "headlines", "judged_on", "mlflow_params", "run_name",
           "shipped", "summary"]


# --- stages --------------------------------------------------------------------------------


def objects(run: RunDir) -> Any:
    if "objects" not in run.cache:
        import polars as pl

        run.cache["objects"] = pl.read_parquet(run.path / OBJECTS)
    return run.cache["objects"]


def ingest(run: RunDir, s: MatSettings, timer: Timer) -> dict[str, Any]:
    """The object trace (or a generated preset) -> `objects.parquet` (key, size), with its
    working set; every capacity resolved to a number of bytes or objects."""
    rec = run.done("ingest")
    if rec is not None:
        return rec
    from flashml.files import atomic_path
    from flashml.trace.objects import read_objects

    out: dict[str, Any] = {}
    if s.trace is None:
        from flashml.trace.generate import generate_trace

        raw = run.path / f"{s.preset}-seed{s.seed}.csv"
        with timer.stage("generate"):
            out["generate"] = generate_trace(s.preset, s.seed, raw, accesses=s.accesses)
        fmt = "objects-csv"
    else:
        raw, fmt = Path(s.trace), s.format or "cloudphysics"
    with timer.stage("ingest"):
        df = read_objects(raw, fmt)
        if df.height == 0:
            raise UserError(f"{raw}: no requests")
        with atomic_path(run.path / OBJECTS) as tmp:
            df.write_parquet(tmp)
    run.cache["objects"] = df
    uniq = df.unique("key", keep="first")
    ws = {"requests": df.height, "objects": uniq.height, "bytes": int(uniq["size"].sum())}
    caps = {c: _resolve(c, s.unit, ws) for c in s.capacities}
    out |= {"trace": str(raw), "format": fmt, "working_set": ws, "capacities": caps}
    return run.record("ingest", out)


def _resolve(text: str, unit: str, ws: dict[str, int]) -> dict[str, Any]:
    from flashml.simulation import parse_capacity

    if text.endswith("%"):
        frac = float(text[:-1]) / 100.0
        total = ws["objects"] if unit == "objects" else ws["bytes"]
        return {"capacity": max(1, int(total * frac)), "unit": unit}
    value, kind = parse_capacity(text)
    return {"capacity": value, "unit": kind}


def samples(run: RunDir, s: MatSettings, timer: Timer) -> dict[str, Any]:
    """Per capacity: an LRU replay of the training window (no model: MAT's tail with zero
    predictions), tagging every candidate that leaves the tail; per label horizon
    (`s.label_horizons`) the rows whose horizon the replay saw whole (LRB's 44 features at
    tag time; systems/mat/model.py `label_samples`) -> `work/samples-*.npz`. The record's `file`,
    `rows`, ... are the first horizon's; `horizons` has each one's."""
    rec = run.done("samples")
    if rec is not None:
        return rec
    import numpy as np

    from flashml.systems.mat.model import label_samples
    from flashml.systems.mat.simulation import simulate_objects_mat

    df = objects(run)
    n = max(2, int(df.height * s.train_fraction))
    train = df.slice(0, n)
    caps = run.done("ingest")["capacities"]
    window = memory_window(s, n)
    run.work.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, cap in caps.items():
        with timer.stage(f"samples at {name}"):
            r = simulate_objects_mat(train["key"], train["size"], cap["capacity"], cap["unit"],
                                     predictor="none", collect_samples=True,
                                     memory_window=window, **_knobs(s.mat))
        per_h = {}
        for h in s.label_horizons:
            rows = label_samples(r["samples"], n, label_horizon(h, n),
                                 size_exponent=size_exponent(s, cap))
            path = run.work / f"samples-{_slug(name)}-h{_slug(f'{h:g}')}.npz"
            np.savez(path, features=rows.features, label=rows.label)
            per_h[f"{h:g}"] = {"file": str(path), "horizon_fraction": h, **rows.info()}
        out[name] = {**per_h[f"{s.label_horizons[0]:g}"], "horizons": per_h,
                     "samples": int(len(r["samples"]["label"])), "train_requests": n,
                     "lru_miss_ratio": r["miss_ratio"]}
    return run.record("samples", {"per_capacity": out, "memory_window": window,
                                  "label_horizon": label_horizon(s.label_horizons[0], n),
                                  "train_requests": n})


def memory_window(s: MatSettings, train_requests: int) -> int:
    """`s.memory_window`, else the training window's length, at least the contract's
    MIN_MEMORY_WINDOW (a short trace's window is shorter)."""
    return int(s.memory_window or max(MIN_MEMORY_WINDOW, train_requests))


def label_horizon(fraction: float, window_requests: int) -> int:
    """The label horizon in logical requests, `fraction` of a window of `window_requests`."""
    return max(1, int(fraction * window_requests))


def _knobs(m: MatParams, **over: Any) -> dict[str, Any]:
    """The simulator's MAT knobs other than the memory window (the same names as
    `save_evict_model`'s), with `over` (e.g. a tuned k and T0) in place of the settings'."""
    return m.sim_kwargs() | over


def _slug(name: str) -> str:
    return name.replace("%", "pct").replace(".", "_")


def _size_slug(size: tuple[int, int] | list[int]) -> str:
    return f"{size[0]}x{size[1]}"


def _variant(s: MatSettings, size: tuple[int, int], horizon: float) -> str:
    """A trained model's key: its size (32x32), with `-h<H>` for a label horizon other than
    the first of `s.label_horizons`."""
    first = s.label_horizons[0]
    return _size_slug(size) + ("" if horizon == first else f"-h{horizon:g}")


def train(run: RunDir, s: MatSettings, timer: Timer) -> dict[str, Any]:
    """Per capacity, label horizon (`s.label_horizons`) and model size (`s.model_sizes`):
    the TTA regressor on that horizon's samples (flashml/systems/mat/model.py), logged to MLflow
    with its metrics; the model bundles in `work/bundle-<capacity>-<trees>x<leaves>[-h<H>]`
    (`_variant`: no suffix for the first horizon)."""
    rec = run.done("train")
    if rec is not None:
        return rec
    import mlflow
    import numpy as np

    from flashml.systems.mat.model import mat_gbm

    ing = run.done("ingest")
    caps, ws = ing["capacities"], ing["working_set"]
    out: dict[str, Any] = {}
    smp = samples(run, s, timer)
    for name, cap_info in smp["per_capacity"].items():
        models = {}
        for h in s.label_horizons:
            info = cap_info["horizons"][f"{h:g}"]
            with np.load(info["file"]) as z:
                x, y = z["features"], z["label"]
            if len(y) < 2:
                raise UserError(f"--train-fraction {s.train_fraction:g}: only {len(y)} "
                                f"training samples at capacity {name} (--label-horizon "
                                f"{h:g}): in the first {s.train_fraction:.3g} of the trace "
                                "the cache evicted no returning object; raise "
                                "--train-fraction, use a smaller capacity or a longer trace")
            for size in s.model_sizes:
                key = _variant(s, size, h)
                bundle = run.work / f"bundle-{_slug(name)}-{_slug(key)}"
                with timer.stage(f"train at {name} ({key})"):
                    metrics = _train_bundle(bundle, x, y, mat_gbm(*size), s,
                                            initial_threshold=_initial_threshold(
                                                s, caps[name], ws),
                                            memory_window=smp["memory_window"],
                                            extra={"size_ref": info["size_ref"],
                                                   "size_exponent": info["size_exponent"]})
                mlflow.log_metrics({f"{_slug(name)}_{_slug(key)}_{k}": v
                                    for k, v in finite_numbers(metrics).items()})
                models[key] = {"bundle": str(bundle), "trees": size[0], "leaves": size[1],
                               "model_size": _size_slug(size), "label_horizon": h,
                               **metrics}
        out[name] = {"models": models}
    return run.record("train", {"per_capacity": out})


def _train_bundle(bundle: Path, x: np.ndarray, y: np.ndarray, params: Any, s: MatSettings, *,
                  initial_threshold: float, memory_window: int, k: float | None = None,
                  extra: dict[str, float] | None = None) -> dict[str, float]:
    """Train one TTA regressor and save it as an eviction bundle; its metrics."""
    import mlflow

    from flashml.compiler.bundle import save_evict_model
    from flashml.features.eviction import contract as evict_contract
    from flashml.systems.mat.model import train_tta

    model = train_tta(x, y, list(evict_contract().names), params)
    metrics = {**model.metrics, **(extra or {})}
    active = mlflow.active_run()
    save_evict_model(bundle, model.booster,
                     **_knobs(s.mat, k=s.mat.k if k is None else k,
                              initial_threshold=initial_threshold),
                     memory_window=memory_window, metrics=metrics,
                     mlflow_run_id=active.info.run_id if active else None)
    return metrics


def _initial_threshold(s: MatSettings, cap: dict[str, Any], ws: dict[str, int]) -> float:
    """T0 in logical requests: `s.mat.initial_threshold`, else the cache's size in objects
    (the paper: T0 = capacity; a byte capacity over the mean object size of the working
    set), as the simulator's default for a cache that counts objects."""
    if s.mat.initial_threshold > 0:
        return float(s.mat.initial_threshold)
    if cap["unit"] == "objects":
        return float(cap["capacity"])
    return max(1.0, cap["capacity"] / max(1.0, ws["bytes"] / max(1, ws["objects"])))


def _window_hits(keys: Any, sizes: Any, cap: dict[str, Any], start: int, end: int,
                 **kw: Any) -> tuple[float, dict[str, Any]]:
    """Miss ratio over requests [start, end) of a run from a cold cache at request 0, and
    the run's result, with `window_predictions_per_eviction` (those of the window's own
    evictions). Exact for causal policies (LRU, FIFO, MAT with a model): the first `start`
    requests of a run do not depend on what follows them, so the window's hits are the hits
    of the run to `end` minus those of the run to `start` (and so for predictions and
    evictions)."""
    import numpy as np

    from flashml.systems.mat.simulation import simulate_objects_mat

    full = simulate_objects_mat(keys[:end], sizes[:end], cap["capacity"], cap["unit"], **kw)
    if start == 0:
        return full["miss_ratio"], full | {
            "window_predictions_per_eviction": full["predictions_per_eviction"],
            "window_miss_ratio": full["miss_ratio"],
            "window_byte_miss_ratio": full["byte_miss_ratio"]}
    head = simulate_objects_mat(keys[:start], sizes[:start], cap["capacity"], cap["unit"],
                                **kw)
    ev = full["evictions"] - head["evictions"]
    ppe = (full["predictions"] - head["predictions"]) / ev if ev else float("nan")
    # the missed bytes of each run are its byte miss ratio times its requested bytes
    sz = np.asarray(sizes, dtype=np.float64)
    req_head, req_win = float(sz[:start].sum()), float(sz[start:end].sum())
    missed = (full["byte_miss_ratio"] * (req_head + req_win)
              - head["byte_miss_ratio"] * req_head)
    mr = 1.0 - (full["hits"] - head["hits"]) / (end - start)
    return mr, full | {"window_predictions_per_eviction": ppe, "window_miss_ratio": mr,
                       "window_byte_miss_ratio": missed / req_win if req_win else float("nan")}


def _over_budget(r: dict[str, Any]) -> float:
    """The larger of a run's predictions per eviction and its window's (the budget is on
    both: the run's include the threshold's start-up, the window's its steady state)."""
    vals = [v for v in (r["predictions_per_eviction"], r["window_predictions_per_eviction"])
            if v == v]
    return max(vals) if vals else 0.0


def tune(run: RunDir, s: MatSettings, timer: Timer) -> dict[str, Any]:
    """Per capacity and label horizon (`s.label_horizons`): Optuna (TPE, `s.trials` trials)
    over MAT's initial threshold T0, k (1..K_MAX, or 1..K_MAX_REUSED candidates with reused
    predictions) and the model size (`s.model_sizes`: each size and horizon trained once),
    scored by the objective's miss ratio (byte or object: `s.objective`) of the validation
    window (the `val_fraction` of requests after the training window); the best trial of
    the horizons' studies is chosen (the record's `model` is its key, `model_size` and
    `label_horizon` its parts; each horizon's best in `val_miss_ratio_by_label_horizon`). A
    trial whose predictions per eviction (the model's calls, over its run or over the
    validation window alone) exceed K_MAX is infeasible (the sign controller balances tries
    below and above k, so its mean can exceed k; T's start-up moves any controller's). The
    defaults are each study's trial 0, so the choice is never worse than them there; the
    first horizon's study alone is the search of a job with that one horizon, so the choice
    is never worse on the validation window than that job's either. The evaluation window
    after it stays unseen."""
    rec = run.done("tune")
    if rec is not None:
        return rec
    import mlflow

    from flashml.compiler.build import compile_policy

    df = objects(run)
    keys, sizes = df["key"].to_numpy(), df["size"].to_numpy()
    ing, smp = run.done("ingest"), samples(run, s, timer)
    n_train = smp["train_requests"]
    n_val = n_train + int(df.height * s.val_fraction)
    window = smp["memory_window"]
    out = {}
    for name, info in train(run, s, timer)["per_capacity"].items():
        cap = ing["capacities"][name]
        t0 = _initial_threshold(s, cap, ing["working_set"])
        sos = {}
        for size, m in info["models"].items():
            so = run.work / f"scratch-{_slug(name)}-{size}"
            compile_policy(so, model_dir=m["bundle"], log_to_mlflow=False)
            sos[size] = str(so)
        first = _variant(s, s.model_sizes[0], s.label_horizons[0])
        common = {**_knobs(s.mat), "memory_window": window}
        # no validation window (--val-fraction 0, or too small to hold a request): nothing
        # to judge a trial on, the defaults are kept below
        wkey = "window_" + objective_key(s)
        lru_val = (_window_hits(keys, sizes, cap, n_train, n_val, predictor="none")[1][wkey]
                   if n_val > n_train else None)
        default = {"initial_threshold": t0, "k": s.mat.k, "model": first}
        if s.trials == 0 or n_val <= n_train:
            out[name] = {**default, **_model_parts(info["models"][first]),
                         "val_miss_ratio": None, "lru_val_miss_ratio": lru_val,
                         "val_metric": objective_key(s), "trials": 0}
            continue
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        hi = max(4.0 * window, 10.0 * t0)
        k_hi = min(K_MAX_REUSED if s.mat.reuse_predictions else K_MAX,
                   float(s.mat.max_candidates))  # k <= max_candidates (settings.toml's rule)

        def objective(trial: Any, h: float, hi: float = hi, k_hi: float = k_hi,
                      wkey: str = wkey, cap: dict[str, Any] = cap,
                      common: dict[str, Any] = common, sos: dict[str, str] = sos) -> float:
            kw = {"initial_threshold": trial.suggest_float("initial_threshold", 1.0, hi,
                                                           log=True),
                  "k": trial.suggest_float("k", 1.0, k_hi)}
            size = trial.suggest_categorical("model_size",
                                             [_size_slug(z) for z in s.model_sizes])
            key = _variant(s, tuple(int(v) for v in size.split("x")), h)
            _, r = _window_hits(keys, sizes, cap, n_train, n_val, predictor=sos[key],
                                **(common | kw))
            mr = r[wkey]
            ppe = _over_budget(r)
            trial.set_user_attr("predictions_per_eviction", ppe)
            trial.set_user_attr("model", key)
            # over the budget is infeasible: ranked after every trial within it
            return mr if not ppe > K_MAX else 1.0 + ppe

        # one study per label horizon, each the same search over T0, k and the model size
        # (trial 0: the defaults); the best of them on the validation window (the first
        # horizon's on a tie)
        best, studies = None, []
        for h in s.label_horizons:
            study = optuna.create_study(direction="minimize",
                                        sampler=optuna.samplers.TPESampler(seed=0))
            study.enqueue_trial({"initial_threshold": t0, "k": s.mat.k,
                                 "model_size": _size_slug(s.model_sizes[0])})
            with timer.stage(f"tune at {name} (label horizon {h:g}, {s.trials} trials)"):
                study.optimize(lambda trial, h=h: objective(trial, h), n_trials=s.trials)
            studies.append(study)
            if best is None or study.best_trial.value < best.value:
                best = study.best_trial
        assert best is not None
        model = best.user_attrs["model"]
        out[name] = {"initial_threshold": best.params["initial_threshold"],
                     "k": best.params["k"], "model": model,
                     **_model_parts(info["models"][model]),
                     "val_miss_ratio": best.value,
                     "val_metric": objective_key(s),
                     "default_val_miss_ratio": studies[0].trials[0].value,
                     "val_miss_ratio_by_label_horizon": {
                         f"{h:g}": st.best_trial.value
                         for h, st in zip(s.label_horizons, studies, strict=True)},
                     "lru_val_miss_ratio": lru_val,
                     "trials": sum(len(st.trials) for st in studies),
                     "feasible": best.value <= 1.0,
                     "predictions_per_eviction": best.user_attrs["predictions_per_eviction"]}
        mlflow.log_metrics({f"{_slug(name)}_tuned_val_miss_ratio": best.value,
                            f"{_slug(name)}_tuned_initial_threshold":
                                best.params["initial_threshold"],
                            f"{_slug(name)}_tuned_k": best.params["k"]})
    return run.record("tune", {"per_capacity": out, "validation": [n_train, n_val]})


def _model_parts(m: dict[str, Any]) -> dict[str, Any]:
    """A trained model's size (32x32) and label horizon (a fraction of the window)."""
    return {"model_size": m["model_size"], "label_horizon": m["label_horizon"]}


def compile_models(run: RunDir, s: MatSettings, timer: Timer) -> dict[str, Any]:
    """Per capacity: the chosen model size's model with its tuned T0 and k -> a policy .so
    (Treelite + TL2cgen) exporting `flashml_evict_predict` and MAT's knobs (the simulator
    predicts through it, as the runtime does); the middle capacity's is the job's
    `compiled/`."""
    rec = run.done("compile")
    if rec is not None:
        return rec
    import lightgbm as lgb

    from flashml.compiler.build import compile_policy
    from flashml.compiler.bundle import save_evict_model
    from flashml.files import atomic_dir

    out = {}
    trained = train(run, s, timer)["per_capacity"]
    tuned = tune(run, s, timer)["per_capacity"]
    window = samples(run, s, timer)["memory_window"]
    for name, info in trained.items():
        size = tuned[name]["model_size"]
        model = info["models"][tuned[name]["model"]]
        bundle = Path(model["bundle"])
        booster = lgb.Booster(model_file=str(bundle / "evict.txt"))
        metrics = finite_numbers({k: v for k, v in model.items() if k != "bundle"})
        save_evict_model(bundle, booster,
                         **_knobs(s.mat, k=tuned[name]["k"],
                                  initial_threshold=tuned[name]["initial_threshold"]),
                         memory_window=window, metrics=metrics,
                         mlflow_run_id=run.mlflow_run_id())
        dest = run.work / f"compiled-{_slug(name)}"
        with timer.stage(f"compile at {name}"):
            manifest = compile_policy(dest, model_dir=bundle, log_to_mlflow=False)
        out[name] = {"dir": str(dest), "sha256": manifest["sha256"], "model_size": size,
                     "label_horizon": tuned[name]["label_horizon"],
                     "capabilities": manifest.get("capabilities")}
    middle = list(trained)[len(trained) // 2]
    shipped = run.path / "compiled"
    with atomic_dir(shipped) as tmp:
        shutil.copytree(out[middle]["dir"], tmp, dirs_exist_ok=True)
    return run.record("compile", {"per_capacity": out, "shipped": str(shipped),
                                  "shipped_capacity": middle})


def periodic(run: RunDir, s: MatSettings, timer: Timer) -> dict[str, Any]:
    """Periodic retraining, emulated (the paper retrains online each time a batch of
    tail-candidate samples fills): the whole trace in `s.windows` equal request windows;
    model i is trained on the tail candidates of window i of a replay with model i - 1 (MAT's
    own tail; window 0: LRU's), labelled with what window i itself shows (the horizon a
    tuned label horizon's fraction of a window), and judges window i + 1: its miss ratio there, from
    a run with model i from request 0 (the cache warm as that model left it), beside LRU's.
    The tuned k, T0 and model size; the memory window of the main model. Windows 1.. are
    thus judged by models that never saw them."""
    rec = run.done("periodic")
    if rec is not None:
        return rec
    if s.windows < 2:
        return run.record("periodic", {"windows": 0, "per_capacity": {}})
    from flashml.compiler.build import compile_policy
    from flashml.systems.mat.model import label_samples, mat_gbm, window_bounds
    from flashml.systems.mat.simulation import simulate_objects_mat

    df = objects(run)
    keys, sizes = df["key"].to_numpy(), df["size"].to_numpy()
    bounds = window_bounds(len(keys), s.windows)
    ing = run.done("ingest")
    window = samples(run, s, timer)["memory_window"]
    tuned = tune(run, s, timer)["per_capacity"]
    compile_models(run, s, timer)
    out = {}
    for name, cap in ing["capacities"].items():
        t = tuned[name]
        size = tuple(int(v) for v in t["model_size"].split("x"))
        knobs = {**_knobs(s.mat, k=t["k"], initial_threshold=t["initial_threshold"]),
                 "memory_window": window}
        rows, predictor, size_ref = [], "none", None
        with timer.stage(f"periodic at {name} ({s.windows} windows)"):
            for i, (a, b) in enumerate(bounds[:-1]):
                r = simulate_objects_mat(keys[:b], sizes[:b], cap["capacity"], cap["unit"],
                                         predictor=predictor, collect_samples=True,
                                         **(knobs if predictor != "none" else
                                            {"memory_window": window}))
                lab = label_samples(r["samples"], b, label_horizon(t["label_horizon"], b - a),
                                    start=a,
                                    size_exponent=size_exponent(s, cap), size_ref=size_ref)
                size_ref = lab.size_ref  # one scale for every window's label
                del r
                bundle = run.work / f"periodic-{_slug(name)}-{i}"
                metrics = _train_bundle(bundle, lab.features, lab.label, mat_gbm(*size), s,
                                        k=t["k"], initial_threshold=t["initial_threshold"],
                                        memory_window=window)
                so = run.work / f"periodic-{_slug(name)}-{i}-so"
                compile_policy(so, model_dir=bundle, log_to_mlflow=False)
                predictor = str(so)
                a2, b2 = bounds[i + 1]
                mat_mr, rm = _window_hits(keys, sizes, cap, a2, b2, predictor=predictor,
                                          **knobs)
                lru_mr, rl = _window_hits(keys, sizes, cap, a2, b2, predictor="none")
                rows.append({"trained_on": [a, b], "judged_on": [a2, b2],
                             "rows": len(lab.label), "mat_miss_ratio": mat_mr,
                             "lru_miss_ratio": lru_mr,
                             "mat_byte_miss_ratio": rm["window_byte_miss_ratio"],
                             "lru_byte_miss_ratio": rl["window_byte_miss_ratio"],
                             "requested_bytes": int(sizes[a2:b2].sum()),
                             "predictions_per_eviction": rm["window_predictions_per_eviction"],
                             "train_spearman": metrics["train_spearman"]})
        judged = sum(r["judged_on"][1] - r["judged_on"][0] for r in rows)

        def mean(key: str, rows: list[dict[str, Any]] = rows, judged: int = judged) -> float:
            return sum(r[key] * (r["judged_on"][1] - r["judged_on"][0])
                       for r in rows) / judged

        def byte_mean(key: str, rows: list[dict[str, Any]] = rows) -> float:
            return sum(r[key] * r["requested_bytes"] for r in rows) / max(
                1, sum(r["requested_bytes"] for r in rows))

        out[name] = {"windows": rows, "mat_miss_ratio": mean("mat_miss_ratio"),
                     "lru_miss_ratio": mean("lru_miss_ratio"),
                     "mat_byte_miss_ratio": byte_mean("mat_byte_miss_ratio"),
                     "lru_byte_miss_ratio": byte_mean("lru_byte_miss_ratio"),
                     "predictions_per_eviction": mean("predictions_per_eviction")}
    return run.record("periodic", {"windows": s.windows, "window_requests":
                                   bounds[0][1] - bounds[0][0], "per_capacity": out})


def evaluate(run: RunDir, s: MatSettings, timer: Timer) -> dict[str, Any]:
    """Per capacity, on the whole trace: MAT with its compiled model, LRB's decision with
    the same model (`lrb_inhouse`: 64 sampled candidates, sim/src/mat/lrb.rs), our LRU, FIFO and
    Belady, and libCacheSim's baselines; each policy's miss ratio, byte miss ratio,
    predictions per eviction and ns per eviction decision; nested MLflow metrics."""
    rec = run.done("evaluate")
    if rec is not None:
        return rec
    import mlflow

    from flashml.simulation import simulate_objects
    from flashml.systems.mat.simulation import simulate_objects_lrb

    df = objects(run)
    keys, sizes = df["key"].to_numpy(), df["size"].to_numpy()
    caps = run.done("ingest")["capacities"]
    compiled = compile_models(run, s, timer)["per_capacity"]
    held_out = tune(run, s, timer)["validation"][1]
    per = periodic(run, s, timer)["per_capacity"]
    results: dict[str, dict[str, Any]] = {}
    for name, cap in caps.items():
        pol: dict[str, dict[str, Any]] = {}
        c, unit = cap["capacity"], cap["unit"]
        with timer.stage(f"evaluate at {name}"):
            # the .so carries the model, its tuned T0 and k and the memory window
            mat_kw = {"predictor": compiled[name]["dir"]}
            for p, kw in (("mat", mat_kw), ("lru", {"predictor": "none"})):
                _, r = _window_hits(keys, sizes, cap, held_out, len(keys), **kw)
                pol[p] = _mat_metrics(r) | {
                    "held_out_miss_ratio": r["window_miss_ratio"],
                    "held_out_byte_miss_ratio": r["window_byte_miss_ratio"]}
            # LRB's decision (64 sampled candidates, the farthest predicted next access)
            # with MAT's very model and features: the cost of the two decisions side by side
            pol["lrb_inhouse"] = _lrb_metrics(simulate_objects_lrb(
                keys, sizes, c, unit, predictor=compiled[name]["dir"],
                sample_size=LRB_SAMPLE))
            for p in ("fifo", "belady"):
                pol[p] = _plain_metrics(simulate_objects(keys, sizes, c, p, unit))
            pol |= _libcachesim(keys, sizes, c, unit, s.baselines)
        results[name] = {"capacity": c, "unit": unit, "policies": pol,
                         "held_out_from_request": held_out, "model_size":
                         compiled[name]["model_size"],
                         "label_horizon": compiled[name]["label_horizon"]}
        if name in per:
            results[name]["periodic"] = per[name]
        for p, m in pol.items():
            mlflow.log_metrics({f"{_slug(name)}_{p}_{k}": v
                                for k, v in finite_numbers(m).items()})
    return run.record("evaluate", {"per_capacity": results})


def _mat_metrics(r: dict[str, Any]) -> dict[str, Any]:
    keep = ("miss_ratio", "byte_miss_ratio", "predictions_per_eviction", "ns_per_eviction",
            "evictions", "predictions", "reinsertions", "final_threshold", "wall_s",
            "candidates_per_eviction", "reused_predictions")
    return {k: r[k] for k in keep if k in r}


def _lrb_metrics(r: dict[str, Any]) -> dict[str, Any]:
    keep = ("miss_ratio", "byte_miss_ratio", "predictions_per_eviction", "ns_per_eviction",
            "evictions", "predictions", "wall_s")
    return {k: r[k] for k in keep}


def _plain_metrics(r: dict[str, Any]) -> dict[str, Any]:
    return {"miss_ratio": r["miss_ratio"], "byte_miss_ratio": r["byte_miss_ratio"],
            "predictions_per_eviction": 0.0, "evictions": r["evictions"],
            "wall_s": r["wall_s"]}


def _libcachesim(keys: Any, sizes: Any, capacity: int, unit: str,
                 names: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """libCacheSim's baselines (flashml/systems/mat/object_baselines.py), prefixed `lcs_` where
    ours has the same name (both are reported: ours must equal theirs for LRU/FIFO). A
    policy libCacheSim cannot run here is left out with a warning saying why."""
    if not names:
        return {}
    import numpy as np

    from flashml.systems.mat.object_baselines import BaselineUnavailable, run_baselines

    try:
        rows = run_baselines(np.asarray(keys), np.asarray(sizes), capacity, unit=unit,
                             policies=names, jobs=2)[capacity]
    except BaselineUnavailable as e:
        log.warning("libCacheSim baselines skipped: %s", e)
        return {}
    out = {}
    for n, row in rows.items():
        if "error" in row:
            log.warning("libCacheSim %s at %d %s: %s", n, capacity, unit, row["error"])
            continue
        out[f"lcs_{n}" if n in ("lru", "fifo", "belady") else n] = {
            "miss_ratio": row["miss_ratio"], "byte_miss_ratio": row["byte_miss_ratio"],
            "wall_s": row.get("wall_s")}
    return out


def plots(run: RunDir, s: MatSettings, timer: Timer) -> dict[str, Any]:
    """Byte miss ratio and miss ratio vs cache size per policy (two PNGs), logged to
    MLflow."""
    rec = run.done("plots")
    if rec is not None:
        return rec

    from flashml.jobs.report import plot_miss_ratio_curves

    res = evaluate(run, s, timer)["per_capacity"]
    unit = next(iter(res.values()))["unit"]
    paths = []
    for metric, label in (("byte_miss_ratio", "byte miss ratio"),
                          ("miss_ratio", "miss ratio")):
        path = plot_miss_ratio_curves(miss_ratio_curves(res, metric),
                                      run.path / "plots" / f"{metric}_vs_size.png",
                                      xlabel=f"cache size ({unit})", ylabel=label)
        paths.append(path)
    return run.record_plots(paths)


STAGES: tuple[Stage, ...] = (
    Stage("ingest", ingest),
    Stage("samples", samples),
    Stage("train", train),
    Stage("tune", tune),
    Stage("compile", compile_models),
    Stage("periodic", periodic),
    Stage("evaluate", evaluate),
    Stage("plots", plots),
)
Settings = MatSettings


def run_name(s: MatSettings) -> str:
    return f"mat-{s.trace.name if s.trace else f'{s.preset}-seed{s.seed}'}"


def mlflow_params(run: RunDir, s: MatSettings) -> dict[str, Any]:
    ing = run.done("ingest")
    return {"trace": ing["trace"], "capacities": ",".join(s.capacities), "unit": s.unit,
            "k": s.mat.k, "max_candidates": s.mat.max_candidates, "delta": s.mat.delta,
            "controller": s.mat.controller, "reuse_predictions": s.mat.reuse_predictions,
            "initial_threshold": s.mat.initial_threshold, "train_fraction": s.train_fraction,
            "label_horizons": ",".join(f"{h:g}" for h in s.label_horizons),
            "objective": s.objective,
            "size_exponent": size_exponent(s, {"unit": "bytes"}),
            "model_sizes": ",".join(_size_slug(z) for z in s.model_sizes),
            "windows": s.windows}


# --- MLflow: the runs table's headline, the shipped bundle (flashml/jobs/ship.py) ----------


def shipped(run: RunDir, summary: dict[str, Any], s: MatSettings) -> Path:
    return Path(summary["compiled"])


def judged_on(run: RunDir, s: MatSettings) -> str:
    ing = run.done("ingest") or {}
    return (f"{Path(str(ing.get('trace') or s.trace or f'{s.preset}-seed{s.seed}')).name} at "
            f"{','.join(s.capacities)} ({s.unit}), objective {objective_key(s)}")
