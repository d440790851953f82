"""The pages users open, in a real browser (Debian's Chromium driven by Playwright; `.ci/run`
installs Chromium, and without it these tests skip saying so): after a real `flashml
pipeline run`, `flashml ui mlflow` opens on the experiment's runs table, which lists the
pipeline's run, and the run's page shows its headline metrics; `flashml ui airflow` serves
the retraining DAG, whose Trigger form accepts its defaults, and one click on its Trigger
makes exactly one run; `flashml ui docs` serves Data Docs that list the validations and
open their pages with the network off."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from test_ui import start, stop_and_check, wait_ready

from conftest import cloudphysics_pipeline_run, hang_guard_expired, run_cli, wait_exit

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium (apt-get install "
                                "chromium; .ci/run does): the browser tests need a real browser")


def shows(page, text: str, timeout: float = 120.0) -> str:
    """Wait until the page's visible text contains `text` (React renders after load);
    returns that text."""
    import time

    end = time.monotonic() + timeout
    body = ""
    while time.monotonic() < end:
        body = page.inner_text("body")
        if text in body:
            return body
        page.wait_for_timeout(500)
    raise AssertionError(f"{text!r} not on {page.url}: {body[:1500]}")


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory, cloudphysics_path: Path) -> tuple:
    """A real `flashml pipeline run` (on the CloudPhysics sample; shared with test_cli)."""
    home = cloudphysics_pipeline_run(tmp_path_factory)
    return home, json.loads((home / "run" / "summary.json").read_text())


def test_mlflow_ui_lists_the_pipeline_run_with_its_metrics(pipeline: tuple) -> None:
    from mlflow.tracking import MlflowClient
    from playwright.sync_api import sync_playwright

    home, summary = pipeline
    client = MlflowClient(f"sqlite:///{home / 'state' / 'mlflow.db'}")
    run = client.get_run(summary["mlflow_run_id"])
    assert run.data.metrics, "the pipeline's parent run has no metrics"
    shown = sorted(run.data.metrics)[:5]
    proc, port = start("mlflow", home / "state")
    url = wait_ready(proc).split(" ready: ", 1)[1].split()[0]
    base = f"http://127.0.0.1:{port}"
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            # the experiment opens on its runs table (not MLflow 3's GenAI overview)
            # the URL `flashml ui` prints: flashml's runs table in the model-training view
            assert f"/#/experiments/{run.info.experiment_id}/runs?workflowType=machine_" \
                   "learning" in url
            page.goto(url, timeout=120_000)
            shows(page, run.info.run_name)
            # the runs table opens on the headline columns (jobs/ship.py's shared view)
            assert "viewStateShareKey=flashml-headlines" in url
            table = shows(page, "headline.peak_dt_cut")
            page.goto(f"{base}/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}",
                      timeout=120_000)
            text = shows(page, shown[0])
            browser.close()
    finally:
        stop_and_check(proc, port, __import__("signal").SIGINT)
    assert all(m in text for m in shown), (shown, text[:2000])
    assert run.info.run_name in text and run.info.run_id in text
    assert "headline.gap_to_opt" in table, table[:2000]


def test_airflow_trigger_form_accepts_its_defaults(tmp_path: Path) -> None:
    """Airflow 3 (airflow standalone through `flashml ui airflow`, its own metadata DB under
    FLASHML_HOME): the DAG page of flashml_retrain, its Trigger dialog with every parameter
    at its default, and the dialog's Trigger button enabled (no required field left
    empty). Everyone is admin here (simple auth manager), so no login page stands between."""
    import signal

    from playwright.sync_api import sync_playwright

    proc, port = start("airflow", tmp_path,
                       env_extra={"AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True"})
    line = wait_ready(proc, timeout=400)
    assert "simple_auth_manager_passwords.json.generated" in line
    try:
        get = airflow_api(port)
        dag_parsed(get, timeout=300)  # the dag-processor parses dags/ after start
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            page.goto(f"http://127.0.0.1:{port}/dags/flashml_retrain", timeout=120_000)
            # the page renders its keys ("nav.home") until its translations arrive, and the
            # button is named "Trigger" only then: wait for it, never reload on a timer (a
            # reload restarts that rendering, and on a busy machine it never ends)
            button = page.get_by_role("button", name="Trigger").first
            button.wait_for(state="visible", timeout=180_000)
            button.click()
            dialog = page.get_by_role("dialog")
            dialog.wait_for(timeout=60_000)
            text = shows(page, "Run Parameters")
            trigger = dialog.get_by_role("button", name="Trigger", exact=True)
            enabled = trigger.count() == 1 and trigger.is_enabled()
            rate = dialog.locator("#element_target_write_rate").input_value()
            if enabled:  # one click, as a user would: exactly one run, started at once
                trigger.click()
                runs, dag = one_trigger_one_run(get)
            browser.close()
    finally:
        proc.send_signal(signal.SIGINT)
        assert wait_exit(proc, 60) == 0
    import psutil

    left = [p.info["cmdline"] for p in psutil.process_iter(["cmdline"])
            if str(tmp_path) in " ".join(p.info["cmdline"] or [])
            or f"port:{port}" in " ".join(p.info["cmdline"] or [])]
    assert not left, f"airflow processes left behind: {left}"
    for param in ("trace", "target_write_rate", "sweep_trials", "engine"):
        assert param in text, param
    assert rate == "35.599 MiB/s"  # as the user would say it, not 37.328257023999996
    assert enabled, text[-1500:]
    # the form unpaused the DAG, and no scheduled run came with it (a start date in the past
    # with catchup=False made one at once, and the triggered run queued behind it)
    assert not dag["is_paused"] and dag["description"], dag
    assert [(r["run_type"], r["state"]) for r in runs] == [("manual", "running")], runs
    assert dag["next_dagrun_run_after"] > runs[0]["run_after"], (dag, runs)


def airflow_api(port: int) -> Callable[[str], dict]:
    """GET on Airflow's REST API (everyone is admin: the token needs no password)."""
    import urllib.request

    base = f"http://127.0.0.1:{port}"
    with urllib.request.urlopen(f"{base}/auth/token", timeout=30) as r:
        token = json.loads(r.read())["access_token"]

    def get(path: str) -> dict:
        req = urllib.request.Request(base + path, headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    return get


def dag_parsed(get: Callable[[str], dict], timeout: float) -> None:
    """Wait until Airflow knows the DAG (the dag-processor has parsed dags/ once); `timeout`
    is a hang guard in quiet-machine seconds (hang_guard_expired)."""
    import os
    import time
    import urllib.error

    started, busiest = time.monotonic(), os.getloadavg()[0]
    while True:
        try:
            get("/api/v2/dags/flashml_retrain")
            return
        except urllib.error.HTTPError as e:
            busiest = max(busiest, os.getloadavg()[0])
            if e.code != 404 or hang_guard_expired(started, timeout, busiest):
                raise
        time.sleep(1)


def one_trigger_one_run(get: Callable[[str], dict], timeout: float = 180
                        ) -> tuple[list, dict]:
    """Airflow's REST API after a Trigger click: wait until the triggered run is running
    (the scheduler has been through its loop since the unpause), then the DAG's runs and the
    DAG (its pause state and next scheduled run)."""
    import time

    end = time.monotonic() + timeout
    runs: list = []
    while time.monotonic() < end:
        runs = get("/api/v2/dags/flashml_retrain/dagRuns")["dag_runs"]
        if any(r["run_type"] == "manual" and r["state"] != "queued" for r in runs):
            break
        time.sleep(1)
    time.sleep(3)  # a scheduled run made with the unpause would be there by now
    runs = get("/api/v2/dags/flashml_retrain/dagRuns")["dag_runs"]
    return runs, get("/api/v2/dags/flashml_retrain")


class _Offline:
    """A page of a `flashml ui` server with the network off: its base URL, what it asked of
    other hosts (refused), and its script errors."""

    def __init__(self, page, base: str) -> None:
        self.page, self.base = page, base
        self.outside: list[str] = []
        self.errors: list[str] = []


@contextmanager
def _offline(tool: str, home: Path) -> Iterator[_Offline]:
    """`flashml ui TOOL` on `home`, browsed in Chromium where only that server answers (every
    request to another host is recorded and refused); the server is stopped (and must stop
    cleanly) after the block."""
    import signal

    from playwright.sync_api import sync_playwright

    proc, port = start(tool, home)
    wait_ready(proc)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page()
            off = _Offline(page, f"http://127.0.0.1:{port}/")

            def route(r) -> None:  # the network is off: only this server answers
                if r.request.url.startswith(off.base):
                    r.continue_()
                else:
                    off.outside.append(r.request.url)
                    r.abort()

            page.route("**/*", route)
            page.on("pageerror", lambda e: off.errors.append(str(e)))
            yield off
            browser.close()
    finally:
        stop_and_check(proc, port, signal.SIGINT)


def test_data_docs_offline(tmp_path: Path) -> None:
    """`flashml trace validate` then `flashml ui docs` (the default context under
    FLASHML_HOME), browsed with every request to another host refused: the index lists the
    validation (Great Expectations' own page filled it from a CDN), its row opens the
    validation's page, and no page asks for anything from another host."""
    from conftest import DATA

    home = tmp_path / "state"
    run_cli("trace", "validate", DATA / "msr_fixture.csv", "--format", "msr", check=True,
            env={"FLASHML_HOME": str(home)})
    with _offline("docs", home) as off:
        off.page.goto(off.base, timeout=60_000)
        index = off.page.inner_text("body")
        off.page.get_by_role("link", name="msr_fixture.csv").first.click()
        off.page.wait_for_load_state()
        result = off.page.inner_text("body")
    assert "msr_fixture.csv" in index and "Success" in index, index[:1500]
    assert "Expectation Validation Result" in result and "Succeeded" in result, result[:1500]
    assert off.outside == [] and off.errors == [], (off.outside, off.errors)


def test_optuna_dashboard_shows_a_sweep_study_offline(tmp_path: Path) -> None:
    """`flashml ui optuna` on the state's Optuna storage, browsed with every request to
    another host refused: the study list names the sweep's study, its page shows its trials
    (their values), and no page asks for anything from another host."""
    import optuna

    home = tmp_path / "state"
    home.mkdir()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name="flashml-sweep-browser",
                                storage=f"sqlite:///{home / 'optuna.db'}")
    for rate in (10.0, 20.0, 30.0):
        study.enqueue_trial({"write_rate_mbps": rate})
    study.optimize(lambda t: (t.suggest_float("write_rate_mbps", 1.0, 100.0) - 20.0) ** 2,
                   n_trials=3)
    with _offline("optuna", home) as off:
        off.page.goto(off.base, timeout=60_000)
        studies = shows(off.page, "flashml-sweep-browser")
        off.page.goto(f"{off.base}dashboard/studies/{study._study_id}/trials", timeout=60_000)
        trials = shows(off.page, "write_rate_mbps")
    assert "flashml-sweep-browser" in studies
    assert "write_rate_mbps" in trials and "Trial 2" in trials, trials[:1500]
    assert off.outside == [] and off.errors == [], (off.outside, off.errors)
