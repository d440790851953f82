"""KML's offline twin: flashml_sim.ReadaheadSim (sim/src/kml/readahead.rs) against a slow,
obvious Python model of the same page cache, readahead and clock; the window features against
flashml.features.readahead.window_features; the workloads' orderings; bad input."""

from __future__ import annotations

import math
from collections import OrderedDict
from itertools import pairwise

import numpy as np
import pytest

import flashml_sim
from flashml.features.readahead import window_features
from flashml.systems.kml import twin


class SlowTwin:
    """The model of sim/src/kml/readahead.rs, written the obvious way: an OrderedDict LRU of
    (file, page) -> readahead mark (last = most recent), per-file windows, the same cost rules.
    Records every event as (time = the clock when the page was added, file, page)."""

    def __init__(self, files, pages, npages, writes, *, cache_pages, riops=2000.0,
                 rbps=float(64 << 20), cpu_us=5.0, page_bytes=4096, window_ms=1000):
        self.reqs = list(zip((int(x) for x in files), (int(x) for x in pages),
                             (int(x) for x in npages), (bool(x) for x in writes), strict=True))
        self.cap, self.riops, self.rbps, self.cpu_us = cache_pages, riops, rbps, cpu_us
        self.pb, self.w = page_bytes, window_ms / 1000
        self.cache: OrderedDict[tuple[int, int], bool] = OrderedDict()
        self.win: dict[int, tuple[int, int]] = {}
        self.clock, self.pos = 0.0, 0
        self.events: list[tuple[float, int, int]] = []
        self.mean, self.m2 = 0.0, 0.0

    def _event(self, f, page, now):
        self.events.append((now, f, page))
        self.s["events"] += 1
        if self.wcount:
            self.wabs += abs(page - self.wlast)
        self.wlast = page
        self.wcount += 1
        d = page - self.mean
        self.mean += d / self.wcount
        self.m2 += d * (page - self.mean)

    def _add(self, key, mark):
        if key in self.cache:
            return False
        if len(self.cache) >= self.cap:
            self.cache.popitem(last=False)
        self.cache[key] = mark
        return True

    def _window(self, f, start, ra, now):
        mark = start + ra - max(1, ra // 4)
        added = 0
        for q in range(start, start + ra):
            if self._add((f, q), q == mark):
                self._event(f, q, now)
                added += 1
        self.win[f] = (start, ra)
        return added

    def _io(self, pages):
        self.s["ios"] += 1
        self.s["read_bytes"] += pages * self.pb
        return 1.0 / self.riops + (pages * self.pb) / self.rbps

    def _request(self, f, p0, n, write, ra):
        now = self.clock
        cost = self.cpu_us * 1e-6
        for p in range(p0, p0 + n):
            key = (f, p)
            if key in self.cache:
                self.cache.move_to_end(key)
                if write:
                    self.s["write_pages"] += 1
                    continue
                self.s["hits"] += 1
                if self.cache[key]:
                    self.cache[key] = False
                    ws, wn = self.win.get(f, (p, 0))
                    added = self._window(f, ws + wn, ra, now)
                    if added:
                        cost += self._io(added)
            elif write:
                self.s["write_pages"] += 1
                self._add(key, False)
                self._event(f, p, now)
            else:
                self.s["misses"] += 1
                cost += self._io(self._window(f, max(0, p - ra // 2), ra, now))
        self.clock += cost

    def run_window(self, ra_kib):
        ra = max(1, ra_kib * 1024 // self.pb)
        k = self.clock // self.w
        start = self.clock
        self.s = dict.fromkeys(("requests", "hits", "misses", "ios", "read_bytes", "events",
                                "write_pages"), 0)
        self.wcount, self.wabs, self.wlast = 0, 0.0, 0
        self.mean, self.m2 = 0.0, 0.0
        while self.pos < len(self.reqs):
            self._request(*self.reqs[self.pos], ra)
            self.pos += 1
            self.s["requests"] += 1
            if self.clock // self.w > k:
                break
        c = self.wcount
        return {**self.s, "window": int(k), "empty": c == 0,
                "features": [float(c), self.mean,
                             math.sqrt(self.m2 / c) if c > 1 else 0.0,
                             self.wabs / (c - 1) if c > 1 else 0.0, float(ra_kib)],
                "elapsed_s": self.clock - start, "clock_s": self.clock,
                "done": self.pos >= len(self.reqs)}


def random_trace(seed, n=400, files=3, pages=300, write_frac=0.2):
    rng = np.random.default_rng(seed)
    # Mix random jumps with sequential runs so marks are hit and async readahead happens.
    f = rng.integers(0, files, n).astype(np.uint32)
    p = rng.integers(0, pages, n).astype(np.uint64)
    seq = rng.random(n) < 0.6
    for i in range(1, n):
        if seq[i]:
            f[i], p[i] = f[i - 1], p[i - 1] + rng.integers(0, 3)
    return {"files": f, "pages": p, "npages": rng.integers(1, 5, n).astype(np.uint32),
            "writes": rng.random(n) < write_frac}


COUNTERS = ("window", "empty", "requests", "hits", "misses", "ios", "read_bytes", "events",
            "write_pages", "done")


@pytest.mark.parametrize("seed", range(6))
def test_sim_equals_slow_model_and_window_features(seed):
    tr = random_trace(seed)
    cache = [7, 40, 120][seed % 3]
    window_ms = [1, 2, 5][seed % 3]
    schedules = [[4], [8], [16], [32], [128], [4, 64, 8, 1024, 12]]
    for sched in schedules:
        kw = dict(cache_pages=cache, window_ms=window_ms, cpu_us=[5.0, 50.0][seed % 2])
        fast = flashml_sim.ReadaheadSim(tr["files"], tr["pages"], tr["npages"], tr["writes"],
                                        **kw)
        slow = SlowTwin(tr["files"], tr["pages"], tr["npages"], tr["writes"], **kw)
        rows, i = [], 0
        while True:
            kib = sched[i % len(sched)]
            a, b = fast.run_window(kib), slow.run_window(kib)
            for k in COUNTERS:
                assert a[k] == b[k], (sched, i, k, a, b)
            assert a["features"] == pytest.approx(b["features"], rel=1e-12, abs=1e-9)
            assert a["clock_s"] == pytest.approx(b["clock_s"], rel=1e-12)
            assert a["elapsed_s"] == pytest.approx(b["elapsed_s"], rel=1e-9, abs=1e-15)
            rows.append(a)
            i += 1
            if a["done"]:
                break
        assert fast.done and fast.position == len(tr["files"])
        assert sum(r["requests"] for r in rows) == len(tr["files"])
        assert len(rows) > 3, "the trace should span several windows"
        if sched == [8]:   # async readahead happened (every miss is one IO) and evictions
            assert sum(r["ios"] for r in rows) > sum(r["misses"] for r in rows)
            assert len(slow.events) > cache
        # The window features are the contract's reference fed the events.
        ref = window_features(slow.events, readahead_kib=0, window_s=window_ms / 1000)
        busy = [r for r in rows if not r["empty"]]
        assert [r["window"] for r in ref] == [r["window"] for r in busy]
        for r, x in zip(busy, ref, strict=True):
            want = [x["tracepoints"], x["offset_mean"], x["offset_std"],
                    x["offset_absdiff_mean"]]
            assert r["features"][:4] == pytest.approx(want, rel=1e-12, abs=1e-9)
        assert sum(r["events"] for r in rows) == len(slow.events)
        # run_fixed restarts and sums the windows of a fixed size.
        if len(sched) == 1:
            tot = fast.run_fixed(sched[0])
            assert tot["requests"] == len(tr["files"])
            assert tot["ios"] == sum(r["ios"] for r in rows)
            assert tot["clock_s"] == rows[-1]["clock_s"]
            assert tot["ops_per_s"] == pytest.approx(len(tr["files"]) / tot["clock_s"])


def test_slow_model_by_hand():
    # The slow model itself on the Rust unit test's example: a sequential pass over 1000
    # pages at 32 pages costs 32 IOs (the fault at 0 and async reads at 24, 56, ..., 984).
    n = 1000
    s = SlowTwin(np.zeros(n), np.arange(n), np.ones(n), np.zeros(n, bool), cache_pages=4096)
    r = s.run_window(128)
    assert (r["ios"], r["misses"], r["hits"], r["done"]) == (32, 1, 999, True)


SMALL = dict(files=4, file_pages=2048)


def _ops(name, kib, requests=20_000, cache_pages=2048, **device):
    tr = twin.workload_trace(name, requests=requests, seed=3, **SMALL)
    return twin.evaluate(tr, kib, cache_pages=cache_pages, **device)["ops_per_s"]


def test_workload_orderings():
    assert _ops("readrandom", 8, 3000) > 3 * _ops("readrandom", 1024, 3000)
    assert _ops("readseq", 1024) > 2 * _ops("readseq", 8)
    assert _ops("readreverse", 1024) > 2 * _ops("readreverse", 8)
    assert _ops("readrandomwriterandom", 8, 3000) > _ops("readrandomwriterandom", 1024, 3000)


def test_workload_shapes():
    n = 5000
    for name in twin.WORKLOADS:
        tr = twin.workload_trace(name, requests=n, seed=1, **SMALL)
        assert [tr[k].dtype for k in twin.TRACE_KEYS] == [np.uint32, np.uint64, np.uint32,
                                                          np.bool_]
        assert all(len(tr[k]) == n for k in twin.TRACE_KEYS)
        reads = ~tr["writes"]
        assert (tr["files"][reads] < SMALL["files"]).all()
        assert (tr["pages"][reads] + tr["npages"][reads] <= SMALL["file_pages"]).all()
        assert (tr["files"][tr["writes"]] == SMALL["files"]).all()   # the log
        again = twin.workload_trace(name, requests=n, seed=1, **SMALL)
        assert all((tr[k] == again[k]).all() for k in twin.TRACE_KEYS)
    seq = twin.workload_trace("readseq", requests=30, **SMALL)
    assert seq["pages"].tolist() == [i * 400 // 4096 for i in range(30)]
    rev = twin.workload_trace("readreverse", requests=3, **SMALL)
    assert rev["files"].tolist() == [3, 3, 3] and rev["pages"][0] == 2047
    upd = twin.workload_trace("updaterandom", requests=6, **SMALL)
    assert upd["writes"].tolist() == [False, True] * 3
    assert upd["pages"][1::2].tolist() == [0, 0, 0]
    mix = twin.workload_trace("mixgraph", requests=20_000, **SMALL)
    assert 1 < mix["npages"].max() <= 64
    counts = np.bincount(mix["files"].astype(np.int64) * 2048 + mix["pages"].astype(np.int64))
    top = np.sort(counts)[::-1][: len(counts) // 10].sum()
    assert top > 0.4 * counts.sum()                               # skewed


def test_evaluate_consistent_with_fixed_runs():
    tr = twin.workload_trace("mixgraph", requests=4000, seed=2, **SMALL)
    for kib in (8, 64, 512):
        fixed = twin.evaluate(tr, kib, cache_pages=1024)
        const = twin.evaluate(tr, lambda f, k=kib: k, cache_pages=1024, initial_kib=kib)
        best = twin.best_fixed(tr, sizes=(kib,), cache_pages=1024)["runs"][kib]
        assert fixed["ops_per_s"] == const["ops_per_s"] == best["ops_per_s"]
        assert fixed["ios"] == best["ios"] and fixed["requests"] == 4000

    # A tuner that switches: the rows record what it chose, each window runs at the size
    # chosen from the previous window's features (or keeps it after an empty window).
    calls = []

    def alternate(f):
        calls.append(list(f))
        return 8 if f[4] == 1024 else 1024

    out = twin.evaluate(tr, alternate, cache_pages=1024, initial_kib=8)
    rows = out["windows"]
    assert rows[0]["kib"] == 8 and {r["kib"] for r in rows} == {8, 1024}
    assert all(r["features"][4] == r["kib"] for r in rows)
    for prev, cur in pairwise(rows):
        want = prev["kib"] if prev["empty"] else (8 if prev["kib"] == 1024 else 1024)
        assert cur["kib"] == want
    assert len(calls) == sum(not r["empty"] for r in rows[:-1])
    assert sum(r["requests"] for r in rows) == out["requests"] == 4000
    lo, hi = (twin.evaluate(tr, k, cache_pages=1024)["ops_per_s"] for k in (1024, 8))
    assert lo < out["ops_per_s"] < hi


def test_tuner_beats_every_fixed_size_on_a_phase_change():
    # readrandom then readseq (in big files, so the scan never jumps between files): a tuner
    # reading the features (consecutive events one page apart: sequential) beats the best
    # single size, as KML does on changing workloads.
    big = dict(files=2, file_pages=65536)
    a = twin.workload_trace("readrandom", requests=3000, seed=4, **big)
    b = twin.workload_trace("readseq", requests=400_000, seed=4, **big)
    tr = {k: np.concatenate([a[k], b[k]]) for k in twin.TRACE_KEYS}
    fixed = twin.best_fixed(tr, cache_pages=2048)
    tuned = twin.evaluate(tr, lambda f: 1024 if f[3] < 1.5 else 8, cache_pages=2048)
    assert tuned["ops_per_s"] > 1.15 * fixed["best_ops_per_s"], (tuned, fixed["ops_per_s"])
    assert {r["kib"] for r in tuned["windows"]} == {128, 8, 1024}


def test_best_fixed_labels():
    tr = twin.workload_trace("readrandom", requests=2000, seed=5, **SMALL)
    r = twin.best_fixed(tr, sizes=(8, 128, 1024), cache_pages=2048)
    assert r["best_kib"] == 8 and set(r["ops_per_s"]) == {8, 128, 1024}
    tr = twin.workload_trace("readseq", requests=20_000, seed=5, **SMALL)
    assert twin.best_fixed(tr, sizes=(8, 128, 1024), cache_pages=2048)["best_kib"] == 1024


def test_bad_input_names_the_argument():
    tr = random_trace(0, n=10)
    cols = [tr[k] for k in twin.TRACE_KEYS]
    with pytest.raises(ValueError, match="'pages'"):
        flashml_sim.ReadaheadSim(cols[0], cols[1][:5], cols[2], cols[3], cache_pages=10)
    with pytest.raises(ValueError, match="'writes'"):
        flashml_sim.ReadaheadSim(cols[0], cols[1], cols[2], cols[3][:5], cache_pages=10)
    with pytest.raises(ValueError, match="cache_pages"):
        flashml_sim.ReadaheadSim(*cols, cache_pages=0)
    with pytest.raises(ValueError, match="riops"):
        flashml_sim.ReadaheadSim(*cols, cache_pages=10, riops=0)
    with pytest.raises(ValueError, match="window_ms"):
        flashml_sim.ReadaheadSim(*cols, cache_pages=10, window_ms=0)
    with pytest.raises(ValueError, match=r"npages\[2\]"):
        bad = cols[2].copy()
        bad[2] = 0
        flashml_sim.ReadaheadSim(cols[0], cols[1], bad, cols[3], cache_pages=10)
    sim = flashml_sim.ReadaheadSim(*cols, cache_pages=10)
    for bad_kib in (0, -8):
        with pytest.raises(ValueError, match="ra_kib"):
            sim.run_window(bad_kib)
        with pytest.raises(ValueError, match="ra_kib"):
            sim.run_fixed(bad_kib)
    assert sim.position == 0                                        # nothing ran
    with pytest.raises(ValueError, match="workload"):
        twin.workload_trace("readsome", requests=10)
    with pytest.raises(ValueError, match="requests"):
        twin.workload_trace("readseq", requests=0)
    with pytest.raises(ValueError, match="policy"):
        twin.evaluate(tr, 0)
    with pytest.raises(ValueError, match="policy"):
        twin.evaluate(tr, lambda f: -1, cache_pages=10, window_ms=1)
    with pytest.raises(ValueError, match="bogus"):
        twin.evaluate(tr, 8, bogus=1)
    with pytest.raises(ValueError, match="writes"):
        twin.evaluate({k: tr[k] for k in ("files", "pages", "npages")}, 8)
    with pytest.raises(ValueError, match="sizes"):
        twin.best_fixed(tr, sizes=())
