"""The model check: a trace's reads played through `flashrt mount` over a throttled device,
the device's measured busy time per window beside the simulator's disk-head time (DT) for
the trace the mount recorded, with the probed disk parameters.

    r = device_check(workdir, flashrt, trace, {"rejectx": ["--admission", "rejectx"], ...},
                     flash_bytes=64 << 20, windows=12, device_bytes=16 << 30,
                     read_iops=200, read_bps=40 << 20)

The throttle (blk-throttle) is a rate limit, not a service time: a read arriving at an idle
device passes at once and only reads beyond the rate wait. Played at the trace's pace, a
lightly loaded device therefore shows almost no busy time whatever the reads cost (measured:
60 MiB in 15 s at a 40 MiB/s limit, 0.13 s of io_ticks). So the trace is cut into `windows`
windows of its own time and each window's GETs are played back to back (`flashrt play
--no-pace`), one window after the other, through one mount (the cache carries over): the
throttle is then the bottleneck and the device's busy time in a window (io_ticks, the
upper loop device's; flashml.device.throttled) is what that window's backend reads cost.
The mount runs in the throttling cgroup, so its backend reads are throttled.

The simulator runs the mount's --trace-out (the keys and order the mount served) with each
access's time set back to the workload GET's time, so its windows are the played windows;
the policy is the simulator's admission of the same name or the bundle (simulate_policy); at
the probed t_seek_s and bandwidth_bytes_per_s, one disk, sample ratio 100 (nothing sampled),
no warm-up. Per policy: the two series, their peaks, the peak's relative error, Spearman's
rho over windows, the mount's and the simulator's counts; across policies: the ranking by
peak on both sides.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from flashml.device.throttled import ThrottledDevice
from flashml.errors import UserError

SEG = 128 * 1024
GUARD_S = 1800.0


def _ranks(a: np.ndarray) -> np.ndarray:
    """Ranks 1..n, ties given their average rank."""
    order = np.argsort(a, kind="stable")
    r = np.empty(len(a))
    r[order] = np.arange(1, len(a) + 1)
    _, inv = np.unique(a, return_inverse=True)
    sums = np.bincount(inv, weights=r)
    return sums[inv] / np.bincount(inv)[inv]


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rho (ties: average ranks); nan when either side is constant."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(a) < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    return float(np.corrcoef(_ranks(a), _ranks(b))[0, 1])


def _wait(what: str, done: Any, proc: subprocess.Popen | None, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while not done():
        if proc is not None and proc.poll() is not None:
            raise UserError(f"{what}: the mount exited ({proc.returncode}): "
                            f"{proc.stderr.read() if proc.stderr else ''}")
        if time.monotonic() > end:
            raise UserError(f"{what}: not done after {timeout:.0f} s")
        time.sleep(0.01)


def split_windows(trace: Path, work: Path, windows: int) -> tuple[list[Path], np.ndarray,
                                                                      float, float]:
    """The trace's lines cut into `windows` files by time (equal spans of trace time; the
    header kept in each); the GETs' (time, size) rows in order, the first time and the
    window length."""
    from flashml.config import GET_OPS

    header, rows = [], []
    with open(trace) as f:
        for line in f:
            if line.startswith("#"):
                header.append(line)
            elif line.strip():
                rows.append(line)
    if not rows:
        raise UserError(f"{trace}: no accesses")
    times = np.asarray([float(r.split()[3]) for r in rows])
    t0, span = float(times.min()), float(times.max() - times.min())
    window_s = span / windows if span > 0 else 1.0
    k = np.minimum(((times - t0) // window_s).astype(int), windows - 1)
    files = []
    for w in range(windows):
        path = work / f"window-{w:03d}.trace"
        with open(path, "w") as f:
            f.writelines(header)
            f.writelines(r for r, kk in zip(rows, k, strict=True) if kk == w)
        files.append(path)
    get = np.asarray([int(r.split()[4]) in GET_OPS for r in rows])
    sizes = np.asarray([int(r.split()[2]) for r in rows], dtype=float)
    return files, np.stack([times[get], sizes[get]], axis=1), t0, window_s


@contextlib.contextmanager
def _mounted(dev: ThrottledDevice, flashrt: Path, backing: Path, name: str,
             policy_args: list[str], flash_bytes: int, work: Path,
             extra: list[str]) -> Iterator[tuple[Path, subprocess.Popen]]:
    """`flashrt mount` of `backing` with one policy, in the device's throttling cgroup, its
    flash file under `work` and nothing of the backing in the page cache to start: yields
    (mount point, process) once the mount is up; unmounts (SIGTERM, the exit checked when
    the body ended normally) and removes the flash file and its journal on every path."""
    mnt, flash = work / f"mnt-{name}", work / f"flash-{name}.img"
    mnt.mkdir(parents=True, exist_ok=True)
    flash.unlink(missing_ok=True)
    os.sync()
    for f in backing.rglob("*"):
        if f.is_file():
            fd = os.open(f, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
    proc = subprocess.Popen(dev.in_cgroup([
        str(flashrt), "mount", str(backing), str(mnt), "--flash", str(flash), "--flash-bytes",
        str(flash_bytes), *policy_args, *extra, "-f"]),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _wait(f"mount {name}", lambda: os.path.ismount(mnt), proc)
        yield mnt, proc
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        if proc.returncode != 0:
            raise UserError(f"the {name} mount exited {proc.returncode}: "
                            f"{proc.stderr.read() if proc.stderr else ''}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if os.path.ismount(mnt):
            subprocess.run(["fusermount3", "-u", "-z", str(mnt)], capture_output=True)
        flash.unlink(missing_ok=True)
        Path(f"{flash}.journal").unlink(missing_ok=True)


def run_policy(dev: ThrottledDevice, flashrt: Path, backing: Path, windows: list[Path],
               name: str, policy_args: list[str], flash_bytes: int,
               work: Path) -> dict[str, Any]:
    """One policy's run: mounted in the cgroup, each window's GETs played back to back
    through it, unmounted. Per window: wall seconds and the device's busy seconds."""
    stats, recorded = work / f"stats-{name}.json", work / f"served-{name}.trace"
    img = backing / "blocks.img"
    wall, busy, gets = [], [], []
    with _mounted(dev, flashrt, backing, name, policy_args, flash_bytes, work,
                  ["--stats-out", str(stats), "--trace-out", str(recorded)]) as (mnt, _):
        for w in windows:
            t, ticks = time.monotonic(), dev.io_ticks_ms()
            p = subprocess.run([str(flashrt), "play", "--trace", str(w), "--to", str(mnt),
                                "--map", f"{img}.map", "--no-pace", "--json"],
                               capture_output=True, text=True, timeout=GUARD_S)
            if p.returncode != 0:
                raise UserError(f"flashrt play through the {name} mount failed: {p.stderr}")
            busy.append((dev.io_ticks_ms() - ticks) / 1000.0)
            wall.append(time.monotonic() - t)
            gets.append(int(json.loads(p.stdout)["gets"]))
    return {"mount": json.loads(stats.read_text()), "recorded": recorded,
            "wall_s": wall, "busy_s": busy, "gets": gets}


def app_run(dev: ThrottledDevice, flashrt: Path, backing: Path, name: str,
            policy_args: list[str], flash_bytes: int, work: Path,
            cmd: Any) -> dict[str, Any]:
    """An application on the mount: `cmd(mountpoint)` (a command line) run once with the
    policy's mount over the device; its stdout, wall seconds, the device's busy seconds and
    the mount's counters."""
    stats = work / f"app-stats-{name}.json"
    with _mounted(dev, flashrt, backing, f"app-{name}", policy_args, flash_bytes, work,
                  ["--stats-out", str(stats)]) as (mnt, _):
        t, ticks = time.monotonic(), dev.io_ticks_ms()
        p = subprocess.run([str(c) for c in cmd(mnt)], capture_output=True, text=True,
                           timeout=GUARD_S)
        busy, wall = (dev.io_ticks_ms() - ticks) / 1000.0, time.monotonic() - t
        if p.returncode != 0:
            raise UserError(f"{name}: {cmd(mnt)[0]} failed: {(p.stderr or p.stdout)[-800:]}")
    m = json.loads(stats.read_text())
    return {"stdout": p.stdout, "wall_s": round(wall, 3), "busy_s": round(busy, 3),
            "mount": {k: m.get(k) for k in ("accesses", "hits", "backend_ios",
                                            "backend_bytes", "admitted_segments",
                                            "prefetched_segments", "flash_written_bytes")}}


def retime(recorded: Path, gets: np.ndarray, out: Path) -> Path:
    """The recorded trace with each access at the time of the workload GET it served. The
    kernel cuts a read into FUSE reads of at most 128 KiB (and the mount a FUSE read at a
    block's end), so one GET is one or more consecutive recorded accesses whose sizes add up
    to the GET's."""
    with open(recorded) as f:
        lines = f.readlines()
    with open(out, "w") as f:
        f.writelines(ln for ln in lines if ln.startswith("#"))
        i, left = 0, 0.0
        for ln in lines:
            if ln.startswith("#"):
                continue
            while left <= 0:
                if i >= len(gets):
                    raise UserError(f"{recorded}: more bytes recorded than the workload's "
                                    f"{len(gets)} GETs read")
                left, t = float(gets[i][1]), float(gets[i][0])
                i += 1
            x = ln.split()
            left -= float(x[2])
            x[3] = repr(t)
            f.write(" ".join(x) + "\n")
    if i != len(gets) or left != 0:
        raise UserError(f"{recorded}: the recorded reads cover {i} of the workload's "
                        f"{len(gets)} GETs ({left:g} bytes short in the last)")
    return out


def simulate_recorded(recorded: Path, policy_args: list[str], flash_bytes: int,
                      disk: dict[str, float], window_s: float) -> tuple[Any, np.ndarray]:
    """The simulator on the mount's recorded trace: (result, DT seconds per window)."""
    from flashml.simulation import SimConfig, simulate, simulate_policy
    from flashml.trace.ingest import load_trace

    df, _ = load_trace(recorded, "tectonic", sample_ratio=100.0)
    cfg = SimConfig(capacity_segments=flash_bytes // SEG, sample_ratio=100.0, disks=1,
                    window_s=window_s, warmup_s=0.0, eviction="lru",
                    t_seek_s=disk["t_seek_s"],
                    bandwidth_bytes_per_s=disk["bandwidth_bytes_per_s"],
                    admission=("admitall" if "--bundle" in policy_args
                               else policy_args[policy_args.index("--admission") + 1]))
    if "--bundle" in policy_args:
        res = simulate_policy(df, Path(policy_args[policy_args.index("--bundle") + 1]), cfg)
    else:
        res = simulate(df, cfg)
    return res, np.asarray(res.series["dt_util"], dtype=float) * window_s


def compare(measured: np.ndarray, simulated: np.ndarray) -> dict[str, Any]:
    pm, ps = float(measured.max()), float(simulated.max())
    return {"peak_measured_s": round(pm, 4), "peak_simulated_s": round(ps, 4),
            "peak_rel_error": round((ps - pm) / pm, 4) if pm > 0 else None,
            "mean_measured_s": round(float(measured.mean()), 4),
            "mean_simulated_s": round(float(simulated.mean()), 4),
            "spearman": round(spearman(measured, simulated), 4)}


def device_check(workdir: Path, flashrt: Path, trace: Path, policies: dict[str, list[str]],
                 *, flash_bytes: int, windows: int, device_bytes: int,
                 read_iops: int | None, read_bps: int | None, probe_s: float = 8.0,
                 disk: dict[str, float] | None = None,
                 on_device: Any = None) -> dict[str, Any]:
    """Set up the throttled device, lay the trace's blocks out on it, probe it (unless `disk`
    is given), run every policy; the whole comparison as one JSON-able dict. `on_device(dev,
    backing)`, when given, runs on the device afterwards (application runs); its result goes
    under "applications"."""
    import sys

    workdir.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {"flash_bytes": flash_bytes, "windows": windows,
                           "throttle": {"read_iops": read_iops, "read_bps": read_bps},
                           "policies": {}}
    files, gets, t0, window_s = split_windows(trace, workdir, windows)
    out["window_trace_s"] = window_s
    with ThrottledDevice(workdir, device_bytes, read_iops=read_iops, read_bps=read_bps) as dev:
        assert dev.mount is not None and dev.upper is not None
        backing = dev.mount / "backing"
        backing.mkdir()
        p = subprocess.run([str(flashrt), "prepare-backing", "--backing",
                            str(backing / "blocks.img"), "--trace", str(trace)],
                           capture_output=True, text=True, timeout=GUARD_S)
        if p.returncode != 0:
            raise UserError(f"flashrt prepare-backing failed: {p.stderr}")
        out["backing"] = json.loads(p.stdout)
        if disk is None:
            probe_out = workdir / "disk.json"
            p = subprocess.run(dev.in_cgroup([sys.executable, "-m", "flashml.cli", "device",
                                              "probe", dev.upper, "--seconds", str(probe_s),
                                              "--out", str(probe_out)]),
                               capture_output=True, text=True, timeout=GUARD_S)
            if p.returncode != 0:
                raise UserError(f"the probe failed: {p.stderr}")
            out["probe"] = json.loads(p.stdout)
            disk = json.loads(probe_out.read_text())
        out["disk"] = disk
        for name, args in policies.items():
            r = run_policy(dev, flashrt, backing, files, name, args, flash_bytes, workdir)
            timed = retime(r["recorded"], gets, workdir / f"served-{name}.retimed.trace")
            res, sim_dt = simulate_recorded(timed, args, flash_bytes, disk, window_s)
            sim_dt = np.pad(sim_dt, (0, max(0, windows - len(sim_dt))))[:windows]
            measured = np.asarray(r["busy_s"])
            m = r["mount"]
            out["policies"][name] = {
                "window_start_s": [round(t0 + w * window_s, 3) for w in range(windows)],
                "gets": r["gets"],
                "wall_s": [round(x, 4) for x in r["wall_s"]],
                "measured_busy_s": [round(float(x), 4) for x in measured],
                "simulated_dt_s": [round(float(x), 4) for x in sim_dt],
                **compare(measured, sim_dt),
                "mount": {k: m.get(k) for k in (
                    "accesses", "hits", "backend_ios", "backend_bytes", "admitted_segments",
                    "prefetched_segments", "flash_written_bytes", "evicted_regions",
                    "capacity_segments", "backend_wall_s", "backend_dt_s")},
                "simulator": {k: res.metrics.get(k) for k in (
                    "backend_ios", "backend_bytes", "admitted_segments", "prefetched_segments",
                    "flash_write_rate_mbps")},
            }
        if on_device is not None:
            out["applications"] = on_device(dev, backing)
    names = list(out["policies"])
    by = out["policies"]
    out["ranking_measured"] = sorted(names, key=lambda n: by[n]["peak_measured_s"])
    out["ranking_simulated"] = sorted(names, key=lambda n: by[n]["peak_simulated_s"])
    out["ranking_equal"] = out["ranking_measured"] == out["ranking_simulated"]
    for n in names:
        rho = by[n]["spearman"]
        by[n]["spearman"] = None if rho is None or math.isnan(rho) else rho
    return out
