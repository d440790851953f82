"""A slow, obviously-correct pure-Python reference of the episodes job (tiny traces only;
imported by the episodes tests, holds no tests itself).

Episodes are split with a plain loop per key; the no-prefetch cost is a literal replay with a
set of cached segments and the simulator's miss rule (one IO from the first to the last
missing segment, every uncached segment of the IO admitted); ranking and cutoff by sorting a
list. Floats are formed from integer counts in the simulator's DT form (ios * t_seek +
segments * seg_time), as the engines do.
"""

from __future__ import annotations

from flashml.config import GET_OPS, MB, UNITS


def reference(rows: list[dict], *, eviction_age_s: float, target: float, k: int,
              sample_ratio: float = 100.0, seg: int = UNITS.segment_bytes,
              time_mode: str = "seconds", eps: float = 5e-3) -> dict:
    duration = rows[-1]["time"] - rows[0]["time"]
    seg_time = seg / UNITS.bandwidth_bytes_per_s
    mbps_per_segment = seg / duration * (100.0 / sample_ratio) / MB
    gets = [dict(r, row=i) for i, r in enumerate(rows) if r["op"] in GET_OPS]
    for g_i, g in enumerate(gets):
        g["gidx"] = g_i
    thr = eviction_age_s
    col = "time"
    if time_mode == "logical":
        thr, col = eviction_age_s * len(gets) / duration, "gidx"
    by_key: dict[int, list[dict]] = {}
    for g in gets:
        by_key.setdefault(g["key"], []).append(g)
    episodes = []
    for acc in by_key.values():
        acc.sort(key=lambda g: (g["time"], g["row"]))
        cur: list[dict] = []
        for g in acc:
            if cur and g[col] - cur[-1][col] > thr:
                episodes.append(cur)
                cur = []
            cur.append(g)
        episodes.append(cur)
    out = []
    for ep in episodes:
        s0s = [g["offset"] // seg for g in ep]
        s1s = [(g["offset"] + g["size"] - 1) // seg for g in ep]
        cached: set[int] = set()
        ios = io_segs = 0
        for a, b in zip(s0s, s1s, strict=True):
            missing = [s for s in range(a, b + 1) if s not in cached]
            if missing:
                lo, hi = missing[0], missing[-1]
                ios += 1
                io_segs += hi - lo + 1
                cached |= set(range(lo, hi + 1))
        start, end = min(s0s), max(s1s)
        size = end - start + 1
        get_segs = sum(b - a + 1 for a, b in zip(s0s, s1s, strict=True))
        dt_nc = len(ep) * UNITS.t_seek_s + get_segs * seg_time
        dt_range = 1 * UNITS.t_seek_s + size * seg_time
        dt_replay = ios * UNITS.t_seek_s + io_segs * seg_time
        saved_pf = dt_nc - dt_range
        overfetch = (size - len(cached)) * seg_time
        when_benefit = (dt_replay - dt_range) - overfetch
        for pos, g in enumerate(ep):
            g["position"] = pos
        out.append({
            "key": ep[0]["key"], "first_row": ep[0]["row"], "first_time": ep[0]["time"],
            "last_time": ep[-1]["time"], "gets": len(ep), "range_start": start,
            "range_end": end, "size_segments": size, "get_segments": get_segs,
            "accessed_segments": len(cached), "replay_ios": ios, "replay_segments": io_segs,
            "dt_nocache_s": dt_nc, "dt_saved_prefetch_s": saved_pf,
            "dt_saved_noprefetch_s": dt_nc - dt_replay, "score": saved_pf / size,
            "when_label": int(when_benefit > eps), "members": ep,
        })
    out.sort(key=lambda e: e["first_row"])
    for i, e in enumerate(out):
        e["episode_id"] = i
    ranked = sorted(out, key=lambda e: (-e["score"], e["first_row"]))
    cum = 0
    for r, e in enumerate(ranked):
        cum += e["size_segments"]
        e["rank"] = r
        e["cum_segments"] = cum
        e["cum_write_rate_mbps"] = cum * mbps_per_segment
        e["admitted"] = e["score"] > 0 and e["cum_write_rate_mbps"] <= target
    labels = {}
    for e in out:
        for g in e["members"]:
            labels[g["row"]] = {
                "episode_id": e["episode_id"], "position": g["position"],
                "opt_label": (int(e["admitted"]) if g["position"] < k else -1),
                "admitted": e["admitted"], "range_start": e["range_start"],
                "range_end": e["range_end"], "when_label": e["when_label"],
            }
    arrays = []
    for i in range(len(rows)):
        lab = labels.get(i)
        if lab and lab["admitted"]:
            arrays.append((1, lab["range_start"], lab["range_end"]))
        else:
            arrays.append((0, -1, -1))
    for e in out:
        del e["members"]
    return {"episodes": out, "labels": labels, "arrays": arrays}
