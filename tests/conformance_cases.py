"""The cases flashml is compared with BCacheSim on (bench/bench_conformance.py runs both;
tests/kernel/test_conformance.py checks flashml against the recorded BCacheSim figures in
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
    # OPT with the same episode decisions: flashml's episode job (eviction age, target) picks
    # the admitted episodes; flashml admits every GET of an admitted episode (its per-access
    # `admit` array), BCacheSim gets the same episodes as its offline decisions file
    # (`--ap opt --offline-ap-decisions`: an admitted episode has threshold 0, another 2,
    # the cutoff `--ap-threshold` is 1). No prefetch: OPT's admission alone.
    {"name": "opt", "flashml": {"admission": "opt"}, "bcachesim_ap": "opt",
     "opt_episodes": {"eviction_age_s": 3600.0, "target_write_rate_mbps": 20.0},
     "tolerance": 1e-4},
    # OPT-Range as the artifact runs OPT (its factory's PF_OPT): on a miss at an admitted
    # episode's first access, the episode's whole segment range is prefetched (flashml: the
    # prefetch_start/end arrays, set at each episode's first access; BCacheSim:
    # `--prefetch-when at_start --prefetch-range acctime-episode`)
    {"name": "opt_range", "flashml": {"admission": "opt", "prefetch": "range"},
     "bcachesim_ap": "opt", "bcachesim_args": ["--prefetch-when", "at_start",
                                               "--prefetch-range", "acctime-episode"],
     "opt_episodes": {"eviction_age_s": 3600.0, "target_write_rate_mbps": 20.0},
     "tolerance": 1e-4},
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


def opt_episodes(trace: Path, params: dict[str, float], work: Path) -> Any:
    """flashml's OPT episodes of a Tectonic trace (episodes.parquet-like labels: one row per
    GET with its episode and whether OPT admits it), built by the Polars episode engine."""
    import polars as pl

    from flashml.systems.baleen.episodes.core import EpisodeParams, build
    from flashml.trace.ingest import canonical_path

    out = work / "episodes"
    with canonical_path(trace, "tectonic", workdir=work) as (table, _):
        build(table, out, EpisodeParams(**params), engine="polars", plot=False)
    eps = pl.read_parquet(out / "episodes.parquet").select(
        "episode_id", "score", "dt_saved_prefetch_s", "dt_saved_noprefetch_s")
    return pl.read_parquet(out / "labels.parquet").join(eps, on="episode_id").sort("row")


def opt_arrays(labels: Any, accesses: int, *, prefetch: bool) -> dict[str, np.ndarray]:
    """Per access (row): admitted by OPT (PUTs, which have no episode, are not), and with
    `prefetch` the admitted episode's segment range at its first access (-1 elsewhere)."""
    rows = labels["row"].to_numpy()
    admit = np.zeros(accesses, dtype=bool)
    admit[rows] = labels["admitted"].to_numpy()
    if not prefetch:
        return {"admit": admit}
    start = np.full(accesses, -1, dtype=np.int64)
    end = np.full(accesses, -1, dtype=np.int64)
    first = admit[rows] & (labels["position"].to_numpy() == 0)
    start[rows] = np.where(first, labels["range_start"].to_numpy(), -1)
    end[rows] = np.where(first, labels["range_end"].to_numpy(), -1)
    return {"admit": admit, "prefetch_start": start, "prefetch_end": end}


def bcachesim_decisions(labels: Any, segment_bytes: int) -> dict[str, tuple]:
    """The same episodes in BCacheSim's offline-decisions form: block id (str) -> the
    block's episodes, each `(args, kwargs)` of its Episode(key, ts_logical, ts_physical,
    byte_offset, threshold=..., score, s_export): first/last access (logical = row,
    physical = seconds), the bytes of the segments it touched, threshold 0 if admitted else
    2 (cutoff 1)."""
    import polars as pl

    eps = (labels.group_by("episode_id", maintain_order=True)
           .agg(pl.col("key").first(), pl.col("row").min().alias("r0"),
                pl.col("row").max().alias("r1"), pl.col("time").min().alias("t0"),
                pl.col("time").max().alias("t1"), pl.col("range_start").first(),
                pl.col("range_end").first(), pl.col("admitted").first(),
                pl.col("score").first(), pl.col("dt_saved_prefetch_s").first(),
                pl.col("dt_saved_noprefetch_s").first(), pl.len().alias("n"))
           .sort("r0"))
    out: dict[str, list] = {}
    for e in eps.iter_rows(named=True):
        args = (e["key"], (e["r0"], e["r1"]), (e["t0"], e["t1"]),
                (e["range_start"] * segment_bytes, (e["range_end"] + 1) * segment_bytes - 1))
        pf, nopf = e["dt_saved_prefetch_s"], e["dt_saved_noprefetch_s"]
        kwargs = {"threshold": 0.0 if e["admitted"] else 2.0, "num_accesses": e["n"],
                  "score": e["score"],  # BCacheSim only logs these (its admitted_eps_* stats)
                  "s_export": {"service_time_saved__prefetch": pf,
                               "service_time_saved__noprefetch": nopf,
                               "prefetch_st_benefit": pf - nopf}}
        out.setdefault(str(e["key"]), []).append((args, kwargs))
    return {k: tuple(v) for k, v in out.items()}


def flashml_metrics(trace: Path, policy: dict[str, Any],
                    work: Path | None = None) -> dict[str, float]:
    """flashml's metrics for one case (the simulator's own wall time in `wall_s`). An OPT
    case builds its episodes under `work` (default: a temporary folder)."""
    import tempfile

    from flashml.simulation import SimConfig, simulate
    from flashml.trace.ingest import load_trace

    df, meta = load_trace(trace, "tectonic")
    cfg = SimConfig.for_trace(meta, cache_gb=CACHE_GB, warmup_s=86_400.0, **policy["flashml"])
    arrays = {}
    if "artifact_coin" in policy:
        arrays["admit"] = artifact_coins(trace, policy["artifact_coin"])
    if "opt_episodes" in policy:
        with tempfile.TemporaryDirectory(prefix="flashml-opt-", dir=work) as tmp:
            labels = opt_episodes(trace, policy["opt_episodes"], Path(tmp))
        arrays.update(opt_arrays(labels, df.height,
                                 prefetch=policy["flashml"].get("prefetch") == "range"))
    return dict(simulate(df, cfg, **arrays).metrics)
