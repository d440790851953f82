"""What ships, as an MLflow model: the policy bundle (`policy/`: LightGBM text models +
policy.json) with its compiled `policy.so` bundle (`compiled/`: .so, header, manifest) as a
pyfunc model, the registered model `flashml-policy`'s versions.

`mlflow.pyfunc.load_model("models:/flashml-policy@champion").predict(df)` takes a DataFrame
of the feature contract's 18 named admission features (flashml/features/contract.toml) and
returns per row the admission score, the prefetch range, the ML-When score and the admit
decision at the bundle's threshold, computed by the compiled policy.so when the model has
one (the code that ships), else by the LightGBM models. Deployments that want the files
download the model's `artifacts/compiled/` (policy.so, manifest.json) or `artifacts/policy/`
(MLflow names them by the folders logged: the run folder's `policy/` and `compiled/`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlflow.pyfunc
import numpy as np
import pandas as pd

#: The model's name in its MLflow run (`runs:/<run>/...` and the LoggedModel's name).
MODEL_NAME = "policy_bundle"


class PolicyBundleModel(mlflow.pyfunc.PythonModel):
    """The policy bundle (artifact `bundle`) and, when compiled, its policy.so bundle
    (artifact `compiled`) as a pyfunc model."""

    def load_context(self, context: Any) -> None:
        from flashml.compiler.bundle import read_policy_json
        from flashml.features.contract import contract

        art = context.artifacts
        self.params = read_policy_json(Path(art["bundle"]))
        self.names = list(contract().names)
        self.lib = None
        self.policy = None
        if art.get("compiled"):
            from flashml.compiler.loader import load_policy

            self.lib = load_policy(art["compiled"])
        else:
            from flashml.systems.baleen.registry import load_policy_dir

            self.policy = load_policy_dir(Path(art["bundle"]))

    def predict(self, context: Any, model_input: pd.DataFrame,
                params: dict[str, Any] | None = None) -> pd.DataFrame:
        x = np.ascontiguousarray(pd.DataFrame(model_input)[self.names].to_numpy(np.float64))
        if self.lib is not None:
            arrays = self.lib.arrays(x)
        else:
            from flashml.systems.baleen.model import score_all

            arrays = score_all(self.policy, x)
        out = pd.DataFrame({k: np.asarray(v, dtype=np.float64) for k, v in arrays.items()})
        out["admit"] = out["score"] >= float(self.params["admit_threshold"])
        return out


def log_policy_model(bundle: Path, compiled: Path | None, example: Any) -> Any:
    """Log the bundle (and `compiled`, if given) as the pyfunc model `MODEL_NAME` of the
    active run, with a named signature and `example` (a DataFrame of feature rows) as its
    input example, logged at the run's last step with the run's final metrics linked
    (flashml/jobs/ship.py); returns the ModelInfo."""
    import lightgbm
    from mlflow.models import infer_signature

    from flashml.compiler.bundle import read_policy_json

    artifacts = {"bundle": str(bundle)}
    if compiled is not None:
        artifacts["compiled"] = str(compiled)
    probe = PolicyBundleModel()  # its output names the signature's columns
    ctx = mlflow.pyfunc.PythonModelContext(artifacts=artifacts, model_config={})
    probe.load_context(ctx)
    out = probe.predict(ctx, example)
    params = read_policy_json(bundle)
    from flashml.jobs.ship import final_metrics, final_step, link_final_metrics

    run_id = mlflow.active_run().info.run_id
    latest = final_metrics(run_id)
    step = final_step(run_id, latest)  # the model page shows the run's final metrics
    info = mlflow.pyfunc.log_model(
        name=MODEL_NAME, python_model=str(Path(__file__).with_name("policy_model_code.py")),
        artifacts=artifacts, step=step,
        signature=infer_signature(example, out), input_example=example.head(5),
        # given, not inferred: inference loads the model in a subprocess (seconds)
        pip_requirements=["flashml", f"mlflow=={mlflow.__version__}",
                          f"lightgbm=={lightgbm.__version__}", "numpy", "pandas"],
        metadata={"admit_threshold": params["admit_threshold"],
                  "when_threshold": params["when_threshold"],
                  "compiled": compiled is not None})
    link_final_metrics(run_id, info.model_id, step, latest)
    return info
