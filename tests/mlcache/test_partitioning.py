"""MLCache's first stage: exact stack distances and hit curves, the partition
search, and the partitioned page cache, each against an independent reference: a slow obvious
LRU stack, brute force over every split, a slow partitioned LRU written here, libCacheSim's own
LRU (external oracle), the paper's Fig. 1, and the shared reference table."""

from __future__ import annotations

import itertools
import json
from collections import OrderedDict

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flashml.systems.mlcache import partitioning as part
from flashml.systems.mlcache.multistream import generate_mix, write_mix

from conftest import CLOUDPHYSICS

INF = int(part.COLD)


# --- slow obvious references ------------------------------------------------------------------

def slow_distances(keys) -> list[int]:
    """Walk an explicit LRU stack (front = most recent): O(n * m)."""
    stack: list[int] = []
    out = []
    for k in keys:
        if k in stack:
            p = stack.index(k)
            out.append(p + 1)
            stack.pop(p)
        else:
            out.append(INF)
        stack.insert(0, k)
    return out


def slow_partitioned(keys, streams, writes, k, capacity, interval, quotas, *,
                     writes_only=False) -> list[bool]:
    """A partitioned LRU from the definition: one OrderedDict per partition (or one shared),
    quotas(iv) -> list of pages or None (shared); shrinking drops LRU pages."""
    lists = [OrderedDict() for _ in range(k)]
    quota = [0] * k
    shared = False
    hits = []
    seen = 0
    for key, s, w in zip(keys, streams, writes, strict=True):
        if writes_only and not w:
            hits.append(False)
            continue
        if seen % interval == 0:
            q = quotas(seen // interval)
            if q is None:
                shared, quota = True, [capacity] + [0] * (k - 1)
            else:
                quota = list(q)
            for lst, qq in zip(lists, quota, strict=True):
                while len(lst) > qq:
                    lst.popitem(last=False)
        seen += 1
        item = (int(s), int(key))
        where = next((lst for lst in lists if item in lst), None)
        hits.append(where is not None)
        if where is not None:
            where.move_to_end(item)
            continue
        li = 0 if shared else int(s)
        if quota[li] == 0:
            continue
        if len(lists[li]) >= quota[li]:
            lists[li].popitem(last=False)
        lists[li][item] = True
    return hits


def brute_split(curves) -> int:
    k, w = len(curves), len(curves[0])
    best = 0
    for split in itertools.product(range(w), repeat=k):
        if sum(split) == w - 1:
            best = max(best, sum(c[s] for c, s in zip(curves, split, strict=True)))
    return best


# --- stack distances ----------------------------------------------------------------------------

def test_paper_figure_1() -> None:
    """a b c d b e c f a a with a cache of 5: requests 5, 7 and 10 hit (Fig. 1). The figure
    prints 8 for request 9, a's reuse time; its stack distance is 6 (a..f); both exceed 5."""
    keys = np.array([1, 2, 3, 4, 2, 5, 3, 6, 1, 1], dtype=np.uint64)
    d = part.stack_distances(keys)
    assert d.tolist() == [INF, INF, INF, INF, 3, INF, 4, INF, 6, 1]
    assert part.hit_curve(d, [5]).tolist() == [3]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 12), max_size=120))
def test_distances_equal_the_slow_definition(keys) -> None:
    got = part.stack_distances(np.array(keys, dtype=np.uint64))
    assert got.tolist() == slow_distances(keys)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 8), st.integers(0, 2)), max_size=150))
def test_per_stream_distances_equal_the_slow_definition(reqs) -> None:
    keys = np.array([k for k, _ in reqs], dtype=np.uint64)
    streams = np.array([s for _, s in reqs], dtype=np.uint32)
    got = part.stack_distances(keys, streams, 3)
    for s in range(3):
        mine = streams == s
        assert got[mine].tolist() == slow_distances(keys[mine].tolist())


@pytest.fixture(scope="module")
def cloudphysics_writes() -> np.ndarray:
    df = pl.read_csv(CLOUDPHYSICS, schema_overrides={"op": pl.Utf8, "lbn": pl.UInt64})
    return df.filter(pl.col("op") == "2a")["lbn"].to_numpy()


def test_hit_curve_equals_libcachesim_lru(cloudphysics_writes) -> None:
    """The MRC from our stack distances on the CloudPhysics sample's 66,898 writes equals the
    miss ratios of libCacheSim's own LRU (count capacity) at every capacity asked."""
    pytest.importorskip("libcachesim")
    from flashml.systems.mat import object_baselines as ob

    keys = cloudphysics_writes
    assert len(keys) == 66_898
    caps = [1, 10, 100, 500, 1000, 5000, 20000]
    ours = part.hit_curve(part.stack_distances(keys), caps)
    rows = ob.run_baselines(keys, np.ones(len(keys), np.uint64), caps, unit="objects",
                            policies=["lru"], isolate=False)
    for c, h in zip(caps, ours, strict=True):
        assert rows[c]["lru"]["hits"] == h, c


def test_miss_ratio_curve_reproduces_the_reference_table() -> None:
    """../shared/traces/README.md: libCacheSim's LRU at 1,000 objects misses 0.8327 of the
    CloudPhysics sample's 113,872 requests."""
    df = pl.read_csv(CLOUDPHYSICS, schema_overrides={"lbn": pl.UInt64})
    d = part.stack_distances(df["lbn"].to_numpy())
    assert round(float(part.miss_ratio_curve(d, [1000])[0]), 4) == 0.8327


# --- partition search -------------------------------------------------------------------------

@settings(max_examples=120, deadline=None)
@given(st.integers(1, 4).flatmap(lambda k: st.integers(1, 6).flatmap(
    lambda t: st.lists(st.lists(st.integers(0, 50), min_size=t + 1, max_size=t + 1),
                       min_size=k, max_size=k))))
def test_best_split_equals_brute_force(curves) -> None:
    split, hits = part.best_split(curves)
    assert hits == brute_split(curves)
    assert sum(split) == len(curves[0]) - 1
    assert sum(c[s] for c, s in zip(curves, split, strict=True)) == hits


def test_best_split_by_hand() -> None:
    # stream 0 saturates at one step, stream 1 gains 4 per step: 1 + 3 steps, 10 + 12 hits
    assert part.best_split([[0, 10, 10, 10, 10], [0, 4, 8, 12, 16]]) == ([1, 3], 22)


def test_curves_count_directly() -> None:
    rng = np.random.default_rng(3)
    n, k, cap, steps, interval = 3000, 3, 30, 6, 700
    trace = part.stream_trace(rng.integers(0, 40, n), rng.integers(0, k, n), rng.random(n) < .6)
    c = part.partition_curves(trace, cap, interval, steps, objective="write_hits")
    d = part.stack_distances(trace.keys, trace.streams, k)
    assert c["curves"].shape == (5, k, steps + 1)
    assert c["grid"].tolist() == [j * cap // steps for j in range(steps + 1)]
    for iv, s, j in itertools.product(range(5), range(k), range(steps + 1)):
        sel = ((np.arange(n) // interval == iv) & (trace.streams == s) & trace.writes
               & (d <= c["grid"][j]))
        assert c["curves"][iv, s, j] == sel.sum()
    # the monitor's histogram of all requests: distances in `steps` buckets of the capacity
    for iv, s in itertools.product(range(5), range(k)):
        sel = (np.arange(n) // interval == iv) & (trace.streams == s) & (d <= cap)
        want = np.bincount(((d[sel] - 1) * steps // cap).astype(np.int64), minlength=steps)
        assert c["histograms"][iv, s].tolist() == want.tolist()


# --- the partitioned cache --------------------------------------------------------------------

def apportion(weights, capacity) -> list[int]:
    """Largest remainder, ties to the lower stream (the simulator's rule, restated)."""
    tot = sum(weights) or len(weights)
    weights = weights if sum(weights) else [1] * len(weights)
    pages = [w * capacity // tot for w in weights]
    order = sorted(range(len(weights)), key=lambda i: (-(weights[i] * capacity % tot), i))
    for i in order[:capacity - sum(pages)]:
        pages[i] += 1
    return pages


trace_st = st.integers(1, 3).flatmap(lambda k: st.tuples(
    st.just(k), st.lists(st.tuples(st.integers(0, 15), st.integers(0, k - 1), st.booleans()),
                         min_size=1, max_size=300),
    st.integers(1, 20), st.integers(1, 60), st.integers(1, 5), st.booleans()))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace_st)
def test_policies_equal_a_slow_partitioned_lru(case) -> None:
    k, reqs, cap, interval, steps, writes_only = case
    keys = np.array([r[0] for r in reqs], np.uint64)
    streams = np.array([r[1] for r in reqs], np.uint32)
    writes = np.array([r[2] for r in reqs], bool)
    trace = part.StreamTrace(keys, streams, writes, tuple(map(str, range(k))))
    if writes_only and not writes.any():
        return
    curves = part.partition_curves(trace, cap, interval, steps, writes_only=writes_only)
    per_iv = [part.best_split(c)[0] for c in curves["curves"]]
    static = part.best_split(curves["curves"].sum(axis=0))[0]
    rng = np.random.default_rng(len(reqs))
    shares = rng.random((len(per_iv), k))
    quotas = {
        "shared": lambda iv: None,
        "even": lambda iv: apportion([1] * k, cap),
        "static_optimal": lambda iv: apportion(static, cap),
        "discrete_optimal": lambda iv: apportion(per_iv[iv], cap),
        "mlcache": lambda iv: apportion([int(round(x / shares[iv].sum() * 2**40))
                                         for x in shares[iv]], cap),
    }
    for name, q in quotas.items():
        r = part.simulate_partitioned(trace, cap, interval, name, steps=steps,
                                      writes_only=writes_only,
                                      shares=shares if name == "mlcache" else None)
        want = slow_partitioned(keys, streams, writes, k, cap, interval, q,
                                writes_only=writes_only)
        assert r["hits"] == sum(want), name
        assert r["write_hits"] == sum(h and w for h, w in zip(want, writes, strict=True)), name
        if name != "shared":
            assert r["allocations"].tolist() == [q(iv) for iv in range(len(per_iv))], name


def test_static_optimal_hits_are_what_its_curves_promise() -> None:
    """Fixed quotas mean no resize: every partition is an LRU of its size from the start, so
    the simulated hits equal the whole-trace curves at the chosen split (capacity a multiple
    of the steps: the split's pages are exactly its grid capacities)."""
    df, _ = generate_mix(4, 40_000, seed=2)
    trace = part.page_requests(df, "namespace")
    c = part.partition_curves(trace, 200, 4000, 10)["curves"].sum(axis=0)
    split, promised = part.best_split(c)
    r = part.simulate_partitioned(trace, 200, 4000, "static_optimal")
    assert r["hits"] == promised
    assert r["allocations"][0].tolist() == [20 * s for s in split]
    for name in ("even", "shared"):
        assert part.simulate_partitioned(trace, 200, 4000, name)["hits"] <= promised


def test_discrete_optimal_beats_even_on_mixes() -> None:
    """The oracle beats an even split on generated mixes of 2, 4 and 8 streams (the ordering
    the paper's Fig. 5 shows), and never allocates outside the capacity."""
    for k, cap in ((2, 220), (4, 260), (8, 680)):
        df, _ = generate_mix(k, 60_000, seed=10 + k)
        trace = part.page_requests(df, "namespace")
        res = part.compare(trace, cap, 5000)
        assert res["discrete_optimal"]["hit_ratio"] > res["even"]["hit_ratio"], k
        alloc = part.simulate_partitioned(trace, cap, 5000, "discrete_optimal")["allocations"]
        assert (alloc.sum(axis=1) == cap).all()


def test_mlcache_bad_shares_fall_back_to_even() -> None:
    df, _ = generate_mix(2, 5000, seed=1)
    trace = part.page_requests(df, "namespace")
    even = part.simulate_partitioned(trace, 50, 1000, "even")
    bad = np.array([[np.nan, 1.0], [-1.0, 2.0], [0.0, 0.0], [np.inf, 0.0], [0.5, 0.5]])
    r = part.simulate_partitioned(trace, 50, 1000, "mlcache", shares=bad)
    assert (r["hits"], r["fallbacks"]) == (even["hits"], 4)
    with pytest.raises(ValueError, match="mlcache needs shares"):
        part.simulate_partitioned(trace, 50, 1000, "mlcache")
    with pytest.raises(ValueError, match="columns"):
        part.simulate_partitioned(trace, 50, 1000, "mlcache", shares=np.ones((2, 3)))
    with pytest.raises(ValueError, match="only for policy mlcache"):
        part.simulate_partitioned(trace, 50, 1000, "even", shares=np.ones((2, 2)))
    with pytest.raises(ValueError, match="unknown partition policy"):
        part.simulate_partitioned(trace, 50, 1000, "lfu")


# --- page requests and the generator ----------------------------------------------------------

def test_page_requests_split_accesses_into_pages() -> None:
    df = pl.DataFrame({"key": [7, 7, 9], "offset": [0, 8000, 100], "size": [8192, 500, 1],
                       "op": [4, 2, 4], "namespace": [1, 2, 1]},
                      schema_overrides={"key": pl.UInt64, "offset": pl.UInt64,
                                        "size": pl.UInt64, "op": pl.UInt8})
    t = part.page_requests(df, "namespace", page_bytes=8192)
    # key 7 -> id 0, key 9 -> id 1; pages per block 2 (the largest page index seen is 1)
    assert t.keys.tolist() == [0, 0, 1, 2]
    assert t.streams.tolist() == [0, 1, 1, 0]
    assert t.writes.tolist() == [True, False, False, True]
    assert t.names == ("1", "2")
    with pytest.raises(ValueError, match="field 'user': no such column"):
        part.page_requests(df, "user")
    with pytest.raises(ValueError, match="one value"):
        part.page_requests(df.with_columns(pl.lit(3).alias("namespace")), "namespace")


def test_generate_mix_is_seeded(tmp_path) -> None:
    a, ka = generate_mix(3, 5000, seed=4)
    b, kb = generate_mix(3, 5000, seed=4)
    assert a.equals(b) and ka == kb
    assert sorted(a["namespace"].unique().to_list()) == [0, 1, 2]
    assert a["time"].is_sorted()
    write_mix(a, tmp_path / "m.parquet")
    from flashml.trace.ingest import load_trace

    back, meta = load_trace(tmp_path / "m.parquet")
    assert back.select(a.columns).equals(a) and meta.block_bytes == 8192


# --- CLI ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def mix_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("mix") / "mix3.parquet"
    df, _ = generate_mix(3, 20_000, seed=5)
    return write_mix(df, path)


def test_cli_partition_json(cli, mix_path) -> None:
    p = cli("sim", "partition", "--trace", mix_path, "--capacity", "120", "--interval", "2000",
            "--json", check=True)
    out = json.loads(p.stdout)
    assert list(out["policies"]) == list(part.TRACE_POLICIES)
    assert out["streams"] == ["0", "1", "2"] and out["requests"] == 20_000
    df = pl.read_parquet(mix_path)
    trace = part.page_requests(df, "namespace", 8192)
    for name, r in out["policies"].items():
        direct = part.simulate_partitioned(trace, 120, 2000, name)
        assert r["hits"] == direct["hits"] and r["write_hits"] == direct["write_hits"]


@pytest.mark.parametrize("args, message", [
    (("--streams", "nope"), "field 'nope': no such column"),
    (("--streams", "user"), "field 'user': one value"),
    (("--policy", "mlcache"), "needs one of --bundle DIR"),
    (("--policy", "even", "--shares", "x.npy"), "only for --policy mlcache"),
    (("--policy", "mlcache", "--shares", "missing.npy"), "missing.npy: no such file"),
])
def test_cli_partition_bad_input(cli, mix_path, args, message) -> None:
    p = cli("sim", "partition", "--trace", mix_path, "--capacity", "100", "--interval", "500",
            *args)
    assert p.returncode != 0 and p.stdout == ""
    assert message in p.stderr


def test_cli_partition_bad_shares_and_numbers(cli, mix_path, tmp_path) -> None:
    np.save(tmp_path / "bad.npy", np.ones((4, 2)))
    p = cli("sim", "partition", "--trace", mix_path, "--capacity", "100", "--interval", "500",
            "--policy", "mlcache", "--shares", tmp_path / "bad.npy")
    assert p.returncode != 0 and p.stdout == "" and "expected (intervals, 3)" in p.stderr
    p = cli("sim", "partition", "--trace", mix_path, "--capacity", "0", "--interval", "500")
    assert p.returncode == 2 and "--capacity" in p.stderr
    p = cli("sim", "partition", "--trace", CLOUDPHYSICS, "--format", "cloudphysics",
            "--capacity", "100", "--interval", "500")
    assert p.returncode != 0 and p.stdout == "" and "field 'namespace': one value" in p.stderr


def test_cli_trace_mix(cli, tmp_path) -> None:
    out = tmp_path / "m.parquet"
    p = cli("trace", "mix", "--streams", "2", "--requests", "3000", "--kinds", "loop,scan",
            "--seed", "3", "-o", out, check=True)
    assert "0=loop, 1=scan" in p.stdout
    df, _ = generate_mix(2, 3000, seed=3, kinds=("loop", "scan"))
    assert pl.read_parquet(out).select(df.columns).equals(df)
    p = cli("trace", "mix", "--streams", "2", "--kinds", "loop,lfu", "-o", tmp_path / "x.pq")
    assert p.returncode != 0 and "--kinds" in p.stderr and not (tmp_path / "x.pq").exists()


def test_cli_partition_msr_pages(cli) -> None:
    """An MSR trace, streams by host: every IO becomes one request per 8 KiB page of each
    8 MiB block it covers (2 + 1 + (1 + 1) + 8 pages), a write iff the IO is a Write."""
    from conftest import REPO

    p = cli("sim", "partition", "--trace", REPO / "tests" / "data" / "msr_fixture.csv",
            "--format", "msr", "--streams", "src_hostname", "--capacity", "8", "--interval",
            "2", "--json", check=True)
    out = json.loads(p.stdout)
    assert out["streams"] == ["prxy", "web"]
    assert (out["requests"], out["writes"]) == (13, 1)
    # each page is requested once: nothing can hit
    assert all(r["hits"] == 0 for r in out["policies"].values())
