"""KML's real experiment (flashml/kml/testbed.py): db_bench on ext4 on a loop device. Skips
with the reason where root, loop devices or db_bench (Debian's rocksdb-tools; `.ci/run`
installs it) are missing. Checks that the readahead is really set, db_bench's figures are
parsed, the sweep names a best size per workload, and nothing is left behind, also when a
step fails inside the testbed."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from flashml.errors import UserError
from flashml.kml import testbed as kml

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
    tb = kml.Testbed(tmp_path, size_bytes=128 << 20)
    with pytest.raises(RuntimeError, match="boom"), tb:
        img = tb.backing
        raise RuntimeError("boom")
    assert tb.device is None and not img.exists() and str(img) not in loops_on(img)
    with pytest.raises(UserError, match="at least 64 MiB"):
        kml.Testbed(tmp_path, size_bytes=1 << 20)
