"""What the stages of Baleen's job share, derived from the run folder: where its files are
(policy/, compiled/, the features), the simulator's configs, the memory and span checks, the
learned policy and the warm start read back, and what is logged to MLflow about the data."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from flashml.jobs.run import RunDir
from flashml.settings import BaleenSettings

if TYPE_CHECKING:  # numpy and the simulator load when a stage runs, not with the CLI
    import numpy as np

    from flashml.features.matrix import FeatureMatrix
    from flashml.simulation import SimConfig


SERIES_FILE = "policy_series.npz"


def policy_dir(run: RunDir) -> Path:
    return run.path / "policy"


def compiled_dir(run: RunDir) -> Path:
    return run.path / "compiled"


def features(run: RunDir) -> FeatureMatrix:
    """The admission features of every access (flashml/features/matrix.py: the trace's own
    columns and the counts as uint32, float64 rows on demand; at 10 M accesses 0.48 GB where
    the float64 matrix was 1.44 GB): the counts computed once per run folder and kept in
    `work/feature-counts-<key>.npy`, the key a hash of the accesses table's bytes and the
    feature contract, so a resumed job or a sweep worker process maps the file instead of
    computing them again; once per process after that. Computed online in one pass, straight
    into uint32 (the simulator's Rust code, flashml.simulation.online_counts: no float64
    matrix of every feature; the vectorised Polars reference, features/online.py, took
    23-27 s at 10 M accesses and about 2 GB more at its peak, in its joins; tests hold the
    two equal)."""
    if "feats" not in run.cache:
        import numpy as np

        from flashml.config import UNITS
        from flashml.files import atomic_path
        from flashml.simulation import compact_features, online_counts

        path = features_file(run)
        df = run.frame()[0]
        if not path.is_file():
            from flashml.features.contract import contract
            from flashml.features.matrix import count_columns

            # computed straight into the file's mapped pages: the kernel writes them back
            # and takes them under memory pressure, where an array of the process's own
            # (0.48 GB at 10 M accesses, 4.4 GB at 100 M) could only be held
            with atomic_path(path) as tmp:
                out = np.lib.format.open_memmap(
                    tmp, mode="w+", dtype=np.uint32,
                    shape=(len(count_columns(contract())), df.height))
                online_counts(df, segment_bytes=UNITS.segment_bytes, out=out)
                out.flush()
                del out
        # mapped, not held: the file's pages can be given back under memory pressure
        counts = np.load(path, mmap_mode="r")
        run.cache["feats"] = compact_features(df, counts, UNITS.segment_bytes)
    return run.cache["feats"]


def features_file(run: RunDir) -> Path:
    """Where `features` keeps the run's count features: keyed by the accesses table's bytes
    and the feature contract's hash."""
    import hashlib

    from flashml.compiler.build import sha256_file
    from flashml.features.contract import contract

    key = hashlib.sha256(f"{sha256_file(run.table)} {contract().hash}".encode()).hexdigest()
    return run.work / f"feature-counts-{key[:16]}.npy"


def base_config(run: RunDir, s: BaleenSettings) -> SimConfig:
    """The simulator set-up every policy is judged with: the evaluation starts where the
    training window ends (the first day by default)."""
    from flashml.simulation import SimConfig

    return SimConfig.for_trace(run.frame()[1], cache_gb=s.cache_gb, warmup_s=s.train_seconds)


def learned_config(run: RunDir, s: BaleenSettings) -> SimConfig:
    """`base_config` with the shipped policy's peak schedule (after `train`): the one the
    held-out validation chose (systems/baleen/validation.py: flat, or the `s.peak.hours` busiest
    consecutive hours of the training window with a threshold `s.peak.bonus` lower), or a
    given candidate bundle's."""
    if "learned_base" not in run.cache:
        rec = run.done("train")
        if rec is None or "choice" not in rec:
            raise RuntimeError("the learned policies' schedule is known after `train`")
        ch = rec["choice"]
        run.cache["learned_base"] = base_config(run, s).replace(
            peak_hours=tuple(int(h) for h in ch["peak_hours"]),
            peak_bonus=float(ch["peak_bonus"]))
    return run.cache["learned_base"]


def check_span(run: RunDir, s: BaleenSettings, source: Path | None = None) -> None:
    """UserError (naming `source`, else the run's table) unless the trace outlasts the
    training window by at least one measurement window (systems/baleen/dataset.py)."""
    from flashml.systems.baleen.dataset import check_span as check

    check(run.frame()[0]["time"].to_numpy(), s.train_seconds, source or run.table)


def _learned(run: RunDir) -> Any:
    """The candidate's LearnedPolicy: in memory after `train`, else from `policy/`."""
    loop = run.cache.get("loop")
    if loop is not None:
        return loop.policy
    from flashml.systems.baleen.registry import load_policy_dir

    return load_policy_dir(policy_dir(run))


def warm_start(run: RunDir, s: BaleenSettings) -> Any:
    """The main loop's converged state for the sweep's trials (models/converge.WarmStart):
    in memory after `train`, else from its record and the policy bundle; None when the run
    trained no loop (a given candidate bundle) or ships no bundle (admission only)."""
    from flashml.systems.baleen.converge import WarmStart

    loop = run.cache.get("loop")
    if loop is not None:
        return WarmStart.from_loop(loop, s.loop.accesses_per_episode)
    rec = run.done("train") or {}
    if "policy_bundle" not in rec or "candidate_source" in rec:
        return None
    from flashml.compiler.bundle import read_policy_json
    from flashml.systems.baleen.model import score_all

    policy = _learned(run)
    k = rec.get("convergence", {}).get("accesses_per_episode") or s.loop.accesses_per_episode
    pts = rec.get("search_points") or {}
    from flashml.systems.baleen.validation import FEATURE_SETS, zeroed_features

    fs = (rec.get("choice") or {}).get("feature_set")

    def pairs(xs: Any) -> list[tuple[float, float]]:
        return [(float(x), float(w)) for x, w in xs or []]

    return WarmStart(float(rec["eviction_age_s"]), int(k), policy,
                     score_all(policy, features(run)),
                     float(read_policy_json(policy_dir(run))["when_threshold"]),
                     points=pairs(pts.get("points")),
                     when_points={float(c): pairs(v) for c, v in pts.get("when_points", [])},
                     final_points=pairs(pts.get("final_points")),
                     zeroed=zeroed_features(fs) if fs in FEATURE_SETS else ())


def log_training_curves(run_id: str, boosters: dict[str, Any]) -> None:
    """Each shipped model's held-out loss per boosting round (`gbm.fit`'s record) as the
    stepped metric `gbm_<model>_<set>_<metric>` of the run, so MLflow plots the curves."""
    import time as _time

    from mlflow import MlflowClient
    from mlflow.entities import Metric

    now = int(_time.time() * 1000)
    rows = [Metric(f"gbm_{name}_{key}", v, now, i)
            for name, b in boosters.items()
            for key, vals in (getattr(b, "flashml_curve", None) or {}).items()
            for i, v in enumerate(vals)]
    client = MlflowClient()
    for k in range(0, len(rows), 1000):  # MLflow's batch limit
        client.log_batch(run_id, metrics=rows[k:k + 1000])


def feature_frame(rows: np.ndarray) -> Any:
    """Feature rows as a pandas DataFrame with the contract's 18 feature names (what the
    MLflow models' signatures and input examples show)."""
    import numpy as np
    import pandas as pd

    from flashml.features.contract import contract

    return pd.DataFrame(np.asarray(rows, dtype=np.float64), columns=list(contract().names))


def trace_name(run: RunDir | None, s: BaleenSettings) -> str:
    """The trace as runs and studies name it: its file name, else the generated preset."""
    if s.trace is not None:
        return Path(s.trace).name
    return f"{s.preset}-seed{s.seed}"


def log_dataset(run: RunDir, s: BaleenSettings) -> None:
    """The validated accesses table as the MLflow run's input dataset (`mlflow.log_input`:
    name, source, digest, schema and row count on the run page); the first
    `s.train_seconds` train, the rest judge."""
    import mlflow

    df, meta = run.frame()
    rec = run.done("ingest") or {}
    source = str(Path(rec.get("trace") or run.table).resolve())
    import polars as pl
    from mlflow.data.polars_dataset import infer_schema

    ds = mlflow.data.from_polars(df, source=source, name=trace_name(run, s))
    # MLflow's schema has no unsigned integers: the table's schema with them as long
    ds.__dict__["schema"] = infer_schema(df.head(0).cast(
        {c: pl.Int64 for c, t in df.schema.items() if t.is_unsigned_integer()}))
    mlflow.log_input(ds, context="training", tags={
        "train_hours": f"{s.train_seconds / 3600:g}",
        "sample_ratio": str(getattr(meta, "sample_ratio", ""))})
