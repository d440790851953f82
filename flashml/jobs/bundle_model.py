"""A compiled policy bundle (a folder: policy .so, manifest.json, header; or a knobs-only
manifest) as an MLflow pyfunc model: the logged model of MAT, Pannier, MLCache and KML runs
(flashml/jobs/ship.py), versions of the registered models `flashml-<system>`.

`mlflow.pyfunc.load_model("models:/flashml-mat@champion").predict(df)` runs the bundle's
.so (verified and loaded by flashml.compiler.loader) on a DataFrame of its feature
contract's named columns (features/*.toml):

- eviction (MAT): the 44 eviction features -> `log1p_next_access_distance`;
- partition (MLCache): the partition features -> `share_0`..`share_<n-1>` (the shares of the
  streams, n = the bundle's streams, else the contract's maximum) and `status`;
- readahead (KML): the readahead features -> `readahead_kib`;
- no .so (Pannier's knobs-only bundle): any rows -> the bundle's knobs, one row each.

Deployments that want the files download the model's `artifacts/bundle/`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlflow.pyfunc
import numpy as np
import pandas as pd

#: The capabilities this model runs, in the order it looks for them.
KINDS = ("eviction", "partition", "readahead")


def _contract(kind: str) -> Any:
    from flashml.features import eviction, partition, readahead

    return {"eviction": eviction, "partition": partition, "readahead": readahead}[kind].contract()


class BundleModel(mlflow.pyfunc.PythonModel):
    """The bundle (artifact `bundle`) as a pyfunc model (the module docstring)."""

    def load_context(self, context: Any) -> None:
        import json

        bundle = Path(context.artifacts["bundle"])
        self.manifest: dict[str, Any] = json.loads((bundle / "manifest.json").read_text())
        caps = list(self.manifest.get("capabilities") or [])
        self.capabilities = caps
        self.kind = next((k for k in KINDS if k in caps), None)
        self.lib = None
        self.names: list[str] = []
        if self.kind is not None:
            from flashml.compiler.loader import load_policy

            self.lib = load_policy(bundle, need=self.kind)
            self.names = list(_contract(self.kind).names)

    def streams(self) -> int:
        part = self.manifest.get("partition") or {}
        n = part.get("streams") if isinstance(part, dict) else None
        return int(n) if isinstance(n, int) and n > 0 else int(_contract("partition").max_streams)

    def predict(self, context: Any, model_input: pd.DataFrame,
                params: dict[str, Any] | None = None) -> pd.DataFrame:
        df = pd.DataFrame(model_input)
        if self.lib is None:  # knobs only
            knobs = {k: v for k, v in (self.manifest.get("knobs") or {}).items()
                     if isinstance(v, (int, float, str, bool))}
            return pd.DataFrame([knobs] * len(df))
        x = np.ascontiguousarray(df[self.names].to_numpy(np.float64))
        if self.kind == "eviction":
            return pd.DataFrame({"log1p_next_access_distance": self.lib.evict_predict_batch(x)})
        if self.kind == "readahead":
            return pd.DataFrame({"readahead_kib": self.lib.readahead_kib(x)})
        shares, status = self.lib.partition(x, self.streams())
        out = pd.DataFrame({f"share_{i}": shares[:, i] for i in range(shares.shape[1])})
        out["status"] = status
        return out


def example_input(model: BundleModel, rows: int = 2) -> pd.DataFrame:
    """Rows of the model's input (zeros for each named feature; a row number for a knobs-only
    bundle): its input example and the signature's input."""
    if not model.names:
        return pd.DataFrame({"row": np.arange(rows, dtype=np.int64)})
    return pd.DataFrame(np.zeros((rows, len(model.names))), columns=model.names)
