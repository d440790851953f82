"""The readahead feature contract (KML; features/readahead.toml) and the features
themselves: per window of page-cache events, the paper's five inputs in the contract's order.

    from flashml.features.readahead import contract, window_features
    rows = window_features(events, readahead_kib=128)   # dicts, one per non-empty window
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from flashml.features.contract import canonical_hash

READAHEAD_PATH = Path(__file__).resolve().parent / "readahead.toml"


@dataclass(frozen=True)
class Contract:
    name: str
    version: int
    window_ms: int
    page_bytes: int
    names: tuple[str, ...]
    docs: tuple[str, ...]
    hash: str

    @property
    def num_features(self) -> int:
        return len(self.names)


#: The feature names this code computes, in order; the contract must list exactly these.
NAMES = ("tracepoints", "offset_mean", "offset_std", "offset_absdiff_mean", "readahead_kib")


def load(path: Path = READAHEAD_PATH) -> Contract:
    raw = tomllib.loads(path.read_text())
    head = raw["contract"]
    names = tuple(f["name"] for f in raw["feature"])
    if names != NAMES:
        raise ValueError(f"{path}: features must be {', '.join(NAMES)} in this order, got "
                         f"{', '.join(names)}")
    w, pb = int(head["window_ms"]), int(head["page_bytes"])
    if not (1 <= w <= 3_600_000 and pb in (4096, 8192, 16384, 65536)):
        raise ValueError(f"{path}: window_ms in 1..3600000 and page_bytes a page size, "
                         f"got {w}, {pb}")
    canonical = {"contract": head, "feature": raw["feature"]}
    digest = canonical_hash(canonical)
    return Contract(name=head["name"], version=int(head["version"]), window_ms=w,
                    page_bytes=pb, names=names, docs=tuple(f["doc"] for f in raw["feature"]),
                    hash=digest)


@cache
def contract() -> Contract:
    """The readahead contract of this checkout (cached)."""
    return load()


def window_features(events: Iterable[tuple[float, int, int]], readahead_kib: float,
                    window_s: float | None = None) -> list[dict[str, Any]]:
    """The contract's features of every window of `window_s` seconds (default: the
    contract's window) from the first event, for events (time s, inode, page offset) in time
    order: tracepoints, the mean and population standard deviation of the window's page
    offsets (Welford), the mean absolute difference of its consecutive offsets, and the
    readahead. Windows without events are left out.
    Each row also carries `window` (its index from the first event)."""
    window_s = contract().window_ms / 1000 if window_s is None else window_s
    rows: list[dict[str, Any]] = []
    mean, m2 = 0.0, 0.0
    t0: float | None = None
    cur: int | None = None
    count, absdiff, last = 0, 0.0, 0

    def flush(w: int) -> None:
        rows.append({"window": w, "tracepoints": count, "offset_mean": mean,
                     "offset_std": math.sqrt(m2 / count) if count > 1 else 0.0,
                     "offset_absdiff_mean": absdiff / (count - 1) if count > 1 else 0.0,
                     "readahead_kib": float(readahead_kib)})

    for ts, _ino, page in events:
        if t0 is None:
            t0 = ts
        w = int((ts - t0) // window_s)
        if cur is not None and w != cur:
            flush(cur)
            count, absdiff, mean, m2 = 0, 0.0, 0.0, 0.0
        if count:
            absdiff += abs(page - last)
        cur, last = w, page
        count += 1
        d = page - mean
        mean += d / count
        m2 += d * (page - mean)
    if cur is not None:
        flush(cur)
    return rows


def feature_vector(row: dict[str, Any]) -> list[float]:
    """A window's features in the contract's order (what flashml_readahead_kib reads)."""
    return [float(row[n]) for n in contract().names]
