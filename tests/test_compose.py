"""docker-compose.yml: parses, and its services reference each other consistently.

There is no Docker engine here; where the compose plugin exists, `docker compose config`
validates the file too."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from conftest import REPO


def test_compose_file_is_consistent() -> None:
    doc = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    services = doc["services"]
    assert {"postgres", "mlflow"} <= set(services)
    for name, svc in services.items():
        for dep in svc.get("depends_on", {}):
            assert dep in services, f"{name} depends on unknown service {dep}"
        for vol in svc.get("volumes", []):
            named = vol.split(":", 1)[0]
            if not named.startswith((".", "/")):
                assert named in doc["volumes"], f"{name}: undeclared volume {named}"
    assert "@postgres:5432/" in services["mlflow"]["command"]


def test_docker_compose_config_when_available() -> None:
    docker = shutil.which("docker")
    if docker is None or subprocess.run([docker, "compose", "version"],
                                        capture_output=True).returncode != 0:
        pytest.skip("no docker compose plugin on this machine (the YAML test still runs)")
    proc = subprocess.run([docker, "compose", "-f", str(REPO / "docker-compose.yml"), "config",
                           "--quiet"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
