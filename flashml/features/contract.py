"""Load the feature contract (features/contract.toml) and its hash.

The hash is sha256 over a canonical JSON rendering of the contract, so it changes whenever a
feature, its order, or a convention changes, and not when comments or whitespace do.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

CONTRACT_PATH = Path(__file__).resolve().parent / "contract.toml"
SOURCES = ("op", "namespace", "user", "segment_start", "segment_end", "size", "block_count",
           "segment_count")


@dataclass(frozen=True)
class Feature:
    index: int
    name: str
    source: str
    hour: int | None
    doc: str


@dataclass(frozen=True)
class Contract:
    name: str
    version: int
    hour_seconds: int
    hours: int
    admission: tuple[Feature, ...]
    models: dict[str, tuple[str, ...]]
    hash: str

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.admission]

    @property
    def num_features(self) -> int:
        return len(self.admission)

    def model_features(self, model: str) -> list[str]:
        return list(self.models[model])

    def indices(self, model: str) -> list[int]:
        """Indices into the admission vector of a model's features that come from it."""
        pos = {n: i for i, n in enumerate(self.names)}
        return [pos[n] for n in self.models[model] if n in pos]



def canonical_hash(obj: Any) -> str:
    """sha256 of a contract's canonical JSON (sorted keys, no spaces): every contract's hash
    (admission, eviction, partition, readahead), so one change of wording anywhere in a
    contract's fields changes it."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True,
                                     separators=(",", ":")).encode()).hexdigest()


def _canonical(raw: dict) -> dict:
    return {"contract": raw["contract"], "admission": raw["admission"], "models": raw["models"]}


def load(path: Path = CONTRACT_PATH) -> Contract:
    raw = tomllib.loads(path.read_text())
    head = raw["contract"]
    feats = []
    for i, f in enumerate(raw["admission"]):
        if f["source"] not in SOURCES:
            raise ValueError(f"{path}: feature {f['name']!r}: unknown source {f['source']!r}")
        hour = f.get("hour")
        if (hour is None) != (f["source"] not in ("block_count", "segment_count")):
            raise ValueError(f"{path}: feature {f['name']!r}: 'hour' goes with counts only")
        if hour is not None and not 1 <= hour <= head["hours"]:
            raise ValueError(f"{path}: feature {f['name']!r}: hour {hour} outside 1..hours")
        feats.append(Feature(i, f["name"], f["source"], hour, f.get("doc", "")))
    names = [f.name for f in feats]
    if len(set(names)) != len(names):
        raise ValueError(f"{path}: duplicate feature names")
    digest = canonical_hash(_canonical(raw))
    return Contract(name=head["name"], version=int(head["version"]),
                    hour_seconds=int(head["hour_seconds"]), hours=int(head["hours"]),
                    admission=tuple(feats),
                    models={k: tuple(v) for k, v in raw["models"].items()}, hash=digest)


@cache
def contract() -> Contract:
    """The contract of this checkout (cached)."""
    return load()
