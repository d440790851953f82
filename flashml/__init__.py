"""flashml: learn flash-cache policies offline, ship them as standalone C shared objects."""

__version__ = "0.1.0"
