"""Caps and defaults of the numbers the trace commands take, checked before any work (the
readers' caps on what a trace line may hold live in `readers/base.py` and
`readers/tectonic.py`; ingest's on expansion and chunks in `ingest.py`). Only the standard
library and `flashml.config`/`flashml.settings` are imported: the command-line options
(flashml/commands/trace.py) are declared from these without loading NumPy."""

from __future__ import annotations

import math
from typing import Any

from flashml.config import UNITS
from flashml.errors import UserError
from flashml.settings import MAX_SEED

MIN_SAMPLE_RATIO = 1e-6
"""The smallest sample ratio, in percent (one access in 10^8): every rate is scaled by
100 / ratio, so a smaller one turns a few accesses into absurd full-node rates (1e-300
would overflow them)."""
MAX_GENERATED_ACCESSES = 100_000_000
"""The most accesses (requests) `trace generate` and `trace mix` write: the generators
hold the whole trace in memory (about 100 bytes an access)."""
MAX_DAYS = 3650.0
"""The longest generated trace, in days (ten years)."""


def check_seed(seed: Any, option: str = "--seed") -> int:
    """A seed: an integer in [0, MAX_SEED] (not a bool)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise UserError(f"{option} must be an integer in 0..{MAX_SEED} (2^32 - 1), got {seed!r}")
    return seed


def check_sample_ratio(ratio: Any, what: str = "--sample-ratio") -> float:
    """A sample ratio in percent: finite, in [MIN_SAMPLE_RATIO, 100]."""
    try:
        v = float(ratio)
    except (TypeError, ValueError):
        v = math.nan
    if not (math.isfinite(v) and MIN_SAMPLE_RATIO <= v <= 100.0):
        raise UserError(f"{what} must be a percentage in [{MIN_SAMPLE_RATIO:g}, 100] "
                        f"(rates are scaled by 100 / ratio), got {ratio!r}")
    return v


def check_accesses(n: Any, option: str = "--accesses") -> int:
    """A number of generated accesses: an integer in [1, MAX_GENERATED_ACCESSES]."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_GENERATED_ACCESSES:
        raise UserError(f"{option} must be an integer number of accesses in "
                        f"1..{MAX_GENERATED_ACCESSES:,}, got {n!r}")
    return n


def check_days(days: Any, option: str = "--days") -> float:
    """A generated trace's length in days: finite, > 0, at most MAX_DAYS."""
    try:
        v = float(days)
    except (TypeError, ValueError):
        v = math.nan
    if not (math.isfinite(v) and 0 < v <= MAX_DAYS):
        raise UserError(f"{option} must be a number of days in (0, {MAX_DAYS:g}], got {days!r}")
    return v


# Ingest's caps, here (not in ingest.py) so that building the CLI parser loads no NumPy.
CHUNK_BYTES = 16 * 1024 * 1024
"""The input chunk size by default (`--chunk-mb 16`)."""
MAX_CHUNK_BYTES = 1 << 30
"""The largest input chunk (`--chunk-mb` at most 1024): peak memory is about ten times it."""
DEFAULT_MAX_EXPANSION = 256
"""`--max-expansion`: accesses per input line, on average over the trace so far, beyond
FREE_ACCESSES (op_count repeats and IOs split into blocks make more than one per line)."""
MAX_MAX_EXPANSION = 1 << 20
"""The largest `--max-expansion`: every line at the largest op_count
(readers.tectonic.MAX_OP_COUNT; test_trace_bounds checks they agree)."""
FREE_ACCESSES = 1 << 24
"""The first 16,777,216 accesses of a trace are allowed whatever `--max-expansion` says."""


# The readers' options (readers/base.py, readers/cloudphysics.py), here for the same reason.
MAX_IO_BYTES = 1 << 32
"""The largest size of one IO (4 GiB): larger is corrupt input, and would be split into
that many blocks' rows."""
MIN_BLOCK_BYTES = UNITS.segment_bytes
"""The smallest block (`--block-bytes`): one cache segment (128 KiB); a block is a whole
number of segments."""
MAX_BLOCK_BYTES = MAX_IO_BYTES
"""The largest block (`--block-bytes`): 4 GiB, the largest IO."""
MIN_TIME_SCALE, MAX_TIME_SCALE = 1e-12, 1e6
"""`--time-scale` (seconds per source time unit) lies in [1e-12, 1e6]: picoseconds to about
11.6 days; outside that range the scaled times lose their precision (or are subnormal
numbers, where every access would get the same time) or overflow the largest time."""
SECTOR_BYTES = 512
"""A cloudphysics lbn's sector by default (`--sector-bytes`)."""
MAX_SECTOR_BYTES = 1 << 32
"""The largest sector (`--sector-bytes`)."""


# A mix's sizes (systems/mlcache/multistream.py), here for the same reason.
MAX_STREAMS = 1024
"""The most streams of a mix."""
MAX_PHASES = 10_000
"""The most intensity phases of a mix."""
MAX_SCALE = 10_000_000
"""The largest typical working set of a stream, in pages (catalogues are up to 20x it)."""
PHASES = 8
"""Intensity phases of a mix by default."""
SCALE = 200
"""A stream's typical working set by default, in pages."""
