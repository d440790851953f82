"""Stable 64-bit cache keys: FNV-1a for names, splitmix64 to combine them with block numbers.

Keys must be identical across runs, machines and library versions, so nothing here uses a
library's hash function (those change between versions).
"""

from __future__ import annotations

import numpy as np

_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_MASK = (1 << 64) - 1


def fnv1a64(text: str) -> int:
    h = _FNV_OFFSET
    for b in text.encode("utf-8"):
        h = ((h ^ b) * _FNV_PRIME) & _MASK
    return h


def splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser on a uint64 array (wrapping arithmetic)."""
    x = x.astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        x += np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    return x


def combine(scope: np.ndarray, block: np.ndarray) -> np.ndarray:
    """Key of `block` in `scope` (a host, shard or disk hash): splitmix64(scope ^ mix(block))."""
    return splitmix64(scope.astype(np.uint64) ^ splitmix64(block.astype(np.uint64)))


def hash_names(names: np.ndarray, cache: dict[str, int]) -> np.ndarray:
    """FNV-1a of each string (memoised in `cache`: traces have few distinct hosts)."""
    uniq, inverse = np.unique(names.astype(str), return_inverse=True)
    hashed = np.empty(len(uniq), dtype=np.uint64)
    for i, name in enumerate(uniq):
        h = cache.get(name)
        if h is None:
            h = cache[name] = fnv1a64(name)
        hashed[i] = h
    return hashed[inverse]
