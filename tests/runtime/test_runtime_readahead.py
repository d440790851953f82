"""The C runtime's readahead tuner (`flashrt tune-readahead`, runtime/src/kml/cli_readahead.c and
readahead.c; KML) with the hand-written test policy
runtime/tests/policies/readahead.c (1024 KiB when the window's consecutive pages are < 64 pages
apart, else 16 KiB): replaying an event file, the features it logs are
`flashml.features.readahead.window_features`'s and its decisions the rule's; the original
readahead is back after a normal end, SIGTERM, SIGINT and an error; on a real loop device (root,
tracefs) it traces the page cache, sets the readahead during the run and restores it; bad input is
refused with a message naming it."""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from runtime_support import BUILD, FLASHRT, build_runtime

from flashml.features.readahead import contract, window_features

POLICIES = BUILD / "policies"


def rule(absdiff_mean: float) -> int:
    return 1024 if absdiff_mean < 64 else 16


def make_bundle(dest: Path, so: str = "readahead.so",
                capabilities: tuple[str, ...] = ("readahead",),
                readahead_hash: str | None = None) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(POLICIES / so, dest / "policy.so")
    manifest = {"format": "flashml-policy-bundle/1", "abi_version": 1,
                "size_bytes": (dest / "policy.so").stat().st_size,
                "sha256": hashlib.sha256((dest / "policy.so").read_bytes()).hexdigest(),
                "capabilities": list(capabilities),
                "readahead_contract_hash": readahead_hash or contract().hash}
    (dest / "manifest.json").write_text(json.dumps(manifest))
    return dest


def tune(*args: object, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(FLASHRT), "tune-readahead", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout)


def write_events(path: Path, events: list[tuple[float, int, int]], bad: str | None = None,
                 bad_at: int = -1) -> None:
    with open(path, "w") as f:
        f.write("time_s,inode,page\n")
        for i, (t, ino, page) in enumerate(events):
            if i == bad_at:
                f.write(bad + "\n")
            f.write(f"{t!r},{ino},{page}\n")


def random_events(n: int, seed: int) -> list[tuple[float, int, int]]:
    """Bursts of sequential reads and of random reads, with idle gaps (empty windows)."""
    rng = random.Random(seed)
    events, t, page = [], 1000.123, 0
    while len(events) < n:
        if rng.random() < 0.15:
            t += rng.uniform(0.3, 2.0)  # idle: one or more empty windows
        sequential = rng.random() < 0.5
        page = rng.randrange(0, 1 << 20)
        for _ in range(rng.randrange(1, 200)):
            t += rng.expovariate(2000.0)
            page = page + 1 if sequential else rng.randrange(0, 1 << 20)
            events.append((t, rng.randrange(1, 50), page))
    return events[:n]


def read_log(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    build_runtime()
    return make_bundle(tmp_path_factory.mktemp("rabundle") / "bundle")


def rel_close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


# ---- (a) replay: the features are window_features', the decisions the rule's ----

@pytest.mark.parametrize("interval_ms", [250, 1000])
def test_replay_features_and_decisions(bundle: Path, tmp_path: Path, interval_ms: int) -> None:
    events = random_events(30_000, seed=interval_ms)
    write_events(tmp_path / "ev.csv", events)
    ra = tmp_path / "ra"
    ra.write_text("128\n")
    log = tmp_path / "log.jsonl"
    proc = tune("--bundle", bundle, "--events", tmp_path / "ev.csv", "--readahead-file", ra,
                "--interval-ms", interval_ms, "--log", log, "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    want = window_features(events, readahead_kib=128, window_s=interval_ms / 1000)
    got = read_log(log)
    assert len(got) == len(want) == summary["windows_classified"]
    assert summary["windows"] == want[-1]["window"] + 1 > len(want)  # some windows were empty
    names = contract().names
    current = 128
    for g, w in zip(got, want, strict=True):
        assert g["window"] == w["window"]
        assert g["t"] == pytest.approx(w["window"] * interval_ms / 1000)
        for n in names[:4]:
            assert rel_close(g[n], w[n]), (w["window"], n, g[n], w[n])
        assert g["events"] == w["tracepoints"]
        # the readahead feature is the one in force during the window: the decision before
        assert g["readahead_kib"] == current
        assert g["kib"] == g["model_kib"] == g["set_kib"] == rule(w["offset_absdiff_mean"])
        assert g["clamped"] is False
        current = g["kib"]
    counts: dict[str, int] = {}
    for g in got:
        counts[str(g["kib"])] = counts.get(str(g["kib"]), 0) + 1
    assert summary["decisions"] == counts and set(counts) == {"16", "1024"}
    assert summary["events"] == len(events) and summary["original_kib"] == 128
    assert summary["final_kib"] == current and summary["restored"] is True
    assert summary["stopped_by"] == "end" and summary["mean_inference_ns"] > 0
    assert ra.read_text().strip() == "128"


def test_replay_duration_is_trace_time(bundle: Path, tmp_path: Path) -> None:
    events = random_events(5_000, seed=7)
    write_events(tmp_path / "ev.csv", events)
    ra = tmp_path / "ra"
    ra.write_text("64")
    proc = tune("--bundle", bundle, "--events", tmp_path / "ev.csv", "--readahead-file", ra,
                "--duration", 2.5, "--interval-ms", 500, "--log", tmp_path / "log", "--json")
    assert proc.returncode == 0, proc.stderr
    s = json.loads(proc.stdout)
    kept = [e for e in events if e[0] - events[0][0] < 2.5]
    want = window_features(kept, readahead_kib=64, window_s=0.5)
    assert s["stopped_by"] == "duration" and s["events"] == len(kept) < len(events)
    assert [g["offset_mean"] for g in read_log(tmp_path / "log")] == pytest.approx(
        [w["offset_mean"] for w in want], rel=1e-9)
    assert ra.read_text().strip() == "64"


def test_clamped(tmp_path: Path) -> None:
    build_runtime()
    b = make_bundle(tmp_path / "huge", so="readahead_huge.so")
    write_events(tmp_path / "ev.csv", random_events(500, seed=3))
    ra = tmp_path / "ra"
    ra.write_text("128")
    proc = tune("--bundle", b, "--events", tmp_path / "ev.csv", "--readahead-file", ra,
                "--log", tmp_path / "log", "--json")
    assert proc.returncode == 0, proc.stderr
    s = json.loads(proc.stdout)
    log = read_log(tmp_path / "log")
    assert log and all(g["clamped"] and g["kib"] == 1048576 and g["model_kib"] == 2000000000
                       for g in log)
    assert s["clamped"] == len(log) and s["decisions"] == {"1048576": len(log)}
    assert ra.read_text().strip() == "128"


# ---- (b) the original readahead is restored on every exit ----

@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_restored_after_a_signal(bundle: Path, tmp_path: Path, sig: signal.Signals) -> None:
    # one event per 10 ms window: a decision (write, read back, log line) per event
    n = 400_000
    with open(tmp_path / "ev.csv", "w") as f:
        f.write("time_s,inode,page\n")
        for i in range(n):
            f.write(f"{i * 0.01 + 0.001!r},1,{(i * 7919) % 100_000}\n")
    ra, log = tmp_path / "ra", tmp_path / "log"
    ra.write_text("128\n")
    proc = subprocess.Popen([str(FLASHRT), "tune-readahead", "--bundle", str(bundle), "--events",
                             str(tmp_path / "ev.csv"), "--readahead-file", str(ra),
                             "--interval-ms", "10", "--log", str(log), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while (not log.exists() or log.stat().st_size < 20_000) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.01)
        # the tuner has changed it (a read may fall between its truncate and its write)
        assert any(ra.read_text().strip() in ("16", "1024") for _ in range(100))
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    s = json.loads(out)
    assert s["stopped_by"] == sig.name and s["restored"] is True
    assert 0 < s["windows_classified"] < n and s["original_kib"] == 128
    assert ra.read_text().strip() == "128"


def test_restored_after_an_error(bundle: Path, tmp_path: Path) -> None:
    events = random_events(20_000, seed=11)
    write_events(tmp_path / "ev.csv", events, bad="1e9,3,notapage", bad_at=15_000)
    ra, log = tmp_path / "ra", tmp_path / "log"
    ra.write_text("128")
    proc = tune("--bundle", bundle, "--events", tmp_path / "ev.csv", "--readahead-file", ra,
                "--interval-ms", 100, "--log", log, "--json")
    assert proc.returncode == 1
    assert f"{tmp_path / 'ev.csv'}:15002: field 'page'" in proc.stderr and proc.stdout == ""
    assert len(read_log(log)) > 10  # decisions were made before the bad line
    assert ra.read_text().strip() == "128"
    # a readahead file that cannot be written: the error names it, nothing to restore
    ro = tmp_path / "ro"
    ro.write_text("128")
    ro.chmod(0o444)
    if os.geteuid() != 0:  # root writes anyway
        proc = tune("--bundle", bundle, "--events", tmp_path / "ev.csv", "--readahead-file", ro)
        assert proc.returncode == 1 and str(ro) in proc.stderr


def test_restored_after_a_normal_end(bundle: Path, tmp_path: Path) -> None:
    write_events(tmp_path / "ev.csv", random_events(3_000, seed=5))
    ra = tmp_path / "ra"
    ra.write_text("128")
    proc = tune("--bundle", bundle, "--events", tmp_path / "ev.csv", "--readahead-file", ra)
    assert proc.returncode == 0, proc.stderr
    assert "windows_classified" in proc.stdout and "(restored)" in proc.stdout
    assert ra.read_text().strip() == "128"


# ---- (c) live, on a loop device ----

def live_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "needs root (tracefs, losetup, read_ahead_kb)"
    if shutil.which("losetup") is None or not Path("/dev/loop-control").exists():
        return "no loop devices (losetup, /dev/loop-control)"
    if "tracefs" not in Path("/proc/filesystems").read_text():
        return "no tracefs in this kernel"
    return None


WHY_NOT_LIVE = live_unavailable()


def _logged(log: Path) -> list[dict]:
    """The windows the tuner has logged so far (it flushes a whole line per window)."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines(keepends=True)
            if line.endswith("\n")]


def _wait(ready: Callable[[], bool], what: str, proc: subprocess.Popen[str],
          guard_s: float = 120) -> None:
    """Wait for an event the tuner causes, failing at once if it exits first; `guard_s` only
    catches a hang (each of these events takes well under a second on a quiet machine)."""
    end = time.monotonic() + guard_s
    while not ready():
        assert proc.poll() is None, (what, proc.communicate())
        assert time.monotonic() < end, f"no {what} after {guard_s} s"
        time.sleep(0.01)


def _tracing(tmp: Path, pid: int) -> bool:
    """Whether tuner `pid`'s tracing instance records the page cache's events now (from then
    on every page read from the device reaches it). Without a tracefs mounted at the usual
    places it mounts one under its $TMPDIR, here `tmp`."""
    roots = [Path("/sys/kernel/tracing"), Path("/sys/kernel/debug/tracing"),
             *tmp.glob("flashrt-tracefs-*")]
    for root in roots:
        enable = (root / "instances" / f"flashrt-readahead-{pid}" / "events" / "filemap" /
                  "mm_filemap_add_to_page_cache" / "enable")
        try:
            if enable.read_text().strip() == "1":
                return True
        except OSError:
            pass
    return False


def _live_tuner(bundle: Path, dev: str, tmp: Path, *args: str) -> subprocess.Popen[str]:
    """`flashrt tune-readahead` on `dev` until SIGTERM (no --duration: the test decides when
    it has seen enough), once its tracing instance is on."""
    (tmp / "tmpdir").mkdir(exist_ok=True)
    proc = subprocess.Popen([str(FLASHRT), "tune-readahead", "--device", dev, "--bundle",
                             str(bundle), "--interval-ms", "500", "--json", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TMPDIR": str(tmp / "tmpdir")})
    try:
        _wait(lambda: _tracing(tmp / "tmpdir", proc.pid), "tracing instance", proc)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc


def _drop_cached(dev: str) -> None:
    """Evict `dev`'s pages from the page cache (POSIX_FADV_DONTNEED on the device): its reads
    are cold again, and nothing else on the machine loses its cache (a global drop_caches would
    also empty the cache another test is counting)."""
    fd = os.open(dev, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _cold_read(dev: str, *dd: str) -> None:
    _drop_cached(dev)
    subprocess.run(["dd", f"if={dev}", "of=/dev/null", "bs=4k", *dd], check=True,
                   capture_output=True, timeout=600)


@pytest.mark.skipif(WHY_NOT_LIVE is not None, reason=f"live readahead tuning: {WHY_NOT_LIVE}")
def test_live_loop_device(bundle: Path, tmp_path: Path) -> None:
    """Two cold reads of the whole raw device, each followed by the window that holds it: the
    tuner classifies what it traced, sets the device's readahead (seen there), logs the
    readahead in force as each window's feature, and restores the original at SIGTERM, its
    tracing instance gone. Every step waits on what the tuner does (its tracing instance, a
    logged window, the device's value), so a busy machine only makes it slower."""
    img = tmp_path / "disk.img"
    with open(img, "wb") as f:
        f.truncate(64 << 20)
    dev = subprocess.run(["losetup", "-f", "--show", str(img)], capture_output=True, text=True,
                         check=True).stdout.strip()
    try:
        sysfs = Path(f"/sys/block/{Path(dev).name}/queue/read_ahead_kb")
        sysfs.write_text("128\n")  # neither of the rule's values: any change is the tuner's
        original = int(sysfs.read_text())
        log = tmp_path / "live.jsonl"
        seen: list[int] = []
        # the device's readahead, sampled every 20 ms until the tuner exits: only values the
        # tuner set, or the original
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                seen.append(int(sysfs.read_text()))
                time.sleep(0.02)

        proc = _live_tuner(bundle, dev, tmp_path, "--log", str(log))
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            for _ in range(2):  # the second read's window has the first's readahead in force
                n = len(_logged(log))
                _cold_read(dev)
                _wait(lambda n=n: len(_logged(log)) > n, "window classified", proc)
            # the readahead it set holds until its next window with events: none come now
            _wait(lambda: any(v != original for v in seen), "tuned readahead on the device",
                  proc)
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=120)
        finally:
            done.set()
            sampler.join()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 0, err
        s = json.loads(out)
        got = read_log(log)
        assert s["mode"] == "live" and s["stopped_by"] == "SIGTERM" and s["restored"] is True
        assert s["windows"] >= s["windows_classified"] == len(got) >= 2
        assert s["events"] >= sum(g["events"] for g in got) > 0
        current = original
        for g in got:
            assert g["readahead_kib"] == current  # the one in force during the window
            assert g["kib"] == rule(g["offset_absdiff_mean"])
            assert g["set_kib"] <= g["kib"]  # read back (whole pages)
            current = g["set_kib"]
        # during the run the device had the tuner's readahead, after it the original again
        tuned = {g["set_kib"] for g in got}
        assert {v for v in seen if v != original} & tuned, (seen, got)
        assert set(seen) <= {original} | tuned, (seen, got)
        assert int(sysfs.read_text()) == original
        # no tracefs left mounted by this tuner (under its TMPDIR; other processes on the
        # machine may mount their own meanwhile)
        here = str(tmp_path / "tmpdir")
        assert not [m for m in Path("/proc/mounts").read_text().splitlines()
                    if m.split()[1].startswith(here)]
        for root in (Path("/sys/kernel/tracing"), Path("/sys/kernel/debug/tracing")):
            if (root / "instances").is_dir():
                assert not [p for p in (root / "instances").iterdir()
                            if p.name.startswith("flashrt-readahead-")]
        # --duration: a live run also ends by itself, every window up to it counted
        proc2 = subprocess.run([str(FLASHRT), "tune-readahead", "--device", dev, "--bundle",
                                str(bundle), "--duration", "1", "--interval-ms", "250",
                                "--json"], capture_output=True, text=True, timeout=120)
        assert proc2.returncode == 0, proc2.stderr
        s = json.loads(proc2.stdout)
        assert s["stopped_by"] == "duration" and s["windows"] >= 4 and s["wall_s"] >= 1.0
        assert s["restored"] is True and int(sysfs.read_text()) == original
    finally:
        subprocess.run(["losetup", "-d", dev], capture_output=True)


def _cached_pages_around_a_fault(fd: int, size: int, at: int, span: int) -> int:
    """Fault one page of `fd` mapped shared at `at` and count the pages of [at - span, at +
    span) in the page cache (mincore(2)): the kernel's read-around reads the file's own
    readahead around an mmap fault."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    addr = libc.mmap(None, size, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
    assert addr not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
    try:
        ctypes.string_at(addr + at, 1)  # the fault
        vec = ctypes.create_string_buffer(2 * span // 4096)
        assert libc.mincore(addr + at - span, 2 * span, vec) == 0, ctypes.get_errno()
        return sum(b & 1 for b in vec.raw)
    finally:
        libc.munmap(addr, size)


@pytest.mark.skipif(WHY_NOT_LIVE is not None, reason=f"live readahead tuning: {WHY_NOT_LIVE}")
@pytest.mark.parametrize("propagate", [True, False])
def test_live_tuner_reaches_files_already_open(bundle: Path, tmp_path: Path,
                                               propagate: bool) -> None:
    """The kernel copies a device's readahead into a file when it is opened, so a database
    that keeps its files open never sees a new read_ahead_kb; the tuner hands every change to
    the files already open on the device (pidfd_getfd + POSIX_FADV_NORMAL) unless
    --no-propagate. A file opened at 16 KiB reads 1024 KiB around a fault once the tuner set
    1024 KiB, and still 16 KiB without propagation."""
    size = 64 << 20
    img = tmp_path / "disk.img"
    with open(img, "wb") as f:
        f.truncate(size)
    dev = subprocess.run(["losetup", "-f", "--show", str(img)], capture_output=True, text=True,
                         check=True).stdout.strip()
    fd = -1
    proc = None
    try:
        sysfs = Path(f"/sys/block/{Path(dev).name}/queue/read_ahead_kb")
        sysfs.write_text("16\n")
        fd = os.open(dev, os.O_RDONLY)  # opened at 16 KiB: its own readahead state says so
        log = tmp_path / "log.jsonl"
        proc = _live_tuner(bundle, dev, tmp_path, "--log", str(log),
                           *([] if propagate else ["--no-propagate"]))
        # sequential cold reads (at most 5 of 16 MiB) until a window of them is classified: the
        # rule sets 1024 KiB (a window may also hold another reader's pages, e.g. udev's probe
        # of a new device: then the next read)
        for _ in range(5):
            n = len(_logged(log))
            _cold_read(dev, "count=4096")
            _wait(lambda n=n: len(_logged(log)) > n, "window classified", proc)
            if _logged(log)[-1]["set_kib"] == 1024:
                break
        assert _logged(log)[-1]["set_kib"] == 1024, _logged(log)
        assert int(sysfs.read_text()) == 1024  # set before it is logged
        _drop_cached(dev)
        cached = _cached_pages_around_a_fault(fd, size, 40 << 20, 4 << 20)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        s = json.loads(out)
        assert s["propagate"] is propagate and s["restored"] is True
        if propagate:
            assert s["files_updated"] >= 1 and cached >= 200, (cached, s)  # 1024 KiB = 256
        else:
            assert s["files_updated"] == 0 and cached <= 8, (cached, s)  # 16 KiB = 4 pages
        assert int(sysfs.read_text()) == 16
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        if fd >= 0:
            os.close(fd)
        subprocess.run(["losetup", "-d", dev], capture_output=True)


# ---- (d) errors ----

def test_errors(bundle: Path, tmp_path: Path) -> None:
    ra = tmp_path / "ra"
    ra.write_text("128")
    write_events(tmp_path / "ev.csv", random_events(100, seed=1))
    base = ("--events", tmp_path / "ev.csv", "--readahead-file", ra)
    other = make_bundle(tmp_path / "nocap", capabilities=("eviction",))
    wrong = make_bundle(tmp_path / "wrong", readahead_hash="3" * 64)
    cases = [
        (("--device", "/dev/flashrt-no-such-device", "--bundle", bundle),
         "/dev/flashrt-no-such-device: no such device"),
        (("--device", "flashrt-no-such-device", "--bundle", bundle),
         "/dev/flashrt-no-such-device: no such device"),
        (("--device", "/dev/null", "--bundle", bundle), "/dev/null: not a block device"),
        (("--bundle", other, *base), "no readahead capability"),
        (("--bundle", wrong, *base), "readahead_contract_hash' is 3333"),
        (("--bundle", tmp_path / "none", *base), str(tmp_path / "none")),
    ]
    for name, text, fragment in (
        ("header.csv", "t,inode,page\n1,1,1\n", ":1: expected the header time_s,inode,page"),
        ("time.csv", "time_s,inode,page\n1.0,1,1\nx,1,1\n", ":3: field 'time_s'"),
        ("back.csv", "time_s,inode,page\n2.0,1,1\n1.0,1,1\n", ":3: field 'time_s'"),
        ("inode.csv", "time_s,inode,page\n1.0,-1,1\n", ":2: field 'inode'"),
        ("page.csv", "time_s,inode,page\n1.0,1,1.5\n", ":2: field 'page'"),
        ("fields.csv", "time_s,inode,page\n1.0,1\n", ":2: expected 3 fields"),
    ):
        (tmp_path / name).write_text(text)
        cases.append((("--bundle", bundle, "--events", tmp_path / name, "--readahead-file", ra),
                      f"{tmp_path / name}{fragment}"))
    for args, fragment in cases:
        proc = tune(*args)
        assert proc.returncode == 1 and fragment in proc.stderr, (args, proc.stderr)
        assert proc.stdout == ""
        assert ra.read_text().strip() == "128"
    for args in ((*base,), ("--bundle", bundle, "--events", tmp_path / "ev.csv"),
                 ("--bundle", bundle, "--interval-ms", "0", *base),
                 ("--bundle", bundle, "--duration", "-1", *base),
                 ("--bundle", bundle, "--nope", *base)):
        assert tune(*args).returncode == 2, args
    help_ = tune("--help")
    assert help_.returncode == 0 and "--readahead-file" in help_.stdout
    assert "tune-readahead" in subprocess.run([str(FLASHRT), "--help"], capture_output=True,
                                              text=True).stdout


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root and setpriv to run the tuner as an ordinary user")
def test_live_tuning_without_root_is_refused(bundle: Path, tmp_path: Path) -> None:
    """An ordinary user asking to tune a real device: a clear refusal before anything is
    touched (tracefs and read_ahead_kb need root)."""
    loops = sorted(Path("/dev").glob("loop[0-9]*"))
    if not loops:
        pytest.skip("no loop device node to name")
    shutil.copytree(bundle, tmp_path / "b")
    os.chmod(tmp_path, 0o755)
    proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                           str(FLASHRT), "tune-readahead", "--device", str(loops[0]),
                           "--bundle", str(tmp_path / "b")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert "need root" in proc.stderr and str(loops[0]) in proc.stderr


# ---- (e) the runtime's own backing reads: `flashrt replay --readahead-bundle` ----

SEG = 128 * 1024
BLOCK = 8 * 1024 * 1024


def hook_expected(reads: list[tuple[float, int, int]], window_s: float = 1.0) -> dict:
    """ra_hook.c's decisions and hints for backing reads (time, block, segment) of one segment
    each with the test rule: a stream per block starting at 128 KiB, windows of trace time
    from the first read, a stream's window decided by its next read in a later window."""
    t0 = reads[0][0]
    state: dict[int, dict] = {}
    decisions: dict[str, int] = {}
    hints = hinted = 0
    for t, block, seg in reads:
        w = math.floor((t - t0) / window_s)
        s = state.setdefault(block, {"window": w, "kib": 128, "pages": []})
        if w > s["window"]:
            p = s["pages"]
            jumps = [abs(b - a) for a, b in zip(p, p[1:], strict=False)]
            absdiff = sum(jumps) / len(jumps) if jumps else 0.0
            s["kib"] = rule(absdiff)
            decisions[str(s["kib"])] = decisions.get(str(s["kib"]), 0) + 1
            s["window"], s["pages"] = w, []
        s["pages"].append(seg * SEG // 4096)
        room = BLOCK - (seg + 1) * SEG
        if room > 0:
            hints += 1
            hinted += min(s["kib"] * 1024, room)
    return {"streams": len(state), "windows": sum(decisions.values()), "decisions": decisions,
            "hints": hints, "hinted_bytes": hinted}


def test_replay_backing_readahead(bundle: Path, tmp_path: Path) -> None:
    """Block 1 read segment after segment, block 2 at a random order of its segments, both for
    6.4 s of trace time (every read a miss: AdmitAll caches them and none comes back): every
    window the sequential block's stream gets the rule's 1024 KiB and the random one 16 KiB,
    the hints follow, and the bytes served are still verified."""
    rng = random.Random(3)
    perm = list(range(64))
    rng.shuffle(perm)
    reads: list[tuple[float, int, int]] = []
    for i in range(64):
        reads.append((i / 10, 1, i))
        reads.append((i / 10 + 0.05, 2, perm[i]))
    trace = tmp_path / "ra.trace"
    # 201910 columns: block_id io_offset io_size op_time op_name pipeline user_namespace user_name
    trace.write_text("".join(f"{b} {s * SEG} {SEG} {t:.3f} 1 0 1 1\n" for t, b, s in reads))
    backing = tmp_path / "backing.img"
    p = subprocess.run([str(FLASHRT), "prepare-backing", "--backing", str(backing), "--trace",
                        str(trace)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr

    def replay(*extra: object) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(FLASHRT), "replay", "--policy", "builtin:admitall", "--trace", str(trace),
             "--flash", str(tmp_path / "flash.img"), "--flash-bytes", "64MiB", "--backing",
             str(backing), "--warmup-s", "0", "--direct", "off", "--json", *map(str, extra)],
            capture_output=True, text=True, timeout=120)

    proc = replay("--readahead-bundle", bundle)
    assert proc.returncode == 0, proc.stderr
    m = json.loads(proc.stdout)
    assert m["integrity_errors"] == 0 and m["verified_bytes"] == 128 * SEG
    assert m["backend_ios"] == 128 and m["hits"] == 0
    ra = m["readahead"]
    want = hook_expected([(t, b, s) for t, b, s in reads])
    assert want["decisions"] == {"16": 6, "1024": 6}
    for k in ("streams", "windows", "decisions", "hints", "hinted_bytes"):
        assert ra[k] == want[k], (k, ra[k], want[k])
    assert ra["reads"] == 128 and ra["live_streams"] == 2 and ra["stream_evictions"] == 0
    assert ra["window_ms"] == 1000 and ra["hinting"] == "fadvise" and ra["hint_errors"] == 0
    assert ra["clamped"] == 0 and ra["decisions_other"] == 0 and ra["mean_inference_ns"] > 0
    # deterministic: the same trace, the same decisions and hints
    again = json.loads(replay("--readahead-bundle", bundle).stdout)["readahead"]
    assert {k: again[k] for k in want} == {k: ra[k] for k in want}
    # a shorter window: more windows; without the option no hook
    short = json.loads(replay("--readahead-bundle", bundle, "--readahead-window-ms", 500).stdout)
    assert short["readahead"]["window_ms"] == 500
    assert short["readahead"]["windows"] == hook_expected(reads, 0.5)["windows"] > ra["windows"]
    # O_DIRECT on the backing (auto, where the file system has it): decisions, no hints
    auto = json.loads(subprocess.run(
        [str(FLASHRT), "replay", "--policy", "builtin:admitall", "--trace", str(trace), "--flash",
         str(tmp_path / "flash.img"), "--flash-bytes", "64MiB", "--backing", str(backing),
         "--warmup-s", "0", "--json", "--readahead-bundle", str(bundle)],
        capture_output=True, text=True, timeout=120).stdout)
    assert auto["integrity_errors"] == 0 and auto["readahead"]["windows"] == want["windows"]
    if auto["readahead"]["hinting"] != "fadvise":
        assert auto["readahead"]["hinting"].startswith("off: O_DIRECT")
        assert auto["readahead"]["hints"] == auto["readahead"]["hinted_bytes"] == 0
    plain = json.loads(replay().stdout)
    assert "readahead" not in plain and plain["integrity_errors"] == 0
    # a bundle without the readahead capability is refused, naming it
    other = make_bundle(tmp_path / "nocap", capabilities=("eviction",))
    bad = replay("--readahead-bundle", other)
    assert bad.returncode == 1 and "no readahead capability" in bad.stderr and bad.stdout == ""
    assert replay("--readahead-window-ms", 0, "--readahead-bundle", bundle).returncode == 2
