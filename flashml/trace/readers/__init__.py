"""Trace readers: one module per source format, all producing the canonical access table."""

from __future__ import annotations

from flashml.trace.formats import FORMATS
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
# one definition of the names: flashml/trace/formats.py
assert tuple(READERS) == FORMATS, (tuple(READERS), FORMATS)

__all__ = ["FORMATS", "READERS", "Reader"]
