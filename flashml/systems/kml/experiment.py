"""KML's experiment runners: one workload under one readahead policy, measured.

    with RealRunner(workdir, device) as r:                 # db_bench on a throttled loop device
        o = r.run("readrandom", kib=16, trace=True)        # a fixed size; page-cache windows
        o = r.run("readrandom", bundle=Path("compiled/kml"))   # flashrt tune-readahead
    with TwinRunner(TwinDevice()) as r:                     # the offline twin (no root)
        ...

A policy is a fixed size (`kib`) or a compiled bundle with the readahead capability
(`bundle`): on the real device `flashrt tune-readahead` runs beside db_bench and sets the
device's readahead every window; in the twin the same .so is called every window. An
`Outcome` holds the ops/s, the page-cache windows (the five features, for training) when
traced, and a timeline (ops/s and readahead over time: the paper's Figure 2).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flashml.errors import UserError
from flashml.systems.kml import testbed as tb_mod
from flashml.systems.kml.settings import KNOBS, KmlSettings

REPO = Path(__file__).resolve().parents[3]
#: Every workload the experiment runs: the paper's four (trained on), then the held-out two.
WORKLOADS = tb_mod.WORKLOADS + tb_mod.HELD_OUT


def flashrt_binary() -> Path:
    """The C runtime's CLI: $FLASHML_FLASHRT, this checkout's runtime/build/flashrt (make
    setup builds it), or `flashrt` on PATH."""
    for cand in (os.environ.get("FLASHML_FLASHRT"), REPO / "runtime" / "build" / "flashrt",
                 shutil.which("flashrt")):
        if cand and Path(cand).is_file() and os.access(cand, os.X_OK):
            return Path(cand)
    raise UserError("flashrt not found: run `make setup` (builds runtime/build/flashrt) or set "
                    "FLASHML_FLASHRT")


@dataclass
class Outcome:
    """One measured run."""

    workload: str
    policy: str
    ops_per_s: float
    #: page-cache windows (features.readahead.window_features rows) when traced
    windows: list[dict[str, Any]] = field(default_factory=list)
    #: [{"t": s, "ops_per_s": ..., "readahead_kib": ...}] over the run
    timeline: list[dict[str, Any]] = field(default_factory=list)
    #: the tuner's decisions by KiB (bundle policies)
    decisions: dict[str, int] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RealDevice:
    """The real testbed's shape: a device of `device_bytes` (`backend`: a loop device over a
    sparse file, or zram), throttled
    to `read_iops` and `read_bps` (a slower SSD than this machine's disk, so readahead
    matters as on the paper's SATA SSD), db_bench in a memory cgroup of `memory_bytes`, a
    database of `num` keys; runs of at most `duration_s` seconds and `reads` operations. No
    defaults here but the backend's: they live once, in flashml.systems.kml.job.KmlSettings."""

    device_bytes: int
    num: int
    memory_bytes: int
    read_iops: int
    read_bps: int
    duration_s: int
    reads: int
    #: testbed.BACKENDS: "loop" or "zram"
    backend: str = "loop"


class RealRunner:
    """db_bench on the throttled loop device (flashml/systems/kml/testbed.py); a context manager
    that opens the testbed and fills the database once."""

    mode = "real"

    def __init__(self, workdir: str | os.PathLike[str], device: RealDevice) -> None:
        self.workdir = Path(workdir)
        self.dev = device
        self.tb: tb_mod.Testbed | None = None
        self.default_kib = 0

    def __enter__(self) -> RealRunner:
        self.tb = tb_mod.Testbed(self.workdir, size_bytes=self.dev.device_bytes,
                                 memory_limit_bytes=self.dev.memory_bytes,
                                 read_iops=self.dev.read_iops, read_bps=self.dev.read_bps,
                                 backend=self.dev.backend)
        self.tb.__enter__()
        try:
            self.default_kib = self.tb.readahead_kib()
            self.tb.fill(self.dev.num)
        except BaseException:
            self.tb.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self.tb is not None:
            self.tb.close()
            self.tb = None

    def run(self, workload: str, *, kib: int | None = None, bundle: Path | None = None,
            trace: bool = False, log_to: Path | None = None) -> Outcome:
        """One db_bench run; with a bundle, the tuner's log (one JSON line per window) is
        kept at `log_to`."""
        from flashml.features.readahead import window_features
        from flashml.systems.kml.collect import PageCacheTracer

        tb = self.tb
        assert tb is not None and tb.device is not None, "the runner is not open"
        if (kib is None) == (bundle is None):
            raise ValueError("give a fixed size (kib) or a bundle, not both")
        with tempfile.TemporaryDirectory(prefix="kml-run-", dir=self.workdir) as tmp:
            report = Path(tmp) / "report.csv"
            tuner, tlog = None, Path(tmp) / "tuner.jsonl"
            if bundle is not None:
                tb.set_readahead(self.default_kib)
                tuner = subprocess.Popen(
                    [str(flashrt_binary()), "tune-readahead", "--device", tb.device,
                     "--bundle", str(bundle), "--log", str(tlog), "--json"],
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                time.sleep(0.3)  # its tracefs instance is up before db_bench starts
                if tuner.poll() is not None:
                    raise UserError(f"flashrt tune-readahead exited at once: "
                                    f"{tuner.stderr.read().strip()[-400:] if tuner.stderr else ''}")
            started = time.time()
            try:
                with PageCacheTracer(tb.device) if trace else contextlib.nullcontext() as tr:
                    r = tb.run(workload, kib, self.dev.reads, self.dev.duration_s, report)
            finally:
                summary = _stop_tuner(tuner) if tuner is not None else {}
            steps = _tuner_log(tlog)
            if log_to is not None and tlog.is_file():
                shutil.copyfile(tlog, log_to)
            timeline = [{"t": t, "ops_per_s": q, "readahead_kib": kib if kib is not None else
                         _kib_at(steps, started, t, self.default_kib)} for t, q in _report(report)]
            windows = window_features(tr.events, kib) if trace and kib is not None else []
            return Outcome(workload=workload, policy=f"{kib}" if kib else str(bundle),
                           ops_per_s=float(r["ops_per_s"]), windows=windows,
                           timeline=timeline,
                           decisions={str(k): int(v)
                                      for k, v in summary.get("decisions", {}).items()},
                           extra={"micros_per_op": r["micros_per_op"],
                                  **({"tuner": summary} if summary else {})})


def _stop_tuner(p: subprocess.Popen[str]) -> dict[str, Any]:
    """SIGTERM the tuner (it restores the readahead and prints its summary); its JSON."""
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
    try:
        out, err = p.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        raise UserError("flashrt tune-readahead did not stop within 20 s of SIGTERM") from None
    if p.returncode != 0:
        raise UserError(f"flashrt tune-readahead failed (exit {p.returncode}): "
                        f"{err.strip()[-400:]}")
    try:
        return json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
    except json.JSONDecodeError:
        return {}


def _report(path: Path) -> list[tuple[float, float]]:
    """db_bench's --report_file: (seconds elapsed, ops/s in that second)."""
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines()[1:]:
        parts = line.split(",")
        if len(parts) >= 2:
            try:
                rows.append((float(parts[0]), float(parts[1])))
            except ValueError:
                continue
    return rows


def _tuner_log(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _kib_at(steps: list[dict[str, Any]], started: float, t: float, default: int) -> int:
    """The readahead the tuner had set `t` s after db_bench started (its log's wall times)."""
    kib = default
    for s in steps:
        if float(s.get("wall", s.get("t", 0.0))) - started <= t:
            kib = int(s.get("kib", kib))
    return kib


@dataclass(frozen=True)
class TwinDevice:
    """The offline twin's shape (flashml/systems/kml/twin.py): generated db_bench-like traces of
    `requests` requests, a page cache of `cache_pages` pages, a device of `riops` IOs/s and
    `rbps` bytes/s (by default the job's: the real testbed's throttle, settings.toml's); the
    device's default readahead is Linux's for a disk (settings.toml's readahead_kib)."""

    requests: int = KmlSettings.twin_requests
    cache_pages: int = KNOBS["twin_cache_pages"].default
    riops: float = float(KNOBS["read_iops"].default)
    rbps: float = KNOBS["read_mbps"].default * (1 << 20)
    seed: int = 0
    default_kib: int = KNOBS["readahead_kib"].default


class TwinRunner:
    """The experiment on the offline twin: the same runs, simulated; a bundle's .so is
    called every window (through the compiler's loader) as the tuner calls it."""

    mode = "twin"

    def __init__(self, device: TwinDevice, traces: dict[str, Any] | None = None) -> None:
        self.dev = device
        self.default_kib = device.default_kib
        #: traces by workload name besides the generated ones (a user's block trace)
        self._traces: dict[str, Any] = dict(traces or {})

    def __enter__(self) -> TwinRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self._traces.clear()

    def trace(self, workload: str) -> Any:
        from flashml.systems.kml import twin

        if workload not in self._traces:
            self._traces[workload] = twin.workload_trace(
                workload, requests=self.dev.requests,
                seed=self.dev.seed + WORKLOADS.index(workload))
        return self._traces[workload]

    def run(self, workload: str, *, kib: int | None = None, bundle: Path | None = None,
            trace: bool = False, log_to: Path | None = None) -> Outcome:
        """One simulated run; with a bundle, its windows (features, the size chosen) are
        written to `log_to` as JSON lines, as the tuner logs them."""
        import numpy as np

        from flashml.compiler.loader import PolicyLibrary
        from flashml.features.readahead import contract
        from flashml.systems.kml import twin

        if (kib is None) == (bundle is None):
            raise ValueError("give a fixed size (kib) or a bundle, not both")
        decisions: dict[str, int] = {}
        policy: Any = kib
        if bundle is not None:
            lib = PolicyLibrary(Path(bundle) / "policy.so", need="readahead")

            def policy(features: list[float]) -> int:
                k = int(lib.readahead_kib(np.asarray([features]))[0])
                decisions[str(k)] = decisions.get(str(k), 0) + 1
                return k

        r = twin.evaluate(self.trace(workload), policy, cache_pages=self.dev.cache_pages,
                          initial_kib=self.default_kib, riops=self.dev.riops,
                          rbps=self.dev.rbps)
        names = contract().names
        if log_to is not None and bundle is not None:
            log_to.write_text("".join(json.dumps({"window": w["window"], "kib": w["kib"], **dict(
                zip(names, w["features"], strict=True))}) + "\n"
                for w in r["windows"] if not w["empty"]))
        windows = [{"window": w["window"], **dict(zip(names, w["features"], strict=True))}
                   for w in r["windows"] if not w["empty"]] if trace else []
        t, timeline = 0.0, []
        for w in r["windows"]:
            if w["elapsed_s"] > 0:
                t += w["elapsed_s"]
                timeline.append({"t": t, "ops_per_s": w["requests"] / w["elapsed_s"],
                                 "readahead_kib": w["kib"]})
        return Outcome(workload=workload, policy=str(kib if kib else bundle),
                       ops_per_s=float(r["ops_per_s"]), windows=windows, timeline=timeline,
                       decisions=decisions,
                       extra={"hit_ratio": r["hit_ratio"], "ios": r["ios"]})
