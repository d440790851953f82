"""The C runtime (runtime/, `flashrt`) end to end: units, help, replay with byte verification,
agreement with the simulator, the tracker against exact counts, faults, kill -9, bad input,
probe-disk and a loop device. The C unit tests (ASan/UBSan, valgrind) run from `make test-c`."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from runtime_support import BUILD, FLASHRT, RUNTIME, build_runtime, make_bundle, run, small_trace

from flashml.config import DEFAULTS, GB, MB, UNITS

from conftest import REPO, python_argv


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    build_runtime()
    d = tmp_path_factory.mktemp("runtime")
    raw = d / "gen.trace"
    subprocess.run([*python_argv(), "-m", "flashml.cli", "trace", "generate", "--preset",
                    "region1-like", "--seed", "0", "--accesses", "12000", "--days", "1.5",
                    "--quiet", "-o", str(raw)], check=True, capture_output=True, cwd=REPO)
    trace = d / "small.trace"
    small_trace(raw, trace)
    backing = d / "backing.img"
    p = run("prepare-backing", "--backing", backing, "--trace", trace)
    assert p.returncode == 0, p.stderr
    policies = d / "policies"
    count = make_bundle(policies / "count", BUILD / "policies" / "count.so")
    return {"dir": d, "trace": trace, "backing": backing, "count": count}


def replay(env, *extra, flash_bytes="64MiB", policy=None, flash=None, proc_env=None):
    """One replay; a flash image it made itself is removed afterwards (up to 128 MiB each,
    and CI's disk is shared)."""
    own = flash is None
    flash = flash or env["dir"] / f"flash-{os.getpid()}-{time.monotonic_ns()}.img"
    args = ["replay", "--policy", policy or "builtin:admitall", "--trace", env["trace"],
            "--flash", flash, "--flash-bytes", flash_bytes, "--backing", env["backing"],
            "--warmup-s", "0", "--direct", "off", "--json", *extra]
    try:
        p = run(*args, env=proc_env)
    finally:
        if own:
            Path(flash).unlink(missing_ok=True)
    return p, (json.loads(p.stdout) if p.returncode in (0, 3) and p.stdout else None)


def test_units_match_config():
    build_runtime()
    u = json.loads(run("units").stdout)
    assert u["segment_bytes"] == UNITS.segment_bytes
    assert u["block_bytes"] == UNITS.block_bytes
    assert u["t_seek_s"] == UNITS.t_seek_s
    assert u["bandwidth_bytes_per_s"] == UNITS.bandwidth_bytes_per_s
    assert u["MB"] == MB and u["GB"] == GB
    assert u["disks"] == DEFAULTS.disks and u["window_s"] == DEFAULTS.window_s
    assert u["warmup_s"] == DEFAULTS.warmup_s and u["sample_ratio"] == DEFAULTS.sample_ratio
    assert u["cache_gb"] == DEFAULTS.cache_gb
    assert u["target_write_rate_mbps"] == DEFAULTS.target_write_rate_mbps
    from flashml.features.contract import contract
    c = contract()
    assert u["contract_hash"] == c.hash and u["num_features"] == len(c.admission)
    assert u["hour_seconds"] == c.hour_seconds and u["hours"] == c.hours
    # numbers in their shortest form that reads back exactly, as Python prints them
    text = run("units").stdout
    assert '"cache_gb": 366.475,' in text and f'"t_seek_s": {UNITS.t_seek_s!r},' in text
    assert f'"target_write_rate_mbps": {DEFAULTS.target_write_rate_mbps!r},' in text


def test_version():
    """`flashrt --version` prints flashml's version (one definition: pyproject.toml)."""
    import flashml

    build_runtime()
    p = run("--version")
    assert p.returncode == 0 and p.stdout.startswith(f"flashrt {flashml.__version__} ")


@pytest.mark.parametrize("cmd", ["replay", "prepare-backing", "probe-disk", "features", "units"])
def test_help(cmd):
    build_runtime()
    p = run(cmd, "--help")
    assert p.returncode == 0 and p.stdout.startswith(f"usage: flashrt {cmd}")
    assert run("--help").returncode == 0
    bad = run(cmd, "--no-such-option")
    assert bad.returncode == 2 and "--no-such-option" in bad.stderr


def test_replay_serves_correct_bytes_and_agrees_with_simulator(env):
    for policy, name in (("builtin:admitall", "admitall"), (str(env["count"]), "count")):
        p, m = replay(env, policy=policy, flash_bytes="128MiB")
        assert p.returncode == 0, p.stderr
        assert m["integrity_errors"] == 0 and m["device_errors"] == 0
        assert m["verified_bytes"] > 0 and m["accesses"] > 1000
        for k in ("decision_ns_p50", "features_ns_p50", "policy_ns_p50", "hit_path_us_p50",
                  "miss_path_us_p50", "peak_dt_util",
                  "dwpd", "byte_hit_ratio", "segment_hit_ratio", "backend_ios"):
            assert k in m
        # the decision's parts, each measured on the same misses, never exceed the whole
        assert m["decision_ns_p50"] >= max(m["features_ns_p50"], m["policy_ns_p50"]) >= 0
        assert m["policy_prefetch_ns_p50"] is None  # neither policy has a prefetch hint
        sim_args = ["--admission", "admitall"] if name == "admitall" else ["--policy", policy]
        assert_agrees_with_simulator(env, m, sim_args, name)
        if name == "count":
            assert m["prefetched_segments"] > 0


def assert_agrees_with_simulator(env, m: dict, sim_args: list[str], name: str) -> None:
    """Replay metrics `m` within 2% of `flashml sim run` on the same trace and capacity."""
    sim = subprocess.run([*python_argv(), "-m", "flashml.cli", "sim", "run", "--trace",
                          str(env["trace"]), "--capacity-segments",
                          str(m["capacity_segments"]), "--warmup-s", "0", "--json",
                          *sim_args], capture_output=True, text=True, cwd=REPO)
    assert sim.returncode == 0, sim.stderr
    s = json.loads(sim.stdout)
    for k in ("io_hit_ratio", "flash_write_rate_mbps"):
        assert abs(m[k] - s[k]) <= 0.02 * s[k], (name, k, m[k], s[k])


def test_tracker_error_is_bounded_against_exact_counts(env):
    from flashml.features.online import hourly_counts
    from flashml.trace.ingest import load_trace

    df, _ = load_trace(env["trace"], "tectonic")
    exact = hourly_counts(df)
    for width, want_exact in ((14, 0.999), (6, 0.5)):
        p = run("features", "--trace", env["trace"], "--tracker-width-log2", width)
        assert p.returncode == 0, p.stderr
        lines = p.stdout.strip().split("\n")
        names = lines[0].split(",")
        est = np.array([[float(x) for x in ln.split(",")] for ln in lines[1:]])
        assert est.shape[0] == df.height
        for col in exact.columns:
            e, g = exact[col].to_numpy(), est[:, names.index(col)]
            assert (g >= e).all(), col  # count-min never undercounts
            assert (g == e).mean() >= want_exact, (col, width, (g == e).mean())
            # the count-min bound: overcount <= e/width x (GETs in the hour) with high prob.
            assert np.quantile(g - e, 0.99) <= np.e / 2**width * df.height + 1, col


def test_flash_faults_fall_back_to_backing(env):
    e = dict(os.environ, FLASHRT_FAULT_FLASH_READ_EVERY="5", FLASHRT_FAULT_FLASH_WRITE_EVERY="3")
    p, m = replay(env, proc_env=e)
    assert p.returncode == 0, p.stderr
    assert m["integrity_errors"] == 0
    assert m["flash_read_errors"] > 0 and m["flash_write_errors"] > 0
    assert m["device_errors"] == m["flash_read_errors"] + m["flash_write_errors"]


def test_kill_during_replay_then_restart(env):
    """SIGKILL in the middle of a replay (held after half its accesses by the test hook, so
    the kill lands mid-run however busy the machine), then a replay on the same flash file:
    every byte it serves is still right."""
    flash = env["dir"] / "killed-flash.img"
    release = env["dir"] / "killed-release"
    half = sum(1 for ln in env["trace"].read_text().splitlines()
               if ln.strip() and not ln.startswith("#")) // 2
    args = [str(FLASHRT), "replay", "--policy", "builtin:admitall", "--trace", str(env["trace"]),
            "--flash", str(flash), "--flash-bytes", "32MiB", "--backing", str(env["backing"]),
            "--warmup-s", "0", "--json"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "FLASHRT_TEST_HOLD": str(release),
                                 "FLASHRT_TEST_HOLD_AT": str(half)})
    try:
        held = Path(f"{release}.held")
        deadline = time.monotonic() + 300
        while not held.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the replay never reached its middle"
            time.sleep(0.01)
        assert flash.stat().st_blocks > 0, "killed before it wrote to flash"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    p, m = replay(env, flash=flash, flash_bytes="32MiB")
    assert p.returncode == 0, p.stderr
    assert m["integrity_errors"] == 0 and m["hits"] > 0


def test_bad_input_is_refused_clearly(env, tmp_path):
    trunc = tmp_path / "trunc.trace"
    text = env["trace"].read_text().splitlines()
    trunc.write_text("\n".join(text[:50]) + "\n" + " ".join(text[50].split()[:3]))
    p, _ = replay(env, "--fallback", "none")
    assert p.returncode == 0
    p = run("replay", "--policy", "builtin:admitall", "--trace", trunc, "--flash",
            tmp_path / "f.img", "--flash-bytes", "8MiB", "--backing", env["backing"])
    assert p.returncode == 1 and f"{trunc}:51" in p.stderr and "field 'op_time'" in p.stderr
    assert "truncated" in p.stderr
    p, _ = replay(env, flash=Path("/dev/flashrt-missing-device"))
    assert p.returncode == 1 and "no such device" in p.stderr
    p, _ = replay(env, flash_bytes="512KiB")
    assert p.returncode == 1 and "too small for one region" in p.stderr
    assert "(--flash-bytes; 0 = the file's size)" in p.stderr and "(--region-bytes)" in p.stderr
    p, _ = replay(env, flash_bytes=str(2**63))
    assert p.returncode == 1 and "--flash-bytes 9223372036854775808: more segments" in p.stderr
    garbage = tmp_path / "garbage.so"
    garbage.write_bytes(b"\x7fELF garbage" * 10)
    corrupt = make_bundle(tmp_path / "corrupt", garbage)
    foreign = make_bundle(tmp_path / "foreign", BUILD / "policies" / "foreign.so")
    badsha = make_bundle(tmp_path / "badsha", BUILD / "policies" / "count.so", sha="0" * 64)
    wrongabi = make_bundle(tmp_path / "wrongabi", BUILD / "policies" / "wrongabi.so")
    wronghash = make_bundle(tmp_path / "wronghash", BUILD / "policies" / "wronghash.so")
    for bundle, words in ((corrupt, "cannot load"), (foreign, "not a flashml policy"),
                          (badsha, "sha256"), (wrongabi, "ABI 2"),
                          (wronghash, "contract hash")):
        p, _ = replay(env, policy=str(bundle))
        assert p.returncode == 1 and "refused" in p.stderr and words in p.stderr, p.stderr
        p, m = replay(env, "--fallback", "rejectx", policy=str(bundle), flash_bytes="16MiB")
        assert p.returncode == 0 and m["policy"] == "rejectx" and words in m["policy_warning"]
        assert m["integrity_errors"] == 0
    p, _ = replay(env, policy=str(tmp_path / "nowhere"))
    assert p.returncode == 1 and "nowhere" in p.stderr
    p = run("prepare-backing", "--backing", tmp_path / "b.img", "--trace", trunc)
    assert p.returncode == 1 and "trunc.trace:51" in p.stderr
    assert not (tmp_path / "b.img").exists() and not (tmp_path / "b.img.map").exists()


def test_probe_disk_writes_simulator_config(env, tmp_path):
    out = tmp_path / "disk.json"
    p = run("probe-disk", "--device", env["backing"], "--out", out, "--reads", "50",
            "--seq-bytes", "16MiB")
    assert p.returncode == 0, p.stderr
    d = json.loads(out.read_text())
    assert d["t_seek_s"] >= 0 and d["bandwidth_bytes_per_s"] > 0
    from flashml.simulation import SimConfig
    cfg = SimConfig(t_seek_s=d["t_seek_s"], bandwidth_bytes_per_s=d["bandwidth_bytes_per_s"])
    assert cfg.t_seek_s == d["t_seek_s"]
    p = run("probe-disk", "--device", "/dev/flashrt-missing-device")
    assert p.returncode == 1 and "flashrt-missing-device" in p.stderr


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("losetup") is None,
                    reason="loop devices need root and losetup")
def test_loop_device(env, tmp_path):
    img = tmp_path / "loop.img"
    with open(img, "wb") as f:
        f.truncate(48 << 20)
    p = subprocess.run(["losetup", "--find", "--show", str(img)], capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"losetup unavailable here: {p.stderr.strip()}")
    dev = p.stdout.strip()
    try:
        p, _ = replay(env, flash=Path(dev), flash_bytes="32MiB")
        assert p.returncode == 1 and "--allow-block-device" in p.stderr
        p, m = replay(env, "--allow-block-device", flash=Path(dev), flash_bytes="32MiB")
        assert p.returncode == 0, p.stderr
        assert m["integrity_errors"] == 0 and m["hits"] > 0
        p, _ = replay(env, "--allow-block-device", flash=Path(dev), flash_bytes="1GiB")
        assert p.returncode == 1 and "less than --flash-bytes" in p.stderr
    finally:
        subprocess.run(["losetup", "-d", dev], check=False)


def test_compiled_policy_and_its_prefetch_hint(env, tmp_path):
    """A policy compiled by `flashml compile` serves correct bytes; its prefetch hint
    (flashml_policy_prefetch, called on every GET and between accesses unless
    --no-policy-prefetch) changes no decision: the cache's counters are identical with and
    without it; and its decisions (one flashml_policy_decide call per miss) agree with the
    simulator's .so path (separate calls) within 2%, with a peak schedule in force
    (flashml_policy_decide_at: a lower threshold from 10:00 to 16:00 UTC)."""
    from flashml.compiler.build import compile_policy
    from flashml.trace.ingest import load_trace

    from demo_policy import write_demo_bundle

    df, _ = load_trace(env["trace"], "tectonic")
    write_demo_bundle(df, tmp_path / "models", peak_hours=tuple(range(10, 16)), peak_bonus=0.2)
    compile_policy(tmp_path / "policy", model_dir=tmp_path / "models")
    runs = {}
    for name, extra in (("hint", ()), ("no hint", ("--no-policy-prefetch",))):
        p, m = replay(env, *extra, policy=str(tmp_path / "policy"), flash_bytes="128MiB")
        assert p.returncode == 0, p.stderr
        assert m["integrity_errors"] == 0 and m["verified_bytes"] > 0
        runs[name] = m
    assert runs["hint"]["policy_prefetch_ns_p50"] > 0
    assert runs["no hint"]["policy_prefetch_ns_p50"] is None
    for k in ("hits", "backend_ios", "admitted_segments", "prefetched_segments",
              "io_hit_ratio", "flash_write_rate_mbps", "peak_dt_util"):
        assert runs["hint"][k] == runs["no hint"][k], k
    assert runs["hint"]["admitted_segments"] > 0
    # the runtime decides with flashml_policy_decide, the simulator with the separate calls
    assert runs["hint"]["prefetched_segments"] > 0
    assert_agrees_with_simulator(env, runs["hint"], ["--policy", str(tmp_path / "policy")],
                                 "compiled")


def test_size_units_are_one_table(tmp_path):
    """flashrt reads sizes as flashml does (docs/reference/conventions.md, "Sizes"): the same
    spellings, the same values, the same refusals (bare K/M/G/T are ambiguous)."""
    from flashml.simulation import parse_capacity

    build_runtime()
    trace = tmp_path / "o.csv"
    trace.write_text("time,key,size\n0,1,1\n")

    def rt(text):
        p = subprocess.run([str(FLASHRT), "mat-replay", "--no-model", "--no-data", "--trace",
                            str(trace), "--capacity", text, "--json"], capture_output=True,
                           text=True)
        return json.loads(p.stdout)["capacity"] if p.returncode == 0 else None

    for text in ("4096", "7B", "3KB", "2kb", "5MB", "1GB", "2TB", "3KiB", "2mib", "1GiB",
                 "1TiB"):
        assert rt(text) == parse_capacity(text)[0], text
    for text in ("64M", "1G", "512K", "2T", "1.5MiB", "5obj", "MiB", "-1"):
        assert rt(text) is None, text
        if text[-1] in "KMGT":
            with pytest.raises(ValueError, match="powers of 1000"):
                parse_capacity(text)


def test_library_archive_holds_exactly_the_sources_objects():
    """libflashrt.a has one member per library source under runtime/src/ (all but the command
    line's: src/cli/, src/fuse/ and each system's cli_*.c), and no other: a member of a file
    since moved or removed would keep its old symbols in the library the harnesses link (the
    archive is built afresh, not updated)."""
    build_runtime()
    src = RUNTIME / "src"
    want = sorted(p.with_suffix(".o").name for p in src.rglob("*.c")
                  if p.relative_to(src).parts[0] not in ("cli", "fuse")
                  and not p.name.startswith("cli_"))
    members = subprocess.run(["ar", "t", str(BUILD / "libflashrt.a")], capture_output=True,
                             text=True, check=True).stdout.split()
    assert sorted(members) == want
