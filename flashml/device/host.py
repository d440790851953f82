"""Host helpers shared by the device testbeds (flashml.systems.kml.testbed,
flashml.device.throttled): running a tool with a clear error, and cgroups that limit memory
or throttle a block device's reads (cgroup v1's controllers where mounted, else v2's)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from flashml.errors import UserError


def run(cmd: list[str], what: str, timeout: float = 600) -> str:
    """`cmd`'s stdout; a UserError naming `what` on a failure or a timeout."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise UserError(f"{what}: timed out after {timeout:.0f} s") from None
    if p.returncode != 0:
        raise UserError(f"{what} failed (exit {p.returncode}): "
                        f"{(p.stderr or p.stdout).strip()[-500:]}")
    return p.stdout


def cgroup(name: str, v1_controller: str, v2_controller: str, why: str) -> tuple[Path, bool]:
    """A new cgroup `name` under cgroup v1's hierarchy of `v1_controller` where mounted, else
    under cgroup v2's root (which must offer `v2_controller`); and whether it is v1."""
    v1 = Path("/sys/fs/cgroup") / v1_controller
    if v1.is_dir():
        (v1 / name).mkdir(exist_ok=True)
        return v1 / name, True
    root = Path("/sys/fs/cgroup")
    if v2_controller not in (root / "cgroup.controllers").read_text().split():
        raise UserError(f"no {v2_controller} cgroup controller: cannot {why}")
    (root / name).mkdir(exist_ok=True)
    return root / name, False


def memory_cgroup(name: str, limit: int) -> Path:
    """A memory cgroup limited to `limit` bytes (cgroup v1's memory controller, else v2)."""
    cg, v1 = cgroup(name, "memory", "memory", "limit the page cache")
    (cg / ("memory.limit_in_bytes" if v1 else "memory.max")).write_text(f"{limit}\n")
    return cg


def dev_numbers(device: str) -> str:
    """"major:minor" of a block device node."""
    st = os.stat(device)
    return f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"


def io_cgroup(name: str, device: str, iops: int | None, bps: int | None) -> Path:
    """A blkio cgroup throttling reads of `device` (cgroup v1's blkio, else v2's io.max)."""
    dev = dev_numbers(device)
    cg, v1 = cgroup(name, "blkio", "io", "throttle the loop device")
    if v1:
        if iops:
            (cg / "blkio.throttle.read_iops_device").write_text(f"{dev} {iops}\n")
        if bps:
            (cg / "blkio.throttle.read_bps_device").write_text(f"{dev} {bps}\n")
    else:
        limits = " ".join(x for x in (f"riops={iops}" if iops else "",
                                      f"rbps={bps}" if bps else "") if x)
        (cg / "io.max").write_text(f"{dev} {limits}\n")
    return cg


def in_cgroups(cgroups: list[Path], cmd: list[str]) -> list[str]:
    """`cmd` started inside `cgroups`: a shell joins them, then becomes the command."""
    if not cgroups:
        return list(cmd)
    joins = " && ".join(f'echo $$ > {cg / "cgroup.procs"}' for cg in cgroups)
    return ["sh", "-c", f'{joins} && exec "$@"', "sh", *cmd]


def remove_cgroups(cgroups: list[Path]) -> None:
    """Remove `cgroups`, retrying a moment for one whose process just exited (the kernel may
    still count it); one that cannot go is left, never an error (clean-up must go on)."""
    for cg in cgroups:
        for _ in range(50):
            try:
                cg.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.1)


def unmount_and_remove(mount: Path) -> None:
    """Unmount `mount` if mounted (lazily when a plain unmount fails) and remove the folder."""
    if os.path.ismount(mount):
        for args in (["umount", str(mount)], ["umount", "-l", str(mount)]):
            if subprocess.run(args, capture_output=True).returncode == 0:
                break
            time.sleep(0.5)
    shutil.rmtree(mount, ignore_errors=True)


def fuse_unavailable() -> str | None:
    """Why a FUSE mount (`flashrt mount`) cannot run here, or None when it can."""
    if os.geteuid() != 0:
        return "needs root (mounting a FUSE file system and its clean-up)"
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse on this machine (a container needs --device /dev/fuse)"
    if not shutil.which("fusermount3"):
        return "no fusermount3 (Debian package fuse3; .ci/run installs it)"
    if subprocess.run(["pkg-config", "--exists", "fuse3"], capture_output=True).returncode != 0:
        return ("flashrt is built without FUSE here: pkg-config finds no libfuse3 "
                "(Debian libfuse3-dev)")
    return None
