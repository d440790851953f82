"""The measured tables of docs/systems/kml.md (and KML's section of docs/measurements.md),
rendered from the committed bench/results/kml.json (bench/bench_kml.py). One marked section:

    <!-- kml.json: begin (bench/render_kml_docs.py renders this) -->
    ...
    <!-- kml.json: end -->

tests/kml/test_kml_docs.py fails when the marked section differs from what this script renders
from the committed JSON; prose outside the markers is hand-written.

    .venv/bin/python bench/render_kml_docs.py           # print the section
    .venv/bin/python bench/render_kml_docs.py --write   # replace it in the page
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
import docs_sections  # noqa: E402

RESULTS = docs_sections.RESULTS
PAGE = REPO / "docs" / "systems" / "kml.md"
SCRIPT = "render_kml_docs.py"


def body(res: dict[str, Any]) -> str:
    """Every run's tables and targets (bench_kml.markdown)."""
    from bench_kml import markdown

    return markdown(res)


def section() -> str:
    return docs_sections.sections(SCRIPT, {"kml": body})["kml"]


def marked(text: str) -> str:
    """The marked section of `text`, markers included (ValueError when absent)."""
    return docs_sections.marked(text, "kml", SCRIPT)


if __name__ == "__main__":
    sys.exit(docs_sections.main(sys.argv[1:], PAGE, SCRIPT, {"kml": body}))
