"""docs/systems/pannier.md's measured tables are the committed benchmark results: the marked
section is exactly what bench/render_pannier_docs.py renders from bench/results/pannier.json,
and the README's Pannier headline names the strongest simple rival of that same JSON."""

from __future__ import annotations

import copy
import json
import sys

from conftest import REPO

sys.path.insert(0, str(REPO / "bench"))

import render_pannier_docs as rp  # noqa: E402


def test_pannier_page_section_is_the_committed_json() -> None:
    assert rp.marked(rp.PAGE.read_text()) == rp.section(), (
        "docs/systems/pannier.md's measured tables are not the committed results: run "
        "`.venv/bin/python bench/render_pannier_docs.py --write` and commit the page")


def test_a_changed_result_makes_the_page_stale() -> None:
    res = json.loads((rp.RESULTS / "pannier.json").read_text())
    changed = copy.deepcopy(res)
    changed["table"]["presets"]["versus_rivals"][0]["ripq_plus"] += 0.5
    assert rp.body(changed) not in rp.PAGE.read_text()
    assert rp.body(res) in rp.PAGE.read_text()


def test_headline_names_the_strongest_rival_and_where_pannier_is_below() -> None:
    """The README's row compares with whichever of LRU+, MQ, RIPQ+ is strongest, and lists
    the runs where Pannier is below its run's best rival."""
    from render_headlines import pannier_row

    res = json.loads((rp.RESULTS / "pannier.json").read_text())
    s = res["table"]["presets"]
    for v in s["versus_rivals"]:
        v.update(pannier=0.1, lru_plus=0.2, mq=0.3, ripq_plus=0.4, best_rival="ripq_plus",
                 pannier_at_or_above=False)
    s["best_rival"] = "ripq_plus"
    what, measured, src = pannier_row(res)
    assert "strongest simple rival" in what and src == "pannier.json"
    assert "vs RIPQ+" in measured and "below the run's best rival on" in measured
