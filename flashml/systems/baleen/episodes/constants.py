"""The episode job's defaults and choices, apart from `core.py` so that the CLI can offer
them without loading Polars."""

from __future__ import annotations

from flashml.settings import EPISODE_ENGINES

#: ML-When margin (Baleen §4.2: epsilon = 5 ms, a proxy for the opportunity cost of writes).
WHEN_EPSILON_S = 5e-3
#: OPT labels go on the first K accesses of each episode (paper K=6; artifact K=15).
DEFAULT_ACCESSES_PER_EPISODE = 6
TIME_MODES = ("seconds", "logical")
#: Episode engines: `auto` picks by the table's size and the Spark master
#: (core.choose_engine): rust (in memory, flashml_sim), polars (chunked by key) or spark.
ENGINES = EPISODE_ENGINES
