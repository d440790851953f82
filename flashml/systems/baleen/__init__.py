"""Baleen: learned admission + prefetch for a flash cache in front of disks. `job`:
`flashml pipeline run` (the stages; `flashml train`, `flashml sweep` and the DAG run the same),
with `run_folder` (what the stages share), `report` (summary, text) and `compile_ahead`;
`model`: the admission, ML-Range and ML-When models; `dataset`: their training rows;
`converge`: the convergence loop; `peak`: the peak schedule; `validation`: the shipped
variant chosen on held-out data; `sweep` (+ `sweep_worker`): the Optuna sweep; `episodes/`:
episodes, OPT and labels (Polars and Spark engines); `tuning`, `baselines`, `opt`: the
policies judged at a target write rate (RejectX, CoinFlip, threshold, OPT); `registry`: the
promotion rule; `policy_model` (+ `policy_model_code`): the MLflow model of a bundle. The
admission contract (features/contract.toml) and the online features are the kernel's."""
