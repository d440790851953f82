"""KML's data collection in user space: the kernel's `mm_filemap_add_to_page_cache`
tracepoint (each page the page cache adds, with its file offset), for one block device only,
read through tracefs in its own tracing instance, cut into windows of 1 s of trace time and
turned into the paper's features.

    with PageCacheTracer("/dev/loop0") as tr:
        ... run the workload ...
    rows = window_features(tr.events, readahead_kib=128)

KML reads the same tracepoint in the kernel; here it is read from user space (trace_pipe), so
the model's inputs are what a user-space tuner can see. Needs root and tracefs (mounted at
/sys/kernel/tracing, or mounted here for the duration); `unavailable()` says why not.
"""

from __future__ import annotations

import os
import re
import select
import subprocess
import tempfile
import threading
from pathlib import Path

from flashml.errors import UserError
from flashml.features.readahead import window_features  # noqa: F401  (the features of events)

EVENT = "filemap/mm_filemap_add_to_page_cache"
_LINE = re.compile(r"\s(?P<ts>\d+\.\d+): mm_filemap_add_to_page_cache: dev \d+:\d+ "
                   r"ino (?P<ino>[0-9a-f]+) pfn=0x[0-9a-f]+ ofs=(?P<ofs>\d+)")
PAGE = 4096


def _tracefs() -> Path | None:
    for p in (Path("/sys/kernel/tracing"), Path("/sys/kernel/debug/tracing")):
        if (p / "events").is_dir():
            return p
    return None


def unavailable() -> str | None:
    if os.geteuid() != 0:
        return "needs root (tracefs)"
    if _tracefs() is None and subprocess.run(["grep", "-qw", "tracefs", "/proc/filesystems"]
                                             ).returncode != 0:
        return "no tracefs in this kernel"
    return None


def kernel_dev(device: str) -> int:
    """The kernel's internal dev_t of a block device (major << 20 | minor), as tracepoints
    print it."""
    st = os.stat(device)
    return (os.major(st.st_rdev) << 20) | os.minor(st.st_rdev)


class PageCacheTracer:
    """Records (time s, inode, page index) of every page added to the page cache from
    `device`'s filesystem while open. A context manager; cleans up its tracing instance
    (and a tracefs it mounted) even on failure."""

    def __init__(self, device: str) -> None:
        why = unavailable()
        if why:
            raise UserError(f"cannot trace the page cache here: {why}")
        self.device = device
        self.events: list[tuple[float, int, int]] = []
        self._mounted: Path | None = None
        self._instance: Path | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._fd: int | None = None

    def __enter__(self) -> PageCacheTracer:
        try:
            root = _tracefs()
            if root is None:
                self._mounted = Path(tempfile.mkdtemp(prefix="flashml-tracefs-"))
                subprocess.run(["mount", "-t", "tracefs", "nodev", str(self._mounted)],
                               check=True, capture_output=True)
                root = self._mounted
            self._instance = root / "instances" / f"flashml-kml-{os.getpid()}-{id(self)}"
            self._instance.mkdir()
            ev = self._instance / "events" / EVENT
            # the device's filesystem's pages (s_dev), and the raw device's own pages: those
            # belong to the device's inode in the kernel's block-device filesystem (s_dev
            # 0:N), whose inode number is the device's dev_t (as flashrt tune-readahead does)
            k = kernel_dev(self.device)
            (ev / "filter").write_text(f"s_dev == {k} || (s_dev < 1048576 && i_ino == {k})\n")
            (ev / "enable").write_text("1\n")
            self._fd = os.open(self._instance / "trace_pipe", os.O_RDONLY | os.O_NONBLOCK)
            self._thread = threading.Thread(target=self._read, daemon=True)
            self._thread.start()
        except BaseException:
            self.close()
            raise
        return self

    def _read(self) -> None:
        buf = b""
        assert self._fd is not None
        while True:
            ready, _, _ = select.select([self._fd], [], [], 0.1)
            chunk = b""
            if ready:
                try:
                    chunk = os.read(self._fd, 1 << 16)
                except BlockingIOError:
                    chunk = b""
            if chunk:
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for raw in lines:
                    m = _LINE.search(raw.decode(errors="replace"))
                    if m:
                        self.events.append((float(m.group("ts")), int(m.group("ino"), 16),
                                            int(m.group("ofs")) // PAGE))
            elif self._stop.is_set():
                return

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._instance is not None and self._instance.exists():
            try:
                (self._instance / "events" / EVENT / "enable").write_text("0\n")
            except OSError:
                pass
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=10)
            self._thread = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._instance is not None:
            try:
                self._instance.rmdir()
            except OSError:
                pass
            self._instance = None
        if self._mounted is not None:
            subprocess.run(["umount", str(self._mounted)], capture_output=True)
            try:
                self._mounted.rmdir()
            except OSError:
                pass
            self._mounted = None
