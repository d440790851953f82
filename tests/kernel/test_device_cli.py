"""`flashml device probe` and `flashml device check` as commands: the probe of a plain file
(no root needed; skips where the file system refuses O_DIRECT), and the refusals made before
any work (inputs never overwritten, a missing root / loop / cgroup / FUSE named, nothing
written). The real check on a throttled device is tests/kernel/test_device.py (root)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from flashml.cli import main

from conftest import REPO


def _o_direct_ok(d: Path) -> str | None:
    f = d / "odirect.probe"
    f.write_bytes(b"\0" * 4096)
    try:
        os.close(os.open(f, os.O_RDONLY | os.O_DIRECT))
    except OSError as e:
        return f"{d}'s file system refuses O_DIRECT ({e.strerror}): the probe cannot read it"
    finally:
        f.unlink()
    return None


@pytest.fixture
def data(tmp_path: Path) -> Path:
    why = _o_direct_ok(tmp_path)
    if why:
        pytest.skip(why)
    f = tmp_path / "data.img"
    f.write_bytes(os.urandom(8 << 20))
    return f


def test_probe_of_a_file_writes_the_two_simulator_keys(data: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture) -> None:
    from flashml.simulation import SimConfig

    out = tmp_path / "disk.json"
    before = data.read_bytes()
    for seed in range(3):
        rc = main(["device", "probe", str(data), "--seconds", "0.3", "--seed", str(seed),
                   "--out", str(out)])
        got = capsys.readouterr()
        if rc == 0:
            break
        # a plain file is no bottleneck: on a busy machine the scheduler's noise can hide
        # the read time's growth with size, which the probe refuses to fit (a clear error)
        assert rc == 1 and "read time does not grow with size" in got.err, got.err
        assert not out.exists()
    else:
        pytest.skip("this machine's scheduling noise hid the reads' growth with size in "
                    "three probes of a plain file")
    printed = json.loads(got.out)
    disk = json.loads(out.read_text())
    assert set(disk) == {"t_seek_s", "bandwidth_bytes_per_s"}
    assert all(math.isfinite(v) and v >= 0 for v in disk.values()), disk
    assert disk == {k: printed[k] for k in disk} and set(printed["reads"]) == set(
        printed["mean_read_s"])
    SimConfig(**disk)
    assert data.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.img", "disk.json"]


@pytest.mark.parametrize("how", ["same", "symlink"])
def test_probe_refuses_to_write_over_its_device(data: Path, tmp_path: Path, how: str,
                                                capsys: pytest.CaptureFixture) -> None:
    out = data
    if how == "symlink":
        out = tmp_path / "link.json"
        out.symlink_to(data)
    before = data.read_bytes()
    assert main(["device", "probe", str(data), "--seconds", "0.1", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "--out" in err and "DEVICE" in err and "refusing" in err, err
    assert data.read_bytes() == before


def test_probe_names_a_missing_or_wrong_device(tmp_path: Path,
                                               capsys: pytest.CaptureFixture) -> None:
    assert main(["device", "probe", str(tmp_path / "nope")]) == 1
    assert "no such block device or file (DEVICE)" in capsys.readouterr().err
    assert main(["device", "probe", str(tmp_path)]) == 1
    assert "not a block device or a regular file" in capsys.readouterr().err


@pytest.mark.parametrize("argv,needle", [
    (["device", "probe", "x", "--seconds", "0"], "--seconds: must be >= 0.05 s"),
    (["device", "probe", "x", "--seconds", "nan"], "--seconds: expected a finite number"),
    (["device", "check", "--trace", "t", "-o", "o", "--read-mibps", "0"],
     "--read-mibps: must be >= 0.01 MiB/s"),
    (["device", "check", "--trace", "t", "-o", "o", "--device-mib", "8"],
     "--device-mib: must be >= 64 MiB"),
    (["device", "check", "--trace", "t", "-o", "o", "--admission", "lru"],
     "--admission: invalid choice"),
])
def test_bad_numbers_are_usage_errors_naming_option_and_unit(
        argv: list[str], needle: str, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert needle in capsys.readouterr().err


def _trace(tmp_path: Path) -> Path:
    t = tmp_path / "t.trace"
    t.write_text("#version 201910\n1 0 131072 0.5 1 1 1 1\n")
    return t


def test_check_refuses_before_any_work(tmp_path: Path, capsys: pytest.CaptureFixture,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Output = input, a bundle without a manifest, a bad disk config, and a machine without
    root / loop / cgroup / FUSE: one error naming it, exit 1, nothing written."""
    import flashml.device.host as host
    import flashml.device.throttled as throttled

    t = _trace(tmp_path)
    out = tmp_path / "device.json"
    base = ["device", "check", "--trace", str(t)]
    assert main([*base, "-o", str(t)]) == 1
    assert "option -o names the same file as --trace" in capsys.readouterr().err
    (tmp_path / "b").mkdir()
    assert main([*base, "-o", str(out), "--bundle", str(tmp_path / "b")]) == 1
    assert "option --bundle: no manifest.json" in capsys.readouterr().err
    bad = tmp_path / "disk.json"
    bad.write_text('{"t_seek_s": -1, "bandwidth_bytes_per_s": 1e6}')
    assert main([*base, "-o", str(out), "--disk", str(bad)]) == 1
    assert "option --disk" in capsys.readouterr().err
    fifo = tmp_path / "t.fifo"
    os.mkfifo(fifo)
    assert main(["device", "check", "--trace", str(fifo), "-o", str(out)]) == 1
    assert "option --trace: not a regular file" in capsys.readouterr().err
    for loop_why, fuse_why in (("needs root (loop devices, mount, io cgroup)", None),
                               (None, "no /dev/fuse on this machine")):
        monkeypatch.setattr(throttled, "unavailable", lambda w=loop_why: w)
        monkeypatch.setattr(host, "fuse_unavailable", lambda w=fuse_why: w)
        assert main([*base, "-o", str(out), "--workdir", str(tmp_path / "w")]) == 1
        err = capsys.readouterr().err
        assert f"device check cannot run here: {loop_why or fuse_why}" in err, err
    assert not out.exists() and not (tmp_path / "w").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b", "disk.json", "t.fifo",
                                                          "t.trace"]


def test_the_readme_device_row_follows_device_json() -> None:
    """The README's mount/device headline is rendered from bench/results/device.json: a
    changed peak makes the README stale."""
    import sys

    repo = REPO
    sys.path.insert(0, str(repo / "bench"))
    from render_headlines import _load, device_row

    readme = (repo / "README.md").read_text()
    res = _load("device")
    what, value, src = device_row(res)
    assert f"| {what} | {value} | `bench/results/{src}` |" in readme
    name = next(iter(res["policies"]))
    res["policies"][name]["peak_measured_s"] *= 2
    assert device_row(res)[1] not in readme
