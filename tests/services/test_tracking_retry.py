"""A job's MLflow logging outlives a tracking server that is briefly down (restarted): the
client (MLflow's, through flashml.tracking.setup, as every job and sweep trial uses it)
retries a refused connection with backoff, a bounded number of times, and logs each retry
(urllib3's WARNING `Retrying (Retry(...)) after connection broken by ...`).

A real `mlflow server` runs on a port of its own; the client's address is another port,
bound but not listening (connections refused: the server is down). Once the client has
logged its first retry, that address starts forwarding to the server (it is up again), and
the run's logging completes there."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

#: what urllib3 logs when MLflow's client retries a request (scripts/cluster_faults.py
#: waits for it in the job's log)
RETRY_MARK = "Retrying (Retry("


class _Seen(logging.Handler):
    def __init__(self, port: int) -> None:
        super().__init__(logging.WARNING)
        self.port = port
        self.records: list[str] = []
        self.event = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if RETRY_MARK in msg and f"port={self.port}" in msg:
            self.records.append(msg)
            self.event.set()


def _forward(listener: socket.socket, target: int, stop: threading.Event) -> None:
    """Accept on `listener` and pump each connection to 127.0.0.1:`target` both ways."""

    def pump(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for x in (a, b):
                try:
                    x.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    listener.settimeout(0.2)
    while not stop.is_set():
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        except OSError:
            return
        up = socket.create_connection(("127.0.0.1", target))
        for a, b in ((conn, up), (up, conn)):
            threading.Thread(target=pump, args=(a, b), daemon=True).start()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_logging_retries_while_the_server_is_down_then_completes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server_port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "mlflow"), "server", "--host", "127.0.0.1",
         "--port", str(server_port), "--workers", "1", "--backend-store-uri",
         f"sqlite:///{tmp_path / 'mlflow.db'}", "--artifacts-destination",
         str(tmp_path / "artifacts"), "--serve-artifacts"],
        stdout=subprocess.DEVNULL, stderr=open(tmp_path / "server.log", "w"),
        env=env | {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}, start_new_session=True)
    address = socket.socket()  # the client's address: bound, not listening (refused)
    address.bind(("127.0.0.1", 0))
    port = address.getsockname()[1]
    uri = f"http://127.0.0.1:{port}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    # MLflow's default count of retries (7, about 4 minutes in all at its backoff factor 2)
    # with a shorter backoff: the retry after the server is back comes in 2 s
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
    seen = _Seen(port)
    logger = logging.getLogger("urllib3.connectionpool")
    logger.addHandler(seen)
    done: dict[str, object] = {}
    stop = threading.Event()

    def job() -> None:
        try:
            import mlflow

            from flashml import tracking

            tracking.setup("retry-test")
            with mlflow.start_run() as run:
                mlflow.log_metric("tco", 0.5)
                f = tmp_path / "summary.json"
                f.write_text("{}\n")
                mlflow.log_artifact(str(f))
            done["run_id"] = run.info.run_id
        except BaseException as e:  # reported by the test
            done["error"] = e

    try:
        deadline = time.monotonic() + 300
        while True:  # the server healthy on its own port
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{server_port}/health",
                                            timeout=5):
                    break
            except OSError:
                assert server.poll() is None, (tmp_path / "server.log").read_text()[-2000:]
                assert time.monotonic() < deadline, "mlflow server did not come up"
                time.sleep(0.2)
        t = threading.Thread(target=job, daemon=True)
        t.start()
        assert seen.event.wait(timeout=300), "no retry logged against the refused address"
        assert t.is_alive() and "run_id" not in done
        address.listen()  # the server is back at the client's address
        threading.Thread(target=_forward, args=(address, server_port, stop),
                         daemon=True).start()
        t.join(timeout=300)
        assert not t.is_alive(), "the logging did not finish once the server was back"
        assert "error" not in done, (done.get("error"),
                                     (tmp_path / "server.log").read_text()[-2000:])
        import mlflow

        client = mlflow.MlflowClient(f"http://127.0.0.1:{server_port}")
        run = client.get_run(str(done["run_id"]))
        assert run.info.status == "FINISHED" and run.data.metrics == {"tco": 0.5}
        assert [a.path for a in client.list_artifacts(run.info.run_id)] == ["summary.json"]
        assert seen.records  # each retry was logged, naming the address
    finally:
        stop.set()
        address.close()
        logger.removeHandler(seen)
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
