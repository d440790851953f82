"""The application layer's shared part: what every system's job uses (`run`: run folder,
stage runner, timer; `report`; `ship`: MLflow). The systems' jobs live in their folders
(`flashml/systems/<name>/job.py`), listed in `flashml.systems.SYSTEMS`.
"""
