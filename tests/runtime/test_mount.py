"""`flashrt mount` (runtime/src/cli/cli_mount.c, runtime/src/fuse/mount_fs.c): a FUSE file
system whose reads go through the cache engine, and `flashrt play` (cli_play.c) reading a
trace through it. Bytes read through the mount equal the
backing files' under random preads (block and segment borders crossed, files of sizes that
are not multiples of 8 MiB, a flash small enough to evict), also under ASan + UBSan; a second
read of a range is a flash hit; writes go through and drop what the cache held; kill -9 of the
mount leaves the backing files identical and the mount point released; bad input is refused
before anything is mounted or written.

Needs root, /dev/fuse, fusermount3 (Debian fuse3) and a flashrt built with libfuse3 (Debian
libfuse3-dev, found by pkg-config); `.ci/run` installs them. Otherwise the tests skip saying
which is missing. Every mount is released in the fixture (`fusermount3 -u -z`), whatever
happens."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from runtime_support import (
    BUILD,
    FLASHRT,
    RUNTIME,
    build_runtime,
    evict_bundle,
    fixed_range_trace,
    make_bundle,
)

MiB = 1 << 20
BLOCK = 8 * MiB
SEG = 128 * 1024
SAN = BUILD / "san" / "flashrt"
NOFUSE = BUILD / "flashrt-nofuse"
SAN_ENV = {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0", "UBSAN_OPTIONS": "print_stacktrace=1"}
# the backing directory's files: not multiples of 8 MiB (one spans three blocks), one empty
FILES = {"a.bin": 2 * BLOCK + 12345, "sub/b.bin": 5 * MiB + 7, "c.bin": 300001, "empty.bin": 0}
GUARD_S = 120  # a hang guard only: every wait below ends on an event


def _missing() -> str | None:
    from flashml.device.host import fuse_unavailable

    return fuse_unavailable()


MISSING = _missing()
needs_fuse = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")


def _make(*targets: str) -> None:
    with open(BUILD / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        p = subprocess.run(["make", "-s", "-C", str(RUNTIME), *targets], capture_output=True,
                           text=True)
        fcntl.flock(lock, fcntl.LOCK_UN)
    assert p.returncode == 0, p.stdout + p.stderr


@pytest.fixture(scope="module")
def built() -> Path:
    build_runtime()
    return FLASHRT


def is_mounted(mnt: Path) -> bool:
    target = str(mnt.resolve())
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4].replace("\\040", " ") == target:
                return True
    return False


def release(mnt: Path) -> None:
    """The mount point released, whatever state the mount is in."""
    if is_mounted(mnt):
        subprocess.run(["fusermount3", "-u", "-z", str(mnt)], capture_output=True)
    if is_mounted(mnt):
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def wait_for(what: str, done: Callable[[], bool], proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + GUARD_S
    while not done():
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(
                f"the mount ended ({proc.returncode}) before {what}:\n{out}\n{err}")
        assert time.monotonic() < deadline, f"hang guard: no {what} after {GUARD_S} s"
        time.sleep(0.01)


@contextlib.contextmanager
def mounted(binary: Path, backing: Path, mnt: Path, flash: Path, stats: Path,
            *policy: str) -> Iterator[subprocess.Popen]:
    """`flashrt mount -f` until the block ends (then SIGTERM: it unmounts and writes the
    counters); the mount point is released in every case."""
    cmd = [str(binary), "mount", str(backing), str(mnt), "--flash", str(flash), "--flash-bytes",
           "16MiB", "--region-bytes", "1MiB", "--stats-out", str(stats), "-f",
           *(policy or ("--admission", "admitall"))]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **SAN_ENV})
    try:
        wait_for("the mount", lambda: is_mounted(mnt), proc)
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=GUARD_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        release(mnt)


def stop(proc: subprocess.Popen) -> tuple[int, str]:
    """SIGTERM: unmount, the final counters; the exit code and stderr."""
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=GUARD_S)
    return proc.returncode, err


def counters(proc: subprocess.Popen, stats: Path) -> dict:
    """The counters now: SIGUSR1, then the file it rewrites (its stats_written moves on)."""
    def written() -> int:
        try:
            return int(json.loads(stats.read_text())["stats_written"])
        except (FileNotFoundError, json.JSONDecodeError):
            return 0
    before = written()
    os.kill(proc.pid, signal.SIGUSR1)
    wait_for("the counters", lambda: written() > before, proc)
    return json.loads(stats.read_text())


@pytest.fixture
def place(tmp_path: Path) -> dict[str, Path]:
    backing, mnt = tmp_path / "backing", tmp_path / "mnt"
    (backing / "sub").mkdir(parents=True)
    mnt.mkdir()
    rng = np.random.default_rng(44)
    for name, size in FILES.items():
        (backing / name).write_bytes(rng.integers(0, 256, size, dtype=np.uint8).tobytes())
    return {"dir": tmp_path, "backing": backing, "mnt": mnt, "flash": tmp_path / "flash.img",
            "stats": tmp_path / "stats.json"}


def random_reads(rng: np.random.Generator, size: int, n: int) -> list[tuple[int, int]]:
    """(offset, length) pairs: a third anywhere, a third across an 8 MiB block border, a third
    across a 128 KiB segment border; some run past the end of the file."""
    out = []
    for i in range(n):
        length = int(rng.integers(1, 1 * MiB))
        if i % 3 == 0 or size < 2 * SEG:
            off = int(rng.integers(0, max(size, 1)))
        else:
            unit = BLOCK if i % 3 == 1 and size > BLOCK else SEG
            border = unit * int(rng.integers(1, max(size // unit, 1) + 1))
            off = max(0, border - int(rng.integers(1, min(length, border) + 1)))
        out.append((off, length))
    return out


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---- what is served ----------------------------------------------------------------------


@needs_fuse
@pytest.mark.parametrize("build", ["release", "asan"])
def test_reads_through_the_mount_equal_the_backing_files(built, place, build) -> None:
    """Random preads through the mount, with the count bundle (admission + prefetch, verified)
    and a 16 MiB flash that evicts: every byte equals the backing file's."""
    binary = built
    if build == "asan":
        _make("build/san/flashrt")
        binary = SAN
    bundle = make_bundle(place["dir"] / "bundle", BUILD / "policies" / "count.so")
    rng = np.random.default_rng(7)
    with mounted(binary, place["backing"], place["mnt"], place["flash"], place["stats"],
                 "--bundle", str(bundle)) as proc:
        names = sorted(p.name for p in place["mnt"].iterdir())
        assert names == ["a.bin", "c.bin", "empty.bin", "sub"]
        reads = 0
        for _ in range(2):  # twice: the second pass hits what the first admitted
            for name, size in FILES.items():
                want = (place["backing"] / name).read_bytes()
                fd = os.open(place["mnt"] / name, os.O_RDONLY)
                try:
                    assert os.fstat(fd).st_size == size
                    for off, length in random_reads(rng, size, 60 if size else 3):
                        got = os.pread(fd, length, off)
                        assert got == want[off:off + length], (name, off, length)
                        reads += 1
                finally:
                    os.close(fd)
        for name in FILES:
            assert (place["mnt"] / name).read_bytes() == (place["backing"] / name).read_bytes()
        rc, err = stop(proc)
    assert rc == 0, err
    s = json.loads(place["stats"].read_text())
    assert s["final"] is True and s["engine_errors"] == 0 and s["backend_errors"] == 0, s
    assert s["hits"] > 0 and s["misses"] > 0 and s["evicted_regions"] > 0, s
    assert s["prefetched_segments"] > 0, s  # the bundle's prefetch ran
    assert s["flash_read_errors"] == 0 and s["flash_write_errors"] == 0, s
    assert not is_mounted(place["mnt"])


@needs_fuse
def test_a_file_open_at_unmount_leaks_nothing(built, place) -> None:
    """SIGTERM while a file is still open through the mount: the kernel never sends that
    handle's release, and the ASan build must exit 0 without a leak report."""
    _make("build/san/flashrt")
    with mounted(SAN, place["backing"], place["mnt"], place["flash"], place["stats"]) as proc:
        fd = os.open(place["mnt"] / "a.bin", os.O_RDONLY)
        try:
            assert os.pread(fd, 4096, 0) == (place["backing"] / "a.bin").read_bytes()[:4096]
            rc, err = stop(proc)
        finally:
            with contextlib.suppress(OSError):
                os.close(fd)
    assert rc == 0 and "LeakSanitizer" not in err, err


@needs_fuse
def test_second_read_of_a_range_is_a_flash_hit(built, place) -> None:
    with mounted(built, place["backing"], place["mnt"], place["flash"], place["stats"]) as proc:
        fd = os.open(place["mnt"] / "a.bin", os.O_RDONLY)
        try:
            want = (place["backing"] / "a.bin").read_bytes()
            off = BLOCK + 3 * SEG + 4096  # one segment of the second block
            assert os.pread(fd, 4096, off) == want[off:off + 4096]
            first = counters(proc, place["stats"])
            got = (first["accesses"], first["hits"], first["misses"], first["backend_ios"])
            assert got == (1, 0, 1, 1), first
            assert first["admitted_segments"] == 1, first
            assert os.pread(fd, 4096, off) == want[off:off + 4096]
            second = counters(proc, place["stats"])
            assert (second["accesses"], second["hits"], second["backend_ios"]) == (2, 1, 1), second
            assert second["backend_read_calls"] == first["backend_read_calls"], second
        finally:
            os.close(fd)
        rc, err = stop(proc)
    assert rc == 0, err


@needs_fuse
def test_writes_go_through_and_drop_the_cached_segments(built, place) -> None:
    a, mnt_a = place["backing"] / "sub" / "b.bin", place["mnt"] / "sub" / "b.bin"
    with mounted(built, place["backing"], place["mnt"], place["flash"], place["stats"]) as proc:
        before = mnt_a.read_bytes()  # all of it cached (admitall, the file fits the flash)
        fd = os.open(mnt_a, os.O_RDWR)
        try:
            off = 5 * SEG - 1000  # segments 4..7
            new = b"W" * (3 * SEG)
            assert os.pwrite(fd, new, off) == len(new)
            expect = before[:off] + new + before[off + len(new):]
            assert a.read_bytes() == expect  # written through
            assert mnt_a.read_bytes() == expect  # and not served stale
            s = counters(proc, place["stats"])
            assert s["writes"] == 1 and s["write_bytes"] == len(new), s
            assert s["invalidated_segments"] == 4, s
            # shrink, then grow again: the cut bytes read as zeros, not as what was cached
            os.ftruncate(fd, 100)
            os.ftruncate(fd, 2 * SEG)
        finally:
            os.close(fd)
        assert mnt_a.read_bytes() == expect[:100] + bytes(2 * SEG - 100)
        assert a.read_bytes() == expect[:100] + bytes(2 * SEG - 100)
        with pytest.raises(OSError) as e:
            (place["mnt"] / "new.bin").write_bytes(b"x")
        assert e.value.errno == 30  # EROFS: the directory's shape is the backing's
        rc, err = stop(proc)
    assert rc == 0, err


@needs_fuse
def test_kill_9_leaves_the_backing_intact_and_the_mount_point_released(built, place) -> None:
    proc = None
    try:
        with mounted(built, place["backing"], place["mnt"], place["flash"], place["stats"]) as proc:
            for name in FILES:
                (place["mnt"] / name).read_bytes()
            fd = os.open(place["mnt"] / "c.bin", os.O_RDWR)
            os.pwrite(fd, b"through", 5)
            os.close(fd)
            hashes = {name: sha(place["backing"] / name) for name in FILES}
            fd = os.open(place["mnt"] / "a.bin", os.O_RDONLY)
            os.pread(fd, 4096, 0)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=GUARD_S)
            os.close(fd)
            # fusermount3 (auto_unmount) sees the process gone and releases the mount point
            wait_for("the mount point released", lambda: not is_mounted(place["mnt"]))
    finally:
        release(place["mnt"])
    assert proc is not None and proc.returncode == -signal.SIGKILL
    assert {name: sha(place["backing"] / name) for name in FILES} == hashes
    assert (place["backing"] / "c.bin").read_bytes()[5:12] == b"through"
    assert os.listdir(place["mnt"]) == []  # a plain directory again


@needs_fuse
@pytest.mark.parametrize("policy", ["rejectx", "bundle", "bundle+mat"])
def test_the_recorded_trace_replays_to_the_mounts_counts(built, place, policy) -> None:
    """--trace-out records what the mount served; `flashrt replay` of it through the same
    engine composition makes the same decisions: the same hits, backend IOs and bytes,
    admitted and prefetched segments and evictions as the mount counted (bundle+mat: the
    bundle's admission and prefetch with MAT's eviction, `--eviction mat`)."""
    trace = place["dir"] / "served.trace"
    if policy.startswith("bundle"):
        bundle = make_bundle(place["dir"] / "bundle", BUILD / "policies" / "count.so")
        mount_policy, replay_policy = ["--bundle", str(bundle)], ["--policy", str(bundle)]
        if policy == "bundle+mat":
            mat = ["--eviction", "mat", "--eviction-bundle",
                   str(evict_bundle(place["dir"] / "evict"))]
            mount_policy, replay_policy = mount_policy + mat, replay_policy + mat
    else:
        mount_policy = replay_policy = ["--admission", "rejectx"]
    rng = np.random.default_rng(3)
    with mounted(built, place["backing"], place["mnt"], place["flash"], place["stats"],
                 *mount_policy, "--trace-out", str(trace)) as proc:
        for _ in range(3):
            for name, size in FILES.items():
                fd = os.open(place["mnt"] / name, os.O_RDONLY)
                try:
                    for off, length in random_reads(rng, size, 40 if size else 1):
                        os.pread(fd, length, off)
                finally:
                    os.close(fd)
        assert not trace.exists()  # written under a temporary name until the mount ends
        rc, err = stop(proc)
    assert rc == 0, err
    s = json.loads(place["stats"].read_text())
    lines = trace.read_text().splitlines()
    assert lines[0].startswith("#block_id io_offset io_size op_time op_name")
    assert s["traced_accesses"] == s["accesses"] == len(lines) - 1 > 0, s
    backing = place["dir"] / "replay-backing.img"
    p = subprocess.run([str(built), "prepare-backing", "--backing", str(backing), "--trace",
                        str(trace)], capture_output=True, text=True, timeout=GUARD_S)
    assert p.returncode == 0, p.stderr
    p = subprocess.run([str(built), "replay", "--trace", str(trace), "--flash",
                        str(place["dir"] / "replay-flash.img"), "--flash-bytes", "16MiB",
                        "--region-bytes", "1MiB", "--backing", str(backing), "--warmup-s", "0",
                        "--json", *replay_policy], capture_output=True, text=True,
                       timeout=GUARD_S)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    keys = ("hits", "backend_ios", "backend_bytes", "admitted_segments", "prefetched_segments",
            "evicted_regions")
    assert {k: r[k] for k in keys} == {k: s[k] for k in keys}
    assert r["gets"] == s["accesses"] and r["integrity_errors"] == 0
    assert s["evicted_regions"] > 0 and s["hits"] > 0
    if policy.startswith("bundle"):
        assert s["prefetched_segments"] > 0
    assert s["eviction"] == ("mat" if policy == "bundle+mat" else "lru")


@needs_fuse
def test_a_trace_played_through_the_mount_makes_the_replays_decisions(built, tmp_path) -> None:
    """`flashrt play` reads a trace's GETs through the mount from a file `flashrt
    prepare-backing` laid out: every byte is the prepared content, and the mount's engine
    makes the decisions `flashrt replay` makes on the same trace (PUTs, which play does not
    send, are replay's only extra backend IOs)."""
    backing, mnt = tmp_path / "backing", tmp_path / "mnt"
    backing.mkdir()
    mnt.mkdir()
    trace = fixed_range_trace(tmp_path / "t.trace", n=1500, blocks=200, seed=5)
    img = backing / "blocks.img"
    p = subprocess.run([str(built), "prepare-backing", "--backing", str(img), "--trace",
                        str(trace)], capture_output=True, text=True, timeout=GUARD_S)
    assert p.returncode == 0, p.stderr
    stats = tmp_path / "stats.json"
    with mounted(built, backing, mnt, tmp_path / "flash.img", stats) as proc:
        p = subprocess.run([str(built), "play", "--trace", str(trace), "--to", str(mnt), "--map",
                            f"{img}.map", "--speed", "5000", "--verify", "--json"],
                           capture_output=True, text=True, timeout=GUARD_S)
        assert p.returncode == 0, p.stderr
        rc, err = stop(proc)
    assert rc == 0, err
    play = json.loads(p.stdout)
    assert play["integrity_errors"] == 0 and play["verified_bytes"] == play["bytes"] > 0, play
    s = json.loads(stats.read_text())
    assert s["accesses"] == play["gets"], (s, play)  # one FUSE read per access
    p = subprocess.run([str(built), "replay", "--trace", str(trace), "--flash",
                        str(tmp_path / "replay.img"), "--flash-bytes", "16MiB", "--backing",
                        str(img), "--admission", "admitall", "--warmup-s", "0", "--json"],
                       capture_output=True, text=True, timeout=GUARD_S)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    keys = ("hits", "admitted_segments", "evicted_regions")
    assert {k: r[k] for k in keys} == {k: s[k] for k in keys}
    assert r["backend_ios"] - r["puts"] == s["backend_ios"] and r["puts"] == play["puts_not_played"]
    assert s["hits"] > 0 and s["evicted_regions"] > 0


@needs_fuse
def test_background_mount_returns_once_mounted_and_holds_its_flash(built, place) -> None:
    """Without -f the command returns once the mount is up; the serving process holds the
    flash file's lock (a second mount of it is refused, nothing mounted), and unmounting
    ends it with the final counters."""
    m2 = place["dir"] / "mnt2"
    m2.mkdir()
    base = ["--flash", str(place["flash"]), "--flash-bytes", "16MiB", "--admission", "admitall"]
    try:
        p = subprocess.run([str(built), "mount", str(place["backing"]), str(place["mnt"]), *base,
                            "--stats-out", str(place["stats"])], capture_output=True, text=True,
                           timeout=GUARD_S)
        assert p.returncode == 0, p.stderr
        assert is_mounted(place["mnt"])
        assert (place["mnt"] / "c.bin").read_bytes() == (place["backing"] / "c.bin").read_bytes()
        q = subprocess.run([str(built), "mount", str(place["backing"]), str(m2), *base],
                           capture_output=True, text=True, timeout=GUARD_S)
        assert q.returncode == 1 and "in use by flashrt" in q.stderr, q.stderr
        assert not is_mounted(m2)
        subprocess.run(["fusermount3", "-u", str(place["mnt"])], check=True, timeout=GUARD_S)

        def final() -> bool:
            try:
                return json.loads(place["stats"].read_text())["final"] is True
            except (FileNotFoundError, json.JSONDecodeError):
                return False
        wait_for("the final counters", final)
        assert json.loads(place["stats"].read_text())["reads"] >= 1
    finally:
        release(place["mnt"])
        release(m2)


# ---- bad input ---------------------------------------------------------------------------


def refused(binary: Path, place: dict[str, Path], *args: str, flash: Path | None = None,
            prefix: list[str] | None = None) -> str:
    flash = flash or place["flash"]
    policy = [] if "--bundle" in args else ["--admission", "admitall"]
    p = subprocess.run([*(prefix or []), str(binary), "mount", *args, "--flash", str(flash),
                        "--flash-bytes", "16MiB", "-f", *policy],
                       capture_output=True, text=True, timeout=GUARD_S)
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    assert not is_mounted(place["mnt"])
    assert not flash.exists() and not Path(f"{flash}.journal").exists()  # nothing written
    return p.stderr


@needs_fuse
def test_bad_places_are_refused_before_anything_is_mounted(built, place) -> None:
    b, m = place["backing"], place["mnt"]
    assert "are the same directory" in refused(built, place, str(b), str(b))
    inner = m / "inner"
    inner.mkdir()
    assert "inside MOUNTPOINT" in refused(built, place, str(inner), str(m))
    assert "is inside BACKING_DIR" in refused(built, place, str(b), str(b / "sub"))
    err = refused(built, place, str(b), str(m), flash=b / "flash.img")
    assert "--flash" in err and "inside BACKING_DIR" in err
    err = refused(built, place, str(b), str(m), flash=b / "sub" / "f.img")
    assert "inside BACKING_DIR" in err
    err = refused(built, place, str(b), str(m), flash=m / "flash.img")
    assert "--flash" in err and "on the mount" in err
    err = refused(built, place, str(b), str(place["dir"] / "nowhere"))
    assert "MOUNTPOINT" in err and "No such file" in err


@needs_fuse
def test_a_bundle_without_admission_is_refused(built, place) -> None:
    """A Baleen bundle whose manifest lists prefetch alone, and MAT's eviction bundle."""
    pre = make_bundle(place["dir"] / "prefetch", BUILD / "policies" / "count.so")
    man = json.loads((pre / "manifest.json").read_text())
    (pre / "manifest.json").write_text(json.dumps({**man, "capabilities": ["prefetch"]}))
    err = refused(built, place, str(place["backing"]), str(place["mnt"]), "--bundle", str(pre))
    assert "--bundle" in err and "no admission capability" in err, err
    ev = evict_bundle(place["dir"] / "evict")
    err = refused(built, place, str(place["backing"]), str(place["mnt"]), "--bundle", str(ev))
    assert "--bundle" in err and "baleen" in err, err


@needs_fuse
def test_mat_eviction_needs_a_bundle_with_the_evict_capability(built, place) -> None:
    """--eviction mat without a bundle, --eviction-bundle with another eviction (usage
    errors), and a bundle without the evict capability: refused, nothing mounted or
    written."""
    b, m = str(place["backing"]), str(place["mnt"])
    ev = str(evict_bundle(place["dir"] / "evict"))
    for args, want in ((["--eviction", "mat"], "--eviction mat needs a bundle"),
                       (["--eviction-bundle", ev], "--eviction-bundle is for --eviction mat")):
        p = subprocess.run([str(built), "mount", b, m, "--flash", str(place["flash"]),
                            "--flash-bytes", "16MiB", "-f", "--admission", "admitall", *args],
                           capture_output=True, text=True, timeout=GUARD_S)
        assert p.returncode == 2 and want in p.stderr, (p.returncode, p.stderr)
        assert not is_mounted(place["mnt"]) and not place["flash"].exists()
    count = make_bundle(place["dir"] / "count", BUILD / "policies" / "count.so")
    err = refused(built, place, b, m, "--eviction", "mat", "--eviction-bundle", str(count))
    assert "--eviction mat" in err and "no evict capability" in err, err


@needs_fuse
def test_no_fuse_device_is_refused(built, place) -> None:
    """/dev hidden by an empty tmpfs in a mount namespace of its own."""
    if not shutil.which("unshare"):
        pytest.skip("no unshare(1) to hide /dev/fuse")
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"unshare -m is not permitted here: {probe.stderr.decode().strip()}")
    script = 'mount -t tmpfs none /dev && exec "$@"'
    err = refused(built, place, str(place["backing"]), str(place["mnt"]),
                  prefix=["unshare", "-m", "sh", "-c", script, "sh"])
    assert "/dev/fuse" in err, err


def test_built_without_fuse_says_so(tmp_path) -> None:
    build_runtime()
    _make("build/flashrt-nofuse")
    p = subprocess.run([str(NOFUSE), "mount", str(tmp_path), str(tmp_path / "m"), "--flash",
                        str(tmp_path / "f.img"), "--flash-bytes", "16MiB", "--admission",
                        "admitall"],
                       capture_output=True, text=True, timeout=GUARD_S)
    assert p.returncode == 1 and "built without FUSE" in p.stderr, p.stderr
    assert not (tmp_path / "f.img").exists()
    assert "mount" in subprocess.run([str(NOFUSE), "--help"], capture_output=True, text=True).stdout


def test_play_checks_every_byte_and_refuses_blocks_its_file_lacks(tmp_path) -> None:
    """`flashrt play` straight from a prepared file (no mount): a corrupted byte is found
    (exit 3), a block the map does not list is refused naming the trace's line."""
    build_runtime()
    trace = fixed_range_trace(tmp_path / "t.trace", n=300, blocks=40, seed=2)
    img = tmp_path / "blocks.img"
    p = subprocess.run([str(FLASHRT), "prepare-backing", "--backing", str(img), "--trace",
                        str(trace)], capture_output=True, text=True, timeout=GUARD_S)
    assert p.returncode == 0, p.stderr

    def play(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(FLASHRT), "play", "--trace", str(trace), "--to", str(img),
                               "--no-pace", "--verify", "--json", *extra], capture_output=True,
                              text=True, timeout=GUARD_S)

    p = play()
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["integrity_errors"] == 0 and out["gets"] + out["puts_not_played"] == 300
    first = trace.read_text().splitlines()[1].split()  # the first access: block, offset
    slot = sorted({int(line.split()[0]) for line in trace.read_text().splitlines()[1:]})
    at = slot.index(int(first[0])) * BLOCK + int(first[1]) + 10
    with open(img, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0xFF]))
    p = play()
    assert p.returncode == 3 and "wrong byte" in p.stderr, p.stderr
    other = tmp_path / "other.trace"
    other.write_text(trace.read_text() + "999999 0 4096 1572999999.0 2 1 1 1\n")
    p = subprocess.run([str(FLASHRT), "play", "--trace", str(other), "--to", str(img), "--map",
                        f"{img}.map", "--no-pace"], capture_output=True, text=True,
                       timeout=GUARD_S)
    assert p.returncode == 1 and "block 999999 is not in" in p.stderr and ":302:" in p.stderr
