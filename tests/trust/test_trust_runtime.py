"""flashrt under hostile bundles, races and shared files: the verified loader (a swapped .so,
a symbolic link flipped between a good and an evil .so while flashrt loads the bundle, FIFOs,
values and manifests that lie), outputs that are inputs (by name, symbolic link, hard link),
two runs on one flash/cache file (the second refused naming the first's PID), and FIFOs that
used to hang it. The evil .so (runtime/tests/policies/evil.c) writes a marker file from its
constructor: the marker must never appear."""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from manifest_corpus import CORPUS, apply_case
from runtime_support import BUILD, FLASHRT, build_runtime

from conftest import REPO

POLICIES = BUILD / "policies"
FORMAT = "flashml-policy-bundle/1"
HEADER = REPO / "flashml" / "compiler" / "flashml_policy.h"


def contract_hash(name: str) -> str:
    m = re.search(rf'#define {name} "([0-9a-f]{{64}})"', HEADER.read_text())
    assert m, name
    return m.group(1)


def flashrt(*args: object, env: dict[str, str] | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(FLASHRT), *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=timeout)


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def bundle(directory: Path, so: str = "admitall.so", *, vouch: str | None = None,
           **fields: object) -> Path:
    """A compiled admission bundle: policy.so = POLICIES/so, the manifest vouching for
    POLICIES/vouch (default: so); `fields` replace or add manifest fields."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "policy.so").write_bytes((POLICIES / so).read_bytes())
    v = POLICIES / (vouch or so)
    manifest: dict[str, object] = {
        "format": FORMAT, "abi_version": 1, "capabilities": ["admission", "prefetch"],
        "contract_hash": contract_hash("FLASHML_POLICY_CONTRACT_HASH"), "policy_so": "policy.so",
        "sha256": sha(v), "size_bytes": v.stat().st_size, "eviction_age_s": 7200.0,
        "target_write_rate_mbps": 35.599, "admit_threshold": 0.5, "when_threshold": 0.5}
    manifest.update(fields)
    (directory / "manifest.json").write_text(json.dumps(manifest))
    return directory


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    build_runtime()
    d = tmp_path_factory.mktemp("trust")
    r = random.Random(1)
    trace = d / "t.trace"
    with open(trace, "w") as f:
        f.write("#block_id io_offset io_size op_time op_name pipeline user_namespace user_name\n")
        f.write("# flashml: preset=test sample_ratio=1 accesses=1500\n")
        for i in range(1500):
            k = r.randrange(40)
            f.write(f"{1000 + k * 13} {r.randrange(20) * 65536} {1 + r.randrange(300000)} "
                    f"{5.0 * i:.3f} 1 1 {k % 3} {k % 5}\n")
    backing = d / "b.img"
    p = flashrt("prepare-backing", "--backing", backing, "--trace", trace)
    assert p.returncode == 0, p.stderr
    objects = d / "objects.csv"
    objects.write_text("time,key,size\n" + "".join(
        f"{i},{r.randrange(200)},{4096 * (1 + r.randrange(4))}\n" for i in range(3000)))
    pages = d / "pages.csv"
    pages.write_text("stream,page,write\n" + "".join(
        f"{r.randrange(3)},{r.randrange(500)},{r.randrange(2)}\n" for _ in range(3000)))
    blocks = d / "blocks.csv"
    blocks.write_text("time,block,blocks,write\n" + "".join(
        f"{float(i)},{r.randrange(5000)},{1 + r.randrange(8)},{int(r.random() < 0.3)}\n"
        for i in range(3000)))
    return {"dir": d, "trace": trace, "backing": backing, "map": Path(f"{backing}.map"),
            "objects": objects, "pages": pages, "blocks": blocks,
            "good": bundle(d / "good"), "marker": d / "evil-ran"}


def marker_env(env: dict[str, Path]) -> dict[str, str]:
    return {**os.environ, "FLASHRT_EVIL_MARKER": str(env["marker"])}


def replay_args(env: dict[str, Path], policy: Path | str, flash: Path, *extra: object) -> list:
    return ["replay", "--policy", policy, "--trace", env["trace"], "--flash", flash,
            "--flash-bytes", "16MiB", "--backing", env["backing"], "--warmup-s", "0",
            "--direct", "off", "--json", *extra]


# counts of a replay that do not depend on timing
COUNTS = ("accesses", "gets", "puts", "hits", "backend_ios", "backend_bytes", "admitted_segments",
          "prefetched_segments", "evicted_regions", "evicted_segments", "integrity_errors",
          "verified_bytes")


def test_the_evil_marker_works(env, tmp_path):
    """The evil .so under a manifest vouching for it is loaded and its constructor runs: the
    marker the other tests look for is real."""
    marker = tmp_path / "m"
    d = bundle(tmp_path / "evil", "evil.so")
    p = flashrt("verify", d, env={**os.environ, "FLASHRT_EVIL_MARKER": str(marker)})
    assert p.returncode == 0, p.stderr
    assert marker.exists()


def test_a_swapped_so_never_runs(env, tmp_path):
    e = marker_env(env)
    good = env["good"]
    cases = []
    # the .so swapped, the manifest vouching for the original
    cases.append((bundle(tmp_path / "swapped", "evil.so", vouch="admitall.so"), "refused"))
    # a symbolic link to a .so the manifest vouches for
    link = bundle(tmp_path / "link", "evil.so")
    (link / "policy.so").unlink()
    (link / "policy.so").symlink_to(POLICIES / "evil.so")
    cases.append((link, "symbolic link"))
    # manifest.json a symbolic link to the good bundle's
    mlink = bundle(tmp_path / "mlink", "evil.so")
    (mlink / "manifest.json").unlink()
    (mlink / "manifest.json").symlink_to(good / "manifest.json")
    cases.append((mlink, "manifest.json: refused: it is a symbolic link"))
    for d, expect in cases:
        p = flashrt("verify", d, env=e)
        assert p.returncode == 1 and expect in p.stderr, (d, p.stderr)
        p = flashrt(*replay_args(env, d, tmp_path / "f.img"), env=e)
        assert p.returncode == 1 and expect in p.stderr and p.stdout == "", (d, p.stderr)
    assert not env["marker"].exists()


def test_symlink_flip_race(env, tmp_path):
    """A process flips DIR/policy.so between the good .so and the evil one (hard links and a
    symbolic link, each renamed in) while flashrt verifies the bundle 1,000 times and replays
    with it 30 times: every run is refused or served by the good .so, and the evil
    constructor never runs."""
    e = marker_env(env)
    d = bundle(tmp_path / "race")
    good_sha = sha(d / "policy.so")
    (d / "good.so").write_bytes((POLICIES / "admitall.so").read_bytes())
    (d / "evil.so").write_bytes((POLICIES / "evil.so").read_bytes())
    started = tmp_path / "flipping"
    flipper = subprocess.Popen([sys.executable, "-c", f"""
import os, pathlib
d = pathlib.Path({str(d)!r}); tmp = d / ".flip"; so = d / "policy.so"
i = 0
while True:
    try: os.unlink(tmp)
    except FileNotFoundError: pass
    if i % 3 == 2: os.symlink(d / "evil.so", tmp)
    else: os.link(d / ("evil.so" if i % 3 else "good.so"), tmp)
    os.rename(tmp, so)
    i += 1
    if i == 3: pathlib.Path({str(started)!r}).write_text("x")
"""])
    try:
        while not started.exists():
            assert flipper.poll() is None, "the flipper died"
            time.sleep(0.01)
        served = refused = 0
        for _ in range(1000):
            p = flashrt("verify", d, env=e)
            if p.returncode == 0:
                assert json.loads(p.stdout)["sha256"] == good_sha
                served += 1
            else:
                assert p.returncode == 1 and "refused" in p.stderr, p.stderr
                refused += 1
        alone = flashrt(*replay_args(env, env["good"], tmp_path / "alone.img"))
        assert alone.returncode == 0, alone.stderr
        want = {k: json.loads(alone.stdout)[k] for k in COUNTS}
        for i in range(30):
            flash = tmp_path / f"f{i}.img"
            p = flashrt(*replay_args(env, d, flash, "--limit", "300"), env=e)
            flash.unlink(missing_ok=True)
            if p.returncode == 0:
                got = json.loads(p.stdout)
                assert got["admitted_segments"] > 0 and got["integrity_errors"] == 0
            else:
                assert p.returncode == 1 and "refused" in p.stderr, p.stderr
        assert want["integrity_errors"] == 0
    finally:
        flipper.kill()
        flipper.wait()
    assert not env["marker"].exists()
    assert served + refused == 1000


def test_values_and_manifests_that_lie(env, tmp_path):
    cases = [
        (bundle(tmp_path / "nan", "nan_threshold.so"), "flashml_admit_threshold() returned nan"),
        (bundle(tmp_path / "zero", "zero_rate.so"), "flashml_target_write_rate_mbps() returned 0"),
        (bundle(tmp_path / "fmt", format="evil/9"),
         "field 'format': expected \"flashml-policy-bundle/1\", got \"evil/9\""),
        (bundle(tmp_path / "sys", system="mat"), "field 'system': expected \"baleen\""),
        (bundle(tmp_path / "size", size_bytes=123), "field 'size_bytes' says 123"),
        (bundle(tmp_path / "size0", size_bytes=0), "field 'size_bytes': expected a positive"),
        (bundle(tmp_path / "age", eviction_age_s=-1), "field 'eviction_age_s'"),
        (bundle(tmp_path / "rate", target_write_rate_mbps=0), "field 'target_write_rate_mbps'"),
        (bundle(tmp_path / "str", admit_threshold="0.5"), "field 'admit_threshold'"),
        (bundle(tmp_path / "bool", admit_threshold=True), "field 'admit_threshold'"),
        (bundle(tmp_path / "caps", capabilities=["admission", "admission"]), "listed twice"),
        (bundle(tmp_path / "shaup", sha256="A" * 64), "field 'sha256'"),
    ]
    for d, expect in cases:
        p = flashrt("verify", d, "--system", "baleen")
        assert p.returncode == 1 and expect in p.stderr, (d, p.stderr)
        p = flashrt(*replay_args(env, d, tmp_path / "f.img"))
        assert p.returncode == 1 and expect in p.stderr, (d, p.stderr)
    assert not (tmp_path / "f.img").exists()
    # a bundle for another system: mat-replay, partition-replay and pannier-replay refuse it
    baleen = bundle(tmp_path / "baleen", system="baleen")
    p = flashrt("mat-replay", "--bundle", baleen, "--trace", env["objects"], "--capacity",
                "64KiB", "--no-data")
    assert p.returncode == 1 and "field 'system': expected \"mat\"" in p.stderr, p.stderr
    p = flashrt("partition-replay", "--bundle", baleen, "--trace", env["pages"], "--capacity",
                "100", "--interval", "500", "--no-data")
    assert p.returncode == 1 and "field 'system': expected \"mlcache\"" in p.stderr, p.stderr
    p = flashrt("pannier-replay", "--bundle", baleen, "--trace", env["blocks"], "--flash-bytes",
                "8MiB", "--no-data")
    assert p.returncode == 1 and "field 'system': expected \"pannier\"" in p.stderr, p.stderr


def test_verify_command(env, tmp_path):
    assert "verify" in flashrt("--help").stdout
    p = flashrt("verify", env["good"])
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["capabilities"] == ["admission", "prefetch"]
    assert out["sha256"] == sha(env["good"] / "policy.so")
    assert flashrt("verify", env["good"], "--need", "eviction").returncode == 1
    knobs = tmp_path / "knobs"
    knobs.mkdir()
    (knobs / "manifest.json").write_text(json.dumps(
        {"format": FORMAT, "system": "pannier", "capabilities": [], "knobs": {}}))
    p = flashrt("verify", knobs)
    assert p.returncode == 0 and json.loads(p.stdout)["capabilities"] == [], p.stderr


def _same_file_cases(env, d: Path) -> list[tuple[list, Path, str]]:
    """(command, the input it must not touch, the options the refusal names)."""
    b, t = env["backing"], env["trace"]
    (d / "blink.img").symlink_to(b)
    os.link(b, d / "bhard.img")
    (d / "tlink.trace").symlink_to(t)
    return [
        (replay_args(env, "builtin:admitall", b), b, "--flash"),
        (replay_args(env, "builtin:admitall", d / "blink.img"), b, "--backing"),
        (replay_args(env, "builtin:admitall", d / "bhard.img"), b, "--backing"),
        (replay_args(env, "builtin:admitall", t), t, "--trace"),
        (replay_args(env, "builtin:admitall", d / "tlink.trace"), t, "--trace"),
        (replay_args(env, "builtin:admitall", env["map"]), env["map"], "map"),
        (replay_args(env, env["good"], env["good"] / "policy.so"), env["good"] / "policy.so",
         "--policy"),
        (["pannier-replay", "--trace", env["blocks"], "--flash", env["blocks"], "--backing",
          d / "pb.img", "--flash-bytes", "8MiB"], env["blocks"], "--trace"),
        (["pannier-replay", "--trace", env["blocks"], "--flash", d / "pf.img", "--backing",
          env["blocks"], "--flash-bytes", "8MiB"], env["blocks"], "--trace"),
        (["mat-replay", "--no-model", "--trace", env["objects"], "--capacity", "64KiB",
          "--cache-file", env["objects"]], env["objects"], "--trace"),
        (["mat-replay", "--no-model", "--trace", env["objects"], "--capacity", "64KiB",
          "--no-data", "--decisions-out", env["objects"]], env["objects"], "--trace"),
        (["partition-replay", "--even", "--trace", env["pages"], "--capacity", "100",
          "--interval", "500", "--cache-file", env["pages"]], env["pages"], "--trace"),
        (["partition-replay", "--even", "--trace", env["pages"], "--capacity", "100",
          "--interval", "500", "--no-data", "--allocations-out", env["pages"]], env["pages"],
         "--trace"),
        (["prepare-backing", "--backing", t, "--trace", t], t, "--trace"),
    ]


def test_outputs_are_never_inputs(env, tmp_path):
    for args, victim, opt in _same_file_cases(env, tmp_path):
        before = sha(victim)
        p = flashrt(*args)
        assert p.returncode == 1, (args, p.stdout, p.stderr)
        assert "are the same file: refused" in p.stderr and opt in p.stderr, (args, p.stderr)
        assert sha(victim) == before, args
    assert not (tmp_path / "pb.img").exists() and not (tmp_path / "pf.img").exists()


def _lock_held_by(pid: int, path: Path) -> bool:
    """Whether /proc/locks lists a lock of process pid on path's inode."""
    ino = path.stat().st_ino
    for line in Path("/proc/locks").read_text().splitlines():
        f = line.split()
        if len(f) >= 6 and f[4] == str(pid) and f[5].rsplit(":", 1)[-1] == str(ino):
            return True
    return False


class _Held:
    """A flashrt run holding its locks: its PID, and once released its stdout."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.out = ""


@contextmanager
def _holding(first_args: list, locked: Path, tmp: Path,
             env_extra: dict[str, str] | None = None) -> Iterator[_Held]:
    """Runs flashrt `first_args` holding its locks (FLASHRT_TEST_HOLD) for the block, which
    starts once /proc/locks shows its lock on `locked`; after the block the run is let go and
    must exit 0 (its stdout in `.out`)."""
    release = tmp / "release"
    first = subprocess.Popen([str(FLASHRT), *map(str, first_args)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "FLASHRT_TEST_HOLD": str(release),
                                  **(env_extra or {})})
    held = _Held(first.pid)
    try:
        deadline = time.monotonic() + 300
        while not (locked.exists() and _lock_held_by(first.pid, locked)):
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline, "the first run never took its lock"
            time.sleep(0.01)
        yield held
        release.write_text("")
        held.out, err = first.communicate(timeout=600)
    finally:
        release.write_text("")
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 0, err


def _second_is_refused(first_args: list, second_args: list, shared: Path, tmp: Path,
                       env_extra: dict[str, str] | None = None) -> tuple[str, str]:
    """While `first` holds its lock on `shared`, `second` is refused at once, naming the
    first's PID; returns the first's stdout and the second's stderr."""
    with _holding(first_args, shared, tmp, env_extra) as first:
        second = flashrt(*second_args, timeout=60)
        assert second.returncode == 1, second.stderr
        assert f"{shared}: in use by flashrt (pid {first.pid})" in second.stderr, second.stderr
    return first.out, second.stderr


def test_two_replays_on_one_flash_file(env, tmp_path):
    alone = flashrt(*replay_args(env, env["good"], tmp_path / "alone.img"))
    assert alone.returncode == 0, alone.stderr
    flash = tmp_path / "shared.img"
    out, _ = _second_is_refused(replay_args(env, env["good"], flash),
                                replay_args(env, "builtin:admitall", flash), flash, tmp_path)
    got, want = json.loads(out), json.loads(alone.stdout)
    assert {k: got[k] for k in COUNTS} == {k: want[k] for k in COUNTS}
    assert got["integrity_errors"] == 0


def test_replays_share_a_backing_that_prepare_backing_cannot_rewrite(env, tmp_path):
    """Replay holds the backing's map shared: a second replay with another flash file runs
    beside it, prepare-backing on that backing is refused while it runs."""
    with _holding(replay_args(env, env["good"], tmp_path / "a.img"), env["map"],
                  tmp_path) as first:
        second = flashrt(*replay_args(env, env["good"], tmp_path / "b.img"))
        assert second.returncode == 0, second.stderr
        before = sha(env["map"])
        p = flashrt("prepare-backing", "--backing", env["backing"], "--trace", env["trace"])
        assert p.returncode == 1, p.stderr
        assert f"{env['map']}: in use by flashrt (pid {first.pid})" in p.stderr, p.stderr
        assert sha(env["map"]) == before
    assert {k: json.loads(first.out)[k] for k in COUNTS} == \
        {k: json.loads(second.stdout)[k] for k in COUNTS}


def test_two_runs_on_one_cache_file(env, tmp_path):
    # pannier-replay: the flash file, then the backing
    pn = ["pannier-replay", "--trace", env["blocks"], "--flash-bytes", "8MiB",
          "--container-bytes", "256KiB", "--json"]
    alone = flashrt(*pn, "--flash", tmp_path / "a.flash", "--backing", tmp_path / "a.back")
    assert alone.returncode == 0, alone.stderr
    flash, back = tmp_path / "s.flash", tmp_path / "s.back"
    out, _ = _second_is_refused([*pn, "--flash", flash, "--backing", back],
                                [*pn, "--flash", flash, "--backing", tmp_path / "o.back"], flash,
                                tmp_path)
    keys = ("requests", "read_hits", "write_hits", "evictions", "verify_failures")
    assert {k: json.loads(out)[k] for k in keys} == {k: json.loads(alone.stdout)[k] for k in keys}
    (tmp_path / "release").unlink()
    _second_is_refused([*pn, "--flash", tmp_path / "f2", "--backing", back],
                       [*pn, "--flash", tmp_path / "f3", "--backing", back], back, tmp_path)
    # mat-replay and partition-replay: the cache file
    (tmp_path / "release").unlink()
    mat = ["mat-replay", "--no-model", "--trace", env["objects"], "--capacity", "64KiB",
           "--json", "--cache-file", tmp_path / "m.cache"]
    _second_is_refused(mat, mat, tmp_path / "m.cache", tmp_path)
    (tmp_path / "release").unlink()
    part = ["partition-replay", "--even", "--trace", env["pages"], "--capacity", "100",
            "--interval", "500", "--cache-file", tmp_path / "p.cache"]
    _second_is_refused(part, part, tmp_path / "p.cache", tmp_path)


def test_fifos_never_hang(env, tmp_path):
    def fifo(p: Path) -> Path:
        os.mkfifo(p)
        return p

    # the bundle's files
    for name in ("manifest.json", "policy.so"):
        d = bundle(tmp_path / f"b-{name}")
        (d / name).unlink()
        fifo(d / name)
        for args in (["verify", d], replay_args(env, d, tmp_path / "f.img")):
            p = flashrt(*args, timeout=60)
            assert p.returncode == 1 and f"{name}: refused: it is a FIFO" in p.stderr, p.stderr
    # inputs and outputs
    ra = tmp_path / "ra"
    ra.mkdir()
    (ra / "policy.so").write_bytes((POLICIES / "readahead.so").read_bytes())
    (ra / "manifest.json").write_text(json.dumps({
        "format": FORMAT, "abi_version": 1, "capabilities": ["readahead"],
        "sha256": sha(ra / "policy.so"), "size_bytes": (ra / "policy.so").stat().st_size,
        "readahead_contract_hash": contract_hash("FLASHML_READAHEAD_CONTRACT_HASH")}))
    events = tmp_path / "events.csv"
    events.write_text("time_s,inode,page\n0.0,1,1\n0.5,1,2\n")
    rafile = tmp_path / "ra_kb"
    rafile.write_text("128\n")
    cases = [
        (["tune-readahead", "--bundle", ra, "--events", events, "--readahead-file",
          fifo(tmp_path / "ra.fifo")], "--readahead-file"),
        (["tune-readahead", "--bundle", ra, "--events", events, "--readahead-file", rafile,
          "--log", fifo(tmp_path / "log.fifo")], "--log"),
        (["tune-readahead", "--bundle", ra, "--events", fifo(tmp_path / "ev.fifo"),
          "--readahead-file", rafile], "--events"),
        (replay_args(env, env["good"], fifo(tmp_path / "flash.fifo")), "--flash"),
        (["replay", "--policy", "builtin:admitall", "--trace", fifo(tmp_path / "t.fifo"),
          "--flash", tmp_path / "f.img", "--flash-bytes", "16MiB", "--backing", env["backing"]],
         "--trace"),
        (["mat-replay", "--no-model", "--trace", env["objects"], "--capacity", "64KiB",
          "--no-data", "--decisions-out", fifo(tmp_path / "dec.fifo")], "--decisions-out"),
        (["probe-disk", "--device", env["backing"], "--out", fifo(tmp_path / "out.fifo")],
         "--out"),
        (replay_args(env, env["good"], Path("/dev/null")), "--flash"),
    ]
    for args, opt in cases:
        p = flashrt(*args, timeout=60)
        assert p.returncode == 1 and opt in p.stderr and "refused" in p.stderr, (args, p.stderr)
    assert rafile.read_text() == "128\n"
    assert not (tmp_path / "f.img").exists()


# ---- the shared manifest corpus (tests/data/manifests/) through flashrt verify ----

@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small real compiled admission bundle (as tests/trust/test_trust_bundle.py's)."""
    from flashml.compiler.build import compile_policy
    from flashml.trace.canonical import read_table

    from demo_policy import demo_trace, write_demo_bundle

    build_runtime()
    work = tmp_path_factory.mktemp("corpus")
    demo_trace(work / "trace", accesses=15_000, seed=5)
    (table,) = (work / "trace").glob("*.parquet")
    models = write_demo_bundle(read_table(table)[0], work / "models", admit_threshold=0.6,
                               when_threshold=0.4, num_trees=3, num_leaves=4)
    out = work / "good"
    compile_policy(out, model_dir=models, log_to_mlflow=False, fast=False)
    return out


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_manifest_corpus(compiled, path, tmp_path):
    """Every case of the corpus the Python loader runs: the same verdict from `flashrt verify`
    (for a baleen bundle: admission and prefetch), the refusal naming the field."""
    case = json.loads(path.read_text())
    d = tmp_path / "b"
    d.mkdir()
    for f in compiled.iterdir():
        (d / f.name).write_bytes(f.read_bytes())
    base = json.loads((compiled / "manifest.json").read_text())
    (d / "manifest.json").write_text(apply_case(base, case))
    marker = tmp_path / "marker"
    p = flashrt("verify", d, "--need", "admission,prefetch", "--system", "baleen",
                env={**os.environ, "FLASHRT_EVIL_MARKER": str(marker)})
    if case["expect"] == "ok":
        assert p.returncode == 0, (case["name"], p.stderr)
        assert json.loads(p.stdout)["sha256"] == sha(compiled / "policy.so")
    else:
        assert p.returncode == 1, (case["name"], p.stdout)
        want = case["message_contains"]
        want = [want] if isinstance(want, str) else want
        assert any(w.lower() in p.stderr.lower() for w in want), (case["name"], p.stderr)
        assert p.stderr.startswith(f"flashrt: error: {d}"), p.stderr
    assert not marker.exists()
