"""How fast the CLIs answer `--help` (target: `flashml --help` < 0.5 s): the median of 10
runs of `flashml --help`, `flashml pipeline run --help`, `flashml sim run --help` and
`flashrt --help`, with a bare `python -c pass` beside them (the interpreter's own start).
Writes bench/results/cli.json.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from machine import machine  # noqa: E402

from flashml.files import write_json  # noqa: E402

OUT = ROOT / "bench" / "results" / "cli.json"
FLASHML = [sys.executable, "-m", "flashml.cli"]
RUNS = 10


def median_s(cmd: list[str]) -> float:
    times = []
    for _ in range(RUNS):
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    cases = {"python -c pass": [sys.executable, "-c", "pass"],
             "flashml --help": [*FLASHML, "--help"],
             "flashml pipeline run --help": [*FLASHML, "pipeline", "run", "--help"],
             "flashml sim run --help": [*FLASHML, "sim", "run", "--help"]}
    flashrt = ROOT / "runtime" / "build" / "flashrt"
    if flashrt.exists():
        cases["flashrt --help"] = [str(flashrt), "--help"]
    res = {name: round(median_s(cmd), 4) for name, cmd in cases.items()}
    for name, s in res.items():
        print(f"  {name:30s} {s * 1000:7.1f} ms (median of {RUNS})")
    write_json(OUT, {"machine": machine(), "median_s": res, "target_s": {"flashml --help": 0.5}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
