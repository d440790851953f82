"""The application layer: one module per system's main job (a list of stages over one run
folder, one MLflow run and one summary), plus what every job shares (`run`: run folder,
stage runner, timer; `report`; `registry`).

`SYSTEMS` lists the job modules; `flashml <command> run` exists for each
(flashml/commands/systems.py). ARCHITECTURE.md says what a job module provides.
"""

#: Job modules, one per system.
SYSTEMS: list[str] = ["flashml.jobs.baleen", "flashml.jobs.mat", "flashml.jobs.pannier",
                       "flashml.jobs.mlcache", "flashml.jobs.kml"]
