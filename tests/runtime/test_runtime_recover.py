"""Crash safety of the runtime engine (runtime/src/engine/persist.c, journal.c): `flashrt
replay --recover` after kill -9 at random points of a composed replay (admission x eviction x
budget x placement x partition) rebuilds the cache from the regions' headers and the journal
and never serves a wrong byte; the next run hits on what it rebuilt.

Each kill lands at a seeded random access: the replay holds there (the test hook
FLASHRT_TEST_HOLD_AT writes `<release>.held`), the test releases it and kills it at once, so
the kill falls wherever the replay then is (between a segment's data and its region's
header, inside an eviction, ...), however busy the machine. Every run but the first starts
with --recover from what the kills before it left; a killed run prints any wrong byte on
stderr as it serves it, and the last run (the whole trace, --recover) counts them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from runtime_support import (
    BUILD,
    FLASHRT,
    build_runtime,
    evict_bundle,
    fixed_range_trace,
    make_bundle,
)

N = 6000  # accesses of the trace
SEG = 128 * 1024


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    build_runtime()
    d = tmp_path_factory.mktemp("recover")
    trace = fixed_range_trace(d / "fixed.trace", n=N, blocks=300, seed=5)
    backing = d / "backing.img"
    p = subprocess.run([str(FLASHRT), "prepare-backing", "--backing", str(backing), "--trace",
                        str(trace)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return {"dir": d, "trace": trace, "backing": backing, "evict": evict_bundle(d / "evict"),
            "count": make_bundle(d / "count", BUILD / "policies" / "count.so")}


def args(env, flash: Path, composition: list[str]) -> list[str]:
    return [str(FLASHRT), "replay", "--trace", str(env["trace"]), "--flash", str(flash),
            "--backing", str(env["backing"]), "--flash-bytes", "12MiB", "--region-bytes",
            "256KiB", "--warmup-s", "0", "--direct", "off", "--json", *composition]


def killed_run(cmd: list[str], at: int, release: Path) -> subprocess.CompletedProcess[str]:
    """Runs cmd, holds it after `at` accesses, releases it and kills it at once."""
    release.unlink(missing_ok=True)
    held = Path(f"{release}.held")
    held.unlink(missing_ok=True)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "FLASHRT_TEST_HOLD": str(release),
                                 "FLASHRT_TEST_HOLD_AT": str(at)})
    try:
        deadline = time.monotonic() + 300  # a hang guard: the hold comes within seconds
        while not held.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the replay never reached its hold"
            time.sleep(0.005)
        release.touch()
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        out, errs = proc.communicate()
    return subprocess.CompletedProcess(cmd, proc.returncode, out, errs)


def crash_and_recover(env, name: str, composition: list[str], kills: int, seed: int) -> dict:
    flash = env["dir"] / f"{name}.img"
    for f in (flash, Path(f"{flash}.journal")):
        f.unlink(missing_ok=True)
    cmd = args(env, flash, composition)
    points = np.random.default_rng(seed).integers(50, N - 50, kills)
    for i, at in enumerate(points):
        p = killed_run(cmd + (["--recover"] if i else []), int(at), env["dir"] / f"{name}.rel")
        assert p.returncode in (-signal.SIGKILL, 0), p.stderr
        assert "integrity error" not in p.stderr, (i, int(at), p.stderr)
        assert flash.exists()
    p = subprocess.run(cmd + ["--recover"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    m = json.loads(p.stdout)
    assert m["integrity_errors"] == 0 and m["verified_bytes"] > 0
    assert m["recovered_regions"] > 0 and m["recovered_segments"] > 0
    assert m["recovered_hits"] > 0  # the rebuilt regions serve
    for f in (flash, Path(f"{flash}.journal")):
        f.unlink(missing_ok=True)
    return m


def test_kill_9_at_20_points_then_recover(env):
    """Admit-all + LRU: 20 kills at seeded random points, each run recovering from the last."""
    crash_and_recover(env, "lru", ["--admission", "admitall", "--eviction", "lru"], 20, 1)


COMPOSITIONS = {
    "rejectx-fifo-tire": ["--admission", "rejectx", "--eviction", "fifo", "--budget", "tire",
                          "--lifespan-epbpd", "40000"],
    "coinflip-mru-bucket": ["--admission", "coinflip", "--coinflip-p", "0.7", "--eviction",
                            "mru", "--budget", "bucket", "--write-rate-mbps", "4000"],
    "bundle-mat": ["--policy", "{count}", "--eviction", "mat", "--eviction-bundle", "{evict}"],
    "admitall-lru-packing": ["--admission", "admitall", "--placement", "packing"],
    "admitall-fifo-even": ["--admission", "admitall", "--eviction", "fifo", "--partition", "even"],
}


@pytest.mark.parametrize("name", sorted(COMPOSITIONS))
def test_compositions_recover(env, name):
    composition = [a.format(**{k: str(v) for k, v in env.items()}) for a in COMPOSITIONS[name]]
    crash_and_recover(env, name, composition, 5, 2)


def test_read_errors_are_journalled_and_not_recovered(env):
    """A segment whose flash read failed leaves the index and is journalled (FLASH.journal,
    one (block, seal) record each), and a recovery over the journal serves every byte right
    (runtime/tests/test_engine.c shows by hand that a journalled copy does not come back)."""
    flash = env["dir"] / "faults.img"
    journal = Path(f"{flash}.journal")
    cmd = args(env, flash, ["--admission", "admitall", "--fail-read-every", "9"])
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    m = json.loads(first.stdout)
    assert m["flash_read_errors"] > 0 and m["journalled"] > 0
    assert journal.stat().st_size == 16 * m["journalled"]  # (block, seal) records
    again = subprocess.run(cmd[:-2] + ["--recover"], capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    r = json.loads(again.stdout)
    assert r["integrity_errors"] == 0 and r["recovered_hits"] > 0
    # without --recover the flash starts empty: nothing rebuilt, the journal emptied
    cold = subprocess.run(cmd[:-2], capture_output=True, text=True, timeout=300)
    c = json.loads(cold.stdout)
    assert c["recovered_regions"] == 0 and c["recovered_hits"] == 0
    flash.unlink()
    journal.unlink()


def test_recover_refuses_another_layout(env):
    """--recover with a --flash-bytes or --region-bytes other than the file's: refused before
    anything is served, naming the options; the file is left as it was."""
    flash = env["dir"] / "layout.img"
    cmd = args(env, flash, ["--admission", "admitall", "--limit", "500"])
    assert subprocess.run(cmd, capture_output=True, timeout=300).returncode == 0
    size = flash.stat().st_size
    for i, opt in enumerate(cmd):
        if opt in ("--flash-bytes", "--region-bytes"):
            other = cmd[:i + 1] + ["16MiB" if opt == "--flash-bytes" else "512KiB"] + cmd[i + 2:]
            p = subprocess.run(other + ["--recover"], capture_output=True, text=True, timeout=300)
            assert p.returncode == 1 and "--flash-bytes and --region-bytes" in p.stderr, p.stderr
            assert p.stdout == "" and flash.stat().st_size == size
    p = subprocess.run(cmd + ["--recover"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and json.loads(p.stdout)["recovered_regions"] > 0, p.stderr
    flash.unlink()
    Path(f"{flash}.journal").unlink()


def test_journal_is_not_an_input(env, tmp_path):
    """The flash file's journal is written (emptied without --recover): a trace by that name
    is refused before anything is written, and left as it was."""
    flash = tmp_path / "f.img"
    journal = Path(f"{flash}.journal")
    journal.write_bytes(env["trace"].read_bytes())
    cmd = args(env, flash, ["--admission", "admitall"])
    cmd[cmd.index("--trace") + 1] = str(journal)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 1 and "--flash's journal" in p.stderr, p.stderr
    assert journal.read_bytes() == env["trace"].read_bytes() and not flash.exists()
