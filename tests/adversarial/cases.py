"""The suite's shared facts (paths, hostile values, the classes a case is judged into) and
its two records: a Case (one command line against hostile input) and its Result."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared"
FLASHRT = REPO / "runtime" / "build" / "flashrt"
PY = sys.executable
#: The test folders whose modules lend the suite their helpers: tests/ (fuzz_support,
#: demo_policy, runtime_support's cut-down trace), tests/runtime/ (test_runtime_mat's objects
#: trace, test_runtime_readahead's bundle) and tests/trust/ (test_fuzz_kill's kill -9 helpers).
TEST_FOLDERS = [REPO / "tests", REPO / "tests" / "runtime", REPO / "tests" / "trust"]
MEMORY_LIMIT = 6 << 30
"""Address-space limit of every case's process: a hostile input that wants more memory fails
inside its own process instead of taking the machine's."""

HOSTILE = ["0", "-1", "nan", "inf", "1e300", "1e-300", "9223372036854775808", "abc"]
MUST_REFUSE = {"nan", "inf", "abc", "1e300"}
"""Values no numeric option may accept (exit 0 on them is `accepted`)."""

BAD = ("accepted", "unclear", "traceback", "abort", "hang", "partial", "changed",
       "unverified", "wrong")
CLASSES = ("ok", "error", *BAD)
ERROR_LINE = re.compile(r"^(flashml|flashrt)( [\w-]+)*: error: ", re.M)


# --- cases ------------------------------------------------------------------------------------
@dataclass
class Case:
    """One command line against hostile input. `argv` holds {placeholders}: {w} is the case's
    folder and every fixture name given in `files` (copied into it) is {that_name}."""

    id: str
    family: str
    tool: str  # flashml | flashrt
    argv: list[str]
    files: list[str] = field(default_factory=list)
    setup: str = ""  # a SETUPS entry preparing the folder further
    inproc: bool = False
    option: str = ""  # the option under test (a rejection should name it)
    names: list[str] = field(default_factory=list)  # placeholders a rejection should name
    outputs: list[str] = field(default_factory=list)  # placeholders of the outputs
    must_refuse: bool = False
    timeout: float = 60.0
    env: dict[str, str] = field(default_factory=dict)
    runner: str = ""  # a RUNNERS entry instead of one command (concurrency, kill -9)
    verdicts: tuple[int, ...] = ()
    """Exit statuses that are the command's answer, not an error (regress: 1 = regressed)."""
    budget: float = 0.0
    """A job command (minutes even on a tiny input): still running after `budget` s means it
    took the value past the edge; it is stopped there and judged `ok` (or `accepted` for a
    value that must be refused) instead of being run to its end."""


@dataclass
class Result:
    id: str
    family: str
    cls: str
    argv: str
    rc: int | None
    seconds: float
    first_stderr: str = ""
    names_it: bool | None = None
    detail: str = ""
