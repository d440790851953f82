"""What every system's run leaves in MLflow when it ends, in one place: the headline metrics
(`headline.<name>`, a handful of columns the runs table opens with), the run's `flashml.job`
tag and description, and the compiled bundle (`.so`, manifest, header: the folder the job
ships) as a logged model with a signature, registered under the system's name
(`flashml-<system>`) with the champion alias rule.

A job module opts in with:

- `headlines(summary, s) -> {name: value}`: its headline numbers (one name per headline,
  the same name for the same idea across systems, e.g. `peak_dt_cut`);
- `SCORE = (name, "min" | "max")`: the headline the registry judges a candidate by;
- `shipped(run, summary, s) -> Path | None`: the compiled bundle folder it ships (None: none
  this run, e.g. no tuning trials);
- optionally `judged_on(run, s) -> str`: what a score is comparable across (default: the
  trace's name).

**The champion rule** (as Baleen's `flashml/systems/baleen/registry.py`): every run registers its
bundle as a new version of `flashml-<system>`; alias `champion` moves to it only when it
beats the champion on the same judgement (`judged_on`: the same trace, scored the same way:
lower `SCORE` wins for "min", higher for "max"); a tie keeps the champion; the first version
becomes champion. A champion judged on another trace is kept (the candidate's version is
registered, not promoted): the decision and its reason go to the run's summary.

**The logged model's metrics** are the run's final ones: MLflow links a logged model to
the run's metrics *at the step it is logged with* (step 0 by default: the first point of
every stepped curve), so the model is logged at the run's last step and the latest value of
every other metric is linked to it too (`link_final_metrics`; Baleen's policy model too).
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

from flashml.tracking import CHAMPION

log = logging.getLogger("flashml.jobs")

HEADLINE = "headline."
#: The experiment's shared view of the runs table (`flashml ui mlflow` opens it): the
#: default columns plus every `headline.*` metric a run has logged.
VIEW_KEY = "flashml-headlines"
VIEW_TAG = "mlflow.sharedViewState." + VIEW_KEY
_BASE_COLUMNS = ["attributes.`Source`", "attributes.`Models`", "attributes.`Dataset`"]
#: The name of the bundle model in its run (`runs:/<run>/policy_bundle`), as Baleen's.
MODEL_NAME = "policy_bundle"


def job_name(job: Any) -> str:
    """The job's CLI name (`pipeline`, `mat`, ...): its COMMAND, else its module's last name
    (a job that is neither, e.g. a namespace in a test, goes by its type's name)."""
    command = getattr(job, "COMMAND", None)
    if command is not None:
        return str(command)
    return str(getattr(job, "__name__", type(job).__name__)).rsplit(".", 1)[-1]


def registered_name(job: Any) -> str:
    """The registered model of a system: `flashml-<system>` (`flashml-mat`, ...)."""
    return f"flashml-{job_name(job)}"


def default_tags(job: Any) -> dict[str, str]:
    """A run's tags when the job gives none of its own: the job's name, to filter by."""
    return {"flashml.job": job_name(job)}


def default_description(job: Any, s: Any) -> str:
    """A run's description (the run page's Description) when the job gives none."""
    trace = getattr(s, "trace", None)
    return (f"{getattr(job, 'HELP', job_name(job))} (`flashml {job_name(job)} run`).\n\n"
            f"- trace: `{trace or 'generated (the job default)'}`\n"
            f"- headline metrics: `{HEADLINE}*` (the runs table's columns); the rest per "
            "policy and setting\n- the compiled bundle: the run's logged model "
            f"`{MODEL_NAME}`, registered as `{registered_name(job)}`")


def log_headlines(values: dict[str, Any]) -> dict[str, float]:
    """Log `headline.<name>` for every finite value on the active run; add the names to the
    experiment's headline view. Returns what was logged."""
    import mlflow

    out = {f"{HEADLINE}{k}": float(v) for k, v in values.items()
           if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
    if out:
        mlflow.log_metrics(out)
        add_to_view(list(out))
    return out


def add_to_view(metrics: list[str]) -> None:
    """Add metric columns to the experiment's headline view (tag VIEW_TAG, the state MLflow's
    UI loads for `?viewStateShareKey=flashml-headlines`)."""
    import mlflow

    client = mlflow.MlflowClient()
    exp_id = mlflow.active_run().info.experiment_id
    tags = client.get_experiment(exp_id).tags
    try:
        state = json.loads(tags.get(VIEW_TAG, "{}"))
    except json.JSONDecodeError:
        state = {}
    cols = [c for c in state.get("selectedColumns", _BASE_COLUMNS) if isinstance(c, str)]
    cols += [f"metrics.`{m}`" for m in sorted(metrics) if f"metrics.`{m}`" not in cols]
    heads = [c for c in cols if c.startswith("metrics.")]
    new = {"selectedColumns": cols, "orderByKey": "attributes.start_time", "orderByAsc": False,
           # the headlines first, wide enough for their names
           "columnOrder": heads + [c for c in cols if c not in heads],
           "columnWidths": {c: 7 * len(c) - 40 for c in heads}}
    if new != state:
        client.set_experiment_tag(exp_id, VIEW_TAG, json.dumps(new))


def final_metrics(run_id: str) -> dict[str, Any]:
    """The latest point (highest step, then newest) of every metric of the run, as MLflow
    `Metric`s not linked to a model."""
    from mlflow import MlflowClient

    client = MlflowClient()
    out = {}
    for key in client.get_run(run_id).data.metrics:
        own = [m for m in client.get_metric_history(run_id, key) if m.model_id is None]
        if own:
            out[key] = max(own, key=lambda m: (m.step, m.timestamp))
    return out


def final_step(run_id: str, latest: dict[str, Any] | None = None) -> int:
    """The run's last step (0 when it has no stepped metric): log a model at it."""
    latest = final_metrics(run_id) if latest is None else latest
    return max((m.step for m in latest.values()), default=0)


def link_final_metrics(run_id: str, model_id: str, step: int,
                       latest: dict[str, Any] | None = None) -> int:
    """Link the latest value of every metric of the run (`latest`: final_metrics, when
    known) to the logged model (the ones at `step`, the step the model was logged at, MLflow
    linked already). Returns how many."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric

    latest = final_metrics(run_id) if latest is None else latest
    rows = [Metric(m.key, m.value, m.timestamp, m.step, run_id=run_id, model_id=model_id)
            for m in latest.values() if m.step != step]
    client = MlflowClient()
    for i in range(0, len(rows), 1000):  # MLflow's batch limit
        client.log_batch(run_id, metrics=rows[i:i + 1000])
    return len(rows)


def log_bundle_model(bundle: Path, system: str, run_id: str) -> Any:
    """The compiled bundle folder (policy .so, manifest.json, header; or a knobs-only
    manifest) as the pyfunc model MODEL_NAME of the active run (flashml/jobs/
    bundle_model.py), with a signature and an input example, logged at the run's last step
    with the run's final metrics linked; returns the ModelInfo."""
    import mlflow
    from mlflow.models import infer_signature

    from flashml.jobs.bundle_model import BundleModel, example_input

    artifacts = {"bundle": str(bundle)}
    probe = BundleModel()  # its output names the signature's columns
    ctx = mlflow.pyfunc.PythonModelContext(artifacts=artifacts, model_config={})
    probe.load_context(ctx)
    example = example_input(probe)
    out = probe.predict(ctx, example)
    latest = final_metrics(run_id)
    step = final_step(run_id, latest)
    info = mlflow.pyfunc.log_model(
        name=MODEL_NAME, python_model=str(Path(__file__).with_name("bundle_model_code.py")),
        artifacts=artifacts, signature=infer_signature(example, out),
        input_example=example.head(5), step=step,
        # given, not inferred: inference loads the model in a subprocess (seconds)
        pip_requirements=["flashml", f"mlflow=={mlflow.__version__}", "numpy", "pandas"],
        metadata={"system": system, "capabilities": probe.capabilities,
                  "sha256": probe.manifest.get("sha256")})
    link_final_metrics(run_id, info.model_id, step, latest)
    return info


def register(model_uri: str, name: str, *, run_id: str, score: tuple[str, str, float],
             judged_on: str, tags: dict[str, str], description: str) -> dict[str, Any]:
    """Register `model_uri` as a new version of `name` and move `champion` to it if it wins
    (the module docstring's rule). Returns the decision."""
    import mlflow
    from mlflow.exceptions import MlflowException

    key, sense, value = score
    client = mlflow.MlflowClient()
    version = mlflow.register_model(model_uri, name, tags={
        "run_id": run_id, "judged_on": judged_on, "score_metric": key,
        "score": repr(value), **tags})
    client.update_model_version(name, version.version, description=description)
    try:
        champ = client.get_model_version_by_alias(name, CHAMPION)
    except MlflowException:
        champ = None
    out: dict[str, Any] = {"registered_model": name, "candidate_version": str(version.version),
                           "score_metric": key, "candidate_score": value,
                           "champion_version": None, "champion_score": None}
    if champ is None:
        promoted, reason = True, "no champion yet: the first candidate becomes champion"
    elif champ.tags.get("judged_on") != judged_on or champ.tags.get("score_metric") != key:
        promoted = False
        reason = (f"champion v{champ.version} was judged on {champ.tags.get('judged_on')!r}, "
                  f"this candidate on {judged_on!r}: champion kept")
        out["champion_version"] = str(champ.version)
    else:
        theirs = float(champ.tags["score"])
        better = value < theirs if sense == "min" else value > theirs
        promoted = better
        out |= {"champion_version": str(champ.version), "champion_score": theirs}
        op = ("<" if sense == "min" else ">") if better else ("<=" if sense == "max" else ">=")
        reason = (f"candidate {key} {value:.6g} {op} champion {theirs:.6g}"
                  + ("" if better else ": champion kept"))
    if promoted:
        client.set_registered_model_alias(name, CHAMPION, version.version)
    return out | {"promoted": promoted, "reason": reason}


def finish_run(job: Any, run: Any, s: Any, summary: dict[str, Any]) -> dict[str, Any]:
    """At the end of a job's MLflow run (flashml/jobs/run.py `run_job`): its headline
    metrics and, for a job that ships a compiled bundle, the logged model and the registry
    decision. Returns what to add to the summary (`headline`, `registry`)."""
    import mlflow

    out: dict[str, Any] = {}
    if hasattr(job, "headlines"):
        out["headline"] = {k.removeprefix(HEADLINE): v for k, v in
                           log_headlines(job.headlines(summary, s)).items()}
    bundle = job.shipped(run, summary, s) if hasattr(job, "shipped") else None
    if bundle is None or not Path(bundle).is_dir():
        return out
    run_id = mlflow.active_run().info.run_id
    system = job_name(job)
    info = log_bundle_model(Path(bundle), system, run_id)
    key, sense = job.SCORE
    value = out.get("headline", {}).get(key)
    if value is None:
        log.warning("%s: no headline %s this run: the bundle is logged, not registered",
                    system, key)
        return out
    judged = job.judged_on(run, s) if hasattr(job, "judged_on") else \
        str(getattr(s, "trace", None) or "the job's generated default")
    trace = Path(judged).name if "/" in judged else judged
    out["registry"] = register(
        info.model_uri, registered_name(job), run_id=run_id,
        score=(key, sense, float(value)), judged_on=judged,
        tags={"flashml.job": system, "trace": trace},
        description=f"{getattr(job, 'HELP', system)}: the compiled bundle of `flashml "
        f"{system} run` (MLflow run {run_id}), judged on {judged}: {HEADLINE}{key} = "
        f"{float(value):.6g} ({'lower' if sense == 'min' else 'higher'} is better)")
    out["registry"]["model_uri"] = info.model_uri
    log.info("registry %s: %s", registered_name(job), out["registry"]["reason"])
    return out
