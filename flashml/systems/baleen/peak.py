"""Peak-aware admission: where in the day the learned policy spends more of its write budget.

Baleen tunes one admission threshold for the mean write rate and leaves "optimising for peak"
to future work (§3.1). Disk-head time peaks at the same hours every day (the diurnal load),
so the policy can lower its threshold by a bonus in the busiest hours of the day and pay
for it with a slightly higher threshold elsewhere: the average write rate stays at the
target (the threshold is tuned with the schedule in place) while more of the busy hours'
misses become hits. The busy hours are the block of `count` consecutive hours of the day
(UTC) with the most no-cache disk-head time in the training window (every GET and PUT a
backend IO), so the choice uses training data only. Whether a schedule is used at all, and
which, is chosen on held-out data inside the training window (systems/baleen/validation.py).

The rule itself (threshold - bonus in a peak hour) lives in sim/src/core/config.rs
(`PeakSchedule`), compiler/policy_wrapper.c.in and runtime/src/policies/policy.c;
`hour_of_day` here is the same arithmetic, for tests and reports.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from flashml.config import DAY_S, HOUR_S, UNITS
from flashml.settings import PeakSettings
from flashml.simulation import SimConfig
from flashml.systems.baleen.dataset import training_window


def hour_of_day(t: np.ndarray) -> np.ndarray:
    """Hour of the day (0..23, UTC) of trace times in seconds (Rust's rem_euclid, C's fmod)."""
    r = np.fmod(np.asarray(t, dtype=np.float64), DAY_S)
    r = np.where(r < 0.0, r + DAY_S, r)
    return (r / HOUR_S).astype(np.int64)


def hourly_dt_profile(df: pl.DataFrame, train_seconds: float) -> np.ndarray:
    """No-cache disk-head time (s) of the training window by hour of the day (24 values)."""
    t = df["time"].to_numpy()
    w = training_window(t, train_seconds)
    dt = UNITS.dt_seconds(1, df["size"].to_numpy()[w].astype(np.float64))
    return np.bincount(np.minimum(hour_of_day(t[w]), 23), weights=dt, minlength=24)


def with_peak(base: SimConfig, df: pl.DataFrame, peak: PeakSettings,
              train_seconds: float) -> SimConfig:
    """`base` with the peak schedule of `peak` on this trace: its `peak.hours` busiest hours
    of the training window get a threshold `peak.bonus` lower (flat when either is 0)."""
    hours = busy_hours(df, train_seconds, peak.hours) if peak.bonus > 0.0 else ()
    return base.replace(peak_hours=hours, peak_bonus=peak.bonus if hours else 0.0)


def busy_hours(df: pl.DataFrame, train_seconds: float, count: int) -> tuple[int, ...]:
    """The `count` consecutive hours of the day (wrapping at midnight) with the most no-cache
    disk-head time in the training window, ascending (ties: the earlier first hour); () when
    count is 0. One block, not the `count` busiest hours one by one: a single day's hourly
    profile is noisy, and a quieter hour left out in the middle of the busy period (hour 11
    between 10 and 12-19 on a 7-day region1-like trace) gets the off-peak threshold while its
    neighbours take the writes, so its windows set the peak."""
    if count <= 0:
        return ()
    if count >= 24:
        return tuple(range(24))
    prof = hourly_dt_profile(df, train_seconds)
    sums = [sum(prof[(h + i) % 24] for i in range(count)) for h in range(24)]
    start = max(range(24), key=lambda h: (sums[h], -h))
    return tuple(sorted((start + i) % 24 for i in range(count)))


def schedule_candidates(peak: PeakSettings) -> list[tuple[int, float]]:
    """The (hours, bonus) schedules the job validates besides the flat threshold
    (systems/baleen/validation.py): the configured one; none when it is flat. One candidate, not a
    grid: a grid of 6-12 hours x 0.05-0.2 chosen on one held-out day picked by that day's
    noise (its best on the window was among its worst on the evaluation days)."""
    if peak.hours <= 0 or peak.bonus <= 0.0:
        return []
    return [(peak.hours, peak.bonus)]
