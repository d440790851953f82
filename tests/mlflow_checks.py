"""What a system's run must leave in MLflow (flashml/jobs/ship.py), checked on the state
folder of a job test's run: shared by the systems' job tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def check_system_in_mlflow(state: Path, system: str, summary: dict[str, Any]) -> None:
    """The run: a `flashml.job` tag, a description, `headline.*` metrics (those of the
    summary); its compiled bundle: a logged model with a signature whose metrics are the
    run's final ones, registered as `flashml-<system>`, described and tagged, champion (the
    first version of a fresh store)."""
    from urllib.parse import urlparse

    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{state / 'mlflow.db'}")
    run = client.get_run(summary["mlflow_run_id"])
    assert run.data.tags["flashml.job"] == system, run.data.tags
    assert run.data.tags.get("mlflow.note.content"), "the run has no description"
    heads = {k.removeprefix("headline."): v for k, v in run.data.metrics.items()
             if k.startswith("headline.")}
    assert heads and heads == summary["headline"], (heads, summary.get("headline"))
    reg = summary["registry"]
    assert reg["registered_model"] == f"flashml-{system}" and reg["promoted"], reg
    mv = client.get_model_version(reg["registered_model"], reg["candidate_version"])
    assert mv.tags["flashml.job"] == system and system in mv.description.lower(), mv
    assert str(client.get_model_version_by_alias(reg["registered_model"], "champion").version) \
        == reg["candidate_version"]
    model = client.get_logged_model(reg["model_uri"].removeprefix("models:/"))
    assert model.source_run_id == run.info.run_id
    mlmodel = (Path(urlparse(model.artifact_location).path) / "MLmodel").read_text()
    assert "signature:" in mlmodel and "inputs:" in mlmodel, mlmodel
    latest: dict[str, Any] = {}
    for m in model.metrics or []:
        if m.key not in latest or (m.step, m.timestamp) > (latest[m.key].step,
                                                           latest[m.key].timestamp):
            latest[m.key] = m
    # the model's page shows the run's final metrics (not the first step's of each curve)
    assert {k: m.value for k, m in latest.items()} == dict(run.data.metrics)
