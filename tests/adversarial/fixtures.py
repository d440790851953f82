"""The inputs the cases copy, built once per session: small traces of each kind, compiled
policy bundles, an evil .so."""

from __future__ import annotations

import hashlib
import json
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from .cases import FLASHRT, REPO, SHARED, TEST_FOLDERS

# --- fixtures: built once per session -------------------------------------------------------
EVIL_C = r"""
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
__attribute__((constructor)) static void flashml_evil(void) {
    const char *p = getenv("FLASHML_EVIL_MARKER");
    if (p) { int fd = open(p, O_WRONLY | O_CREAT | O_APPEND, 0644);
             if (fd >= 0) { (void)write(fd, "evil\n", 5); close(fd); } }
}
"""


def _test_folders_on_path() -> None:
    """TEST_FOLDERS importable (once), as the tests' own modules import one another."""
    for d in reversed(TEST_FOLDERS):
        if str(d) not in sys.path:
            sys.path.insert(0, str(d))


def _sh(*args: object, cwd: Path = REPO, timeout: float = 900) -> None:
    proc = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, args))} failed ({proc.returncode}):\n"
                           f"{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")


def _evil_so(out: Path, work: Path) -> None:
    """A .so whose constructor appends to $FLASHML_EVIL_MARKER: any loader that maps it has
    run code nobody verified."""
    c = work / "evil.c"
    c.write_text(EVIL_C)
    _sh("cc", "-shared", "-fPIC", "-O1", "-o", out, c)


def build_fixtures(root: Path, log: Callable[[str], None] = print) -> dict[str, Path]:
    """Every input the cases copy: small traces of each kind, one compiled bundle per
    capability, an evil .so; in `root` (reused when already complete)."""
    root.mkdir(parents=True, exist_ok=True)
    done = root / "fixtures.json"
    if done.exists():
        return {k: Path(v) for k, v in json.loads(done.read_text()).items()}
    started = time.perf_counter()
    if not FLASHRT.exists():
        _sh("make", "-s", "-C", REPO / "runtime", "all")
    _test_folders_on_path()
    import numpy as np

    from flashml.compiler.build import compile_policy
    from flashml.trace.generate import generate_trace
    from flashml.trace.ingest import ingest

    f: dict[str, Path] = {}
    # traces
    gen = root / "gen.trace"
    generate_trace("region1-like", 0, gen, accesses=4000, days=2.5, progress=False)
    f["trace"] = root / "small.trace"
    from runtime_support import small_trace  # the runtime tests' cut-down trace

    small_trace(gen, f["trace"])
    f["pq"] = root / "small.parquet"
    ingest(f["trace"], f["pq"], "tectonic", progress=False)
    f["msr"] = root / "small_msr.csv"
    import fuzz_support as fs

    specs = fs.specs(200)
    f["msr"].write_bytes(specs["msr"].text)
    f["cp"] = root / "cloudphysics.csv"
    cp = SHARED / "traces" / "cloudphysics-sample.csv"
    lines = cp.read_text().splitlines()[:3000] if cp.exists() \
        else specs["cloudphysics"].text.decode().splitlines()
    f["cp"].write_text("\n".join(lines) + "\n")
    # objects trace (MAT) and its bundle: a small eviction model on the contract's features
    from test_runtime_mat import small_trace as objects_trace

    f["obj"] = objects_trace(root / "objects.csv", n=4000, objects=400)
    log("fixtures: MAT bundle")
    f["matb"] = _mat_bundle(root / "mat")
    # Baleen bundle (admission + prefetch)
    log("fixtures: Baleen bundle")
    import polars as pl

    from demo_policy import write_demo_bundle

    table = pl.read_parquet(f["pq"])
    write_demo_bundle(table, root / "baleen-models", num_trees=4, num_leaves=7)
    f["models"] = root / "baleen-models"
    f["bundle"] = root / "baleen"
    compile_policy(f["bundle"], model_dir=f["models"], log_to_mlflow=False, fast=False)
    # MLCache partition bundle and its page trace
    log("fixtures: partition bundle")
    from flashml.compiler.bundle import save_partition_model
    from flashml.systems.mlcache import model
    from flashml.systems.mlcache.multistream import generate_mix
    from flashml.systems.mlcache.partitioning import page_requests, write_page_csv

    rng = np.random.default_rng(0)
    train = [page_requests(generate_mix(4, 8000, s)[0], "namespace") for s in range(2)]
    data = [model.interval_dataset(t, 260, 300, rng=rng, group=i) for i, t in enumerate(train)]
    net = model.train_network(data, hidden=(8,), max_iter=20)
    save_partition_model(root / "part-models", net, capacity=260, interval=300)
    f["partb"] = root / "partition"
    compile_policy(f["partb"], model_dir=root / "part-models", log_to_mlflow=False)
    f["pages"] = root / "pages.csv"
    write_page_csv(page_requests(generate_mix(4, 5000, 77)[0], "namespace"), f["pages"])
    f["mix"] = f["pages"]
    # readahead bundle: the runtime's test policy with a manifest
    f["rab"] = _readahead_bundle(root / "readahead")
    f["events"] = root / "events.csv"
    f["events"].write_text("time_s,inode,page\n" + "".join(
        f"{i * 0.01:.2f},1,{(i * 7) % 500}\n" for i in range(400)))
    f["rafile"] = root / "read_ahead_kb"
    f["rafile"].write_text("128\n")
    # Pannier: a block trace and a manifest-only bundle
    f["blocks"] = root / "blocks.csv"
    r = random.Random(5)
    f["blocks"].write_text("time,block,blocks,write\n" + "".join(
        f"{i * 0.5:.1f},{r.randrange(0, 3000)},{r.choice([1, 2, 8])},{r.choice([0, 0, 1])}\n"
        for i in range(1500)))
    f["pannb"] = root / "pannier"
    f["pannb"].mkdir(exist_ok=True)
    (f["pannb"] / "manifest.json").write_text(json.dumps({
        "format": "flashml-policy-bundle/1", "system": "pannier", "capabilities": [],
        "pannier": {"policy": "pannier", "promotion_pct": 5.0}}))
    # flashrt replay's trace (8 blocks: its backing store stays small) and backing store
    f["rtrace"] = root / "replay.trace"
    keep: list[str] = []
    with open(f["trace"]) as src, open(f["rtrace"], "w") as dst:
        for line in src:
            if not line.startswith("#"):
                block = line.split()[0]
                if block not in keep and len(keep) >= 8:
                    continue
                keep.append(block) if block not in keep else None
            dst.write(line)
    f["backing"] = root / "backing.img"
    _sh(FLASHRT, "prepare-backing", "--backing", f["backing"], "--trace", f["rtrace"])
    f["map"] = Path(str(f["backing"]) + ".map")
    # the evil .so
    f["evil"] = root / "evil.so"
    _evil_so(f["evil"], root)
    done.write_text(json.dumps({k: str(v) for k, v in f.items()}, indent=1))
    log(f"fixtures: built in {time.perf_counter() - started:.0f} s")
    return f


def _mat_bundle(d: Path) -> Path:
    """A compiled bundle with the eviction capability (its model fits noise: the cases test
    the loaders, not the decisions)."""
    import lightgbm as lgb
    import numpy as np

    from flashml.compiler.build import compile_policy
    from flashml.compiler.bundle import save_evict_model
    from flashml.features import eviction

    names = list(eviction.contract().names)
    rng = np.random.default_rng(0)
    x = rng.random((400, len(names)))
    booster = lgb.train({"objective": "regression", "num_leaves": 7, "verbose": -1, "seed": 0,
                         "deterministic": True, "num_threads": 1},
                        lgb.Dataset(x, x[:, 0] * 10, feature_name=names), num_boost_round=5)
    save_evict_model(d / "models", booster, k=2.0, max_candidates=10, delta=1e-3,
                     initial_threshold=40.0, memory_window=1024)
    compile_policy(d / "bundle", model_dir=d / "models", log_to_mlflow=False, fast=False)
    return d / "bundle"


def _readahead_bundle(d: Path) -> Path:
    """The runtime's readahead test policy as a bundle (as its tests make one)."""
    from test_runtime_readahead import make_bundle  # type: ignore[import-not-found]

    b = make_bundle(d)
    m = json.loads((b / "manifest.json").read_text())
    so = b / "policy.so"
    m.update({"format": "flashml-policy-bundle/1", "system": "kml", "policy_so": "policy.so",
              "size_bytes": so.stat().st_size,
              "sha256": hashlib.sha256(so.read_bytes()).hexdigest()})
    (b / "manifest.json").write_text(json.dumps(m, indent=1))
    return b
