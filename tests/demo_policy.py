"""Small but real LightGBM policy models trained on a trace, for tests and benchmarks.

Not the training pipeline (that is models/): labels here are simple stand-ins.
- admission: the block is read again (GET) within an hour after this GET;
- range_start / range_end: the first / last segment any GET of the block touches;
- when: the block's span is wider than this access's segments.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from flashml.compiler.bundle import round_range, save_policy_models, when_matrix
from flashml.features.contract import contract
from flashml.features.online import base_columns, feature_matrix


def demo_labels(df: pl.DataFrame) -> dict[str, np.ndarray]:
    b = base_columns(df).with_columns(_row=pl.int_range(pl.len()))
    gets = b.filter(pl.col("is_get"))
    nxt = gets.with_columns(_next=pl.col("time").shift(-1).over("key")).select("_row", "_next")
    span = gets.group_by("key").agg(_lo=pl.col("segment_start").min(),
                                    _hi=pl.col("segment_end").max())
    t = (b.join(nxt, on="_row", how="left").join(span, on="key", how="left").sort("_row")
         .with_columns(pl.col("_lo").fill_null(pl.col("segment_start")),
                       pl.col("_hi").fill_null(pl.col("segment_end"))))
    again = (t["_next"].is_not_null() & ((t["_next"] - t["time"]) <= 3600.0)).to_numpy()
    lo, hi = t["_lo"].to_numpy(), t["_hi"].to_numpy()
    wider = (lo < t["segment_start"].to_numpy()) | (hi > t["segment_end"].to_numpy())
    return {"admit": again.astype(np.int32), "start": lo.astype(np.float64),
            "end": hi.astype(np.float64), "wider": wider.astype(np.int32)}


def train_demo_models(df: pl.DataFrame, *, num_trees: int = 20, num_leaves: int = 15,
                      rows: np.ndarray | None = None, seed: int = 0) -> dict[str, Any]:
    """Four Boosters (admission, range_start, range_end, when) trained on `rows` of df."""
    import lightgbm as lgb

    c = contract()
    x = feature_matrix(df)
    y = demo_labels(df)
    idx = np.arange(df.height) if rows is None else rows
    params = {"num_leaves": num_leaves, "learning_rate": 0.1, "min_data_in_leaf": 20,
              "verbose": -1, "seed": seed, "deterministic": True, "num_threads": 2}

    def fit(objective: str, xm: np.ndarray, label: np.ndarray, names: list[str]) -> Any:
        ds = lgb.Dataset(xm[idx], label[idx], feature_name=names, free_raw_data=False)
        return lgb.train({**params, "objective": objective}, ds, num_boost_round=num_trees)

    boosters = {"admission": fit("binary", x, y["admit"], c.names)}
    xr = np.ascontiguousarray(x[:, c.indices("range")])
    boosters["range_start"] = fit("regression", xr, y["start"], c.model_features("range"))
    boosters["range_end"] = fit("regression", xr, y["end"], c.model_features("range"))
    ps, pe = round_range(boosters["range_start"].predict(xr), boosters["range_end"].predict(xr))
    boosters["when"] = fit("binary", when_matrix(x, ps, pe), y["wider"],
                           c.model_features("when"))
    return boosters


#: the knobs a test bundle of the demo models is saved with (save_policy_models' keywords)
DEMO_PARAMS = {"admit_threshold": 0.5, "when_threshold": 0.5, "eviction_age_s": 3600.0,
               "target_write_rate_mbps": 35.599}


def write_demo_bundle(df: pl.DataFrame, out: Path, *, admit_threshold: float = 0.5,
                      when_threshold: float = 0.5, peak_hours: tuple[int, ...] = (),
                      peak_bonus: float = 0.0, **kw: Any) -> Path:
    boosters = train_demo_models(df, **kw)
    return save_policy_models(out, boosters, admit_threshold=admit_threshold,
                              when_threshold=when_threshold, eviction_age_s=7200.0,
                              target_write_rate_mbps=35.599,
                              metrics={"demo_auc": 0.0}, peak_hours=peak_hours,
                              peak_bonus=peak_bonus)


def demo_trace(directory: Path, *, accesses: int = 40_000, preset: str = "region1-like",
               seed: int = 3) -> pl.DataFrame:
    """A generated, ingested trace (canonical table) under `directory`."""
    from flashml.trace.canonical import read_table
    from flashml.trace.generate import generate_trace
    from flashml.trace.ingest import ingest

    directory.mkdir(parents=True, exist_ok=True)
    raw, table = directory / f"{preset}-{seed}.trace", directory / f"{preset}-{seed}.parquet"
    if not table.exists():
        generate_trace(preset, seed, raw, accesses=accesses, progress=False)
        ingest(raw, table, "tectonic", progress=False)
    return read_table(table)[0]


def split_by_block(df: pl.DataFrame, train_share: float = 0.7) -> tuple[np.ndarray, np.ndarray]:
    """Row indices of a 70/30 split by block id (as the artifact trains)."""
    from flashml.trace.keys import splitmix64

    h = splitmix64(df["key"].to_numpy().astype(np.uint64)) % np.uint64(1000)
    train = h < np.uint64(int(train_share * 1000))
    return np.flatnonzero(train), np.flatnonzero(~train)


def threshold_edge_rows(thresholds: Any, base: np.ndarray, *,
                        nan_tail: bool = False) -> np.ndarray:
    """Rows that sit on a model's splits, for the equality tests of its evaluators: for
    every feature f and each t of `thresholds[f]`, a row with f at t, just below and just
    above it; then NaN, +inf, -inf, 0.0 and -0.0 in f; with `nan_tail`, also a row with f
    and every feature after it NaN. The other features come from `base`'s rows in turn."""
    rows: list[np.ndarray] = []

    def row(f: int | slice, v: float) -> None:
        r = base[len(rows) % len(base)].copy()
        r[f] = v
        rows.append(r)

    for f, ts in enumerate(thresholds):
        for t in ts:
            for v in (t, np.nextafter(t, -np.inf), np.nextafter(t, np.inf)):
                row(f, v)
        for v in (np.nan, np.inf, -np.inf, 0.0, -0.0):
            row(f, v)
        if nan_tail:
            row(slice(f, None), np.nan)
    return np.array(rows)
