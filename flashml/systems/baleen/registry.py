"""The MLflow model registry rule: alias `champion` moves only when a candidate beats the
current champion on the evaluation days of the same trace.

Both policies are judged the same way: their models score this trace, their admission
threshold is re-tuned to the target write rate, and the simulated peak DT utilisation on
the evaluation days (after the warm-up) decides. Lower wins; a tie keeps the champion.
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightgbm as lgb
import polars as pl

from flashml.features.matrix import Features
from flashml.simulation import SimConfig
from flashml.systems.baleen.baselines import tune_threshold
from flashml.systems.baleen.model import LearnedPolicy, score_all
from flashml.tracking import CHAMPION, REGISTERED_MODEL

log = logging.getLogger(__name__)
POLICY_ARTIFACTS = "policy"


@dataclass
class Decision:
    promoted: bool
    # versions as numbers whichever store answers (sqlite gives ints, a server strings)
    candidate_version: int
    candidate_peak: float
    champion_version: int | None
    champion_peak: float | None
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()


def load_policy_dir(d: Path) -> LearnedPolicy:
    from flashml.compiler.bundle import MODEL_FILES
    from flashml.features.contract import contract

    boosters = {n: lgb.Booster(model_file=str(d / f)) for n, f in MODEL_FILES.items()}
    return LearnedPolicy(admission=boosters["admission"], admission_features=contract().names,
                         range_start=boosters["range_start"], range_end=boosters["range_end"],
                         when=boosters["when"])


def evaluate(policy: LearnedPolicy, df: pl.DataFrame, feats: Features, base: SimConfig,
             target_mbps: float, when_threshold: float | None = None) -> float:
    """Peak DT of `policy` on the evaluation days, its admission threshold re-tuned to the
    target (with its own ML-When threshold when given)."""
    arrays = score_all(policy, feats)
    if when_threshold is not None:
        base = base.replace(when_threshold=when_threshold)
    tuned = tune_threshold(df, base, target_mbps, arrays, prefetch="range",
                           prefetch_when="score")
    return float(tuned.result.metrics["peak_dt_util"])


def judge(run_id: str, model_uri: str, candidate_peak: float, df: pl.DataFrame,
          feats: Features, base: SimConfig, target_mbps: float,
          tags: dict[str, str] | None = None, description: str | None = None) -> Decision:
    """Register the candidate (`model_uri`: the pipeline's pyfunc policy bundle,
    flashml/systems/baleen/policy_model.py) as a new version, with `tags` and `description`, and
    decide whether it beats the champion. Moves nothing (`promote` does)."""
    import mlflow
    from mlflow.exceptions import MlflowException

    from flashml.compiler.bundle import read_policy_json, sim_peak

    client = mlflow.MlflowClient()
    version = mlflow.register_model(model_uri, REGISTERED_MODEL,
                                    tags={"run_id": run_id, **(tags or {})})
    if description:
        client.update_model_version(REGISTERED_MODEL, version.version, description=description)
    try:
        champ = client.get_model_version_by_alias(REGISTERED_MODEL, CHAMPION)
    except MlflowException:
        champ = None
    if champ is None:
        return Decision(True, int(version.version), candidate_peak, None, None,
                        "no champion yet: the first candidate becomes champion")
    champ_run = champ.tags.get("run_id") or champ.run_id
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(mlflow.artifacts.download_artifacts(
            run_id=champ_run, artifact_path=POLICY_ARTIFACTS, dst_path=tmp))
        # the champion is judged with its own ML-When threshold and peak schedule
        params = read_policy_json(local)
        champ_peak = evaluate(load_policy_dir(local), df, feats,
                              base.replace(**sim_peak(params)), target_mbps,
                              float(params["when_threshold"]))
    if candidate_peak < champ_peak:
        return Decision(True, int(version.version), candidate_peak, int(champ.version), champ_peak,
                        f"candidate peak DT {candidate_peak:.4f} < champion {champ_peak:.4f}")
    return Decision(False, int(version.version), candidate_peak, int(champ.version), champ_peak,
                    f"candidate peak DT {candidate_peak:.4f} >= champion {champ_peak:.4f}: "
                    "champion kept")


def promote(decision: Decision) -> bool:
    """Move `champion` to the candidate if it passed; returns whether it moved."""
    if not decision.promoted:
        return False
    import mlflow

    mlflow.MlflowClient().set_registered_model_alias(REGISTERED_MODEL, CHAMPION,
                                                     decision.candidate_version)
    return True


def register_and_maybe_promote(run_id: str, model_uri: str, candidate_peak: float,
                               df: pl.DataFrame, feats: Features, base: SimConfig,
                               target_mbps: float) -> Decision:
    """`judge`, then `promote`: the whole registry rule in one call."""
    decision = judge(run_id, model_uri, candidate_peak, df, feats, base, target_mbps)
    promote(decision)
    return decision
