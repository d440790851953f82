"""Accesses that one source line repeats over the next second, written in time order with
bounded memory.

A Tectonic 202110/2023 line with `op_count` n at time t stands for n accesses at
t + i / n (i < n). Lines overlap in time, so their repeats interleave; the output is the
stable sort of every repeat by time (line order, then i, breaks ties). `Spreader` holds the
lines whose repeats are not all written (one row each, never their repeats), and writes
the repeats up to a time `horizon` (no later line can have a repeat before it) in batches
of at most `budget` rows: each batch is every pending repeat with time <= T for a cutoff T,
so the batches, each sorted, concatenate to the global order. A time t + i / n is computed
in float64 exactly as `t + (i / n)`; counts below a cutoff come from a bisection over i on
that same expression, so a repeat is never written twice or lost to rounding.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import polars as pl

from flashml.errors import TraceError

ROW_BUDGET = 1 << 20
"""The most accesses ingest builds at once (one written slice, about 100-200 MB)."""
MAX_PENDING_LINES = 1 << 21
"""The most lines whose op_count repeats may wait to be written (those within one second
of the latest time): more is refused, as it would hold that many rows in memory."""


class Spreader:
    """Pending lines (canonical rows with `_repeats`) and their repeats still to write."""

    def __init__(self, path: Path, budget: int = ROW_BUDGET,
                 max_pending: int = MAX_PENDING_LINES) -> None:
        self.path = path
        self.budget = max(1, int(budget))
        self.max_pending = int(max_pending)
        self.rows: pl.DataFrame | None = None
        self.t = np.empty(0, dtype=np.float64)
        self.n = np.empty(0, dtype=np.int64)
        self.k = np.empty(0, dtype=np.int64)  # the next repeat of each pending line

    def add(self, frame: pl.DataFrame) -> None:
        """Queue canonical rows (one per line, with `_repeats`), in source order."""
        if frame.is_empty():
            return
        n = frame["_repeats"].to_numpy().astype(np.int64)
        rows = frame.drop("_repeats")
        pending = 0 if self.rows is None else len(self.rows)
        if pending + len(rows) > self.max_pending:
            line = int(rows["src_line"][max(0, self.max_pending - pending)])
            raise TraceError(self.path, f"more than {self.max_pending} lines with op_count "
                             "repeats within one second (their repeats, spread over the next "
                             "second, must be held to be written in time order)", line=line,
                             field="op_count")
        self.rows = rows if self.rows is None else pl.concat([self.rows, rows])
        self.t = np.concatenate([self.t, rows["time"].to_numpy().astype(np.float64)])
        self.n = np.concatenate([self.n, n])
        self.k = np.concatenate([self.k, np.zeros(len(n), dtype=np.int64)])

    def _time(self, i: np.ndarray, sel: slice | np.ndarray = slice(None)) -> np.ndarray:
        return self.t[sel] + i / self.n[sel]

    def _counts(self, cutoff: float) -> np.ndarray:
        """Per pending line, how many of its unwritten repeats have time <= cutoff."""
        lo, hi = self.k.copy(), self.n.copy()  # the first i in [k, n] with time > cutoff
        while True:
            open_ = lo < hi
            if not open_.any():
                break
            mid = (lo + hi) // 2
            later = np.where(open_, self._time(np.minimum(mid, self.n - 1)) > cutoff, False)
            hi = np.where(open_ & later, mid, hi)
            lo = np.where(open_ & ~later, mid + 1, lo)
        return lo - self.k

    def until(self, horizon: float | None) -> Iterator[pl.DataFrame]:
        """Batches (each sorted by time, at most `budget` rows unless more share one time)
        of every pending repeat with time <= horizon (None: all of them)."""
        while self.rows is not None and len(self.rows):
            if horizon is None:
                counts = self.n - self.k
            else:
                counts = self._counts(horizon)
                if not counts.any():
                    return
            if counts.sum() > self.budget:
                counts = self._below_budget(horizon)
            yield self._take(counts)

    def _below_budget(self, horizon: float | None) -> np.ndarray:
        """Counts for a cutoff T whose batch holds at most `budget` rows (at least the
        earliest pending time's rows, which may exceed it only when that many share it)."""
        lo = float(self._time(self.k).min())
        hi = float(self.t.max()) + 1.0 if horizon is None else horizon
        best = self._counts(lo)
        if best.sum() > self.budget:
            return best
        for _ in range(200):
            mid = lo + (hi - lo) / 2
            if not lo < mid < hi:
                break
            counts = self._counts(mid)
            total = counts.sum()
            if total > self.budget:
                hi = mid
            else:
                lo, best = mid, counts
                if 2 * total >= self.budget:
                    break
        return best

    def _take(self, counts: np.ndarray) -> pl.DataFrame:
        assert self.rows is not None
        total = int(counts.sum())
        line = np.repeat(np.arange(len(counts)), counts)
        first = np.cumsum(counts) - counts
        i = self.k[line] + (np.arange(total, dtype=np.int64) - first[line])
        batch = self.rows[line].with_columns(time=pl.Series(self._time(i, line),
                                                            dtype=pl.Float64))
        self.k = self.k + counts
        done = self.k >= self.n
        if done.any():
            keep = ~done
            self.rows = self.rows.filter(pl.Series(keep))
            self.t, self.n, self.k = self.t[keep], self.n[keep], self.k[keep]
        if (batch["time"].diff() < 0).any():
            batch = batch.sort("time", maintain_order=True)
        return batch
