"""Tuning the simple baselines ahead: RejectX and CoinFlip at the target depend only on the
trace and the simulator set-up, so their searches start on a low-priority thread as soon as
the trace is ingested and fill the core that training leaves idle (the convergence loop and
the validation used 1.5-1.6 of 2 cores at 10 M accesses); the `policies` stage takes their
results instead of searching again."""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from flashml.jobs.run import RunDir
from flashml.settings import BaleenSettings
from flashml.systems.baleen.run_folder import base_config

log = logging.getLogger("flashml.pipeline")

#: The baselines tuned ahead, in the order they run.
AHEAD = ("rejectx", "coinflip")
#: How much lower the thread's priority is than the job's (Linux: `setpriority` on a thread).
NICE = 10


class BaselinesAhead:
    """The searches of `AHEAD` on one daemon thread, niced; `take(name)` returns (its `Tuned`,
    seconds), waiting for it if the thread is running it, or None when it did not run (not
    started yet: the stage claims it, stopped, or failed), and the stage searches itself.
    `stop()` cancels the running search before its next simulation and waits for the thread:
    a job that ends first never leaves it inside the simulator while the interpreter shuts
    down (which aborts the process: at 100 M accesses a failed job exited on SIGABRT)."""

    def __init__(self, run: RunDir, s: BaleenSettings) -> None:
        self._done: dict[str, tuple[Any, float] | None] = {}
        self._claimed: set[str] = set()  # by the thread (running or done) or by the stage
        self._stop = threading.Event()
        self._ready = threading.Condition()
        self._thread = threading.Thread(target=self._run, args=(run, s), daemon=True,
                                        name="baselines-ahead")
        self._thread.start()

    def _run(self, run: RunDir, s: BaleenSettings) -> None:
        try:  # this thread only (Linux): the job's own threads keep their priority
            tid = threading.get_native_id()
            os.setpriority(os.PRIO_PROCESS, tid,
                           min(19, os.getpriority(os.PRIO_PROCESS, tid) + NICE))
        except (AttributeError, OSError):
            pass
        from flashml.systems.baleen.baselines import tune_coinflip, tune_rejectx
        from flashml.systems.baleen.tuning import SearchCancelled

        tune = {"rejectx": tune_rejectx, "coinflip": tune_coinflip}
        for name in AHEAD:
            with self._ready:
                if name in self._claimed:  # the stage searches it itself
                    continue
                self._claimed.add(name)
            out: tuple[Any, float] | None = None
            if not self._stop.is_set():
                try:
                    t0 = time.perf_counter()
                    df, _ = run.frame()
                    out = (tune[name](df, base_config(run, s), s.target_write_rate_mbps,
                                      cancel=self._stop), time.perf_counter() - t0)
                except SearchCancelled:
                    log.debug("tuning %s ahead stopped: the job ended first", name)
                except Exception as e:  # the stage searches itself and says why
                    log.info("tuning %s ahead failed (%s: %s); the policies stage tunes it",
                             name, type(e).__name__, e)
            with self._ready:
                self._done[name] = out
                self._ready.notify_all()

    def take(self, name: str) -> tuple[Any, float] | None:
        with self._ready:
            if name not in self._claimed:
                self._claimed.add(name)
                return None
            self._ready.wait_for(lambda: name in self._done)
            return self._done[name]

    def stop(self) -> None:
        """End the thread (a job that stopped first): its search cancelled before its next
        simulation, the thread waited for."""
        self._stop.set()
        self._thread.join()


def baselines_ahead(run: RunDir, s: BaleenSettings) -> Any:
    """The `policies` stage's `prepare` (after `ingest`, or while it validates: the table is
    all the searches read, `RunDir.ready`): start `BaselinesAhead` unless the stage is
    recorded; returns what stops it if the job ends first (the started one's, when called
    again)."""
    if run.done("policies") is not None:
        return None
    ahead = run.cache.get("baselines_ahead")
    if ahead is None:
        ahead = run.cache["baselines_ahead"] = BaselinesAhead(run, s)
        log.info("tuning %s ahead, at low priority", " and ".join(AHEAD))

    def release() -> None:
        if run.cache.get("baselines_ahead") is ahead:
            run.cache.pop("baselines_ahead")
        ahead.stop()

    return release
