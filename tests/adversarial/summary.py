"""A run's results counted per family and class, and its table."""

from __future__ import annotations

from typing import Any

from .cases import CLASSES, Result


# --- summaries --------------------------------------------------------------------------------
def summarize(results: list[Result]) -> dict[str, Any]:
    fam: dict[str, dict[str, int]] = {}
    for r in results:
        fam.setdefault(r.family, dict.fromkeys((*CLASSES, "harness"), 0))[r.cls] += 1
    total = dict.fromkeys((*CLASSES, "harness"), 0)
    for counts in fam.values():
        for k, v in counts.items():
            total[k] += v
    rejections = [r for r in results if r.cls in ("error", "unclear")]
    named = [r for r in rejections if r.names_it]
    return {
        "cases": len(results),
        "per_family": fam,
        "per_class": total,
        "totals": {
            "unverified_code_executions": total["unverified"],
            "user_files_changed": total["changed"],
            "tracebacks": total["traceback"],
            "hangs": total["hang"],
            "aborts": total["abort"],
            "partial_outputs": total["partial"],
            "accepted_nonsense": total["accepted"],
            "unclear_errors": total["unclear"],
            "wrong_results": total["wrong"],
            "harness_errors": total["harness"],
            "rejections": len(rejections),
            "rejections_naming_file_or_option": len(named),
            "rejections_checked_for_a_name": sum(1 for r in rejections
                                                 if r.names_it is not None),
        },
    }


def table(summary: dict[str, Any]) -> str:
    cols = [c for c in (*CLASSES, "harness")
            if summary["per_class"].get(c) or c in ("ok", "error")]
    rows = [["family", "cases", *cols]]
    for name, counts in sorted(summary["per_family"].items()):
        rows.append([name, str(sum(counts.values())), *(str(counts[c]) for c in cols)])
    rows.append(["total", str(summary["cases"]), *(str(summary["per_class"][c]) for c in cols)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(x.rjust(wd) if i else x.ljust(wd)
                               for i, (x, wd) in enumerate(zip(r, widths, strict=True)))
                     for r in rows)
