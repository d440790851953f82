"""The systems: one folder per system (`flashml/systems/<name>/`), holding its job (the
stages over one run folder, one MLflow run and one summary), its model, its Python face of
the simulator and whatever else is its own; the kernel (every other folder of the package)
is what they share.

`SYSTEMS` lists the job modules; `flashml <command> run` exists for each
(flashml/commands/systems.py). ARCHITECTURE.md says what a job module provides. Only this
registry and the CLI (`commands/`, `cli.py`) import a system; a system never imports another
(tests/kernel/test_layers.py).
"""

#: Job modules, one per system.
SYSTEMS: list[str] = ["flashml.systems.baleen.job", "flashml.systems.mat.job",
                      "flashml.systems.pannier.job", "flashml.systems.mlcache.job",
                      "flashml.systems.kml.job"]
