"""Running cases: the in-process Worker (and its process, `worker_main`), the Runner, and
the run modes of cases that are more than one command (two runs at once, kill -9, races)."""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

from flashml.cores import load_factor

from .cases import ERROR_LINE, FLASHRT, MEMORY_LIMIT, PY, REPO, Case, Result
from .fixtures import _test_folders_on_path
from .judge import _snapshot, judge
from .prepare import prepare


# --- running ----------------------------------------------------------------------------------
def _limits() -> None:
    os.setsid()
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


class Worker:
    """A long-lived `python -m adversarial --worker` (tests/ on its env's PYTHONPATH, as the
    Runner's env has it) running flashml's cli.main in process, one case at a time; killed and
    replaced after a hang or a crash."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None

    def _start(self) -> subprocess.Popen[bytes]:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen([PY, "-m", "adversarial", "--worker"],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL, cwd=REPO, env=self.env,
                                         preexec_fn=_limits)
        return self.proc

    def run(self, argv: list[str], cwd: Path, env: dict[str, str], timeout: float,
            err_path: Path, entry: str = "") -> tuple[int | None, bool]:
        """(exit status, hung): the status is negative when the worker died of a signal.
        `entry` (module:function) runs instead of flashml's cli.main."""
        proc = self._start()
        assert proc.stdin and proc.stdout
        req: dict[str, Any] = {"argv": argv, "cwd": str(cwd), "env": env, "timeout": timeout,
                               "err": str(err_path), **({"entry": entry} if entry else {})}
        proc.stdin.write((json.dumps(req) + "\n").encode())
        proc.stdin.flush()
        ready, _, _ = select.select([proc.stdout], [], [], timeout + 30)
        if not ready:
            self.kill()
            return None, True
        line = proc.stdout.readline()
        if not line:
            rc = proc.wait()
            self.proc = None
            return (rc if rc < 0 else 128 + rc if rc > 0 else -1), False
        ans = json.loads(line)
        if ans.get("fresh"):
            # a case stopped or crashed in the middle (of an import, of MLflow's store...):
            # the next one gets a fresh interpreter, not its half-made state
            self.kill()
        return ans["rc"], bool(ans["hang"])

    def kill(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.proc = None



class Hang(BaseException):
    """A case ran past its timeout (raised by SIGALRM in the worker)."""


def _entry(spec: str) -> Callable[[list[str]], int | None]:
    """`module:function` run instead of flashml's cli.main (the harness's own tests)."""
    import importlib

    mod, fn = spec.split(":")
    return getattr(importlib.import_module(mod), fn)


def worker_main() -> None:
    """The in-process runner: one JSON request per line on stdin, one answer per line."""
    proto = os.fdopen(os.dup(1), "w")
    requests = os.fdopen(os.dup(0), "r")
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)  # a command reading stdin reads nothing, never the requests
    sys.path.insert(0, str(REPO))
    from flashml.cli import main

    home = os.getcwd()

    # Where stderr stood when the alarm first stopped the case (None: it did not): what the
    # command prints after it is the interruption's noise (a cleanup meeting the half-done
    # operation the exception landed in), not the command's answer, and is cut. Whatever the
    # exception turns into on its way out (swallowed by a garbage collector's callback,
    # wrapped by a class body's __set_name__), a case the alarm fired in ran past its time;
    # the alarm fires again each second until the case has stopped.
    stopped_at: list[int | None] = [None]

    def on_alarm(signum: int, frame: Any) -> None:  # noqa: ARG001
        signal.setitimer(signal.ITIMER_REAL, 1.0)
        if stopped_at[0] is None:
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            stopped_at[0] = os.lseek(2, 0, os.SEEK_CUR)
            with open(req["err"] + ".stacks", "w") as f:
                faulthandler.dump_traceback(file=f, all_threads=True)
        raise Hang()

    signal.signal(signal.SIGALRM, on_alarm)
    for line in requests:
        req = json.loads(line)
        saved_env = dict(os.environ)
        os.environ.update(req["env"])
        os.chdir(req["cwd"])
        err = os.open(req["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        out = os.open(os.devnull, os.O_WRONLY)
        sys.stdout.flush()
        sys.stderr.flush()
        old1, old2 = os.dup(1), os.dup(2)
        os.dup2(out, 1)
        os.dup2(err, 2)
        rc, tb = 0, False
        stopped_at[0] = None
        signal.setitimer(signal.ITIMER_REAL, req["timeout"])
        try:
            try:
                rc = int((_entry(req["entry"]) if "entry" in req else main)(req["argv"]) or 0)
            except SystemExit as e:
                rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except BaseException:  # noqa: BLE001 - what an uncaught exception prints
                if stopped_at[0] is None:
                    traceback.print_exc()
                    rc, tb = 1, True
        except Hang:  # fired again while the first one was being handled
            pass
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        hang = stopped_at[0] is not None
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os.dup2(old1, 1)
        os.dup2(old2, 2)
        if stopped_at[0] is not None:
            os.ftruncate(err, stopped_at[0])
        for fd in (old1, old2, out, err):
            os.close(fd)
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(home)
        proto.write(json.dumps({"rc": rc, "hang": hang, "fresh": hang or tb}) + "\n")
        proto.flush()


def _cmd(case: Case, argv: list[str]) -> list[str]:
    if case.tool == "flashrt":
        return [str(FLASHRT), *argv]
    return [PY, "-m", "flashml.cli", *argv]


def _subprocess(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float,
                err_path: Path) -> tuple[int | None, bool]:
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=err,
                                stdin=subprocess.DEVNULL, preexec_fn=_limits)
        try:
            return proc.wait(timeout=timeout), False
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return None, True


class Runner:
    """Runs cases `parallel` at a time, each in a fresh folder under `scratch`."""

    def __init__(self, fixtures: dict[str, Path], scratch: Path, parallel: int = 2) -> None:
        self.fx = fixtures
        self.scratch = scratch
        self.parallel = parallel
        home = scratch / "flashml-home"
        home.mkdir(parents=True, exist_ok=True)
        self.env = {**os.environ, "FLASHML_HOME": str(home), "PYTHONUNBUFFERED": "1",
                    "MLFLOW_TRACKING_URI": "", "FLASHML_TEST": "1"}
        self.env.pop("MLFLOW_TRACKING_URI")
        self.env["PYTHONPATH"] = os.pathsep.join(
            [str(REPO), str(REPO / "tests"), self.env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        # MLflow's store made once: cases running at once would race in its migrations
        subprocess.run([PY, "-c", "from flashml.tracking import setup; setup()"], cwd=REPO,
                       env=self.env, capture_output=True, timeout=600)
        self._workers: list[Worker] = []
        self._local = threading.local()
        self._lock = threading.Lock()

    def _worker(self) -> Worker:
        w = getattr(self._local, "worker", None)
        if w is None:
            w = Worker(self.env)
            self._local.worker = w
            with self._lock:
                self._workers.append(w)
        return w

    def close(self) -> None:
        for w in self._workers:
            w.kill()

    def run_case(self, case: Case) -> Result:
        w = Path(tempfile.mkdtemp(prefix="case-", dir=self.scratch))
        marker = w / "EVIL_MARKER"
        started = time.perf_counter()
        try:
            p = prepare(case, self.fx, w)
            argv = [a.format(**p) if "{" in a else a for a in case.argv]
            before = _snapshot(w)
            env = {"FLASHML_EVIL_MARKER": str(marker)}
            err = self.scratch / f"{w.name}.err"
            t0 = time.perf_counter()
            if case.runner:
                res = RUNNERS[case.runner.split(":")[0]](self, case, p, w, argv, env)
                return res
            # a timeout guards against a hang and a budget is how long a job may run before it
            # is stopped as having taken its value (a value it must refuse is refused before
            # any work): neither is a speed check, both stretch with the machine's load (on 2
            # cores at a load of 10 an import takes 5 times as long)
            limit = (case.budget or case.timeout) * load_factor()
            if case.inproc and case.tool == "flashml":
                rc, hang = self._worker().run(argv, w, env, limit, err)
            else:
                rc, hang = _subprocess(_cmd(case, argv), w, {**self.env, **env}, limit, err)
            secs = time.perf_counter() - t0
            stderr = err.read_text(errors="replace") if err.exists() else ""
            err.unlink(missing_ok=True)
            res = judge(case, p, w, before, rc, stderr, secs, marker, argv, hang)
            stacks = Path(f"{err}.stacks")
            if stacks.exists():
                if res.cls == "hang":
                    res.detail += "; where it was: " + stacks.read_text(errors="replace")[-1500:]
                stacks.unlink()
            return res
        except Exception as e:  # noqa: BLE001 - a harness error is reported, not raised
            return Result(case.id, case.family, "harness", " ".join(case.argv), None,
                          time.perf_counter() - started, f"{type(e).__name__}: {e}"[:300],
                          detail=traceback.format_exc()[-1500:])
        finally:
            _rmtree(w)

    def run(self, cases: list[Case], progress: Callable[[int, Result], None] | None = None
            ) -> list[Result]:
        results: list[Result] = []
        with ThreadPoolExecutor(self.parallel) as ex:
            for i, r in enumerate(ex.map(self.run_case, cases)):
                results.append(r)
                if progress:
                    progress(i, r)
        self.close()
        return results


def _rmtree(w: Path) -> None:
    for root, dirs, _ in os.walk(w):  # read-only folders a case made
        for d in dirs:
            with contextlib.suppress(OSError):
                os.chmod(Path(root) / d, 0o755)
    shutil.rmtree(w, ignore_errors=True)


def _locked_by(pgid: int) -> bool:
    """Whether a process of group `pgid` holds a file lock (/proc/locks)."""
    try:
        text = Path("/proc/locks").read_text()
    except OSError:
        return False
    for line in text.splitlines():
        parts = line.split()
        if len(parts) > 4 and parts[4].isdigit():
            with contextlib.suppress(OSError):
                if os.getpgid(int(parts[4])) == pgid:
                    return True
    return False


def _run_twice(r: Runner, case: Case, p: dict[str, str], w: Path, argv: list[str],
               env: dict[str, str]) -> Result:
    """Two runs on one output that certainly overlap: the first is started, and once it holds
    a file lock (or its output exists) it is stopped (SIGSTOP) while the second runs from
    start to end, then resumed. The second must be refused with one clear error (the first
    holds the output); the first must then finish. Both exiting 0 (nothing kept them apart),
    flashrt's exit 3 (bytes served wrong), a traceback or a hang are failures."""
    before = _snapshot(w)
    errs = [w.parent / f"{w.name}.err{i}" for i in range(2)]
    out = Path(p["w"]) / ("run" if case.tool == "flashml" else
                          "flash.img" if "--flash" in case.argv else "cache.img")
    t0 = time.perf_counter()
    deadline = time.monotonic() + case.timeout * load_factor()
    rcs: list[int | None] = [None, None]
    hang = False

    def start(i: int) -> subprocess.Popen[bytes]:
        with open(errs[i], "wb") as f:
            return subprocess.Popen(_cmd(case, argv), cwd=w, env={**r.env, **env},
                                    stdout=subprocess.DEVNULL, stderr=f,
                                    stdin=subprocess.DEVNULL, preexec_fn=_limits)

    def wait(proc: subprocess.Popen[bytes]) -> int | None:
        nonlocal hang
        try:
            return proc.wait(timeout=max(deadline - time.monotonic(), 1))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            hang = True
            return None

    first = start(0)
    seen_out = None
    while first.poll() is None and time.monotonic() < deadline:
        if _locked_by(first.pid):
            break
        if out.exists():
            seen_out = seen_out or time.monotonic()
            if time.monotonic() - seen_out > 0.5:  # no lock is coming
                break
        time.sleep(0.002)
    stopped = first.poll() is None
    if stopped:
        os.killpg(first.pid, signal.SIGSTOP)
    second = start(1)
    rcs[1] = wait(second)
    if stopped:
        os.killpg(first.pid, signal.SIGCONT)
    rcs[0] = wait(first)
    secs = time.perf_counter() - t0
    stderrs = [e.read_text(errors="replace") for e in errs]
    for e in errs:
        e.unlink(missing_ok=True)
    case_out = Case(**{**asdict(case), "must_refuse": False})
    inputs = {Path(p[f]).name for f in case.files}
    res = judge(case_out, p, w, {k: v for k, v in before.items() if k in inputs},
                rcs[1], stderrs[1] + stderrs[0], secs, w / "EVIL_MARKER", argv, hang)
    res.argv = "2x " + res.argv
    res.rc = rcs[1]
    if res.cls in ("ok", "error", "partial", "unclear"):
        clear = len(ERROR_LINE.findall(stderrs[1])) == 1
        if 3 in rcs and case.tool == "flashrt":
            res.cls, res.detail = "wrong", f"exits {rcs}: bytes served wrong"
        elif not stopped:
            res.cls, res.detail = ("ok" if rcs == [0, 0] else "unclear",
                                   f"exits {rcs}: the first ended before the second started")
        elif rcs == [0, 0]:
            res.cls, res.detail = "accepted", "both runs on one output exited 0"
        elif rcs[0] == 0 and rcs[1] in (1, 2) and clear:
            res.cls, res.detail = "error", "the second was refused, the first finished"
        else:
            res.cls, res.detail = "unclear", f"exits {rcs} (first, second)"
        res.first_stderr = next((ln for s in (stderrs[1], stderrs[0]) for ln in s.splitlines()
                                 if ERROR_LINE.match(ln)), res.first_stderr)
    return res


def _run_kill(r: Runner, case: Case, p: dict[str, str], w: Path, argv: list[str],
              env: dict[str, str]) -> Result:
    """kill -9 of `flashml trace ingest` at a random point (the case's fraction of a full
    run): the output is absent or complete, temporary files are hidden `.tmp` ones that the
    next run removes; the rerun completes (tests/trust/test_fuzz_kill.py's helpers)."""
    import polars as pl

    _test_folders_on_path()
    from test_fuzz_kill import _kill, _popen, _temp_files  # type: ignore[import-not-found]

    frac = float(case.runner.split(":")[1])
    out = Path(p["w"]) / "out.parquet"
    t0 = time.perf_counter()
    full = getattr(r, "_ingest_s", None)
    if full is None:
        proc = _popen(*argv[:-3], "-o", w / "timing.parquet", "--chunk-mb", "1",
                      env={"FLASHML_HOME": r.env["FLASHML_HOME"]})
        proc.wait(timeout=case.timeout * load_factor())
        Path(proc.log_path).unlink(missing_ok=True)
        full = r._ingest_s = time.perf_counter() - t0  # type: ignore[attr-defined]
        (w / "timing.parquet").unlink(missing_ok=True)
    proc = _popen(*argv, env={"FLASHML_HOME": r.env["FLASHML_HOME"]})
    time.sleep(frac * full)
    rc = _kill(proc)
    cls, detail = "ok", f"killed at {frac:.2f} of {full:.1f} s (exit {rc})"
    if out.exists():
        try:
            pl.read_parquet(out)
        except Exception as e:  # noqa: BLE001
            cls, detail = "wrong", f"torn output: {e}"[:300]
    left = [n for n in _temp_files(out.parent, out.name) if not n.endswith(".tmp")]
    if cls == "ok" and left:
        cls, detail = "partial", f"non-.tmp leftovers: {left}"
    err = w.parent / f"{w.name}.rerun"
    rrc, hang = _subprocess(_cmd(case, argv), w, {**r.env, **env},
                            case.timeout * load_factor(), err)
    text = err.read_text(errors="replace") if err.exists() else ""
    err.unlink(missing_ok=True)
    if cls == "ok" and (hang or rrc != 0):
        cls, detail = ("hang" if hang else "traceback" if "Traceback" in text else "wrong",
                       f"the rerun failed (exit {rrc}): {text[-200:]}")
    if cls == "ok" and _temp_files(out.parent, out.name):
        cls, detail = "partial", f"the rerun left {_temp_files(out.parent, out.name)}"
    return Result(case.id, case.family, cls, " ".join(argv), rc,
                  round(time.perf_counter() - t0, 3), "", None, detail)


def _run_race(r: Runner, case: Case, p: dict[str, str], w: Path, argv: list[str],
              env: dict[str, str]) -> Result:
    """The command run `n` times while a thread swaps B/policy.so between the good and the
    evil .so (atomic renames of fresh copies); every load that ran the evil constructor is
    counted (the marker file is removed after each)."""
    n = int(case.runner.split(":")[1])
    so, good, evil = w / "B" / "policy.so", w / "good.so", w / "evil.so"
    marker = w / "EVIL_MARKER"
    stop = threading.Event()

    def flip() -> None:
        i = 0
        while not stop.is_set():
            tmp = w / "B" / f".flip{i % 2}"
            shutil.copyfile(evil if i % 2 == 0 else good, tmp)
            os.replace(tmp, so)
            i += 1
            time.sleep(0.0005)

    t = threading.Thread(target=flip, daemon=True)
    t0 = time.perf_counter()
    runs = {"evil": 0, "served_by_evil": 0, "ok": 0, "refused": 0, "bad": 0}
    bad: list[str] = []
    err = w.parent / f"{w.name}.race"
    t.start()
    try:
        for _ in range(n):
            if case.inproc and case.tool == "flashml":
                rc, hang = r._worker().run(argv, w, env, 60, err)
            else:
                rc, hang = _subprocess(_cmd(case, argv), w, {**r.env, **env}, 60, err)
            text = err.read_text(errors="replace") if err.exists() else ""
            if marker.exists():
                runs["evil"] += 1
                runs["served_by_evil"] += rc == 0
                marker.unlink()
            if hang or rc is None or rc < 0 or rc >= 128 or "Traceback" in text:
                runs["bad"] += 1
                bad.append(f"exit {rc}{' (hang)' if hang else ''}: "
                           f"{(text.strip().splitlines() or [''])[-1][:150]}")
            elif rc == 0:
                runs["ok"] += 1
            else:
                runs["refused"] += 1
    finally:
        stop.set()
        t.join()
        err.unlink(missing_ok=True)
    cls = "unverified" if runs["evil"] else ("traceback" if any("Traceback" in b for b in bad)
                                             else "abort" if bad else "ok")
    detail = (f"{n} loads: {runs['evil']} ran the evil constructor ({runs['served_by_evil']} "
              f"of them exit 0), {runs['ok']} served, {runs['refused']} refused, "
              f"{runs['bad']} bad {bad[:2]}")
    return Result(case.id, case.family, cls, " ".join(argv), None,
                  round(time.perf_counter() - t0, 3), bad[0] if bad else "", None, detail)


RUNNERS: dict[str, Callable[..., Result]] = {"twice": _run_twice, "kill": _run_kill,
                                             "race": _run_race}
