"""The simulator's disk-head time checked against a real device (flashml.device.check): a
generated Tectonic-like trace's reads played with `flashrt play` through `flashrt mount`
over a throttled loop device, once per policy (admit-all, RejectX, the Baleen-style demo
bundle), the device's busy time (io_ticks) per window beside the simulator's DT for the trace
the mount recorded, at the probed seek time and bandwidth (what `flashml device check` does
for any trace and policies).

    make device-bench    # flock /tmp/flashml-timing.lock .venv/bin/python bench/bench_device.py
    .venv/bin/python bench/bench_device.py --quick --out /tmp/device.json   # a small run

Then fio (random reads, Zipf) and db_bench readrandom run through the mount with RejectX
and the bundle, the device's busy time measured around each (not simulated). Each window
of the trace (its day cut into WINDOWS) is played back to back, so the
throttle is the bottleneck (flashml.device.check says why).
Results go to bench/results/device.json with the load average beside them. Needs root, loop
devices, an io cgroup controller, /dev/fuse and a flashrt built with libfuse3; without them
it says which is missing and writes nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from machine import machine

ROOT = Path(__file__).resolve().parents[1]
FLASHRT = ROOT / "runtime" / "build" / "flashrt"
OUT = ROOT / "bench" / "results" / "device.json"
SEG = 128 * 1024
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "runtime"))  # test_runtime


def missing() -> str | None:
    from flashml.device.host import fuse_unavailable
    from flashml.device.throttled import unavailable

    return unavailable() or fuse_unavailable()


def sh(*args: object) -> subprocess.CompletedProcess[str]:
    p = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{args[:3]} failed: {p.stderr[-2000:]}")
    return p


def make_trace(d: Path, accesses: int, keep_every: int) -> Path:
    from test_runtime import small_trace

    raw, trace = d / "gen.trace", d / "workload.trace"
    sh(sys.executable, "-m", "flashml.cli", "trace", "generate", "--preset", "region1-like",
       "--seed", "0", "--accesses", accesses, "--days", "1", "--quiet", "-o", raw)
    small_trace(raw, trace, keep_every=keep_every, max_size=1 << 20)
    return trace


def make_bundle(d: Path, trace: Path, admit_threshold: float = 0.5,
                name: str = "bundle") -> Path:
    """The demo policy (LightGBM admission + prefetch, tests/demo_policy.py) trained on the
    workload trace and compiled by `flashml compile`."""
    from flashml.trace.ingest import load_trace

    from demo_policy import write_demo_bundle

    df, _ = load_trace(trace, "tectonic")
    write_demo_bundle(df, d / f"models-{name}", admit_threshold=admit_threshold)
    sh(sys.executable, "-m", "flashml.cli", "compile", "--model-dir", d / f"models-{name}",
       "-o", d / name, "--no-log")
    return d / name


def equal_write_threshold(trace: Path, bundle: Path, flash_bytes: int) -> dict[str, Any]:
    """The bundle's admission threshold at which the simulator has it write as much flash
    (admitted segments, prefetches included) as RejectX on the workload trace: a bisection
    over the threshold (more threshold, fewer admissions)."""
    from flashml.simulation import SimConfig, simulate, simulate_policy
    from flashml.trace.ingest import load_trace

    df, _ = load_trace(trace, "tectonic", sample_ratio=100.0)
    cfg = SimConfig(capacity_segments=flash_bytes // SEG, sample_ratio=100.0, disks=1,
                    warmup_s=0.0, eviction="lru", admission="rejectx")
    target = int(simulate(df, cfg).metrics["admitted_segments"])

    def written(t: float) -> int:
        return int(simulate_policy(df, bundle, cfg, threshold=t).metrics["admitted_segments"])

    lo, hi, tried = 0.5, 1.0, {}
    for _ in range(12):
        mid = (lo + hi) / 2
        tried[round(mid, 6)] = w = written(mid)
        lo, hi = (mid, hi) if w > target else (lo, mid)
    best = min(tried, key=lambda t: abs(tried[t] - target))
    return {"rejectx_admitted_segments": target, "threshold": best,
            "bundle_admitted_segments": tried[best], "tried": tried}


def equal_write_rate(d: Path, trace: Path, base: Path, flash_bytes: int, windows: int,
                     lock: Path | None = None) -> dict[str, Any]:
    """RejectX beside the demo bundle recompiled at the admission threshold where the
    simulator has both write the same flash: each one's measured peak busy time and the
    simulator's peak DT, and the bundle's change vs RejectX on both sides. RejectX runs
    first; the threshold is calibrated on the trace its mount recorded, at the mount's times
    (the kernel's FUSE reads, at most 128 KiB each, when the mount served them: what the
    policy's features see; the bundle's own run is paced by its own misses), then the
    bundle runs with RejectX's probed disk. `lock`: the timing lock, taken around the device
    runs only (the calibration is not timed)."""
    import contextlib
    import fcntl

    from flashml.device.check import device_check

    def on_device(work: Path, policies: dict[str, list[str]],
                  disk: dict[str, float] | None) -> dict[str, Any]:
        with contextlib.ExitStack() as stack:
            if lock is not None:
                fcntl.flock(stack.enter_context(open(lock, "a")), fcntl.LOCK_EX)
                os.setpriority(os.PRIO_PROCESS, 0, 0)  # the lock holder gets the CPUs (root)
            before = os.getloadavg()
            r = device_check(work, FLASHRT, trace, policies, flash_bytes=flash_bytes,
                             windows=windows, device_bytes=16 << 30, read_iops=200,
                             read_bps=40 << 20, disk=disk)
            r["load_avg"] = {"before": before, "after": os.getloadavg()}
        return r

    rx = on_device(d / "dev-eq-rejectx", {"rejectx": ["--admission", "rejectx"]}, None)
    # the recorded times (the mount's clock), not the retimed ones: the times the policy's
    # features saw
    cal = equal_write_threshold(d / "dev-eq-rejectx" / "served-rejectx.trace", base,
                                flash_bytes)
    eq = make_bundle(d, trace, admit_threshold=cal["threshold"], name="bundle_equal_write")
    bb = on_device(d / "dev-eq-bundle", {"baleen_bundle_equal_write": ["--bundle", str(eq)]},
                   rx["disk"])
    pol = {**rx["policies"], **bb["policies"]}
    a, b = pol["rejectx"], pol["baleen_bundle_equal_write"]
    change = {side: round(b[f"peak_{side}_s"] / a[f"peak_{side}_s"] - 1, 4)
              for side in ("measured", "simulated") if a[f"peak_{side}_s"] > 0}
    return {"calibration": cal, "disk": rx["disk"], "policies": pol,
            "load_avg": {"rejectx": rx["load_avg"], "bundle": bb["load_avg"]},
            "flash_written_bytes": {n: p["mount"]["flash_written_bytes"]
                                    for n, p in pol.items()},
            "bundle_peak_vs_rejectx": change}


FIO_FILE_MIB = 512


def applications(flashrt: Path, policies: dict[str, list[str]], flash_bytes: int,
                 work: Path) -> Any:
    """fio (random 128 KiB reads, Zipf 1.1) and db_bench readrandom (read-only, its database
    written straight onto the device first) through the mount, once per policy; the device's
    busy time around each. A run that fails is recorded with its error."""
    from flashml.device.check import app_run
    from flashml.errors import UserError

    def run(dev: Any, backing: Path) -> dict[str, Any]:
        sh("fio", "--name=lay", f"--filename={backing / 'fio.dat'}", f"--size={FIO_FILE_MIB}M",
           "--rw=write", "--bs=1M", "--ioengine=psync", "--end_fsync=1")
        db = backing / "db"
        sh("db_bench", "--benchmarks=fillrandom,compact", f"--db={db}", "--num=200000",
           "--value_size=1000", "--compression_type=none", "--threads=1")
        jobs = {
            "fio_randread_zipf": lambda mnt: [
                "fio", "--name=zipf", f"--filename={mnt / 'fio.dat'}", f"--size={FIO_FILE_MIB}M",
                "--rw=randread", "--bs=128k", "--random_distribution=zipf:1.1",
                "--io_size=256M", "--ioengine=psync", "--randseed=7", "--output-format=json"],
            "db_bench_readrandom": lambda mnt: [
                "db_bench", "--benchmarks=readrandom", f"--db={mnt / 'db'}", "--readonly=1",
                "--use_existing_db=1", "--num=200000", "--reads=20000", "--value_size=1000",
                "--cache_size=1048576", "--threads=1", "--seed=7"],
        }
        out: dict[str, Any] = {}
        for job, cmd in jobs.items():
            for name, args in policies.items():
                try:
                    r = app_run(dev, flashrt, backing, f"{job}-{name}", args, flash_bytes,
                                work, cmd)
                except UserError as e:
                    out.setdefault(job, {})[name] = {"error": str(e)[-600:]}
                    continue
                text = r.pop("stdout")
                if job.startswith("fio"):
                    rd = json.loads(text[text.index("{"):])["jobs"][0]["read"]
                    r["fio"] = {"iops": round(rd["iops"], 1), "bw_kib_s": rd["bw"],
                                "clat_p50_us": rd["clat_ns"]["percentile"]["50.000000"] / 1e3,
                                "clat_p99_us": rd["clat_ns"]["percentile"]["99.000000"] / 1e3}
                else:
                    from flashml.systems.kml.testbed import parse_db_bench
                    r["db_bench"] = parse_db_bench(text, "readrandom")
                out.setdefault(job, {})[name] = r
        return out

    return run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a small trace, two policies")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--equal-write-only", action="store_true",
                    help="run only the equal-flash-write comparison and merge it into --out "
                    "(its other results kept)")
    ap.add_argument("--workdir", type=Path, default=None,
                    help="where the device file and flash files go (default: a temp dir)")
    args = ap.parse_args()
    why = missing()
    if why:
        print(f"bench_device: skipped: {why}", file=sys.stderr)
        return 0
    sh("make", "-s", "-C", ROOT / "runtime", "all")
    from flashml.device.check import device_check

    accesses, keep, windows = (4000, 3, 8) if args.quick else (10000, 3, 12)
    if args.equal_write_only:
        return _equal_write_only(args.out, accesses, keep, windows, args.workdir)
    load_before = os.getloadavg()
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="flashml-bench-device-",
                                     dir=args.workdir) as tmp:
        d = Path(tmp)
        trace = make_trace(d, accesses, keep)
        policies: dict[str, list[str]] = {"admitall": ["--admission", "admitall"],
                                          "rejectx": ["--admission", "rejectx"]}
        bundle = None if args.quick else make_bundle(d, trace)
        if bundle is not None:
            policies["baleen_bundle"] = ["--bundle", str(bundle)]
        r: dict[str, Any] = device_check(
            d / "dev", FLASHRT, trace, policies,
            flash_bytes=(32 << 20) if args.quick else (128 << 20), windows=windows,
            device_bytes=16 << 30, read_iops=200, read_bps=40 << 20,
            on_device=None if args.quick else applications(
                FLASHRT, {k: v for k, v in policies.items() if k != "admitall"}, 128 << 20,
                d / "dev"))
        if bundle is not None:  # make device-bench holds the timing lock already
            r["equal_write_rate"] = equal_write_rate(d, trace, bundle, 128 << 20, windows)
        span = _span(trace)
    r["workload"] = {"preset": "region1-like", "seed": 0, "accesses_generated": accesses,
                     "keep_every_block": keep, "max_io_bytes": 1 << 20,
                     "trace_span_s": span}
    r["wall_s"] = round(time.time() - started, 1)
    r["machine"] = machine()
    r["load_avg_before"] = load_before
    r["load_avg_after"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    from flashml.files import atomic_path

    with atomic_path(args.out) as t:
        Path(t).write_text(json.dumps(r, indent=1) + "\n")
    for name, p in r["policies"].items():
        print(f"{name:14s} peak measured {p['peak_measured_s']:.3f} s  simulated "
              f"{p['peak_simulated_s']:.3f} s  ({p['peak_rel_error']:+.1%})  "
              f"spearman {p['spearman']}")
    print("ranking measured", r["ranking_measured"], "simulated", r["ranking_simulated"])
    return 0


def _equal_write_only(out: Path, accesses: int, keep: int, windows: int,
                      workdir: Path | None) -> int:
    from flashml.files import atomic_path

    doc = json.loads(out.read_text())
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="flashml-bench-device-eq-", dir=workdir) as tmp:
        d = Path(tmp)
        trace = make_trace(d, accesses, keep)
        eq = equal_write_rate(d, trace, make_bundle(d, trace), 128 << 20, windows,
                              lock=Path("/tmp/flashml-timing.lock"))
    eq["wall_s"] = round(time.time() - started, 1)
    doc["equal_write_rate"] = eq
    with atomic_path(out) as t:
        Path(t).write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps({k: eq[k] for k in ("calibration", "flash_written_bytes",
                                         "bundle_peak_vs_rejectx")}, indent=1))
    return 0


def _span(trace: Path) -> float:
    t = [float(line.split()[3]) for line in trace.read_text().splitlines()
         if not line.startswith("#")]
    return max(t) - min(t)


if __name__ == "__main__":
    sys.exit(main())
