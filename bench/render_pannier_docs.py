"""The measured tables of docs/systems/pannier.md, rendered from the committed
bench/results/pannier.json (bench/bench_pannier.py). One marked section of the page:

    <!-- pannier.json: begin (bench/render_pannier_docs.py renders this) -->
    ...
    <!-- pannier.json: end -->

tests/pannier/test_pannier_docs.py fails when the marked section differs from what this script
renders from the committed JSON; prose outside the markers is hand-written.

    .venv/bin/python bench/render_pannier_docs.py           # print the section
    .venv/bin/python bench/render_pannier_docs.py --write   # replace it in the page
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
import docs_sections  # noqa: E402

RESULTS = docs_sections.RESULTS
PAGE = REPO / "docs" / "systems" / "pannier.md"
SCRIPT = "render_pannier_docs.py"


def _pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def body(res: dict[str, Any]) -> str:
    """The tables (bench_pannier.tables) and the figures the page's prose relies on."""
    from bench_pannier import tables

    t = res["table"]
    s = t["presets"]
    g, nr = s["pannier_vs_lru_plus"], s.get("fue_without_ram")
    means, per, hold = tables(res)
    lines = [means, "",
             "Pannier against each simple rival, per trace and size (read-hit ratio; the "
             "rival with the highest mean over the presets is the headline's):", "", per, ""]
    for name, x in t.items():
        lines.append(f"- `{name}`: strongest rival **{x['best_rival']}**; Pannier vs LRU+ "
                     f"{_pct(x['pannier_vs_lru_plus']['read_hit_gain'])}, vs MQ "
                     f"{_pct(x['pannier_vs_mq']['read_hit_gain'])}, vs RIPQ+ "
                     f"{_pct(x['pannier_vs_ripq_plus']['read_hit_gain'])} (at or above RIPQ+ "
                     f"in {x['pannier_vs_ripq_plus']['runs_at_or_above']}/"
                     f"{x['pannier_vs_ripq_plus']['runs']} runs)")
    lines += ["", "The tuned knobs, judged only on the half of each trace the tuning did not "
              "see (the cache starts empty there; means over the sizes, all under TIRE at "
              "the run's target):", "", hold, ""]
    lines.append(f"FUE vs LRU+ on the presets: **{_pct(g['fue_gain'])}** with the RAM cache "
                 "in front" + (f", **{_pct(nr['pannier_vs_lru_plus']['fue_gain'])}** without "
                               f"it (RIPQ+ vs LRU+ without it: "
                               f"{_pct(nr['ripq_plus_vs_lru_plus']['fue_gain'])})"
                               if nr else "")
                 + f"; counting copy-forward's flash reads "
                 f"{_pct(g['fue_with_internal_reads_gain'])}.")
    src = [r for r in s["per_run"] if r["trace"] == "src11-like"]
    if src:
        lines += ["", "src11-like, FUE of Pannier vs LRU+ (plain / counting copy-forward's "
                  "reads) and erasures:", ""]
        for r in src:
            a, b = r["policies"]["pannier"], r["policies"]["lru_plus"]
            lines.append(f"- {r['size']}: FUE {a['fue']:.3f} vs {b['fue']:.3f} "
                         f"({_pct(a['fue'] / b['fue'] - 1)}); with internal reads "
                         f"{a['fue_with_internal_reads']:.3f} vs "
                         f"{b['fue_with_internal_reads']:.3f} "
                         f"({_pct(a['fue_with_internal_reads'] / b['fue_with_internal_reads'] - 1)}"
                         f"); erasures {_pct(a['erasures'] / b['erasures'] - 1)}")
    k = res.get("web_knobs")
    if k:
        rv = k["rivals"]
        lines += ["", f"Pannier's knobs on web-like at Zipf 0.5, 5% of its working set "
                  f"({k['requests']:,} requests): LRU+ {rv['lru_plus']:.4f}, RIPQ+ "
                  f"{rv['ripq_plus']:.4f} ({rv['ripq_plus_open_in_cache']:.4f} with its open "
                  "containers charged to the cache):", "", "| Pannier's knobs | read-hit ratio "
                  "| FUE |", "|---|---|---|"]
        for x in k["pannier"]:
            kn = ", ".join(f"{a}={b}" for a, b in x["knobs"].items()) or "defaults"
            lines.append(f"| {kn} | {x['read_hit_ratio']:.4f} | {x['fue']:.3f} |")
    gap = res.get("paper_gap", {}).get("fig13a_zipf0.5")
    if gap:
        p = res["paper_gap"]["paper"]
        lines += ["", f"The paper's ProWGen setting (Fig. 13a: Zipf 0.5, cache 10% of the "
                  f"working set; the paper: LRU+ {p['lru_plus']:.0%}, Pannier "
                  f"{p['pannier']:.0%} = {p['pannier'] / p['lru_plus']:.2f}x, RIPQ+ "
                  f"{p['ripq_plus']:.0%} = {p['ripq_plus'] / p['lru_plus']:.2f}x):", "",
                  "| requests | container | containers in the cache | LRU+ | RIPQ+ | Pannier |",
                  "|---|---|---|---|---|---|"]
        for r in gap:
            lines.append(f"| {r['requests']:,} | {r['container_mib']} MiB | "
                         f"{r['containers_in_cache']} | {r['lru_plus']:.4f} | "
                         f"{r['ripq_plus']:.4f} ({r['ripq_plus_vs_lru_plus']:.2f}x) | "
                         f"{r['pannier']:.4f} ({r['pannier_vs_lru_plus']:.2f}x) |")
    return "\n".join(lines)


def section() -> str:
    return docs_sections.sections(SCRIPT, {"pannier": body})["pannier"]


def marked(text: str) -> str:
    """The marked section of `text`, markers included (ValueError when absent)."""
    return docs_sections.marked(text, "pannier", SCRIPT)


if __name__ == "__main__":
    sys.exit(docs_sections.main(sys.argv[1:], PAGE, SCRIPT, {"pannier": body}))
