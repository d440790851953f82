"""`flashml kml run`'s settings: the modes, the networks, the policies and workloads judged,
the sizes swept, and `KmlSettings` with its option table (`OPTIONS`; the command's options,
with the knobs': `add_cli`). The settings the simulator and the C runtime read too (the
readahead's range and default, the twin's device and page cache) are declared once in
settings.toml beside this file (`KNOBS`)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from flashml import knobs
from flashml.errors import UserError
from flashml.settings import (
    MAX_SEED,
    Number,
    Option,
    add_options,
    option_table,
    option_values,
    size_text,
)

#: KML's settings as settings.toml declares them (the simulator's and the runtime's too).
KNOBS = knobs.load("kml")
_K = KNOBS.defaults()

MODES = ("auto", "real", "twin")

#: The networks (flashml/systems/kml/model.py NETWORKS): KML's own and ours.
NETWORKS = ("paper", "mlp16")

#: Linux's default readahead for a disk (the kernel's VM_READAHEAD_PAGES; settings.toml's
#: readahead_kib): the baseline a user meets on a real SSD; a loop device's own default is
#: larger (2,560 KiB).
LINUX_KIB: int = _K["readahead_kib"]

#: The fixed baselines (measured in the sweep): the device's own readahead, Linux's 128 KiB,
#: the best fixed size of the sweep.
FIXED = ("default", "linux_128", "best_fixed")

#: The tuners (measured in the evaluation): each network, the decision tree.
TUNERS = ("kml_paper", "kml_mlp16", "kml_tree")

POLICIES = FIXED + TUNERS

#: The paper's workloads, trained on; then the held-out ones (judged only).
TRAIN_WORKLOADS = ("readrandom", "readseq", "readreverse", "readrandomwriterandom")

HELD_OUT = ("updaterandom", "mixgraph")

#: Readahead sizes swept (KiB): 8 KiB .. 1 MiB, powers of two.
SIZES = (8, 16, 32, 64, 128, 256, 512, 1024)


@dataclass(frozen=True)
class KmlSettings:
    """Everything `flashml kml run` needs."""

    #: "real" (db_bench on a device, root), "twin" (the offline twin) or "auto" (real where
    #: it can run, else the twin)
    mode: str = "auto"
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
    read_iops: int = _K["read_iops"]
    read_mbps: float = _K["read_mbps"]
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
    twin_cache_pages: int = _K["twin_cache_pages"]
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

        v = option_values(OPTIONS, args)
        trace = getattr(args, "trace", None)
        mode = v["mode"]
        if trace is not None:
            if mode == "real":
                raise UserError("--trace: a trace is judged on the offline twin; the real "
                                "experiment runs db_bench (use --mode twin)")
            mode = "twin"
        try:
            dev, unit = parse_capacity(v["device_size"])
        except ValueError as e:
            raise UserError(f"--device-size: {e}") from None
        if unit != "bytes" or dev < 256 << 20:
            raise UserError(f"--device-size: at least 256MiB of bytes, got "
                            f"{v['device_size']!r}")
        try:
            sizes = tuple(sorted({int(x) for x in v["sizes"].split(",") if x.strip()}))
        except ValueError:
            raise UserError(f"--sizes: comma-separated KiB like 8,64,512, got {v['sizes']!r}"
                            ) from None
        ra = KNOBS["readahead_kib"]
        if len(sizes) < 2 or any(ra.problem(k) for k in sizes):
            raise UserError(f"--sizes: at least two sizes in {int(ra.min)}..{int(ra.max)} "
                            f"KiB, got {v['sizes']!r}")
        if (v["read_iops"] == 0) != (v["read_mbps"] == 0):
            raise UserError("--read-iops and --read-mbps: both 0 (no throttle) or both above "
                            f"0, got {v['read_iops']} IOs/s and {v['read_mbps']} MiB/s")
        if mode == "twin" and v["read_iops"] == 0:
            raise UserError("--read-iops 0 --read-mbps 0 (no throttle) is for the real device; "
                            "the twin models a device of given IOs/s and MiB/s")
        return cls(mode=mode, trace=trace, format=getattr(args, "format", None),
                   sample_ratio=getattr(args, "sample_ratio", None), device_bytes=dev,
                   num=v["num"], memory_mib=v["memory_mib"],
                   read_iops=v["read_iops"], read_mbps=v["read_mbps"],
                   duration_s=v["duration"], network=v["network"], backend=v["backend"],
                   reads=v["reads"], repeats=v["repeats"],
                   sizes=sizes, hidden=v["hidden"], depth=v["depth"], folds=v["folds"],
                   max_windows=v["max_windows"],
                   twin_requests=v["twin_requests"], twin_cache_pages=v["twin_cache_pages"],
                   seed=v["seed"], workdir=v["device_dir"])


_D = KmlSettings()

#: `flashml kml run`'s options (besides --trace, --format, --sample-ratio and --out), each
#: default the dataclass's.
OPTIONS = option_table(
    Option("mode", "--mode", str, _D.mode, "real: db_bench on a loop device (root); twin: the "
           "offline twin; auto: real where it can run, else the twin", choices=MODES),
    Option("backend", "--backend", str, _D.backend, "the real device: loop (a loop device "
           "over a sparse file in --device-dir) or zram (a compressed RAM disk; its reads do "
           "not wait for a kernel worker, which matters on a busy machine)",
           choices=("loop", "zram")),
    Option("device_size", "--device-size", str, size_text(_D.device_bytes),
           "size of the loop device's sparse backing file"),
    Option("device_dir", "--device-dir", Path, _D.workdir,
           "folder of the loop device's backing file (default: the run folder)"),
    Option("num", "--num", Number(int, 10_000, 10**10, unit="keys"), _D.num,
           "keys in the database (400 B values)"),
    Option("memory_mib", "--memory-mib", Number(int, 16, 1 << 20, unit="MiB"), _D.memory_mib,
           "db_bench's memory cgroup (its page cache), MiB"),
    KNOBS["read_iops"].option(default=_D.read_iops),
    KNOBS["read_mbps"].option(default=_D.read_mbps),
    Option("duration", "--duration", Number(int, 1, 86_400, unit="s"), _D.duration_s,
           "seconds per db_bench run, at most (sweep and evaluation alike)"),
    Option("reads", "--reads", Number(int, 100, 10**10, unit="operations"), _D.reads,
           "operations per run, at most"),
    Option("repeats", "--repeats", Number(int, 1, 1000, unit="runs"), _D.repeats,
           "runs per workload and readahead size (sweep) and per workload and tuner "
           "(evaluation); means with 95%% intervals"),
    Option("sizes", "--sizes", str, ",".join(map(str, _D.sizes)),
           "readahead sizes swept, KiB"),
    Option("network", "--network", str, _D.network, "the network the shipped bundle holds: "
           "paper (KML's: 5 -> 15 -> 5 -> 4 sigmoid units, SGD) or mlp16 (5 -> 16 -> 4, "
           "L-BFGS); both are trained and evaluated", choices=NETWORKS),
    Option("hidden", "--hidden", Number(int, 1, 4096, unit="units"), _D.hidden,
           "mlp16's hidden units"),
    Option("depth", "--depth", Number(int, 1, 64, unit="levels"), _D.depth,
           "the decision tree's depth"),
    Option("folds", "--folds", Number(int, 2, 1000, unit="folds"), _D.folds,
           "cross-validation folds"),
    Option("max_windows", "--max-windows", Number(int, 10, 10**7, unit="windows"),
           _D.max_windows, "training windows per workload, at most (a random sample)"),
    Option("twin_requests", "--twin-requests", Number(int, 10_000, 10**9, unit="requests"),
           _D.twin_requests, "twin: requests per generated workload"),
    KNOBS["twin_cache_pages"].option(default=_D.twin_cache_pages),
    Option("seed", "--seed", Number(int, 0, MAX_SEED), _D.seed,
           "seed of the models, the training-window sample and the twin's traces"),
)


def add_cli(p: argparse.ArgumentParser) -> None:
    p.epilog = ("examples:\n  sudo flashml kml run --device-size 4GiB -o runs/kml\n"
                "  flashml kml run --mode twin -o runs/kml-twin")
    add_options(p, options=OPTIONS)
