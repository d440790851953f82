"""Shared test helpers: paths to ../shared and the fixtures, and running the real CLI."""

from __future__ import annotations

import atexit
import fcntl
import functools
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from flashml.cores import load_factor

# One BLAS thread per process: pytest runs two workers on two cores, and OpenBLAS's own
# threads spin waiting for a core on a busy machine (training KML's networks ran several
# times slower with two). Children started by the tests inherit it.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# The tests' Spark driver JVMs (local mode: the executors too) compile with C1 only and
# collect with the serial GC, as scripts/cluster.sh does for its daemons: a test's Spark job
# lives seconds, and C2's compiler threads cost more CPU than they save (the episodes tests'
# JVM: 77 CPU s with C2, 39 without). SPARK_SUBMIT_OPTS reaches the driver's command line
# without the notice JAVA_TOOL_OPTIONS prints on every JVM's stderr.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
DATA = Path(__file__).resolve().parent / "data"
CLOUDPHYSICS = SHARED / "traces" / "cloudphysics-sample.csv"


def access_table(rows: list[tuple[float, int, int, int, int]], namespace: int = 0,
                 user: int = 0):  # type: ignore[no-untyped-def]
    """rows of (time, key, offset, size, op) -> a canonical-typed polars DataFrame."""
    import polars as pl

    t, k, o, s, op = zip(*rows, strict=True)
    n = len(rows)
    return pl.DataFrame({
        "time": pl.Series(t, dtype=pl.Float64), "key": pl.Series(k, dtype=pl.UInt64),
        "offset": pl.Series(o, dtype=pl.UInt64), "size": pl.Series(s, dtype=pl.UInt64),
        "op": pl.Series(op, dtype=pl.UInt8),
        "namespace": pl.Series([namespace] * n, dtype=pl.UInt32),
        "user": pl.Series([user] * n, dtype=pl.UInt32),
        "src_line": pl.Series(range(1, n + 1), dtype=pl.UInt64),
    })


def hang_guard_expired(started: float, timeout: float, busiest: float) -> bool:
    """True once `timeout` seconds of a quiet machine have passed: a guard against a hang,
    not a speed check, so it stretches with the busiest load average seen while waiting
    (on 2 cores under a load of 40 a job takes 20 times its quiet time)."""
    return time.monotonic() - started > timeout * load_factor(busiest)


def wait_exit(proc: subprocess.Popen, timeout: float) -> int:
    """`proc`'s exit status, waiting `timeout` seconds of a quiet machine (hang_guard_expired:
    stretched by the busiest load seen); raises subprocess.TimeoutExpired past that."""
    started, busiest = time.monotonic(), os.getloadavg()[0]
    while True:
        try:
            return proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            busiest = max(busiest, os.getloadavg()[0])
            if hang_guard_expired(started, timeout, busiest):
                raise


@functools.cache
def _migrated_mlflow_store() -> Path:
    """An empty MLflow sqlite store as MLflow's first touch leaves it (every migration run,
    only MLflow's Default experiment), made once per test process: migrating a new store
    costs several CPU seconds per process that touches it."""
    folder = Path(tempfile.mkdtemp(prefix="flashml-test-mlflow-"))
    atexit.register(shutil.rmtree, folder, True)
    db = folder / "mlflow.db"
    code = ("import sys\n"
            "from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore\n"
            "SqlAlchemyStore(f'sqlite:///{sys.argv[1]}', './mlruns').engine.dispose()\n")
    subprocess.run([sys.executable, "-c", code, str(db)], check=True, cwd=REPO, timeout=600,
                   capture_output=True)
    return db


WARM_PYTHON = Path(__file__).with_name("warm_python.py")
_WARM: dict[str, object] = {}


def python_argv(*args: str) -> list[str]:
    """The command line of `python ARGS` for subprocess.run/Popen: a warm one (tests/
    warm_python.py: forked from a server that has imported MLflow, Polars, ... once per test
    worker; it behaves as a fresh interpreter to everything but signals to its process group)
    unless FLASHML_WARM_PYTHON=0 or the server could not start."""
    # -m MODULE, -c CODE or SCRIPT (or none: a prefix for them); an interpreter option
    # (-u, -X ...) gets a cold one
    cold = bool(args) and args[0].startswith("-") and args[0] not in ("-m", "-c")
    sock = None if cold else _warm_server()
    if sock is None:
        return [sys.executable, *args]
    return [sys.executable, "-S", str(WARM_PYTHON), sock, *args]


def _warm_server() -> str | None:
    if os.environ.get("FLASHML_WARM_PYTHON", "1") == "0":
        return None
    if "sock" in _WARM:
        return _WARM["sock"]  # type: ignore[return-value]
    folder = tempfile.mkdtemp(prefix="flashml-warm-")
    sock, log = os.path.join(folder, "sock"), os.path.join(folder, "server.log")
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, str(WARM_PYTHON), "--serve", sock],
                                stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=err)

    def stop() -> None:
        proc.kill()
        proc.wait()  # its children's CPU then counts in this process's (FLASHML_TEST_CPU)
        shutil.rmtree(folder, ignore_errors=True)

    atexit.register(stop)
    started, busiest = time.monotonic(), os.getloadavg()[0]
    while not os.path.exists(sock):
        busiest = max(busiest, os.getloadavg()[0])
        if proc.poll() is not None or hang_guard_expired(started, 120, busiest):
            print(f"warm_python: no server ({proc.poll()}), cold interpreters from here: "
                  f"{Path(log).read_text()[-2000:]}", file=sys.stderr)
            _WARM["sock"] = None
            return None
        time.sleep(0.05)
    _WARM["sock"] = sock
    return sock


def seed_mlflow_store(home: Path) -> Path:
    """HOME/mlflow.db (the embedded store under FLASHML_HOME=HOME) made a copy of an already
    migrated empty store unless it exists: the same tables and rows MLflow's own first touch
    writes, so a test whose subject is not the store's creation skips the migrations (first
    touch itself: tests/services/test_tracking.py). Returns HOME."""
    home.mkdir(parents=True, exist_ok=True)
    db = home / "mlflow.db"
    if not db.exists():
        part = home / ".mlflow.db.seeding"
        shutil.copyfile(_migrated_mlflow_store(), part)
        part.replace(db)
    return home


def run_cli(*args: str, check: bool = False, cwd: Path | None = None,
            timeout: float = 600, env: dict[str, str] | None = None, seed_store: bool = True
            ) -> subprocess.CompletedProcess[str]:
    """Run `flashml ARGS...` as a user would, in a warm interpreter (python_argv; `env` adds
    variables); killed as hung after `timeout` seconds scaled by the machine's load
    (hang_guard_expired).
    An isolated embedded store (`env` with FLASHML_HOME and an empty MLFLOW_TRACKING_URI) is
    seeded migrated (seed_mlflow_store) unless `seed_store` is False."""
    if seed_store and env and env.get("FLASHML_HOME") and env.get("MLFLOW_TRACKING_URI") == "":
        seed_mlflow_store(Path(env["FLASHML_HOME"]))
    cmd = python_argv("-m", "flashml.cli", *map(str, args))
    started, busiest = time.monotonic(), os.getloadavg()[0]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          cwd=cwd or REPO, env={**os.environ, **(env or {})}) as child:
        while True:
            try:
                out, err = child.communicate(timeout=5)
                break
            except subprocess.TimeoutExpired:
                busiest = max(busiest, os.getloadavg()[0])
                if hang_guard_expired(started, timeout, busiest):
                    child.kill()
                    out, err = child.communicate()
                    raise subprocess.TimeoutExpired(cmd, timeout, out, err) from None
    proc = subprocess.CompletedProcess(cmd, child.returncode, out, err)
    if check and proc.returncode != 0:
        raise AssertionError(f"flashml {' '.join(map(str, args))} failed ({proc.returncode}):\n"
                             f"{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture(scope="session")
def cloudphysics_path() -> Path:
    assert CLOUDPHYSICS.exists(), f"{CLOUDPHYSICS} missing: ../shared must sit beside the repo"
    return CLOUDPHYSICS


def made_once(factory: pytest.TempPathFactory, name: str,
              make: Callable[[Path], None]) -> Path:
    """A folder NAME that `make(folder)` fills once per test session, shared by the xdist
    workers (test files running on other workers wait for it, under a lock, instead of
    making it again); for outputs several test files only read. A `make` that fails leaves
    no folder (the next caller tries again)."""
    root = factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the session's folder, above each worker's own
    done = root / f"{name}.done"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        folder = root / name
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            try:
                make(folder)
            except BaseException:
                shutil.rmtree(folder, ignore_errors=True)
                raise
            done.touch()
    return folder


def cloudphysics_pipeline_run(factory: pytest.TempPathFactory) -> Path:
    """`flashml pipeline run` on the real CloudPhysics sample (2 hours: trained on the first
    half hour, no sweep, nothing registered or compiled), made once per session
    (made_once): FOLDER/run is its run folder, FOLDER/state its FLASHML_HOME."""
    def make(folder: Path) -> None:
        run_cli("pipeline", "run", "--trace", CLOUDPHYSICS, "--format", "cloudphysics",
                "--engine", "polars", "--sweep-trials", "0", "--no-register", "--no-compile",
                "--train-hours", "0.5", "--target-write-rate", "0.1", "--out", folder / "run",
                check=True, env={"FLASHML_HOME": str(folder / "state"),
                                 "MLFLOW_TRACKING_URI": ""}, timeout=900)
    return made_once(factory, "cloudphysics-pipeline", make)


# Where the suite's CPU goes: with FLASHML_TEST_CPU=FILE each test phase appends a JSON line
# {"test", "phase", "wall_s", "cpu_s", "children_cpu_s"} (children: the processes the test
# started and waited for: CLI runs, Spark's JVM, compilers; a warm interpreter's child is the
# warm server's, so only its relay counts here). scripts/test_cpu.py sums it.
_CPU_LOG = os.environ.get("FLASHML_TEST_CPU")


if _CPU_LOG:
    import json as _json
    import resource as _resource

    def _cpu() -> tuple[float, float]:
        me = _resource.getrusage(_resource.RUSAGE_SELF)
        kids = _resource.getrusage(_resource.RUSAGE_CHILDREN)
        return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime

    def _measured(phase: str):  # type: ignore[no-untyped-def]
        @pytest.hookimpl(wrapper=True)
        def hook(item: pytest.Item, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
            wall, (me, kids) = time.monotonic(), _cpu()
            try:
                return (yield)
            finally:
                me2, kids2 = _cpu()
                with open(_CPU_LOG, "a") as f:
                    f.write(_json.dumps({"test": item.nodeid, "phase": phase,
                                         "wall_s": round(time.monotonic() - wall, 3),
                                         "cpu_s": round(me2 - me, 3),
                                         "children_cpu_s": round(kids2 - kids, 3)}) + "\n")
        return hook

    pytest_runtest_setup = _measured("setup")
    pytest_runtest_call = _measured("call")
    pytest_runtest_teardown = _measured("teardown")
