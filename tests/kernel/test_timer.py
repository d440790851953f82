"""The job's stage timer (flashml/jobs/run.py): wall time and peak memory per stage."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from flashml.jobs.run import Timer


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM is Linux's")
def test_peak_memory_per_stage_counts_nested_stages_in_both() -> None:
    t = Timer()
    with t.stage("outer"):
        a = np.ones(300 * 2**20 // 8)  # 300 MiB, touched
        del a
        with t.stage("inner"):
            b = np.ones(60 * 2**20 // 8)
            del b
    with t.stage("after"):
        pass
    assert list(t.stages) == ["inner", "outer", "after"]
    mb = t.peak_rss_mb
    # the outer stage saw the 300 MiB array although the inner stage reset the peak
    assert mb["outer"] >= mb["inner"] + 200
    # each stage's peak is its own: the inner one held 60 MiB, the last none
    assert mb["inner"] >= mb["after"] + 40
    assert mb["after"] < mb["outer"] - 250
