"""Where the test suite's CPU goes: sums the lines `FLASHML_TEST_CPU=FILE pytest ...` wrote
(tests/conftest.py: one JSON line per test phase with its wall time, the worker's own CPU and
the CPU of the processes it started and waited for) by test file and by test.

    FLASHML_TEST_CPU=/tmp/cpu.jsonl .venv/bin/pytest -n 2 --dist loadfile -q
    .venv/bin/python scripts/test_cpu.py /tmp/cpu.jsonl --top 30
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("log", type=Path, help="the JSON-lines file FLASHML_TEST_CPU named")
    ap.add_argument("--top", type=int, default=25, help="rows per table (default 25)")
    a = ap.parse_args(argv)
    files: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    tests: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    try:
        lines = a.log.read_text().splitlines()
    except OSError as e:
        print(f"test_cpu: {a.log}: {e.strerror}", file=sys.stderr)
        return 2
    for n, line in enumerate(lines, 1):
        try:
            r = json.loads(line)
            cpu, own, wall = r["cpu_s"] + r["children_cpu_s"], r["cpu_s"], r["wall_s"]
            test = r["test"]
        except (ValueError, KeyError, TypeError) as e:
            print(f"test_cpu: {a.log}:{n}: not a test-phase record ({e})", file=sys.stderr)
            return 2
        f = files[test.split("::")[0]]
        f[0], f[1], f[2] = f[0] + cpu, f[1] + own, f[2] + wall
        t = tests[test]
        t[0], t[1] = t[0] + cpu, t[1] + wall
    total = sum(v[0] for v in files.values())
    print(f"{total:.0f} CPU s over {len(tests)} tests ({sum(v[2] for v in files.values()):.0f} "
          "wall s summed over workers)")
    print(f"\n{'CPU s':>7} {'share':>6} {'own':>6} {'wall s':>7}  file")
    for name, (cpu, own, wall) in sorted(files.items(), key=lambda kv: -kv[1][0])[:a.top]:
        print(f"{cpu:7.0f} {cpu / total:6.1%} {own:6.0f} {wall:7.0f}  {name}")
    print(f"\n{'CPU s':>7} {'wall s':>7}  test")
    for name, (cpu, wall) in sorted(tests.items(), key=lambda kv: -kv[1][0])[:a.top]:
        print(f"{cpu:7.1f} {wall:7.1f}  {name}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # `| head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
