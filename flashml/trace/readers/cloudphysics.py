"""CloudPhysics block traces as distributed with libCacheSim: `version,time,op,size,lbn`.

`op` is a SCSI opcode in hex: reads (08, 28, 88, a8) become GET_PERM (2), writes (0a, 2a, 8a,
aa) PUT_PERM (4); any other opcode is an error. `size` is bytes; `lbn` is a logical block
number of `sector_bytes` (512 by default), so the byte address is lbn * sector_bytes, cut into
blocks (8 MiB by default). `time` is taken as seconds times `time_scale` (default 1).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from flashml.config import OP_CODES
from flashml.errors import UserError
from flashml.trace.limits import MAX_SECTOR_BYTES, SECTOR_BYTES
from flashml.trace.readers.base import (
    MAX_ADDRESS,
    Check,
    Column,
    Reader,
    check_time_scale,
    finish,
)

READ_OPCODES = ("08", "28", "88", "a8")
WRITE_OPCODES = ("0a", "2a", "8a", "aa")
COLUMNS = [Column("version", "int"), Column("time", "float"), Column("op", "str"),
           Column("size", "int"), Column("lbn", "int")]


class CloudPhysicsReader(Reader):
    format_name = "cloudphysics"
    separator = ","
    header_prefix = "version"
    time_column = "time"

    def __init__(self, *args, sector_bytes: int = SECTOR_BYTES, time_scale: float = 1.0,
                 **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        if not 0 < sector_bytes <= MAX_SECTOR_BYTES:
            raise UserError(f"--sector-bytes must be in 1..2^32, got {sector_bytes}")
        check_time_scale(time_scale)
        self.sector_bytes = int(sector_bytes)
        self.time_scale = float(time_scale)
        self.columns = list(COLUMNS)

    def checks(self) -> list[Check]:
        known = list(READ_OPCODES + WRITE_OPCODES)
        return self.size_checks("size") + [
            Check(pl.col("lbn") < 0, "lbn", "negative lbn {value}"),
            Check(pl.col("lbn") > MAX_ADDRESS // self.sector_bytes, "lbn",
                  "lbn {value} x " + f"{self.sector_bytes}-byte sectors is beyond the largest "
                  f"byte address ({MAX_ADDRESS})"),
            Check(~pl.col("op").str.to_lowercase().str.zfill(2).is_in(known), "op",
                  "unknown SCSI opcode {value!r} (reads: " + ", ".join(READ_OPCODES)
                  + "; writes: " + ", ".join(WRITE_OPCODES) + ")"),
        ]

    def expansion(self, df: pl.DataFrame) -> np.ndarray:
        return self.split_counts(df, pl.col("lbn") * self.sector_bytes, "size")

    def to_canonical(self, df: pl.DataFrame) -> pl.DataFrame:
        df = self.drop_zero_size(df, "size")
        df = df.with_columns(src_io_size=pl.col("size"),
                             _addr=pl.col("lbn").cast(pl.UInt64) * self.sector_bytes)
        df = self.split_blocks(df, "_addr", "size")
        op = pl.col("op").str.to_lowercase().str.zfill(2)
        df = df.with_columns(
            key=pl.col("block"),
            time=pl.col("time") * self.time_scale,
            op=pl.when(op.is_in(list(READ_OPCODES))).then(OP_CODES["GET_PERM"])
            .otherwise(OP_CODES["PUT_PERM"]),
            namespace=pl.lit(0),
            user=pl.lit(0),
            src_lbn=pl.col("lbn"),
            src_opcode=pl.col("op"),
        )
        return finish(df, ["src_lbn", "src_opcode", "src_io_size"])
