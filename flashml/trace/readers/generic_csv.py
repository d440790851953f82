"""Any delimited text trace, given a column mapping.

Map canonical fields to source columns (by header name, or by 0-based index without a header):
`time` (required, seconds x `time_scale`), `size` (required, bytes), and either `key` plus
`offset` (offset inside the block; 0 when not mapped), or `address` (a byte address cut into
blocks; with `key` too, blocks are scoped by it, like volumes). Optional: `op` (Tectonic codes
1-6/100, or read/r/get -> GET_PERM, write/w/put -> PUT_PERM; default GET_PERM), `namespace`
and `user` (integers; default 0). Non-integer keys are hashed with FNV-1a.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from flashml.config import OP_CODES, OPS
from flashml.errors import UserError
from flashml.trace.keys import hash_names
from flashml.trace.readers.base import (
    Check,
    Column,
    Kind,
    Reader,
    check_time_scale,
    finish,
    scoped_keys,
)

FIELDS: dict[str, Kind] = {
    "time": "float", "key": "str", "offset": "int", "address": "int", "size": "int",
    "op": "str", "namespace": "int", "user": "int",
}
GET_PERM, PUT_PERM = OP_CODES["GET_PERM"], OP_CODES["PUT_PERM"]
OP_WORDS = {"read": GET_PERM, "r": GET_PERM, "get": GET_PERM,
            "write": PUT_PERM, "w": PUT_PERM, "put": PUT_PERM}


def parse_mapping(spec: str) -> dict[str, str]:
    """`time=ts,key=obj,size=bytes` -> {"time": "ts", ...}."""
    mapping: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        if "=" not in part:
            raise UserError(f"--columns: expected FIELD=COLUMN, got {part!r}")
        field, col = (s.strip() for s in part.split("=", 1))
        if field not in FIELDS:
            raise UserError(f"--columns: unknown field {field!r}; fields: {', '.join(FIELDS)}")
        mapping[field] = col
    for req in ("time", "size"):
        if req not in mapping:
            raise UserError(f"--columns: field {req!r} must be mapped")
    if "key" not in mapping and "address" not in mapping:
        raise UserError("--columns: map 'key' (with optional 'offset') or 'address'")
    if "offset" in mapping and "address" in mapping:
        raise UserError("--columns: map either 'offset' or 'address', not both")
    return mapping


class GenericCsvReader(Reader):
    format_name = "csv"

    def __init__(self, *args, columns: str = "", separator: str = ",", header: bool = True,
                 time_scale: float = 1.0, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        if not columns:
            raise UserError("--format csv needs --columns FIELD=COLUMN,... "
                            "(e.g. time=ts,key=object,size=bytes)")
        check_time_scale(time_scale)
        if len(separator) != 1 or len(separator.encode()) != 1 or separator in "\r\n#":
            raise UserError(f"--separator must be one single-byte character (not a newline or "
                            f"'#'), got {separator!r}")
        self.mapping = parse_mapping(columns)
        self.separator = separator
        self.header = header
        self.time_scale = float(time_scale)
        self.src: dict[str, str] = {}  # canonical field -> internal column name
        self._names: dict[str, int] = {}

    def detect(self, first_line: str | None, comments: list[str]) -> None:
        if first_line is None:
            return
        cells = first_line.split(self.separator)
        names = [c.strip() for c in cells] if self.header else [str(i) for i in range(len(cells))]
        for field, col in self.mapping.items():
            if col not in names:
                known = ", ".join(names)
                if len(known) > 200:
                    known = known[:200] + "..."
                raise UserError(f"{self.path}: --columns maps {field} to {col!r}, which is not a "
                                f"column ({'header' if self.header else 'indices'}: {known})")
        kinds = {col: FIELDS[field] for field, col in self.mapping.items()}
        self.columns = [Column(f"c{i}", kinds.get(n, "str")) for i, n in enumerate(names)]
        self.src = {field: f"c{names.index(col)}" for field, col in self.mapping.items()}
        self.display = {f"c{i}": n for i, n in enumerate(names)}

    def is_header(self, line: str) -> bool:
        return self.header

    @property
    def time_column(self) -> str:
        return self.src["time"]

    def checks(self) -> list[Check]:
        s = self.src
        checks = self.size_checks(s["size"], s.get("offset") or s.get("address"))
        if "address" in s:
            checks.append(self.address_check(pl.col(s["address"]), s["address"]))
        else:  # one block per row: the access must fit in it
            off = pl.col(s["offset"]) if "offset" in s else pl.lit(0)
            checks.append(Check((off > self.block_bytes) | (pl.col(s["size"]) > self.block_bytes)
                                | (off + pl.col(s["size"]) > self.block_bytes),
                                s["size"], f"offset + size exceeds the block size "
                                f"({self.block_bytes} bytes): size {{value}}"))
        if "op" in s:
            checks.append(Check(self._op_expr().is_null(), s["op"],
                                "unknown op {value!r} (Tectonic codes " + ", ".join(map(str, OPS))
                                + " or read/write/get/put)"))
        checks += [self.id_check(s[f]) for f in ("namespace", "user") if f in s]
        return checks

    def _op_expr(self) -> pl.Expr:
        raw = pl.col(self.src["op"]).str.strip_chars().str.to_lowercase()
        code = raw.cast(pl.Int64, strict=False)
        return (pl.when(code.is_in(list(OPS))).then(code)
                .otherwise(raw.replace_strict(OP_WORDS, default=None, return_dtype=pl.Int64)))

    def expansion(self, df: pl.DataFrame) -> np.ndarray:
        if "address" in self.src:
            return self.split_counts(df, pl.col(self.src["address"]), self.src["size"])
        return super().expansion(df)

    def to_canonical(self, df: pl.DataFrame) -> pl.DataFrame:
        s = self.src
        df = self.drop_zero_size(df, s["size"])
        extra: dict[str, pl.Expr] = {
            "time": pl.col(s["time"]) * self.time_scale,
            "op": self._op_expr() if "op" in s else pl.lit(GET_PERM),
            "namespace": pl.col(s["namespace"]) if "namespace" in s else pl.lit(0),
            "user": pl.col(s["user"]) if "user" in s else pl.lit(0),
        }
        key_hash = self._key_hash(df) if "key" in s else None
        if "address" in s:
            size_col = s["size"]
            df = df.with_columns(_kh=key_hash if key_hash is not None else pl.lit(0, pl.UInt64))
            df = df.with_columns(src_address=pl.col(s["address"]), src_io_size=pl.col(size_col))
            df = self.split_blocks(df, s["address"], size_col)
            if key_hash is not None:
                df = df.with_columns(key=scoped_keys(df["_kh"].to_numpy(), df["block"]))
            else:
                df = df.with_columns(key=pl.col("block"))
            src = ["src_address", "src_io_size"]
        else:
            df = df.with_columns(key=key_hash, offset=pl.col(s["offset"]) if "offset" in s
                                 else pl.lit(0), size=pl.col(s["size"]))
            src = []
        df = df.with_columns(**extra)
        if "key" in s:
            df = df.with_columns(src_key=pl.col(s["key"]))
            src.append("src_key")
        return finish(df, src)

    def _key_hash(self, df: pl.DataFrame) -> pl.Series:
        raw = df[self.src["key"]].str.strip_chars()
        as_int = raw.cast(pl.UInt64, strict=False)
        if as_int.null_count() == 0:
            return as_int
        hashed = hash_names(raw.to_numpy(), self._names)
        out = np.where(as_int.is_null().to_numpy(), hashed, as_int.fill_null(0).to_numpy())
        return pl.Series(out.astype(np.uint64))
