"""Trace readers: one module per source format, all producing the canonical access table."""

from __future__ import annotations

from flashml.pipelines.readers.base import Reader
from flashml.pipelines.readers.cloudphysics import CloudPhysicsReader
from flashml.pipelines.readers.generic_csv import GenericCsvReader
from flashml.pipelines.readers.msr import MsrReader
from flashml.pipelines.readers.tectonic import TectonicReader

READERS: dict[str, type[Reader]] = {
    "tectonic": TectonicReader,
    "msr": MsrReader,
    "cloudphysics": CloudPhysicsReader,
    "csv": GenericCsvReader,
}
FORMATS: tuple[str, ...] = tuple(READERS)

__all__ = ["FORMATS", "READERS", "Reader"]
