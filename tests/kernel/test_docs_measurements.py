"""docs/measurements.md's tables are the committed benchmark results: every marked section
(`<!-- NAME.json: begin ... -->` ... `<!-- NAME.json: end -->`) is exactly what
bench/render_measurements.py renders from bench/results/NAME.json, and each has its figure."""

from __future__ import annotations

import re
import sys

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "bench"))

import render_measurements as rm  # noqa: E402

PAGE = REPO / "docs" / "measurements.md"


@pytest.mark.parametrize("name", sorted(rm.SECTIONS))
def test_marked_section_is_the_committed_json(name: str) -> None:
    text = PAGE.read_text()
    want = rm.sections()[name]
    assert rm.marked(text, name) == want, (
        f"docs/measurements.md's {name}.json section is not the committed results: run "
        "`.venv/bin/python bench/render_measurements.py --write` and commit the page")


def test_every_marked_section_has_a_renderer() -> None:
    """A marker without a renderer would be a hand-kept table that looks rendered."""
    names = set(re.findall(r"<!-- (\S+)\.json: begin", PAGE.read_text()))
    assert names == set(rm.SECTIONS)


def test_each_rendered_table_has_its_figure() -> None:
    text = PAGE.read_text()
    for name in rm.SECTIONS:
        after = text[text.index(rm.end(name)):].split("\n## ")[0]
        figs = re.findall(r"!\[[^\]]+\]\(results/([^)]+\.png)\)", after)
        assert figs, f"no figure after the {name}.json table"
        for f in figs:
            assert (REPO / "bench" / "results" / f).exists(), f


def test_a_changed_result_makes_the_page_stale() -> None:
    """The check bites: a section rendered from a changed result differs from the page."""
    res = rm._load("pipeline")
    res["runs"][0]["wall_s"] += 1000
    assert rm.pipeline_section(res) not in PAGE.read_text()
    assert rm.pipeline_section(rm._load("pipeline")) in PAGE.read_text()


def test_headline_summary_is_the_committed_json() -> None:
    from render_headlines import section

    assert section() in PAGE.read_text(), (
        "docs/measurements.md's headline figures are stale: run "
        "`.venv/bin/python bench/render_measurements.py --write`")


def test_engine_section_follows_engine_json() -> None:
    """The engine's section states the committed decision times and whether each meets the
    target: a changed figure or target makes the page stale."""
    res = rm._load("engine")
    page = PAGE.read_text()
    assert rm.engine_section(res) in page
    bm = res["baleen_mat"]
    assert f"{bm['miss_plus_eviction_ns_p50']:,.0f} ns" in page
    res["baleen_mat"]["target_ns"] = 10 ** 9
    assert rm.engine_section(res) not in page
    assert "**not met**" not in rm.engine_section(res)
