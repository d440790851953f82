"""docs/how-to/mount-a-cache.md's device section is what bench/render_device_docs.py renders
from the committed bench/results/device.json; the check's rank correlation."""

from __future__ import annotations

import sys

import numpy as np

from conftest import REPO as ROOT

sys.path.insert(0, str(ROOT / "bench"))


def test_the_device_section_is_rendered_from_device_json() -> None:
    import render_device_docs

    page = render_device_docs.PAGE.read_text()
    for name, section in render_device_docs.docs_sections.sections(
            render_device_docs.SCRIPT, render_device_docs.SECTIONS).items():
        assert render_device_docs.docs_sections.marked(
            page, name, render_device_docs.SCRIPT) == section, (
            "stale: run .venv/bin/python bench/render_device_docs.py --write --plot")
    assert (ROOT / "docs" / "assets" / "device_busy.png").stat().st_size > 0


def test_spearman_matches_scipy_with_ties() -> None:
    from scipy.stats import spearmanr

    from flashml.device.check import spearman

    rng = np.random.default_rng(4)
    for _ in range(20):
        a, b = rng.integers(0, 5, 12).astype(float), rng.integers(0, 5, 12).astype(float)
        if np.ptp(a) and np.ptp(b):
            assert abs(spearman(a, b) - spearmanr(a, b).statistic) < 1e-12
    assert np.isnan(spearman(np.ones(5), np.arange(5.0)))
