"""Measure a device's seek time and bandwidth into the simulator's disk model.

    flashml device probe DEVICE_OR_FILE [--out disk.json] [--seconds 8]

The simulator charges each backend IO `t_seek_s + bytes / bandwidth_bytes_per_s` (its config
keys, declared in sim/src/core/config.rs). The probe reads the device with O_DIRECT, one read at a
time at random aligned offsets, at several sizes (4 KiB .. 2 MiB), and fits that line to the
mean read time at each size by least squares in relative error: the intercept is t_seek_s,
the slope's inverse the bandwidth. `--out` writes exactly those two keys (a SimConfig override:
SimConfig(**json)); stdout gets them with the per-size mean read times and the fit's mean
relative error. Run it as the process whose reads the device sees (e.g. inside a throttling
cgroup: ThrottledDevice.in_cgroup).
"""

from __future__ import annotations

import json
import math
import mmap
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from flashml.errors import UserError
from flashml.files import atomic_path

SIZES = (4096, 65536, 131072, 524288, 1 << 20, 2 << 20)
ALIGN = 4096


def probe(path: str | os.PathLike[str], seconds: float = 8.0, seed: int = 0,
          sizes: tuple[int, ...] = SIZES) -> dict[str, Any]:
    """Time O_DIRECT reads of `path` at `sizes` (about `seconds` in all) and fit the disk model."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    except OSError as e:
        raise UserError(f"{path}: cannot open for O_DIRECT reads: {e.strerror}") from None
    try:
        span = os.lseek(fd, 0, os.SEEK_END)
        if span < 2 * max(sizes):
            raise UserError(f"{path}: {span} bytes; the probe needs at least {2 * max(sizes)}")
        rng = np.random.default_rng(seed)
        buf = mmap.mmap(-1, max(sizes))
        per: dict[int, list[float]] = {s: [] for s in sizes}
        budget = seconds / len(sizes)
        for size in sizes:
            view = memoryview(buf)[:size]
            start = time.monotonic()
            while len(per[size]) < 5 or (time.monotonic() - start < budget
                                         and len(per[size]) < 2000):
                off = int(rng.integers(0, (span - size) // ALIGN)) * ALIGN
                t = time.perf_counter()
                got = os.preadv(fd, [view], off)
                dt = time.perf_counter() - t
                if got != size:
                    raise UserError(f"{path}: short read at {off} ({got} of {size} bytes)")
                per[size].append(dt)
            view.release()
        buf.close()
    finally:
        os.close(fd)
    # the mean time per read at each size, not each read: a throttle passes some reads at
    # once and holds others, and its average rate is what a device's busy time adds up
    x = np.asarray(sizes, dtype=float)
    y = np.asarray([float(np.mean(per[s])) for s in sizes])
    # fitted in relative error (weights 1/y): the small reads, where the seek is most of the
    # time, count as much as the large ones; a plain fit, dominated by the 2 MiB reads' noise
    # (a busy CPU delays a read by milliseconds), can put the intercept below zero
    slope, intercept = np.polyfit(x, y, 1, w=1.0 / y)
    if not (slope > 0 and math.isfinite(slope)):
        raise UserError(f"{path}: read time does not grow with size (slope {slope:.3g} s/B): "
                        "the device is not the bottleneck of these reads")
    t_seek = max(float(intercept), 0.0)
    pred = t_seek + x * slope
    return {"t_seek_s": t_seek, "bandwidth_bytes_per_s": float(1.0 / slope),
            "mean_read_s": {str(s): float(v) for s, v in zip(sizes, y, strict=True)},
            "reads": {str(s): len(v) for s, v in per.items()},
            "fit_rel_error": float(np.mean(np.abs(pred - y) / y))}


def write_disk_config(result: dict[str, Any], out: Path) -> None:
    """The simulator's two disk keys, atomically."""
    with atomic_path(out) as tmp:
        Path(tmp).write_text(json.dumps({k: result[k] for k in ("t_seek_s",
                                                                "bandwidth_bytes_per_s")}) + "\n")
