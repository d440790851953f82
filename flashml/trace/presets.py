"""The synthetic-trace presets: one definition, modelled on Baleen's Table 2 (FAST'24) for the
block traces (`PRESETS`), and on CDN and key-value caches for the whole-object traces
(`OBJECT_PRESETS`: cdn-like, kv-like; MAT).

`generate_trace` (trace/generate.py) builds traces from them, and the preset sections of
docs/reference/synthetic-traces.md are rendered from them by `markdown` and `object_markdown`
(with the measured statistics of each preset's default trace, seed 0); tests/kernel/test_generate.py
checks that the page says exactly what they render. To refresh the page after changing a
preset:

    python -m flashml.trace.presets     # prints every preset's section
"""

from __future__ import annotations

import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flashml.config import BINARY_UNITS, DAY_S, HOUR_S, UNITS, KiB, MiB
from flashml.errors import UserError


@dataclass(frozen=True)
class Tenant:
    """One population of blocks with one reuse behaviour (trace/generate.py's docstring)."""

    name: str
    """Label, used in docs only."""
    kind: str
    """`hot`, `scan`, `ingest` or `temp`."""
    namespace: int
    """`user_namespace` of every access."""
    users: tuple[int, ...]
    """`user_name` ids; each block gets one, user i with weight 1/(i+1)."""
    pipeline: int
    """`pipeline` field of every access."""
    access_share: float
    """Fraction of the trace's accesses (shares of a preset sum to 1)."""
    mean_count: float
    """hot: mean GETs per block; scan: mean GETs per block (1 = every block read once);
    ingest: mean PUTs per block; temp: mean GETs after the block's one PUT."""
    size_median_mib: float = 2.0
    """Median GET size, MiB (log-normal, clipped to [64 KiB, hot range])."""
    size_sigma: float = 0.8
    """Log-normal sigma of GET sizes."""
    extent_mib: tuple[float, float] = (2.0, 8.0)
    """A block's written extent (its size), uniform in this range, MiB ..."""
    full_extent_prob: float = 0.5
    """... except with this probability it is the whole block (8 MiB)."""
    hot_range: tuple[float, float] = (1.0, 1.0)
    """hot: the fraction of the extent a block's reads stay inside, uniform in this range."""
    get_temp_prob: float = 0.2
    """hot/scan: probability a GET is GET_TEMP (op 1) rather than GET_PERM (op 2)."""
    burst_prob: float = 0.7
    """Probability that an access continues the current episode rather than starting one."""
    burst_gap_s: float = 60.0
    """Mean gap between accesses inside an episode, seconds."""
    lifetime_s: tuple[float, float] = (HOUR_S, 3 * DAY_S)
    """A block's episodes start inside a window of this length (log-uniform), seconds ..."""
    episode_spacing_s: float = 600.0
    """... but at least this many seconds per episode, so popular blocks spread out."""
    zipf_alpha: float = 0.8
    """hot: exponent of the rank-frequency law."""


@dataclass(frozen=True)
class Preset:
    """A synthetic workload: full-node scale, diurnal shape and its tenants."""

    name: str
    description: str
    full_node_rate_per_s: float
    """Requests per second of the full node (Baleen Table 2, "Request Rate")."""
    sample_ratio: float
    """Percent of the full node's blocks the default trace samples."""
    days: float
    """Default trace length in days (the first is warm-up)."""
    diurnal_amplitude: float
    """A in the intensity 1 + A cos(...): hourly peak-to-mean about 1 + A. Must be < 1."""
    peak_hour_utc: float
    """Hour of the day (UTC) of the diurnal peak."""
    tenants: tuple[Tenant, ...]
    table2: dict[str, float] = field(default_factory=dict)
    """The Baleen Table 2 row the preset imitates (stats keys -> value), for reference."""
    expected: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Documented ranges of `compute_stats` on a default-size trace (tests check them)."""

    def default_accesses(self, days: float | None = None) -> int:
        """Accesses of a trace of `days` (default `self.days`) at the preset's sample ratio."""
        d = self.days if days is None else days
        return int(round(self.full_node_rate_per_s * self.sample_ratio / 100.0 * d * DAY_S))


#: Every preset, by name.
PRESETS: dict[str, Preset] = {p.name: p for p in (
    Preset(
        name="region1-like",
        description="Data warehouse, 2019 (Baleen Region1): a Zipf hot set re-read by "
                    "interactive users, batch scans, ingest writes and short-lived temp data.",
        full_node_rate_per_s=244.0,
        sample_ratio=0.1,
        days=3.0,
        diurnal_amplitude=0.75,
        peak_hour_utc=15.0,
        tenants=(
            Tenant("warehouse-interactive", "hot", namespace=1, users=(1, 2, 3), pipeline=24,
                   access_share=0.60, mean_count=32.0, size_median_mib=3.4, size_sigma=0.6,
                   extent_mib=(3.0, 8.0), full_extent_prob=0.45, hot_range=(0.6, 1.0),
                   get_temp_prob=0.1, burst_prob=0.75, burst_gap_s=45.0,
                   lifetime_s=(2 * HOUR_S, 3 * DAY_S)),
            Tenant("warehouse-etl", "hot", namespace=2, users=(4, 5), pipeline=31,
                   access_share=0.19, mean_count=11.0, size_median_mib=2.8, size_sigma=0.7,
                   extent_mib=(2.0, 8.0), full_extent_prob=0.3, hot_range=(0.5, 1.0),
                   get_temp_prob=0.4, burst_prob=0.6, burst_gap_s=120.0,
                   lifetime_s=(HOUR_S, DAY_S)),
            Tenant("warehouse-batch-scan", "scan", namespace=1, users=(6, 7), pipeline=24,
                   access_share=0.04, mean_count=1.02, size_median_mib=4.5, size_sigma=0.5,
                   extent_mib=(3.0, 8.0), full_extent_prob=0.5, get_temp_prob=0.3),
            Tenant("ingest", "ingest", namespace=3, users=(8, 9), pipeline=7,
                   access_share=0.105, mean_count=1.3, extent_mib=(1.0, 8.0),
                   full_extent_prob=0.4, burst_gap_s=5.0),
            Tenant("shuffle-temp", "temp", namespace=4, users=(10, 11), pipeline=12,
                   access_share=0.065, mean_count=2.0, size_median_mib=1.5, size_sigma=0.8,
                   extent_mib=(1.0, 8.0), full_extent_prob=0.3, burst_gap_s=300.0),
        ),
        table2={"request_rate_per_s": 244, "avg_block_size_mib": 5.70, "access_size_mib": 3.41,
                "compulsory_miss_rate": 0.18, "one_hit_wonder_rate": 0.54,
                "put_only_block_rate": 0.46, "put_fraction": 0.13,
                "admit_all_write_rate_mbps": 316},
        expected={"compulsory_miss_rate": (0.15, 0.21), "one_hit_wonder_rate": (0.48, 0.60),
                  "put_only_block_rate": (0.40, 0.52), "put_fraction": (0.11, 0.15),
                  "access_size_mib": (2.9, 3.9), "avg_block_size_mib": (5.0, 6.6),
                  "request_rate_per_s": (237.0, 251.0), "admit_all_write_rate_mbps": (85, 115),
                  "peak_to_mean_hourly": (1.7, 2.3)},
    ),
    Preset(
        name="region2-like",
        description="Data warehouse, 2019 (Baleen Region2): scan-dominated, mostly "
                    "one-hit wonders and write-only blocks around a small, very hot set.",
        full_node_rate_per_s=106.0,
        sample_ratio=0.25,
        days=3.0,
        diurnal_amplitude=0.75,
        peak_hour_utc=14.0,
        tenants=(
            Tenant("dashboards", "hot", namespace=1, users=(1, 2), pipeline=24,
                   access_share=0.63, mean_count=13.0, size_median_mib=2.2, size_sigma=0.8,
                   extent_mib=(2.0, 8.0), full_extent_prob=0.3, hot_range=(0.3, 1.0),
                   get_temp_prob=0.1, burst_prob=0.7, burst_gap_s=60.0,
                   lifetime_s=(HOUR_S, 2 * DAY_S)),
            Tenant("adhoc-scan", "scan", namespace=1, users=(3, 4, 5), pipeline=24,
                   access_share=0.12, mean_count=1.0, size_median_mib=3.5, size_sigma=0.6,
                   extent_mib=(2.0, 8.0), full_extent_prob=0.4, get_temp_prob=0.3),
            Tenant("backfill-scan", "scan", namespace=5, users=(6,), pipeline=40,
                   access_share=0.09, mean_count=1.0, size_median_mib=2.5, size_sigma=0.6,
                   extent_mib=(1.0, 8.0), full_extent_prob=0.3, get_temp_prob=0.6),
            Tenant("ingest", "ingest", namespace=3, users=(8, 9), pipeline=7,
                   access_share=0.13, mean_count=1.05, extent_mib=(1.0, 8.0),
                   full_extent_prob=0.3, burst_gap_s=5.0),
            Tenant("shuffle-temp", "temp", namespace=4, users=(10,), pipeline=12,
                   access_share=0.03, mean_count=2.0, size_median_mib=1.5, size_sigma=0.8,
                   extent_mib=(1.0, 8.0), full_extent_prob=0.3, burst_gap_s=300.0),
        ),
        table2={"request_rate_per_s": 106, "avg_block_size_mib": 5.07, "access_size_mib": 2.85,
                "compulsory_miss_rate": 0.39, "one_hit_wonder_rate": 0.83,
                "put_only_block_rate": 0.81, "put_fraction": 0.14,
                "admit_all_write_rate_mbps": 121},
        expected={"compulsory_miss_rate": (0.34, 0.44), "one_hit_wonder_rate": (0.77, 0.89),
                  "put_only_block_rate": (0.27, 0.40), "put_fraction": (0.12, 0.16),
                  "access_size_mib": (2.3, 3.4), "avg_block_size_mib": (4.3, 6.0),
                  "request_rate_per_s": (103.0, 109.0), "admit_all_write_rate_mbps": (80, 110),
                  "peak_to_mean_hourly": (1.7, 2.3)},
    ),
    Preset(
        name="region3-like",
        description="Data warehouse, 2019 (Baleen Region3): big blocks, smaller reads "
                    "concentrated on narrow hot ranges; low admit-all write rate.",
        full_node_rate_per_s=139.0,
        sample_ratio=0.2,
        days=3.0,
        diurnal_amplitude=0.75,
        peak_hour_utc=16.0,
        tenants=(
            Tenant("warehouse-interactive", "hot", namespace=1, users=(1, 2, 3), pipeline=24,
                   access_share=0.62, mean_count=22.0, size_median_mib=1.9, size_sigma=0.7,
                   extent_mib=(4.0, 8.0), full_extent_prob=0.7, hot_range=(0.3, 0.7),
                   get_temp_prob=0.1, burst_prob=0.75, burst_gap_s=45.0,
                   lifetime_s=(2 * HOUR_S, 3 * DAY_S)),
            Tenant("warehouse-etl", "hot", namespace=2, users=(4, 5), pipeline=31,
                   access_share=0.14, mean_count=10.0, size_median_mib=1.6, size_sigma=0.7,
                   extent_mib=(4.0, 8.0), full_extent_prob=0.5, hot_range=(0.25, 0.6),
                   get_temp_prob=0.4, burst_prob=0.6, burst_gap_s=120.0,
                   lifetime_s=(HOUR_S, DAY_S)),
            Tenant("warehouse-batch-scan", "scan", namespace=1, users=(6, 7), pipeline=24,
                   access_share=0.04, mean_count=1.02, size_median_mib=2.0, size_sigma=0.6,
                   extent_mib=(4.0, 8.0), full_extent_prob=0.6, get_temp_prob=0.3),
            Tenant("ingest", "ingest", namespace=3, users=(8, 9), pipeline=7,
                   access_share=0.14, mean_count=1.6, extent_mib=(5.0, 8.0),
                   full_extent_prob=0.8, burst_gap_s=5.0),
            Tenant("shuffle-temp", "temp", namespace=4, users=(10, 11), pipeline=12,
                   access_share=0.06, mean_count=2.0, size_median_mib=1.2, size_sigma=0.8,
                   extent_mib=(2.0, 8.0), full_extent_prob=0.4, burst_gap_s=300.0),
        ),
        table2={"request_rate_per_s": 139, "avg_block_size_mib": 6.71, "access_size_mib": 2.42,
                "compulsory_miss_rate": 0.19, "one_hit_wonder_rate": 0.48,
                "put_only_block_rate": 0.46, "put_fraction": 0.16,
                "admit_all_write_rate_mbps": 45},
        expected={"compulsory_miss_rate": (0.16, 0.22), "one_hit_wonder_rate": (0.42, 0.54),
                  "put_only_block_rate": (0.40, 0.52), "put_fraction": (0.14, 0.18),
                  "access_size_mib": (2.0, 2.9), "avg_block_size_mib": (5.8, 7.6),
                  "request_rate_per_s": (135.0, 143.0), "admit_all_write_rate_mbps": (34, 48),
                  "peak_to_mean_hourly": (1.7, 2.3)},
    ),
)}



# --- object-trace presets -----------------------------------------------------------------------


@dataclass(frozen=True)
class ObjectClass:
    """One population of whole objects with one popularity law and one size law
    (trace/generate.py's `build_object_requests`)."""

    name: str
    """Label, used in docs only."""
    request_share: float
    """Fraction of the trace's requests (shares of a preset sum to 1)."""
    mean_requests: float
    """Requests per catalogue object: the class's catalogue holds (its requests / this)
    objects. Objects the Zipf draw never picks do not appear, so the measured requests per
    object seen are higher."""
    zipf_alpha: float
    """Exponent of the rank-popularity law, P(rank r) ~ r^-alpha over the catalogue."""
    size_median: int
    """Median object size, bytes (log-normal); an object keeps its size on every request."""
    size_sigma: float
    """Log-normal sigma of object sizes."""
    size_range: tuple[int, int]
    """Object sizes are clipped to this range, bytes."""


@dataclass(frozen=True)
class ObjectPreset:
    """A synthetic whole-object workload (CDN, key-value): request rate, diurnal shape,
    popularity shifts and its classes. Written as an `objects-csv` trace (time,key,size)."""

    name: str
    description: str
    request_rate_per_s: float
    """Mean requests per second of the default trace."""
    hours: float
    """Default trace length in hours."""
    diurnal_amplitude: float
    """A in the intensity 1 + A cos(...) (as `Preset`). Must be < 1."""
    peak_hour_utc: float
    """Hour of the day (UTC) of the diurnal peak."""
    shift_every_h: float
    """Popularity shifts every this many hours of trace time ..."""
    hot_fraction: float
    """... in the hot set, the top ranks holding this fraction of each class's catalogue ..."""
    shift_fraction: float
    """... of which this fraction is replaced by new objects at each shift (the objects they
    replace drop to random ranks of the cold tail, whose objects leave the catalogue)."""
    classes: tuple[ObjectClass, ...]
    expected: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Documented ranges of `object_stats` on a default-size trace (tests check them)."""

    @property
    def days(self) -> float:
        """Default length in days (the unit `generate_trace`'s `days=` override takes)."""
        return self.hours / 24.0

    def default_accesses(self, days: float | None = None) -> int:
        """Requests of a trace of `days` (default `self.days`) at the preset's rate."""
        d = self.days if days is None else days
        return int(round(self.request_rate_per_s * d * DAY_S))


#: The object-trace presets, by name (`flashml trace generate --preset NAME` writes them as
#: `objects-csv`; `flashml sim objects`, `flashml mat run` and bench/bench_mat.py read them).
OBJECT_PRESETS: dict[str, ObjectPreset] = {p.name: p for p in (
    ObjectPreset(
        name="cdn-like",
        description="CDN edge cache: size-varied objects (web assets of KBs, video segments "
                    "of about a MiB, downloads of MiBs to tens of MiBs), Zipf popularity "
                    "0.8-0.95 with small objects the most popular, many one-hit wonders, "
                    "and new content displacing part of the hot set every 4 hours.",
        request_rate_per_s=12.0,
        hours=24.0,
        diurnal_amplitude=0.5,
        peak_hour_utc=20.0,
        shift_every_h=4.0,
        hot_fraction=0.02,
        shift_fraction=0.25,
        classes=(
            ObjectClass("web-assets", request_share=0.55, mean_requests=4.0, zipf_alpha=0.95,
                        size_median=24 * KiB, size_sigma=1.2, size_range=(512, 4 * MiB)),
            ObjectClass("video-segments", request_share=0.35, mean_requests=3.0,
                        zipf_alpha=0.85, size_median=768 * KiB, size_sigma=0.5,
                        size_range=(64 * KiB, 8 * MiB)),
            ObjectClass("downloads", request_share=0.10, mean_requests=1.5, zipf_alpha=0.8,
                        size_median=6 * MiB, size_sigma=1.0,
                        size_range=(256 * KiB, 64 * MiB)),
        ),
        expected={"compulsory_miss_ratio": (0.18, 0.23), "one_hit_wonder_rate": (0.42, 0.50),
                  "size_p10": (5 * KiB, 20 * KiB), "size_p50": (350 * KiB, 650 * KiB),
                  "size_p99": (20 * MiB, 44 * MiB), "zipf_slope": (0.80, 0.95),
                  "top1pct_request_share": (0.36, 0.45), "request_rate_per_s": (11.9, 12.1),
                  "peak_to_mean_hourly": (1.3, 1.6), "hot_set_kept": (0.55, 0.80)},
    ),
    ObjectPreset(
        name="kv-like",
        description="In-memory key-value cache: small values (100 B to 10 KB), highly "
                    "skewed popularity (Zipf 1.0-1.2), and a hot set of which a fifth is "
                    "replaced every 3 hours.",
        request_rate_per_s=24.0,
        hours=12.0,
        diurnal_amplitude=0.3,
        peak_hour_utc=15.0,
        shift_every_h=3.0,
        hot_fraction=0.01,
        shift_fraction=0.2,
        classes=(
            ObjectClass("user-records", request_share=0.6, mean_requests=20.0,
                        zipf_alpha=1.1, size_median=400, size_sigma=0.6,
                        size_range=(100, 4 * KiB)),
            ObjectClass("timeline-fragments", request_share=0.3, mean_requests=8.0,
                        zipf_alpha=1.0, size_median=2 * KiB, size_sigma=0.7,
                        size_range=(256, 10_000)),
            ObjectClass("sessions", request_share=0.1, mean_requests=4.0, zipf_alpha=1.2,
                        size_median=150, size_sigma=0.3, size_range=(100, 1 * KiB)),
        ),
        expected={"compulsory_miss_ratio": (0.055, 0.072), "one_hit_wonder_rate": (0.28, 0.38),
                  "size_p10": (120, 200), "size_p50": (600, 800), "size_p99": (7 * KiB, 9.5 * KiB),
                  "zipf_slope": (0.95, 1.12), "top1pct_request_share": (0.58, 0.69),
                  "request_rate_per_s": (23.9, 24.1), "peak_to_mean_hourly": (1.03, 1.15),
                  "hot_set_kept": (0.62, 0.88)},
    ),
)}

#: Every preset name (block-trace presets first), for help texts and errors.
ALL_PRESETS: tuple[str, ...] = (*PRESETS, *OBJECT_PRESETS)


def get_preset(name: str) -> Preset:
    """The block-trace preset called `name`; a UserError naming the presets if there is none
    (or if `name` is an object-trace preset: those are `get_object_preset`'s)."""
    if name not in PRESETS:
        if name in OBJECT_PRESETS:
            raise UserError(f"preset {name!r} is an object-trace preset (objects-csv), not a "
                            f"block trace; block-trace presets: {', '.join(PRESETS)}")
        raise UserError(f"unknown preset {name!r}; presets: {', '.join(ALL_PRESETS)}")
    return PRESETS[name]


def get_object_preset(name: str) -> ObjectPreset:
    """The object-trace preset called `name`; a UserError naming the presets if none."""
    if name not in OBJECT_PRESETS:
        raise UserError(f"unknown object-trace preset {name!r}; object-trace presets: "
                        f"{', '.join(OBJECT_PRESETS)}")
    return OBJECT_PRESETS[name]


# --- docs/reference/synthetic-traces.md -----------------------------------------------------------

#: The statistics table of a preset's docs section: label, `compute_stats` key, format of
#: the numbers (None: a percentage). Ranges come from `Preset.expected`, the last column from
#: `Preset.table2`; a cell is empty where the preset has no value.
STAT_ROWS: tuple[tuple[str, str, str | None], ...] = (
    ("Request rate (/s, full node)", "request_rate_per_s", ".1f"),
    ("Avg block size (MiB)", "avg_block_size_mib", ".2f"),
    ("Access size (MiB)", "access_size_mib", ".2f"),
    ("Compulsory miss rate", "compulsory_miss_rate", None),
    ("One-hit-wonder rate", "one_hit_wonder_rate", None),
    ("PUT-only blocks", "put_only_block_rate", None),
    ("#PUT / #Acc", "put_fraction", None),
    ("Admit-all write rate (MB/s)", "admit_all_write_rate_mbps", ".1f"),
    ("Peak-to-mean (hourly)", "peak_to_mean_hourly", ".2f"),
    ("GET compulsory miss rate", "get_compulsory_miss_rate", None),
    ("GET one-hit-wonder rate", "get_one_hit_wonder_rate", None),
)
TENANT_COLUMNS = ("tenant", "kind", "namespace", "users", "pipeline", "share of accesses",
                  "mean count", "GET size median (MiB) / sigma",
                  f"extent (MiB) / P(full {UNITS.block_bytes // MiB} MiB)", "hot range",
                  "P(GET_TEMP)", "burst P / gap (s)", "lifetime (h)")
NA = "\u2013"  # an en dash: the field does not apply to the tenant's kind


def _num(x: float, spec: str | None) -> str:
    return f"{100.0 * x:.1f}%" if spec is None else format(x, spec)


def _span(lo: float, hi: float) -> str:
    return f"{lo:g}{NA}{hi:g}"


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _rule(columns: int) -> str:
    return "|" + "---|" * columns


def tenant_cells(t: Tenant) -> list[str]:
    """A tenant's row of the docs table; fields its kind does not use are shown as NA."""
    reads, revisits = t.kind != "ingest", t.kind in ("hot", "scan")
    get_temp = f"{t.get_temp_prob:g}" if revisits else "1 (GETs)" if t.kind == "temp" else NA
    return [
        t.name, t.kind, str(t.namespace), ", ".join(map(str, t.users)), str(t.pipeline),
        f"{t.access_share:.3f}", f"{t.mean_count:g}",
        f"{t.size_median_mib:g} / {t.size_sigma:g}" if reads else NA,
        f"{_span(*t.extent_mib)} / {t.full_extent_prob:g}",
        _span(*t.hot_range) if t.kind == "hot" else NA,
        get_temp,
        f"{f'{t.burst_prob:g}' if revisits else NA} / {t.burst_gap_s:g}",
        _span(*(s / HOUR_S for s in t.lifetime_s)) if revisits else NA,
    ]


def markdown(p: Preset, stats: dict[str, Any]) -> str:
    """The docs section of preset `p`; `stats`: `compute_stats` of its default trace."""
    lines = [
        f"### `{p.name}`", "", p.description, "",
        f"Default trace: {p.days:g} days at a {p.sample_ratio:g}% sample of a "
        f"{p.full_node_rate_per_s:g} req/s node = {stats['requests']:,} accesses, "
        f"{stats['keys']:,} blocks ({stats['gets']:,} GET, {stats['puts']:,} PUT). Diurnal "
        f"amplitude {p.diurnal_amplitude:g} (peak at {p.peak_hour_utc:02.0f}:00 UTC).", "",
        _row(["statistic", "measured (seed 0)", "documented range", "Baleen Table 2"]),
        _rule(4),
    ]
    for label, key, spec in STAT_ROWS:
        lo_hi = p.expected.get(key)
        lines.append(_row([
            label, _num(stats[key], spec),
            f"{_num(lo_hi[0], spec)} {NA} {_num(lo_hi[1], spec)}" if lo_hi else "",
            _num(p.table2[key], spec) if key in p.table2 else ""]))
    lines += ["", _row(list(TENANT_COLUMNS)), _rule(len(TENANT_COLUMNS))]
    lines += [_row(tenant_cells(t)) for t in p.tenants]
    return "\n".join(lines)


#: The statistics table of an object preset's docs section: label, `object_stats` key,
#: format (None: a percentage; "bytes": a size with a binary unit; else a format spec).
OBJECT_STAT_ROWS: tuple[tuple[str, str, str | None], ...] = (
    ("Requests per object", "requests_per_object", ".2f"),
    ("Compulsory miss ratio (objects / requests)", "compulsory_miss_ratio", None),
    ("One-hit-wonder rate (of objects)", "one_hit_wonder_rate", None),
    ("Object size p10", "size_p10", "bytes"),
    ("Object size p50", "size_p50", "bytes"),
    ("Object size p90", "size_p90", "bytes"),
    ("Object size p99", "size_p99", "bytes"),
    ("Object size max", "size_max", "bytes"),
    ("Mean request size", "mean_request_bytes", "bytes"),
    ("Zipf slope (1000 most requested)", "zipf_slope", ".3f"),
    ("Requests to the 1% most requested objects", "top1pct_request_share", None),
    ("Request rate (/s)", "request_rate_per_s", ".2f"),
    ("Peak-to-mean (hourly)", "peak_to_mean_hourly", ".2f"),
    ("Top-100 objects kept across a shift period", "hot_set_kept", None),
)
CLASS_COLUMNS = ("class", "share of requests", "requests per catalogue object", "Zipf alpha",
                 "size median / sigma", "size range")


def human_bytes(x: float) -> str:
    """1536 -> '1.5 KiB' (B, KiB, MiB, GiB, TiB; one decimal above bytes)."""
    for unit, scale in BINARY_UNITS:
        if abs(x) >= scale:
            return f"{x / scale:.1f} {unit}"
    return f"{x:.0f} B"


def _ofmt(x: float, spec: str | None) -> str:
    return human_bytes(x) if spec == "bytes" else _num(x, spec)


def class_cells(c: ObjectClass) -> list[str]:
    """An object class's row of the docs table."""
    return [c.name, f"{c.request_share:.2f}", f"{c.mean_requests:g}", f"{c.zipf_alpha:g}",
            f"{human_bytes(c.size_median)} / {c.size_sigma:g}",
            f"{human_bytes(c.size_range[0])}{NA}{human_bytes(c.size_range[1])}"]


def object_markdown(p: ObjectPreset, stats: dict[str, Any]) -> str:
    """The docs section of object preset `p`; `stats`: `trace.objects.object_stats` of its
    default trace (seed 0) with `window_s` = its shift period."""
    lines = [
        f"### `{p.name}`", "", p.description, "",
        f"Default trace: {p.hours:g} hours at {p.request_rate_per_s:g} requests/s = "
        f"{stats['requests']:,} requests, {stats['objects']:,} objects, "
        f"{human_bytes(stats['unique_bytes'])} of distinct objects. Diurnal amplitude "
        f"{p.diurnal_amplitude:g} (peak at {p.peak_hour_utc:02.0f}:00 UTC). Every "
        f"{p.shift_every_h:g} hours {100 * p.shift_fraction:g}% of the hot set (the top "
        f"{100 * p.hot_fraction:g}% of each class's catalogue) is replaced by new objects.", "",
        _row(["statistic", "measured (seed 0)", "documented range"]), _rule(3),
    ]
    for label, key, spec in OBJECT_STAT_ROWS:
        lo_hi = p.expected.get(key)
        lines.append(_row([label, _ofmt(stats[key], spec),
                           f"{_ofmt(lo_hi[0], spec)} {NA} {_ofmt(lo_hi[1], spec)}"
                           if lo_hi else ""]))
    lines += ["", _row(list(CLASS_COLUMNS)), _rule(len(CLASS_COLUMNS))]
    lines += [_row(class_cells(c)) for c in p.classes]
    return "\n".join(lines)


def object_preset_stats(name: str, path: str | Path) -> dict[str, Any]:
    """`object_stats` of an object preset's trace at `path`, as the docs report them."""
    from flashml.trace.objects import object_stats, read_objects

    p = OBJECT_PRESETS[name]
    return object_stats(read_objects(path, "objects-csv"), window_s=p.shift_every_h * HOUR_S)


def main() -> int:
    """Print every preset's docs section, measured on its default trace (seed 0): the
    block-trace presets, then the object-trace presets."""
    from flashml.trace.generate import generate_trace
    from flashml.trace.ingest import load_trace
    from flashml.trace.stats import compute_stats

    sections = []
    with tempfile.TemporaryDirectory(prefix="flashml-presets-") as tmp:
        for name, p in PRESETS.items():
            path = Path(tmp) / f"{name}.trace"
            generate_trace(name, 0, path, progress=False)
            sections.append(markdown(p, compute_stats(*load_trace(path))))
        for name, op in OBJECT_PRESETS.items():
            path = Path(tmp) / f"{name}.csv"
            generate_trace(name, 0, path, progress=False)
            sections.append(object_markdown(op, object_preset_stats(name, path)))
    sys.stdout.write("\n\n".join(sections) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
