"""docker-compose.yml: parses, its services reference each other consistently, flashml's
environment variables point at the services, image versions match requirements.lock, and
flashml switches to the services through those variables only (same code paths as the
embedded defaults).

There is no Docker engine here; where the compose plugin exists, `docker compose config`
validates the file too."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import REPO

AIRFLOW = ("airflow-apiserver", "airflow-scheduler", "airflow-dag-processor")


@pytest.fixture(scope="module")
def doc() -> dict:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())


def _env(svc: dict) -> dict[str, str]:
    env = svc.get("environment", {})
    if isinstance(env, list):
        env = dict(e.split("=", 1) for e in env)
    return {k: str(v) for k, v in env.items()}


def _cmd(svc: dict) -> str:
    c = svc.get("command", "")
    return " ".join(c) if isinstance(c, list) else str(c)


def test_compose_file_is_consistent(doc: dict) -> None:
    services = doc["services"]
    assert {"postgres", "minio", "mlflow", "spark-master", "spark-worker", *AIRFLOW} \
        <= set(services)
    for name, svc in services.items():
        for dep in svc.get("depends_on", {}):
            assert dep in services, f"{name} depends on unknown service {dep}"
        for vol in svc.get("volumes", []):
            named = vol.split(":", 1)[0]
            if not named.startswith((".", "/")):
                assert named in doc["volumes"], f"{name}: undeclared volume {named}"
            else:
                assert (REPO / named).exists(), f"{name}: bind mount {named} missing"
        for cfg in svc.get("configs", []):
            assert cfg["source"] in doc["configs"], f"{name}: undeclared config {cfg}"
    assert "@postgres:5432/mlflow" in services["mlflow"]["command"]


def test_services_are_wired(doc: dict) -> None:
    s = doc["services"]
    # Postgres holds Airflow's and MLflow's metadata and Optuna's storage
    init_sql = doc["configs"]["pg-init"]["content"]
    assert "CREATE DATABASE airflow" in init_sql and "CREATE DATABASE optuna" in init_sql
    assert _env(s["postgres"])["POSTGRES_DB"] == "mlflow"
    # MLflow: Postgres store, artifacts in the MinIO bucket minio-init creates
    mlflow_cmd = _cmd(s["mlflow"])
    assert "--artifacts-destination s3://mlflow" in mlflow_cmd
    assert "local/mlflow" in _cmd(s["minio-init"]) + str(s["minio-init"].get("entrypoint"))
    assert _env(s["mlflow"])["MLFLOW_S3_ENDPOINT_URL"] == "http://minio:9000"
    # Airflow 3: one service per component, all on Postgres, all pointed at the services
    assert "api-server" in _cmd(s["airflow-apiserver"])
    assert _cmd(s["airflow-scheduler"]).endswith("scheduler")
    assert "dag-processor" in _cmd(s["airflow-dag-processor"])
    assert "db migrate" in _cmd(s["airflow-init"])
    master_port = re.search(r"--port (\d+)", _cmd(s["spark-master"])).group(1)
    assert "spark://spark-master:" + master_port in _cmd(s["spark-worker"])
    runs_mount = {v.split(":")[1] for v in s["spark-worker"]["volumes"] if v.startswith("runs:")}
    for name in AIRFLOW:
        env = _env(s[name])
        assert env["MLFLOW_TRACKING_URI"] == "http://mlflow:5000"
        assert "@postgres:5432/optuna" in env["FLASHML_OPTUNA_STORAGE"]
        assert env["FLASHML_SPARK_MASTER"] == f"spark://spark-master:{master_port}"
        assert "@postgres:5432/airflow" in env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
        assert env["AIRFLOW__CORE__DAGS_FOLDER"] == "/opt/flashml/dags"
        # Spark executors read the run folder by path: same volume, same path
        assert env["FLASHML_RETRAIN_DIR"] in runs_mount
        mounts = {v.split(":")[1] for v in s[name]["volumes"]}
        assert env["FLASHML_RETRAIN_DIR"] in mounts and env["FLASHML_EXPORT_DIR"] in mounts


def test_flashml_reads_every_variable_the_compose_file_sets(doc: dict) -> None:
    """Each FLASHML_* / MLFLOW_TRACKING_URI variable set for Airflow is read by the code."""
    sources = "".join(p.read_text() for d in ("flashml", "models", "dags")
                      for p in (REPO / d).rglob("*.py"))
    env = _env(doc["services"]["airflow-scheduler"])
    names = [k for k in env if k.startswith("FLASHML_") or k == "MLFLOW_TRACKING_URI"]
    assert len(names) >= 6
    for k in names:
        assert f'"{k}"' in sources, f"{k} is set in docker-compose.yml but never read"


def test_image_versions_match_the_lock(doc: dict) -> None:
    lock = dict(re.findall(r"^([A-Za-z0-9_.-]+)==([^\s;]+)", (REPO / "requirements.lock")
                           .read_text(), re.M))
    s = doc["services"]
    mdf = s["mlflow"]["build"]["dockerfile_inline"]
    assert f"FROM ghcr.io/mlflow/mlflow:v{lock['mlflow']}\n" in mdf
    assert f"boto3=={lock['boto3']}" in mdf and "pip install" not in _cmd(s["mlflow"])
    for name in ("spark-master", "spark-worker"):
        assert s[name]["image"] == f"apache/spark:{lock['pyspark']}"
    df = s["airflow-scheduler"]["build"]["dockerfile_inline"]
    assert f"apache/airflow:{lock['apache-airflow']}-python" in df
    # the lock constrains the image's versions; its dev tools (pytest, ruff, playwright) stay out
    assert "-c /opt/flashml/requirements.lock" in df and "-r /opt/flashml/requirements" not in df
    assert "[dev]" not in df


def test_environment_switches_the_settings(monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    """Embedded defaults without the variables, the services with them."""
    from flashml import config, tracking
    from flashml.systems.baleen.sweep import default_storage

    for k in ("FLASHML_OPTUNA_STORAGE", "FLASHML_SPARK_MASTER", "MLFLOW_TRACKING_URI"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("FLASHML_HOME", str(tmp_path / "state"))
    assert config.optuna_storage() == f"sqlite:///{(tmp_path / 'state' / 'optuna.db')}"
    assert default_storage() == config.optuna_storage()
    assert config.spark_master() is None
    assert tracking.tracking_uri() == f"sqlite:///{tmp_path / 'state' / 'mlflow.db'}"
    monkeypatch.setenv("FLASHML_OPTUNA_STORAGE", "postgresql+psycopg2://u:p@postgres/optuna")
    monkeypatch.setenv("FLASHML_SPARK_MASTER", "spark://spark-master:7077")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow:5000")
    assert default_storage() == "postgresql+psycopg2://u:p@postgres/optuna"
    assert config.spark_master() == "spark://spark-master:7077"
    assert tracking.tracking_uri() == "http://mlflow:5000"
    from flashml.settings import BaleenSettings

    assert BaleenSettings().resolved_master() == "spark://spark-master:7077"
    assert BaleenSettings(master="local[2]").resolved_master() == "local[2]"


def test_docker_compose_config_when_available() -> None:
    docker = shutil.which("docker")
    if docker is None or subprocess.run([docker, "compose", "version"],
                                        capture_output=True).returncode != 0:
        pytest.skip("no docker compose plugin on this machine (the YAML test still runs)")
    proc = subprocess.run([docker, "compose", "-f", str(REPO / "docker-compose.yml"), "config",
                           "--quiet"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_ports_bind_to_loopback_by_default(doc: dict) -> None:
    """Every published port is on 127.0.0.1 unless FLASHML_BIND says otherwise (the services
    have default development passwords); the header's reference exists."""
    ports = [p for svc in doc["services"].values() for p in svc.get("ports", [])]
    assert ports
    for p in ports:
        assert str(p).startswith("${FLASHML_BIND:-127.0.0.1}:"), p
    first = (REPO / "docker-compose.yml").read_text().splitlines()[0]
    assert '(README.md, "Scaling out")' in first
    assert "\n## Scaling out\n" in (REPO / "README.md").read_text()
