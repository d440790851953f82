"""What the C runtime's tests share (tests/runtime/, and the trust and kernel tests that run
flashrt): the runtime's build, hand-made bundles, and small traces."""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np

from conftest import REPO

RUNTIME = REPO / "runtime"


BUILD = RUNTIME / "build"


FLASHRT = BUILD / "flashrt"


HASH = "c713dcc31811000a51aa73476b508c3e8e07bbb9dcc48319423102c0e562228d"


def build_runtime() -> Path:
    """`make -C runtime all` once per session; a file lock keeps xdist workers apart."""
    BUILD.mkdir(exist_ok=True)
    with open(BUILD / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        proc = subprocess.run(["make", "-s", "-C", str(RUNTIME), "all"], capture_output=True,
                              text=True)
        fcntl.flock(lock, fcntl.LOCK_UN)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return FLASHRT


def run(*args, env=None, timeout=300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(FLASHRT), *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=timeout)


def make_bundle(directory: Path, so: Path, *, sha: str | None = None, abi: int = 1,
                contract_hash: str = HASH) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copy(so, directory / "policy.so")
    digest = hashlib.sha256((directory / "policy.so").read_bytes()).hexdigest()
    (directory / "manifest.json").write_text(json.dumps({
        "format": "flashml-policy-bundle/1", "size_bytes": (directory / "policy.so").stat().st_size,
        "abi_version": abi, "contract_hash": contract_hash, "sha256": sha or digest,
        "mlflow_run_id": None, "eviction_age_s": 7200.0, "target_write_rate_mbps": 35.599,
        "admit_threshold": 1.0, "when_threshold": 0.5, "metrics": {}, "versions": {}}))
    return directory


def small_trace(src: Path, dst: Path, *, keep_every: int = 3, max_size: int = 512 * 1024) -> None:
    """A generated trace cut down for tests: every `keep_every`-th block id and IOs of at most
    `max_size` bytes, so the backing stays small."""
    with open(src) as f, open(dst, "w") as out:
        for line in f:
            if line.startswith("#"):
                out.write(line)
                continue
            fields = line.split()
            if int(fields[0]) % keep_every:
                continue
            fields[2] = str(min(int(fields[2]), max_size))
            out.write(" ".join(fields) + "\n")


SEG = 128 * 1024


def fixed_range_trace(path: Path, n: int = 6000, blocks: int = 400, seed: int = 3, *,
                      puts: bool = True, namespaces: bool = False) -> Path:
    """Skewed block popularity; each block always read with its own range (1-6 segments);
    10% PUTs (they advance MAT's logical clock and touch no cache) unless `puts` is False;
    with `namespaces`, three namespaces (5, 6, 7: block % 3) instead of one."""
    rng = np.random.default_rng(seed)
    keys = np.minimum(rng.integers(0, blocks, n), rng.integers(0, blocks, n))
    put = rng.random(n) < 0.1 if puts else np.zeros(n, dtype=bool)
    with open(path, "w") as f:
        f.write("#block_id io_offset io_size op_time op_name pipeline user_namespace user_name\n")
        for i, k in enumerate(keys):
            s0, nseg = int(k * 7 % 40), int(1 + k * 5 % 6)
            ns = 5 + int(k) % 3 if namespaces else 1
            f.write(f"{1000 + int(k)} {s0 * SEG} {nseg * SEG} {1572000000 + i}.0 "
                    f"{3 if put[i] else 2} 1 {ns} 1\n")
    return path


def evict_bundle(directory: Path) -> Path:
    """The hand-written eviction .so (runtime/tests/policies/evict_policy.c: the predicted
    distance is the request's size, so T's controller both keeps and evicts candidates) under
    a manifest listing the eviction capability."""
    from flashml.features import eviction

    directory.mkdir(parents=True, exist_ok=True)
    shutil.copy(BUILD / "policies" / "evict.so", directory / "policy.so")
    so = (directory / "policy.so").read_bytes()
    (directory / "manifest.json").write_text(json.dumps({
        "format": "flashml-policy-bundle/1", "system": "mat", "capabilities": ["eviction"],
        "abi_version": 1, "sha256": hashlib.sha256(so).hexdigest(), "size_bytes": len(so),
        "evict_contract_hash": eviction.contract().hash}))
    return directory
