"""The cases flashml is compared with BCacheSim on (bench/bench_conformance.py runs both;
tests/test_conformance.py checks flashml against the recorded BCacheSim figures in
tests/fixtures/bcachesim_conformance.json). One definition of the traces, the policies and
the metric map for both."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

#: The Baleen artifact's BCacheSim commit (github.com/wonglkd/BCacheSim).
BCACHESIM_COMMIT = "ddeb2d8"
#: The artifact's cache size (GB of 2^30 bytes at full-node scale).
CACHE_GB = 366.475

#: Generated Tectonic traces (3 days: the first is BCacheSim's skipped day).
TRACES = [
    {"name": "region1-like", "preset": "region1-like", "seed": 1, "days": 3.0},
    {"name": "region2-like", "preset": "region2-like", "seed": 2, "days": 3.0},
    {"name": "region3-like", "preset": "region3-like", "seed": 3, "days": 3.0},
]

#: Policies: flashml's SimConfig changes, BCacheSim's `--ap` (and `--ap-probability`), and
#: the relative tolerance on every shared metric (1e-4: equal to 4 significant digits).
POLICIES = [
    {"name": "admitall", "flashml": {"admission": "admitall"}, "bcachesim_ap": "acceptall",
     "tolerance": 1e-4},
    {"name": "rejectx_0.5", "flashml": {"admission": "rejectx", "rejectx_x": 1,
                                        "rejectx_factor": 0.5},
     "bcachesim_ap": "rejectx", "bcachesim_probability": 0.5, "tolerance": 1e-4},
    {"name": "rejectx_2", "flashml": {"admission": "rejectx", "rejectx_x": 1,
                                      "rejectx_factor": 2.0},
     "bcachesim_ap": "rejectx", "bcachesim_probability": 2.0, "tolerance": 1e-4},
    # CoinFlip with BCacheSim's own coin (SpookyHash64 of "<block id>|<access number>",
    # seed 1), given to flashml as per-access admit flags: the policy's semantics alone
    {"name": "coinflip_0.3_its_coin", "flashml": {"admission": "opt"}, "artifact_coin": 0.3,
     "bcachesim_ap": "coinflip", "bcachesim_probability": 0.3, "tolerance": 1e-4},
    # flashml's own coin (splitmix64 of key and access index): the same probability, other
    # coins, so only the whole-trace figures are judged (the peak of one 10-minute window
    # moves with the coin)
    {"name": "coinflip_0.3", "flashml": {"admission": "coinflip", "coinflip_p": 0.3},
     "bcachesim_ap": "coinflip", "bcachesim_probability": 0.3, "tolerance": 0.02,
     "judged": ["flash_write_rate_mibps", "admitted_segments", "iops_saved_ratio",
                "segment_hit_ratio", "service_time_saved_ratio", "avg_eviction_age_s"]},
]

#: flashml metric -> (BCacheSim results key, scale to flashml's unit). A list-valued
#: BCacheSim figure ([logical, physical]) is read at its physical (seconds) entry.
METRIC_MAP: dict[str, tuple[str, float]] = {
    "peak_dt_util": ("PeakServiceTimeUtil1", 0.01),
    "p50_dt_util": ("P50ServiceTimeUtil1", 0.01),
    "p90_dt_util": ("P90ServiceTimeUtil1", 0.01),
    "p99_dt_util": ("P99ServiceTimeUtil1", 0.01),
    "peak_dt_util_with_puts": ("PeakServiceTimeUsedWithPutUtil1", 0.01),
    "p50_dt_util_with_puts": ("P50ServiceTimeWithPutUtil1", 0.01),
    "p90_dt_util_with_puts": ("P90ServiceTimeWithPutUtil1", 0.01),
    "p99_dt_util_with_puts": ("P99ServiceTimeWithPutUtil1", 0.01),
    "flash_write_rate_mibps": ("FlashWriteRate", 1.0),
    "admitted_segments": ("FlashChunkWritten", 1.0),
    "iops_saved_ratio": ("IOPSSavedRatio", 1.0),
    "segment_hit_ratio": ("ChunkHitRatio", 1.0),
    "service_time_saved_ratio": ("ServiceTimeSavedRatio1", 1.0),
    "avg_eviction_age_s": ("AvgEvictionAge", 1.0),
}


def trace_file_name(case: dict[str, Any]) -> str:
    """BCacheSim reads the sample ratio from the name (full_<start>_<ratio>.trace) and the
    region from the folder two levels up."""
    from flashml.trace.presets import get_preset

    return f"full_0_{get_preset(case['preset']).sample_ratio:g}.trace"


def generate(case: dict[str, Any], root: Path) -> Path:
    """Write the case's trace under root/<Region>/<name>/ (BCacheSim's layout)."""
    from flashml.trace.generate import generate_trace

    path = root / "Region1" / case["name"] / trace_file_name(case)
    path.parent.mkdir(parents=True, exist_ok=True)
    generate_trace(case["preset"], case["seed"], path, days=case["days"], progress=False)
    return path


def artifact_coins(trace: Path, p: float) -> np.ndarray:
    """BCacheSim's CoinFlip decision for every access of a Tectonic text trace (its
    CoinFlipDetAP: admit iff SpookyHash64("<block id>|<logical time + 1>", seed 1) / (2^64 - 1)
    < p; logical time = the access's index in the file; zero-size lines are dropped)."""
    import spookyhash

    coins = []
    with open(trace, encoding="ascii") as f:
        for line in f:
            if line.startswith("#"):
                continue
            parts = line.split(" ")
            if int(parts[2]) == 0:
                continue
            h = spookyhash.hash64(f"{parts[0]}|{len(coins) + 1}".encode("ascii"), seed=1)
            coins.append(h / ((1 << 64) - 1) < p)
    return np.array(coins, dtype=bool)


def flashml_metrics(trace: Path, policy: dict[str, Any]) -> dict[str, float]:
    """flashml's metrics for one case (the simulator's own wall time in `wall_s`)."""
    from flashml.simulation import SimConfig, simulate
    from flashml.trace.ingest import load_trace

    df, meta = load_trace(trace, "tectonic")
    cfg = SimConfig.for_trace(meta, cache_gb=CACHE_GB, warmup_s=86_400.0, **policy["flashml"])
    arrays = {}
    if "artifact_coin" in policy:
        arrays["admit"] = artifact_coins(trace, policy["artifact_coin"])
    return dict(simulate(df, cfg, **arrays).metrics)
