"""Trace readers: one module per source format, all producing the canonical access table."""

from __future__ import annotations

from flashml.trace.readers.base import Reader
from flashml.trace.readers.cloudphysics import CloudPhysicsReader
from flashml.trace.readers.generic_csv import GenericCsvReader
from flashml.trace.readers.msr import MsrReader
from flashml.trace.readers.tectonic import TectonicReader

READERS: dict[str, type[Reader]] = {
    "tectonic": TectonicReader,
    "msr": MsrReader,
    "cloudphysics": CloudPhysicsReader,
    "csv": GenericCsvReader,
}
FORMATS: tuple[str, ...] = tuple(READERS)

__all__ = ["FORMATS", "READERS", "Reader"]
