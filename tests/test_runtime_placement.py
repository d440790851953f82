"""The engine's placement slot (runtime/src/policies/placement/): `flashrt replay --placement
single|packing` (one open region, or Pannier's hot/cold packing: a hot and a cold open region
chosen by the ghost sketch's counts) serves every byte right; single is the engine as it was;
and the slot's command-line errors, with --partition's (the simulator's partition policies
are not in the engine yet), come before any file is touched."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from test_runtime import FLASHRT, build_runtime
from test_runtime_engine import fixed_range_trace


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    build_runtime()
    d = tmp_path_factory.mktemp("placement")
    trace = fixed_range_trace(d / "fixed.trace", n=4000, blocks=300, seed=11)
    backing = d / "backing.img"
    p = subprocess.run([str(FLASHRT), "prepare-backing", "--backing", str(backing), "--trace",
                        str(trace)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return {"dir": d, "trace": trace, "backing": backing}


def replay(env, *extra: str, flash: Path | None = None,
           clean: bool = True) -> subprocess.CompletedProcess[str]:
    flash = flash or env["dir"] / "flash.img"
    try:
        return subprocess.run(
            [str(FLASHRT), "replay", "--trace", str(env["trace"]), "--flash", str(flash),
             "--backing", str(env["backing"]), "--flash-bytes", "24MiB", "--region-bytes",
             "512KiB", "--warmup-s", "0", "--direct", "off", "--json", "--admission",
             "admitall", *extra], capture_output=True, text=True, timeout=300)
    finally:
        if clean:
            flash.unlink(missing_ok=True)
            Path(f"{flash}.journal").unlink(missing_ok=True)


def test_packing_serves_right_bytes_and_single_is_the_default(env):
    runs = {name: replay(env, *args) for name, args in
            (("default", []), ("single", ["--placement", "single"]),
             ("packing", ["--placement", "packing"]))}
    m = {k: json.loads(p.stdout) for k, p in runs.items() if p.returncode == 0}
    assert len(m) == 3, {k: p.stderr for k, p in runs.items()}
    keys = ("hits", "admitted_segments", "evicted_regions", "evicted_segments", "backend_ios")
    assert {k: m["single"][k] for k in keys} == {k: m["default"][k] for k in keys}
    assert m["single"]["placement"] == "single" and m["packing"]["placement"] == "packing"
    assert m["single"]["placement_hot_misses"] == 0
    pk = m["packing"]
    assert pk["integrity_errors"] == 0 and pk["verified_bytes"] > 0
    # packing sent some misses hot and some cold, so its regions (and evictions) differ
    assert 0 < pk["placement_hot_misses"] < pk["gets"] - pk["hits"]
    assert (pk["hits"], pk["evicted_segments"]) != (m["single"]["hits"],
                                                    m["single"]["evicted_segments"])


@pytest.mark.parametrize(("args", "message"), [
    (["--placement", "packing", "--placement", "single"], "--placement given twice"),
    (["--placement", "hot"], "--placement: invalid value 'hot' (expected single or packing)"),
    (["--partition", "even"], "--partition even: not in this runtime yet"),
    (["--partition", "mlcache"], "--partition mlcache: not in this runtime yet"),
    (["--partition", "shared", "--partition", "even"], "--partition given twice"),
    (["--partition", "lfu"], "--partition: invalid value 'lfu'"),
])
def test_placement_and_partition_errors_before_any_io(env, args, message):
    flash = env["dir"] / "refused.img"
    p = replay(env, *args, flash=flash, clean=False)
    assert p.returncode == 2 and message in p.stderr, p.stderr
    assert p.stdout == "" and not flash.exists() and not Path(f"{flash}.journal").exists()


def test_partition_shared_is_the_engine(env):
    a, b = replay(env), replay(env, "--partition", "shared")
    assert a.returncode == b.returncode == 0, a.stderr + b.stderr
    keys = ("hits", "admitted_segments", "evicted_segments")
    ma, mb = json.loads(a.stdout), json.loads(b.stdout)
    assert {k: ma[k] for k in keys} == {k: mb[k] for k in keys}
