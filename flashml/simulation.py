"""Python side of the simulator: canonical table -> NumPy arrays (zero-copy) -> `flashml_sim`.

    from flashml.simulation import SimConfig, simulate
    res = simulate(df, SimConfig(admission="rejectx", cache_gb=366.475, sample_ratio=0.1))
    res.metrics["peak_dt_util"], res.series["dt_util"]

The Rust core (`sim/`, module `flashml_sim`) does the work with the GIL released. The
configuration's keys, types, defaults and docs are declared once, in Rust (`sim_params!` in
sim/src/core/config.rs); `SimConfig` is generated from that declaration here.

Semantics (see `sim/src/flash/mod.rs` for the full statement): an access covers segments
`offset//seg .. (offset+size-1)//seg` of its block; a GET hits iff all are cached; a miss
costs one backend IO from the first to the last missing segment, extended by the prefetch
range; `DT = t_seek + segments * segment_bytes / bandwidth`; PUTs cost one IO over their
segments and never touch the cache. Admission is asked once per miss and applies to every
uncached segment of the IO (prefetched ones included).

`simulate(..., partition=FlashPartition(...))` divides the cache among streams (per-stream
eviction orders and quotas that change per interval; `interval_bounds_by_time` gives
intervals of fixed length). MAT's modes (object-mode MAT and LRB, flash mode with MAT as the
eviction) are MAT's: flashml/systems/mat/simulation.py.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from flashml.config import DEFAULTS, GET_OPS, PUT_OPS, UNITS
from flashml.features.matrix import FeatureMatrix


def _core():
    try:
        import flashml_sim
    except ImportError as e:  # pragma: no cover - setup.sh builds it
        raise ImportError("the Rust simulator flashml_sim is not built; run "
                          "`bash scripts/setup.sh`") from e
    return flashml_sim


def _config_fields() -> list[tuple[str, str, Any, str, tuple[str, ...] | None]]:
    core = _core()
    if not hasattr(core, "config_fields"):  # pragma: no cover - an extension built before it
        raise ImportError("the Rust simulator flashml_sim is out of date; run `make setup`")
    return [tuple(f) for f in core.config_fields()]


#: The declaration of every simulator config key, from Rust: (name, type, default, doc,
#: choices), in declaration order.
CONFIG_FIELDS = _config_fields()
_TYPES: dict[str, Any] = {"int": int, "float": float, "bool": bool, "str": str,
                          "tuple[int, ...]": tuple[int, ...]}
_SEQUENCES = tuple(name for name, typ, *_ in CONFIG_FIELDS if typ.startswith("tuple"))
_CHOICES = {name: choices for name, _, _, _, choices in CONFIG_FIELDS if choices}

EVICTIONS: tuple[str, ...] = _CHOICES["eviction"]
ADMISSIONS: tuple[str, ...] = _CHOICES["admission"]
PREFETCHES: tuple[str, ...] = _CHOICES["prefetch"]
PREFETCH_WHENS: tuple[str, ...] = _CHOICES["prefetch_when"]

# The Rust declaration is the one source of SimConfig's defaults. Some of them are also units
# that Python code uses without the extension (flashml.config: trace stats, features, the run
# settings Airflow parses); flashml.config keeps those values and this check, at import, makes
# the two agree, so they cannot drift (change both: sim/src/core/config.rs and flashml/config.py).
SHARED_DEFAULTS: dict[str, Any] = {
    "segment_bytes": UNITS.segment_bytes,
    "block_bytes": UNITS.block_bytes,
    "t_seek_s": UNITS.t_seek_s,
    "bandwidth_bytes_per_s": UNITS.bandwidth_bytes_per_s,
    "cache_gb": DEFAULTS.cache_gb,
    "sample_ratio": DEFAULTS.sample_ratio,
    "disks": DEFAULTS.disks,
    "window_s": DEFAULTS.window_s,
    "warmup_s": DEFAULTS.warmup_s,
    "put_ops": tuple(PUT_OPS),
}


def _check_shared_defaults() -> None:
    declared = {name: default for name, _, default, _, _ in CONFIG_FIELDS}
    for name, value in SHARED_DEFAULTS.items():
        if name not in declared or declared[name] != value:
            raise ImportError(
                f"simulator config default {name}={declared.get(name)!r} (sim/src/core/config.rs) "
                f"differs from flashml.config's {value!r}; they are one fact: make them equal "
                "(and run `make setup` after changing sim/)")


_check_shared_defaults()

#: The metric keys of flash-cache mode, in report order.
METRIC_KEYS = (
    "peak_dt_util", "mean_dt_util", "p50_dt_util", "p90_dt_util", "p99_dt_util",
    "peak_dt_util_with_puts", "mean_dt_util_with_puts", "p50_dt_util_with_puts",
    "p90_dt_util_with_puts", "p99_dt_util_with_puts", "flash_write_rate_mbps",
    "flash_write_rate_mibps", "dwpd", "io_hit_ratio", "byte_hit_ratio", "segment_hit_ratio",
    "service_time_saved_ratio", "iops_saved_ratio", "avg_eviction_age_s", "backend_ios",
    "backend_bytes", "admitted_segments", "prefetched_segments", "accesses", "wall_s",
)

#: Per-access policy arrays and the NumPy dtype the core reads them as.
POLICY_ARRAYS = {
    "admit": np.uint8,          # OPT admit flags (non-zero = admit)
    "score": np.float64,        # admission scores for `threshold`
    "prefetch_start": np.int16,  # inclusive segment index (2 bytes an access)
    "prefetch_end": np.int16,    # inclusive segment index
    "when_score": np.float64,   # prefetch-when scores for `prefetch_when="score"`
}

TRACE_COLUMNS = {"time": np.float64, "key": np.uint64, "offset": np.uint64,
                 "size": np.uint64, "op": np.uint8}


def _post_init(self: Any) -> None:
    # sequences are stored as tuples of ints, so a config is hashable and compares by value
    for name in _SEQUENCES:
        value = getattr(self, name)
        if not isinstance(value, tuple) or not all(type(v) is int for v in value):
            object.__setattr__(self, name, tuple(int(v) for v in value))


def _to_dict(self: Any) -> dict[str, Any]:
    """The config as the dict `flashml_sim` reads (lists for the sequence keys)."""
    d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
    for name in _SEQUENCES:
        d[name] = list(d[name])
    return d


def _replace(self: Any, **changes: Any) -> Any:
    """A copy with `changes` applied (dataclasses.replace)."""
    return dataclasses.replace(self, **changes)


def _for_trace(cls: type, meta_or_sample_ratio: Any, *, cache_gb: float | None = None,
               warmup_s: float | None = None, **changes: Any) -> Any:
    """The config that simulates a canonical table (the one place it is built): the sample
    ratio (percent) and block size from the table's metadata (`TraceMeta`; a bare number is
    taken as the sample ratio), then `cache_gb` and `warmup_s` (None: the declared default)
    and any other key in `changes`. What the metadata gives cannot be given again."""
    meta = meta_or_sample_ratio
    ratio = getattr(meta, "sample_ratio", meta)
    if isinstance(ratio, bool) or not isinstance(ratio, numbers.Real):
        raise TypeError(f"SimConfig.for_trace needs a TraceMeta or a sample ratio, got {meta!r}")
    kw: dict[str, Any] = {"sample_ratio": float(ratio)}
    if getattr(meta, "block_bytes", None) is not None:
        kw["block_bytes"] = int(meta.block_bytes)
    if clash := sorted(set(kw) & set(changes)):
        raise TypeError(f"SimConfig.for_trace: the trace's metadata gives {', '.join(clash)}; "
                        "resolve it there (or .replace() the result)")
    if cache_gb is not None:
        kw["cache_gb"] = cache_gb
    if warmup_s is not None:
        kw["warmup_s"] = warmup_s
    return cls(**kw, **changes)


def _sim_config_class() -> type:
    fields = [(name, _TYPES[typ], field(default=default, metadata={"doc": doc,
                                                                    "choices": choices}))
              for name, typ, default, doc, choices in CONFIG_FIELDS]
    doc = "\n".join(
        ["Every knob of flash-cache mode (sizes at full-node scale unless noted), generated",
         "from the Rust declaration (sim_params! in sim/src/core/config.rs). Keyword-only, frozen.",
         ""]
        + [f"{name} ({typ} = {default!r}"
           + (f", one of {', '.join(choices)}" if choices else "") + f"): {d}"
           for name, typ, default, d, choices in CONFIG_FIELDS])
    cls = dataclasses.make_dataclass(
        "SimConfig", fields, frozen=True, kw_only=True,
        namespace={"__doc__": doc, "__post_init__": _post_init, "to_dict": _to_dict,
                   "replace": _replace, "for_trace": classmethod(_for_trace)})
    cls.__module__ = __name__  # pickling finds it here
    return cls


#: Every knob of flash-cache mode, generated from the Rust declaration: a frozen, keyword-only
#: dataclass with `.to_dict()`, `.replace(**kw)` and `SimConfig.for_trace(meta, ...)`.
SimConfig = _sim_config_class()


@dataclass
class SimResult:
    metrics: dict[str, float | int]
    series: dict[str, np.ndarray]
    info: dict[str, Any] = field(default_factory=dict)
    config: SimConfig | None = None


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
        if np.issubdtype(dtype, np.integer) and arr.size and \
                np.issubdtype(arr.dtype, np.number) and not np.can_cast(arr.dtype, dtype):
            lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
            if arr.min() < lo or arr.max() > hi:
                raise ValueError(f"array '{name}' has values outside {lo}..{hi} "
                                 f"({np.dtype(dtype).name}): {arr.min()}..{arr.max()}")
        arr = arr.astype(dtype)
    return np.ascontiguousarray(arr)


def trace_arrays(table: Any) -> dict[str, np.ndarray]:
    """The simulator's columns of a canonical table (polars DataFrame, pyarrow Table, or a
    mapping of column name -> array) as NumPy arrays, borrowed without copying when the
    columns already have the canonical types and one chunk."""
    return _columns(table, TRACE_COLUMNS)


def _columns(table: Any, wanted: dict[str, type]) -> dict[str, np.ndarray]:
    """Columns `wanted` (name -> dtype) of a table or mapping, as NumPy arrays."""
    names = getattr(table, "column_names", None) or getattr(table, "columns", None)
    if names is None:
        names = list(table.keys())
    out = {}
    for name, dtype in wanted.items():
        if name not in names:
            raise ValueError(f"the trace has no column '{name}'")
        col = table.column(name) if hasattr(table, "column_names") else table[name]
        out[name] = _as_array(col, dtype, name)
    return out


def _index_array(values: Any, dtype: type, name: str) -> np.ndarray:
    """A C-contiguous 1-D array of non-negative integers as `dtype` (ValueError naming the
    array if it is not one, or a value does not fit)."""
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"partition '{name}' must be one-dimensional, got shape {arr.shape}")
    if arr.size == 0:
        arr = arr.astype(dtype)
    if not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"partition '{name}' must hold integers, got dtype {arr.dtype}")
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) > np.iinfo(dtype).max):
        raise ValueError(f"partition '{name}' has values outside 0..{np.iinfo(dtype).max}: "
                         f"{int(arr.min())}..{int(arr.max())}")
    return np.ascontiguousarray(arr, dtype=dtype)


@dataclass(frozen=True, eq=False)
class FlashPartition:
    """Partitioned flash cache (MLCache in flash mode; sim/src/flash/mod.rs,
    "Partitioned mode"): the cache is divided among k streams (e.g. namespaces), each with its
    own eviction order and its own quota of segments.

    stream: per access (GETs and PUTs), its stream in 0..k (uint32).
    bounds: access indices where the intervals start (bounds[0] = 0, non-decreasing, each
        below the number of accesses; equal bounds make an empty interval whose quotas are
        applied and at once replaced); `interval_bounds_by_time` gives them for intervals of
        fixed length.
    shares: (intervals, k): each interval's share of the capacity per stream, turned into
        segments by largest remainder (a row with a negative or non-finite entry, or summing
        to 0, is an even split, counted in info["fallbacks"]).

    A block belongs to the stream that inserted it; an access of another stream to it is
    treated as the owner's (its insertions use the owner's quota) but counted as that other
    stream's GET. A stream's partition holds at most quota - 1 segments (the cache's capacity
    rule); a quota of 0 or 1 caches nothing. A shrinking quota evicts at the interval's start
    (info["resize_evictions"]).
    """

    stream: np.ndarray
    bounds: np.ndarray
    shares: np.ndarray

    def __post_init__(self) -> None:
        stream = _index_array(self.stream, np.uint32, "stream")
        bounds = _index_array(self.bounds, np.uint64, "bounds")
        try:
            shares = np.asarray(self.shares, dtype=np.float64)
        except (TypeError, ValueError) as e:
            raise ValueError(f"partition 'shares' must be numbers: {e}") from e
        if shares.ndim != 2 or shares.shape[1] == 0:
            raise ValueError("partition 'shares' must be a 2-D array (intervals, streams) with "
                             f"at least one stream, got shape {shares.shape}")
        if shares.shape[0] != len(bounds):
            raise ValueError(f"partition 'shares' has {shares.shape[0]} rows (intervals) but "
                             f"'bounds' starts {len(bounds)} intervals")
        object.__setattr__(self, "stream", stream)
        object.__setattr__(self, "bounds", bounds)
        object.__setattr__(self, "shares", np.ascontiguousarray(shares))

    @property
    def streams(self) -> int:
        """The number of streams k (the columns of `shares`)."""
        return int(self.shares.shape[1])

    @property
    def intervals(self) -> int:
        return len(self.bounds)


#: At most this many intervals from `interval_bounds_by_time` (as the simulator's windows).
MAX_INTERVALS = 10_000_000


def interval_bounds_by_time(time: np.ndarray, interval_s: float) -> np.ndarray:
    """The access index where each interval of `interval_s` seconds starts (int64), counted
    from the first access's time: interval j holds the accesses with
    floor((time - time[0]) / interval_s) == j (the simulator's window rule), from j = 0 to the
    last access's. An interval with no accesses starts where the next one does (equal bounds).
    `time` must be sorted; ValueError otherwise."""
    t = np.asarray(time, dtype=np.float64)
    if t.ndim != 1 or t.size == 0:
        raise ValueError(f"'time' must be a non-empty 1-D array, got shape {t.shape}")
    if not (isinstance(interval_s, numbers.Real) and not isinstance(interval_s, bool)
            and math.isfinite(interval_s)
            and interval_s > 0):
        raise ValueError(f"interval_s must be a finite number of seconds > 0, got {interval_s!r}")
    if not np.all(np.isfinite(t)):
        raise ValueError("'time' has non-finite values")
    if np.any(np.diff(t) < 0):
        raise ValueError("'time' must be sorted (non-decreasing)")
    index = np.floor((t - t[0]) / interval_s)
    n_intervals = int(index[-1]) + 1
    if n_intervals > MAX_INTERVALS:
        raise ValueError(f"the trace spans {float(t[-1] - t[0])} s: {n_intervals} intervals of "
                         f"{interval_s} s, more than {MAX_INTERVALS}")
    return np.searchsorted(index, np.arange(n_intervals), side="left").astype(np.int64)


def _policy_arrays(**given: Any) -> dict[str, np.ndarray]:
    """The per-access policy arrays given (None: not given), typed as the simulator reads
    them (POLICY_ARRAYS)."""
    return {name: _as_array(values, POLICY_ARRAYS[name], name)
            for name, values in given.items() if values is not None}


def simulate(table: Any, config: SimConfig | None = None, *, admit: Any = None,
             score: Any = None, prefetch_start: Any = None, prefetch_end: Any = None,
             when_score: Any = None, partition: FlashPartition | None = None) -> SimResult:
    """Run flash-cache mode on a canonical table; invalid input raises ValueError.

    `partition` (a `FlashPartition`) divides the cache among streams; every metric stays
    whole-cache and info gains "streams", "stream_gets", "stream_hits",
    "stream_admitted_segments", "stream_evictions" (arrays of k), "quotas" ((intervals, k)
    segments applied), "resize_evictions" and "fallbacks"."""
    config = config or SimConfig()
    cols = trace_arrays(table)
    policy: dict[str, Any] = _policy_arrays(
        admit=admit, score=score, prefetch_start=prefetch_start, prefetch_end=prefetch_end,
        when_score=when_score)
    if partition is not None:
        if not isinstance(partition, FlashPartition):
            raise TypeError(f"partition must be a FlashPartition, got {type(partition).__name__}")
        policy.update(stream=partition.stream, bounds=partition.bounds,
                      shares=partition.shares.ravel(), streams=partition.streams)
    out = _core().simulate(cols["time"], cols["key"], cols["offset"], cols["size"], cols["op"],
                           config.to_dict(), **policy)
    return SimResult(metrics=out["metrics"], series=out["series"], info=out["info"],
                     config=config)


FEATURE_COLUMNS = {"namespace": np.uint32, "user": np.uint32}


def _feature_arrays(table: Any) -> dict[str, np.ndarray]:
    """The simulator's columns plus namespace and user (the features read them)."""
    return _columns(table, TRACE_COLUMNS | FEATURE_COLUMNS)


def _get_ops() -> list[int]:
    return list(GET_OPS)


def _policy_core_args(policy: Any, need: Any, unverified: bool) -> dict[str, Any]:
    """A policy (bundle folder or its .so) checked by the one loader (compiler/loader.py
    read_verified: manifest schema, capabilities and contracts in `need`, size, sha256, ELF):
    the path, sha256 and size the Rust loader checks again on the bytes it maps."""
    from flashml.compiler.loader import core_args

    return core_args(policy, need, unverified=unverified)


def _note_unverified(res: SimResult, args: dict[str, Any]) -> SimResult:
    """An unverified policy says so in the result: info["unverified"] and the sha256 of the
    .so that ran (info["policy_sha256"])."""
    if args.get("unverified"):
        res.info.update(unverified=True, policy_sha256=args["sha256"])
    return res


def simulate_policy(table: Any, policy: Any, config: SimConfig | None = None, *,
                    threshold: float | None = None, when_threshold: float | None = None,
                    unverified: bool = False) -> SimResult:
    """Run flash-cache mode with a compiled policy (a `flashml compile` output folder, or its
    policy .so) as admission + prefetch: the Rust core computes the features online and
    calls the .so on each miss. The bundle is verified first (manifest schema, ABI,
    contract, size, sha256, ELF) and Rust maps exactly the bytes it checked again; the
    .so's ABI version and contract hash are checked on load. A .so without a manifest is
    refused unless `unverified`. Thresholds default to the policy's own; `config`'s
    admission/prefetch settings are ignored. info["unverified"] is True
    and info["policy_sha256"] (the sha256 of the .so that ran) with `unverified`."""
    config = config or SimConfig()
    args = _policy_core_args(policy, ("admission", "prefetch"), unverified)
    cols = _feature_arrays(table)
    out = _core().simulate_policy(
        cols["time"], cols["key"], cols["offset"], cols["size"], cols["op"],
        cols["namespace"], cols["user"], args["path"], config.to_dict(), threshold=threshold,
        when_threshold=when_threshold, get_ops=_get_ops(), sha256=args["sha256"],
        size_bytes=args["size_bytes"])
    return _note_unverified(SimResult(metrics=out["metrics"], series=out["series"],
                                      info=out["info"], config=config), args)


def policy_info(policy: Any, *, unverified: bool = False) -> dict[str, Any]:
    """What a policy (bundle folder, or its .so) reports: ABI version, contract hash,
    thresholds, target write rate, eviction age. Verified as simulate_policy does; ValueError
    on an ABI or contract mismatch of the .so."""
    args = _policy_core_args(policy, ("admission", "prefetch"), unverified)
    return dict(_core().policy_info(args["path"], sha256=args["sha256"],
                                    size_bytes=args["size_bytes"]))


def online_features(table: Any, segment_bytes: int = UNITS.segment_bytes) -> np.ndarray:
    """The admission features of every access as the simulator's .so path computes them
    online (Rust); equals flashml.features.online.feature_matrix."""
    cols = _feature_arrays(table)
    return _core().online_features(
        cols["time"], cols["key"], cols["offset"], cols["size"], cols["op"],
        cols["namespace"], cols["user"], segment_bytes=segment_bytes, get_ops=_get_ops())


def online_counts(table: Any, segment_bytes: int = UNITS.segment_bytes, *,
                  out: np.ndarray | None = None) -> np.ndarray:
    """The count features of every access (uint32, counts x accesses, in the contract's
    order of them): `counts_of(online_features(table))`, computed online in Rust without
    the float64 matrix of every feature (at 10 M accesses 1.44 GB, this is 0.48 GB); with
    `out` (a C-contiguous uint32 array of that shape, e.g. a memory-mapped file), written
    into it and returned."""
    from flashml.features.contract import contract
    from flashml.features.matrix import count_columns

    cols = _feature_arrays(table)
    got = _core().online_features(
        cols["time"], cols["key"], cols["offset"], cols["size"], cols["op"],
        cols["namespace"], cols["user"], segment_bytes=segment_bytes, get_ops=_get_ops(),
        counts=count_columns(contract()), out=out)
    return got if out is None else out


def compact_features(table: Any, counts: np.ndarray,
                     segment_bytes: int = UNITS.segment_bytes) -> FeatureMatrix:
    """The admission features of every access as a `FeatureMatrix` (flashml/features/
    matrix.py): the table's columns (borrowed) and the count features `counts` (uint32,
    `online_counts(table)`)."""
    return FeatureMatrix(_feature_arrays(table), counts, segment_bytes)


def capacity_segments(config: SimConfig) -> int:
    """The cache capacity in segments at trace scale that `config` gives."""
    return int(_core().capacity_segments(config.to_dict()))


def default_core_config() -> dict[str, Any]:
    """The Rust core's declared defaults, as the dict it reads (what `SimConfig()` holds)."""
    return dict(_core().default_config())


# --- object-cache mode -----------------------------------------------------------------------

_CAP = re.compile(r"^\s*(?P<int>[0-9]+)(?:\.(?P<frac>[0-9]+))?\s*(?P<unit>[a-zA-Z]*)\s*$")
#: Size units, case-insensitive: the one table of docs/reference/conventions.md ("Sizes"),
#: which the C runtime's cli_parse_bytes follows too (tests/runtime/test_runtime.py checks both
#: agree). Bare K/M/G/T are refused: they mean 1000^n to some users and 1024^n to others.
_BYTE_UNITS = {
    "": 1, "b": 1,
    "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
}
_OBJ_UNITS = ("obj", "objs", "object", "objects")
#: The largest capacity the simulator takes (its Python binding reads an i64).
MAX_CAPACITY = 2**63 - 1
#: More digits than any capacity up to MAX_CAPACITY needs (and far below Python's int limit).
_MAX_DIGITS = 200


def parse_capacity(text: str) -> tuple[int, str]:
    """'4MiB' -> (4194304, 'bytes'); '5000obj' -> (5000, 'objects'). ValueError if bad.

    Exact: the number is read as a decimal fraction (no floating point), bytes are rounded
    down, an object count must be whole, and a capacity beyond MAX_CAPACITY (2^63 - 1) is
    refused."""
    m = _CAP.match(str(text))
    if not m:
        raise ValueError(f"cannot parse capacity {text!r}; examples: 4MiB, 16MB, 1048576, "
                         "5000obj")
    whole = m.group("int").lstrip("0") or "0"
    frac = (m.group("frac") or "").rstrip("0")
    unit = m.group("unit").lower()
    if unit not in _OBJ_UNITS and unit not in _BYTE_UNITS:
        raise ValueError(f"unknown capacity unit {m.group('unit')!r} in {text!r}; use B, KB, "
                         "MB, GB, TB (powers of 1000), KiB, MiB, GiB, TiB (powers of 1024) or "
                         "obj")
    kind = "objects" if unit in _OBJ_UNITS else "bytes"
    if len(whole) > _MAX_DIGITS:
        raise ValueError(f"capacity {str(text).strip()[:30]!r}... ({len(whole)} digits) is too "
                         f"large: the simulator takes at most 2^63 - 1 = {MAX_CAPACITY} {kind}")
    if len(frac) > _MAX_DIGITS:
        raise ValueError(f"capacity {str(text).strip()[:30]!r}... has {len(frac)} decimal "
                         f"places, at most {_MAX_DIGITS}")
    if kind == "objects":
        if frac:
            raise ValueError(f"object-count capacity must be a whole number, got {text!r}")
        value = int(whole)
    else:
        num = Fraction(int(whole + frac), 10 ** len(frac))
        value = math.floor(num * _BYTE_UNITS[unit])
    if value <= 0:
        raise ValueError(f"capacity must be > 0, got {text!r}")
    if value > MAX_CAPACITY:
        raise ValueError(f"capacity {text!r} is too large: the simulator takes at most "
                         f"2^63 - 1 = {MAX_CAPACITY} {kind}")
    return value, kind


def simulate_objects(keys: Any, sizes: Any, capacity: int, policy: str = "lru",
                     unit: str = "bytes") -> dict[str, float | int]:
    """Object-cache mode (libCacheSim's model): miss_ratio, byte_miss_ratio, requests, hits,
    evictions, wall_s."""
    k = _as_array(keys, np.uint64, "key")
    s = _as_array(sizes, np.uint64, "size")
    return dict(_core().simulate_objects(k, s, int(capacity), policy, unit))
