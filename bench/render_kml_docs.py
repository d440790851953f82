"""The measured tables of docs/systems/kml.md (and KML's section of docs/measurements.md),
rendered from the committed bench/results/kml.json (bench/bench_kml.py). One marked section:

    <!-- kml.json: begin (bench/render_kml_docs.py renders this) -->
    ...
    <!-- kml.json: end -->

tests/test_kml_docs.py fails when the marked section differs from what this script renders
from the committed JSON; prose outside the markers is hand-written.

    .venv/bin/python bench/render_kml_docs.py           # print the section
    .venv/bin/python bench/render_kml_docs.py --write   # replace it in the page
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
RESULTS = REPO / "bench" / "results"
PAGE = REPO / "docs" / "systems" / "kml.md"
BEGIN = "<!-- kml.json: begin (bench/render_kml_docs.py renders this) -->"
END = "<!-- kml.json: end -->"


def body(res: dict[str, Any]) -> str:
    """Every run's tables and targets (bench_kml.markdown)."""
    from bench_kml import markdown

    return markdown(res)


def section() -> str:
    res = json.loads((RESULTS / "kml.json").read_text())
    return "\n".join([BEGIN, body(res), END])


def marked(text: str) -> str:
    """The marked section of `text`, markers included (ValueError when absent)."""
    a = text.index(BEGIN)
    return text[a:text.index(END, a) + len(END)]


def main(argv: list[str]) -> int:
    if "--write" in argv:
        text = PAGE.read_text()
        PAGE.write_text(text.replace(marked(text), section()))
    else:
        print(section())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
