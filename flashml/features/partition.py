"""The partition feature contract (MLCache; features/partition.toml) and the
features themselves: per interval, per stream slot, the monitor's reuse-distance histogram
and request share, laid out as the network and `flashml_partition` read them.

    from flashml.features.partition import contract, interval_features
    x = interval_features(histograms, counts)   # (intervals, contract().num_features)
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from flashml.features.contract import canonical_hash

PARTITION_PATH = Path(__file__).resolve().parent / "partition.toml"


@dataclass(frozen=True)
class Contract:
    name: str
    version: int
    max_streams: int
    steps: int
    hash: str

    @property
    def per_stream(self) -> int:
        """Features per stream slot: `steps` histogram buckets, then the request share."""
        return self.steps + 1

    @property
    def num_features(self) -> int:
        return self.max_streams * self.per_stream

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f"s{s}_{n}" for s in range(self.max_streams)
                     for n in (*(f"hist_{j}" for j in range(self.steps)), "freq"))


def load(path: Path = PARTITION_PATH) -> Contract:
    raw = tomllib.loads(path.read_text())
    head = raw["contract"]
    slot = tuple(f["name"] for f in raw["slot_feature"])
    if slot != ("hist", "freq"):
        raise ValueError(f"{path}: slot_feature must be hist then freq, got {slot}")
    m, t = int(head["max_streams"]), int(head["steps"])
    if not (1 <= m <= 256 and 1 <= t <= 256):
        raise ValueError(f"{path}: max_streams and steps must be in 1..256, got {m}, {t}")
    canonical = {"contract": head, "slot_feature": raw["slot_feature"]}
    digest = canonical_hash(canonical)
    return Contract(name=head["name"], version=int(head["version"]), max_streams=m, steps=t,
                    hash=digest)


@cache
def contract() -> Contract:
    """The partition contract of this checkout (cached)."""
    return load()


def interval_features(histograms: Any, counts: Any, c: Contract | None = None) -> np.ndarray:
    """The contract's features of every interval: histograms (intervals, k, steps) from
    `flashml.systems.mlcache.partitioning.partition_curves`, counts (intervals, k) the requests of
    each stream in each interval (those the cache sees). Both are divided by the interval's
    requests; slots k.. are zero. float64 (intervals, num_features)."""
    c = c or contract()
    h = np.asarray(histograms, dtype=np.float64)
    n = np.asarray(counts, dtype=np.float64)
    if h.ndim != 3 or n.shape != h.shape[:2] or h.shape[2] != c.steps:
        raise ValueError(f"histograms (intervals, streams, {c.steps}) and counts (intervals, "
                         f"streams) expected, got {h.shape} and {n.shape}")
    n_iv, k = n.shape
    if k > c.max_streams:
        raise ValueError(f"{k} streams; the partition contract has at most {c.max_streams}")
    total = n.sum(axis=1, keepdims=True)
    total[total == 0] = 1.0
    x = np.zeros((n_iv, c.max_streams, c.per_stream))
    x[:, :k, :c.steps] = h / total[:, :, None]
    x[:, :k, c.steps] = n / total
    return x.reshape(n_iv, c.num_features)


def interval_counts(streams: Any, n_streams: int, interval: int) -> np.ndarray:
    """Requests of each stream in each interval of `interval` requests: (intervals, k)."""
    s = np.asarray(streams, dtype=np.int64)
    iv = np.arange(len(s)) // interval
    n_iv = -(-len(s) // interval)
    return np.bincount(iv * n_streams + s, minlength=n_iv * n_streams).reshape(n_iv, n_streams)
