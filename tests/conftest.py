"""Shared test helpers: paths to ../shared and the fixtures, and running the real CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
DATA = Path(__file__).resolve().parent / "data"
CLOUDPHYSICS = SHARED / "traces" / "cloudphysics-sample.csv"


def access_table(rows: list[tuple[float, int, int, int, int]], namespace: int = 0,
                 user: int = 0):  # type: ignore[no-untyped-def]
    """rows of (time, key, offset, size, op) -> a canonical-typed polars DataFrame."""
    import polars as pl

    t, k, o, s, op = zip(*rows, strict=True)
    n = len(rows)
    return pl.DataFrame({
        "time": pl.Series(t, dtype=pl.Float64), "key": pl.Series(k, dtype=pl.UInt64),
        "offset": pl.Series(o, dtype=pl.UInt64), "size": pl.Series(s, dtype=pl.UInt64),
        "op": pl.Series(op, dtype=pl.UInt8),
        "namespace": pl.Series([namespace] * n, dtype=pl.UInt32),
        "user": pl.Series([user] * n, dtype=pl.UInt32),
        "src_line": pl.Series(range(1, n + 1), dtype=pl.UInt64),
    })


def run_cli(*args: str, check: bool = False, cwd: Path | None = None,
            timeout: float = 600, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    """Run `flashml ARGS...` as a user would, in a fresh interpreter (`env` adds variables)."""
    import os

    proc = subprocess.run([sys.executable, "-m", "flashml.cli", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd or REPO, timeout=timeout,
                          env={**os.environ, **(env or {})})
    if check and proc.returncode != 0:
        raise AssertionError(f"flashml {' '.join(map(str, args))} failed ({proc.returncode}):\n"
                             f"{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture(scope="session")
def cloudphysics_path() -> Path:
    assert CLOUDPHYSICS.exists(), f"{CLOUDPHYSICS} missing: ../shared must sit beside the repo"
    return CLOUDPHYSICS
