"""KML's readahead sweep on a real RocksDB (issue 19, first stage): db_bench on ext4 on a loop
device (flashml/kml/testbed.py), each of the paper's four workloads at readahead 8 KiB .. 1 MiB
with a cold page cache; the best size per workload is KML's label. Writes
bench/results/kml.json. Needs root, loop devices and db_bench (apt-get install rocksdb-tools);
otherwise it records why it could not run and exits 0.

    .venv/bin/python bench/bench_kml.py [--num 400000] [--reads 20000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from machine import machine  # noqa: E402

from flashml.files import atomic_path, dumps, jsonable  # noqa: E402
from flashml.kml import testbed as kml  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num", type=int, default=1_000_000, help="keys in the database (400 B)")
    ap.add_argument("--reads", type=int, default=1_000_000, help="operations per run (at most)")
    ap.add_argument("--duration", type=int, default=4, help="seconds per run (at most)")
    ap.add_argument("--memory-mib", type=int, default=128,
                    help="db_bench's memory cgroup (its page cache), MiB")
    ap.add_argument("--repeats", type=int, default=3, help="runs per point (the median)")
    ap.add_argument("--device-gib", type=float, default=2.0)
    ap.add_argument("-o", "--output", type=Path, default=ROOT / "bench" / "results" / "kml.json")
    args = ap.parse_args()
    res: dict = {"machine": machine(), "unavailable": kml.unavailable()}
    if res["unavailable"] is None:
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory(dir=ROOT / "bench") as tmp, \
                kml.Testbed(tmp, size_bytes=int(args.device_gib * (1 << 30)),
                            memory_limit_bytes=args.memory_mib << 20) as tb:
            res["default_readahead_kib"] = tb.readahead_kib()
            res["fill"] = tb.fill(args.num)
            res["sweep"] = kml.sweep(tb, reads=args.reads, repeats=args.repeats,
                                     duration_s=args.duration)
        res |= {"num": args.num, "reads": args.reads, "repeats": args.repeats,
                "duration_s": args.duration, "memory_mib": args.memory_mib,
                "device_gib": args.device_gib, "wall_s": time.perf_counter() - t0}
    with atomic_path(args.output) as tmp_out:
        Path(tmp_out).write_text(dumps(jsonable(res), indent=1) + "\n")
    if res["unavailable"]:
        print(f"KML testbed unavailable: {res['unavailable']}")
        return 0
    sizes = kml.READAHEAD_KIB
    print("| workload | " + " | ".join(f"{k} KiB" for k in sizes) + " | best |")
    print("|---|" + "---:|" * len(sizes) + "---:|")
    for w, r in res["sweep"].items():
        cells = [f"{r['ops_per_s'][k]:,.0f}" for k in sizes]
        print(f"| {w} | " + " | ".join(cells) + f" | {r['best_kib']} KiB |")
    print(json.dumps({"default_readahead_kib": res["default_readahead_kib"],
                      "wall_s": round(res["wall_s"])}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
