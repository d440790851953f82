"""Compiling the candidate ahead: `compile` starts while `sweep` and `plots` run (a
compiler process per bundle, its result picked up by the `compile` stage)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

from flashml.jobs.run import RunDir
from flashml.settings import BaleenSettings
from flashml.systems.baleen.run_folder import policy_dir

log = logging.getLogger("flashml.pipeline")


class CompileAhead:
    """`flashml compile` of the run's candidate bundle in a child process at low priority
    (nice 10, one compiler at a time), started when `train` has finished: it fills the
    compile cache (compiler/objcache.py) while the policies and the sweep run, so the compile
    stage links cached, verified objects instead of compiling TL2cgen's trees on the job's
    critical path. Its own output goes to a temporary folder, removed afterwards; the stage
    compiles (and checks) the shipped bundle itself, whatever this one did."""

    def __init__(self, bundle: Path) -> None:
        import subprocess
        import sys
        import tempfile

        self.tmp = Path(tempfile.mkdtemp(prefix="flashml-compile-ahead-"))
        cmd = [sys.executable, "-m", "flashml.cli", "compile", "--model-dir", str(bundle),
               "-o", str(self.tmp / "bundle"), "--no-log", "--jobs", "1"]
        if shutil.which("nice"):
            cmd = ["nice", "-n", "10", *cmd]
        self.log_path = self.tmp / "compile.log"
        with open(self.log_path, "w") as err:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=err)

    def finish(self) -> None:
        """Wait for it (the stage that needs its objects)."""
        rc = self.proc.wait()
        if rc != 0:
            tail = self.log_path.read_text(errors="replace").strip().splitlines()[-1:]
            log.info("compiling ahead failed (exit %d%s); the compile stage compiles it all",
                     rc, f": {tail[0]}" if tail else "")
        shutil.rmtree(self.tmp, ignore_errors=True)

    def stop(self) -> None:
        """Stop it (the job ended before its compile stage)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)


def compile_ahead(run: RunDir, s: BaleenSettings) -> Any:
    """The compile stage's `prepare` (after `train`): start `CompileAhead` on the candidate
    bundle when the stage will compile it and the compile cache is on; returns what stops it
    if the job ends first."""
    from flashml.config import cache_dir

    if not s.compile or run.done("compile") is not None or cache_dir() is None or \
            not (policy_dir(run) / "policy.json").is_file() or run.cache.get("compile_ahead"):
        return None
    ahead = run.cache["compile_ahead"] = CompileAhead(policy_dir(run))
    log.info("compiling the candidate bundle ahead, at low priority (pid %d)", ahead.proc.pid)

    def release() -> None:
        if run.cache.get("compile_ahead") is ahead:
            run.cache.pop("compile_ahead")
            ahead.stop()

    return release
