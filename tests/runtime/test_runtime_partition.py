"""The C runtime's partitioned page cache (`flashrt partition-replay`,
runtime/src/mlcache/partition.c): with a real compiled network (scikit-learn MLP -> emlearn
C -> policy.so) its quotas in every interval, hits, write hits and resize evictions are the
simulator's (`simulate_partitioned(..., "mlcache", shares)` with the same .so's shares), in
both the writes-only and the read-and-write setting, and so with the compiled rule
previous_optimal; the bytes it serves are real and verified; bad input is refused before any
output."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from runtime_support import FLASHRT, build_runtime

from flashml.compiler.build import compile_policy
from flashml.compiler.bundle import save_partition_model
from flashml.compiler.loader import PolicyLibrary
from flashml.systems.mlcache import model
from flashml.systems.mlcache.multistream import generate_mix
from flashml.systems.mlcache.partitioning import page_requests, simulate_partitioned, write_page_csv

CAP, IV = 260, 1500


def flashrt(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(FLASHRT), "partition-replay", *map(str, args)],
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, object]:
    build_runtime()
    tmp = tmp_path_factory.mktemp("rtpart")
    rng = np.random.default_rng(0)
    train = [page_requests(generate_mix(4, 30_000, s)[0], "namespace") for s in range(4)]
    data = [model.interval_dataset(t, CAP, IV, rng=rng, group=i) for i, t in enumerate(train)]
    net = model.train_network(data, hidden=(32,), max_iter=60)
    save_partition_model(tmp / "bundle", net, capacity=CAP, interval=IV)
    compile_policy(tmp / "compiled", model_dir=tmp / "bundle", log_to_mlflow=False)
    trace = page_requests(generate_mix(4, 40_000, 77)[0], "namespace")
    write_page_csv(trace, tmp / "pages.csv")
    return tmp, tmp / "compiled", trace


@pytest.mark.parametrize("writes_only", [True, False])
def test_runtime_makes_the_simulators_decisions(setup: tuple, writes_only: bool) -> None:
    tmp, bundle, trace = setup
    lib = PolicyLibrary(bundle / "policy.so", need="partition")
    x, _ = model.trace_features(trace, CAP, IV, writes_only=writes_only)
    shares = model.schedule(lib.partition(x, 4)[0], 4)
    sim = simulate_partitioned(trace, CAP, IV, "mlcache", writes_only=writes_only,
                               shares=shares)
    alloc = tmp / f"alloc-{writes_only}.csv"
    proc = flashrt("--bundle", bundle, "--trace", tmp / "pages.csv", "--capacity", CAP,
                   "--interval", IV, "--cache-file", tmp / "cache", "--allocations-out", alloc,
                   "--json", *(["--writes-only"] if writes_only else []))
    assert proc.returncode == 0, proc.stderr
    c = json.loads(proc.stdout)
    for k in ("requests", "hits", "write_hits", "read_hits", "resize_evictions", "evictions",
              "intervals", "cached_requests"):
        assert c[k] == sim[k], (k, c[k], sim[k])
    assert c["partition_calls"] == sim["intervals"] - 1 and c["fallbacks"] == sim["fallbacks"]
    got = pl.read_csv(alloc).drop("interval").to_numpy()
    assert np.array_equal(got, np.asarray(sim["allocations"]))
    assert len(np.unique(got, axis=0)) > 1  # the network moved the split
    assert c["verified_bytes"] == c["hits"] * 8192 and c["integrity_errors"] == 0


def test_runtime_runs_the_previous_optimal_rule(setup: tuple) -> None:
    """The rule bundle (no network: the last interval's best split computed in policy.so,
    `flashml mlcache run`'s default) makes the same quotas in the runtime as in the
    simulator, and they are previous_optimal's (the capacity is a multiple of the steps)."""
    from flashml.compiler.bundle import save_partition_rule

    tmp, _, trace = setup
    save_partition_rule(tmp / "rule", capacity=CAP, interval=IV, writes_only=True)
    compile_policy(tmp / "rule-compiled", model_dir=tmp / "rule", log_to_mlflow=False)
    lib = PolicyLibrary(tmp / "rule-compiled" / "policy.so", need="partition")
    x, curves = model.trace_features(trace, CAP, IV, writes_only=True)
    shares = model.schedule(lib.partition(x, 4)[0], 4)
    prev = model.previous_optimal_shares(trace, CAP, IV, True, curves=curves)
    assert np.allclose(shares, prev / prev.sum(axis=1, keepdims=True), atol=0)
    sim = simulate_partitioned(trace, CAP, IV, "mlcache", writes_only=True, shares=shares)
    alloc = tmp / "alloc-rule.csv"
    proc = flashrt("--bundle", tmp / "rule-compiled", "--trace", tmp / "pages.csv",
                   "--capacity", CAP, "--interval", IV, "--no-data", "--writes-only",
                   "--allocations-out", alloc, "--json")
    assert proc.returncode == 0, proc.stderr
    c = json.loads(proc.stdout)
    assert (c["hits"], c["write_hits"], c["resize_evictions"]) == (
        sim["hits"], sim["write_hits"], sim["resize_evictions"])
    got = pl.read_csv(alloc).drop("interval").to_numpy()
    assert np.array_equal(got, np.asarray(sim["allocations"]))


def test_even_without_a_network(setup: tuple) -> None:
    tmp, _, trace = setup
    sim = simulate_partitioned(trace, CAP, IV, "even", writes_only=True)
    proc = flashrt("--even", "--trace", tmp / "pages.csv", "--capacity", CAP, "--interval", IV,
                   "--no-data", "--writes-only", "--json")
    assert proc.returncode == 0, proc.stderr
    c = json.loads(proc.stdout)
    assert (c["hits"], c["evictions"]) == (sim["hits"], sim["evictions"])


def test_bad_input(setup: tuple, tmp_path: Path) -> None:
    tmp, bundle, _ = setup
    base = ("--capacity", CAP, "--interval", IV, "--no-data")
    alloc = tmp_path / "alloc.csv"
    cases = []
    for name, text, fragment in (
        ("header.csv", "s,p,w\n0,1,1\n", "header"),
        ("stream.csv", "stream,page,write\n0,1,1\n16,1,1\n", ":3: field 'stream'"),
        ("page.csv", "stream,page,write\n0,x,1\n", ":2: field 'page'"),
        ("write.csv", "stream,page,write\n0,1,2\n", ":2: field 'write'"),
        ("fields.csv", "stream,page,write\n0,1\n", ":2: expected 3 fields"),
        ("empty.csv", "stream,page,write\n", "no requests"),
    ):
        (tmp_path / name).write_text(text)
        cases.append((["--bundle", bundle, "--trace", tmp_path / name], fragment))
    # a bundle whose manifest does not list the partition capability
    other = tmp_path / "other"
    shutil.copytree(bundle, other)
    m = json.loads((other / "manifest.json").read_text())
    m["capabilities"] = ["eviction"]
    (other / "manifest.json").write_text(json.dumps(m))
    cases.append((["--bundle", other, "--trace", tmp / "pages.csv"], "no partition capability"))
    cases.append((["--bundle", tmp_path / "none", "--trace", tmp / "pages.csv"], "none"))
    cases.append((["--bundle", bundle, "--trace", tmp / "pages.csv", "--streams", "2"],
                  "field 'stream'"))
    for args, fragment in cases:
        proc = flashrt(*args, *base, "--allocations-out", alloc)
        assert proc.returncode == 1 and fragment in proc.stderr, (args, proc.stderr)
        assert not alloc.exists() and proc.stdout == ""
    for args in (["--trace", tmp / "pages.csv", *base],
                 ["--bundle", bundle, "--even", "--trace", tmp / "pages.csv", *base],
                 ["--even", "--trace", tmp / "pages.csv", "--capacity", "0", "--interval", "5",
                  "--no-data"]):
        assert flashrt(*args).returncode == 2
    # more pages than the index holds: named by the option, with its unit and range
    proc = flashrt("--even", "--trace", tmp / "pages.csv", "--capacity", str(2**63),
                   "--interval", "5", "--no-data")
    assert proc.returncode == 2
    assert "--capacity: invalid value '9223372036854775808' (expected cache pages, an " \
        "integer in [1, 4294967294])" in proc.stderr
