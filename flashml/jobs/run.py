"""What every system's main job shares: the run folder with its stage records, the stage
list runner, the stage timer, the MLflow run, and the summary.

A job (`flashml/systems/baleen/job.py`, later `mat.py`, ...) is a tuple of `Stage`s over one
`RunDir`. Every stage reads its inputs from the run folder and writes its outputs into it,
then records `stages/<stage>.json` atomically; calling a recorded stage again returns the
record without redoing the work, so a retried Airflow task is idempotent and the CLI, the
DAG and `flashml train` run the same functions.

A run folder is used as a transaction (`RunFolder`: `run_job` and every DAG task):

- **One user at a time.** Before anything else (ingest, MLflow) the job takes a
  non-blocking exclusive `flock` on `D/.flashml.lock` (created with O_NOFOLLOW; `D` made
  first if missing) and writes its pid, host and start time into it. A second job on the
  same folder fails at once, naming the holder, and changes nothing in `D`. The lock file
  is removed when the job ends (a lock file left by a killed job is harmless: the kernel
  released its lock).
- **No links.** A symlink (or a FIFO, a device) anywhere inside `D` is refused before
  anything is written (`D/work: is a symlink; a run folder must hold its own files`), so a
  job never writes outside its folder.
- **A failure leaves nothing but its error.** The job first keeps an undo copy of `D`
  (`D/.flashml.undo`: hard links of its large files, copies of its small ones; every large
  write in a run folder replaces a file by rename, `files.atomic_path`/`atomic_dir`, so the
  linked originals stay intact). On an error (an exception) `D` is put back as it was when
  the job started: a folder the job created is removed (with the parents it created), an
  earlier run's folder is left as it was. A job that goes on from recorded stages
  (`--resume`) commits after each stage it completes: its failure keeps the stages it
  completed (and their outputs) for the next resume and undoes only the failed stage; a DAG
  task (one stage) undoes its stage. On success the undo copy is dropped.
- **Interrupted runs stay resumable.** Ctrl-C, SIGTERM and SIGKILL are not failures: the
  folder keeps what the run had done (a later `--resume` goes on from its last recorded
  stage; a run without `--resume` starts over). An undo copy left by a killed job is
  dropped by the next job on the folder (finishing its restore if the kill came during
  one).
- **No run left RUNNING.** The MLflow run carries the job's pid and host as tags
  (`flashml.tracking.process_tags`); at the start of every job, runs of this tracking store
  still RUNNING whose process is gone are marked KILLED (`tracking.end_stale_runs`).
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import math
import os
import shutil
import socket
import stat
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from flashml.errors import UserError
from flashml.files import atomic_path, jsonable, write_json

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


#: `RunDir.cache` keys: the prepares armed for a stage's `ready`, and the releases of those
#: it ran.
_EARLY = "prepare-after-{}"
_EARLY_RELEASES = "early-releases"


class RunDir:
    """One run's folder. In-process callers share loaded objects through `cache`; a fresh
    process (an Airflow task) reloads them from the files."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.cache: dict[str, Any] = {}

    def ready(self, stage: str) -> None:
        """What `stage` makes for the stages prepared after it (`Stage.prepare_after`) is
        ready before `stage` ends (the ingest stage's table, before its validation): their
        prepares run now instead of when it ends, where the job armed them (`_run_job`; a
        stage run alone arms none). Their releases are kept until the job `disarm`s them."""
        for prepare in self.cache.pop(_EARLY.format(stage), []):
            release = prepare()
            if release is not None:
                self.cache.setdefault(_EARLY_RELEASES, []).append(release)

    def disarm(self, stage: str, *, release: bool) -> None:
        """Forget the prepares armed for `stage`'s `ready` and what they started, releasing
        it (`release`: the stage failed before `run_stages`, which would have) or not (it
        finished: `run_stages` prepares again and collects the releases)."""
        self.cache.pop(_EARLY.format(stage), None)
        for rel in self.cache.pop(_EARLY_RELEASES, []):
            if release:
                rel()

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
        write_json(self.own(self.stage_file(name)), data)
        return data

    def record_plots(self, paths: Iterable[Path | str]) -> dict[str, Any]:
        """A job's `plots` stage ends here: each plot logged to the active MLflow run (its
        artifact folder `plots/`) and the stage recorded with their paths."""
        import mlflow

        paths = [str(p) for p in paths]
        for p in paths:
            mlflow.log_artifact(p, artifact_path="plots")
        return self.record("plots", {"plots": paths})

    def own(self, path: Path) -> Path:
        """`path` (inside the run folder) after checking, without following links, that
        neither it nor a folder between it and the run folder is a symlink (UserError):
        what is written there stays in the run folder."""
        rel = Path(path).relative_to(self.path)
        p = self.path
        for part in rel.parts:
            p = p / part
            try:
                mode = os.lstat(p).st_mode
            except FileNotFoundError:
                break
            if stat.S_ISLNK(mode):
                raise UserError(f"{p}: is a symlink; a run folder must hold its own files "
                                "(remove it or choose another -o)")
        return Path(path)

    def frame(self) -> tuple[Any, Any]:
        """The accesses table's core columns and its metadata (read once per process, mapped
        from the run folder's copy: `canonical.mapped_table`)."""
        if "frame" not in self.cache:
            from flashml.trace.canonical import mapped_table

            if not self.table.is_file():
                raise UserError(f"{self.table}: missing; run the ingest stage first")
            self.cache["frame"] = mapped_table(self.table, self.work)
        return self.cache["frame"]

    def mlflow_run_id(self) -> str | None:
        p = self.path / "mlflow_run_id"
        return p.read_text().strip() if p.is_file() else None


#: The lock file of a run folder (flock; holds the holder's pid, host, start and command).
LOCK_FILE = ".flashml.lock"
#: The undo copy of a run folder while a job runs (its files as they were at the start).
UNDO_DIR = ".flashml.undo"
#: Inside UNDO_DIR while it is being put back: a job killed then finishes the restore.
_RESTORING = ".restoring"
#: Files smaller than this are copied into the undo copy, larger ones hard-linked (the run's
#: own large outputs, tables and arrays, are replaced by rename, never rewritten in place).
UNDO_COPY_BELOW = 1 << 20
_OWN = (LOCK_FILE, UNDO_DIR)


def refuse_links(path: Path, top: Path | None = None) -> None:
    """UserError naming the first symlink (or FIFO, socket, device) inside the run folder
    `path` (not following links; the lock file and the undo copy are the job's own)."""
    top = top or path
    try:
        entries = sorted(os.scandir(path), key=lambda e: e.name)
    except FileNotFoundError:
        return
    for e in entries:
        if path == top and e.name in _OWN:
            continue
        mode = e.stat(follow_symlinks=False).st_mode
        rel = Path(e.path)
        if stat.S_ISLNK(mode):
            raise UserError(f"{rel}: is a symlink; a run folder must hold its own files "
                            "(remove it or choose another -o)")
        if stat.S_ISDIR(mode):
            refuse_links(rel, top)
        elif not stat.S_ISREG(mode):
            raise UserError(f"{rel}: is not a regular file or folder; a run folder must hold "
                            "its own files (remove it or choose another -o)")


def _holder(fd: int) -> dict[str, Any]:
    """What the lock file open on `fd` says of its holder ({} if it has not written it
    yet)."""
    for _ in range(40):  # the holder writes it just after taking the lock
        try:
            data = os.pread(fd, 4096, 0)
            if data.strip():
                return dict(json.loads(data))
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    return {}


class RunFolder:
    """A run folder used as a transaction (the module docstring has the rules): `with
    RunFolder(path) as folder:` locks it, refuses links, keeps an undo copy;
    `folder.commit()` keeps what is there now (a completed stage); the block's end commits
    on success or an interrupt and undoes on an error. `folder.run` is the `RunDir`. `option`
    names the folder in errors (the CLI's -o)."""

    def __init__(self, path: str | os.PathLike[str], *, option: str = "-o") -> None:
        self.path = Path(path)
        self.option = option
        self.created: list[Path] = []  # folders this job made (D and its new parents)
        self._fd: int | None = None
        self.run: RunDir | None = None

    # -- the lock --------------------------------------------------------------------------

    def _make_folder(self) -> None:
        p = self.path
        try:
            st = os.stat(p)
        except FileNotFoundError:
            if os.path.lexists(p):
                raise UserError(f"{p}: option {self.option}: a symlink to nothing; choose "
                                "another run folder") from None
            st = None
        except OSError as e:
            raise UserError(f"{p}: option {self.option}: {e.strerror}") from None
        if st is not None:
            if not stat.S_ISDIR(st.st_mode):
                raise UserError(f"{p}: option {self.option}: exists and is not a folder; "
                                "choose another run folder")
            return
        missing = []
        q = p
        while not os.path.lexists(q) and q != q.parent:
            missing.append(q)
            q = q.parent
        for d in reversed(missing):
            try:
                os.mkdir(d)
                self.created.append(d)
            except FileExistsError:
                continue
            except OSError as e:
                raise UserError(f"{d}: option {self.option}: cannot make the run folder: "
                                f"{e.strerror}") from None

    def lock(self) -> None:
        """Take the folder's lock (UserError at once if another job holds it)."""
        lock = self.path / LOCK_FILE
        for _ in range(100):
            self._make_folder()
            try:
                fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
                             | os.O_NONBLOCK, 0o644)
            except OSError as e:
                if e.errno == errno.ELOOP:
                    raise UserError(f"{lock}: is a symlink; a run folder must hold its own "
                                    "files") from None
                if e.errno == errno.ENOENT:  # the folder went away meanwhile
                    continue
                raise UserError(f"{lock}: option {self.option}: cannot lock the run folder: "
                                f"{e.strerror}") from None
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    raise UserError(f"{lock}: is not a regular file; a run folder must hold "
                                    "its own files")
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    h = _holder(fd)
                    who = f"pid {h.get('pid', '?')}"
                    if h.get("host") and h.get("host") != socket.gethostname():
                        who += f" on {h['host']}"
                    raise UserError(f"{self.path}: in use by flashml run ({who}, started "
                                    f"{h.get('started', '?')}: {h.get('command', '?')}); "
                                    f"wait for it to end or choose another {self.option}"
                                    ) from None
                # the file we locked must still be the folder's lock file (a job ending
                # removes it: then lock the new one)
                try:
                    now = os.lstat(lock)
                except FileNotFoundError:
                    now = None
                if now is None or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
                    os.close(fd)
                    continue
            except BaseException:
                os.close(fd)
                raise
            self._fd = fd
            info = {"pid": os.getpid(), "host": socket.gethostname(),
                    "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "command": " ".join(["flashml", *sys.argv[1:]])
                    if Path(sys.argv[0]).name in ("flashml", "cli.py") else " ".join(sys.argv)}
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
            os.fsync(fd)
            return
        raise UserError(f"{self.path}: could not lock the run folder (it keeps being "
                        "removed and made again)")

    def _remove_lock_file(self) -> None:
        """Remove the lock file while holding it (only if it is still ours): a job that
        opened it meanwhile sees it is gone once it gets the lock, and tries again."""
        if self._fd is None:
            return
        lock = self.path / LOCK_FILE
        try:
            st, now = os.fstat(self._fd), os.lstat(lock)
            if (st.st_dev, st.st_ino) == (now.st_dev, now.st_ino):
                os.unlink(lock)
        except OSError:
            pass

    def unlock(self) -> None:
        if self._fd is None:
            return
        self._remove_lock_file()
        os.close(self._fd)
        self._fd = None

    # -- the undo copy ---------------------------------------------------------------------

    @property
    def undo(self) -> Path:
        return self.path / UNDO_DIR

    def _snapshot(self) -> None:
        """Every file of the folder (but the lock and the undo copy) under UNDO_DIR: a hard
        link, or a copy when smaller than UNDO_COPY_BELOW (the small files a library may
        rewrite in place: JSON, plots, models, Data Docs)."""
        def copy(src: Path, dst: Path, top: bool) -> None:
            os.mkdir(dst)
            for e in os.scandir(src):
                if top and e.name in _OWN:
                    continue
                s, d = Path(e.path), dst / e.name
                if e.is_dir(follow_symlinks=False):
                    copy(s, d, False)
                    continue
                if e.stat(follow_symlinks=False).st_size >= UNDO_COPY_BELOW:
                    try:
                        os.link(s, d, follow_symlinks=False)
                        continue
                    except OSError:  # a file system without hard links
                        pass
                shutil.copy2(s, d, follow_symlinks=False)
            shutil.copystat(src, dst, follow_symlinks=False)

        shutil.rmtree(self.undo, ignore_errors=True)
        copy(self.path, self.undo, True)

    def _restore(self) -> None:
        """Put the folder back as the undo copy has it (resumable if killed halfway: the
        marker makes the next job finish it)."""
        (self.undo / _RESTORING).touch()
        keep = set(os.listdir(self.undo)) - {_RESTORING}
        for e in os.scandir(self.path):
            if e.name in _OWN:
                continue
            if e.name in keep and _same(Path(e.path), self.undo / e.name):
                continue
            if e.is_dir(follow_symlinks=False):
                shutil.rmtree(e.path)
            else:
                os.unlink(e.path)
        for name in keep:
            if not os.path.lexists(self.path / name):
                os.rename(self.undo / name, self.path / name)
        shutil.rmtree(self.undo)

    def _recover(self) -> None:
        """What a killed job left: finish its restore, or drop its undo copy (the folder is
        then the killed run's, resumable)."""
        if (self.undo / _RESTORING).exists():
            log.warning("%s: finishing the restore of a job killed while undoing its run",
                        self.path)
            self._restore()
        else:
            shutil.rmtree(self.undo, ignore_errors=True)

    def commit(self) -> None:
        """Keep the folder as it is now: a later failure of this job undoes only what it
        writes after this."""
        if self._fd is not None:
            self._snapshot()

    # -- the transaction -------------------------------------------------------------------

    def __enter__(self) -> RunFolder:
        self.lock()
        try:
            if os.path.lexists(self.undo):
                if os.path.islink(self.undo):
                    raise UserError(f"{self.undo}: is a symlink; a run folder must hold its "
                                    "own files")
                self._recover()
            refuse_links(self.path)
            self._snapshot()
            self.run = RunDir(self.path)
        except BaseException:
            self._abandon(undo=False)
            raise
        return self

    def _abandon(self, undo: bool) -> None:
        """Unlock; with `undo` put the folder back first. A folder this job made goes
        (with the parents it made) when undone or when nothing but the lock is in it."""
        try:
            if undo:
                self._restore()
            if self.created and self.created[-1] == self.path and (undo or not any(
                    n not in _OWN for n in os.listdir(self.path))):
                for e in os.scandir(self.path):
                    if e.name == LOCK_FILE:
                        continue
                    if e.is_dir(follow_symlinks=False):
                        shutil.rmtree(e.path, ignore_errors=True)
                    else:
                        os.unlink(e.path)
                self._remove_lock_file()
                for d in reversed(self.created):
                    try:
                        os.rmdir(d)
                    except OSError:  # not empty: somebody else's now
                        break
        finally:
            self.unlock()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: Any) -> None:
        failed = kind is not None and issubclass(kind, Exception)
        if failed:
            log.info("%s: the run failed; the folder is put back as it was before it",
                     self.path)
            try:
                self._abandon(undo=True)
            except Exception as e:  # the job's own error is the one to report
                log.error("%s: could not put the run folder back (%s); the next run on it "
                          "finishes that", self.path, e)
            return
        try:
            shutil.rmtree(self.undo, ignore_errors=True)
        finally:
            self.unlock()


def _same(a: Path, b: Path) -> bool:
    """`a` and `b` are the same file (a hard link of it)."""
    try:
        x, y = os.lstat(a), os.lstat(b)
    except OSError:
        return False
    return not stat.S_ISDIR(x.st_mode) and (x.st_dev, x.st_ino) == (y.st_dev, y.st_ino)


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
    run page's Description); the run ends FINISHED, KILLED (Ctrl-C, SIGTERM) or FAILED. The
    run is tagged with the process that has it open (`tracking.process_tags`), so a run
    left RUNNING by a killed process is marked KILLED by the next job
    (`tracking.end_stale_runs`)."""
    import mlflow

    from flashml.tracking import process_tags, setup, source_tags

    setup()
    active = mlflow.active_run()
    if active is not None:
        yield active
        return
    rid = run.mlflow_run_id()
    if rid is not None:
        with _ended(mlflow.start_run(run_id=rid)) as r:
            mlflow.set_tags(process_tags())  # this process has it open now
            yield r
        return
    with _ended(mlflow.start_run(run_name=run_name, tags=source_tags() | (tags or {})
                                 | process_tags(), description=description)) as r:
        with atomic_path(run.own(run.path / "mlflow_run_id")) as tmp:
            tmp.write_text(r.info.run_id + "\n")
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
    or failed (workers started for a sweep that never ran are stopped). After the ingest
    stage of a whole job it may run earlier, once the stage's table is ready
    (`RunDir.ready`), and then again when the stage has finished: a second call starts
    nothing and returns the release of the first."""

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


def arm_early(run: RunDir, stages: Sequence[Stage], settings: Any) -> None:
    """Let the first of `stages` start the prepares due after it once what they need is
    ready (`RunDir.ready`), before it ends."""
    first = stages[0]
    run.cache[_EARLY.format(first.name)] = [
        partial(later.prepare, run, settings) for later in stages[1:]
        if later.prepare is not None and later.prepare_after == first.name]


def run_stages(stages: Sequence[Stage], run: RunDir, settings: Any,
               timer: Timer | None = None,
               after_stage: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run `stages` in order (each returns its record at once if already recorded), a later
    stage's `prepare` as soon as its `prepare_after` has finished; `after_stage(name)` after
    each (a resumed run's commit, `RunFolder.commit`); returns {stage name: record}."""
    timer = timer or Timer()
    records: dict[str, Any] = {}
    releases: list[Callable[[], None]] = []
    try:
        for i, st in enumerate(stages):
            records[st.name] = st.fn(run, settings, timer)
            if after_stage is not None:
                after_stage(st.name)
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
    return write_json(RunDir(out).own(Path(out) / "summary.json"), summary)


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
    description; default: a `flashml.job` tag and the job's HELP), and what
    flashml/jobs/ship.py reads at the end of the run (`headlines`, `shipped`, `SCORE`:
    headline metrics, the bundle's logged model and its registration). The folder is a
    transaction (`RunFolder`, the module docstring): locked
    first, put back as it was if the job fails (a resumed job keeps the stages it
    completed). Returns the summary, its path and the timer. The C heap is bounded first
    (flashml/heap.py: freed memory goes back to the system)."""
    from flashml.heap import bound

    bound()
    with RunFolder(out) as folder:
        assert folder.run is not None
        return _run_job(job, settings, Path(out), folder, resume)


def _run_job(job: Any, settings: Any, out: Path, folder: RunFolder,
             resume: bool) -> tuple[dict[str, Any], Path, Timer]:
    import mlflow

    from flashml.tracking import end_stale_runs

    run = folder.run
    assert run is not None
    end_stale_runs()
    if resume:
        _resume_check(run, settings)
        run.summary.unlink(missing_ok=True)
        log.info("resuming %s: recorded stages %s", run.path,
                 ", ".join(sorted(p.stem for p in (run.path / "stages").glob("*.json")))
                 or "none")
    else:
        run.reset()
        write_json(run.own(run.path / SETTINGS_FILE), settings_record(settings))
    after_stage = (lambda name: folder.commit()) if resume else None
    timer = Timer()
    t0 = time.perf_counter()
    first = job.STAGES[0]
    if first.name == "ingest":
        # the prepares due after ingest may start once its table is ready (`RunDir.ready`),
        # while it validates; they are idempotent, so run_stages calling them again after
        # ingest only collects their releases
        arm_early(run, job.STAGES, settings)
        try:
            first.fn(run, settings, timer)
        except BaseException:
            run.disarm(first.name, release=True)
            raise
        run.disarm(first.name, release=False)
        if after_stage is not None:
            after_stage(first.name)
    from flashml.jobs import ship

    tags = job.mlflow_tags(run, settings) if hasattr(job, "mlflow_tags") else \
        ship.default_tags(job)
    description = job.describe_run(run, settings) if hasattr(job, "describe_run") else \
        ship.default_description(job, settings)
    with open_run(run, job.run_name(settings), job.mlflow_params(run, settings), tags=tags,
                  description=description) as mlrun:
        summary = job.summary(run_stages(job.STAGES, run, settings, timer, after_stage),
                              settings)
        # headline metrics; the shipped bundle as a logged model, registered (ship.py)
        summary |= ship.finish_run(job, run, settings, summary)
        summary["mlflow_run_id"] = mlrun.info.run_id
        summary["timings_s"] = timer.stages
        summary["peak_rss_mb"] = timer.peak_rss_mb
        summary["seconds"] = round(time.perf_counter() - t0, 1)
        path = write_summary(out, summary)
        mlflow.log_artifact(str(path))
    return summary, path, timer
