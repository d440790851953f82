"""The throttled device under the mount and the model check (flashml.device): the probe's
disk parameters, a tiny device-check's JSON, and the clean-up after a failed step. Needs
root, loop devices, an io cgroup, /dev/fuse and a flashrt built with libfuse3 (skips saying
which is missing)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from flashml.errors import UserError

from conftest import REPO as ROOT

FLASHRT = ROOT / "runtime" / "build" / "flashrt"


def _missing() -> str | None:
    from flashml.device.host import fuse_unavailable
    from flashml.device.throttled import unavailable

    return unavailable() or fuse_unavailable()


pytestmark = pytest.mark.skipif(_missing() is not None, reason=str(_missing()))


@pytest.fixture(scope="module")
def built() -> Path:
    subprocess.run(["make", "-s", "-C", str(ROOT / "runtime"), "build/flashrt"], check=True,
                   capture_output=True)
    return FLASHRT


def leftovers(workdir: Path) -> list[str]:
    """Loop devices over files in `workdir`, flashml-device cgroups of this process, and
    mounts under `workdir`."""
    found = [line for line in subprocess.run(["losetup", "-a"], capture_output=True,
                                             text=True).stdout.splitlines()
             if str(workdir) in line]
    for root in (Path("/sys/fs/cgroup/blkio"), Path("/sys/fs/cgroup")):
        if root.is_dir():
            found += [str(p) for p in root.glob(f"flashml-device-{os.getpid()}-*")]
    found += [line for line in Path("/proc/mounts").read_text().splitlines()
              if str(workdir) in line]
    return found


def test_the_probe_writes_positive_finite_disk_keys_the_simulator_reads(tmp_path) -> None:
    from flashml.device.throttled import ThrottledDevice
    from flashml.simulation import SimConfig, capacity_segments

    out = tmp_path / "disk.json"
    with ThrottledDevice(tmp_path / "w", 256 << 20, read_iops=200, read_bps=20 << 20) as dev:
        assert dev.upper is not None
        p = subprocess.run(dev.in_cgroup([sys.executable, "-m", "flashml.cli", "device", "probe",
                                          dev.upper, "--seconds", "3", "--out", str(out)]),
                           capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    disk = json.loads(out.read_text())
    assert set(disk) == {"t_seek_s", "bandwidth_bytes_per_s"}
    assert all(math.isfinite(v) and v > 0 for v in disk.values()), disk
    # the throttle is the bottleneck: no faster than its 20 MiB/s by more than its burst
    assert disk["bandwidth_bytes_per_s"] < 40 << 20, disk
    cfg = SimConfig(**disk)  # the simulator's own keys
    assert cfg.t_seek_s == disk["t_seek_s"] and capacity_segments(cfg) > 0
    assert leftovers(tmp_path) == []


def test_a_tiny_device_check_writes_both_sides_per_window(built, tmp_path) -> None:
    """`flashml device check` end to end (the disk given, not probed): strict JSON with both
    sides per window, every GET served, nothing left behind."""
    from runtime_support import fixed_range_trace

    trace = fixed_range_trace(tmp_path / "t.trace", n=300, blocks=40, seed=2, puts=False)
    disk, out = tmp_path / "disk.json", tmp_path / "device.json"
    disk.write_text(json.dumps({"t_seek_s": 2.5e-3, "bandwidth_bytes_per_s": 80.0 * (1 << 20)}))
    p = subprocess.run([sys.executable, "-m", "flashml.cli", "device", "check", "--trace",
                        str(trace), "--admission", "admitall", "--admission", "rejectx",
                        "--flash-mib", "16", "--windows", "4", "--device-mib", "256",
                        "--read-iops", "400", "--read-mibps", "80", "--disk", str(disk),
                        "--workdir", str(tmp_path / "w"), "-o", str(out)],
                       capture_output=True, text=True, timeout=600,
                       env={**os.environ, "FLASHML_FLASHRT": str(built)})
    assert p.returncode == 0, p.stderr
    assert "ranking by peak" in p.stdout, p.stdout
    r = json.loads(out.read_text(), parse_constant=lambda c: pytest.fail(f"not strict: {c}"))
    assert set(r["policies"]) == {"admitall", "rejectx"}
    assert r["disk"] == json.loads(disk.read_text()) and "probe" not in r
    for name, p in r["policies"].items():
        n = len(p["window_start_s"])
        assert n >= 3 and len(p["measured_busy_s"]) == len(p["simulated_dt_s"]) == n, (name, p)
        assert sum(p["measured_busy_s"]) > 0 and sum(p["simulated_dt_s"]) > 0, (name, p)
        assert p["mount"]["accesses"] == sum(p["gets"]) == 300, p
    assert sorted(r["ranking_measured"]) == sorted(r["ranking_simulated"]) == ["admitall",
                                                                                "rejectx"]
    assert leftovers(tmp_path) == []
    assert not [f for f in (tmp_path / "w").iterdir()]  # its temporary folder removed


def test_clean_up_after_a_failed_step(built, tmp_path) -> None:
    """A policy the mount refuses fails the run half-way: the mount point is released, the
    cgroup removed, both loop devices detached, the device file gone."""
    from runtime_support import fixed_range_trace

    from flashml.device.check import device_check
    from flashml.device.throttled import ThrottledDevice

    trace = fixed_range_trace(tmp_path / "t.trace", n=50, blocks=10, seed=2, puts=False)
    with pytest.raises(UserError, match="mount"):
        device_check(tmp_path / "w", built, trace,
                     {"admitall": ["--admission", "admitall"],
                      "broken": ["--admission", "no-such-policy"]},
                     flash_bytes=16 << 20, windows=2,
                     device_bytes=128 << 20, read_iops=400, read_bps=80 << 20,
                     disk={"t_seek_s": 2.5e-3, "bandwidth_bytes_per_s": 80.0 * (1 << 20)})
    assert leftovers(tmp_path) == []
    assert not list((tmp_path / "w").glob("flashml-dev-*"))
    with pytest.raises(RuntimeError), ThrottledDevice(tmp_path / "x", 128 << 20) as dev:
        assert dev.mount is not None and os.path.ismount(dev.mount)
        raise RuntimeError("a step failed")
    assert leftovers(tmp_path) == [] and not list((tmp_path / "x").glob("flashml-dev-*"))
