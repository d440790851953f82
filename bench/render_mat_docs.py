"""The measured tables of docs/systems/mat.md, rendered from the committed
bench/results/mat.json (bench/bench_mat.py) and bench/results/mat_flash.json
(bench/bench_mat_flash.py). Each owns one marked section of the page:

    <!-- NAME.json: begin (bench/render_mat_docs.py renders this) -->
    ...
    <!-- NAME.json: end -->

tests/mat/test_mat_lrb.py fails when a marked section differs from what this script renders
from the committed JSON; prose outside the markers is hand-written.

    .venv/bin/python bench/render_mat_docs.py           # print the sections
    .venv/bin/python bench/render_mat_docs.py --write   # replace them in the page
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
import docs_sections  # noqa: E402

PAGE = REPO / "docs" / "systems" / "mat.md"
SCRIPT = "render_mat_docs.py"


def mat_section(res: dict[str, Any]) -> str:
    from bench_mat import docs_table, held_out_table, targets_text

    if "targets" not in res:
        return "(not measured yet with the in-house LRB: run bench/bench_mat.py)"
    from bench_mat import FRACTIONS

    missing = [f"{name} {100 * f:g}%" for name, t in res["traces"].items() for f in FRACTIONS
               if f not in {s["fraction"] for s in t["sizes"]}]
    note = ([f"**Not measured in this run** (its parts did not finish): {', '.join(missing)}."
             " The targets below count the points measured.", ""] if missing else [])
    return "\n".join([*note, docs_table(res["traces"]), "", "Held out and under periodic "
                      "retraining (byte miss ratio / miss ratio):", "",
                      held_out_table(res["traces"]), "", "What holds against the targets "
                      "(byte miss ratio, the objective):", "", targets_text(res["targets"])])


def mat_flash_section(res: dict[str, Any]) -> str:
    from bench_mat_flash import docs_table

    return docs_table(res)


SECTIONS: dict[str, Callable[[dict[str, Any]], str]] = {
    "mat": mat_section,
    "mat_flash": mat_flash_section,
}


def sections() -> dict[str, str]:
    """name -> the whole marked section (markers included) rendered from NAME.json."""
    return docs_sections.sections(SCRIPT, SECTIONS)


def marked(text: str, name: str) -> str:
    """The marked section of `name` in `text`, markers included (ValueError when absent)."""
    return docs_sections.marked(text, name, SCRIPT)


if __name__ == "__main__":
    sys.exit(docs_sections.main(sys.argv[1:], PAGE, SCRIPT, SECTIONS))
