"""The engine's placement and partition slots (runtime/src/policies/placement/, partition/,
runtime/src/mlcache/mlcache.c):
`flashrt replay --placement single|packing` (one open region, or Pannier's hot/cold packing: a
hot and a cold open region chosen by the ghost sketch's counts) and `--partition
shared|even|static|bundle` (each namespace of the trace owns a quota of regions and evicts its
own; bundle: MLCache's flashml_partition re-divides them every interval)
serve every byte right; single and shared are the engine as it was; the slots' command-line
errors (the simulator's interval partition policies, MAT in a partitioned cache, shares that
do not fit) come before any file is touched."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from runtime_support import FLASHRT, build_runtime, fixed_range_trace


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
    (["--partition", "static_optimal"], "--partition static_optimal: not in this runtime yet"),
    (["--partition", "mlcache"], "--partition mlcache: not in this runtime yet"),
    (["--partition", "shared", "--partition", "even"], "--partition given twice"),
    (["--partition", "lfu"],
     "--partition: invalid value 'lfu' (expected shared, even, static or bundle)"),
    (["--partition", "static"], "--partition static needs --partition-shares"),
    (["--partition", "bundle"], "--partition bundle needs --partition-bundle DIR"),
    (["--partition", "even", "--partition-bundle", "x"], "--partition-bundle does not apply"),
    (["--partition", "even", "--partition-interval", "10"], "--partition-interval does not apply"),
    (["--partition", "bundle", "--partition-bundle", "x", "--partition-interval", "0"],
     "--partition-interval: invalid value '0'"),
    (["--partition", "even", "--partition-shares", "1,2"], "--partition-shares does not apply"),
    (["--partition", "static", "--partition-shares", "1,x"], "--partition-shares: invalid value"),
    (["--partition", "even", "--eviction", "mat", "--eviction-bundle", "nowhere"],
     "--partition even with --eviction mat: not a composition this engine has"),
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


def ns_trace(path: Path) -> Path:
    """fixed_range_trace's shape, GETs only, with three namespaces (5, 6, 7: block % 3)."""
    return fixed_range_trace(path, n=4000, blocks=300, seed=4, puts=False, namespaces=True)


@pytest.fixture(scope="module")
def ns_env(env):
    trace = ns_trace(env["dir"] / "ns.trace")
    backing = env["dir"] / "ns-backing.img"
    p = subprocess.run([str(FLASHRT), "prepare-backing", "--backing", str(backing), "--trace",
                        str(trace)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return {"dir": env["dir"], "trace": trace, "backing": backing}


@pytest.mark.parametrize(("args", "quotas"), [
    (["--partition", "even"], [15, 15, 15]),
    (["--partition", "static", "--partition-shares", "1,2,5"], [5, 11, 29]),
    (["--partition", "even", "--placement", "packing", "--eviction", "fifo"], [15, 15, 15]),
    (["--partition", "static", "--partition-shares", "0,1,1", "--eviction", "mru"], [0, 23, 23]),
    (["--partition", "static", "--partition-shares", "1,1,46", "--eviction", "fifo"], [0, 0, 45]),
])
def test_partitions_keep_their_quotas_and_serve_right_bytes(ns_env, args, quotas):
    """Each namespace (a stream, ranked as the simulator ranks them) holds at most its quota of
    the 48 regions less one (frt_partition_holds, the simulator's rule: `quota_regions`); a
    stream of quota 0 or 1 caches nothing; every byte is right."""
    p = replay(ns_env, *args)
    assert p.returncode == 0, p.stderr
    m = json.loads(p.stdout)
    assert m["integrity_errors"] == 0 and m["verified_bytes"] > 0
    parts = m["partitions"]
    assert [x["namespace"] for x in parts] == [5, 6, 7]
    assert [x["quota_regions"] for x in parts] == quotas
    assert all(x["regions"] <= x["quota_regions"] for x in parts)
    assert sum(x["gets"] for x in parts) == m["gets"]
    assert sum(x["hits"] for x in parts) == m["hits"]
    for x, q in zip(parts, quotas, strict=True):
        assert (x["hits"] == 0) == (q == 0), x
    shared = json.loads(replay(ns_env).stdout)
    assert "partitions" not in shared and shared["partition"] == "shared"


def test_static_shares_must_match_the_namespaces(ns_env):
    flash = ns_env["dir"] / "shares.img"
    p = replay(ns_env, "--partition", "static", "--partition-shares", "1,2", flash=flash,
               clean=False)
    assert p.returncode == 1 and "2 shares for the 3 namespaces" in p.stderr, p.stderr
    assert not flash.exists()


@pytest.mark.parametrize("eviction", ["lru", "fifo"])
@pytest.mark.parametrize("admission", ["admitall", "coinflip"])
def test_even_partition_against_the_simulator(ns_env, eviction, admission):
    """`--partition even` against the simulator's partitioned flash cache (FlashPartition with
    even shares) on the same trace, regions of one segment: the same capacity (123 segments,
    123 regions), the same quotas (41 each), each holding q - 1 = 40 (frt_partition_holds, one
    definition on both sides). FIFO makes the simulator's decisions exactly; LRU agrees
    within 1% (and per stream within 2%): where a block's segments are refreshed differs
    (runtime/README.md, "Policy slots")."""
    import numpy as np

    from flashml.simulation import FlashPartition, SimConfig, simulate
    from flashml.trace.ingest import load_trace

    df, meta = load_trace(ns_env["trace"], "tectonic")
    ns = df["namespace"].to_numpy()
    stream = np.searchsorted(np.unique(ns), ns).astype(np.uint32)
    cfg = SimConfig(capacity_segments=3 * 41, admission=admission, eviction=eviction,
                    coinflip_p=0.5, coinflip_seed=3, warmup_s=0.0,
                    sample_ratio=meta.sample_ratio, block_bytes=meta.block_bytes)
    s = simulate(df, cfg, partition=FlashPartition(stream, np.array([0], dtype=np.uint64),
                                                   np.full((1, 3), 1 / 3)))
    knobs = ["--coinflip-p", "0.5", "--coinflip-seed", "3"] if admission == "coinflip" else []
    p = subprocess.run(
        [str(FLASHRT), "replay", "--trace", str(ns_env["trace"]), "--flash",
         str(ns_env["dir"] / "sim-eq.img"), "--backing", str(ns_env["backing"]), "--warmup-s",
         "0", "--direct", "off", "--json", "--admission", admission, *knobs, "--eviction",
         eviction, "--partition", "even", "--region-bytes", "128KiB", "--flash-bytes",
         str(3 * 41 * 128 * 1024)], capture_output=True, text=True, timeout=300)
    (ns_env["dir"] / "sim-eq.img").unlink(missing_ok=True)
    Path(f"{ns_env['dir'] / 'sim-eq.img'}.journal").unlink(missing_ok=True)
    assert p.returncode == 0, p.stderr
    rt = json.loads(p.stdout)
    assert rt["integrity_errors"] == 0
    keys = ("io_hit_ratio", "segment_hit_ratio", "backend_ios", "backend_bytes",
            "admitted_segments")
    hits = [x["hits"] for x in rt["partitions"]]
    sim_hits = [int(h) for h in s.info["stream_hits"]]
    if eviction == "fifo":
        assert {k: rt[k] for k in keys} == {k: s.metrics[k] for k in keys}
        assert hits == sim_hits
    else:
        for k in keys:
            assert abs(rt[k] - s.metrics[k]) <= 0.01 * s.metrics[k], (k, rt[k], s.metrics[k])
        for a, b in zip(hits, sim_hits, strict=True):
            assert abs(a - b) <= 0.02 * b, (hits, sim_hits)


@pytest.fixture(scope="module")
def rule_bundle(env):
    """A partition bundle without a network: previous_optimal compiled into policy.so (the
    rule `flashml mlcache run` ships by default), cheap to build."""
    from flashml.compiler.build import compile_policy
    from flashml.compiler.bundle import save_partition_rule

    save_partition_rule(env["dir"] / "rule", capacity=120, interval=500, writes_only=False)
    compile_policy(env["dir"] / "rule-compiled", model_dir=env["dir"] / "rule",
                   log_to_mlflow=False)
    return env["dir"] / "rule-compiled"


def test_bundle_partition_moves_the_quotas(ns_env, rule_bundle):
    """`--partition bundle`: every 500 page requests (the GETs' segments) the bundle's
    flashml_partition re-divides the 120 regions from the monitor's features; the quotas of
    the last interval sum to the regions, streams above a new quota evict their own (resize
    evictions), and every byte is right."""
    seg = 128 * 1024
    p = replay(ns_env, "--partition", "bundle", "--partition-bundle", str(rule_bundle),
               "--partition-interval", "500", "--region-bytes", "128KiB", "--flash-bytes",
               str(120 * seg))
    assert p.returncode == 0, p.stderr
    m = json.loads(p.stdout)
    assert m["partition"] == "bundle" and m["integrity_errors"] == 0
    pages = sum(int(ln.split()[2]) // seg for ln in ns_env["trace"].read_text().splitlines()[1:])
    assert m["partition_intervals"] == -(-pages // 500)
    quotas = [x["quota_regions"] for x in m["partitions"]]
    # each holds its quota - 1 of the 120 (frt_partition_holds); moved from the even split
    assert sum(quotas) == 120 - 3 and quotas != [39, 39, 39]
    assert m["partition_resize_evictions"] > 0
    assert all(x["regions"] <= x["quota_regions"] for x in m["partitions"])


@pytest.mark.parametrize("eviction", ["fifo", "lru"])
def test_bundle_partition_against_the_simulator(ns_env, rule_bundle, eviction):
    """`--partition bundle` against the simulator's MLCache in flash mode (flashml.
    systems.mlcache.flash_partition: the monitor's features of each interval of 500 page requests,
    the bundle's shares, FlashPartition) on the same trace: the same capacity (120 regions of one
    segment, 120 segments), so the same monitor, the same quotas every interval and one rule
    for what a quota holds (frt_partition_holds: q - 1). With FIFO the simulator's decisions
    exactly (hits per stream, resize evictions, the last quotas); with LRU within 1% (per
    stream 2% or 2 hits: a stream has under 300) where a block's refresh differs
    (runtime/README.md "Policy slots")."""
    import numpy as np

    from flashml.simulation import FlashPartition, SimConfig, simulate
    from flashml.systems.mlcache.flash_partition import monitor_view, policy_shares
    from flashml.trace.ingest import load_trace

    df, meta = load_trace(ns_env["trace"], "tectonic")
    view = monitor_view(df, "namespace")
    shares, _ = policy_shares(view, 120, 500, "mlcache", bundle=rule_bundle)
    cfg = SimConfig(capacity_segments=120, admission="admitall", eviction=eviction,
                    warmup_s=0.0, sample_ratio=meta.sample_ratio, block_bytes=meta.block_bytes)
    s = simulate(df, cfg, partition=FlashPartition(view.access_stream, view.bounds(500), shares))
    p = replay(ns_env, "--eviction", eviction, "--partition", "bundle", "--partition-bundle",
               str(rule_bundle), "--partition-interval", "500", "--region-bytes", "128KiB",
               "--flash-bytes", str(120 * 128 * 1024))
    assert p.returncode == 0, p.stderr
    rt = json.loads(p.stdout)
    assert rt["integrity_errors"] == 0
    quotas = np.asarray(s.info["quotas"])
    assert rt["partition_intervals"] == len(quotas)
    assert [x["quota_regions"] for x in rt["partitions"]] == [max(int(q) - 1, 0)
                                                              for q in quotas[-1]]
    keys = ("io_hit_ratio", "segment_hit_ratio", "backend_ios", "backend_bytes",
            "admitted_segments")
    hits = [x["hits"] for x in rt["partitions"]]
    sim_hits = [int(h) for h in s.info["stream_hits"]]
    if eviction == "fifo":
        assert {k: rt[k] for k in keys} == {k: s.metrics[k] for k in keys}
        assert hits == sim_hits
        assert rt["partition_resize_evictions"] == s.info["resize_evictions"]
    else:
        for k in keys:
            assert abs(rt[k] - s.metrics[k]) <= 0.01 * s.metrics[k], (k, rt[k], s.metrics[k])
        for a, b in zip(hits, sim_hits, strict=True):
            assert abs(a - b) <= max(0.02 * b, 2), (hits, sim_hits)


def test_bundle_partition_needs_the_capability(ns_env, env):
    """A bundle without the partition capability is refused before the flash is touched."""
    from runtime_support import BUILD, make_bundle

    count = make_bundle(env["dir"] / "count", BUILD / "policies" / "count.so")
    flash = ns_env["dir"] / "nocap.img"
    p = replay(ns_env, "--partition", "bundle", "--partition-bundle", str(count), flash=flash,
               clean=False)
    assert p.returncode == 1 and "--partition bundle:" in p.stderr, p.stderr
    assert "partition" in p.stderr.split("--partition bundle:")[1]
    assert not flash.exists()
