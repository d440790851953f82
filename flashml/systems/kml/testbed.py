"""KML's real experiment (first stage): RocksDB's `db_bench` on a filesystem on a loop
device whose readahead we set, the page cache dropped between runs.

    with Testbed(workdir, size_bytes=2 << 30) as tb:       # loop device, ext4, mounted
        tb.fill(num=200_000)                               # the database, once
        r = tb.run("readrandom", readahead_kib=8, num=200_000, reads=20_000)
        r["ops_per_s"]

`sweep(...)` runs every workload at every readahead size and names the best size per
workload: the labels KML's model learns. Everything needs root, a loop device and
`db_bench` (Debian's rocksdb-tools); `unavailable()` says which is missing, so callers skip
with that reason instead of failing half-way. The set-up is idempotent and the clean-up
(unmount, detach the loop device, remove the backing file) runs even when a step fails.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from flashml.device.host import in_cgroups, remove_cgroups, unmount_and_remove
from flashml.device.host import io_cgroup as _io_cgroup
from flashml.device.host import memory_cgroup as _memory_cgroup
from flashml.device.host import run as _run
from flashml.errors import UserError
from flashml.systems.kml.settings import KNOBS, SIZES

#: The paper's workloads (KML Table 2): db_bench benchmarks run on an existing database.
WORKLOADS = ("readrandom", "readseq", "readreverse", "readrandomwriterandom")
#: Workloads the model is not trained on: updaterandom, and mixgraph as a mix of
#: random gets, puts and short scans over skewed keys (MIXGRAPH_FLAGS).
HELD_OUT = ("updaterandom", "mixgraph")
#: mixgraph's mix: 60% gets, 10% puts, 30% seeks with scans of up to 100 keys; the key
#: distribution of RocksDB's published ZippyDB model (db_bench's --key_dist_a/b).
MIXGRAPH_FLAGS = ("--mix_get_ratio=0.6", "--mix_put_ratio=0.1", "--mix_seek_ratio=0.3",
                  "--mix_max_scan_len=100", "--key_dist_a=0.002312", "--key_dist_b=0.3467")
#: db_bench reads the SST files through mmap with the kernel's readahead in charge (RocksDB
#: otherwise advises the files random on open, which turns the kernel's readahead off, and
#: prefetches scans itself): the setting where the device's readahead decides the IO sizes.
DB_BENCH_FLAGS = ("--mmap_read=1", "--advise_random_on_open=false")
#: The block devices the database can live on: "loop", a loop device over a sparse file in
#: the work folder (direct IO); "zram", a compressed RAM disk (a new one from
#: /sys/class/zram-control). A loop device's IOs are served by a kernel worker thread that
#: waits its turn with every other runnable thread: on a busy machine (load 37 on 2 cores)
#: each read waited ~6 ms for it, and a readseq at 8 KiB took 100+ s where the throttle
#: allows 8. zram serves an IO in the reading thread itself, so the device is the throttle.
BACKENDS = ("loop", "zram")
_ZRAM_CONTROL = Path("/sys/class/zram-control")
#: Readahead sizes swept (KiB): the job's (settings.SIZES).
READAHEAD_KIB = SIZES
_LINE = re.compile(r"^(?P<name>\w+)\s*:\s*(?P<us>[0-9.]+) micros/op (?P<ops>[0-9]+) ops/sec")


def unavailable(backend: str = "loop") -> str | None:
    """Why the testbed cannot run here on `backend` (None: it can)."""
    if os.geteuid() != 0:
        return "needs root (loop devices, mount, readahead, drop_caches)"
    for tool in ("losetup", "mkfs.ext4", "mount", "umount", "db_bench"):
        if shutil.which(tool) is None:
            return (f"{tool} not found" + (" (apt-get install rocksdb-tools)"
                                           if tool == "db_bench" else ""))
    if backend == "loop" and not Path("/dev/loop-control").exists():
        return "no loop devices (/dev/loop-control missing)"
    if backend == "zram" and not (_ZRAM_CONTROL / "hot_add").exists():
        return "no zram devices (/sys/class/zram-control missing: modprobe zram)"
    if not os.access("/proc/sys/vm/drop_caches", os.W_OK):
        return "cannot drop the page cache (/proc/sys/vm/drop_caches is read-only here)"
    return None


def drop_caches() -> None:
    """Write back and drop the page cache, dentries and inodes."""
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def parse_db_bench(text: str, benchmark: str) -> dict[str, float]:
    """The result line of `benchmark` in db_bench's output: micros/op, ops/sec."""
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if m and m.group("name") == benchmark:
            return {"micros_per_op": float(m.group("us")), "ops_per_s": float(m.group("ops"))}
    raise UserError(f"db_bench printed no result line for {benchmark}: {text.strip()[-300:]}")


class Testbed:
    """A loop device over a sparse file in `workdir`, ext4 on it, mounted; the database of
    db_bench lives there. A context manager: `__exit__` always cleans up."""

    def __init__(self, workdir: str | os.PathLike[str], size_bytes: int = 2 << 30,
                 value_size: int = 400, memory_limit_bytes: int | None = None,
                 read_iops: int | None = None, read_bps: int | None = None,
                 db_bench_flags: tuple[str, ...] = DB_BENCH_FLAGS,
                 backend: str = "loop") -> None:
        if backend not in BACKENDS:
            raise UserError(f"device {backend!r}: expected one of {', '.join(BACKENDS)}")
        why = unavailable(backend)
        if why:
            raise UserError(f"the KML testbed cannot run here: {why}")
        if size_bytes < 64 << 20:
            raise UserError(f"device size {size_bytes} bytes: at least 64 MiB")
        self.workdir = Path(workdir)
        self.size_bytes = size_bytes
        self.value_size = value_size
        self.backend = backend
        self.backing: Path | None = None
        self.device: str | None = None
        self.zram_id: int | None = None
        self.mount: Path | None = None
        self.num = 0
        #: db_bench runs in a memory cgroup of this size (its page cache is charged there), so
        #: a database larger than it is read from the device as on a loaded server
        self.memory_limit_bytes = memory_limit_bytes
        #: db_bench's reads of the device throttled to these IOs/s and bytes/s (blkio cgroup),
        #: so the loop device over this machine's fast disk behaves like a slower SSD where
        #: readahead matters: every IO costs (IOPS limit), and so does every byte (bandwidth)
        self.read_iops = read_iops
        self.read_bps = read_bps
        self.cgroups: list[Path] = []
        self.db_bench_flags = tuple(db_bench_flags)

    def __enter__(self) -> Testbed:
        try:
            self.workdir.mkdir(parents=True, exist_ok=True)
            if self.backend == "zram":
                self.zram_id = int((_ZRAM_CONTROL / "hot_add").read_text().strip())
                self.device = f"/dev/zram{self.zram_id}"
                sysfs = Path("/sys/block") / f"zram{self.zram_id}"
                algos = (sysfs / "comp_algorithm").read_text().replace("[", "").replace(
                    "]", "").split()
                if "lz4" in algos:  # the fastest to decompress, on the reading thread
                    (sysfs / "comp_algorithm").write_text("lz4\n")
                (sysfs / "disksize").write_text(f"{self.size_bytes}\n")
            else:
                fd, name = tempfile.mkstemp(prefix="kml-", suffix=".img", dir=self.workdir)
                os.close(fd)
                self.backing = Path(name)
                os.truncate(self.backing, self.size_bytes)
                # direct IO on the backing file: its pages are not cached twice (host + loop)
                self.device = _run(["losetup", "--find", "--show", "--direct-io=on",
                                    str(self.backing)], "losetup").strip()
            _run(["mkfs.ext4", "-q", "-F", "-E", "nodiscard", self.device], "mkfs.ext4")
            self.mount = Path(tempfile.mkdtemp(prefix="kml-mnt-", dir=self.workdir))
            _run(["mount", "-o", "noatime", self.device, str(self.mount)], "mount")
            name = f"flashml-kml-{os.getpid()}-{id(self)}"
            if self.memory_limit_bytes:
                self.cgroups.append(_memory_cgroup(name, self.memory_limit_bytes))
            if self.read_iops or self.read_bps:
                cg = _io_cgroup(name, self.device, self.read_iops, self.read_bps)
                if cg not in self.cgroups:  # cgroup v2: the memory cgroup itself
                    self.cgroups.append(cg)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Unmount, detach, remove; each step tried even if an earlier one failed."""
        remove_cgroups(self.cgroups)
        self.cgroups = []
        if self.mount is not None:
            unmount_and_remove(self.mount)
            self.mount = None
        if self.zram_id is not None:
            try:
                (Path("/sys/block") / f"zram{self.zram_id}" / "reset").write_text("1\n")
            except OSError:
                pass
            try:
                (_ZRAM_CONTROL / "hot_remove").write_text(f"{self.zram_id}\n")
            except OSError:
                pass
            self.zram_id = None
            self.device = None
        if self.device is not None:
            subprocess.run(["losetup", "-d", self.device], capture_output=True)
            self.device = None
        if self.backing is not None:
            self.backing.unlink(missing_ok=True)
            self.backing = None

    @property
    def sysfs(self) -> Path:
        assert self.device is not None, "the testbed is not open"
        return Path("/sys/block") / Path(self.device).name / "queue" / "read_ahead_kb"

    def readahead_kib(self) -> int:
        return int(self.sysfs.read_text().strip())

    def set_readahead(self, kib: int) -> None:
        top = int(KNOBS["readahead_kib"].max)
        if not 0 <= kib <= top:
            raise UserError(f"readahead {kib} KiB: expected 0..{top}")
        self.sysfs.write_text(f"{kib}\n")
        got = self.readahead_kib()
        if got != kib:
            raise UserError(f"{self.sysfs}: set {kib} KiB, reads back {got} KiB")

    def _db_bench(self, benchmark: str, *extra: str) -> str:
        assert self.mount is not None, "the testbed is not open"
        return _run(in_cgroups(self.cgroups, [
                        "db_bench", f"--benchmarks={benchmark}", f"--db={self.mount / 'db'}",
                     f"--value_size={self.value_size}", "--compression_type=none",
                     "--cache_size=1048576", "--threads=1",
                     # --duration is checked every this many ops (default 1,000: a 5 s run
                     # at 21 ops/s lasted 60 s)
                     "--ops_between_duration_checks=1", *self.db_bench_flags, *extra]),
                    f"db_bench {benchmark}", timeout=1800)

    def fill(self, num: int) -> dict[str, float]:
        """Write the database: `num` keys in order (fillseq), compacted; then keep it as the
        state every run starts from (`restore`)."""
        out = self._db_bench("fillseq,compact", f"--num={num}")
        self.num = num
        self._snapshot()
        return parse_db_bench(out, "fillseq")

    @property
    def db(self) -> Path:
        assert self.mount is not None, "the testbed is not open"
        return self.mount / "db"

    def _snapshot(self) -> None:
        """The database as filled, in `db.base` beside it: the SST files hard-linked (RocksDB
        never changes one in place), every other file (MANIFEST, CURRENT, OPTIONS, logs,
        appended to or replaced) copied."""
        base = self.db.with_name("db.base")
        shutil.rmtree(base, ignore_errors=True)
        _clone(self.db, base)

    def restore(self) -> None:
        """The database back to its state after `fill`. A write workload flushes its writes
        into new files and compactions on close, so without this every later run met an
        older database (measured: updaterandom at one size 1,998 -> 1,455 ops/s within two
        runs); from the same files every run is a repeat of the same experiment."""
        base = self.db.with_name("db.base")
        if not base.is_dir():
            raise UserError("fill the database first (Testbed.fill)")
        shutil.rmtree(self.db)
        _clone(base, self.db)

    def run(self, workload: str, readahead_kib: int | None, reads: int,
            duration_s: int = 0, report_file: Path | None = None) -> dict[str, Any]:
        """One workload on the filled database with the device's readahead set (None: left
        as it is, e.g. for a tuner to set) and a cold page cache: ops/s and micros/op as
        db_bench reports them; with `report_file` db_bench also writes its ops/s every
        second there (CSV secs_elapsed,interval_qps)."""
        if workload not in WORKLOADS + HELD_OUT:
            raise UserError(f"workload {workload!r}: expected one of "
                            f"{', '.join(WORKLOADS + HELD_OUT)}")
        if not self.num:
            raise UserError("fill the database first (Testbed.fill)")
        if readahead_kib is not None:
            self.set_readahead(readahead_kib)
        self.restore()
        drop_caches()
        extra = [f"--num={self.num}", "--use_existing_db=1", f"--reads={reads}"]
        if duration_s:
            extra.append(f"--duration={duration_s}")
        if report_file is not None:
            extra += ["--report_interval_seconds=1", f"--report_file={report_file}"]
        if workload == "mixgraph":
            extra += MIXGRAPH_FLAGS
        r = parse_db_bench(self._db_bench(workload, *extra), workload)
        return {"workload": workload, "readahead_kib": readahead_kib, **r}


def _clone(src: Path, dst: Path) -> None:
    """`dst` as a copy of the database folder `src`: *.sst hard-linked, the rest copied."""
    dst.mkdir()
    for f in sorted(src.iterdir()):
        if f.is_file():
            if f.suffix == ".sst":
                os.link(f, dst / f.name)
            else:
                shutil.copy2(f, dst / f.name)


def sweep(tb: Testbed, workloads: tuple[str, ...] = WORKLOADS,
          sizes: tuple[int, ...] = READAHEAD_KIB, reads: int = 20_000,
          repeats: int = 1, duration_s: int = 0) -> dict[str, Any]:
    """Every workload at every readahead size (the median of `repeats` runs); per workload
    the best size (the label) and each size's ops/s."""
    import statistics

    out: dict[str, Any] = {}
    for w in workloads:
        per = {}
        for kib in sizes:
            runs = [tb.run(w, kib, reads, duration_s)["ops_per_s"] for _ in range(repeats)]
            per[kib] = statistics.median(runs)
        best = max(per, key=lambda k: (per[k], -k))
        out[w] = {"ops_per_s": per, "best_kib": best, "best_ops_per_s": per[best]}
    return out
