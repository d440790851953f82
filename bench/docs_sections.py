"""Marked sections of a docs page, rendered from the committed bench/results/NAME.json: the
machinery every per-system renderer (render_mat_docs, render_pannier_docs, render_kml_docs)
shares. A section is

    <!-- NAME.json: begin (bench/SCRIPT renders this) -->
    ...
    <!-- NAME.json: end -->

and prose outside the markers is hand-written; each renderer's test fails when a section
differs from what its script renders from the JSON."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"

Renderers = dict[str, Callable[[dict[str, Any]], str]]


def begin(name: str, script: str) -> str:
    return f"<!-- {name}.json: begin (bench/{script} renders this) -->"


def end(name: str) -> str:
    return f"<!-- {name}.json: end -->"


def sections(script: str, renderers: Renderers) -> dict[str, str]:
    """name -> the whole marked section (markers included) rendered from NAME.json."""
    return {name: "\n".join([begin(name, script),
                             fn(json.loads((RESULTS / f"{name}.json").read_text())),
                             end(name)])
            for name, fn in renderers.items()}


def marked(text: str, name: str, script: str) -> str:
    """The marked section of `name` in `text`, markers included (ValueError when absent)."""
    a = text.index(begin(name, script))
    return text[a:text.index(end(name), a) + len(end(name))]


def main(argv: list[str], page: Path, script: str, renderers: Renderers) -> int:
    """`--write`: replace every section in `page`; else print them."""
    new = sections(script, renderers)
    if "--write" in argv:
        text = page.read_text()
        for name, section in new.items():
            text = text.replace(marked(text, name, script), section)
        page.write_text(text)
    else:
        print("\n\n".join(new.values()))
    return 0
