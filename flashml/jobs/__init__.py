"""The application layer: one module per system's main job (a list of stages over one run
folder, one MLflow run and one summary), plus what every job shares (run folder, timer,
report, registry)."""
