"""Python side of the simulator: canonical table -> NumPy arrays (zero-copy) -> `flashml_sim`.

    from flashml.simulation import SimConfig, simulate
    res = simulate(df, SimConfig(admission="rejectx", cache_gb=366.475, sample_ratio=0.1))
    res.metrics["peak_dt_util"], res.series["dt_util"]

The Rust core (`sim/`, module `flashml_sim`) does the work with the GIL released. Every
unit and default comes from `flashml.config`; they are passed to Rust explicitly.

Semantics (see `sim/src/flash.rs` for the full statement): an access covers segments
`offset//seg .. (offset+size-1)//seg` of its block; a GET hits iff all are cached; a miss
costs one backend IO from the first to the last missing segment, extended by the prefetch
range; `DT = t_seek + segments * segment_bytes / bandwidth`; PUTs cost one IO over their
segments and never touch the cache. Admission is asked once per miss and applies to every
uncached segment of the IO (prefetched ones included).
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from flashml.config import DEFAULTS, UNITS

# Tectonic PUT op codes, the one definition lives with the canonical table.
try:
    from flashml.trace.canonical import PUT_OPS
except ImportError:  # pragma: no cover - canonical always ships with flashml
    PUT_OPS = (3, 4, 6)

EVICTIONS = ("lru", "fifo")
ADMISSIONS = ("admitall", "coinflip", "rejectx", "opt", "threshold")
PREFETCHES = ("none", "block", "range")
PREFETCH_WHENS = ("miss", "partial", "score")

#: The metric keys of flash-cache mode, in report order.
METRIC_KEYS = (
    "peak_dt_util", "mean_dt_util", "p50_dt_util", "p90_dt_util", "p99_dt_util",
    "flash_write_rate_mbps", "dwpd", "io_hit_ratio", "byte_hit_ratio", "segment_hit_ratio",
    "avg_eviction_age_s", "backend_ios", "backend_bytes", "admitted_segments",
    "prefetched_segments", "accesses", "wall_s",
)

#: Per-access policy arrays and the NumPy dtype the core reads them as.
POLICY_ARRAYS = {
    "admit": np.uint8,          # OPT admit flags (non-zero = admit)
    "score": np.float64,        # admission scores for `threshold`
    "prefetch_start": np.int64,  # inclusive segment index
    "prefetch_end": np.int64,    # inclusive segment index
    "when_score": np.float64,   # prefetch-when scores for `prefetch_when="score"`
}

TRACE_COLUMNS = {"time": np.float64, "key": np.uint64, "offset": np.uint64,
                 "size": np.uint64, "op": np.uint8}


@dataclass(frozen=True)
class SimConfig:
    """Every knob of flash-cache mode. Sizes are at full-node scale unless noted."""

    cache_gb: float = DEFAULTS.cache_gb
    sample_ratio: float = DEFAULTS.sample_ratio
    #: If > 0, the capacity in segments at trace scale (overrides cache_gb).
    capacity_segments: int = 0
    eviction: str = "lru"
    block_level_recency: bool = True
    admission: str = "admitall"
    coinflip_p: float = 0.5
    coinflip_seed: int = 0
    rejectx_x: int = 1
    rejectx_factor: float = 2.0
    threshold: float = 0.5
    #: Peak-aware admission: in these hours of the day (UTC) the threshold is
    #: `threshold - peak_bonus` (sim/src/config.rs: PeakSchedule).
    peak_hours: tuple[int, ...] = ()
    peak_bonus: float = 0.0
    prefetch: str = "none"
    prefetch_when: str = "miss"
    when_threshold: float = 0.5
    segment_bytes: int = UNITS.segment_bytes
    block_bytes: int = UNITS.block_bytes
    t_seek_s: float = UNITS.t_seek_s
    bandwidth_bytes_per_s: float = UNITS.bandwidth_bytes_per_s
    disks: int = DEFAULTS.disks
    window_s: float = DEFAULTS.window_s
    warmup_s: float = DEFAULTS.warmup_s
    put_ops: tuple[int, ...] = tuple(PUT_OPS)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["put_ops"] = list(self.put_ops)
        d["peak_hours"] = list(self.peak_hours)
        return d

    def replace(self, **changes: Any) -> SimConfig:
        return dataclasses.replace(self, **changes)


@dataclass
class SimResult:
    metrics: dict[str, float | int]
    series: dict[str, np.ndarray]
    info: dict[str, Any] = field(default_factory=dict)
    config: SimConfig | None = None


def _core():
    try:
        import flashml_sim
    except ImportError as e:  # pragma: no cover - setup.sh builds it
        raise ImportError("the Rust simulator flashml_sim is not built; run "
                          "`bash scripts/setup.sh`") from e
    return flashml_sim


def _as_array(values: Any, dtype: type, name: str) -> np.ndarray:
    """A C-contiguous 1-D NumPy array of `dtype`; no copy when the input already is one."""
    if hasattr(values, "null_count") and callable(values.null_count):  # polars Series
        if values.null_count():
            raise ValueError(f"column '{name}' has null values")
        arr = values.to_numpy(allow_copy=True)
    elif hasattr(values, "num_chunks"):  # pyarrow ChunkedArray
        if values.null_count:
            raise ValueError(f"column '{name}' has null values")
        chunk = values.chunk(0) if values.num_chunks == 1 else values.combine_chunks()
        arr = chunk.to_numpy(zero_copy_only=False)
    elif hasattr(values, "to_numpy") and not isinstance(values, np.ndarray):  # pyarrow Array
        if getattr(values, "null_count", 0):
            raise ValueError(f"column '{name}' has null values")
        arr = values.to_numpy(zero_copy_only=False)
    else:
        arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"array '{name}' must be one-dimensional, got shape {arr.shape}")
    if arr.dtype == np.bool_ and dtype == np.uint8:
        arr = arr.view(np.uint8)
    if arr.dtype != dtype:
        if np.issubdtype(arr.dtype, np.floating) and np.issubdtype(dtype, np.integer):
            if not np.all(np.isfinite(arr)):
                raise ValueError(f"array '{name}' has non-finite values")
            if name.startswith("prefetch_"):
                arr = np.floor(arr)
        if dtype == np.uint8 and name == "admit":
            arr = (arr != 0)
        elif (np.issubdtype(arr.dtype, np.signedinteger)
              and np.issubdtype(dtype, np.unsignedinteger)):
            if arr.size and arr.min() < 0:
                raise ValueError(f"column '{name}' has negative values")
        arr = arr.astype(dtype)
    return np.ascontiguousarray(arr)


def trace_arrays(table: Any) -> dict[str, np.ndarray]:
    """The simulator's columns of a canonical table (polars DataFrame, pyarrow Table, or a
    mapping of column name -> array) as NumPy arrays, borrowed without copying when the
    columns already have the canonical types and one chunk."""
    names = getattr(table, "column_names", None) or getattr(table, "columns", None)
    if names is None:
        names = list(table.keys())
    out = {}
    for name, dtype in TRACE_COLUMNS.items():
        if name not in names:
            raise ValueError(f"the trace has no column '{name}'")
        col = table.column(name) if hasattr(table, "column_names") else table[name]
        out[name] = _as_array(col, dtype, name)
    return out


def simulate(table: Any, config: SimConfig | None = None, *, admit: Any = None,
             score: Any = None, prefetch_start: Any = None, prefetch_end: Any = None,
             when_score: Any = None) -> SimResult:
    """Run flash-cache mode on a canonical table; invalid input raises ValueError."""
    config = config or SimConfig()
    cols = trace_arrays(table)
    policy = {}
    for name, values in (("admit", admit), ("score", score), ("prefetch_start", prefetch_start),
                         ("prefetch_end", prefetch_end), ("when_score", when_score)):
        if values is not None:
            policy[name] = _as_array(values, POLICY_ARRAYS[name], name)
    out = _core().simulate(cols["time"], cols["key"], cols["offset"], cols["size"], cols["op"],
                           config.to_dict(), **policy)
    return SimResult(metrics=out["metrics"], series=out["series"], info=out["info"],
                     config=config)


FEATURE_COLUMNS = {"namespace": np.uint32, "user": np.uint32}


def _feature_arrays(table: Any) -> dict[str, np.ndarray]:
    """The simulator's columns plus namespace and user (the features read them)."""
    cols = trace_arrays(table)
    names = getattr(table, "column_names", None) or getattr(table, "columns", None)
    if names is None:
        names = list(table.keys())
    for name, dtype in FEATURE_COLUMNS.items():
        if name not in names:
            raise ValueError(f"the trace has no column '{name}'")
        col = table.column(name) if hasattr(table, "column_names") else table[name]
        cols[name] = _as_array(col, dtype, name)
    return cols


def _get_ops() -> list[int]:
    from flashml.trace.canonical import GET_OPS

    return list(GET_OPS)


def simulate_policy(table: Any, policy: Any, config: SimConfig | None = None, *,
                    threshold: float | None = None, when_threshold: float | None = None,
                    verify: bool = True) -> SimResult:
    """Run flash-cache mode with a compiled policy (a `flashml compile` output folder, or a
    policy .so path) as admission + prefetch: the Rust core computes the features online and
    calls the .so on each miss. The folder's manifest is verified first (sha256, ABI,
    contract); the .so's ABI version and contract hash are checked again on load. Thresholds
    default to the policy's own; `config`'s admission/prefetch settings are ignored."""
    from pathlib import Path

    config = config or SimConfig()
    path = Path(policy)
    if path.is_dir():
        if verify:
            from flashml.compiler.loader import verify_bundle

            verify_bundle(path)
        path = path / "policy.so"
    cols = _feature_arrays(table)
    out = _core().simulate_policy(
        cols["time"], cols["key"], cols["offset"], cols["size"], cols["op"],
        cols["namespace"], cols["user"], str(path), config.to_dict(), threshold=threshold,
        when_threshold=when_threshold, get_ops=_get_ops())
    return SimResult(metrics=out["metrics"], series=out["series"], info=out["info"],
                     config=config)


def policy_info(policy: Any) -> dict[str, Any]:
    """What a policy .so (or bundle folder) reports: ABI version, contract hash, thresholds,
    target write rate, eviction age. ValueError on an ABI or contract mismatch."""
    from pathlib import Path

    path = Path(policy)
    if path.is_dir():
        path = path / "policy.so"
    return dict(_core().policy_info(str(path)))


def online_features(table: Any, segment_bytes: int = UNITS.segment_bytes) -> np.ndarray:
    """The admission features of every access as the simulator's .so path computes them
    online (Rust); equals flashml.features.online.feature_matrix."""
    cols = _feature_arrays(table)
    return _core().online_features(
        cols["time"], cols["key"], cols["offset"], cols["size"], cols["op"],
        cols["namespace"], cols["user"], segment_bytes=segment_bytes, get_ops=_get_ops())


def capacity_segments(config: SimConfig) -> int:
    """The cache capacity in segments at trace scale that `config` gives."""
    return int(_core().capacity_segments(config.to_dict()))


def default_core_config() -> dict[str, Any]:
    """The Rust core's built-in defaults (a test checks they equal SimConfig's)."""
    return dict(_core().default_config())


# --- object-cache mode -----------------------------------------------------------------------

_CAP = re.compile(r"^\s*(?P<num>\d+(?:\.\d+)?)\s*(?P<unit>[a-zA-Z]*)\s*$")
_BYTE_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3,
    "t": 1000**4, "tb": 1000**4,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
}
_OBJ_UNITS = ("obj", "objs", "object", "objects")


def parse_capacity(text: str) -> tuple[int, str]:
    """'4MiB' -> (4194304, 'bytes'); '5000obj' -> (5000, 'objects'). ValueError if bad."""
    m = _CAP.match(str(text))
    if not m:
        raise ValueError(f"cannot parse capacity {text!r}; examples: 4MiB, 16MB, 1048576, "
                         "5000obj")
    num, unit = float(m.group("num")), m.group("unit").lower()
    if unit in _OBJ_UNITS:
        if num != int(num):
            raise ValueError(f"object-count capacity must be a whole number, got {text!r}")
        value, kind = int(num), "objects"
    elif unit in _BYTE_UNITS:
        value, kind = int(math.floor(num * _BYTE_UNITS[unit])), "bytes"
    else:
        raise ValueError(f"unknown capacity unit {m.group('unit')!r} in {text!r}; use B, KiB, "
                         "MiB, GiB, KB, MB, GB or obj")
    if value <= 0:
        raise ValueError(f"capacity must be > 0, got {text!r}")
    return value, kind


def simulate_objects(keys: Any, sizes: Any, capacity: int, policy: str = "lru",
                     unit: str = "bytes") -> dict[str, float | int]:
    """Object-cache mode (libCacheSim's model): miss_ratio, byte_miss_ratio, requests, hits,
    evictions, wall_s."""
    k = _as_array(keys, np.uint64, "key")
    s = _as_array(sizes, np.uint64, "size")
    return dict(_core().simulate_objects(k, s, int(capacity), policy, unit))
