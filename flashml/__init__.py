"""flashml: learn flash-cache policies offline, ship them as standalone C shared objects."""

from importlib.metadata import PackageNotFoundError, version

try:  # one definition: pyproject.toml's version, as installed
    __version__ = version("flashml")
except PackageNotFoundError:  # a source tree on sys.path without an install
    __version__ = "0+unknown"
