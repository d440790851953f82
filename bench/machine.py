"""What machine a benchmark ran on (one definition for every bench script)."""

from __future__ import annotations

import os
import platform
from pathlib import Path

from flashml.compiler.fast_trees import cpu_has_fast_trees


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def machine() -> dict[str, object]:
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version(),
            "load_avg_1m": os.getloadavg()[0], "avx512_vbmi": cpu_has_fast_trees()}
