"""What every system's main job shares: the run folder with its stage records, the stage
list runner, the stage timer, the MLflow run, and the summary.

A job (`flashml/jobs/baleen.py`, later `mat.py`, ...) is a tuple of `Stage`s over one
`RunDir`. Every stage reads its inputs from the run folder and writes its outputs into it,
then records `stages/<stage>.json` atomically; calling a recorded stage again returns the
record without redoing the work, so a retried Airflow task is idempotent and the CLI, the
DAG and `flashml train` run the same functions.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flashml.errors import UserError
from flashml.files import jsonable, write_json

log = logging.getLogger("flashml.jobs")


def _peak_rss_mb(reset: bool = False) -> float | None:
    """This process's peak resident memory (MB) since the last reset (Linux: VmHWM of
    /proc/self/status, reset by writing 5 to /proc/self/clear_refs); None where unknown."""
    try:
        if reset:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


class Timer:
    """Wall time and this process's peak memory per stage, in the order the stages ran
    (logged as each ends). A stage inside another counts in both; a child process's memory
    (the Spark JVM) is not counted."""

    def __init__(self) -> None:
        self.stages: dict[str, float] = {}
        self.peak_rss_mb: dict[str, float] = {}
        self._open: list[list[float]] = []  # the running peak of each open stage

    def _fold(self) -> None:
        now = _peak_rss_mb()
        if now is not None:
            for frame in self._open:
                frame[0] = max(frame[0], now)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        log.info("stage %s ...", name)
        self._fold()  # the enclosing stages keep their peak so far across the reset
        self._open.append([_peak_rss_mb(reset=True) or 0.0])
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self._fold()
            peak = self._open.pop()[0]
            for frame in self._open:
                frame[0] = max(frame[0], peak)
        self.stages[name] = round(time.perf_counter() - t0, 2)
        if peak > 0:
            self.peak_rss_mb[name] = round(peak, 1)
        log.info("stage %s done in %.1fs (peak memory %.0f MB)", name, self.stages[name], peak)


class RunDir:
    """One run's folder. In-process callers share loaded objects through `cache`; a fresh
    process (an Airflow task) reloads them from the files."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.cache: dict[str, Any] = {}

    @property
    def table(self) -> Path:
        """The canonical, validated accesses table every stage reads."""
        return self.path / "accesses.parquet"

    @property
    def work(self) -> Path:
        return self.path / "work"

    @property
    def summary(self) -> Path:
        """summary.json: written last by `run_job`, removed first by `reset`."""
        return self.path / "summary.json"

    def reset(self) -> None:
        """Forget every stage record and the MLflow run: the next stages start afresh. The
        previous run's summary.json goes first, before anything of the folder changes (an
        unlink is atomic): a rerun killed at any point never leaves a folder whose summary
        describes another run's content."""
        self.summary.unlink(missing_ok=True)
        shutil.rmtree(self.path / "stages", ignore_errors=True)
        (self.path / "mlflow_run_id").unlink(missing_ok=True)
        self.cache.clear()

    def stage_file(self, name: str) -> Path:
        return self.path / "stages" / f"{name}.json"

    def done(self, name: str) -> dict[str, Any] | None:
        """The record of a finished stage, or None."""
        p = self.stage_file(name)
        if p.is_file():
            return json.loads(p.read_text())
        return None

    def record(self, name: str, data: dict[str, Any]) -> dict[str, Any]:
        """Record a finished stage (atomically) and return the record as JSON would."""
        data = jsonable(data)
        write_json(self.stage_file(name), data)
        return data

    def frame(self) -> tuple[Any, Any]:
        """The accesses table and its metadata (read once per process)."""
        if "frame" not in self.cache:
            from flashml.trace.canonical import read_table

            if not self.table.is_file():
                raise UserError(f"{self.table}: missing; run the ingest stage first")
            self.cache["frame"] = read_table(self.table)
        return self.cache["frame"]

    def mlflow_run_id(self) -> str | None:
        p = self.path / "mlflow_run_id"
        return p.read_text().strip() if p.is_file() else None


@contextmanager
def _sigterm_ends_run() -> Iterator[None]:
    """While a run is open in the main thread, SIGTERM (`timeout`, `kill`, a benchmark's or
    a scheduler's stop) exits through Python (SystemExit 143) instead of killing the process
    outright, so the MLflow run ends KILLED rather than staying RUNNING for ever. A handler
    somebody else installed (Airflow's task runner) is left alone."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextmanager
def _ended(r: Any) -> Iterator[Any]:
    """Yield the started MLflow run `r` and end it: FINISHED, KILLED on an interrupt (Ctrl-C,
    SIGTERM), FAILED on an error; never left RUNNING by a Python exit."""
    import mlflow

    status = "FAILED"
    try:
        with _sigterm_ends_run():
            yield r
        status = "FINISHED"
    except (KeyboardInterrupt, SystemExit) as e:
        if not (isinstance(e, SystemExit) and e.code in (0, None)):
            status = "KILLED"
        raise
    finally:
        if mlflow.active_run() is not None and mlflow.active_run().info.run_id == r.info.run_id:
            mlflow.end_run(status)


@contextmanager
def open_run(run: RunDir, run_name: str, params: dict[str, Any] | None = None,
             tags: dict[str, str] | None = None, description: str | None = None
             ) -> Iterator[Any]:
    """The run's MLflow run: created on first use (its id kept in the run folder), resumed
    by later stages and retries. Nothing is opened if a run is already active. A new run
    gets `tags` with the git commit (flashml.tracking.source_tags) and `description` (the
    run page's Description); the run ends FINISHED, KILLED (Ctrl-C, SIGTERM) or FAILED."""
    import mlflow

    from flashml.tracking import setup, source_tags

    setup()
    active = mlflow.active_run()
    if active is not None:
        yield active
        return
    rid = run.mlflow_run_id()
    if rid is not None:
        with _ended(mlflow.start_run(run_id=rid)) as r:
            yield r
        return
    with _ended(mlflow.start_run(run_name=run_name, tags=source_tags() | (tags or {}),
                                 description=description)) as r:
        (run.path / "mlflow_run_id").write_text(r.info.run_id + "\n")
        if params:
            mlflow.log_params(params)
        yield r


@dataclass(frozen=True)
class Stage:
    """One step of a job: `fn(run, settings, timer)` returns the stage's record (a dict).
    With `prepare`, `prepare(run, settings)` runs as soon as the stage `prepare_after` has
    finished in the same `run_stages` call, to start what the stage needs while the stages in
    between run (the sweep's worker processes load the run's data meanwhile); it must not
    record anything and must let the stage run without it. It may return a function that
    releases what the stage left unused; `run_stages` calls it when its stages end, finished
    or failed (workers started for a sweep that never ran are stopped)."""

    name: str
    fn: Callable[..., Any]
    prepare: Callable[..., Callable[[], None] | None] | None = None
    prepare_after: str | None = None

    @property
    def doc(self) -> str:
        return (self.fn.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")


def finite_numbers(d: dict[str, Any]) -> dict[str, float]:
    """The finite numbers of `d` as floats (what MLflow takes as metrics); bools, strings,
    None, NaN and infinities are left out."""
    return {k: float(v) for k, v in d.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


def run_stages(stages: Sequence[Stage], run: RunDir, settings: Any,
               timer: Timer | None = None) -> dict[str, Any]:
    """Run `stages` in order (each returns its record at once if already recorded), a later
    stage's `prepare` as soon as its `prepare_after` has finished; returns {stage name:
    record}."""
    timer = timer or Timer()
    records: dict[str, Any] = {}
    releases: list[Callable[[], None]] = []
    try:
        for i, st in enumerate(stages):
            records[st.name] = st.fn(run, settings, timer)
            for later in stages[i + 1:]:
                if later.prepare is not None and later.prepare_after == st.name:
                    release = later.prepare(run, settings)
                    if release is not None:
                        releases.append(release)
    finally:
        for release in releases:
            release()
    return records


def select(stages: Sequence[Stage], *names: str) -> tuple[Stage, ...]:
    """The stages called `names`, in the job's order (KeyError on an unknown name)."""
    known = {s.name for s in stages}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise KeyError(f"no stage {unknown[0]!r}; stages: {', '.join(sorted(known))}")
    return tuple(s for s in stages if s.name in names)


def write_summary(out: Path, summary: dict[str, Any]) -> Path:
    return write_json(Path(out) / "summary.json", summary)


#: The settings a run folder's stages were made with (`run_job` writes it at a fresh start
#: and checks it on `resume`).
SETTINGS_FILE = "settings.json"


def settings_record(settings: Any) -> dict[str, Any]:
    """A job's settings as JSON (a dataclass's fields, else its attributes, else its text)."""
    import dataclasses

    if dataclasses.is_dataclass(settings) and not isinstance(settings, type):
        data = dataclasses.asdict(settings)
    elif hasattr(settings, "__dict__"):
        data = dict(vars(settings))
    else:
        data = {"settings": str(settings)}
    return json.loads(json.dumps(jsonable(data), sort_keys=True, default=str))


def _resume_check(run: RunDir, settings: Any) -> None:
    """A run folder may be resumed only with the settings its stages were made with."""
    p = run.path / SETTINGS_FILE
    if not (run.path / "stages").is_dir() or not p.is_file():
        raise UserError(f"{run.path}: nothing to resume (no stage records or {SETTINGS_FILE}"
                        "); run without --resume to start")
    was, now = json.loads(p.read_text()), settings_record(settings)
    diff = sorted(k for k in set(was) | set(now) if was.get(k) != now.get(k))
    if diff:
        k = diff[0]
        raise UserError(f"{p}: the run was started with {k}={was.get(k)!r}, now "
                        f"{k}={now.get(k)!r} ({len(diff)} setting(s) differ: "
                        f"{', '.join(diff)}); resume with the same options, or run without "
                        "--resume to start over")


def run_job(job: Any, settings: Any, out: Path, *,
            resume: bool = False) -> tuple[dict[str, Any], Path, Timer]:
    """Run a system's job (a module of flashml/jobs with `STAGES`, `run_name(s)`,
    `mlflow_params(run, s)` and `summary(records, s)`) end to end over the run folder `out`
    in one process: a fresh start (earlier stage records in `out` are forgotten), the first
    stage before the MLflow run when it is `ingest` (bad input opens no run), the rest inside
    it; writes and logs `summary.json`. With `resume` an interrupted run in `out` goes on
    from its last finished stage (the recorded stages return their records; the same MLflow
    run is reopened); its settings must be the ones the run started with. Optional hooks of
    the job: `mlflow_tags(run, s)` and `describe_run(run, s)` (the new MLflow run's tags and
    description). Returns the summary, its path and the timer."""
    import mlflow

    run = RunDir(out)
    if resume:
        _resume_check(run, settings)
        run.summary.unlink(missing_ok=True)
        log.info("resuming %s: recorded stages %s", run.path,
                 ", ".join(sorted(p.stem for p in (run.path / "stages").glob("*.json")))
                 or "none")
    else:
        run.reset()
        write_json(run.path / SETTINGS_FILE, settings_record(settings))
    timer = Timer()
    t0 = time.perf_counter()
    first = job.STAGES[0]
    if first.name == "ingest":
        first.fn(run, settings, timer)
    tags = job.mlflow_tags(run, settings) if hasattr(job, "mlflow_tags") else None
    description = job.describe_run(run, settings) if hasattr(job, "describe_run") else None
    with open_run(run, job.run_name(settings), job.mlflow_params(run, settings), tags=tags,
                  description=description) as mlrun:
        summary = job.summary(run_stages(job.STAGES, run, settings, timer), settings)
        summary["mlflow_run_id"] = mlrun.info.run_id
        summary["timings_s"] = timer.stages
        summary["peak_rss_mb"] = timer.peak_rss_mb
        summary["seconds"] = round(time.perf_counter() - t0, 1)
        path = write_summary(out, summary)
        mlflow.log_artifact(str(path))
    return summary, path, timer
