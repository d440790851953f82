"""A small, obviously-correct pure-Python reference of the simulator's semantics.

It is written for clarity, not speed: dicts, sets and an OrderedDict for the eviction order.
The property tests demand that the Rust core (flashml_sim) agrees with it exactly, float for
float, so float expressions are evaluated in the same order as in `sim/src/flash/run.rs`.

Flash-cache mode is kept as BCacheSim keeps it: one ordered dict of (block, segment)
entries (first = next victim), per access i at time t on block `key`, covering s0..s1:
  PUT: one backend IO of (s1-s0+1) segments, DT = t_seek + n*seg_time (PUT time, apart
       from GET time); cache untouched.
  GET: hit iff every covered segment is cached.
    1. each cached covered segment (ascending): (LRU) moves to the most-recent end; without
       block-level recency its last-access time = t.
    2. miss: admission asked once (RejectX: once per missing segment, the artifact's
       history of (block, segment) keys). The admitted missing segments are inserted in
       ascending order; an insertion that brings the cache to its capacity evicts the first entry
       (written as: evict first while used + 1 >= capacity, which differs only at
       capacity 1, where the artifact evicts what it just inserted).
    3. block-level recency: every cached segment of the block (ascending) moves to the
       most-recent end (LRU) and the block's last-access time = t.
    4. if admitted and the prefetch policy gives a range (clipped to the block): its
       segments neither cached now nor missing at lookup are inserted (ascending), each
       followed (LRU, block-level) by a refresh of the block. One backend IO spans the
       first..last segment read (missing covered ones and prefetched ones); DT charged.
       Step 4's refresh is flashml's one difference
       from the artifact: a block's segments are evicted lowest index first, where BCacheSim
       would evict its prefetched segments after its others.
    eviction age: t - last access of the block (block-level recency) or of the segment.
Object-cache mode: libCacheSim's LRU/FIFO over (key, size) with byte or object capacity.
"""

from __future__ import annotations

import math
from collections import Counter, OrderedDict, deque

from flashml_sim import REJECTX_DITHER_SEED

MASK64 = (1 << 64) - 1
GIB = 1073741824.0


def splitmix64(x: int) -> int:
    z = (x + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def coinflip_draw(key: int, index: int, seed: int = 0) -> float:
    h = splitmix64((key ^ splitmix64((index ^ seed) & MASK64)) & MASK64)
    return (h >> 11) * (1.0 / 9007199254740992.0)


def percentile(sorted_vals: list[float], q: float) -> float:
    n = len(sorted_vals)
    pos = q * (n - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, n - 1)
    frac = pos - lo
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * frac


DEFAULT_CONFIG = {
    "segment_bytes": 131072, "block_bytes": 8388608, "t_seek_s": 11.5e-3,
    "bandwidth_bytes_per_s": 143.0 * 1048576, "disks": 36, "window_s": 600.0,
    "warmup_s": 86400.0, "sample_ratio": 100.0, "cache_gb": 366.475, "capacity_segments": 0,
    "eviction": "lru", "block_level_recency": True, "admission": "admitall",
    "coinflip_p": 0.5, "coinflip_seed": 0, "rejectx_x": 1, "rejectx_factor": 2.0,
    "threshold": 0.5, "prefetch": "none", "prefetch_when": "miss", "when_threshold": 0.5,
    "put_ops": [3, 4, 6],
}


def capacity_segments(c: dict) -> int:
    if c["capacity_segments"] > 0:
        return int(c["capacity_segments"])
    v = c["cache_gb"] * GIB * (c["sample_ratio"] / 100.0) / c["segment_bytes"]
    return math.floor(v) if v >= 1.0 else 0


def simulate(time, key, offset, size, op, config: dict, admit=None, score=None,
             prefetch_start=None, prefetch_end=None, when_score=None) -> dict:
    c = dict(DEFAULT_CONFIG)
    c.update(config)
    seg = int(c["segment_bytes"])
    spb = int(c["block_bytes"]) // seg
    cap = capacity_segments(c)
    seg_time = seg / c["bandwidth_bytes_per_s"]
    lru = c["eviction"] == "lru"
    block_level = bool(c["block_level_recency"])
    block_units = lru and block_level
    puts = set(int(x) for x in c["put_ops"])
    n = len(time)
    t0 = float(time[0])
    span = float(time[n - 1]) - t0
    window = c["window_s"]
    n_windows = math.floor(span / window) + 1
    win_dt = [0.0] * n_windows
    win_put = [0.0] * n_windows
    win_adm = [0] * n_windows
    get_dt = get_dt_nocache = 0.0

    cached: dict[int, set[int]] = {}        # block -> cached segments
    order: OrderedDict = OrderedDict()      # (block, segment); first = next victim
    block_last: dict[int, float] = {}
    seg_last: dict[tuple[int, int], float] = {}
    used = 0
    evictions = 0
    age_sum = 0.0

    rx_hist: OrderedDict = OrderedDict()    # RejectX: (block, segment) -> count, FIFO
    rx_window = c["rejectx_factor"] * cap
    history: deque[int] = deque()           # rejectx_block: the last H (+1) queried keys
    seen: Counter[int] = Counter()          # occurrences of each key in `history`
    h_real = c["rejectx_factor"] * cap
    hist_len = max(1, math.floor(h_real))
    hist_frac = h_real - math.floor(h_real) if h_real >= 1 else 0.0
    ring_len = hist_len + (1 if hist_frac > 0 else 0)

    def admit_fn(i: int, k: int) -> bool:
        a = c["admission"]
        if a == "admitall":
            return True
        if a == "coinflip":
            return coinflip_draw(k, i, int(c["coinflip_seed"])) < c["coinflip_p"]
        if a == "rejectx_block":
            # a window of hist_len + 1 keys with probability hist_frac, else hist_len
            history.append(k)
            seen[k] += 1
            if len(history) > ring_len:
                seen[history.popleft()] -= 1
            n = seen[k]
            if (hist_frac > 0 and len(history) == ring_len and history[0] == k
                    and coinflip_draw(k, i, REJECTX_DITHER_SEED) >= hist_frac):
                n -= 1
            return n > c["rejectx_x"]
        if a == "opt":
            return admit[i] != 0
        if a == "threshold":
            return score[i] >= c["threshold"]
        raise ValueError(a)

    def rejectx_segment(k: int, s: int) -> bool:
        if len(rx_hist) >= rx_window:
            rx_hist.popitem(last=False)
        if (k, s) not in rx_hist:
            rx_hist[(k, s)] = 1
            return False
        rx_hist[(k, s)] += 1
        return rx_hist[(k, s)] > c["rejectx_x"]

    def prefetch_fn(i: int, partial: bool):
        p = c["prefetch"]
        if p == "none":
            return None
        w = c["prefetch_when"]
        if w == "partial" and not partial:
            return None
        if w == "score" and not (when_score[i] >= c["when_threshold"]):
            return None
        if p == "block":
            return 0, spb - 1
        return int(prefetch_start[i]), int(prefetch_end[i])

    def evict_one(t: float) -> None:
        nonlocal used, evictions, age_sum
        unit, _ = order.popitem(last=False)
        k, s = unit
        last = block_last[k] if block_level else seg_last.pop(unit)
        cached[k].discard(s)
        used -= 1
        evictions += 1
        age_sum += t - last
        if not cached[k]:
            del cached[k]
            block_last.pop(k, None)

    def insert(k: int, s: int, t: float) -> None:
        nonlocal used
        while used > 0 and used + 1 >= cap:
            evict_one(t)
        if k not in cached:
            cached[k] = set()
            block_last[k] = t
        cached[k].add(s)
        used += 1
        order[(k, s)] = True
        if not block_level:
            seg_last[(k, s)] = t

    def refresh_block(k: int, t: float) -> None:
        if k in cached:
            block_last[k] = t
            if lru:
                for s in sorted(cached[k]):
                    order.move_to_end((k, s))

    gets = puts_n = hits = 0
    get_bytes = hit_bytes = get_segs = hit_segs = 0
    backend_ios = backend_bytes = admitted = prefetched = 0
    for i in range(n):
        t = float(time[i])
        k = int(key[i])
        off, sz = int(offset[i]), int(size[i])
        s0, s1 = off // seg, (off + sz - 1) // seg
        nseg = s1 - s0 + 1
        w = min(math.floor((t - t0) / window), n_windows - 1)
        if int(op[i]) in puts:
            puts_n += 1
            backend_ios += 1
            backend_bytes += nseg * seg
            win_put[w] += c["t_seek_s"] + nseg * seg_time
            continue
        get_dt_nocache += c["t_seek_s"] + nseg * seg_time
        gets += 1
        get_bytes += sz
        get_segs += nseg
        have = cached.get(k, set())
        covered_cached = [s for s in range(s0, s1 + 1) if s in have]
        missing = [s for s in range(s0, s1 + 1) if s not in have]
        for s in covered_cached:
            if not block_level:
                seg_last[(k, s)] = t
            if lru:
                order.move_to_end((k, s))
        if not missing:
            if block_level:
                refresh_block(k, t)
            hits += 1
            hit_bytes += sz
            hit_segs += nseg
            continue
        hit_segs += len(covered_cached)
        lo, hi = missing[0], missing[-1]
        if c["admission"] == "rejectx":
            take = [s for s in missing if rejectx_segment(k, s)]
            admitted_now = bool(take)
        else:
            admitted_now = admit_fn(i, k)
            take = missing if admitted_now else []
        # Prefetch only for an admitted miss (no point reading what is not going to be
        # written to flash).
        pf = prefetch_fn(i, len(covered_cached) > 0) if admitted_now else None
        for s in take:
            insert(k, s, t)
            admitted += 1
            win_adm[w] += 1
        if block_level:
            refresh_block(k, t)
        if pf is not None:
            for s in range(max(pf[0], 0), min(pf[1], spb - 1) + 1):
                if s in missing or s in cached.get(k, ()):
                    continue
                if c["admission"] == "rejectx" and not rejectx_segment(k, s):
                    continue
                insert(k, s, t)
                admitted += 1
                win_adm[w] += 1
                prefetched += 1
                lo, hi = min(lo, s), max(hi, s)
                if block_units:
                    refresh_block(k, t)
        io = hi - lo + 1
        backend_ios += 1
        backend_bytes += io * seg
        dt = c["t_seek_s"] + io * seg_time
        win_dt[w] += dt
        get_dt += dt

    sr = c["sample_ratio"]
    sr_scale = 100.0 / sr
    series = {"time": [], "dt_util": [], "dt_util_with_puts": [], "write_rate_mbps": [],
              "warmup": []}
    measured, measured_p = [], []
    for w in range(n_windows):
        util = win_dt[w] / c["disks"] / (sr / 100.0) / window
        util_p = (win_dt[w] + win_put[w]) / c["disks"] / (sr / 100.0) / window
        wr_w = win_adm[w] * float(seg) / window * sr_scale / 1e6
        warm = w * window < c["warmup_s"]
        series["time"].append(t0 + w * window)
        series["dt_util"].append(util)
        series["dt_util_with_puts"].append(util_p)
        series["write_rate_mbps"].append(wr_w)
        series["warmup"].append(warm)
        if not warm:
            measured.append(util)
            measured_p.append(util_p)

    def stats(vals: list[float]) -> tuple[float, float, float, float, float]:
        acc = 0.0
        for u in vals:
            acc += u
        srt = sorted(vals)
        return (srt[-1], acc / len(vals), percentile(srt, 0.5), percentile(srt, 0.9),
                percentile(srt, 0.99))

    peak, mean, p50, p90, p99 = stats(measured)
    peak_p, mean_p, p50_p, p90_p, p99_p = stats(measured_p)
    written = admitted * float(seg) / span * sr_scale
    wr = written / 1e6
    cache_full = cap * float(seg) * sr_scale

    def ratio(a, b):
        return a / b if b else math.nan

    metrics = {
        "peak_dt_util": peak, "mean_dt_util": mean, "p50_dt_util": p50, "p90_dt_util": p90,
        "p99_dt_util": p99, "peak_dt_util_with_puts": peak_p, "mean_dt_util_with_puts": mean_p,
        "p50_dt_util_with_puts": p50_p, "p90_dt_util_with_puts": p90_p,
        "p99_dt_util_with_puts": p99_p,
        "flash_write_rate_mbps": wr,
        "flash_write_rate_mibps": written / 1048576.0,
        "dwpd": wr * 1e6 * 86400.0 / cache_full,
        "io_hit_ratio": ratio(hits, gets),
        "byte_hit_ratio": ratio(hit_bytes, get_bytes),
        "segment_hit_ratio": ratio(hit_segs, get_segs),
        "service_time_saved_ratio": 1.0 - get_dt / get_dt_nocache if get_dt_nocache else math.nan,
        "iops_saved_ratio": ratio(hits, gets),
        "avg_eviction_age_s": age_sum / evictions if evictions else math.nan,
        "backend_ios": backend_ios,
        "backend_bytes": backend_bytes,
        "admitted_segments": admitted,
        "prefetched_segments": prefetched,
        "accesses": n,
    }
    info = {"capacity_segments": cap, "get_accesses": gets, "put_accesses": puts_n,
            "hits": hits, "evictions": evictions, "windows": n_windows,
            "measured_windows": len(measured)}
    return {"metrics": metrics, "series": series, "info": info}


def simulate_objects(keys, sizes, capacity: int, policy: str = "lru",
                     unit: str = "bytes") -> dict:
    """libCacheSim's LRU / FIFO: miss ratio = misses / requests."""
    order: OrderedDict = OrderedDict()     # key -> recorded size; first = next victim
    used = hits = 0
    for k, sz in zip(keys, sizes, strict=True):
        k, sz = int(k), int(sz)
        if k in order:
            hits += 1
            if policy == "lru":
                order.move_to_end(k)
            continue
        need = sz if unit == "bytes" else 1
        if need > capacity:
            continue
        while used + need > capacity:
            _, s = order.popitem(last=False)
            used -= s
        order[k] = need
        used += need
    n = len(keys)
    return {"requests": n, "hits": hits, "miss_ratio": (n - hits) / n}
