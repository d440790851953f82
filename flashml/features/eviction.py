"""The eviction feature contract (features/eviction.toml: LRB's 44 features for MAT) and a slow,
obvious reference computation of them.

The hash is sha256 over a canonical JSON rendering of the contract (the same rule as the
admission contract's, features/contract.py), so it changes whenever a feature, its order, the
memory window or the label convention changes, and not when comments or whitespace do.

`features(history, now)` is the reference the Rust simulator (sim/src/mat/lrb_features.rs) is
tested against: it recomputes everything from the object's access times on every call, in
plain Python floats, following the conventions written at the top of eviction.toml.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from flashml.features.contract import canonical_hash

EVICTION_PATH = Path(__file__).resolve().parent / "eviction.toml"


@dataclass(frozen=True)
class Contract:
    name: str
    version: int
    memory_window: int
    max_past_distances: int
    edc_base_log2: int
    num_edcs: int
    names: tuple[str, ...]
    docs: tuple[str, ...]
    hash: str

    @property
    def num_features(self) -> int:
        return len(self.names)

    @property
    def edc_windows(self) -> tuple[int, ...]:
        return tuple(2 ** (self.edc_base_log2 + i) for i in range(self.num_edcs))

    @property
    def max_decay_index(self) -> int:
        """LRB's max_hash_edc_idx: the largest number of halvings an EDC decays by."""
        return self.memory_window // 2 ** self.edc_base_log2 - 1

    @property
    def not_returned_label(self) -> float:
        return math.log1p(2 * self.memory_window)


def _canonical(raw: dict) -> dict:
    return {"contract": raw["contract"], "label": raw["label"], "feature": raw["feature"]}


def load(path: Path = EVICTION_PATH) -> Contract:
    raw = tomllib.loads(path.read_text())
    head = raw["contract"]
    names = tuple(f["name"] for f in raw["feature"])
    if len(set(names)) != len(names):
        raise ValueError(f"{path}: duplicate feature names")
    m, e = int(head["max_past_distances"]), int(head["num_edcs"])
    want = ("age", *(f"delta_{j}" for j in range(1, m + 1)), "size", "n_within",
            *(f"edc_{i}" for i in range(e)))
    if names != want:
        raise ValueError(f"{path}: the features must be LRB's layout {want}, got {names}")
    digest = canonical_hash(_canonical(raw))
    return Contract(name=head["name"], version=int(head["version"]),
                    memory_window=int(head["memory_window"]), max_past_distances=m,
                    edc_base_log2=int(head["edc_base_log2"]), num_edcs=e, names=names,
                    docs=tuple(f.get("doc", "") for f in raw["feature"]), hash=digest)


@cache
def contract() -> Contract:
    """The eviction contract of this checkout (cached)."""
    return load()


def history(times: list[int], memory_window: int) -> list[int]:
    """The accesses an object remembers: those after its last gap of >= memory_window."""
    start = 0
    for i in range(1, len(times)):
        if times[i] - times[i - 1] >= memory_window:
            start = i
    return times[start:]


def features(times: list[int], sizes: list[int], now: int,
             memory_window: int | None = None, c: Contract | None = None) -> list[float]:
    """The 44 features of an object at logical time `now` (> every access time), from the
    times of all its past requests (ascending) and their sizes in bytes."""
    c = c or contract()
    w = c.memory_window if memory_window is None else memory_window
    if not times or any(t >= now for t in times) or len(times) != len(sizes):
        raise ValueError("need at least one past access, all before now, and a size each")
    keep = len(times) - len(history(times, w))
    times, sizes = times[keep:], sizes[keep:]
    last = times[-1]
    out: list[float] = [float(now - last)]
    # inter-access distances, most recent first; LRB stores the last 31
    dists = [times[i] - times[i - 1] for i in range(len(times) - 1, 0, -1)]
    dists = dists[:c.max_past_distances]
    out += [float(d) for d in dists]
    out += [math.nan] * (c.max_past_distances - len(dists))
    out.append(float(sizes[0]))
    total, within = 0, 0
    for d in dists:
        total += d
        if total < w:
            within += 1
    out.append(float(within))
    max_idx = w // 2 ** c.edc_base_log2 - 1
    for win in c.edc_windows:
        def decay(d: int, win: int = win) -> float:
            return 0.5 ** min(d // win, max_idx)
        edc = 1.0
        for i in range(1, len(times)):
            edc = edc * decay(times[i] - times[i - 1]) + 1.0
        out.append(edc * decay(now - last))
    return out


def features_in_trace(keys: list[int], sizes: list[int], key: int, now: int,
                      memory_window: int | None = None) -> list[float]:
    """`features` of `key` at `now`, reading its past requests from a trace (keys, sizes)."""
    ts = [i for i in range(now) if keys[i] == key]
    return features(ts, [sizes[i] for i in ts], now, memory_window)


def label(distance: int | None, memory_window: int | None = None) -> float:
    """The training label of a candidate whose next access is `distance` logical requests after
    its last one (None: it never came back)."""
    w = contract().memory_window if memory_window is None else memory_window
    if distance is None or distance >= w:
        return math.log1p(2 * w)
    return math.log1p(distance)
