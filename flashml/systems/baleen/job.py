"""Baleen's main job: learned admission + prefetch, as a list of stages over one run folder.

`STAGES` is the one stage list: `flashml pipeline run` runs all of it in one process,
`flashml train` the stages up to `train`, `flashml sweep` `ingest` + `sweep`, and the Airflow
DAG (`dags/flashml_retrain.py`) one task per stage. Settings: `flashml.settings.BaleenSettings`.

    ingest -> train -> episodes -> policies -> sweep -> plots -> compile -> evaluate -> promote

Policies (all at the same target write rate, on the same simulated cache): `rejectx`
(history factor tuned), `coinflip` (p tuned), `cachelib_ml` (the admission GBM without the
size features, under the shipped policy's schedule), `baleen_admission_only`,
`baleen_flat_threshold` (the shipped models, flat threshold), `baleen` (ML admission +
ML-Range + ML-When, the shipped variant: peak schedule or none and feature set chosen on
held-out data of the training window, systems/baleen/validation.py) and `opt` (episodes'
OPT with OPT-Range: the bound). Peak
DT and all metrics are measured on the evaluation days (the training window, the first day
by default, is the simulator's warm-up).

Files of a run folder (flashml/jobs/run.py has the common part):

| path                 | written by          | what                                         |
|----------------------|---------------------|----------------------------------------------|
| `accesses.parquet`   | ingest              | the canonical, validated access table        |
| `work/`              | train, policies, sweep | features, loops, OPT, trials, DT series |
| `policy/`            | train               | the candidate model bundle (compiler/bundle) |
| `episodes/`          | episodes            | episodes, labels, OPT arrays, summary (Spark)|
| `plots/`             | plots               | DT utilisation, TCO curve, ... (PNG)         |
| `compiled/`          | compile             | policy.so, flashml_policy.h, manifest.json   |
| `mlflow_run_id`      | the first stage     | the MLflow run every stage logs into         |
| `stages/*.json`      | every stage         | the stage's record (small JSON)              |
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flashml.config import DEFAULTS
from flashml.errors import TraceError, UserError
from flashml.files import atomic_dir, write_json
from flashml.jobs import report
from flashml.jobs.run import RunDir, Stage, Timer, finite_numbers
from flashml.settings import BaleenSettings
from flashml.systems.baleen.baselines_ahead import baselines_ahead
from flashml.systems.baleen.compile_ahead import compile_ahead
from flashml.systems.baleen.report import describe, headline_metrics, headlines_of, summary
from flashml.systems.baleen.run_folder import (
    SERIES_FILE,
    _learned,
    base_config,
    check_span,
    compiled_dir,
    feature_frame,
    features,
    learned_config,
    log_dataset,
    log_training_curves,
    policy_dir,
    trace_name,
    warm_start,
)
from flashml.systems.baleen.sweep_workers import start_sweep_workers, study_name, sweep_spawner

if TYPE_CHECKING:  # numpy, the simulator and the tuner load when a stage runs, not with the CLI

    from flashml.systems.baleen.tuning import Tuned

log = logging.getLogger("flashml.pipeline")

#: The job module's interface (ARCHITECTURE.md, "A system's five parts"); what the stages
#: share is in run_folder.py, the summary and its text in report.py.
__all__ = ["COMMAND", "HELP", "STAGES", "Settings", "add_cli", "describe", "mlflow_params",
           "run_name", "summary"]


# --- stages --------------------------------------------------------------------------------


def ingest(run: RunDir, s: BaleenSettings, timer: Timer) -> dict[str, Any]:
    """Trace -> `accesses.parquet`, validated by Great Expectations (Data Docs in
    `$FLASHML_HOME/gx`, with every run's: `flashml ui docs`),
    with its Table 2 statistics; without a trace, the synthetic `s.preset` is generated
    first (the embedded default). UserError if validation fails or the trace is shorter
    than the training window."""
    rec = run.done("ingest")
    if rec is not None:
        return rec
    from flashml.trace.canonical import read_meta, read_table, with_sample_ratio, write_table
    from flashml.trace.ingest import ingest as ingest_trace
    from flashml.trace.ingest import is_parquet
    from flashml.trace.stats import compute_stats, format_stats
    from flashml.trace.validate import validate_table

    out: dict[str, Any] = {}
    if s.trace is None:
        from flashml.trace.generate import generate_trace

        raw = run.path / f"{s.preset}-seed{s.seed}.trace"
        with timer.stage("generate"):
            out["generate"] = generate_trace(s.preset, s.seed, raw, accesses=s.accesses,
                                             days=s.days)
    else:
        raw = Path(s.trace)
    if not raw.exists():
        raise TraceError(raw, "no such file")
    table = run.table
    with timer.stage("ingest"):
        if is_parquet(raw) and s.format in (None, "parquet"):
            if raw.resolve() != table.resolve():
                from flashml.files import atomic_path

                with atomic_path(table) as tmp:
                    shutil.copyfile(raw, tmp)
        else:
            res = ingest_trace(raw, table, s.format or "tectonic", sample_ratio=s.sample_ratio,
                               skip_bad_lines=s.skip_bad_lines)
            out["ingest"] = {"rows": res.rows, "lines": res.lines, "seconds": res.seconds,
                             "skipped_lines": res.skipped_lines}
    run.cache.pop("frame", None)
    meta = read_meta(table)
    resolved = with_sample_ratio(meta, s.sample_ratio, raw)
    if resolved != meta:  # the table again with its resolved metadata (every column)
        write_table(read_table(table)[0], table, resolved)
    # the job's frame: the core columns (what RunDir.frame() maps; not the source's)
    df, meta = run.frame()
    check_span(run, s, raw)  # before any training or MLflow run
    run.ready("ingest")  # (the baselines' searches read the table while it validates)
    with timer.stage("validate"):
        # the shared context ($FLASHML_HOME/gx): an index across runs (`flashml ui docs`),
        # and a failed validation's pages outlive the run folder put back as it was
        rep = validate_table(df, meta, name=raw.name)
        print(rep.describe())
        if not rep.success:
            raise UserError(f"validation failed on {table}; see {rep.docs_index}")
    out["validate"] = {"success": True, "data_docs": str(rep.docs_index)}
    with timer.stage("stats"):
        stats = compute_stats(df, meta)
        print(format_stats(stats))
    out["stats"] = stats
    out["trace"] = str(raw)
    return run.record("ingest", out)


def ship_variant(run: RunDir, s: BaleenSettings, loop: Any) -> dict[str, Any]:
    """Choose the shipped variant on held-out data of the training window
    (systems/baleen/validation.py: flat threshold or the peak schedule, Baleen's features or
    CacheLib-ML's) and make `loop` that variant: its admission model retrained on the loop's
    final labels without the size features when CacheLib-ML's set won, and its threshold
    tuned to the target under the chosen schedule. The choice's record."""

    from flashml.systems.baleen.baselines import tune_threshold
    from flashml.systems.baleen.dataset import training_data, training_tables
    from flashml.systems.baleen.model import score_all, train_policy
    from flashml.systems.baleen.validation import choose, zeroed_features

    df, _ = run.frame()
    feats = features(run)
    base = base_config(run, s)
    target = s.target_write_rate_mbps
    k = int(loop.extra.get("accesses_per_episode") or s.loop.accesses_per_episode)
    labels, eps = training_tables(loop.episodes_dir)
    choice = choose(df, feats, labels, eps, base, target, k, s.loop, s.gbm, s.peak,
                    arrays=loop.arrays if s.with_prefetch else None)
    # a sweep trial warm-started from this loop retrains with the shipped feature set
    loop.extra["zeroed"] = zeroed_features(choice.feature_set)
    prefetch = {"prefetch": "range", "prefetch_when": "score"} if s.with_prefetch else {}
    retune = choice.when_threshold not in (None, loop.when_threshold)
    if choice.when_threshold is not None:  # chosen for the shipped variant
        loop.when_threshold = choice.when_threshold
    flat = base.replace(when_threshold=loop.when_threshold)
    if choice.feature_set != "baleen" or retune:
        if choice.feature_set != "baleen":
            data = training_data(feats, df["time"].to_numpy(), labels, eps, s.train_seconds,
                                 max_position=k, max_rows=s.loop.max_training_rows)
            adm = train_policy(data, s.gbm, with_prefetch=False,
                               zeroed=zeroed_features(choice.feature_set))
            loop.policy.admission = adm.admission
            loop.arrays = {**loop.arrays, "score": score_all(adm, feats)["score"]}
        # the flat search of these arrays: what the sweep's trials and the flat-threshold
        # row start from (the loop's own points were another model's or ML-When's)
        flat_tuned = tune_threshold(df, flat, target, loop.arrays, **prefetch,
                                    hint=loop.points)
        loop.tuned, loop.points = flat_tuned, flat_tuned.points
    if choice.peak_hours and choice.peak_bonus > 0.0:
        loop.tuned = tune_threshold(
            df, flat.replace(peak_hours=choice.peak_hours, peak_bonus=choice.peak_bonus),
            target, loop.arrays, **prefetch, hint=loop.points)
        loop.final_points = loop.tuned.points
    return choice.record()


def train(run: RunDir, s: BaleenSettings, timer: Timer) -> dict[str, Any]:
    """Baleen's convergence loop (episodes -> train -> simulate until the eviction age is
    stable) -> the candidate bundle `policy/`, logged to the MLflow run with the admission
    model. With `s.candidate_bundle`, that bundle is the candidate instead (scored on this
    trace the way the registry scores a champion)."""
    rec = run.done("train")
    if rec is not None:
        return rec
    import mlflow
    from mlflow.models import infer_signature

    from flashml.compiler.bundle import save_policy_models
    from flashml.systems.baleen.converge import run_loop
    from flashml.systems.baleen.memory import budget_bytes, check_memory, scores_fit, spilled

    check_span(run, s)
    check_memory(run, budget_bytes(run, s))
    df, _ = run.frame()
    with timer.stage("features"):
        feats = features(run)
    target = s.target_write_rate_mbps
    run_id = mlflow.active_run().info.run_id
    extra: dict[str, Any] = {}
    converged = True
    loop = None
    if s.candidate_bundle is None:
        with timer.stage("convergence + training (baleen)"):
            loop = run_loop(df, run.table, feats, base_config(run, s), target,
                            run.work / "baleen", s.gbm, s.loop,
                            with_prefetch=s.with_prefetch)
            if not scores_fit(run, s, df.height):  # (memory.py)
                loop.arrays = spilled(loop.arrays, run.work / "baleen" / "scores")
        print(loop.report())
        with timer.stage("validation (peak schedule, feature set)"):
            choice = ship_variant(run, s, loop)
        print(f"shipped variant: {choice['reason']}")
        extra["choice"] = choice
        base = base_config(run, s).replace(peak_hours=tuple(choice["peak_hours"]),
                                           peak_bonus=choice["peak_bonus"])
        run.cache["loop"] = loop
        policy, tuned, ea = loop.policy, loop.tuned, loop.eviction_age_s
        when_threshold = loop.when_threshold
        converged = loop.converged
        convergence = {"converged": loop.converged, "reason": loop.reason,
                       "accesses_per_episode": loop.extra.get("accesses_per_episode"),
                       "iterations": [asdict(i) for i in loop.iterations]}
    else:
        from flashml.compiler.bundle import find_bundle, read_policy_json, sim_peak
        from flashml.systems.baleen.baselines import tune_threshold
        from flashml.systems.baleen.model import score_all
        from flashml.systems.baleen.registry import load_policy_dir

        src = find_bundle(Path(s.candidate_bundle))
        with timer.stage("candidate bundle (given)"):
            policy = load_policy_dir(src)
            params = read_policy_json(src)
            when_threshold = params["when_threshold"]
            base = base_config(run, s).replace(**sim_peak(params))
            tuned = tune_threshold(df, base.replace(when_threshold=when_threshold), target,
                                   score_all(policy, feats), prefetch="range",
                                   prefetch_when="score")
        ea = params["eviction_age_s"]
        convergence = {"converged": True, "reason": f"given candidate bundle {src}",
                       "iterations": []}
        extra["candidate_source"] = str(src)
        extra["choice"] = {"feature_set": "given", "peak_hours": list(base.peak_hours),
                           "peak_bonus": base.peak_bonus,
                           "reason": f"the given candidate bundle's ({src})"}
    run.cache["learned_base"] = base
    m = _metrics(tuned, "threshold")
    mlflow.log_params({"eviction_age_s": ea, "threshold": m["threshold"]})
    log_dataset(run, s)
    for step, it in enumerate(convergence["iterations"]):  # the loop's curve, one step each
        mlflow.log_metrics(finite_numbers({f"loop_{k}": it[k] for k in (
            "eviction_age_s", "measured_eviction_age_s", "threshold", "write_rate_mbps",
            "peak_dt_util")}), step=step)
    log_training_curves(run_id, policy.boosters())
    run.cache["tuned_baleen"] = tuned
    if not s.with_prefetch:  # admission only: no ML-Range/ML-When, so no shippable bundle
        return run.record("train", {"eviction_age_s": ea, "metrics": m,
                                    "convergence": convergence, "mlflow_run_id": run_id,
                                    "choice": extra["choice"]})
    bundle = save_policy_models(
        policy_dir(run), policy.boosters(), admit_threshold=m["threshold"],
        when_threshold=when_threshold, eviction_age_s=ea, target_write_rate_mbps=target,
        metrics={k: v for k, v in finite_numbers(m).items() if k != "threshold"},
        mlflow_run_id=run_id, converged=converged, peak_hours=base.peak_hours,
        peak_bonus=base.peak_bonus)
    mlflow.log_artifacts(str(bundle), artifact_path="policy")
    sample = feature_frame(feats[:: max(1, len(feats) // 200)][:200])
    cols = list(policy.admission_features)
    info = mlflow.lightgbm.log_model(policy.admission, name="admission",
                                     signature=infer_signature(
                                         sample[cols], policy.admission.predict(sample[cols])),
                                     input_example=sample[cols].head(5),
                                     # the flavour's own list, not inferred: inference
                                     # loads the model in a subprocess that imports mlflow
                                     # again (~8 s at 1 M accesses)
                                     pip_requirements=mlflow.lightgbm
                                     .get_default_pip_requirements())
    if loop is not None:  # what the sweep's trials aim their searches with (warm_start)
        extra["search_points"] = {
            "points": loop.points, "final_points": loop.final_points,
            "when_points": [[k, v] for k, v in loop.when_points.items()]}
    return run.record("train", {"eviction_age_s": ea, "metrics": m,
                                "convergence": convergence, "policy_bundle": str(bundle),
                                "model_uri": info.model_uri, "mlflow_run_id": run_id, **extra})


def episodes(run: RunDir, s: BaleenSettings, timer: Timer) -> dict[str, Any]:
    """Episodes, OPT and labels of the table at the converged eviction age (from `train`),
    with `s.engine` (auto by default: Polars or Spark by the table's size; Spark's master
    `s.master`, else FLASHML_SPARK_MASTER, else local[*]): the recorded episode table of the
    run."""
    eviction_age_s = float(train(run, s, timer)["eviction_age_s"])
    rec = run.done("episodes")
    if rec is not None and rec.get("eviction_age_s") == eviction_age_s:
        return rec
    from flashml.systems.baleen.episodes.core import (
        EpisodeParams,
        build,
        choose_engine,
        derive,
        reusable,
    )

    params = EpisodeParams(eviction_age_s=eviction_age_s,
                           target_write_rate_mbps=s.target_write_rate_mbps,
                           accesses_per_episode=s.loop.accesses_per_episode)
    # the loop's last build, at this eviction age, serves these parameters (a larger K's
    # labels hold this K's): its tables with this K's labels, instead of building again
    found = reusable(getattr(run.cache.get("loop"), "episodes_dir", None), params)
    if found is not None:
        with timer.stage(f"episodes at eviction age {eviction_age_s:.0f} s (the loop's)"):
            built = derive(found, run.path / "episodes", params, source=run.table)
        return _record_episodes(run, eviction_age_s, built.summary)
    spark = None
    master = s.resolved_master()
    engine, why = choose_engine(run.table, s.engine, master)
    log.info("episodes engine: %s (%s)", engine, why)
    if engine == "spark":
        with timer.stage("spark session"):
            from flashml.systems.baleen.episodes.spark_engine import spark_session

            spark = spark_session(master)
    try:
        with timer.stage(f"episodes at eviction age {eviction_age_s:.0f} s ({engine})"):
            built = build(run.table, run.path / "episodes", params, engine=engine,
                          spark=spark, master=master)
    finally:
        if spark is not None:
            spark.stop()
    return _record_episodes(run, eviction_age_s, built.summary)


def _record_episodes(run: RunDir, eviction_age_s: float, summary: dict[str, Any]
                     ) -> dict[str, Any]:
    keep = {k: summary.get(k) for k in ("episodes", "admitted_episodes", "cutoff_score",
                                        "dt_saved_ratio", "littles_law_cache_gb", "engine",
                                        "engine_choice")}
    return run.record("episodes", {"eviction_age_s": eviction_age_s,
                                   "dir": str(run.path / "episodes"), "summary": keep})


def rejectx_peak0(run: RunDir, s: BaleenSettings) -> float:
    """TCO's PeakDT_0: RejectX's peak DT at the default write rate WR_0 (Baleen eq. 4b), from
    the `policies` record when the target is WR_0, else simulated here."""
    wr0 = DEFAULTS.target_write_rate_mbps
    rec = run.done("policies")
    if rec is not None and s.target_write_rate_mbps == wr0:
        return float(rec["policies"]["rejectx"]["peak_dt_util"])
    if "rejectx_peak0" not in run.cache:
        from flashml.systems.baleen.baselines import tune_rejectx

        run.cache["rejectx_peak0"] = float(tune_rejectx(run.frame()[0], base_config(run, s), wr0)
                                           .result.metrics["peak_dt_util"])
    return run.cache["rejectx_peak0"]


#: The stage of the baselines that run side by side (`policies`).
BASELINES_STAGE = "baselines (cachelib_ml, rejectx, coinflip, opt)"


def _timed(fn: Callable[[], Tuned]) -> tuple[Tuned, float]:
    t0 = time.perf_counter()
    return fn(), time.perf_counter() - t0


def _metrics(t: Tuned, knob_name: str) -> dict[str, Any]:
    m = dict(t.result.metrics)
    m[knob_name] = t.knob
    m["reached_target"] = t.reached
    return m


def policies(run: RunDir, s: BaleenSettings, timer: Timer) -> dict[str, Any]:
    """Every policy tuned to the same target write rate and simulated: the baselines,
    Baleen admission only, CacheLib-ML-like, Baleen (from `train`) and OPT; TCO relative to
    RejectX at the default write rate. Each is a nested MLflow run; their DT series go to
    `work/policy_series.npz` for the plots."""
    rec = run.done("policies")
    if rec is not None:
        return rec
    import mlflow
    import numpy as np

    from flashml.compiler.bundle import read_policy_json
    from flashml.features.contract import contract
    from flashml.systems.baleen.baselines import tune_coinflip, tune_rejectx, tune_threshold
    from flashml.systems.baleen.converge import WarmStart, run_loop
    from flashml.systems.baleen.model import score_all
    from flashml.systems.baleen.opt import tune_opt
    from flashml.systems.baleen.tuning import parallel_map
    from flashml.systems.baleen.validation import zeroed_features

    df, _ = run.frame()
    feats = features(run)
    base = base_config(run, s)
    target = s.target_write_rate_mbps
    trained = train(run, s, timer)
    learned_base = learned_config(run, s)
    ea = trained["eviction_age_s"]
    pol: dict[str, dict[str, Any]] = {"baleen": dict(trained["metrics"])}
    tuned: dict[str, Tuned] = {}
    if "tuned_baleen" in run.cache:
        tuned["baleen"] = run.cache["tuned_baleen"]
    else:  # a fresh process: simulate the shipped policy again (same decisions)
        from flashml.compiler.bundle import sim_peak

        params = read_policy_json(policy_dir(run))
        tuned["baleen"] = tune_threshold(
            df, base.replace(when_threshold=params["when_threshold"], **sim_peak(params)),
            target, score_all(_learned(run), feats), prefetch="range", prefetch_when="score")
    loop = run.cache.get("loop")
    arrays = loop.arrays if loop is not None else score_all(_learned(run), feats)
    with timer.stage("baleen_admission_only"):
        # aimed by the shipped policy's search (the same scores with prefetch)
        tuned["baleen_admission_only"] = tune_threshold(
            df, learned_base, target, {"score": arrays["score"]},
            hint=loop.tuned.points if loop is not None else None)
        pol["baleen_admission_only"] = _metrics(tuned["baleen_admission_only"], "threshold")
    with timer.stage("baleen_flat_threshold"):  # what the peak schedule adds
        wt = read_policy_json(policy_dir(run))["when_threshold"]
        # the loop's own last search is this one (same arrays, config and target): its
        # points put it on target at once
        tuned["baleen_flat_threshold"] = tune_threshold(
            df, base.replace(when_threshold=wt), target, arrays, prefetch="range",
            prefetch_when="score", known=loop.points if loop is not None else None)
        pol["baleen_flat_threshold"] = _metrics(tuned["baleen_flat_threshold"], "threshold")
    # CacheLib-ML-like is trained on the episodes of Baleen's converged eviction age and K
    # (one training instead of one per K candidate): the baselines differ in features only
    k = trained.get("convergence", {}).get("accesses_per_episode")
    cl_loop = replace(s.loop, start_eviction_age_s=ea, max_iter=1)
    if k:
        cl_loop = replace(cl_loop, accesses_per_episode=int(k),
                          accesses_per_episode_tried=(int(k),))
    rec_eps = run.done("episodes") or {}

    # When the shipped variant has CacheLib-ML's features, its admission model is the one
    # this row trains: the loop's final labels at its K and eviction age, the size features
    # held at 0 there (LightGBM drops a constant feature: the same trees as without it,
    # tests/baleen/test_models.py), so the row starts from its scores instead of training
    # and scoring the same model again
    cl_warm = None
    if loop is not None and k and tuple(loop.extra.get("zeroed", ())) == \
            zeroed_features("cachelib_like"):
        cl_warm = WarmStart(ea, int(k), loop.policy, {"score": loop.arrays["score"]},
                            base.when_threshold)

    def cachelib_ml() -> Tuned:
        return run_loop(df, run.table, feats, base, target, run.work / "cachelib", s.gbm,
                        cl_loop, features=list(contract().models["cachelib_like"]),
                        with_prefetch=False, final_base=learned_base,
                        prebuilt=loop.episodes_dir if loop is not None else None,
                        # Baleen's admission-only search: the same config, a similar model
                        hint=loop.points if loop is not None else None, warm=cl_warm).tuned

    def opt() -> Tuned:
        # the ranking of the recorded episodes (same eviction age) when the stage built them
        return tune_opt(df, run.table, base, target, ea, run.work / "opt",
                        built=Path(rec_eps["dir"]) if "dir" in rec_eps else None)

    ahead = run.cache.pop("baselines_ahead", None)

    def simple(name: str, tune: Callable[..., Tuned]) -> Callable[[], Tuned]:
        def searched() -> Tuned:  # tuned ahead (baselines_ahead.py), else here
            got = ahead.take(name) if ahead is not None else None
            if got is not None:
                log.info("%s was tuned ahead, in %.1f s", name, got[1])
                return got[0]
            return tune(df, base, target)
        return searched

    # Four independent searches on the machine's cores (the simulator releases the GIL),
    # the longest first: RejectX's simulations are the slowest (a history lookup per
    # missing segment), and the others fill the other core meanwhile
    side_by_side = {"rejectx": simple("rejectx", tune_rejectx), "cachelib_ml": cachelib_ml,
                    "coinflip": simple("coinflip", tune_coinflip), "opt": opt}
    with timer.stage(BASELINES_STAGE):
        for name, (t, secs) in zip(side_by_side, parallel_map(_timed, list(side_by_side.values())),
                                   strict=True):
            tuned[name] = t
            log.info("%s tuned in %.1f s", name, secs)
    knobs = {"cachelib_ml": "threshold", "rejectx": "rejectx_factor", "coinflip": "coinflip_p",
             "opt": "episode_target_write_rate_mbps"}
    for name, knob in knobs.items():
        pol[name] = _metrics(tuned[name], knob)
    pol = {name: pol[name] for name in report.POLICIES}
    wr0 = DEFAULTS.target_write_rate_mbps
    peak0 = pol["rejectx"]["peak_dt_util"] if target == wr0 else rejectx_peak0(run, s)
    report.add_tco(pol, peak0, wr0)
    run.work.mkdir(parents=True, exist_ok=True)
    from flashml.files import atomic_path

    with atomic_path(run.work / SERIES_FILE) as tmp, open(tmp, "wb") as f:
        np.savez(f, **{f"{n}/{k}": np.asarray(v) for n in report.POLICIES
                       for k, v in tuned[n].result.series.items()})
    for name, m in pol.items():
        with mlflow.start_run(run_name=name, nested=True, tags={"policy": name}):
            mlflow.log_param("policy", name)
            mlflow.log_metrics(finite_numbers(m))
    mlflow.log_metrics(headline_metrics(pol))  # the parent run: what the runs table compares
    from flashml.jobs.ship import log_headlines

    log_headlines(headlines_of(pol))  # the runs table's few default columns
    return run.record("policies", {"policies": pol})


def sweep(run: RunDir, s: BaleenSettings, timer: Timer) -> dict[str, Any]:
    """Optuna over target write rate, each trial a convergence loop scored by TCO started
    from the main loop's converged state (`--sweep-cold`: from scratch, with the starting
    eviction age swept too); Baleen-TCO's chosen write rate. Storage: `s.sweep_storage`, else
    FLASHML_OPTUNA_STORAGE, else sqlite under FLASHML_HOME. With 0 trials (or a given
    candidate bundle), the chosen rate is the target."""
    rec = run.done("sweep")
    if rec is not None:
        return rec
    if s.sweep_trials <= 0 or s.candidate_bundle is not None:
        return run.record("sweep", {"chosen_write_rate_mbps": s.target_write_rate_mbps})
    import mlflow

    from flashml.config import optuna_storage, redact_url
    from flashml.systems.baleen.memory import scores_fit
    from flashml.systems.baleen.sweep import run_sweep
    from flashml.tracking import git_commit

    df, _ = run.frame()
    peak0 = rejectx_peak0(run, s)
    warm = None
    if not s.sweep_cold:  # the trials start from the main loop's state (trained if not yet)
        train(run, s, timer)
        warm = warm_start(run, s)
    with timer.stage(f"sweep ({s.sweep_trials} Optuna trials)"):
        run_id = mlflow.active_run().info.run_id
        attrs = {"trace": trace_name(run, s), "trace_path": str((run.done("ingest") or {})
                                                                  .get("trace", run.table)),
                 "cache_gb": s.cache_gb, "mlflow_run_id": run_id,
                 "git_commit": git_commit() or "unknown"}
        study = s.sweep_study or study_name(run, s, run_id)
        storage = s.sweep_storage or optuna_storage()
        res = run_sweep(df, run.table, features(run), base_config(run, s),
                        s.target_write_rate_mbps, peak0, DEFAULTS.target_write_rate_mbps,
                        run.work / "sweep", s.gbm, s.loop, trials=s.sweep_trials,
                        storage=storage, study_name=study,
                        rate_range=s.sweep_rate_range, final_base=learned_config(run, s),
                        user_attrs=attrs, warm=warm, workers=s.sweep_workers,
                        promote_within=s.sweep_screen_margin,
                        spawn=sweep_spawner(run, s, study, storage, peak0, run_id),
                        side_by_side=scores_fit(run, s, df.height))
    mlflow.log_metrics({"chosen_write_rate_mbps": res.chosen_write_rate_mbps,
                        "chosen_tco": res.chosen_tco,
                        "sweep_range_low_mbps": res.range_mbps[0],
                        "sweep_range_high_mbps": res.range_mbps[1]})
    # the storage URL as summaries and tags show it: without its password
    shown = redact_url(res.storage)
    mlflow.set_tags({"optuna.study": res.study_name, "optuna.storage": shown})
    return run.record("sweep", {
        "sweep": {"study": res.study_name, "storage": shown, "trials": res.trials,
                  "range_mbps": list(res.range_mbps), "widened": res.widened},
        "chosen_write_rate_mbps": res.chosen_write_rate_mbps, "chosen_tco": res.chosen_tco})


def plots(run: RunDir, s: BaleenSettings, timer: Timer) -> dict[str, Any]:
    """The report's plots (PNG in `plots/`), logged to the MLflow run."""
    rec = run.done("plots")
    if rec is not None:
        return rec
    import numpy as np

    from flashml.systems.baleen.peak import hourly_dt_profile

    pol = policies(run, s, timer)["policies"]
    sw = run.done("sweep") or {}
    figs = run.path / "plots"
    with timer.stage("plots"):
        with np.load(run.work / SERIES_FILE) as z:
            series = {n: {k.split("/", 1)[1]: z[k] for k in z.files if k.startswith(f"{n}/")}
                      for n in report.POLICIES}
        paths = [report.plot_dt_utilisation(series, figs / "dt_utilisation.png",
                                            title="DT utilisation per policy (peak marked)")]
        points = {n: [(m["flash_write_rate_mbps"], m["peak_dt_util"])] for n, m in pol.items()}
        if "sweep" in sw:
            trials = [t for t in sw["sweep"]["trials"] if t["state"] == "COMPLETE"]
            points["baleen (sweep)"] = [(t["write_rate_mbps"], t["peak_dt_util"])
                                        for t in trials]
            rng = sw["sweep"].get("range_mbps")
            paths.append(report.plot_tco_curve([(t["write_rate_mbps"], t["tco"])
                                                for t in trials],
                                               sw["chosen_write_rate_mbps"],
                                               figs / "tco_curve.png",
                                               bounds=tuple(rng) if rng else None))
        paths.append(report.plot_write_rate_vs_peak(points, figs / "write_rate_vs_peak_dt.png"))
        learned = learned_config(run, s)
        paths.append(report.plot_peak_schedule(
            list(hourly_dt_profile(run.frame()[0], s.train_seconds)), learned.peak_hours,
            learned.peak_bonus, figs / "peak_schedule.png", days=s.train_seconds / 86400.0))
        adm = _learned(run).admission
        paths.append(report.plot_feature_importance(
            adm.feature_name(), list(adm.feature_importance("gain")),
            figs / "feature_importance.png"))
    return run.record_plots(paths)


def evaluate(run: RunDir, s: BaleenSettings, timer: Timer) -> dict[str, Any]:
    """Register the candidate and judge it against the registry's `champion` on this
    trace's evaluation days (flashml/systems/baleen/registry.py's rule: both re-tuned to the target,
    lower peak DT wins, a tie keeps the champion). Records the decision; moves nothing."""
    if not s.register:
        return {"skipped": "the registry is off (--no-register)"}
    rec = run.done("evaluate")
    if rec is not None:
        return rec
    import mlflow

    from flashml.systems.baleen.policy_model import log_policy_model
    from flashml.systems.baleen.registry import judge

    trained = train(run, s, timer)
    compiled = run.done("compile")
    so_dir = compiled_dir(run) if compiled is not None and compiled_dir(run).is_dir() else None
    feats = features(run)
    with timer.stage("log the policy bundle model"):
        info = log_policy_model(policy_dir(run), so_dir,
                                feature_frame(feats[:: max(1, len(feats) // 50)][:50]))
    tags = {"trace": trace_name(run, s),
            "target_write_rate_mbps": f"{s.target_write_rate_mbps:g}",
            "peak_dt_util": f"{float(trained['metrics']['peak_dt_util']):.6g}",
            "compiled": str(so_dir is not None)}
    if compiled is not None:
        tags["policy_so_sha256"] = compiled["sha256"]
    with timer.stage("evaluate against the champion"):
        d = judge(trained["mlflow_run_id"], info.model_uri,
                  float(trained["metrics"]["peak_dt_util"]), run.frame()[0], feats,
                  base_config(run, s), s.target_write_rate_mbps, tags=tags,
                  description=f"Baleen policy bundle trained on {trace_name(run, s)} at "
                  f"{s.target_write_rate_mbps:g} MB/s: LightGBM models + policy.json"
                  + (" and the compiled policy.so bundle (manifest.json)" if so_dir else ""))
    log.info("registry: %s", d.reason)
    mlflow.log_metrics(finite_numbers({"candidate_passed": float(d.promoted),
                                       "candidate_peak_dt_util": d.candidate_peak,
                                       "champion_peak_dt_util": d.champion_peak}))
    return run.record("evaluate", d.as_dict() | {"model_uri": info.model_uri})


def compile_candidate(run: RunDir, s: BaleenSettings, timer: Timer) -> dict[str, Any]:
    """The candidate bundle -> `compiled/` (policy.so, header, manifest), logged to MLflow."""
    if not s.compile:
        return {"skipped": "compiling is off (--no-compile)"}
    rec = run.done("compile")
    if rec is not None and compiled_dir(run).is_dir():
        return rec
    from flashml.compiler.build import compile_policy

    out = compiled_dir(run)
    if out.exists():  # left by an attempt that died before recording
        shutil.rmtree(out)
    run_id = train(run, s, timer)["mlflow_run_id"]
    with timer.stage("compile"):
        ahead = run.cache.pop("compile_ahead", None)
        if ahead is not None:  # its objects, compiled meanwhile, are in the cache
            ahead.finish()
        manifest = compile_policy(out, run_id=run_id)
    return run.record("compile", {"dir": str(out), "sha256": manifest["sha256"],
                                  "size_bytes": manifest["size_bytes"],
                                  "compile_s": round(manifest["build"]["compile_s"], 2)})


def promote(run: RunDir, s: BaleenSettings, timer: Timer) -> dict[str, Any]:
    """If the candidate passed `evaluate`: move alias `champion` to it and, with
    `s.export_dir`, export the model bundle and compiled policy to `export_dir/v<version>/`
    and point `export_dir/champion` at it (a symlink, replaced atomically). Otherwise
    nothing moves. Safe to repeat."""
    if not s.register:
        return {"skipped": "the registry is off (--no-register)"}
    from flashml.systems.baleen.registry import Decision
    from flashml.systems.baleen.registry import promote as move_champion

    d = run.done("evaluate")
    if d is None:
        raise UserError(f"{run.path}: no evaluate record; run the evaluate stage first")
    out: dict[str, Any] = {"promoted": bool(d["promoted"]), "reason": d["reason"],
                           "version": d["candidate_version"], "exported": None}
    decision = Decision(**{k: d[k] for k in Decision.__dataclass_fields__})
    if move_champion(decision) and s.export_dir is not None:
        out["exported"] = str(export_bundle(run, Path(s.export_dir),
                                            f"v{d['candidate_version']}"))
    return run.record("promote", out)


def export_bundle(run: RunDir, export_dir: Path, name: str) -> Path:
    """Copy `policy/` and `compiled/` to `export_dir/name/` (atomically) and repoint the
    `export_dir/champion` symlink at it."""
    export_dir.mkdir(parents=True, exist_ok=True)
    dest = export_dir / name
    if not dest.exists():
        with atomic_dir(dest) as tmp:
            shutil.copytree(policy_dir(run), tmp / "policy")
            if compiled_dir(run).is_dir():
                shutil.copytree(compiled_dir(run), tmp / "compiled")
            write_json(tmp / "promotion.json", {"run_dir": str(run.path),
                                                "mlflow_run_id": run.mlflow_run_id()})
    link = export_dir / "champion"
    tmp_link = export_dir / f".champion.{os.getpid()}"
    if tmp_link.is_symlink() or tmp_link.exists():
        tmp_link.unlink()
    tmp_link.symlink_to(name)
    tmp_link.replace(link)
    return dest


#: The one stage list of Baleen's main job (the CLI, `flashml train` and the DAG run it).
STAGES: tuple[Stage, ...] = (
    Stage("ingest", ingest),
    Stage("train", train),
    Stage("episodes", episodes),
    Stage("policies", policies, prepare=baselines_ahead, prepare_after="ingest"),
    Stage("sweep", sweep, prepare=start_sweep_workers, prepare_after="train"),
    Stage("plots", plots),
    Stage("compile", compile_candidate, prepare=compile_ahead, prepare_after="train"),
    Stage("evaluate", evaluate),
    Stage("promote", promote),
)


#: How the CLI names the job: `flashml pipeline run` (flashml/commands/systems.py).
COMMAND = "pipeline"
HELP = "Baleen: learned admission + prefetch, trace -> validated table -> policy.so"
Settings = BaleenSettings

#: The options of `flashml pipeline run` from the settings table (flashml/settings.py).
CLI_OPTIONS = ("cache_gb", "target_write_rate_mbps", "engine", "master", "learning_rate",
               "max_rounds", "max_iterations", "max_training_rows", "train_hours",
               "accesses_per_episode", "peak_hours", "peak_bonus", "sweep_trials", "sweep_cold",
               "sweep_workers", "sweep_screen_margin", "memory_gib", "skip_bad_lines")


def add_cli(p: Any) -> None:
    """The job's command-line options (an argparse parser that already has --trace,
    --format, --sample-ratio and --out)."""
    from flashml.settings import add_options

    add_options(p, "preset", "seed", "accesses", "days", *CLI_OPTIONS, "no_register",
                "no_compile")


def run_name(s: BaleenSettings, kind: str = "pipeline", when: str | None = None) -> str:
    """The MLflow parent run's name: `<kind> <trace> <target>MBps <UTC date time>`, distinct
    and readable in the runs table (e.g. `pipeline region1-like-seed0 35.6MBps
    2026-01-02 10:30:12`)."""
    import datetime as dt

    when = when or dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
    return f"{kind} {trace_name(None, s)} {s.target_write_rate_mbps:.4g}MBps {when}"


def mlflow_tags(run: RunDir, s: BaleenSettings, kind: str = "pipeline") -> dict[str, str]:
    """The parent run's tags (besides the git commit, flashml.tracking.source_tags): the
    job, the trace and the target, to filter the runs table by."""
    rec = run.done("ingest") or {}
    return {"flashml.job": kind, "trace": trace_name(run, s),
            "trace_path": str(rec.get("trace", s.trace or "")),
            "target_write_rate_mbps": f"{s.target_write_rate_mbps:g}",
            "cache_gb": f"{s.cache_gb:g}"}


def describe_run(run: RunDir, s: BaleenSettings, kind: str = "pipeline") -> str:
    """The parent run's description (Markdown, the run page's Description)."""
    rec = run.done("ingest") or {}
    what = {"pipeline": "Baleen's main job (`flashml pipeline run`): every policy tuned to "
            "the target write rate and judged on the evaluation days, the Optuna sweep "
            "(Baleen-TCO), the compiled policy.so, the registry decision",
            "train": "`flashml train`: Baleen's convergence loop -> the policy bundle",
            "sweep": "`flashml sweep`: Optuna over target write rates, scored by TCO",
            "dag": "Airflow DAG `flashml_retrain`: Baleen's main job, one task per stage"}
    return (f"{what.get(kind, kind)}.\n\n"
            f"- trace: `{rec.get('trace', s.trace or trace_name(run, s))}`\n"
            f"- target write rate: {s.target_write_rate_mbps:g} MB/s; cache "
            f"{s.cache_gb:g} GB\n"
            f"- training window: the first {s.train_seconds / 3600:g} h; metrics on the "
            f"rest\n"
            "- nested runs: one per policy (`policies`) and per Optuna trial (`sweep`)\n"
            "- metrics `<policy>_peak_dt_util`, `<policy>_flash_write_rate_mbps`, "
            "`<policy>_tco`, `baleen_vs_rejectx_peak_reduction`, `chosen_write_rate_mbps`")


def mlflow_params(run: RunDir, s: BaleenSettings) -> dict[str, Any]:
    """The parent run's params (after `ingest`: the trace and its sample ratio)."""
    return s.mlflow_params() | {"trace": run.done("ingest")["trace"],
                                "sample_ratio": run.frame()[1].sample_ratio}


