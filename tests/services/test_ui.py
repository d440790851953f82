"""`flashml ui` (flashml/commands/ui.py): each tool's server starts on 127.0.0.1 against the
embedded stores, answers with what flashml wrote there, and stops with everything it started
on Ctrl-C or SIGTERM; a store that does not exist yet is a clear error. Airflow (minutes to
start: a DB migration and three components) is left to `make demo`'s README steps."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import REPO, hang_guard_expired, seed_mlflow_store, wait_exit


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(tool: str, home: Path, *args: str,
          env_extra: dict[str, str] | None = None) -> tuple[subprocess.Popen, int]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLASHML_", "MLFLOW_"))}
    env["FLASHML_HOME"] = str(home)
    env |= env_extra or {}
    proc = subprocess.Popen([sys.executable, "-m", "flashml.cli", "ui", tool, "--port",
                             str(port), *args], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    return proc, port


def wait_ready(proc: subprocess.Popen, timeout: float = 180) -> str:
    lines = []
    started, busiest = time.monotonic(), os.getloadavg()[0]
    while not hang_guard_expired(started, timeout, busiest):
        busiest = max(busiest, os.getloadavg()[0])
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if " ready: " in line:
            return line
    proc.kill()
    raise AssertionError("".join(lines)[-3000:])


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.read().decode()


def stop_and_check(proc: subprocess.Popen, port: int, sig: int) -> None:
    proc.send_signal(sig)
    assert wait_exit(proc, 30) == 0
    with socket.socket() as s:  # the server is gone with it
        assert s.connect_ex(("127.0.0.1", port)) != 0


def test_ui_docs(tmp_path: Path) -> None:
    site = tmp_path / "ctx" / "uncommitted" / "data_docs" / "local_site"
    site.mkdir(parents=True)
    (site / "index.html").write_text("<html>flashml data docs marker</html>")
    proc, port = start("docs", tmp_path, "--context-dir", str(tmp_path / "ctx"))
    line = wait_ready(proc)
    assert f"http://127.0.0.1:{port}/" in line
    assert "marker" in get(f"http://127.0.0.1:{port}/")
    stop_and_check(proc, port, signal.SIGINT)


def test_a_killed_ui_leaves_no_server_behind(tmp_path: Path) -> None:
    """SIGKILL to `flashml ui` (no chance to stop the server it started in a session of its
    own): its watchdog stops the server's whole group, so the port is free again."""
    site = tmp_path / "ctx" / "uncommitted" / "data_docs" / "local_site"
    site.mkdir(parents=True)
    (site / "index.html").write_text("<html>marker</html>")
    proc, port = start("docs", tmp_path, "--context-dir", str(tmp_path / "ctx"))
    wait_ready(proc)
    proc.kill()
    proc.wait()
    end = time.monotonic() + 120  # a guard against a hang only: the stop is SIGTERM at once
    while time.monotonic() < end:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) != 0:
                return
        time.sleep(0.2)
    raise AssertionError(f"the server still answers on port {port} after its ui was killed")


def test_ui_optuna_lists_the_study(tmp_path: Path) -> None:
    import optuna

    tmp_path.mkdir(exist_ok=True)
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.create_study(study_name="flashml-ui-test", storage=storage)
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
    proc, port = start("optuna", tmp_path)
    wait_ready(proc)
    studies = json.loads(get(f"http://127.0.0.1:{port}/api/studies"))
    assert [s["study_name"] for s in studies["study_summaries"]] == ["flashml-ui-test"]
    stop_and_check(proc, port, signal.SIGTERM)


def test_ui_mlflow_lists_the_runs(tmp_path: Path) -> None:
    code = ("import mlflow; from flashml import tracking; tracking.setup(); "
            "r = mlflow.start_run(run_name='ui-test-run'); mlflow.log_metric('peak_dt', 0.5); "
            "mlflow.end_run()")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLASHML_", "MLFLOW_"))}
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO,
                   env=env | {"FLASHML_HOME": str(seed_mlflow_store(tmp_path))},
                   capture_output=True)
    proc, port = start("mlflow", tmp_path)
    wait_ready(proc)
    import psutil

    # the server runs without MLflow's GenAI job runner (seven huey consumers)
    parts = [" ".join(c.cmdline()) for c in psutil.Process(proc.pid).children(recursive=True)]
    assert parts and not any("huey" in c or "_job_runner" in c for c in parts), parts
    base = f"http://127.0.0.1:{port}"
    assert "<html" in get(base + "/").lower()
    req = urllib.request.Request(base + "/ajax-api/2.0/mlflow/runs/search",
                                 data=json.dumps({"experiment_ids": ["1"]}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        runs = json.loads(r.read())["runs"]
    assert [r["info"]["run_name"] for r in runs] == ["ui-test-run"]
    assert runs[0]["data"]["metrics"][0]["key"] == "peak_dt"
    stop_and_check(proc, port, signal.SIGINT)


@pytest.mark.parametrize("tool, fragment", [("mlflow", "no MLflow store yet"),
                                            ("optuna", "no Optuna studies yet"),
                                            ("docs", "no Data Docs yet")])
def test_ui_without_a_store(tmp_path: Path, tool: str, fragment: str) -> None:
    proc, _ = start(tool, tmp_path / "empty")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1 and fragment in out and "Traceback" not in out


def test_ui_default_ports_one_per_server() -> None:
    """Every server has its own default port (Airflow and optuna-dashboard both default to
    8080 upstream), and --help says which."""
    from flashml.commands.ui import PORTS, TOOLS

    assert set(PORTS) == set(TOOLS) and len(set(PORTS.values())) == len(PORTS)
    out = subprocess.run([sys.executable, "-m", "flashml.cli", "ui", "--help"], cwd=REPO,
                         capture_output=True, text=True, timeout=60).stdout
    flat = " ".join(out.split())
    assert all(f"{tool} {port}" in flat for tool, port in PORTS.items()), out


@pytest.fixture
def holder() -> tuple[subprocess.Popen, int]:
    """Another web server on a port (it answers HTTP, as a second flashml ui would)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind",
                             "127.0.0.1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    end = time.monotonic() + 60
    while True:  # wait until it listens
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        assert proc.poll() is None and time.monotonic() < end, "http.server did not start"
        time.sleep(0.1)
    yield proc, port
    proc.kill()
    proc.wait()


@pytest.mark.parametrize("tool", ["optuna", "docs"])
def test_ui_port_in_use_is_an_error_naming_the_holder(tmp_path: Path, holder: tuple,
                                                      tool: str) -> None:
    """A taken port: exit 1, the port and the holder's pid and command named, never 'ready'
    (optuna-dashboard used to print ready, the other server having answered, then die)."""
    other, port = holder
    if tool == "optuna":
        import optuna

        optuna.create_study(study_name="s", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    else:
        site = tmp_path / "gx" / "uncommitted" / "data_docs" / "local_site"
        site.mkdir(parents=True)
        (site / "index.html").write_text("<html></html>")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLASHML_", "MLFLOW_"))}
    proc = subprocess.run([sys.executable, "-m", "flashml.cli", "ui", tool, "--port", str(port)],
                          cwd=REPO, env=env | {"FLASHML_HOME": str(tmp_path)},
                          capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert " ready" not in out and "Traceback" not in out, out
    assert f"port {port} " in out and f"pid {other.pid} (" in out and "http.server" in out, out
    assert other.poll() is None  # the holder is left alone


def test_ui_answer_from_another_process_is_not_ready(holder: tuple) -> None:
    """The port taken after the check (a race): the page answers, but from a process the
    server did not start, so it is the port's error, not 'ready'."""
    from flashml.commands.ui import listeners, wait_ready
    from flashml.errors import UserError

    other, port = holder
    assert other.pid in listeners(port)
    ours = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with pytest.raises(UserError, match=f"port {port} .*pid {other.pid} "):
            wait_ready(f"http://127.0.0.1:{port}/", ours, 30, port, "optuna")
    finally:
        ours.kill()
        ours.wait()
