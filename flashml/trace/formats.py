"""The names of the trace formats flashml reads: the block traces' readers
(`flashml.trace.readers.READERS`, keyed by these names) and the object traces' (`objects.py`).
Kept apart from the readers so that the CLI can offer them without loading Polars."""

from __future__ import annotations

#: Raw block-trace formats, one reader each (flashml/trace/readers/).
FORMATS: tuple[str, ...] = ("tectonic", "msr", "cloudphysics", "csv")
#: Object-trace formats (flashml/trace/objects.py).
OBJECT_FORMATS: tuple[str, ...] = ("cloudphysics", "objects-csv", "csv", "parquet")
