"""A throttled block device that a FUSE mount's backing directory lives on, and whose busy
time can be read from /sys/block.

    with ThrottledDevice(workdir, size_bytes=2 << 30, read_iops=200, read_bps=40 << 20) as d:
        d.mount          # ext4 on the device, mounted
        d.io_ticks_ms()  # the device's busy time so far (/sys/block/<dev>/stat, io_ticks)
        subprocess.run(d.in_cgroup(["flashrt", "mount", ...]))   # its reads are throttled

Two stacked loop devices over a file in `workdir` (both with direct IO): `lower` over the
file, throttled by an io cgroup (reads: IOPS and bandwidth), and `upper` over `lower`, with
ext4 on it. The kernel throttles a bio before the throttled device counts it, so the lower
device's io_ticks never see the throttle's waits; the upper device's requests stay in flight
while their bios wait at the lower one, so its io_ticks are the busy time of a device that
the throttle makes slow: measured, on this machine, 200 reads of 4 KiB at 100 IOPS -> 1884 ms
of io_ticks in 1.90 s, 40 MiB at 20 MiB/s -> 1900 ms. The loop worker submits the lower
device's bios in the cgroup of the process that read, so only processes in `cgroups`
(`in_cgroup`) are throttled. The upper device's readahead is 1 MiB, the largest IO the
workloads make: the kernel then reads a random read's pages as one request (readahead 0
splits a buffered read into 4 KiB requests, each an IO the throttle charges).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from flashml.device.host import in_cgroups, io_cgroup, remove_cgroups, run, unmount_and_remove
from flashml.errors import UserError

#: the upper device's readahead (KiB)
READAHEAD_KIB = 1024


def unavailable() -> str | None:
    """Why the throttled device cannot be set up here (None: it can)."""
    if os.geteuid() != 0:
        return "needs root (loop devices, mount, io cgroup)"
    for tool in ("losetup", "mkfs.ext4", "mount", "umount"):
        if shutil.which(tool) is None:
            return f"{tool} not found"
    if not Path("/dev/loop-control").exists():
        return "no loop devices (/dev/loop-control missing)"
    if not (Path("/sys/fs/cgroup/blkio").is_dir()
            or "io" in _v2_controllers()):
        return "no blkio (v1) or io (v2) cgroup controller to throttle the device"
    return None


def _v2_controllers() -> list[str]:
    try:
        return (Path("/sys/fs/cgroup") / "cgroup.controllers").read_text().split()
    except OSError:
        return []


def io_ticks_ms(device: str) -> int:
    """Milliseconds the device has had IO in flight (field 10 of /sys/block/<dev>/stat)."""
    return int((Path("/sys/block") / Path(device).name / "stat").read_text().split()[9])


class ThrottledDevice:
    """The stacked, throttled loop devices with ext4 mounted; a context manager whose exit
    (and `close`) unmounts, removes the cgroup, detaches both devices and removes the file,
    each step tried even when an earlier one failed."""

    def __init__(self, workdir: str | os.PathLike[str], size_bytes: int = 2 << 30, *,
                 read_iops: int | None = 200, read_bps: int | None = 40 << 20) -> None:
        why = unavailable()
        if why:
            raise UserError(f"the throttled device cannot be set up here: {why}")
        if size_bytes < 64 << 20:
            raise UserError(f"device size {size_bytes} bytes: at least 64 MiB")
        if not (read_iops or read_bps):
            raise UserError("a throttled device needs read_iops or read_bps (IOs/s, bytes/s)")
        self.workdir = Path(workdir)
        self.size_bytes = size_bytes
        self.read_iops = read_iops
        self.read_bps = read_bps
        self.file: Path | None = None
        self.lower: str | None = None
        self.upper: str | None = None
        self.mount: Path | None = None
        self.cgroups: list[Path] = []

    def __enter__(self) -> ThrottledDevice:
        try:
            self.workdir.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(prefix="flashml-dev-", suffix=".img", dir=self.workdir)
            os.close(fd)
            self.file = Path(name)
            os.truncate(self.file, self.size_bytes)
            self.lower = run(["losetup", "--find", "--show", "--direct-io=on", str(self.file)],
                             "losetup").strip()
            self.upper = run(["losetup", "--find", "--show", "--direct-io=on", self.lower],
                             "losetup").strip()
            (Path("/sys/block") / Path(self.upper).name / "queue" / "read_ahead_kb"
             ).write_text(f"{READAHEAD_KIB}\n")
            run(["mkfs.ext4", "-q", "-F", "-E", "nodiscard", self.upper], "mkfs.ext4")
            self.mount = Path(tempfile.mkdtemp(prefix="flashml-dev-mnt-", dir=self.workdir))
            run(["mount", "-o", "noatime", self.upper, str(self.mount)], "mount")
            name = f"flashml-device-{os.getpid()}-{id(self)}"
            self.cgroups.append(io_cgroup(name, self.lower, self.read_iops, self.read_bps))
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def in_cgroup(self, cmd: list[str]) -> list[str]:
        """`cmd` run inside the throttling cgroup."""
        return in_cgroups(self.cgroups, cmd)

    def io_ticks_ms(self) -> int:
        assert self.upper is not None, "the device is not set up"
        return io_ticks_ms(self.upper)

    def close(self) -> None:
        remove_cgroups(self.cgroups)
        self.cgroups = []
        if self.mount is not None:
            unmount_and_remove(self.mount)
            self.mount = None
        for attr in ("upper", "lower"):
            dev = getattr(self, attr)
            if dev is not None:
                for _ in range(20):
                    if subprocess.run(["losetup", "-d", dev], capture_output=True).returncode == 0:
                        break
                    time.sleep(0.2)
                setattr(self, attr, None)
        if self.file is not None:
            self.file.unlink(missing_ok=True)
            self.file = None
