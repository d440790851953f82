"""The admission features of every access, kept compact: float64 rows on demand.

A float64 matrix of the contract's 18 features is 144 bytes an access (1.44 GB at 10 M
accesses, the job's largest array). Six of the features are the access's own fields (op,
namespace, user, its first and last segment, its size): the trace's columns already hold
them. The twelve counts are small integers. `FeatureMatrix` keeps the counts as uint32, one
row of the accesses per count (48 bytes an access, exact: `counts_of` checks; each count's
values contiguous, as blocks read them), borrows the trace's columns, and gives
float64 rows, in the contract's order and with the contract's values, wherever code reads
the matrix: `m[a:b]` (a view), `m[rows]` and `m[rows, cols]` (float64 arrays), `block(a, b,
cols)`, `shape`, `len`; `np.asarray(m)` builds the whole matrix. The tree evaluator scores it
block by block (`flashml.models.forest.predict`), and its distinct rows in some columns are
found without building those columns (`distinct`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from flashml.features.contract import Contract, contract

#: The sources of the features that are an access's own fields (the rest are counts).
ROW_SOURCES = ("op", "namespace", "user", "segment_start", "segment_end", "size")
#: The trace columns a `FeatureMatrix` borrows.
COLUMNS = ("op", "namespace", "user", "offset", "size")
#: The columns it derives from them once (`_segments`).
SEGMENTS = ("segment_start", "segment_end")


def count_columns(c: Contract) -> list[int]:
    """The contract's indices of the count features (those with an hour), in order."""
    return [f.index for f in c.admission if f.source not in ROW_SOURCES]


def counts_of(full: np.ndarray, c: Contract | None = None) -> np.ndarray:
    """The count columns of a float64 feature matrix as uint32, one row per count (counts x
    accesses); ValueError unless every count is an integer in uint32's range (then the
    uint32 values widen back to the same doubles)."""
    c = c or contract()
    cols = count_columns(c)
    out = np.empty((len(cols), len(full)), dtype=np.uint32)
    step = 1 << 20
    for lo in range(0, len(full), step):
        part = full[lo:lo + step, cols].T
        if part.size and not (np.all(part >= 0) and np.all(part <= np.iinfo(np.uint32).max)):
            raise ValueError("a count feature is negative or beyond uint32")
        out[:, lo:lo + step] = part
        if not np.array_equal(out[:, lo:lo + step].astype(np.float64), part):
            raise ValueError("a count feature is not an integer")
    return out


class FeatureMatrix:
    """Rows `lo`..`hi` of the features of a trace's accesses (module docstring): `columns`
    maps "op", "namespace", "user", "offset" and "size" to the trace's arrays (any unsigned
    integer type), `counts` holds the count features (uint32, counts x accesses, in the
    contract's order of them: `counts_of`)."""

    def __init__(self, columns: dict[str, np.ndarray], counts: np.ndarray, segment_bytes: int,
                 c: Contract | None = None, lo: int = 0, hi: int | None = None) -> None:
        self.c = c or contract()
        self.columns = {k: columns[k] for k in COLUMNS}
        # each access's first and last segment, once (as uint32 when they fit: a block's
        # segments are few), not divided out again in every block; a view takes its
        # matrix's
        for name in SEGMENTS:
            self.columns[name] = columns[name] if name in columns else \
                _segments(self.columns, name, int(segment_bytes))
        self.counts = counts
        self.segment_bytes = int(segment_bytes)
        if counts.ndim != 2 or counts.shape[0] != len(count_columns(self.c)):
            raise ValueError(f"counts must be ({len(count_columns(self.c))}, accesses)")
        n = counts.shape[1]
        if any(len(v) != n for v in self.columns.values()):
            raise ValueError("the trace's columns and the counts differ in length")
        self.lo = lo
        self.hi = n if hi is None else hi
        self._count_at = {ci: j for j, ci in enumerate(count_columns(self.c))}

    # -- the ndarray-like surface ----------------------------------------------------------
    @property
    def shape(self) -> tuple[int, int]:
        return (self.hi - self.lo, self.c.num_features)

    ndim = 2
    dtype = np.dtype(np.float64)

    def __len__(self) -> int:
        return self.hi - self.lo

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self.block(0, len(self))
        return out if dtype is None else out.astype(dtype, copy=False)

    def __getitem__(self, key: Any) -> Any:
        cols: Any = None
        if isinstance(key, tuple):
            if len(key) != 2:
                raise IndexError(f"a feature matrix has 2 dimensions, got {len(key)} indices")
            key, cols = key
        # a list of columns is built alone; any other column index picks from all of them
        listed = [int(j) for j in cols] if isinstance(cols, (list, np.ndarray)) else None
        rest = None if listed is not None else cols
        if isinstance(key, slice) and key.step in (None, 1):
            lo, hi, _ = key.indices(len(self))
            view = FeatureMatrix(self.columns, self.counts, self.segment_bytes, self.c,
                                 self.lo + lo, self.lo + max(lo, hi))
            if cols is None:
                return view
            return _pick(view.block(0, len(view), listed), rest)
        if isinstance(key, slice):
            rows = np.arange(len(self))[key]
        elif isinstance(key, (int, np.integer)):
            i = int(key) + (len(self) if key < 0 else 0)
            if not 0 <= i < len(self):
                raise IndexError(f"row {key} of {len(self)}")
            return _pick(self.take(np.array([i]), listed), rest)[0]
        else:
            rows = np.asarray(key)
            if rows.dtype == bool:
                if rows.shape != (len(self),):
                    raise IndexError(f"a mask of {rows.shape} for {len(self)} rows")
                rows = np.flatnonzero(rows)
        return _pick(self.take(rows, listed), rest)

    # -- rows as float64 -------------------------------------------------------------------
    def _feature(self, i: int, sel: Any) -> np.ndarray:
        """Feature `i` (contract index) of the accesses `sel` (absolute rows: a slice or an
        index array), as float64."""
        f = self.c.admission[i]
        if f.source not in ROW_SOURCES:
            return self.counts[self._count_at[i], sel].astype(np.float64)
        return self.columns[f.source][sel].astype(np.float64)

    def _rows(self, sel: Any, n: int, cols: list[int] | None) -> np.ndarray:
        cols = list(range(self.c.num_features)) if cols is None else [int(j) for j in cols]
        out = np.empty((n, len(cols)), dtype=np.float64)
        for j, i in enumerate(cols):
            out[:, j] = self._feature(i, sel)
        return out

    def block(self, lo: int, hi: int, cols: list[int] | None = None) -> np.ndarray:
        """Rows `lo`..`hi` of this matrix (C-ordered float64), all columns or `cols`."""
        lo, hi = max(0, lo), min(len(self), hi)
        return self._rows(slice(self.lo + lo, self.lo + max(lo, hi)), max(0, hi - lo), cols)

    def take(self, rows: np.ndarray, cols: list[int] | None = None) -> np.ndarray:
        """The given rows (indices into this matrix) as float64, all columns or `cols`."""
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size and (rows.min() < -len(self) or rows.max() >= len(self)):
            raise IndexError(f"rows beyond the matrix's {len(self)}")
        rows = np.where(rows < 0, rows + len(self), rows) + self.lo
        return self._rows(rows, len(rows), cols)

    def blocks(self, size: int = 1 << 16, cols: list[int] | None = None
               ) -> Iterator[tuple[int, np.ndarray]]:
        """(first row, rows) of consecutive blocks of at most `size` rows (64 k rows of 18
        features, 9 MB, stay in the cache between built and scored: 10 M accesses scored in
        2.2 s against 1.75 s from the float64 matrix, 2.6-3.5 s in blocks of 256 k-2 M rows)."""
        for lo in range(0, len(self), size):
            yield lo, self.block(lo, lo + size, cols)

    # -- distinct rows ---------------------------------------------------------------------
    def distinct(self, cols: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """The first row of each distinct row in `cols` and each row's index into those (as
        `flashml_sim.distinct_rows` on the float64 columns). Columns that are an access's
        own fields are compared on the fields they come from, packed into 64-bit words
        (namespace and user in one, op with the segments in another when they fit): equal
        fields, equal features, and back, so the same classes without the float64 columns."""
        from flashml_sim import distinct_rows

        srcs = {self.c.admission[i].source for i in cols}
        if not srcs <= set(ROW_SOURCES):
            return distinct_rows(self.block(0, len(self), cols), list(range(len(cols))))
        sel = slice(self.lo, self.hi)
        col = self.columns
        words: list[np.ndarray] = []
        if "namespace" in srcs or "user" in srcs:
            w = np.zeros(len(self), dtype=np.uint64)
            if "namespace" in srcs:
                w |= col["namespace"][sel].astype(np.uint64) << np.uint64(32)
            if "user" in srcs:
                w |= col["user"][sel].astype(np.uint64)
            words.append(w)
        if "size" in srcs:
            words.append(col["size"][sel].astype(np.uint64))
        small = []
        if "op" in srcs:
            small.append((col["op"][sel].astype(np.uint64), 8))
        for s in SEGMENTS:
            if s in srcs:
                small.append((col[s][sel].astype(np.uint64), 28))
        if sum(b for _, b in small) <= 64 and all(
                len(v) == 0 or int(v.max()) < (1 << b) for v, b in small):
            w, shift = np.zeros(len(self), dtype=np.uint64), 0
            for v, b in small:
                w |= v << np.uint64(shift)
                shift += b
            if small:
                words.append(w)
        else:
            words += [v for v, _ in small]
        packed = np.ascontiguousarray(np.stack(words, axis=1)).view(np.float64)
        return distinct_rows(packed, list(range(packed.shape[1])))


def _segments(columns: dict[str, np.ndarray], name: str, segment_bytes: int) -> np.ndarray:
    """The first (`segment_start`) or last (`segment_end`) segment of every access, from its
    offset and size: floor(offset / segment), floor((offset + size - 1) / segment)."""
    off = columns["offset"].astype(np.uint64)
    if name == "segment_end":
        off += columns["size"].astype(np.uint64) - np.uint64(1)
    seg = off // np.uint64(segment_bytes)
    if len(seg) and int(seg.max()) <= np.iinfo(np.uint32).max:
        return seg.astype(np.uint32)
    return seg


def _pick(x: np.ndarray, cols: Any) -> np.ndarray:
    return x if cols is None else x[:, cols]


#: What the training loop reads features from: the float64 matrix or the compact one.
Features = np.ndarray | FeatureMatrix
