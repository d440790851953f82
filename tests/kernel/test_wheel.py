"""flashml as a user installs it: a wheel built from the tracked files alone, installed outside
the repository, carries every data file the package reads, and each system's job runs from it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import REPO, run_cli

pytestmark = pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(),
                                reason="needs a git checkout to know which files are tracked")


def _tracked(*paths: str) -> list[str]:
    out = subprocess.run(["git", "ls-files", "--", *paths], cwd=REPO, check=True,
                         capture_output=True, text=True).stdout
    return out.split()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built by the build backend from a copy of the tracked files (nothing the
    developer's tree happens to hold, and no build output written into the repository)."""
    src = tmp_path_factory.mktemp("src")
    for rel in _tracked("pyproject.toml", "README.md", "LICENSE", "flashml"):
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, src / rel)
    out = tmp_path_factory.mktemp("dist")
    uv = Path(sys.executable).with_name("uv")
    cmd = ([str(uv), "build", "--wheel", "-q", "-o", str(out), str(src)] if uv.exists() else
           [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(src)])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0 and "Could not connect" in proc.stderr + proc.stdout:
        pytest.skip("building a wheel needs the build backend from the package index, "
                    "which is unreachable here")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (whl,) = out.glob("flashml-*.whl")
    return whl


def test_the_wheel_carries_every_data_file_the_package_tracks(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    data = [f for f in _tracked("flashml") if not f.endswith(".py")]
    assert data, "the package tracks data files (contracts, C templates, the manifest schema)"
    missing = [f for f in data if f not in names]
    assert not missing, f"pyproject.toml's package-data leaves these out of the wheel: {missing}"


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q",
                    "--target", str(target), str(wheel)], check=True, timeout=600)
    return target


def _from_install(installed: Path, cwd: Path, *args: object) -> subprocess.CompletedProcess[str]:
    """`python -m flashml.cli ARGS` importing flashml from the installed wheel (the working
    directory is outside the repository, so the source tree is not on the path)."""
    return run_cli(*map(str, args), cwd=cwd,
                   env={"PYTHONPATH": str(installed), "FLASHML_HOME": str(cwd / "state"),
                        "MLFLOW_TRACKING_URI": ""})


def test_flashml_imports_from_the_install(installed: Path, tmp_path: Path) -> None:
    code = "import flashml, sys; print(flashml.__file__)"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, check=True, text=True,
                         capture_output=True, env={**os.environ, "PYTHONPATH": str(installed)})
    assert Path(out.stdout.strip()).is_relative_to(installed)


JOBS = {
    "baleen": ("pipeline", "run", "--accesses", "30000", "--days", "1", "--train-hours", "12",
               "--sweep-trials", "1", "--max-rounds", "2", "--no-register"),
    "mat": ("mat", "run", "--preset", "kv-like", "--accesses", "20000", "--capacity", "5%",
            "--trials", "2", "--model-sizes", "4x16", "--windows", "2", "--baselines", "lru"),
    "pannier": ("pannier", "run", "--presets", "web-like", "--requests", "5000",
                "--cache-size", "10%"),
    "mlcache": ("mlcache", "run", "--streams", "2", "--requests", "8000", "--interval", "2000",
                "--train-mixes", "4", "--test-mixes", "1", "--max-iter", "20", "--folds", "2"),
    # the twin: `auto` would run db_bench on a loop device where it can (root), for minutes
    "kml": ("kml", "run", "--mode", "twin", "--twin-requests", "20000", "--sizes", "8,64,1024",
            "--repeats", "1", "--folds", "2", "--max-windows", "40"),
}


@pytest.mark.parametrize("system", sorted(JOBS))
def test_each_systems_job_runs_from_the_install(installed: Path, tmp_path: Path,
                                                system: str) -> None:
    proc = _from_install(installed, tmp_path, *JOBS[system], "-o", tmp_path / "run")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "run" / "summary.json").is_file()
    assert not (tmp_path / "flashml").exists()
