"""Units, definitions and defaults shared by every part of flashml (DESIGN.md, one place).

Everything else imports these values; the Rust simulator receives them through its config and
a test checks that its built-in defaults equal the ones here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

KiB = 1024
MiB = 1024 * KiB
#: The binary size units, largest first, as sizes are written and read (4GiB, 128 KiB).
BINARY_UNITS = (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", MiB), ("KiB", KiB))
GiB = 1024 * MiB
# Units: flashml's rates are in MB/s with MB = 10^6 bytes (write rate = segments x 128 KiB /
# seconds / 1e6); the simulator also reports the artifact's unit, MiB/s
# (`flash_write_rate_mibps`: BCacheSim's FlashWriteRate divides by 2^20). Cache sizes are in
# GB = 2^30 bytes, as the artifact's (366.475 GB at a 0.1% sample = 3002 segments). The
# artifact's write-rate target, 35.599 "MB/s", is 35.599 MiB/s (= 37.328 MB/s): 7.5 DWPD of
# 400 GiB, 366.475 GB after the 400/357.45 CacheLib overhead factor. Sizes of accesses and
# blocks are in MiB.
MB = 1_000_000
GB = GiB
#: The Baleen artifact's flash write-rate target (its configs' 35.599, in MiB/s).
ARTIFACT_TARGET_MIBPS = 35.599
HOUR_S = 3_600.0
DAY_S = 86_400.0

# Tectonic op codes (baleen-artifact-notes.md): the one definition of op names, and of which
# ops are GETs (reads: they form episodes, hit or miss) and which PUTs (writes: never admitted).
OPS: dict[int, str] = {
    1: "GET_TEMP",
    2: "GET_PERM",
    3: "PUT_TEMP",
    4: "PUT_PERM",
    5: "GET_NOT_INIT",
    6: "PUT_NOT_INIT",
    100: "UNKNOWN",
}
OP_CODES: dict[str, int] = {name: code for code, name in OPS.items()}
GET_OPS: tuple[int, ...] = tuple(c for c, name in OPS.items() if name.startswith("GET_"))
PUT_OPS: tuple[int, ...] = tuple(c for c, name in OPS.items() if name.startswith("PUT_"))


@dataclass(frozen=True)
class Units:
    """Cache geometry and the disk model (Baleen artifact's testbed)."""

    segment_bytes: int = 128 * KiB
    block_bytes: int = 8 * MiB
    t_seek_s: float = 11.5e-3
    bandwidth_bytes_per_s: float = 143 * MiB

    @property
    def segments_per_block(self) -> int:
        return self.block_bytes // self.segment_bytes

    def dt_seconds(self, ios: float, nbytes: float) -> float:
        """Disk-head time of `ios` backend IOs moving `nbytes` bytes in total."""
        return ios * self.t_seek_s + nbytes / self.bandwidth_bytes_per_s


@dataclass(frozen=True)
class Defaults:
    """Defaults at full-node scale, as in the artifact."""

    cache_gb: float = 366.475
    #: The artifact's target, 35.599 MiB/s, in flashml's MB/s (10^6 B/s): 37.328.
    target_write_rate_mbps: float = ARTIFACT_TARGET_MIBPS * MiB / MB
    disks: int = 36
    window_s: float = 600.0
    warmup_s: float = DAY_S
    sample_ratio: float = 100.0


UNITS = Units()
DEFAULTS = Defaults()


# Environment variables that switch flashml from its embedded defaults to shared services
# (docker-compose.yml sets them; docs/how-to/scale-out.md). They are read here only.
#   FLASHML_HOME            embedded state folder (default .flashml)
#   MLFLOW_TRACKING_URI     MLflow server (read in flashml.tracking; default sqlite in state)
#   FLASHML_OPTUNA_STORAGE  Optuna RDB URL, e.g. postgresql+psycopg2://u:p@host/optuna
#   FLASHML_SPARK_MASTER    Spark master URL, e.g. spark://spark-master:7077 (default local[*])
#   FLASHML_CACHE_DIR       compiled-object cache (default ~/.cache/flashml; `off`: none)


def state_dir() -> Path:
    """Where embedded services keep their state (MLflow sqlite, Optuna sqlite, Data Docs)."""
    return Path(os.environ.get("FLASHML_HOME", ".flashml"))


def cache_dir() -> Path | None:
    """Where flashml keeps what it can rebuild (compiled objects: compiler/objcache.py):
    $FLASHML_CACHE_DIR, else $XDG_CACHE_HOME/flashml, else ~/.cache/flashml; None when
    FLASHML_CACHE_DIR is `off`."""
    env = os.environ.get("FLASHML_CACHE_DIR")
    if env:
        return None if env.strip().lower() == "off" else Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg) / "flashml" if xdg and os.path.isabs(xdg) else \
        Path.home() / ".cache" / "flashml"


def optuna_storage() -> str:
    """Optuna storage URL: $FLASHML_OPTUNA_STORAGE, else sqlite `optuna.db` in the state dir."""
    env = os.environ.get("FLASHML_OPTUNA_STORAGE")
    if env:
        return env
    state_dir().mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{(state_dir() / 'optuna.db').resolve()}"


def redact_url(url: str) -> str:
    """`url` with its password, if it has one, shown as `***`: what summaries, logs and MLflow
    tags show of a storage URL (`postgresql+psycopg2://flashml:***@host:5432/optuna`)."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return url
    if password is None:
        return url
    user = parts.netloc.rsplit("@", 1)[0].split(":", 1)[0]
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def spark_master() -> str | None:
    """Spark master URL: $FLASHML_SPARK_MASTER, else None (local[*] inside the job)."""
    return os.environ.get("FLASHML_SPARK_MASTER") or None
