"""The adversarial suite's figures: every case of the catalogue of tests/adversarial/ (hostile
numbers for every numeric option of every flashml and flashrt command, outputs that are
inputs, FIFOs, tampered bundles against every loader, hostile traces, two runs on one output,
kill -9 of ingest), each classified; writes bench/results/adversarial.json and prints a table.

    .venv/bin/python bench/bench_adversarial.py [--quick] [--seed N] [--only FAMILY,...]
                                               [--limit N] [--parallel 2]

--quick: 5 hostile values per numeric option instead of 8 (still over 1000 cases).
The seed (random by default) orders the cases and picks the kill -9 points; it is recorded.
Exit 0 when every case was fine (ok or a clear error), 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))
OUT = REPO / "bench" / "results" / "adversarial.json"
#: The documentation page whose marked section shows these figures.
DOC = REPO / "docs" / "security.md"


SECTION_BEGIN = "<!-- adversarial.json: begin (bench/bench_adversarial.py renders this) -->"
SECTION_END = "<!-- adversarial.json: end -->"
_TOTALS = (("unverified_code_executions", "unverified code executed (constructor markers)"),
           ("user_files_changed", "user files, traces or backing stores changed"),
           ("tracebacks", "tracebacks"), ("hangs", "hangs"), ("aborts", "aborts"),
           ("partial_outputs", "partial outputs"),
           ("accepted_nonsense", "nonsense accepted"), ("unclear_errors", "unclear errors"))


def security_section(doc: dict) -> str:
    """docs/security.md's table of the adversarial figures, rendered from adversarial.json (a
    test checks the page holds exactly this for the committed results)."""
    t, env = doc["totals"], doc["environment"]
    lines = [SECTION_BEGIN,
             f"{doc['cases']:,} cases (`{doc['command']}`, seed {doc['seed']}, at "
             f"{env['git_rev'][:7]}, {env['cpu_count']} cores, "
             f"{doc['seconds']['total']:.0f} s):", "",
             "| family | cases | ok | clear error | bad |", "|---|---|---|---|---|"]
    for fam, counts in sorted(doc["per_family"].items()):
        bad = sum(v for k, v in counts.items() if k not in ("ok", "error"))
        lines.append(f"| {fam} | {sum(counts.values()):,} | {counts['ok']:,} | "
                     f"{counts['error']:,} | {bad} |")
    lines += ["", "| outcome | count |", "|---|---|"]
    lines += [f"| {label} | {t[key]} |" for key, label in _TOTALS]
    checked = t.get("rejections_checked_for_a_name", t["rejections"])
    lines.append(f"| rejections naming the file or option | "
                 f"{t['rejections_naming_file_or_option']:,} of {checked:,} "
                 f"(of {t['rejections']:,} rejections, {t['rejections'] - checked:,} had "
                 f"neither an option nor a file of the user's to name) |")
    lines.append(SECTION_END)
    return "\n".join(lines)


def main() -> int:
    import adversarial as adv  # tests/adversarial/

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="5 hostile values per option, not 8")
    ap.add_argument("--seed", type=int, default=None, help="default: random (recorded)")
    ap.add_argument("--only", default="", help="comma-separated families")
    ap.add_argument("--limit", type=int, default=0, help="at most N cases (a sample)")
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("-o", "--out", type=Path, default=OUT)
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    cases = adv.catalogue(seed=seed, quick=args.quick)
    if args.only:
        fams = set(args.only.split(","))
        cases = [c for c in cases if c.family in fams]
    random.Random(seed).shuffle(cases)
    # the slow ones first, so the two workers end together
    cases.sort(key=lambda c: c.family not in ("concurrent", "kill-9"))
    if args.limit:
        cases = cases[: args.limit]
    print(f"{len(cases)} cases, seed {seed}, parallel {args.parallel}", flush=True)
    t0 = time.perf_counter()
    with adv.session() as (fx, scratch):
        print(f"fixtures ready in {time.perf_counter() - t0:.0f} s", flush=True)
        runner = adv.Runner(fx, scratch, parallel=args.parallel)
        t1 = time.perf_counter()

        def progress(i: int, r: adv.Result) -> None:
            if r.cls not in ("ok", "error") or (i + 1) % 100 == 0:
                print(f"[{i + 1}/{len(cases)} {time.perf_counter() - t1:.0f}s] {r.cls:10} "
                      f"{r.id}  {r.first_stderr[:120]}", flush=True)

        results = runner.run(cases, progress)
        run_s = time.perf_counter() - t1
    summary = adv.summarize(results)
    failing = [{"id": r.id, "family": r.family, "class": r.cls, "command": r.argv,
                "exit": r.rc, "first_stderr": r.first_stderr, "detail": r.detail}
               for r in results if r.cls not in ("ok", "error")]
    unnamed = [{"id": r.id, "first_stderr": r.first_stderr} for r in results
               if r.cls in ("error", "unclear") and r.names_it is False]
    from machine import machine

    rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                         text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                cwd=REPO, capture_output=True, text=True).stdout.strip())
    doc = {
        "what": "adversarial cases against every flashml and flashrt command "
                "(tests/adversarial/), each classified",
        "command": "python bench/bench_adversarial.py" + (" --quick" if args.quick else ""),
        "seed": seed,
        "environment": {"git_rev": rev, "git_dirty": dirty, "cpu_count": os.cpu_count(),
                        "parallel": args.parallel, **machine()},
        "seconds": {"total": round(time.perf_counter() - t0, 1), "cases": round(run_s, 1)},
        **summary,
        "failing": failing,
        "rejections_not_naming_file_or_option": unnamed,
        "slowest": sorted(({"id": r.id, "seconds": r.seconds, "class": r.cls}
                           for r in results), key=lambda x: -x["seconds"])[:15],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print()
    print(adv.table(summary))
    print()
    for k, v in summary["totals"].items():
        print(f"  {k}: {v}")
    print(f"\n{len(results)} cases in {run_s:.0f} s -> {args.out}")
    section = security_section(doc)
    text = DOC.read_text()
    a, b = text.index(SECTION_BEGIN), text.index(SECTION_END) + len(SECTION_END)
    DOC.write_text(text[:a] + section + text[b:])
    print(f"\n{DOC.relative_to(REPO)}'s section, rewritten:\n" + section)
    return 0 if not failing else 1


if __name__ == "__main__":
    sys.exit(main())
