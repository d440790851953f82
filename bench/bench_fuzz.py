"""Fuzzing figures: mutated inputs per format through every trace reader, object
reader, bundle loader and settings parser (Hypothesis, tests/trust/test_fuzz_*.py, random seeds,
every outcome counted: ok, clear error, traceback, hang, partial output, unclear or invalid),
kill -9 crash safety of ingest and of the main job, and the C runtime's parsers under
libFuzzer + ASan/UBSan (runtime/fuzz/).

Writes bench/results/fuzz.json. Sizes: FLASHML_BENCH_FUZZ_CASES (default 1000 per format),
FLASHML_BENCH_FUZZ_SECONDS (default 600 per C target); FLASHML_BENCH_FUZZ_SKIP=c,kill,python
leaves parts out. About 40 minutes on 2 cores at the defaults."""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

from machine import machine

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench" / "results" / "fuzz.json"
CASES = int(os.environ.get("FLASHML_BENCH_FUZZ_CASES", 1000))
SECONDS = int(os.environ.get("FLASHML_BENCH_FUZZ_SECONDS", 600))
SKIP = set(filter(None, os.environ.get("FLASHML_BENCH_FUZZ_SKIP", "").split(",")))
PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
BAD = ("traceback", "hang", "partial", "unclear", "invalid")


def _pytest(args: list[str], log: Path, **env: str) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.run(PYTEST + args, cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "FLASHML_FUZZ_LOG": str(log), **env})
    tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    if proc.returncode != 0:
        print(proc.stdout[-5000:], proc.stderr[-2000:], file=sys.stderr)
    return {"exit_code": proc.returncode, "result": tail,
            "seconds": round(time.perf_counter() - t0, 1)}


def _records(log: Path) -> list[dict]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def python_fuzz(tmp: Path) -> dict:
    """Every fuzz test at CASES cases, counting outcomes (FLASHML_FUZZ_COUNT_ONLY)."""
    log = tmp / "python.jsonl"
    run = _pytest(["-n", "2", "--dist", "loadfile", "tests/trust/test_fuzz_traces.py",
                   "tests/trust/test_fuzz_inputs.py"], log, FLASHML_FUZZ_PROFILE="fuzz",
                  FLASHML_FUZZ_CASES=str(CASES), FLASHML_FUZZ_COUNT_ONLY="1")
    by: dict[str, Counter] = defaultdict(Counter)
    secs: dict[str, list[float]] = defaultdict(list)
    examples: dict[str, list[dict]] = defaultdict(list)
    for r in _records(log):
        by[r["spec"]][r["kind"]] += 1
        secs[r["spec"]].append(r["seconds"])
        if r["kind"] in BAD + ("known",) and len(examples[r["spec"]]) < 3:
            examples[r["spec"]].append({"kind": r["kind"], "mutations": r["mutations"],
                                        "message": r["message"][:300]})
    formats = {}
    for spec, c in sorted(by.items()):
        s = secs[spec]
        formats[spec] = {
            "cases": sum(c.values()), "ok": c["ok"], "clear_errors": c["error"],
            "tracebacks": c["traceback"], "hangs": c["hang"], "partial_outputs": c["partial"],
            "unclear_errors": c["unclear"], "invalid_tables": c["invalid"],
            "known_bugs_elsewhere": c["known"],
            "seconds_p50": round(statistics.median(s), 4) if s else None,
            "seconds_max": round(max(s), 3) if s else None,
            **({"examples": examples[spec]} if examples[spec] else {}),
        }
    readers = {k: v for k, v in formats.items() if k not in ("manifest", "capacity",
                                                            "settings")}
    return {"cases_per_format_asked": CASES, "pytest": run, "formats": formats,
            "totals_trace_and_object_readers": {
                k: sum(v[k] for v in readers.values())
                for k in ("cases", "tracebacks", "hangs", "partial_outputs", "unclear_errors",
                          "invalid_tables")}}


def kill_tests(tmp: Path) -> dict:
    log = tmp / "kill.jsonl"
    run = _pytest(["tests/trust/test_fuzz_kill.py", "-rxX"], log, FLASHML_FUZZ_SLOW="1")
    recs = _records(log)
    ingest = [r for r in recs if r["spec"] == "kill-ingest"]
    pipeline = [r for r in recs if r["spec"] == "kill-pipeline"]
    left = [int(m.group(1)) for r in ingest
            if (m := re.search(r"(\d+) temporary", r["detail"] or r["message"]))]
    return {"pytest": run,
            "ingest_kill_points": len(ingest),
            "ingest_outputs_torn": 0 if run["exit_code"] == 0 else None,
            "ingest_hidden_temporary_files_left": max(left) if left else 0,
            "pipeline_kill_points": len(pipeline),
            "pipeline_killed_runs_with_summary": 0 if run["exit_code"] == 0 else None}


def c_fuzz() -> dict:
    t0 = time.perf_counter()
    proc = subprocess.run(["make", "-s", "-C", "runtime/fuzz", "run", f"FUZZ_SECONDS={SECONDS}"],
                          cwd=REPO, capture_output=True, text=True)
    summary_path = REPO / "runtime" / "build" / "fuzz" / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    clang = subprocess.run(["clang", "--version"], capture_output=True, text=True)
    return {"exit_code": proc.returncode, "seconds": round(time.perf_counter() - t0),
            "fuzzer": "libFuzzer + ASan + UBSan, " + (clang.stdout.splitlines()[0]
                                                      if clang.returncode == 0 else "no clang"),
            "targets": summary, "output": proc.stdout.strip().splitlines()[-4:]}


def main() -> None:
    res: dict = {"machine": machine()}
    if SKIP and OUT.exists():  # keep the figures of the parts not rerun
        old = json.loads(OUT.read_text())
        res.update({k: old[k] for k in ("python", "crash_safety", "c")
                    if k in old and {"python": "python", "crash_safety": "kill",
                                     "c": "c"}[k] in SKIP})
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="flashml-bench-fuzz-") as tmp:
        tmp = Path(tmp)
        if "python" not in SKIP:
            res["python"] = python_fuzz(tmp)
            print(json.dumps(res["python"]["totals_trace_and_object_readers"]), flush=True)
        if "kill" not in SKIP:
            res["crash_safety"] = kill_tests(tmp)
            print(json.dumps(res["crash_safety"]), flush=True)
        if "c" not in SKIP:
            res["c"] = c_fuzz()
            print(json.dumps(res["c"]["targets"]), flush=True)
    res["seconds"] = round(time.perf_counter() - t0)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
