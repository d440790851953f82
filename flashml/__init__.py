"""flashml: learn flash-cache policies offline, ship them as standalone C shared objects."""

import os
from importlib.metadata import PackageNotFoundError, version

try:  # one definition: pyproject.toml's version, as installed
    __version__ = version("flashml")
except PackageNotFoundError:  # a source tree on sys.path without an install
    __version__ = "0+unknown"

# Nothing leaves the machine: MLflow's usage telemetry (on by default since MLflow 3.2) and
# Great Expectations' analytics are off in flashml's processes and the servers and workers
# they start, unless the user has set these variables (docs/security.md).
for _name, _off in (("MLFLOW_DISABLE_TELEMETRY", "true"), ("GX_ANALYTICS_ENABLED", "False")):
    os.environ.setdefault(_name, _off)
del _name, _off
