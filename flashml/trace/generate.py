"""Synthetic Tectonic traces modelled on Baleen's Table 2 (FAST'24).

A preset is a set of *tenants*: populations of blocks that each live in one namespace, are
touched by a few users and share one reuse behaviour (`Tenant.kind`):

- `hot`: read-mostly blocks re-read in episodes. Per-block GET counts follow a Zipf
  rank-frequency law (count of the block of popularity rank r ~ r^-alpha, at least 2).
  Reads fall inside a per-block "hot range" of the block.
- `scan`: blocks read by large reads, nearly always once (one-hit wonders).
- `ingest`: blocks written sequentially by PUT_PERM in one or a few chunks, never read
  (PUT-only blocks).
- `temp`: blocks written once by PUT_TEMP, then read a few times by GET_TEMP within minutes.

Namespaces, users, pipelines and ops therefore carry real signal for an admission model: the
same namespace can hold a hot tenant and a scan tenant that differ only by user.

Time: each block gets a lifetime window somewhere in the trace; its accesses come in
episodes (a new episode starts with probability 1 - burst_prob, at a uniform time in the
window; inside an episode gaps are exponential with mean burst_gap_s). Windows wrap around
the end of the trace, so the load is stationary from the first second, as a steady state
(read blocks) would be. Writes (ingest/temp) never wrap, so a PUT_TEMP precedes its GETs.
This stationary "virtual" time is then warped by a diurnal intensity
1 + A cos(2 pi (hour - peak_hour) / 24), giving an hourly peak-to-mean near 1 + A.
Traces are several days long (default 3); as everywhere in flashml, the first day is the
warm-up (`DEFAULTS.warmup_s`).

Scale: a preset is a *sample* of a full node, like the artifact's traces. It holds a full-node
request rate (Table 2) and a sample ratio; accesses = rate x ratio/100 x seconds. With
`accesses=` given, the sample ratio is derived instead, so rates scaled back to a full node
stay at Table 2 whatever the size. The ratio is written into the header, where ingest reads it.

Output: Tectonic text, 201910 schema, written atomically; deterministic for a seed.

The presets (and the tables of them in docs/reference/synthetic-traces.md) are defined once,
in `flashml.trace.presets`.
"""

from __future__ import annotations

import time as _time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from tqdm import tqdm

from flashml.config import DAY_S, HOUR_S, OP_CODES, UNITS, KiB, MiB
from flashml.errors import UserError
from flashml.files import atomic_path
from flashml.trace.limits import MIN_SAMPLE_RATIO, check_accesses, check_days, check_seed
from flashml.trace.presets import (
    OBJECT_PRESETS,
    PRESETS,  # noqa: F401 - re-exported for bench/
    ObjectClass,
    ObjectPreset,
    Preset,
    Tenant,
    get_object_preset,
    get_preset,
)

EPOCH_S = 1_572_000_000.0  # 2019-10-25 10:40 UTC, the 201910 traces' month
HEADER = "#block_id io_offset io_size op_time op_name pipeline user_namespace user_name"
SIZE_ALIGN = 4 * KiB  # access sizes are multiples of this
OFFSET_ALIGN = 64 * KiB  # access offsets are multiples of this
EXTENT_ALIGN = UNITS.segment_bytes  # block extents and hot ranges are multiples of this
MIN_SIZE = 64 * KiB
MAX_PUTS_PER_BLOCK = 4
WRITE_CHUNK_ROWS = 1_000_000
KINDS = ("hot", "scan", "ingest", "temp")
OP_GET_TEMP, OP_GET_PERM, OP_PUT_TEMP, OP_PUT_PERM = (
    OP_CODES[n] for n in ("GET_TEMP", "GET_PERM", "PUT_TEMP", "PUT_PERM"))


# ----------------------------------------------------------------------------- helpers


def _align_down(x: np.ndarray, a: int) -> np.ndarray:
    return (x // a) * a


def _align_up(x: np.ndarray, a: int) -> np.ndarray:
    return -(-x // a) * a


def _loguniform(rng: np.random.Generator, lo: float, hi: float, n: int) -> np.ndarray:
    return np.exp(rng.uniform(np.log(lo), np.log(hi), n))


def _zipf_counts(n_keys: int, target: int, alpha: float, min_count: int = 2) -> np.ndarray:
    """Counts by popularity rank, max(min_count, round(s * r^-alpha)), with s chosen so the
    sum is as close to `target` as the rounding allows."""
    r = np.arange(1, n_keys + 1, dtype=np.float64) ** -alpha

    def total(s: float) -> int:
        return int(np.maximum(min_count, np.rint(s * r)).sum())

    lo, hi = 0.0, float(max(target, 1))
    while total(hi) < target:
        hi *= 2.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if total(mid) < target else (lo, mid)
    return np.maximum(min_count, np.rint(hi * r)).astype(np.int64)


def _block_counts(t: Tenant, n_acc: int, rng: np.random.Generator) -> np.ndarray:
    """Accesses per block of one tenant (about n_acc in total)."""
    if t.kind == "hot":
        n_keys = max(1, int(round(n_acc / t.mean_count)))
        counts = _zipf_counts(n_keys, n_acc, t.zipf_alpha)
        counts[0] = max(counts[0] + n_acc - int(counts.sum()), 1)  # exact total
        return rng.permutation(counts)
    per_key = t.mean_count + (1.0 if t.kind == "temp" else 0.0)
    n_keys = max(1, int(round(n_acc / per_key)))
    if t.kind == "temp":
        return 1 + rng.geometric(1.0 / max(t.mean_count, 1.0), n_keys)
    counts = rng.geometric(1.0 / max(t.mean_count, 1.0), n_keys)
    if t.kind == "ingest":
        counts = np.minimum(counts, MAX_PUTS_PER_BLOCK)
    return counts


@dataclass
class _Accesses:
    key: np.ndarray  # global block index
    vtime: np.ndarray  # stationary ("virtual") time in [0, duration)
    offset: np.ndarray
    size: np.ndarray
    op: np.ndarray
    user: np.ndarray
    namespace: np.ndarray
    pipeline: np.ndarray


def _times(t: Tenant, counts: np.ndarray, key: np.ndarray, pos: np.ndarray, dur: float,
           rng: np.random.Generator) -> np.ndarray:
    n = key.size
    ordered = t.kind in ("ingest", "temp")
    if ordered:
        is_start = pos == 0
    else:
        is_start = (pos == 0) | (rng.random(n) >= t.burst_prob)
    gaps = np.where(is_start, 0.0, rng.exponential(t.burst_gap_s, n))
    cs = np.cumsum(gaps)
    ep = np.cumsum(is_start) - 1
    elapsed = cs - cs[np.flatnonzero(is_start)][ep]
    n_keys = counts.size
    if ordered:
        span = np.zeros(n_keys)
        np.maximum.at(span, key, elapsed)
        start = rng.random(n_keys) * np.maximum(dur - span, 0.0)
        return np.minimum(start[key] + elapsed, np.nextafter(dur, 0.0))
    episodes = np.bincount(key[is_start], minlength=n_keys)
    life = np.minimum(np.maximum(_loguniform(rng, *t.lifetime_s, n_keys),
                                 episodes * t.episode_spacing_s), dur)
    key_start = rng.random(n_keys) * dur
    ep_key = key[is_start]
    ep_start = key_start[ep_key] + rng.random(ep_key.size) * life[ep_key]
    return np.mod(ep_start[ep] + elapsed, dur)


def _extents(t: Tenant, n_keys: int, rng: np.random.Generator) -> np.ndarray:
    block = UNITS.block_bytes
    lo, hi = t.extent_mib
    e = _align_up((rng.uniform(lo, hi, n_keys) * MiB).astype(np.int64), EXTENT_ALIGN)
    e = np.where(rng.random(n_keys) < t.full_extent_prob, block, e)
    return np.clip(e, EXTENT_ALIGN, block)


def _get_ranges(t: Tenant, n: int, rng: np.random.Generator, lo_b: np.ndarray,
                len_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Offsets and sizes of GETs inside [lo_b, lo_b + len_b) (per access)."""
    size = (rng.lognormal(np.log(t.size_median_mib * MiB), t.size_sigma, n)).astype(np.int64)
    size = np.minimum(np.maximum(_align_up(size, SIZE_ALIGN), MIN_SIZE), len_b)
    slack = len_b - size
    off = lo_b + _align_down((rng.random(n) * (slack + 1)).astype(np.int64), OFFSET_ALIGN)
    return off, size


def _tenant_accesses(t: Tenant, n_acc: int, key_base: int, dur: float,
                     rng: np.random.Generator) -> _Accesses:
    counts = _block_counts(t, n_acc, rng)
    n_keys = counts.size
    total = int(counts.sum())
    key = np.repeat(np.arange(n_keys), counts)
    pos = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
    vtime = _times(t, counts, key, pos, dur, rng)

    extent = _extents(t, n_keys, rng)
    if t.kind == "hot":
        frac = rng.uniform(*t.hot_range, n_keys)
        rlen = np.clip(_align_up((frac * extent).astype(np.int64), EXTENT_ALIGN),
                       EXTENT_ALIGN, extent)
        rlo = _align_down((rng.random(n_keys) * (extent - rlen + 1)).astype(np.int64),
                          EXTENT_ALIGN)
    else:
        rlen, rlo = extent, np.zeros(n_keys, dtype=np.int64)
    offset, size = _get_ranges(t, total, rng, rlo[key], rlen[key])

    if t.kind == "ingest":  # c PUTs tile the extent in order
        c, e = counts[key], extent[key]
        lo = _align_down(e * pos // c, OFFSET_ALIGN)
        hi = np.where(pos + 1 == c, e, _align_down(e * (pos + 1) // c, OFFSET_ALIGN))
        offset, size = lo, hi - lo
        op = np.full(total, OP_PUT_PERM, dtype=np.uint8)
    elif t.kind == "temp":
        first = pos == 0
        offset = np.where(first, 0, offset)
        size = np.where(first, extent[key], size)
        op = np.where(first, OP_PUT_TEMP, OP_GET_TEMP).astype(np.uint8)
    else:
        op = np.where(rng.random(total) < t.get_temp_prob, OP_GET_TEMP, OP_GET_PERM)
        op = op.astype(np.uint8)

    users = np.asarray(t.users, dtype=np.uint32)
    w = 1.0 / np.arange(1, users.size + 1)
    user = rng.choice(users, size=n_keys, p=w / w.sum())
    return _Accesses(
        key=key + key_base, vtime=vtime, offset=offset.astype(np.int64),
        size=size.astype(np.int64), op=op, user=user[key],
        namespace=np.full(total, t.namespace, dtype=np.uint32),
        pipeline=np.full(total, t.pipeline, dtype=np.uint32),
    )


def _diurnal_warp(v: np.ndarray, dur: float, p: Preset | ObjectPreset) -> np.ndarray:
    """Map stationary time to diurnal time: the inverse of the normalised cumulative
    intensity of 1 + A cos(2 pi (t_utc - peak) / day)."""
    grid = np.linspace(0.0, dur, max(2, int(dur / 60.0) + 1))
    phase0 = 2.0 * np.pi * (EPOCH_S / DAY_S - p.peak_hour_utc / 24.0)
    w = 2.0 * np.pi / DAY_S
    cum = grid + p.diurnal_amplitude / w * (np.sin(phase0 + w * grid) - np.sin(phase0))
    cum *= dur / cum[-1]
    return np.interp(v, cum, grid)


def _block_ids(idx: np.ndarray, seed: int) -> np.ndarray:
    """Distinct, scrambled block ids: an odd multiplier is a bijection modulo 2^40."""
    mult = np.uint64(0x9E3779B97F4A7C15)
    salt = np.uint64((seed * 0x2545F4914F6CDD1D + 12345) % (1 << 40))
    mask = np.uint64((1 << 40) - 1)
    return ((idx.astype(np.uint64) * mult + salt) & mask) + np.uint64(1)


def _resolve_size(p: Preset, accesses: int | None, days: float | None) -> tuple[int, float,
                                                                              float]:
    """(accesses, days, sample_ratio) from the preset and the overrides."""
    d = check_days(days) if days is not None else p.days
    if accesses is None:
        ratio = p.sample_ratio
        n = p.default_accesses(d)
    else:
        n = check_accesses(accesses)
        ratio = 100.0 * n / (p.full_node_rate_per_s * d * DAY_S)
        if ratio > 100.0:
            raise UserError(
                f"--accesses {n:,} in --days {d:g} exceed the full node's "
                f"{p.full_node_rate_per_s} req/s (sample ratio {ratio:.3g}% > 100%); ask for "
                "more days or fewer accesses")
        if ratio < MIN_SAMPLE_RATIO:
            raise UserError(f"--accesses {n:,} in --days {d:g} are a sample ratio of {ratio:g}%, "
                            f"below the smallest, {MIN_SAMPLE_RATIO:g}%; ask for more "
                            "accesses or fewer days")
    check_accesses(n, f"accesses ({d:g} days of preset {p.name})")
    return n, d, ratio


def build_accesses(p: Preset, seed: int, n: int, dur: float) -> pl.DataFrame:
    """The trace as a DataFrame in Tectonic column order, sorted by time; exactly n rows."""
    rng = np.random.default_rng([seed, 0xF1A5])
    shares = np.array([t.access_share for t in p.tenants])
    targets = shares / shares.sum() * n
    # Tenants other than `hot` first; the hot tenants then share exactly what is left.
    rest = [i for i, t in enumerate(p.tenants) if t.kind != "hot"]
    hot = [i for i, t in enumerate(p.tenants) if t.kind == "hot"]
    parts: list[_Accesses] = []
    key_base = 0
    for k, i in enumerate(rest + hot):
        target = int(round(targets[i]))
        if p.tenants[i].kind == "hot":
            left = n - sum(a.key.size for a in parts)
            pending = [j for j in hot if j not in (rest + hot)[:k]]
            target = left if len(pending) == 1 else int(round(
                left * targets[i] / targets[pending].sum()))
        part = _tenant_accesses(p.tenants[i], max(target, 1), key_base, dur, rng)
        key_base = int(part.key.max()) + 1
        parts.append(part)
    fields = _Accesses.__dataclass_fields__
    cat = {f: np.concatenate([getattr(a, f) for a in parts])[:n] for f in fields}
    t = np.round(EPOCH_S + _diurnal_warp(cat["vtime"], dur, p), 5)
    order = np.argsort(t, kind="stable")
    return pl.DataFrame({
        "block_id": _block_ids(cat["key"][order], seed),
        "io_offset": cat["offset"][order],
        "io_size": cat["size"][order],
        "op_time": t[order],
        "op_name": cat["op"][order],
        "pipeline": cat["pipeline"][order],
        "user_namespace": cat["namespace"][order],
        "user_name": cat["user"][order],
    })


def _write(df: pl.DataFrame, out: Path, header2: str, progress: bool, desc: str) -> None:
    with atomic_path(out) as tmp, open(tmp, "wb") as f:
        f.write(f"{HEADER}\n{header2}\n".encode())
        with tqdm(total=df.height, desc=desc, unit="acc", unit_scale=True,
                  disable=not progress) as bar:
            for start in range(0, df.height, WRITE_CHUNK_ROWS):
                chunk = df.slice(start, WRITE_CHUNK_ROWS)
                chunk.write_csv(f, include_header=False, separator=" ", float_precision=5,
                                quote_style="never")
                bar.update(chunk.height)


def generate_trace(preset: str, seed: int, out: Path, *, accesses: int | None = None,
                   days: float | None = None, progress: bool = True) -> dict[str, Any]:
    """Write a synthetic Tectonic (201910 schema) trace of `preset` to `out`, atomically;
    for an object-trace preset (`OBJECT_PRESETS`: cdn-like, kv-like) an `objects-csv`
    trace instead (`generate_objects`).

    The same (preset, seed, accesses, days) always gives the same bytes. `accesses` and
    `days` override the preset's size; with `accesses` the sample ratio is derived so that
    rates scaled to a full node match the preset (module docstring). Returns a summary:
    path, preset, seed, accesses, keys, days, duration_s, sample_ratio, seconds.
    """
    if preset in OBJECT_PRESETS:
        return generate_objects(preset, seed, out, accesses=accesses, days=days,
                                progress=progress)
    check_seed(seed)
    p = get_preset(preset)
    t0 = _time.perf_counter()
    n, d, ratio = _resolve_size(p, accesses, days)
    df = build_accesses(p, seed, n, d * DAY_S)
    header2 = (f"# flashml: preset={p.name} seed={seed} sample_ratio={ratio:.10g} "
               f"accesses={n} days={d:g} epoch={EPOCH_S:.0f}")
    _write(df, Path(out), header2, progress, f"generate {p.name}")
    secs = _time.perf_counter() - t0
    return {
        "path": str(out), "preset": p.name, "seed": seed, "accesses": n,
        "keys": int(df["block_id"].n_unique()), "days": d, "duration_s": d * DAY_S,
        "sample_ratio": ratio, "seconds": secs, "accesses_per_s": n / secs if secs else None,
    }


# ------------------------------------------------------------------- object-trace presets
#
# Whole-object request streams (time, key, size) for object caches (CDN, key-value), written
# as `objects-csv` (flashml/trace/objects.py). Per class (presets.ObjectClass): a catalogue
# of requests / mean_requests objects ranked by popularity; each request picks its class by
# request share and a rank from the Zipf law P(r) ~ r^-alpha (independent draws, the
# independent reference model); request times are a diurnally warped Poisson process. Every
# `shift_every_h` hours of trace time the popularity shifts: `shift_fraction` of the hot set
# (the top `hot_fraction` of ranks) is given to new objects, and the objects they displace
# take random ranks of the cold tail, whose objects leave the catalogue. An object's size is
# drawn once (log-normal, clipped) and kept on every request.

OBJECTS_HEADER = "time,key,size"
OBJECT_TIME_DECIMALS = 3


def _object_class_requests(c: ObjectClass, p: ObjectPreset, epoch: np.ndarray, n_epochs: int,
                           n_class: int, id_base: int,
                           rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Global object ids of one class's requests (given each request's shift epoch), and the
    sizes of every id the class used (index id - id_base)."""
    n_cat = max(1, int(round(n_class / c.mean_requests)))
    w = np.arange(1, n_cat + 1, dtype=np.float64) ** -c.zipf_alpha
    cdf = np.cumsum(w)
    cdf /= cdf[-1]
    rank = np.minimum(np.searchsorted(cdf, rng.random(epoch.size), side="right"), n_cat - 1)
    hot = max(1, int(round(p.hot_fraction * n_cat)))
    k = min(int(round(p.shift_fraction * hot)), n_cat - hot)
    perm = np.arange(n_cat, dtype=np.int64)  # rank -> class-local object id
    ids = np.empty(epoch.size, dtype=np.int64)
    next_id = n_cat
    bounds = np.searchsorted(epoch, np.arange(n_epochs + 1))  # epoch is sorted
    for e in range(n_epochs):
        if e > 0 and k > 0:
            new_hot = rng.choice(hot, size=k, replace=False)
            to_tail = hot + rng.choice(n_cat - hot, size=k, replace=False)
            perm[to_tail] = perm[new_hot]
            perm[new_hot] = next_id + np.arange(k)
            next_id += k
        lo, hi = bounds[e], bounds[e + 1]
        ids[lo:hi] = perm[rank[lo:hi]]
    lo_s, hi_s = c.size_range
    sizes = rng.lognormal(np.log(c.size_median), c.size_sigma, next_id)
    sizes = np.clip(np.rint(sizes), lo_s, hi_s).astype(np.int64)
    return ids + id_base, sizes


def build_object_requests(p: ObjectPreset, seed: int, n: int, dur: float) -> pl.DataFrame:
    """The object trace as a DataFrame (time f64 Unix seconds, key u64, size u64), sorted by
    time; exactly n rows."""
    rng = np.random.default_rng([seed, 0x0B1EC7])
    vt = np.sort(rng.random(n)) * dur
    t = _diurnal_warp(vt, dur, p)
    shift_s = p.shift_every_h * HOUR_S
    n_epochs = max(1, int(np.ceil(dur / shift_s)))
    epoch = np.minimum((t // shift_s).astype(np.int64), n_epochs - 1)
    shares = np.array([c.request_share for c in p.classes])
    cls = rng.choice(len(p.classes), size=n, p=shares / shares.sum())
    ids = np.empty(n, dtype=np.int64)
    sizes: list[np.ndarray] = []
    base = 0
    for i, c in enumerate(p.classes):
        sel = np.flatnonzero(cls == i)
        got, s = _object_class_requests(c, p, epoch[sel], n_epochs, sel.size, base, rng)
        ids[sel] = got
        sizes.append(s)
        base += s.size
    size_of = np.concatenate(sizes)
    return pl.DataFrame({
        "time": np.round(EPOCH_S + t, OBJECT_TIME_DECIMALS),
        "key": _block_ids(ids, seed),
        "size": size_of[ids].astype(np.uint64),
    })


def _resolve_object_size(p: ObjectPreset, accesses: int | None,
                         days: float | None) -> tuple[int, float]:
    """(requests, days) from the preset and the overrides."""
    d = check_days(days) if days is not None else p.days
    n = p.default_accesses(d) if accesses is None else check_accesses(accesses)
    check_accesses(n, f"requests ({d:g} days of preset {p.name})")
    return n, d


def _write_objects(df: pl.DataFrame, out: Path, progress: bool, desc: str) -> None:
    with atomic_path(out) as tmp, open(tmp, "wb") as f:
        f.write(f"{OBJECTS_HEADER}\n".encode())
        with tqdm(total=df.height, desc=desc, unit="req", unit_scale=True,
                  disable=not progress) as bar:
            for start in range(0, df.height, WRITE_CHUNK_ROWS):
                chunk = df.slice(start, WRITE_CHUNK_ROWS)
                chunk.write_csv(f, include_header=False, float_precision=OBJECT_TIME_DECIMALS,
                                quote_style="never")
                bar.update(chunk.height)


def generate_objects(preset: str, seed: int, out: Path, *, accesses: int | None = None,
                     days: float | None = None, progress: bool = True) -> dict[str, Any]:
    """Write a synthetic object trace of object-trace preset `preset` to `out` as
    `objects-csv` (header `time,key,size`; Unix seconds with 3 decimals, integer keys,
    bytes), atomically. The same (preset, seed, accesses, days) always gives the same bytes;
    `accesses` (requests) and `days` override the preset's size (with `accesses` alone the
    request rate follows). Returns a summary like `generate_trace`'s (format objects-csv,
    keys = distinct objects, bytes = their total size)."""
    p = get_object_preset(preset)
    check_seed(seed)
    t0 = _time.perf_counter()
    n, d = _resolve_object_size(p, accesses, days)
    df = build_object_requests(p, seed, n, d * DAY_S)
    _write_objects(df, Path(out), progress, f"generate {p.name}")
    secs = _time.perf_counter() - t0
    uniq = df.unique("key")
    return {
        "path": str(out), "preset": p.name, "format": "objects-csv", "seed": seed,
        "accesses": n, "keys": uniq.height, "bytes": int(uniq["size"].sum()), "days": d,
        "duration_s": d * DAY_S, "seconds": secs,
        "accesses_per_s": n / secs if secs else None,
    }
