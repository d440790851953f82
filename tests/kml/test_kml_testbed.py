"""KML's real experiment (flashml/systems/kml/testbed.py): db_bench on ext4 on a loop device. Skips
with the reason where root, loop devices or db_bench (Debian's rocksdb-tools; `.ci/run`
installs it) are missing. Checks that the readahead is really set, db_bench's figures are
parsed, the sweep names a best size per workload, and nothing is left behind, also when a
step fails inside the testbed."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from flashml.errors import UserError
from flashml.systems.kml import testbed as kml

WHY = kml.unavailable()
needs_testbed = pytest.mark.skipif(WHY is not None, reason=f"KML testbed: {WHY}")


def loops_on(path: Path) -> str:
    return subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout


def test_parse_db_bench() -> None:
    text = ("Initializing RocksDB Options from the specified file\n"
            "readrandom   :      64.853 micros/op 15419 ops/sec 1.297 seconds 20000 operations;"
            "    6.1 MB/s (20000 of 20000 found)\n")
    assert kml.parse_db_bench(text, "readrandom") == {"micros_per_op": 64.853,
                                                      "ops_per_s": 15419.0}
    with pytest.raises(UserError, match="no result line for readseq"):
        kml.parse_db_bench(text, "readseq")


@needs_testbed
def test_testbed_sweeps_and_cleans_up(tmp_path: Path) -> None:
    with kml.Testbed(tmp_path, size_bytes=256 << 20) as tb:
        dev, mnt, img = tb.device, tb.mount, tb.backing
        assert dev and mnt and img and img.exists()
        assert str(img) in loops_on(img)
        tb.set_readahead(64)
        assert tb.readahead_kib() == 64
        assert tb.fill(20_000)["ops_per_s"] > 0
        res = kml.sweep(tb, ("readrandom", "readseq"), (8, 512), reads=2_000)
        for w in ("readrandom", "readseq"):
            assert set(res[w]["ops_per_s"]) == {8, 512}
            assert all(v > 0 for v in res[w]["ops_per_s"].values())
            assert res[w]["best_ops_per_s"] == max(res[w]["ops_per_s"].values())
        with pytest.raises(UserError, match="workload"):
            tb.run("nope", 8, 10)
    assert not img.exists() and not mnt.exists() and str(img) not in loops_on(img)


@needs_testbed
def test_testbed_cleans_up_after_a_failure(tmp_path: Path) -> None:
    tb = kml.Testbed(tmp_path, size_bytes=128 << 20, memory_limit_bytes=64 << 20,
                     read_iops=500, read_bps=8 << 20)
    with pytest.raises(RuntimeError, match="boom"), tb:
        img, cgs = tb.backing, list(tb.cgroups)
        assert cgs and all(cg.is_dir() for cg in cgs)
        throttles = [(cg / f).read_text() for cg in cgs for f in (
            "blkio.throttle.read_iops_device", "io.max") if (cg / f).exists()]
        assert any("500" in t for t in throttles), throttles  # the loop device is throttled
        raise RuntimeError("boom")
    assert tb.device is None and not img.exists() and str(img) not in loops_on(img)
    assert not any(cg.exists() for cg in cgs)
    with pytest.raises(UserError, match="at least 64 MiB"):
        kml.Testbed(tmp_path, size_bytes=1 << 20)


def test_window_features_by_hand() -> None:
    from flashml.features.readahead import contract
    from flashml.systems.kml.collect import window_features

    # window 0: pages 10, 12, 11; window 1: 100; (window 2 empty); window 3: 100, 104
    ev = [(5.0, 1, 10), (5.2, 1, 12), (5.9, 1, 11), (6.5, 1, 100), (8.1, 1, 100),
          (8.2, 1, 104)]
    rows = window_features(ev, readahead_kib=64)
    assert [r["window"] for r in rows] == [0, 1, 3]
    assert [r["tracepoints"] for r in rows] == [3, 1, 2]
    assert rows[0]["offset_mean"] == pytest.approx(11.0)
    assert rows[0]["offset_std"] == pytest.approx((2 / 3) ** 0.5)
    assert rows[0]["offset_absdiff_mean"] == pytest.approx(1.5)  # |12-10|, |11-12|
    # the mean and std are the window's own (KML's collector: Welford over the window)
    assert (rows[1]["offset_mean"], rows[1]["offset_std"]) == (100.0, 0.0)
    assert rows[2]["offset_mean"] == pytest.approx(102.0)
    assert rows[2]["offset_std"] == pytest.approx(2.0)
    assert rows[2]["offset_absdiff_mean"] == pytest.approx(4.0)
    assert all(r["readahead_kib"] == 64 for r in rows)
    assert set(contract().names) <= set(rows[0])
    assert window_features([], 8) == []


@needs_testbed
def test_tracer_sees_the_workloads_pages(tmp_path: Path) -> None:
    """The tracepoint of the testbed's device only, in a tracing instance removed after; a
    sequential read shows small offset jumps, a random read large ones."""
    from flashml.systems.kml import collect

    if collect.unavailable():
        pytest.skip(f"page-cache tracing: {collect.unavailable()}")
    with kml.Testbed(tmp_path, size_bytes=256 << 20) as tb:
        tb.fill(50_000)
        feats = {}
        for w in ("readseq", "readrandom"):
            tb.set_readahead(8)
            kml.drop_caches()
            with collect.PageCacheTracer(tb.device) as tr:
                tb._db_bench(w, "--num=50000", "--use_existing_db=1", "--reads=5000")
            assert tr.events, w
            feats[w] = collect.window_features(tr.events, 8)[0]
        inst = list(Path("/sys/kernel/tracing/instances").glob("flashml-kml-*")) \
            if Path("/sys/kernel/tracing/instances").is_dir() else []
        assert inst == []
    assert feats["readseq"]["offset_absdiff_mean"] < feats["readrandom"]["offset_absdiff_mean"]


def _fake_testbed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                  ) -> tuple[kml.Testbed, list, list]:
    """A Testbed whose device, mount and db_bench are stand-ins (no root): the commands it
    would run are recorded, and the database each run found (file names, MANIFEST, the
    first SST's inode); the "db_bench" of a run adds a file to the database and appends to
    its MANIFEST, as a write workload's flush and compaction do."""
    tb = object.__new__(kml.Testbed)
    tb.mount, tb.cgroups, tb.value_size = tmp_path / "mnt", [], 400
    tb.db_bench_flags, tb.num = kml.DB_BENCH_FLAGS, 0
    calls: list[list[str]] = []
    found: list[tuple[list[str], str, int]] = []

    def fake_run(cmd: list[str], what: str, timeout: float = 600) -> str:
        calls.append(cmd)
        db = tb.mount / "db"
        db.mkdir(parents=True, exist_ok=True)
        if (db / "MANIFEST-000001").exists():
            found.append((sorted(p.name for p in db.iterdir()),
                          (db / "MANIFEST-000001").read_text(),
                          (db / "000001.sst").stat().st_ino))
        if "--benchmarks=fillseq,compact" in cmd:
            (db / "000001.sst").write_text("keys")
            (db / "MANIFEST-000001").write_text("v1\n")
            (db / "CURRENT").write_text("MANIFEST-000001\n")
        else:
            (db / f"{len(calls):06d}.sst").write_text("flushed updates")
            with open(db / "MANIFEST-000001", "a") as f:
                f.write("edit\n")
        bench = next(a for a in cmd if a.startswith("--benchmarks=")).split("=")[1]
        name = bench.split(",")[0]
        return f"{name} : 10.0 micros/op 100000 ops/sec\n"

    monkeypatch.setattr(kml, "_run", fake_run)
    monkeypatch.setattr(kml, "drop_caches", lambda: None)
    monkeypatch.setattr(kml.Testbed, "set_readahead", lambda self, kib: None)
    return tb, calls, found


def test_every_run_starts_from_the_filled_database(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A write workload's run left its flushed files and compactions behind, so every later
    run met an older database (updaterandom at one size: 1,998 -> 1,455 ops/s within two
    runs). Now each run starts from the database as filled: the SST files hard-linked from
    its snapshot (never copied), the MANIFEST copied (RocksDB appends to it)."""
    tb, calls, found = _fake_testbed(tmp_path, monkeypatch)
    tb.fill(1000)
    db, base = tb.mount / "db", tb.mount / "db.base"
    filled = ["000001.sst", "CURRENT", "MANIFEST-000001"]
    assert sorted(p.name for p in base.iterdir()) == filled
    for _ in range(3):
        tb.run("updaterandom", 16, reads=100, duration_s=5)
        assert len(list(db.iterdir())) == 4  # the run's own flush, gone before the next run
    # every run found the database as filled: the SST the snapshot's own file (a hard
    # link, not a copy), the MANIFEST without the earlier runs' edits
    sst = (base / "000001.sst").stat().st_ino
    assert found == [(filled, "v1\n", sst)] * 3
    assert (base / "MANIFEST-000001").read_text() == "v1\n"  # the snapshot never changes
    # db_bench checks --duration after every op (its default, every 1,000 ops, let a 5 s
    # run at 21 ops/s last 48 s)
    assert all("--ops_between_duration_checks=1" in c for c in calls)
    assert any("--duration=5" in c for c in calls)


def test_restore_needs_a_filled_database(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    tb, _, _ = _fake_testbed(tmp_path, monkeypatch)
    (tb.mount / "db").mkdir(parents=True)
    with pytest.raises(UserError, match="fill the database first"):
        tb.restore()
