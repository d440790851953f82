"""Baselines tuned to the same target write rate: RejectX (history factor) and CoinFlip (p),
plus a threshold tuner for any per-access score (learned models)."""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from flashml.policies.tuning import Tuned, tune_to_write_rate
from flashml.simulation import SimConfig, simulate


def tune_rejectx(df: pl.DataFrame, base: SimConfig, target_mbps: float) -> Tuned:
    cfg = base.replace(admission="rejectx")
    return tune_to_write_rate(lambda f: simulate(df, cfg.replace(rejectx_factor=f)),
                              target_mbps, 1e-4, 1e3, increasing=True, log_scale=True)


def tune_coinflip(df: pl.DataFrame, base: SimConfig, target_mbps: float) -> Tuned:
    cfg = base.replace(admission="coinflip")
    return tune_to_write_rate(lambda p: simulate(df, cfg.replace(coinflip_p=p)),
                              target_mbps, 0.0, 1.0, increasing=True)


def tune_threshold(df: pl.DataFrame, base: SimConfig, target_mbps: float,
                   arrays: dict[str, np.ndarray], **prefetch: Any) -> Tuned:
    """Admission threshold on `arrays['score']` (with any prefetch arrays) at the target."""
    cfg = base.replace(admission="threshold", **prefetch)
    return tune_to_write_rate(lambda t: simulate(df, cfg.replace(threshold=t), **arrays),
                              target_mbps, 0.0, 1.0, increasing=False)
