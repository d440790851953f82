"""KML's statistics over repeated runs: 95% intervals of a policy's ops/s and of the ratio of
two policies, and which sizes of a sweep tie (decided by the intervals, not by a fixed margin).

    s = interval([1980, 2060, 2010, 1995, 2040])          # mean, lo, hi (Student's t)
    r = ratio(kml_runs, best_fixed_runs)                  # ratio, lo, hi, verdict
    best, tied = best_sizes({"8": [...], "16": [...]})    # the best size and those tied

A ratio is that of the geometric means (runs of ops/s are multiplicative: a policy 2x better
on one run and 2x worse on another is even), its interval Welch's t on the runs' logarithms.
With one run per side there is no interval (lo = hi = the ratio; verdict from it alone); the
twin is deterministic, so its single runs are exact.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

#: The intervals' confidence.
CONFIDENCE = 0.95


def _t(df: float, confidence: float = CONFIDENCE) -> float:
    from scipy.stats import t

    return float(t.ppf(0.5 + confidence / 2, df))


def interval(xs: Sequence[float], confidence: float = CONFIDENCE) -> dict[str, float]:
    """Mean and `confidence` interval (Student's t) of runs `xs`; n, sd beside them."""
    n = len(xs)
    if n == 0:
        raise ValueError("no runs")
    m = sum(xs) / n
    if n == 1:
        return {"mean": m, "lo": m, "hi": m, "n": 1, "sd": 0.0}
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1))
    h = _t(n - 1, confidence) * sd / math.sqrt(n)
    return {"mean": m, "lo": m - h, "hi": m + h, "n": n, "sd": sd}


def ratio(a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE
          ) -> dict[str, Any]:
    """a / b: the ratio of the runs' geometric means and its `confidence` interval (Welch's t
    on the logarithms); verdict "better" (the interval above 1), "worse" (below) or "tie"."""
    if not a or not b or min(a) <= 0 or min(b) <= 0:
        raise ValueError("runs of positive ops/s on both sides")
    la, lb = [math.log(x) for x in a], [math.log(x) for x in b]
    ma, mb = sum(la) / len(la), sum(lb) / len(lb)
    d = ma - mb
    if len(la) < 2 or len(lb) < 2:
        lo = hi = d
    else:
        va = sum((x - ma) ** 2 for x in la) / (len(la) - 1) / len(la)
        vb = sum((x - mb) ** 2 for x in lb) / (len(lb) - 1) / len(lb)
        se = math.sqrt(va + vb)
        if se == 0.0:
            lo = hi = d
        else:
            df = (va + vb) ** 2 / ((va ** 2 / (len(la) - 1) if va else 0.0)
                                   + (vb ** 2 / (len(lb) - 1) if vb else 0.0))
            h = _t(df, confidence) * se
            lo, hi = d - h, d + h
    r, rlo, rhi = math.exp(d), math.exp(lo), math.exp(hi)
    if len(la) < 2 or len(lb) < 2 or lo == hi:
        verdict = "better" if r > 1 else "worse" if r < 1 else "tie"
    else:
        verdict = "better" if rlo > 1 else "worse" if rhi < 1 else "tie"
    return {"ratio": r, "lo": rlo, "hi": rhi, "verdict": verdict}


def best_sizes(runs: Mapping[str, Sequence[float]], confidence: float = CONFIDENCE
               ) -> tuple[int, list[int]]:
    """A sweep row ({KiB as text: runs of ops/s}) -> the size of the highest mean ops/s and
    every size that ties with it (its ratio's interval to the best holds 1), ascending; the
    best is among them. The label a model learns is the smallest tied size (less memory and
    bandwidth wasted when the workload changes); the baseline a tuner is judged against is
    the best itself."""
    means = {int(k): sum(v) / len(v) for k, v in runs.items()}
    top = max(means, key=lambda k: (means[k], -k))
    tied = sorted(k for k in means
                  if k == top or ratio(runs[str(k)], runs[str(top)], confidence)["verdict"]
                  == "tie")
    return top, tied
