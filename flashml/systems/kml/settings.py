"""`flashml kml run`'s settings: the modes, the networks, the policies and workloads judged,
the sizes swept, and `KmlSettings` with its options (`add_cli`)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from flashml.errors import UserError
from flashml.settings import MAX_SEED, Number

MODES = ("auto", "real", "twin")

#: The networks (flashml/systems/kml/model.py NETWORKS): KML's own and ours.
NETWORKS = ("paper", "mlp16")

#: Linux's default readahead for a disk (the kernel's VM_READAHEAD_PAGES, 128 KiB): the
#: baseline a user meets on a real SSD; a loop device's own default is larger (2,560 KiB).
LINUX_KIB = 128

#: The fixed baselines (measured in the sweep): the device's own readahead, Linux's 128 KiB,
#: the best fixed size of the sweep.
FIXED = ("default", "linux_128", "best_fixed")

#: The tuners (measured in the evaluation): each network, the decision tree.
TUNERS = ("kml_paper", "kml_mlp16", "kml_tree")

POLICIES = FIXED + TUNERS

#: The paper's workloads, trained on; then the held-out ones (judged only).
TRAIN_WORKLOADS = ("readrandom", "readseq", "readreverse", "readrandomwriterandom")

HELD_OUT = ("updaterandom", "mixgraph")

SIZES = (8, 16, 32, 64, 128, 256, 512, 1024)


@dataclass(frozen=True)
class KmlSettings:
    """Everything `flashml kml run` needs."""

    mode: str = "twin"
    #: the network the shipped bundle (compiled/kml) holds: "paper" (KML's, 5 -> 15 -> 5 -> 4
    #: sigmoid units, SGD) or "mlp16" (ours: 5 -> 16 -> 4, L-BFGS); both are evaluated
    network: str = "mlp16"
    #: the real device: "loop" (a loop device over a sparse file) or "zram" (a compressed
    #: RAM disk: its IOs are served in the reading thread, not by a kernel worker that waits
    #: its turn on a busy machine; flashml/systems/kml/testbed.py BACKENDS)
    backend: str = "loop"
    #: 4 GiB and 4 M keys (a 1.7 GB database, 13x the memory cgroup): a scan outlasts a
    #: 20 s evaluated run, so the tuner's start-up window (the database's open, at the
    #: device's default) weighs as it would on a real database, not as 1 s of a 6 s scan
    device_bytes: int = 4 << 30
    num: int = 4_000_000
    memory_mib: int = 128
    #: the blkio throttle of the device's reads; 0 and 0: none (the machine's own disk)
    read_iops: int = 2000
    read_mbps: float = 64.0
    #: seconds per db_bench run, at most, in the sweep and in the evaluation alike (the fixed
    #: sizes' runs of the sweep are the baselines the tuners are judged against)
    duration_s: int = 6
    #: operations per run, at most: the whole database, so a scan reads it once (random
    #: workloads stop at the duration first)
    reads: int = 4_000_000
    #: runs per workload and size (sweep) and per workload and tuner (evaluate)
    repeats: int = 5
    sizes: tuple[int, ...] = SIZES
    #: mlp16's hidden units
    hidden: int = 16
    depth: int = 6
    folds: int = 10
    #: training windows per workload, at most (a random sample)
    max_windows: int = 2000
    #: the twin: requests per generated workload trace, page-cache pages
    twin_requests: int = 400_000
    twin_cache_pages: int = 32_768
    seed: int = 0
    workdir: Path | None = None
    #: a block trace the twin also judges the tuner on (twin mode)
    trace: Path | None = None
    format: str | None = None
    sample_ratio: float | None = None

    def replace(self, **kw: Any) -> KmlSettings:
        return replace(self, **kw)

    @classmethod
    def from_cli(cls, args: argparse.Namespace) -> KmlSettings:
        from flashml.simulation import parse_capacity

        trace = getattr(args, "trace", None)
        mode = args.mode
        if trace is not None:
            if mode == "real":
                raise UserError("--trace: a trace is judged on the offline twin; the real "
                                "experiment runs db_bench (use --mode twin)")
            mode = "twin"
        try:
            dev, unit = parse_capacity(args.device_size)
        except ValueError as e:
            raise UserError(f"--device-size: {e}") from None
        if unit != "bytes" or dev < 256 << 20:
            raise UserError(f"--device-size: at least 256MiB of bytes, got {args.device_size!r}")
        try:
            sizes = tuple(sorted({int(x) for x in args.sizes.split(",") if x.strip()}))
        except ValueError:
            raise UserError(f"--sizes: comma-separated KiB like 8,64,512, got {args.sizes!r}"
                            ) from None
        if len(sizes) < 2 or not all(4 <= k <= 1 << 20 for k in sizes):
            raise UserError(f"--sizes: at least two sizes in 4..1048576 KiB, got {args.sizes!r}")
        checks = {"--num": (args.num, 10_000), "--memory-mib": (args.memory_mib, 16),
                  "--read-iops": (args.read_iops, 0), "--read-mbps": (args.read_mbps, 0.0),
                  "--duration": (args.duration, 1), "--reads": (args.reads, 100),
                  "--repeats": (args.repeats, 1), "--hidden": (args.hidden, 1),
                  "--depth": (args.depth, 1), "--folds": (args.folds, 2),
                  "--max-windows": (args.max_windows, 10),
                  "--twin-requests": (args.twin_requests, 10_000),
                  "--twin-cache-pages": (args.twin_cache_pages, 16)}
        for flag, (v, lo) in checks.items():
            if v < lo:
                raise UserError(f"{flag} must be >= {lo}, got {v}")
        if (args.read_iops == 0) != (args.read_mbps == 0):
            raise UserError("--read-iops and --read-mbps: both 0 (no throttle) or both above "
                            f"0, got {args.read_iops} IOs/s and {args.read_mbps} MiB/s")
        if mode == "twin" and args.read_iops == 0:
            raise UserError("--read-iops 0 --read-mbps 0 (no throttle) is for the real device; "
                            "the twin models a device of given IOs/s and MiB/s")
        return cls(mode=mode, trace=trace, format=getattr(args, "format", None),
                   sample_ratio=getattr(args, "sample_ratio", None), device_bytes=dev,
                   num=args.num, memory_mib=args.memory_mib,
                   read_iops=args.read_iops, read_mbps=args.read_mbps,
                   duration_s=args.duration, network=args.network, backend=args.backend,
                   reads=args.reads, repeats=args.repeats,
                   sizes=sizes, hidden=args.hidden, depth=args.depth, folds=args.folds,
                   max_windows=args.max_windows,
                   twin_requests=args.twin_requests, twin_cache_pages=args.twin_cache_pages,
                   seed=args.seed, workdir=args.device_dir)


def add_cli(p: argparse.ArgumentParser) -> None:
    d = KmlSettings()
    p.epilog = ("examples:\n  sudo flashml kml run --device-size 4GiB -o runs/kml\n"
                "  flashml kml run --mode twin -o runs/kml-twin")
    p.add_argument("--mode", choices=MODES, default="auto",
                   help="real: db_bench on a loop device (root); twin: the offline twin; "
                   "auto: real where it can run, else the twin (default)")
    p.add_argument("--backend", choices=("loop", "zram"), default=d.backend,
                   help="the real device: loop (a loop device over a sparse file in "
                   "--device-dir) or zram (a compressed RAM disk; its reads do not wait for a "
                   "kernel worker, which matters on a busy machine); default loop")
    p.add_argument("--device-size", default="4GiB",
                   help="the loop device's size (its sparse backing file; default 4GiB)")
    p.add_argument("--device-dir", type=Path, default=None,
                   help="folder of the loop device's backing file (default: the run folder)")
    p.add_argument("--num", type=Number(int, 10_000, 10**10, unit="keys"),
                   default=d.num, help="keys in the database (400 B values)")
    p.add_argument("--memory-mib", type=Number(int, 16, 1 << 20, unit="MiB"),
                   default=d.memory_mib,
                   help="db_bench's memory cgroup (its page cache), MiB")
    p.add_argument("--read-iops", type=Number(int, 0, 10**7, unit="IOs/s"),
                   default=d.read_iops,
                   help="the device's read IOs/s (blkio throttle; 0 with --read-mbps 0: no "
                   "throttle)")
    p.add_argument("--read-mbps", type=Number(float, 0.0, 1e6, unit="MiB/s"),
                   default=d.read_mbps,
                   help="the device's read bandwidth, MiB/s (blkio throttle; 0 with "
                   "--read-iops 0: no throttle)")
    p.add_argument("--duration", type=Number(int, 1, 86_400, unit="s"),
                   default=d.duration_s,
                   help="seconds per db_bench run, at most (sweep and evaluation alike)")
    p.add_argument("--reads", type=Number(int, 100, 10**10, unit="operations"),
                   default=d.reads, help="operations per run, at most")
    p.add_argument("--repeats", type=Number(int, 1, 1000, unit="runs"),
                   default=d.repeats,
                   help="runs per workload and readahead size (sweep) and per workload and "
                   "tuner (evaluation); means with 95%% intervals")
    p.add_argument("--sizes", default=",".join(map(str, d.sizes)),
                   help="readahead sizes swept, KiB")
    p.add_argument("--network", choices=NETWORKS, default=d.network,
                   help="the network the shipped bundle holds: paper (KML's: 5 -> 15 -> 5 -> "
                   "4 sigmoid units, SGD) or mlp16 (5 -> 16 -> 4, L-BFGS); both are trained "
                   "and evaluated (default mlp16)")
    p.add_argument("--hidden", type=Number(int, 1, 4096, unit="units"),
                   default=d.hidden, help="mlp16's hidden units")
    p.add_argument("--depth", type=Number(int, 1, 64, unit="levels"),
                   default=d.depth, help="the decision tree's depth")
    p.add_argument("--folds", type=Number(int, 2, 1000, unit="folds"),
                   default=d.folds, help="cross-validation folds")
    p.add_argument("--max-windows", type=Number(int, 10, 10**7, unit="windows"),
                   default=d.max_windows,
                   help="training windows per workload, at most (a random sample)")
    p.add_argument("--twin-requests", type=Number(int, 10_000, 10**9, unit="requests"),
                   default=d.twin_requests,
                   help="twin: requests per generated workload")
    p.add_argument("--twin-cache-pages", type=Number(int, 16, 1 << 30, unit="pages"),
                   default=d.twin_cache_pages,
                   help="twin: page-cache pages (4 KiB)")
    p.add_argument("--seed", type=Number(int, 0, MAX_SEED),
                   default=d.seed,
                   help="seed of the models, the training-window sample and the twin's traces")
