"""The main job as stage functions over one run folder, shared by `flashml pipeline run`
(all stages in one process) and the Airflow DAG `dags/flashml_retrain.py` (one task per
stage, possibly on different workers, retried on failure).

trace -> validated table -> episodes -> features -> convergence/training -> baselines ->
sweep -> simulation of every policy, tracked in MLflow; the candidate is evaluated against
the registry's `champion`, compiled, and promoted only if it won.

Policies (all at the same target write rate, on the same simulated cache):
`rejectx` (history factor tuned), `coinflip` (p tuned), `cachelib_ml` (the admission GBM
without the size features), `baleen_admission_only`, `baleen` (ML admission + ML-Range +
ML-When) and `opt` (episodes' OPT with OPT-Range: the bound). Peak DT and all metrics are
measured on the evaluation days (the first day is the simulator's warm-up and the models'
training window).

The run folder (`RunDir`) is the only thing stages share. Every stage reads its inputs from
it and writes its outputs into it, then records `stages/<stage>.json` atomically; calling a
recorded stage again returns the record without redoing the work, so a retried task is
idempotent. Files of a run folder:

| path                 | written by          | what                                         |
|----------------------|---------------------|----------------------------------------------|
| `accesses.parquet`   | ingest_validate     | the canonical, validated access table        |
| `gx/`                | ingest_validate     | Great Expectations context and Data Docs     |
| `episodes/`          | episodes            | episodes, labels, OPT arrays, summary (Spark)|
| `work/`              | train, policies, sweep | convergence-loop iterations, OPT, trials  |
| `policy/`            | train               | the candidate model bundle (compiler/bundle) |
| `compiled/`          | compile_candidate   | policy.so, flashml_policy.h, manifest.json   |
| `plots/`             | plots               | DT utilisation, TCO curve, ... (PNG)         |
| `mlflow_run_id`      | open_run            | the MLflow run every stage logs into         |
| `stages/*.json`      | every stage         | the stage's result (small JSON)              |
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from flashml.config import DEFAULTS
from flashml.errors import UserError
from flashml.jobs import report
from flashml.models.converge import LoopSettings
from flashml.models.gbm import GbmParams
from flashml.models.peak import PeakSettings, with_peak
from flashml.policies.tuning import Tuned
from flashml.simulation import SimConfig

log = logging.getLogger("flashml.pipeline")


@dataclass
class JobSettings:
    cache_gb: float = DEFAULTS.cache_gb
    target_write_rate_mbps: float = DEFAULTS.target_write_rate_mbps
    engine: str = "spark"
    master: str | None = None
    gbm: GbmParams = field(default_factory=GbmParams)
    loop: LoopSettings = field(default_factory=LoopSettings)
    #: The learned policies' peak schedule (models/peak.py).
    peak: PeakSettings = field(default_factory=PeakSettings)
    sweep_trials: int = 6
    register: bool = True
    compile: bool = True
    #: Evaluate (and maybe promote) this model bundle instead of training one.
    candidate_bundle: Path | None = None


class Timer:
    def __init__(self) -> None:
        self.stages: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str):  # type: ignore[no-untyped-def]
        log.info("stage %s ...", name)
        t0 = time.perf_counter()
        yield
        self.stages[name] = round(time.perf_counter() - t0, 2)
        log.info("stage %s done in %.1fs", name, self.stages[name])


def _json_default(x: Any) -> Any:
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    if isinstance(x, Path):
        return str(x)
    return str(x)


def _atomic_json(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=_json_default) + "\n")
    tmp.replace(path)
    return path


class RunDir:
    """One run's folder. In-process callers (the pipeline) share loaded objects through
    `cache`; a fresh process (an Airflow task) reloads them from the files."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.cache: dict[str, Any] = {}

    @property
    def table(self) -> Path:
        return self.path / "accesses.parquet"

    @property
    def policy(self) -> Path:
        return self.path / "policy"

    @property
    def compiled(self) -> Path:
        return self.path / "compiled"

    @property
    def work(self) -> Path:
        return self.path / "work"

    def reset(self) -> None:
        """Forget every stage record and the MLflow run: the next stages start afresh."""
        shutil.rmtree(self.path / "stages", ignore_errors=True)
        (self.path / "mlflow_run_id").unlink(missing_ok=True)
        self.cache.clear()

    def stage_file(self, name: str) -> Path:
        return self.path / "stages" / f"{name}.json"

    def done(self, name: str) -> dict[str, Any] | None:
        """The record of a finished stage, or None."""
        p = self.stage_file(name)
        if p.is_file():
            return json.loads(p.read_text())
        return None

    def record(self, name: str, data: dict[str, Any]) -> dict[str, Any]:
        _atomic_json(self.stage_file(name), data)
        return data

    def frame(self) -> tuple[pl.DataFrame, Any]:
        if "frame" not in self.cache:
            from flashml.trace.canonical import read_table

            if not self.table.is_file():
                raise UserError(f"{self.table}: missing; run the ingest stage first")
            self.cache["frame"] = read_table(self.table)
        return self.cache["frame"]

    def features(self) -> np.ndarray:
        if "feats" not in self.cache:
            from flashml.features.online import feature_matrix

            self.cache["feats"] = feature_matrix(self.frame()[0])
        return self.cache["feats"]

    def base(self, s: JobSettings) -> SimConfig:
        """The simulator set-up every policy is judged with: the evaluation starts where the
        training window ends (the first day by default, DEFAULTS.warmup_s)."""
        return SimConfig(sample_ratio=self.frame()[1].sample_ratio, cache_gb=s.cache_gb,
                         warmup_s=s.loop.train_seconds)

    def learned_base(self, s: JobSettings) -> SimConfig:
        """`base` with the learned policies' peak schedule: the `s.peak.hours` busiest hours
        of the training window get a threshold `s.peak.bonus` lower (models/peak.py)."""
        if "learned_base" not in self.cache:
            self.cache["learned_base"] = with_peak(self.base(s), self.frame()[0], s.peak,
                                                   s.loop.train_seconds)
        return self.cache["learned_base"]

    def mlflow_run_id(self) -> str | None:
        p = self.path / "mlflow_run_id"
        return p.read_text().strip() if p.is_file() else None


@contextmanager
def open_run(run: RunDir, run_name: str, params: dict[str, Any] | None = None):  # type: ignore[no-untyped-def]
    """The run's MLflow run: created on first use (its id kept in the run folder), resumed
    by later stages and retries. Nothing is opened if a run is already active."""
    import mlflow

    from flashml.tracking import setup

    setup()
    active = mlflow.active_run()
    if active is not None:
        yield active
        return
    rid = run.mlflow_run_id()
    if rid is not None:
        with mlflow.start_run(run_id=rid) as r:
            yield r
        return
    with mlflow.start_run(run_name=run_name) as r:
        (run.path / "mlflow_run_id").write_text(r.info.run_id + "\n")
        if params:
            mlflow.log_params(params)
        yield r


def _metrics(t: Tuned, knob_name: str) -> dict[str, Any]:
    m = {k: (float(v) if isinstance(v, float) else v) for k, v in t.result.metrics.items()}
    m[knob_name] = t.knob
    m["reached_target"] = t.reached
    return m


def _finite(d: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in d.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


def resolved_master(s: JobSettings) -> str | None:
    from flashml.config import spark_master

    return s.master or spark_master()


# --- stages ------------------------------------------------------------------------------


def ingest_validate(run: RunDir, raw: Path, fmt: str | None = None,
                    sample_ratio: float | None = None, timer: Timer | None = None
                    ) -> dict[str, Any]:
    """Raw trace (or canonical .parquet) -> `accesses.parquet`, validated by Great
    Expectations (Data Docs in `gx/`), with its statistics. UserError if validation fails."""
    rec = run.done("ingest")
    if rec is not None:
        return rec
    from flashml.trace.canonical import read_table, write_table
    from flashml.trace.ingest import ingest, is_parquet
    from flashml.trace.stats import compute_stats, format_stats
    from flashml.trace.validate import validate_table

    timer = timer or Timer()
    raw = Path(raw)
    if not raw.exists():
        raise UserError(f"{raw}: no such trace")
    out: dict[str, Any] = {}
    table = run.table
    with timer.stage("ingest"):
        if is_parquet(raw) and fmt in (None, "parquet"):
            if raw.resolve() != table.resolve():
                tmp = table.with_name(f".{table.name}.tmp")
                shutil.copyfile(raw, tmp)
                tmp.replace(table)
        else:
            res = ingest(raw, table, fmt or "tectonic", sample_ratio=sample_ratio)
            out["ingest"] = {"rows": res.rows, "lines": res.lines, "seconds": res.seconds}
    run.cache.pop("frame", None)
    df, meta = read_table(table)
    if sample_ratio is not None and sample_ratio != meta.sample_ratio:
        meta = replace(meta, sample_ratio=sample_ratio)
        write_table(df, table, meta)
    run.cache["frame"] = (df, meta)
    with timer.stage("validate"):
        rep = validate_table(df, meta, context_dir=run.path / "gx")
        print(rep.describe())
        if not rep.success:
            raise UserError(f"validation failed on {table}; see {rep.docs_index}")
    out["validate"] = {"success": True, "data_docs": str(rep.docs_index)}
    with timer.stage("stats"):
        stats = compute_stats(df, meta)
        print(format_stats(stats))
    out["stats"] = stats
    return run.record("ingest", json.loads(json.dumps(out, default=_json_default)))


def episodes(run: RunDir, s: JobSettings, eviction_age_s: float,
             timer: Timer | None = None) -> dict[str, Any]:
    """Episodes, OPT and labels of the table at `eviction_age_s` with `s.engine` (Spark by
    default; master from `s.master`, else FLASHML_SPARK_MASTER, else local[*])."""
    rec = run.done("episodes")
    if rec is not None and rec.get("eviction_age_s") == eviction_age_s:
        return rec
    from flashml.episodes.core import EpisodeParams, build

    timer = timer or Timer()
    spark = None
    master = resolved_master(s)
    if s.engine == "spark":
        with timer.stage("spark session"):
            from flashml.episodes.spark_engine import spark_session

            spark = spark_session(master)
    try:
        with timer.stage(f"episodes at eviction age {eviction_age_s:.0f} s ({s.engine})"):
            built = build(run.table, run.path / "episodes", EpisodeParams(
                eviction_age_s=eviction_age_s, target_write_rate_mbps=s.target_write_rate_mbps,
                accesses_per_episode=s.loop.accesses_per_episode),
                engine=s.engine, spark=spark, master=master)
    finally:
        if spark is not None:
            spark.stop()
    summary = {k: built.summary.get(k) for k in
               ("episodes", "admitted_episodes", "cutoff_score", "dt_saved_ratio",
                "littles_law_cache_gb", "engine")}
    return run.record("episodes", json.loads(json.dumps(
        {"eviction_age_s": eviction_age_s, "dir": str(run.path / "episodes"),
         "summary": summary}, default=_json_default)))


def check_span(run: RunDir, s: JobSettings, source: Path | None = None) -> None:
    """UserError (naming `source`, else the run's table) unless the trace outlasts the
    training window by at least one measurement window (models/dataset.py)."""
    from flashml.models.dataset import check_span as check

    check(run.frame()[0]["time"].to_numpy(), s.loop.train_seconds, source or run.table)


def train(run: RunDir, s: JobSettings, timer: Timer | None = None) -> dict[str, Any]:
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
    from flashml.models.converge import run_loop

    check_span(run, s)
    timer = timer or Timer()
    df, _ = run.frame()
    feats = run.features()
    base = run.learned_base(s)
    target = s.target_write_rate_mbps
    run_id = mlflow.active_run().info.run_id
    extra: dict[str, Any] = {}
    if s.candidate_bundle is None:
        with timer.stage("convergence + training (baleen)"):
            loop = run_loop(df, run.table, feats, run.base(s), target, run.work / "baleen",
                            s.gbm, s.loop, final_base=base)
        print(loop.report())
        run.cache["loop"] = loop
        policy, tuned, ea = loop.policy, loop.tuned, loop.eviction_age_s
        when_threshold = loop.when_threshold
        convergence = {"converged": loop.converged, "reason": loop.reason,
                       "accesses_per_episode": loop.extra.get("accesses_per_episode"),
                       "iterations": [asdict(i) for i in loop.iterations]}
    else:
        from flashml.compiler.bundle import find_bundle, read_policy_json, sim_peak
        from flashml.jobs.registry import load_policy_dir
        from flashml.models.baleen import score_all
        from flashml.policies.baselines import tune_threshold

        src = find_bundle(Path(s.candidate_bundle))
        with timer.stage("candidate bundle (given)"):
            policy = load_policy_dir(src)
            params = read_policy_json(src)
            when_threshold = params["when_threshold"]
            base = run.base(s).replace(**sim_peak(params))
            tuned = tune_threshold(df, base.replace(when_threshold=when_threshold), target,
                                   score_all(policy, feats), prefetch="range",
                                   prefetch_when="score")
        ea = params["eviction_age_s"]
        convergence = {"converged": True, "reason": f"given candidate bundle {src}",
                       "iterations": []}
        extra["candidate_source"] = str(src)
    m = _metrics(tuned, "threshold")
    bundle = save_policy_models(
        run.policy, policy.boosters(), admit_threshold=m["threshold"],
        when_threshold=when_threshold, eviction_age_s=ea, target_write_rate_mbps=target,
        metrics={k: v for k, v in _finite(m).items() if k != "threshold"},
        mlflow_run_id=run_id, peak_hours=base.peak_hours, peak_bonus=base.peak_bonus)
    mlflow.log_artifacts(str(bundle), artifact_path="policy")
    sample = feats[:: max(1, len(feats) // 200)][:200]
    info = mlflow.lightgbm.log_model(policy.admission, name="admission",
                                     signature=infer_signature(
                                         sample, policy.admission.predict(sample)))
    run.cache["tuned_baleen"] = tuned
    return run.record("train", json.loads(json.dumps(
        {"eviction_age_s": ea, "metrics": m, "convergence": convergence,
         "policy_bundle": str(bundle), "model_uri": info.model_uri, "mlflow_run_id": run_id,
         **extra}, default=_json_default)))


def _learned(run: RunDir) -> Any:
    """The candidate's LearnedPolicy: in memory after `train`, else from `policy/`."""
    loop = run.cache.get("loop")
    if loop is not None:
        return loop.policy
    from flashml.jobs.registry import load_policy_dir

    return load_policy_dir(run.policy)


def policies(run: RunDir, s: JobSettings, timer: Timer | None = None) -> dict[str, Any]:
    """Every policy tuned to the same target write rate and simulated: the baselines,
    Baleen admission only, CacheLib-ML-like, Baleen (from `train`) and OPT; TCO relative to
    RejectX."""
    rec = run.done("policies")
    if rec is not None and "tuned" in run.cache:
        return rec
    from flashml.features.contract import contract
    from flashml.models.baleen import score_all
    from flashml.models.converge import run_loop
    from flashml.policies.baselines import tune_coinflip, tune_rejectx, tune_threshold
    from flashml.policies.opt import tune_opt

    timer = timer or Timer()
    df, _ = run.frame()
    feats = run.features()
    base = run.base(s)
    learned_base = run.learned_base(s)
    target = s.target_write_rate_mbps
    trained = train(run, s, timer)
    ea = trained["eviction_age_s"]
    pol: dict[str, dict[str, Any]] = {"baleen": dict(trained["metrics"])}
    tuned: dict[str, Tuned] = {}
    if "tuned_baleen" in run.cache:
        tuned["baleen"] = run.cache["tuned_baleen"]
    loop = run.cache.get("loop")
    arrays = loop.arrays if loop is not None else score_all(_learned(run), feats)
    with timer.stage("baleen_admission_only"):
        tuned["baleen_admission_only"] = tune_threshold(df, learned_base, target,
                                                        {"score": arrays["score"]})
        pol["baleen_admission_only"] = _metrics(tuned["baleen_admission_only"], "threshold")
    with timer.stage("baleen_flat_threshold"):  # what the peak schedule adds
        from flashml.compiler.bundle import read_policy_json

        wt = read_policy_json(run.policy)["when_threshold"]
        tuned["baleen_flat_threshold"] = tune_threshold(
            df, base.replace(when_threshold=wt), target, arrays, prefetch="range",
            prefetch_when="score")
        pol["baleen_flat_threshold"] = _metrics(tuned["baleen_flat_threshold"], "threshold")
    with timer.stage("cachelib_ml"):
        cl = run_loop(df, run.table, feats, base, target, run.work / "cachelib", s.gbm,
                      replace(s.loop, start_eviction_age_s=ea, max_iter=1),
                      features=list(contract().models["cachelib_like"]), with_prefetch=False,
                      final_base=learned_base)
        tuned["cachelib_ml"] = cl.tuned
        pol["cachelib_ml"] = _metrics(cl.tuned, "threshold")
    with timer.stage("baselines (rejectx, coinflip)"):
        tuned["rejectx"] = tune_rejectx(df, base, target)
        pol["rejectx"] = _metrics(tuned["rejectx"], "rejectx_factor")
        tuned["coinflip"] = tune_coinflip(df, base, target)
        pol["coinflip"] = _metrics(tuned["coinflip"], "coinflip_p")
    with timer.stage("opt"):
        tuned["opt"] = tune_opt(df, run.table, base, target, ea, run.work / "opt")
        pol["opt"] = _metrics(tuned["opt"], "episode_target_write_rate_mbps")
    pol = {name: pol[name] for name in report.POLICIES}
    report.add_tco(pol, "rejectx", DEFAULTS.target_write_rate_mbps)
    run.cache["tuned"] = tuned
    return run.record("policies", json.loads(json.dumps({"policies": pol},
                                                        default=_json_default)))


def rejectx_peak(run: RunDir, s: JobSettings) -> float:
    """RejectX's peak DT at the target (the TCO baseline): from `policies` if it ran."""
    rec = run.done("policies")
    if rec is not None:
        return float(rec["policies"]["rejectx"]["peak_dt_util"])
    from flashml.policies.baselines import tune_rejectx

    df, _ = run.frame()
    return float(tune_rejectx(df, run.base(s), s.target_write_rate_mbps)
                 .result.metrics["peak_dt_util"])


def sweep(run: RunDir, s: JobSettings, timer: Timer | None = None) -> dict[str, Any]:
    """Optuna over target write rate and starting eviction age, each trial a convergence
    loop scored by TCO; Baleen-TCO's chosen write rate. Storage: FLASHML_OPTUNA_STORAGE,
    else sqlite under FLASHML_HOME. With 0 trials, the chosen rate is the target."""
    rec = run.done("sweep")
    if rec is not None:
        return rec
    if s.sweep_trials <= 0 or s.candidate_bundle is not None:
        return run.record("sweep", {"chosen_write_rate_mbps": s.target_write_rate_mbps})
    import mlflow

    from flashml.config import optuna_storage
    from flashml.models.sweep import run_sweep

    timer = timer or Timer()
    df, _ = run.frame()
    peak0 = rejectx_peak(run, s)
    with timer.stage(f"sweep ({s.sweep_trials} Optuna trials)"):
        run_id = mlflow.active_run().info.run_id
        res = run_sweep(df, run.table, run.features(), run.base(s), s.target_write_rate_mbps,
                        peak0, DEFAULTS.target_write_rate_mbps, run.work / "sweep", s.gbm,
                        s.loop, trials=s.sweep_trials, storage=optuna_storage(),
                        study_name=f"flashml-{run_id}", final_base=run.learned_base(s))
    run.cache["sweep"] = res
    return run.record("sweep", json.loads(json.dumps(
        {"sweep": {"study": res.study_name, "storage": res.storage, "trials": res.trials},
         "chosen_write_rate_mbps": res.chosen_write_rate_mbps, "chosen_tco": res.chosen_tco},
        default=_json_default)))


def plots(run: RunDir, s: JobSettings, timer: Timer | None = None) -> list[str]:
    """The report's plots, logged to the MLflow run (needs `policies` in this process)."""
    import mlflow

    from flashml.jobs.plots import plot_dt_utilisation

    tuned: dict[str, Tuned] = run.cache["tuned"]
    pol = run.done("policies")["policies"]
    sw = run.done("sweep") or {}
    figs = run.path / "plots"
    figs.mkdir(parents=True, exist_ok=True)
    paths = [plot_dt_utilisation({n: tuned[n].result.series for n in report.POLICIES},
                                 figs / "dt_utilisation.png",
                                 title="DT utilisation per policy (peak marked)")]
    points = {n: [(m["flash_write_rate_mbps"], m["peak_dt_util"])] for n, m in pol.items()}
    if "sweep" in sw:
        trials = sw["sweep"]["trials"]
        points["baleen (sweep)"] = [(t["write_rate_mbps"], t["peak_dt_util"])
                                    for t in trials if t["state"] == "COMPLETE"]
        curve = [(t["write_rate_mbps"], t["tco"]) for t in trials if t["state"] == "COMPLETE"]
        paths.append(report.plot_tco_curve(curve, sw["chosen_write_rate_mbps"],
                                           figs / "tco_curve.png"))
    paths.append(report.plot_write_rate_vs_peak(points, figs / "write_rate_vs_peak_dt.png"))
    from flashml.models.peak import hourly_dt_profile

    learned = run.learned_base(s)
    paths.append(report.plot_peak_schedule(
        list(hourly_dt_profile(run.frame()[0], s.loop.train_seconds)), learned.peak_hours,
        learned.peak_bonus, figs / "peak_schedule.png"))
    adm = _learned(run).admission
    paths.append(report.plot_feature_importance(
        adm.feature_name(), list(adm.feature_importance("gain")),
        figs / "feature_importance.png"))
    for p in paths:
        mlflow.log_artifact(str(p), artifact_path="plots")
    return [str(p) for p in paths]


def evaluate(run: RunDir, s: JobSettings, timer: Timer | None = None) -> dict[str, Any]:
    """Register the candidate and judge it against the registry's `champion` on this
    trace's evaluation days (models/registry.py's rule: both re-tuned to the target, lower
    peak DT wins, a tie keeps the champion). Records the decision; moves nothing."""
    rec = run.done("evaluate")
    if rec is not None:
        return rec
    import mlflow

    from flashml.jobs.registry import judge

    timer = timer or Timer()
    trained = train(run, s, timer)
    with timer.stage("evaluate against the champion"):
        df, _ = run.frame()
        d = judge(trained["mlflow_run_id"], trained["model_uri"],
                  float(trained["metrics"]["peak_dt_util"]), df, run.features(), run.base(s),
                  s.target_write_rate_mbps)
    log.info("registry: %s", d.reason)
    mlflow.log_metric("candidate_passed", float(d.promoted))
    return run.record("evaluate", d.as_dict())


def compile_candidate(run: RunDir, timer: Timer | None = None) -> dict[str, Any]:
    """The candidate bundle -> `compiled/` (policy.so, header, manifest), logged to MLflow."""
    rec = run.done("compile")
    if rec is not None and run.compiled.is_dir():
        return rec
    from flashml.compiler.build import compile_policy

    timer = timer or Timer()
    if run.compiled.exists():  # left by an attempt that died before recording
        shutil.rmtree(run.compiled)
    run_id = run.done("train")["mlflow_run_id"]
    with timer.stage("compile"):
        manifest = compile_policy(run.compiled, run_id=run_id)
    return run.record("compile", {"dir": str(run.compiled), "sha256": manifest["sha256"],
                                  "size_bytes": manifest["size_bytes"],
                                  "compile_s": round(manifest["build"]["compile_s"], 2)})


def promote(run: RunDir, export_dir: Path | None = None) -> dict[str, Any]:
    """If the candidate passed `evaluate`: move alias `champion` to it and, with
    `export_dir`, export the model bundle and compiled policy to `export_dir/v<version>/`
    and point `export_dir/champion` at it (a symlink, replaced atomically). Otherwise
    nothing moves. Safe to repeat."""
    from flashml.jobs.registry import Decision
    from flashml.jobs.registry import promote as move_champion

    d = run.done("evaluate")
    if d is None:
        raise UserError(f"{run.path}: no evaluate record; run the evaluate stage first")
    out: dict[str, Any] = {"promoted": bool(d["promoted"]), "reason": d["reason"],
                           "version": d["candidate_version"], "exported": None}
    if move_champion(Decision(**d)):
        if export_dir is not None:
            out["exported"] = str(export_bundle(run, Path(export_dir),
                                                f"v{d['candidate_version']}"))
    return run.record("promote", out)


def export_bundle(run: RunDir, export_dir: Path, name: str) -> Path:
    """Copy `policy/` and `compiled/` to `export_dir/name/` (atomically) and repoint the
    `export_dir/champion` symlink at it."""
    export_dir.mkdir(parents=True, exist_ok=True)
    dest = export_dir / name
    if not dest.exists():
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=export_dir))
        umask = os.umask(0)
        os.umask(umask)
        tmp.chmod(0o777 & ~umask)  # mkdtemp's 0700 would hide the export from readers
        shutil.copytree(run.policy, tmp / "policy")
        if run.compiled.is_dir():
            shutil.copytree(run.compiled, tmp / "compiled")
        _atomic_json(tmp / "promotion.json", {"run_dir": str(run.path),
                                              "mlflow_run_id": run.mlflow_run_id()})
        tmp.rename(dest)
    link = export_dir / "champion"
    tmp_link = export_dir / f".champion.{os.getpid()}"
    if tmp_link.is_symlink() or tmp_link.exists():
        tmp_link.unlink()
    tmp_link.symlink_to(name)
    tmp_link.replace(link)
    return dest


# --- the whole job in one process (flashml pipeline run) -------------------------------------


def run_all(run: RunDir, s: JobSettings, timer: Timer) -> dict[str, Any]:
    """Every stage after `ingest_validate`, in one process, inside an active MLflow run:
    train -> episodes at the converged eviction age -> policies -> sweep -> plots ->
    evaluate -> compile -> promote. Returns the summary (without writing it)."""
    import mlflow

    with timer.stage("features"):
        run.features()
    trained = train(run, s, timer)
    ea = trained["eviction_age_s"]
    eps = episodes(run, s, ea, timer)
    pol = policies(run, s, timer)["policies"]
    peak0 = pol["rejectx"]["peak_dt_util"]
    sw = sweep(run, s, timer)
    for name, m in pol.items():
        with mlflow.start_run(run_name=name, nested=True):
            mlflow.log_param("policy", name)
            mlflow.log_metrics(_finite(m))
    summary: dict[str, Any] = {
        "policies": pol,
        "target_write_rate_mbps": s.target_write_rate_mbps,
        "cache_gb": s.cache_gb,
        "eviction_age_s": ea,
        "convergence": trained["convergence"],
        "episodes": eps["summary"],
        "baleen_vs_rejectx_peak_reduction": 1 - pol["baleen"]["peak_dt_util"] / peak0,
        "gap_to_opt": pol["baleen"]["peak_dt_util"] / pol["opt"]["peak_dt_util"] - 1,
    }
    summary |= sw
    with timer.stage("plots"):
        summary["plots"] = plots(run, s, timer)
    with timer.stage("policy bundle, registry"):
        summary["policy_bundle"] = trained["policy_bundle"]
        summary["mlflow_run_id"] = trained["mlflow_run_id"]
        if s.register:
            summary["registry"] = evaluate(run, s, timer)
        if s.compile:
            summary["compiled"] = compile_candidate(run, timer)
        if s.register:
            promote(run)
    return summary


def write_summary(out: Path, summary: dict[str, Any]) -> Path:
    return _atomic_json(out / "summary.json", summary)
