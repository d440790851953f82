"""Training rows for a learned policy, from the episode job's labels and episodes tables and
the per-access feature matrix (rows aligned with the canonical table)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from flashml.config import DEFAULTS
from flashml.errors import UserError
from flashml.features.contract import Contract, contract
from flashml.features.matrix import Features
from flashml.models.gbm import split_by_key
from flashml.systems.baleen.model import TrainingData

#: Seed of the training-row key sample (the train/valid split uses the GBM seed, 0 by default).
SAMPLE_SEED = 0x5A17


def training_window(times: np.ndarray, train_seconds: float) -> np.ndarray:
    """Rows of the first `train_seconds` of the trace (Baleen trains on the first day)."""
    return times < times[0] + train_seconds


def check_span(times: np.ndarray, train_seconds: float, source: object) -> None:
    """UserError (naming `source`) unless the trace outlasts the training window by at least
    one measurement window: policies are trained on the window and judged on what follows."""
    span = float(times[-1] - times[0]) if len(times) else 0.0
    window_s = DEFAULTS.window_s
    if span < train_seconds + window_s:
        fit = (span - window_s) / 3600.0
        hint = (f"give a longer trace, or a shorter training window: --train-hours H with "
                f"H <= {fit:.2f}" if fit > 0 else "give a longer trace")
        raise UserError(
            f"{source}: the trace spans {span:,.0f} s ({span / 3600:.2f} h), but policies are "
            f"trained on its first {train_seconds:,.0f} s and judged on the rest, in "
            f"{window_s:.0f}-s windows; {hint} (if the trace's time unit is not seconds, see "
            f"--time-scale)")


#: The columns `training_data` reads of each table, and the rows it keeps (any K, sample).
LABEL_COLUMNS = ("row", "key", "opt_label", "position")
EPISODE_COLUMNS = ("first_row", "key", "range_start", "range_end", "when_label", "admitted")


def training_tables(folder: Path) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The labels and episodes of an episode build (`folder`) that `training_data` reads:
    the labelled GETs and the OPT-admitted episodes, in their tables' order, with only the
    columns it uses (at 10 M accesses 0.2 GB instead of the tables' 0.9 GB, held while the
    loop trains and builds its next episodes)."""
    labels = (pl.scan_parquet(folder / "labels.parquet").filter(pl.col("opt_label") >= 0)
              .select(LABEL_COLUMNS).collect())
    episodes = (pl.scan_parquet(folder / "episodes.parquet").filter(pl.col("admitted"))
                .select(EPISODE_COLUMNS).collect())
    return labels, episodes


def training_data(feats: Features, times: np.ndarray, labels: pl.DataFrame,
                  episodes: pl.DataFrame, train_seconds: float,
                  c: Contract | None = None, max_position: int | None = None,
                  max_rows: int | None = None) -> TrainingData:
    """Admission rows: the labelled GETs (the first K of each episode) of the training window,
    or only the first `max_position` of them. With more than `max_rows` admission rows, the
    rows of a sample of the keys (blocks) are kept, about `max_rows` of them, with the
    ML-Range/ML-When rows of the same keys: a key sample, as the artifact's traces are
    (baleen-artifact-notes.md "Samples are taken by key"), so every kept block keeps its
    whole history."""
    c = c or contract()
    window = training_window(times, train_seconds)
    lab = labels.filter(pl.col("opt_label") >= 0)
    if max_position is not None:
        lab = lab.filter(pl.col("position") < max_position)
    rows = lab["row"].to_numpy().astype(np.int64)
    keep = window[rows]
    adm_keys = lab["key"].to_numpy()
    share = 1.0
    if max_rows is not None and int(keep.sum()) > max_rows:
        share = max_rows / int(keep.sum())
        keep &= split_by_key(adm_keys, share, seed=SAMPLE_SEED)
    rows = rows[keep]
    adm_y = lab["opt_label"].to_numpy()[keep].astype(np.float64)
    adm_keys = adm_keys[keep]
    eps = episodes.filter(pl.col("admitted"))
    first = eps["first_row"].to_numpy().astype(np.int64)
    ekeep = window[first]
    if share < 1.0:
        ekeep &= split_by_key(eps["key"].to_numpy(), share, seed=SAMPLE_SEED)
    first = first[ekeep]
    return TrainingData(
        adm_X=feats[rows], adm_y=adm_y, adm_keys=adm_keys,
        ep_X=feats[first][:, c.indices("range")],
        ep_start=eps["range_start"].to_numpy()[ekeep],
        ep_end=eps["range_end"].to_numpy()[ekeep],
        ep_when=eps["when_label"].to_numpy()[ekeep],
        ep_keys=eps["key"].to_numpy()[ekeep],
    )
