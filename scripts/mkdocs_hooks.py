"""MkDocs hooks (mkdocs.yml `hooks:`): the benchmarks' figures, bench/results/*.png (each made
by its bench from the same JSON as its table), join the site as results/NAME.png, so the
pages show the committed plots without a copy of them under docs/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"


def on_files(files: Files, config: Any) -> Files:
    for png in sorted(RESULTS.glob("*.png")):
        files.append(File.generated(config, f"results/{png.name}", abs_src_path=str(png)))
    return files
