"""`make bench`: run every bench/bench_*.py; each writes its figures to bench/results/NAME.json.
Then the README's headline figures are rendered again from them (bench/render_headlines.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    only = set(sys.argv[1:])
    failed = []
    for script in sorted(HERE.glob("bench_*.py")):
        name = script.stem.removeprefix("bench_")
        if only and name not in only:
            continue
        print(f"== bench {name}", flush=True)
        if subprocess.run([sys.executable, str(script)], cwd=HERE.parent).returncode != 0:
            failed.append(name)
    if failed:
        print(f"benchmarks failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    # the README's headline figures, from the results just written (tests/kernel/test_docs.py
    # checks)
    return subprocess.run([sys.executable, str(HERE / "render_headlines.py"), "--write"],
                          cwd=HERE.parent).returncode


if __name__ == "__main__":
    sys.exit(main())
