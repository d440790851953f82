"""flashml/jobs/ship.py, what every system's run leaves in MLflow: `headline.*` metrics and
the headline view of the runs table, the compiled bundle as a logged model (signature; the
run's final metrics, not its first step's) registered as `flashml-<system>` with the
champion rule (first becomes champion, lower/higher score on the same judgement wins, a tie
or another judgement keeps the champion). A knobs-only bundle keeps it fast; the systems'
job tests check their real bundles."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from conftest import seed_mlflow_store


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("FLASHML_HOME", str(seed_mlflow_store(tmp_path / "state")))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return tmp_path


def _bundle(tmp: Path, knob: float) -> Path:
    d = tmp / f"bundle-{knob}"
    d.mkdir(exist_ok=True)
    (d / "manifest.json").write_text(json.dumps({
        "format": "flashml-policy-bundle/1", "system": "toy", "capabilities": [],
        "knobs": {"promotion_pct": knob, "page_bytes": 4096}}))
    return d


def _job(tmp: Path, score: float, judged: str = "trace-a") -> Any:
    return SimpleNamespace(
        __name__="flashml.jobs.toy", COMMAND="toy", HELP="Toy: a test system",
        SCORE=("miss_ratio", "min"),
        headlines=lambda summary, s: {"miss_ratio": score, "miss_ratio_cut": 0.1,
                                      "not_a_number": float("nan")},
        shipped=lambda run, summary, s: _bundle(tmp, score),
        judged_on=lambda run, s: judged)


def _run(tmp: Path, score: float, judged: str = "trace-a") -> tuple[str, dict[str, Any]]:
    import mlflow

    from flashml import tracking
    from flashml.jobs.ship import finish_run

    tracking.setup()
    with mlflow.start_run() as r:
        for step, v in enumerate((0.9, 0.5, 0.3)):  # a curve: its last point is the final
            mlflow.log_metric("loss", v, step=step)
        mlflow.log_metric("flat", 7.0)
        out = finish_run(_job(tmp, score, judged), None, SimpleNamespace(trace=None), {})
    return r.info.run_id, out


def test_headlines_bundle_model_and_champion_rule(store: Path) -> None:
    import mlflow

    from flashml.jobs.ship import VIEW_TAG
    from flashml.tracking import CHAMPION

    rid, out = _run(store, 0.5)
    client = mlflow.MlflowClient()
    run = client.get_run(rid)
    assert out["headline"] == {"miss_ratio": 0.5, "miss_ratio_cut": 0.1}
    assert run.data.metrics["headline.miss_ratio"] == 0.5
    assert "headline.not_a_number" not in run.data.metrics
    # the runs table opens on the headline columns (flashml ui mlflow's share key)
    view = json.loads(client.get_experiment(run.info.experiment_id).tags[VIEW_TAG])
    assert {"metrics.`headline.miss_ratio`", "metrics.`headline.miss_ratio_cut`",
            "attributes.`Source`"} <= set(view["selectedColumns"])
    # the logged model: a signature, and the run's final metrics (loss 0.3, not step 0's 0.9)
    reg = out["registry"]
    model = mlflow.get_logged_model(reg["model_uri"].removeprefix("models:/"))
    linked = {m.key: m.value for m in model.metrics}
    assert linked["loss"] == 0.3 and linked["flat"] == 7.0
    assert linked["headline.miss_ratio"] == 0.5
    info = mlflow.models.get_model_info(reg["model_uri"])
    assert info.signature is not None and "promotion_pct" in str(info.signature.outputs)
    pred = mlflow.pyfunc.load_model(reg["model_uri"]).predict(
        __import__("pandas").DataFrame({"row": [0, 1]}))
    assert list(pred["promotion_pct"]) == [0.5, 0.5]
    # registered under the system's name, described and tagged; the first is champion
    assert reg["registered_model"] == "flashml-toy" and reg["promoted"]
    v1 = client.get_model_version("flashml-toy", reg["candidate_version"])
    assert v1.tags["flashml.job"] == "toy" and "Toy: a test system" in v1.description
    assert str(client.get_model_version_by_alias("flashml-toy", CHAMPION).version) == "1"
    # worse (higher miss ratio) and a tie keep it; better moves it; another trace keeps it
    for score, judged, promoted, champion in ((0.6, "trace-a", False, "1"),
                                              (0.5, "trace-a", False, "1"),
                                              (0.4, "trace-a", True, "4"),
                                              (0.1, "trace-b", False, "4")):
        _, out = _run(store, score, judged)
        assert out["registry"]["promoted"] is promoted, out["registry"]
        assert str(client.get_model_version_by_alias("flashml-toy", CHAMPION).version) == champion
    assert "judged on 'trace-a'" in out["registry"]["reason"]


def test_job_name_of_a_module_a_command_and_a_namespace() -> None:
    """run_job names every job's MLflow run: a job module, a job with a COMMAND, and a job
    that is neither (a namespace of stages, as tests build) all have a name."""
    from types import SimpleNamespace

    from flashml.jobs import ship
    from flashml.systems.mat import job as mat

    assert ship.job_name(mat) == "mat"
    assert ship.job_name(SimpleNamespace(COMMAND="pipeline")) == "pipeline"
    assert ship.job_name(SimpleNamespace(STAGES=())) == "SimpleNamespace"
