"""`flashml ui mlflow|optuna|airflow|docs`: the users' own tools on the embedded stores.

Each starts one server on 127.0.0.1 (`--host` to change) against what flashml wrote under
$FLASHML_HOME (default .flashml): the MLflow UI on the sqlite tracking store and its
artifacts, optuna-dashboard on the Optuna storage, Airflow 3 (`airflow standalone`: api-server,
scheduler, dag-processor) with the repository's dags/ and its metadata DB in
$FLASHML_HOME/airflow, or the Great Expectations Data Docs in $FLASHML_HOME/gx, where
`flashml trace validate`, `flashml pipeline run` and the DAG's ingest task all write theirs
(one index across runs, static pages: complete offline). It waits until the page
answers, prints the URL, and on Ctrl-C (or SIGTERM) stops the server and everything it
started.

Each server has its own default port (mlflow 5000, optuna 8080, airflow 8081, docs 8000), so
they can all run at once. A port that is taken is an error naming the port and, where this
machine shows it, the process that listens on it (pid and command); nothing is started then,
and a server is reported ready only once the page answers from a process it started.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from flashml import cores
from flashml.commands.argtypes import Number
from flashml.errors import UserError

TOOLS = ("mlflow", "optuna", "airflow", "docs")
#: Each server's default port, one each (Airflow's own default, 8080, is optuna-dashboard's).
PORTS = {"mlflow": 5000, "optuna": 8080, "airflow": 8081, "docs": 8000}
#: How long a server may take to answer its first request (Airflow migrates its DB first).
READY_S = {"mlflow": 90.0, "optuna": 60.0, "airflow": 300.0, "docs": 20.0}
REPO = Path(__file__).resolve().parents[2]


def docs_dir(context: Path) -> Path:
    """Where a Great Expectations context keeps its Data Docs site."""
    return context / "uncommitted" / "data_docs" / "local_site"


def command(tool: str, host: str, port: int, context: Path | None = None
            ) -> tuple[list[str], dict[str, str], str]:
    """The server's command line, environment and URL."""
    from flashml.config import optuna_storage, state_dir

    env = dict(os.environ)
    bindir = Path(sys.executable).parent
    # the servers start their own parts by name (airflow standalone runs `airflow
    # scheduler`, ...): this interpreter's scripts first on PATH, activated or not
    env["PATH"] = os.pathsep.join([str(bindir), env.get("PATH", "")])
    url = f"http://{host}:{port}/"
    if tool == "mlflow":
        from flashml.tracking import artifact_root, tracking_uri

        uri = tracking_uri()
        if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).is_file():
            raise UserError(f"{uri.removeprefix('sqlite:///')}: no MLflow store yet; run a job "
                            "first (e.g. flashml pipeline run), or set MLFLOW_TRACKING_URI")
        cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", uri,
               "--host", host, "--port", str(port), "--workers", "1"]
        # MLflow 3's server also starts a GenAI job runner (seven huey consumers, each
        # importing MLflow: ~20 CPU s at start) unless told not to; flashml runs
        # no MLflow jobs. The user's own setting wins.
        env.setdefault("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")
        root = artifact_root(uri)
        if root:
            cmd += ["--default-artifact-root", root]
        return cmd, env, url + runs_page(uri)
    if tool == "optuna":
        storage = optuna_storage()
        if storage.startswith("sqlite:///") and \
                not Path(storage.removeprefix("sqlite:///")).is_file():
            raise UserError(f"{storage.removeprefix('sqlite:///')}: no Optuna studies yet; run "
                            "a sweep first (flashml pipeline run, flashml sweep)")
        return ([str(bindir / "optuna-dashboard"), storage, "--host", host, "--port",
                 str(port), "--quiet"], env, url)
    if tool == "airflow":
        home = (state_dir() / "airflow").resolve()
        env |= {"AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__API__HOST": host,
                "AIRFLOW__API__PORT": str(port)}
        return [str(bindir / "airflow"), "standalone"], env, url
    site = docs_dir(context or state_dir() / "gx")
    if not (site / "index.html").is_file():
        raise UserError(f"{site / 'index.html'}: no Data Docs yet; run flashml trace validate "
                        "FILE, flashml pipeline run or the retraining DAG first (with the "
                        "same FLASHML_HOME), or give --context-dir")
    return ([sys.executable, "-m", "http.server", str(port), "--bind", host, "--directory",
             str(site)], env, url)


def runs_page(uri: str) -> str:
    """The URL fragment of flashml's runs table: MLflow 3's UI opens in its GenAI mode,
    which hides training runs, unless the URL asks for the model-training workflow; and
    with the headline view (flashml/jobs/ship.py: the `headline.*` metric columns, newest
    run first) once a run has logged one."""
    from mlflow.tracking import MlflowClient

    from flashml.jobs.ship import VIEW_KEY, VIEW_TAG
    from flashml.tracking import EXPERIMENT

    exp = MlflowClient(uri).get_experiment_by_name(EXPERIMENT)
    where = f"#/experiments/{exp.experiment_id}/runs" if exp else "#/experiments"
    view = f"&viewStateShareKey={VIEW_KEY}" if exp is not None and VIEW_TAG in exp.tags else ""
    return where + "?workflowType=machine_learning" + view


def listeners(port: int) -> set[int]:
    """The pids of the processes with a listening TCP socket (IPv4 or IPv6, any address) on
    `port`, from /proc/net/tcp{,6} and /proc/*/fd; empty where none is visible (no /proc, or
    the holder belongs to another user we may not inspect)."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()
            # sl local_address rem_address st ... inode; st 0A is LISTEN
            if len(f) > 9 and f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{f[9]}]")
    pids: set[int] = set()
    if not inodes:
        return pids
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for fd in os.scandir(proc / "fd"):
                if os.readlink(fd.path) in inodes:
                    pids.add(int(proc.name))
                    break
        except OSError:
            continue
    return pids


def describe_pid(pid: int) -> str:
    """`pid 123 (python -m http.server 8000)`, or `pid 123` when its command is hidden."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        cmd = " ".join(a.decode(errors="replace") for a in argv if a)
    except OSError:
        cmd = ""
    if len(cmd) > 120:
        cmd = cmd[:117] + "..."
    return f"pid {pid} ({cmd})" if cmd else f"pid {pid}"


def port_taken(tool: str, host: str, port: int, holders: set[int] | None = None) -> UserError:
    """The error for a taken port: the port, and its holder where it can be seen."""
    holders = listeners(port) if holders is None else holders
    who = (" by " + ", ".join(describe_pid(p) for p in sorted(holders))) if holders else ""
    return UserError(f"port {port} on {host} is already in use{who}; stop it, or start "
                     f"{tool} on another port with --port")


def check_port(tool: str, host: str, port: int) -> None:
    """Refuse a port something already listens on (before starting anything): a bind test
    on `host` (what the server will do), and the listeners /proc shows on any address."""
    holders = listeners(port)
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers do
        try:
            s.bind((host, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise port_taken(tool, host, port, holders) from None
            if e.errno != errno.EADDRNOTAVAIL:  # a --host not on this machine: its own error
                raise UserError(f"--host {host} --port {port}: cannot listen there: "
                                f"{e.strerror}") from None
    if holders:
        raise port_taken(tool, host, port, holders)


def family(proc: subprocess.Popen) -> set[int]:
    """The server's pid and its descendants' (airflow standalone's api-server is one)."""
    import psutil

    try:
        root = psutil.Process(proc.pid)
        return {proc.pid, *(c.pid for c in root.children(recursive=True))}
    except psutil.NoSuchProcess:
        return {proc.pid}


def wait_ready(url: str, proc: subprocess.Popen, timeout: float,
               port: int | None = None, tool: str = "the server") -> bool:
    """Poll `url` until it answers (any HTTP status) or the server exits or time runs out.
    With `port`, an answer counts only while the server (or a process it started) listens on
    that port; an answer from another process raises `port_taken`'s error."""
    # A server still starting on a busy machine is given time in proportion to the load (on
    # 2 cores under a load of 20, MLflow's start takes ten times its quiet 10 s).
    started, busiest = time.monotonic(), os.getloadavg()[0]
    while time.monotonic() - started < timeout * cores.load_factor(busiest):
        busiest = max(busiest, os.getloadavg()[0])
        if proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(url, timeout=2):
                pass
        except urllib.error.HTTPError:
            pass  # it answered (e.g. 401 before login)
        except (urllib.error.URLError, OSError):
            time.sleep(0.3)
            continue
        if port is None:
            return True
        held = listeners(port)
        if not held or held & family(proc):
            return True  # ours (or /proc shows no holder: trust the answer)
        time.sleep(0.5)  # someone else answered: ours may be dying of it; say who holds it
        if proc.poll() is not None or not listeners(port) & family(proc):
            raise port_taken(tool, urllib.parse.urlsplit(url).hostname or "", port,
                             held - family(proc))
    return False


def stop(proc: subprocess.Popen, grace: float = 15.0) -> None:
    """SIGTERM to the server and everything it started (its process group and every
    descendant: `airflow standalone`'s components outlive it otherwise), SIGKILL to whatever
    is left after `grace` seconds."""
    import psutil

    try:
        family = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        family = []
    for p in family:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.terminate()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    _, alive = psutil.wait_procs(family, timeout=grace)
    for p in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


# Run beside the server in a session of its own: when `flashml ui` dies without stopping the
# server (SIGKILL, an OOM kill), the server's process group gets SIGTERM, then SIGKILL. The
# server has its own session so that Ctrl-C reaches `flashml ui` alone, which then stops it in
# order; without this, a killed `flashml ui` leaves the server and its workers running.
WATCHDOG = r"""
import os, select, signal, sys, time
parent, group = int(sys.argv[1]), int(sys.argv[2])
try:
    fd = os.pidfd_open(parent)
    select.select([fd], [], [])
except ProcessLookupError:
    pass
for sig, wait in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 0.0)):
    try:
        os.killpg(group, sig)
    except ProcessLookupError:
        break
    end = time.monotonic() + wait
    while time.monotonic() < end:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            sys.exit(0)
        time.sleep(0.2)
"""


def watchdog(proc: subprocess.Popen) -> subprocess.Popen:
    """A process that stops the server's group once this one is gone (see WATCHDOG)."""
    return subprocess.Popen([sys.executable, "-c", WATCHDOG, str(os.getpid()), str(proc.pid)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def cmd_ui(args: argparse.Namespace) -> int:
    port = args.port or PORTS[args.tool]
    cmd, env, url = command(args.tool, args.host, port, args.context_dir)
    check_port(args.tool, args.host, port)
    print(f"starting {args.tool} on {url} ...", flush=True)
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    guard = watchdog(proc)

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, on_term)
    old_hup = signal.signal(signal.SIGHUP, on_term)  # the terminal closed
    # Ctrl-C stops the server even where SIGINT came ignored (a background job of a shell)
    old_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        try:
            ready = wait_ready(url, proc, READY_S[args.tool], port, args.tool)
        except UserError:
            stop(proc)
            raise
        if not ready:
            code = proc.poll()
            stop(proc)
            held = listeners(port) - family(proc)
            if held:
                raise port_taken(args.tool, args.host, port, held)
            raise UserError(f"{args.tool} did not answer on {url} "
                            + (f"(it exited with {code})" if code is not None
                               else f"within {READY_S[args.tool]:.0f} s of a quiet machine "
                                    "(stretched by the load average)"))
        extra = ("; login: admin, password in "
                 f"{env['AIRFLOW_HOME']}/simple_auth_manager_passwords.json.generated"
                 if args.tool == "airflow" else "")
        print(f"{args.tool} ready: {url}{extra}  (Ctrl-C stops it)", flush=True)
        proc.wait()
        return 0 if proc.returncode in (0, -signal.SIGTERM) else 1
    except KeyboardInterrupt:
        # a second Ctrl-C must not leave the server behind half-stopped
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print(f"\nstopping {args.tool} ...", flush=True)
        stop(proc)
        return 0
    finally:
        guard.kill()  # the server is stopped (every path above stops it)
        guard.wait()
        signal.signal(signal.SIGTERM, old)
        signal.signal(signal.SIGHUP, old_hup)
        signal.signal(signal.SIGINT, old_int)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ui", help="open MLflow, optuna-dashboard, Airflow or the Data Docs on "
                       "the embedded stores", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="examples:\n  flashml ui mlflow            # http://127.0.0.1:5000/\n"
                       "  flashml ui optuna --port 8090\n  flashml ui docs\n"
                       "  FLASHML_HOME=/data/flashml flashml ui airflow")
    p.add_argument("tool", choices=TOOLS, help="which server")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=Number(int, 1, 65535), default=None,
                   help="port (default: " + ", ".join(f"{t} {n}" for t, n in PORTS.items())
                   + "; one each, so they can all run at once; a port in use is an error "
                   "naming its holder)")
    p.add_argument("--context-dir", type=Path, default=None,
                   help="docs: the Great Expectations context (default $FLASHML_HOME/gx, "
                   "else .flashml/gx: where trace validate, the pipeline and the DAG write)")
    p.set_defaults(func=cmd_ui)
