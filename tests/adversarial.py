"""The adversarial suite's catalogue and runner, shared by tests/trust/test_adversarial.py (a
fixed-seed subset in `make test`) and bench/bench_adversarial.py (the full catalogue in
`make fuzz` -> bench/results/adversarial.json).

A case is one command line of `flashml` or `flashrt` run against hostile input in a folder of
its own: a hostile number for a numeric option, an output that is one of the inputs (same
name, a symlink, a hard link), a FIFO as an output or an input, a tampered policy bundle,
a hostile trace, two runs on one output, a kill -9. Each is judged (`judge`) into one class:

  ok          exit 0 (for a case that must be refused: `accepted`, a failure)
  error       a clear refusal: exit 1 or 2, exactly one `flashml: error:` / `flashrt...:
              error:` line, no traceback (`names_it`: the line names the option or the file)
  accepted    exit 0 where the input must be refused (a tampered bundle, output = input)
  unclear     exit 1/2 without exactly one error line
  traceback   a Python traceback in stderr
  abort       killed by a signal, or an exit status >= 128
  hang        no exit within the case's timeout
  partial     a non-zero exit that left a new file behind (an output or a temporary file)
  changed     a file that was not the command's output changed (sha256 before and after)
  unverified  an evil .so's constructor ran (it writes $FLASHML_EVIL_MARKER)
  wrong       flashrt exit 3 (bytes served wrong) or a torn output after a kill -9

Only ok and error are fine. Most flashml cases run in process (`cli.main` in a long-lived
worker process, as tests/fuzz_support.py runs its cases, but behind a process boundary: a
worker killed by a signal is an abort, one past its timeout is killed and the case is a hang);
cases where the boundary itself matters (constructors, signals, flashrt, concurrency) run as
subprocesses.
"""

from __future__ import annotations

import contextlib
import faulthandler
import fcntl
import hashlib
import json
import math
import os
import random
import re
import resource
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from flashml.cores import load_factor

REPO = Path(__file__).resolve().parents[1]
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


# --- fixtures: built once per session -------------------------------------------------------
EVIL_C = r"""
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
__attribute__((constructor)) static void flashml_evil(void) {
    const char *p = getenv("FLASHML_EVIL_MARKER");
    if (p) { int fd = open(p, O_WRONLY | O_CREAT | O_APPEND, 0644);
             if (fd >= 0) { (void)write(fd, "evil\n", 5); close(fd); } }
}
"""


def _test_folders_on_path() -> None:
    """TEST_FOLDERS importable (once), as the tests' own modules import one another."""
    for d in reversed(TEST_FOLDERS):
        if str(d) not in sys.path:
            sys.path.insert(0, str(d))


def _sh(*args: object, cwd: Path = REPO, timeout: float = 900) -> None:
    proc = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, args))} failed ({proc.returncode}):\n"
                           f"{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")


def _evil_so(out: Path, work: Path) -> None:
    """A .so whose constructor appends to $FLASHML_EVIL_MARKER: any loader that maps it has
    run code nobody verified."""
    c = work / "evil.c"
    c.write_text(EVIL_C)
    _sh("cc", "-shared", "-fPIC", "-O1", "-o", out, c)


def build_fixtures(root: Path, log: Callable[[str], None] = print) -> dict[str, Path]:
    """Every input the cases copy: small traces of each kind, one compiled bundle per
    capability, an evil .so; in `root` (reused when already complete)."""
    root.mkdir(parents=True, exist_ok=True)
    done = root / "fixtures.json"
    if done.exists():
        return {k: Path(v) for k, v in json.loads(done.read_text()).items()}
    started = time.perf_counter()
    if not FLASHRT.exists():
        _sh("make", "-s", "-C", REPO / "runtime", "all")
    _test_folders_on_path()
    import numpy as np

    from flashml.compiler.build import compile_policy
    from flashml.trace.generate import generate_trace
    from flashml.trace.ingest import ingest

    f: dict[str, Path] = {}
    # traces
    gen = root / "gen.trace"
    generate_trace("region1-like", 0, gen, accesses=4000, days=2.5, progress=False)
    f["trace"] = root / "small.trace"
    from runtime_support import small_trace  # the runtime tests' cut-down trace

    small_trace(gen, f["trace"])
    f["pq"] = root / "small.parquet"
    ingest(f["trace"], f["pq"], "tectonic", progress=False)
    f["msr"] = root / "small_msr.csv"
    import fuzz_support as fs

    specs = fs.specs(200)
    f["msr"].write_bytes(specs["msr"].text)
    f["cp"] = root / "cloudphysics.csv"
    cp = SHARED / "traces" / "cloudphysics-sample.csv"
    lines = cp.read_text().splitlines()[:3000] if cp.exists() \
        else specs["cloudphysics"].text.decode().splitlines()
    f["cp"].write_text("\n".join(lines) + "\n")
    # objects trace (MAT) and its bundle: a small eviction model on the contract's features
    from test_runtime_mat import small_trace as objects_trace

    f["obj"] = objects_trace(root / "objects.csv", n=4000, objects=400)
    log("fixtures: MAT bundle")
    f["matb"] = _mat_bundle(root / "mat")
    # Baleen bundle (admission + prefetch)
    log("fixtures: Baleen bundle")
    import polars as pl

    from demo_policy import write_demo_bundle

    table = pl.read_parquet(f["pq"])
    write_demo_bundle(table, root / "baleen-models", num_trees=4, num_leaves=7)
    f["models"] = root / "baleen-models"
    f["bundle"] = root / "baleen"
    compile_policy(f["bundle"], model_dir=f["models"], log_to_mlflow=False, fast=False)
    # MLCache partition bundle and its page trace
    log("fixtures: partition bundle")
    from flashml.compiler.bundle import save_partition_model
    from flashml.systems.mlcache import model
    from flashml.systems.mlcache.multistream import generate_mix
    from flashml.systems.mlcache.partitioning import page_requests, write_page_csv

    rng = np.random.default_rng(0)
    train = [page_requests(generate_mix(4, 8000, s)[0], "namespace") for s in range(2)]
    data = [model.interval_dataset(t, 260, 300, rng=rng, group=i) for i, t in enumerate(train)]
    net = model.train_network(data, hidden=(8,), max_iter=20)
    save_partition_model(root / "part-models", net, capacity=260, interval=300)
    f["partb"] = root / "partition"
    compile_policy(f["partb"], model_dir=root / "part-models", log_to_mlflow=False)
    f["pages"] = root / "pages.csv"
    write_page_csv(page_requests(generate_mix(4, 5000, 77)[0], "namespace"), f["pages"])
    f["mix"] = f["pages"]
    # readahead bundle: the runtime's test policy with a manifest
    f["rab"] = _readahead_bundle(root / "readahead")
    f["events"] = root / "events.csv"
    f["events"].write_text("time_s,inode,page\n" + "".join(
        f"{i * 0.01:.2f},1,{(i * 7) % 500}\n" for i in range(400)))
    f["rafile"] = root / "read_ahead_kb"
    f["rafile"].write_text("128\n")
    # Pannier: a block trace and a manifest-only bundle
    f["blocks"] = root / "blocks.csv"
    r = random.Random(5)
    f["blocks"].write_text("time,block,blocks,write\n" + "".join(
        f"{i * 0.5:.1f},{r.randrange(0, 3000)},{r.choice([1, 2, 8])},{r.choice([0, 0, 1])}\n"
        for i in range(1500)))
    f["pannb"] = root / "pannier"
    f["pannb"].mkdir(exist_ok=True)
    (f["pannb"] / "manifest.json").write_text(json.dumps({
        "format": "flashml-policy-bundle/1", "system": "pannier", "capabilities": [],
        "pannier": {"policy": "pannier", "promotion_pct": 5.0}}))
    # flashrt replay's trace (8 blocks: its backing store stays small) and backing store
    f["rtrace"] = root / "replay.trace"
    keep: list[str] = []
    with open(f["trace"]) as src, open(f["rtrace"], "w") as dst:
        for line in src:
            if not line.startswith("#"):
                block = line.split()[0]
                if block not in keep and len(keep) >= 8:
                    continue
                keep.append(block) if block not in keep else None
            dst.write(line)
    f["backing"] = root / "backing.img"
    _sh(FLASHRT, "prepare-backing", "--backing", f["backing"], "--trace", f["rtrace"])
    f["map"] = Path(str(f["backing"]) + ".map")
    # the evil .so
    f["evil"] = root / "evil.so"
    _evil_so(f["evil"], root)
    done.write_text(json.dumps({k: str(v) for k, v in f.items()}, indent=1))
    log(f"fixtures: built in {time.perf_counter() - started:.0f} s")
    return f


def _mat_bundle(d: Path) -> Path:
    """A compiled bundle with the eviction capability (its model fits noise: the cases test
    the loaders, not the decisions)."""
    import lightgbm as lgb
    import numpy as np

    from flashml.compiler.build import compile_policy
    from flashml.compiler.bundle import save_evict_model
    from flashml.features import eviction

    names = list(eviction.contract().names)
    rng = np.random.default_rng(0)
    x = rng.random((400, len(names)))
    booster = lgb.train({"objective": "regression", "num_leaves": 7, "verbose": -1, "seed": 0,
                         "deterministic": True, "num_threads": 1},
                        lgb.Dataset(x, x[:, 0] * 10, feature_name=names), num_boost_round=5)
    save_evict_model(d / "models", booster, k=2.0, max_candidates=10, delta=1e-3,
                     initial_threshold=40.0, memory_window=1024)
    compile_policy(d / "bundle", model_dir=d / "models", log_to_mlflow=False, fast=False)
    return d / "bundle"


def _readahead_bundle(d: Path) -> Path:
    """The runtime's readahead test policy as a bundle (as its tests make one)."""
    from test_runtime_readahead import make_bundle  # type: ignore[import-not-found]

    b = make_bundle(d)
    m = json.loads((b / "manifest.json").read_text())
    so = b / "policy.so"
    m.update({"format": "flashml-policy-bundle/1", "system": "kml", "policy_so": "policy.so",
              "size_bytes": so.stat().st_size,
              "sha256": hashlib.sha256(so.read_bytes()).hexdigest()})
    (b / "manifest.json").write_text(json.dumps(m, indent=1))
    return b


# --- the catalogue ----------------------------------------------------------------------------
NUMERIC_BY_NAME = {"--capacity", "--cache-size", "--container-size", "--device-size"}
SKIP_OPTIONS = {"--policy"}  # sim partition --policy: names, not a number

# A cheap, otherwise valid command line of every flashml command (the hostile option is
# added to it) and its timeout: a value that is accepted runs the whole (small) job.
BASE: dict[str, tuple[list[str], list[str], float]] = {
    # command: (argv after the command, fixture files, timeout s)
    "trace ingest": (["{trace}", "-o", "{w}/out.parquet"], ["trace"], 30),
    "trace sample": (["{pq}", "-o", "{w}/out.parquet", "--size", "50"], ["pq"], 30),
    "trace generate": (["--accesses", "300", "--days", "0.1", "--quiet", "-o",
                        "{w}/out.trace"], [], 30),
    "trace mix": (["--requests", "300", "--streams", "2", "-o", "{w}/out.csv"], [], 30),
    "trace stats": (["{pq}"], ["pq"], 30),
    "trace validate": (["{pq}", "--context-dir", "{w}/ctx"], ["pq"], 60),
    "sim run": (["--trace", "{pq}"], ["pq"], 40),
    "sim objects": (["--trace", "{obj}", "--format", "objects-csv", "--capacity", "100KiB"],
                    ["obj"], 30),
    "sim partition": (["--trace", "{pq}", "--capacity", "100", "--interval", "500"],
                      ["pq"], 30),
    "episodes build": (["--trace", "{pq}", "--eviction-age", "3600", "--engine", "polars",
                        "--no-plot", "-o", "{w}/ep"], ["pq"], 60),
    "train": (["--trace", "{pq}", "--max-rounds", "2", "--max-iterations", "1",
               "-o", "{w}/train"], ["pq"], 90),
    "sweep": (["--trace", "{pq}", "--trials", "1", "--max-rounds", "2", "--max-iterations",
               "1", "--storage", "sqlite:///{w}/optuna.db", "-o", "{w}/sweep"], ["pq"], 120),
    "compile": (["--model-dir", "{models}", "-o", "{w}/compiled", "--no-log", "--no-fast-trees"],
                ["models"], 90),
    "pipeline run": (["--trace", "{pq}", "-o", "{w}/run", "--sweep-trials", "0",
                      "--no-register", "--no-compile", "--max-rounds", "2",
                      "--max-iterations", "1", "--engine", "polars"], ["pq"], 150),
    "mat run": (["--trace", "{obj}", "--format", "objects-csv", "-o", "{w}/run",
                 "--capacity", "60obj", "--trials", "0", "--windows", "0", "--baselines", "lru"],
                ["obj"], 150),
    "pannier run": (["--trace", "{pq}", "-o", "{w}/run", "--cache-size", "64MiB",
                     "--trials", "1"], ["pq"], 150),
    "mlcache run": (["--trace", "{pq}", "--stream-column", "namespace", "-o", "{w}/run",
                     "--train-mixes", "2", "--test-mixes", "1", "--requests", "3000",
                     "--max-iter", "5", "--folds", "2", "--permutations", "1"], ["pq"], 150),
    "kml run": (["--mode", "twin", "-o", "{w}/run", "--twin-requests", "10000", "--folds", "2",
                 "--max-windows", "50", "--repeats", "1"], [], 150),
    "regress": (["--candidate", "{bundle}", "--baseline", "{bundle}", "--trace", "{pq}"],
                ["bundle", "pq"], 60),
    "ui": (["mlflow", "--context-dir", "{w}/ctx"], [], 20),
    "device probe": (["{backing}", "--seconds", "0.2", "--out", "{w}/disk.json"], ["backing"],
                     30),
    # root, loop devices, an io cgroup and FUSE (else one clear error naming what is missing)
    "device check": (["--trace", "{rtrace}", "-o", "{w}/device.json", "--admission",
                      "admitall", "--windows", "2", "--flash-mib", "16", "--device-mib", "256",
                      "--probe-seconds", "0.5", "--workdir", "{w}/dev"], ["rtrace"], 300),
}

# Commands whose valid run takes longer than a case may: judged by `Case.budget` (s).
JOBS = {"trace validate": 8.0, "train": 8.0, "sweep": 8.0, "pipeline run": 8.0,
        "mat run": 8.0, "pannier run": 8.0, "mlcache run": 8.0, "kml run": 8.0, "ui": 6.0,
        "episodes build": 8.0, "device check": 8.0}

VERDICTS = {"regress": (1,)}  # exit 1: the candidate regressed (a result, no error line)

# flashrt's replay commands: a valid base and their numeric options.
RT_BASE: dict[str, tuple[list[str], list[str]]] = {
    "replay": (["--policy", "builtin:admitall", "--trace", "{rtrace}", "--flash",
                "{w}/flash.img", "--flash-bytes", "16MiB", "--backing", "{backing}", "--map",
                "{map}", "--warmup-s", "0", "--direct", "off", "--json"],
               ["rtrace", "backing", "map"]),
    "mat-replay": (["--bundle", "{matb}", "--trace", "{obj}", "--capacity", "60",
                    "--unit", "objects", "--cache-file", "{w}/cache.img", "--direct", "off"],
                   ["matb", "obj"]),
    "partition-replay": (["--bundle", "{partb}", "--trace", "{pages}", "--capacity", "260",
                          "--interval", "300", "--cache-file", "{w}/cache.img", "--direct",
                          "off", "--json"], ["partb", "pages"]),
    "pannier-replay": (["--trace", "{blocks}", "--flash", "{w}/flash.img", "--flash-bytes",
                        "16MiB", "--backing", "{w}/backing.img", "--json"], ["blocks"]),
    "tune-readahead": (["--events", "{events}", "--readahead-file", "{rafile}", "--bundle",
                        "{rab}", "--json"], ["events", "rafile", "rab"]),
}


def base_cases() -> list[Case]:
    """Every command's base line as it is, without a hostile option: each must run to its end
    (exit 0; `ui`, a server, until its budget), or every hostile case built on it is refused
    for a reason other than its own, and a job stopped at its budget hides what its end does."""
    rt = [Case(id=f"base/flashrt {cmd}", family="base", tool="flashrt", argv=[cmd, *argv],
               files=files) for cmd, (argv, files) in RT_BASE.items()]
    return rt + [Case(id=f"base/{cmd}", family="base", tool="flashml",
                      argv=[*cmd.split(), *argv], files=files, timeout=max(timeout, 600.0),
                      budget=JOBS[cmd] if cmd == "ui" else 0.0,
                      verdicts=VERDICTS.get(cmd, ()))
                 for cmd, (argv, files, timeout) in BASE.items()]


RT_TEXT_OPTIONS = {"--format", "--allocations-out"}
"""flashrt options whose one-letter metavar is not a number (a format name, a file)."""
RT_TEXT_METAVARS = {"DIR", "FILE", "PATH", "NAME", "MODE", "DEV"}
_RT_METAVAR = re.compile(r"(?<![\w-])(--[a-z][\w-]*)[ =]([A-Z][A-Z0-9]*(?:,[A-Z]+)*(?:,\.\.\.)?)"
                         r"(?![\w.])")

# What an option needs beside its command's base to apply (its slot's policy): the options
# added (the base's --policy replaced where one is given) and the fixtures they name.
RT_CONTEXT: dict[tuple[str, str], tuple[list[str], list[str]]] = {
    ("replay", "--rejectx-x"): (["--policy", "builtin:rejectx"], []),
    ("replay", "--rejectx-factor"): (["--policy", "builtin:rejectx"], []),
    ("replay", "--coinflip-p"): (["--policy", "builtin:coinflip"], []),
    ("replay", "--coinflip-seed"): (["--policy", "builtin:coinflip"], []),
    ("replay", "--write-burst-s"): (["--write-rate-mbps", "100"], []),
    ("replay", "--lifespan-epbpd"): (["--budget", "tire"], []),
    ("replay", "--tire-slack"): (["--budget", "tire", "--lifespan-epbpd", "10"], []),
    ("replay", "--tire-steps"): (["--budget", "tire", "--lifespan-epbpd", "10"], []),
    ("replay", "--tire-quantum-s"): (["--budget", "tire", "--lifespan-epbpd", "10"], []),
    ("replay", "--partition-shares"): (["--partition", "static"], []),
    ("replay", "--partition-interval"): (["--partition", "bundle", "--partition-bundle",
                                          "{partb}"], ["partb"]),
    ("replay", "--readahead-window-ms"): (["--readahead-bundle", "{rab}"], ["rab"]),
}


def rt_help_options(cmd: str) -> list[str]:
    """The numeric options `flashrt CMD --help` names (an option followed by a metavar that
    is not a file, a folder or a name), in the order it names them."""
    proc = subprocess.run([str(FLASHRT), cmd, "--help"], capture_output=True, text=True,
                          timeout=30)
    out: list[str] = []
    for opt, metavar in _RT_METAVAR.findall(proc.stdout + proc.stderr):
        if metavar not in RT_TEXT_METAVARS and opt not in RT_TEXT_OPTIONS and opt not in out:
            out.append(opt)
    return out


def rt_numeric_options() -> dict[str, list[str]]:
    """Every numeric option of every flashrt command in RT_BASE, from its own --help (a new
    option is covered without a new case)."""
    return {cmd: rt_help_options(cmd) for cmd in RT_BASE}


def rt_base(cmd: str, opt: str) -> tuple[list[str], list[str]]:
    """The valid command line (without `opt`) that `opt`'s hostile value is added to, and
    its fixtures."""
    base, files = RT_BASE[cmd]
    extra, more = RT_CONTEXT.get((cmd, opt), ([], []))
    argv = _drop_option(base, opt)
    for i in range(0, len(extra), 2):
        if extra[i] in argv and i + 1 < len(extra):
            argv = _drop_option(argv, extra[i])
    return [*argv, *extra], [*files, *(m for m in more if m not in files)]


def numeric_options() -> dict[str, list[str]]:
    """Every numeric option of every flashml command, from the CLI's own argparse tree (a new
    option is covered without a new case)."""
    import argparse

    from flashml.cli import build_parser

    out: dict[str, list[str]] = {}
    seen: set[int] = set()

    def walk(parser: argparse.ArgumentParser, path: list[str]) -> None:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if subs:
            for a in subs:
                for name, sp in a.choices.items():
                    if id(sp) not in seen:
                        seen.add(id(sp))
                        walk(sp, [*path, name])
            return
        opts = []
        for a in parser._actions:
            if not a.option_strings or a.choices is not None or a.nargs == 0:
                continue
            longest = max(a.option_strings, key=len)
            if longest in SKIP_OPTIONS:
                continue
            # a number: any value parser but a path or a string, or a size given as text
            if (a.type is not None and a.type not in (str, Path)) \
                    or (a.type is None and longest in NUMERIC_BY_NAME):
                opts.append(longest)
        out[" ".join(path)] = opts

    walk(build_parser(), [])
    return out


def _names_of(argv: list[str], files: list[str]) -> list[str]:
    return [f for f in files if "{" + f + "}" in " ".join(argv)]


def number_cases(values: list[str]) -> list[Case]:
    cases: list[Case] = []
    for cmd, opts in numeric_options().items():
        if cmd not in BASE:
            raise KeyError(f"tests/adversarial.py BASE has no command line for {cmd!r}")
        base, files, timeout = BASE[cmd]
        for opt in opts:
            rest = _drop_option(base, opt)
            for v in values:
                cases.append(Case(
                    id=f"number/{cmd} {opt}={v}", family="numbers", tool="flashml",
                    argv=[*cmd.split(), *rest, f"{opt}={v}"], files=files, inproc=True,
                    option=opt, must_refuse=v in MUST_REFUSE, timeout=timeout,
                    budget=JOBS.get(cmd, 0.0), verdicts=VERDICTS.get(cmd, ())))
    for cmd, opts in rt_numeric_options().items():
        for opt in opts:
            rest, files = rt_base(cmd, opt)
            for v in values:
                cases.append(Case(
                    id=f"number/flashrt {cmd} {opt}={v}", family="numbers-flashrt",
                    tool="flashrt", argv=[cmd, *rest, opt, v], files=files, option=opt,
                    must_refuse=v in MUST_REFUSE, timeout=30))
    return cases


def _drop_option(argv: list[str], opt: str) -> list[str]:
    """argv without `opt VALUE` (the hostile one replaces it)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == opt:
            skip = True
            continue
        out.append(a)
    return out


# outputs = inputs: (command argv with {OUT} where the output goes, files, the input
# placeholder the output is made equal to, the output option's name, inproc)
SAME_IO: list[tuple[str, list[str], list[str], str, str]] = [
    ("trace ingest", ["trace", "ingest", "{trace}", "-o", "{OUT}"], ["trace"], "trace", "-o"),
    ("trace ingest pq", ["trace", "ingest", "{pq}", "-o", "{OUT}"], ["pq"], "pq", "-o"),
    ("trace sample", ["trace", "sample", "{pq}", "--size", "50", "-o", "{OUT}"], ["pq"], "pq",
     "-o"),
    ("trace sample raw", ["trace", "sample", "{trace}", "--size", "50", "-o", "{OUT}"],
     ["trace"], "trace", "-o"),
    ("trace validate", ["trace", "validate", "{pq}", "--context-dir", "{OUT}"], ["pq"], "pq",
     "--context-dir"),
    ("sim run", ["sim", "run", "--trace", "{pq}", "--series-out", "{OUT}"], ["pq"], "pq",
     "--series-out"),
    ("episodes build", ["episodes", "build", "--trace", "{pq}", "--eviction-age", "3600",
                        "--engine", "polars", "--no-plot", "-o", "{OUT}"], ["pq"], "pq", "-o"),
    ("train", ["train", "--trace", "{pq}", "--max-rounds", "2", "--max-iterations", "1", "-o",
               "{OUT}"], ["pq"], "pq", "-o"),
    ("compile", ["compile", "--model-dir", "{models}", "--no-log", "-o", "{OUT}"], ["models"],
     "models", "-o"),
    ("pipeline run", ["pipeline", "run", "--trace", "{pq}", "--sweep-trials", "0",
                      "--no-register", "--no-compile", "--max-rounds", "2", "-o", "{OUT}"],
     ["pq"], "pq", "-o"),
    ("mat run", ["mat", "run", "--trace", "{obj}", "--format", "objects-csv", "--capacity",
                 "60obj", "--trials", "1", "-o", "{OUT}"], ["obj"], "obj", "-o"),
    ("pannier run", ["pannier", "run", "--trace", "{pq}", "--trials", "1", "-o", "{OUT}"],
     ["pq"], "pq", "-o"),
    ("mlcache run", ["mlcache", "run", "--trace", "{pq}", "--stream-column", "namespace",
                     "--requests", "3000", "-o", "{OUT}"], ["pq"], "pq", "-o"),
    ("kml run", ["kml", "run", "--trace", "{pq}", "--mode", "twin", "-o", "{OUT}"], ["pq"],
     "pq", "-o"),
    ("sweep", ["sweep", "--trace", "{pq}", "--trials", "1", "--storage",
               "sqlite:///{w}/optuna.db", "-o", "{OUT}"], ["pq"], "pq", "-o"),
    ("device probe", ["device", "probe", "{backing}", "--seconds", "0.2", "--out", "{OUT}"],
     ["backing"], "backing", "--out"),
    ("device check", ["device", "check", "--trace", "{rtrace}", "--windows", "2", "-o",
                      "{OUT}"], ["rtrace"], "rtrace", "-o"),
]
RT_SAME_IO: list[tuple[str, list[str], list[str], str, str]] = [
    ("replay flash=backing", ["replay", *RT_BASE["replay"][0]], RT_BASE["replay"][1],
     "backing", "--flash"),
    ("replay flash=trace", ["replay", *RT_BASE["replay"][0]], RT_BASE["replay"][1],
     "rtrace", "--flash"),
    ("replay flash=map", ["replay", *RT_BASE["replay"][0]], RT_BASE["replay"][1], "map",
     "--flash"),
    ("prepare-backing backing=trace", ["prepare-backing", "--backing", "{OUT}", "--trace",
                                       "{rtrace}", "--map", "{w}/new.map"], ["rtrace"], "rtrace",
     "--backing"),
    ("prepare-backing map=trace", ["prepare-backing", "--backing", "{w}/new.img", "--trace",
                                   "{rtrace}", "--map", "{OUT}"], ["rtrace"], "rtrace", "--map"),
    ("mat-replay cache=trace", ["mat-replay", *RT_BASE["mat-replay"][0]],
     RT_BASE["mat-replay"][1], "obj", "--cache-file"),
    ("partition-replay cache=trace", ["partition-replay", *RT_BASE["partition-replay"][0]],
     RT_BASE["partition-replay"][1], "pages", "--cache-file"),
    ("partition-replay alloc=trace", ["partition-replay", *RT_BASE["partition-replay"][0],
                                      "--allocations-out", "{OUT}"],
     RT_BASE["partition-replay"][1], "pages", "--allocations-out"),
    ("pannier-replay flash=trace", ["pannier-replay", *RT_BASE["pannier-replay"][0]],
     RT_BASE["pannier-replay"][1], "blocks", "--flash"),
    ("pannier-replay backing=trace", ["pannier-replay", *RT_BASE["pannier-replay"][0]],
     RT_BASE["pannier-replay"][1], "blocks", "--backing"),
    ("tune-readahead log=events", ["tune-readahead", *RT_BASE["tune-readahead"][0], "--log",
                                   "{OUT}"], RT_BASE["tune-readahead"][1], "events", "--log"),
]


def _with_output(argv: list[str], opt: str) -> list[str]:
    """argv with `opt {OUT}` (replacing its value when present)."""
    if "{OUT}" in argv:
        return argv
    out = list(argv)
    if opt in out:
        out[out.index(opt) + 1] = "{OUT}"
    else:
        out += [opt, "{OUT}"]
    return out


def same_io_cases() -> list[Case]:
    cases = []
    for tool, table in (("flashml", SAME_IO), ("flashrt", RT_SAME_IO)):
        for name, argv, files, inp, opt in table:
            argv = _with_output(argv, opt)
            for how in ("same", "symlink", "hardlink"):
                if how == "hardlink" and inp == "models":
                    continue  # a folder: no hard link
                cases.append(Case(
                    id=f"same-io/{tool} {name} ({how})", family="output-is-input", tool=tool,
                    argv=argv, files=files, setup=f"out_{how}:{inp}", option=opt,
                    names=[inp, "OUT"], must_refuse=True, timeout=120 if tool == "flashml"
                    else 30, budget=JOBS.get(name, 0.0)))
    return cases


def fifo_cases() -> list[Case]:
    """A FIFO as an output and as an input (nobody writes or reads its other end)."""
    cases = []
    for tool, table in (("flashml", SAME_IO), ("flashrt", RT_SAME_IO)):
        for name, argv, files, inp, opt in table:
            if "=" in name and not name.endswith("=trace"):
                continue
            argv = _with_output(argv, opt)
            cases.append(Case(
                id=f"fifo/{tool} {name} (output)", family="fifo", tool=tool, argv=argv,
                files=files, setup="out_fifo", option=opt, names=["OUT"], must_refuse=True,
                timeout=10))
            cases.append(Case(
                id=f"fifo/{tool} {name} (input)", family="fifo", tool=tool,
                argv=[a.replace("{OUT}", "{w}/fresh-out") for a in argv], files=files,
                setup=f"in_fifo:{inp}", names=[inp], must_refuse=True, timeout=10))
    cases.append(Case(id="fifo/flashrt tune-readahead --readahead-file", family="fifo",
                      tool="flashrt", argv=["tune-readahead", *RT_BASE["tune-readahead"][0]],
                      files=RT_BASE["tune-readahead"][1], setup="in_fifo:rafile",
                      names=["rafile"], must_refuse=True, timeout=10))
    return cases


# Tampered bundles: (name, what is done to a copy of the bundle); every loader gets each.
TAMPERS = ["swapped-so", "lying-sha256", "lying-size", "format-evil", "system-other",
           "capabilities-empty", "capabilities-extra", "symlink-so-evil", "symlink-so-good",
           "fifo-so", "fifo-manifest", "bare-so", "bare-evil-so", "manifest-nan-knob"]
# loaders: (name, tool, argv with {B} for the bundle, bundle fixture, files)
LOADERS: list[tuple[str, str, list[str], str, list[str]]] = [
    ("sim run --policy", "flashml", ["sim", "run", "--trace", "{pq}", "--policy", "{B}"],
     "bundle", ["pq"]),
    ("sim run --mat", "flashml", ["sim", "run", "--trace", "{pq}", "--mat", "{B}"], "matb",
     ["pq"]),
    ("sim partition --bundle", "flashml", ["sim", "partition", "--trace", "{pq}",
                                           "--capacity", "260", "--interval", "300",
                                           "--policy", "mlcache", "--bundle", "{B}"],
     "partb", ["pq"]),
    ("regress --candidate", "flashml", ["regress", "--candidate", "{B}", "--baseline",
                                        "{bundle}", "--trace", "{pq}"], "bundle",
     ["pq", "bundle"]),
    ("flashrt replay --policy", "flashrt", ["replay", *_drop_option(RT_BASE["replay"][0],
                                                                    "--policy"),
                                            "--policy", "{B}"], "bundle",
     RT_BASE["replay"][1]),
    ("flashrt replay --eviction-bundle", "flashrt",
     ["replay", *RT_BASE["replay"][0], "--eviction", "mat", "--eviction-bundle", "{B}"],
     "matb", RT_BASE["replay"][1]),
    ("flashrt mat-replay", "flashrt", ["mat-replay", *_drop_option(RT_BASE["mat-replay"][0],
                                                                   "--bundle"),
                                       "--bundle", "{B}"], "matb", RT_BASE["mat-replay"][1]),
    ("flashrt partition-replay", "flashrt",
     ["partition-replay", *_drop_option(RT_BASE["partition-replay"][0], "--bundle"),
      "--bundle", "{B}"], "partb", RT_BASE["partition-replay"][1]),
    ("flashrt pannier-replay", "flashrt", ["pannier-replay", *RT_BASE["pannier-replay"][0],
                                           "--bundle", "{B}"], "pannb",
     RT_BASE["pannier-replay"][1]),
    ("flashrt tune-readahead", "flashrt",
     ["tune-readahead", *_drop_option(RT_BASE["tune-readahead"][0], "--bundle"), "--bundle",
      "{B}"], "rab", RT_BASE["tune-readahead"][1]),
]


def flashrt_commands() -> list[str]:
    try:
        text = subprocess.run([str(FLASHRT), "--help"], capture_output=True, text=True,
                              timeout=30).stdout
    except OSError:
        return []
    return re.findall(r"^  ([a-z][\w-]+)\s", text, re.M)


def tamper_cases() -> list[Case]:
    loaders = list(LOADERS)
    if "verify" in flashrt_commands():
        for kind in ("bundle", "matb", "partb", "rab"):
            loaders.append((f"flashrt verify ({kind})", "flashrt", ["verify", "{B}"], kind, []))
    cases = []
    for lname, tool, argv, kind, files in loaders:
        for t in TAMPERS:
            if kind == "pannb" and t in ("swapped-so", "lying-sha256", "lying-size",
                                         "symlink-so-evil", "symlink-so-good", "fifo-so",
                                         "bare-so", "bare-evil-so", "capabilities-extra"):
                continue  # a manifest-only bundle: no .so to tamper with
            cases.append(Case(
                # swapped-so: policy.so is evil but the manifest names the good copy; loading
                # exactly what the manifest names (and hashed) is right, so exit 0 is fine
                id=f"tamper/{lname} ({t})", family="tampered-bundle", tool=tool,
                argv=[a.replace("{B}", "{w}/B" if not t.startswith("bare") else "{w}/B.so")
                      for a in argv], files=[*files, kind, "evil"],
                setup=f"tamper:{t}:{kind}", names=["B"], must_refuse=t != "swapped-so",
                timeout=30))
    return cases


HOSTILE_TRACES = ["op-count-huge", "time-1e300-last", "time-neg-1e300-first", "time-inf",
                  "parquet-inf-times", "msr-block-bytes-1", "msr-block-bytes-3",
                  "chunk-mb-1e15", "time-scale-1e-320", "sample-ratio-1e-300"]


def hostile_trace_cases() -> list[Case]:
    cases = []
    for t in HOSTILE_TRACES:
        src = "{w}/h.parquet" if t.startswith("parquet") else (
            "{w}/h.csv" if t.startswith("msr") else "{w}/h.trace")
        extra: list[str] = []
        if t.startswith("msr"):
            extra = ["--format", "msr", "--block-bytes", t.rsplit("-", 1)[1]]
        elif t == "chunk-mb-1e15":
            extra = ["--chunk-mb", "1e15"]
        elif t == "time-scale-1e-320":
            extra = ["--time-scale", "1e-320"]
        elif t == "sample-ratio-1e-300":
            extra = ["--sample-ratio", "1e-300"]
        for cmd in ("ingest", "stats", "validate", "sample"):
            if "--chunk-mb" in extra and cmd != "ingest":
                continue  # an option of ingest only
            argv = ["trace", cmd, src, *extra]
            if cmd in ("ingest", "sample"):
                argv += ["-o", "{w}/out.parquet"]
            if cmd == "sample":
                argv += ["--size", "50"]
            if cmd == "validate":
                argv += ["--context-dir", "{w}/ctx"]
            cases.append(Case(
                id=f"hostile-trace/{cmd} ({t})", family="hostile-trace", tool="flashml",
                argv=argv, files=["trace", "msr", "pq"], setup=f"hostile:{t}",
                option=extra[-2] if extra else "", names=["h"],
                must_refuse=t != "op-count-huge", timeout=90))
    return cases


def concurrency_cases() -> list[Case]:
    """Two runs on one output: the second must be refused (or wait), the first's result
    stands. Few: the job ones take a while."""
    cases = []
    rt = [("replay", "{w}/flash.img"), ("mat-replay", "{w}/cache.img"),
          ("partition-replay", "{w}/cache.img"), ("pannier-replay", "{w}/flash.img")]
    for cmd, _shared in rt:
        base, files = RT_BASE[cmd]
        cases.append(Case(id=f"concurrent/flashrt {cmd}", family="concurrent", tool="flashrt",
                          argv=[cmd, *base], files=files, runner="twice", timeout=120))
    for cmd in ("pipeline run", "mat run"):
        base, files, timeout = BASE[cmd]
        cases.append(Case(id=f"concurrent/flashml {cmd}", family="concurrent", tool="flashml",
                          argv=[*cmd.split(), *base], files=files, runner="twice",
                          timeout=timeout * 3))
    return cases


RACE_LOADERS = ["sim run --policy", "sim run --mat", "sim partition --bundle",
                "flashrt replay --policy", "flashrt replay --eviction-bundle",
                "flashrt mat-replay", "flashrt partition-replay",
                "flashrt tune-readahead"]


def race_cases(loads: int) -> list[Case]:
    """A symlink/rename race against every loader: while the command loads the bundle
    `loads` times, another thread keeps replacing B/policy.so by an evil .so and back (each by
    an atomic rename); a verified loader maps only the bytes it hashed, so no load ever runs
    the evil constructor."""
    loaders = {name: (tool, argv, kind, files) for name, tool, argv, kind, files in LOADERS}
    if "verify" in flashrt_commands():
        loaders["flashrt verify"] = ("flashrt", ["verify", "{B}"], "bundle", [])
    cases = []
    for name in [*RACE_LOADERS, *(["flashrt verify"] if "flashrt verify" in loaders else [])]:
        tool, argv, kind, files = loaders[name]
        n = loads if tool == "flashrt" else max(loads // 5, 10)
        cases.append(Case(
            id=f"race/{name} ({n} loads)", family="race", tool=tool,
            argv=[a.replace("{B}", "{w}/B") for a in argv], files=[*files, kind, "evil"],
            setup=f"tamper:race:{kind}", inproc=True, names=["B"], runner=f"race:{n}",
            timeout=300))
    return cases


def kill_cases(n: int, seed: int) -> list[Case]:
    r = random.Random(seed)
    return [Case(id=f"kill-9/trace ingest #{i}", family="kill-9", tool="flashml",
                 argv=["trace", "ingest", "{big}", "-o", "{w}/out.parquet", "--chunk-mb", "1"],
                 files=["pq"], runner=f"kill:{r.random():.4f}", timeout=120)
            for i in range(n)]


def catalogue(*, seed: int, quick: bool = False) -> list[Case]:
    """Every case: the full set (bench, `make fuzz`), or with --quick fewer values per numeric
    option."""
    values = HOSTILE if not quick else ["0", "-1", "nan", "1e300", "abc"]
    return [*number_cases(values), *same_io_cases(), *fifo_cases(), *tamper_cases(),
            *hostile_trace_cases(), *concurrency_cases(), *kill_cases(4 if quick else 10, seed),
            *race_cases(60 if quick else 150), *base_cases()]


def subset(cases: list[Case], n: int, seed: int) -> list[Case]:
    """A fixed-seed sample of about `n` cases with every family represented (slow ones
    left out: concurrent job runs)."""
    r = random.Random(seed)
    fam: dict[str, list[Case]] = {}
    for c in cases:
        fam.setdefault(c.family, []).append(c)
    total = len(cases)
    out = []
    for name, cs in sorted(fam.items()):
        if name == "concurrent":
            cs = [c for c in cs if c.tool == "flashrt"]
        if name == "base":  # the jobs' whole runs: bench/`make fuzz` only
            cs = [c for c in cs if " ".join(c.argv[:2]) not in JOBS and c.argv[0] not in JOBS]
        # a job command given a value it may take runs for its whole budget: the subset
        # keeps the values that must be refused at once
        cs = [c for c in cs if not c.budget or c.must_refuse or c.family != "numbers"]
        k = max(2, round(n * len(cs) / total))
        out += r.sample(cs, min(k, len(cs)))
    return out


# --- case setup -------------------------------------------------------------------------------
def _copy(src: Path, dst: Path) -> None:
    if src.is_dir():
        shutil.copytree(src, dst, symlinks=True)
    elif src.stat().st_blocks * 512 < src.stat().st_size:  # sparse: keep the holes
        subprocess.run(["cp", "--sparse=always", str(src), str(dst)], check=True)
    else:
        shutil.copy2(src, dst)


def prepare(case: Case, fx: dict[str, Path], w: Path) -> dict[str, str]:
    """Copy the case's fixtures into its folder `w` and apply its setup; the placeholders."""
    p: dict[str, str] = {"w": str(w)}
    for name in case.files:
        dst = w / fx[name].name
        if not dst.exists():
            _copy(fx[name], dst)
        p[name] = str(dst)
    kind, _, arg = case.setup.partition(":")
    if kind.startswith("out_"):
        how = kind[4:]
        out = w / ("out-" + Path(p.get(arg, "x")).name if arg else "out.fifo")
        if how == "same":
            out = Path(p[arg])
        elif how == "symlink":
            out.symlink_to(p[arg])
        elif how == "hardlink":
            os.link(p[arg], out)
        elif how == "fifo":
            os.mkfifo(out)
        p["OUT"] = str(out)
    elif kind == "in_fifo":
        target = Path(p[arg])
        if target.is_dir():
            shutil.rmtree(target)
        else:
            target.unlink()
        os.mkfifo(target)
    elif kind == "tamper":
        t, bkind = arg.split(":")
        _tamper(t, fx[bkind], fx["evil"], w)
        p["B"] = str(w / "B") if not t.startswith("bare") else str(w / "B.so")
    elif kind == "hostile":
        _hostile_trace(arg, fx, w)
        p["h"] = str(next(w.glob("h.*")))
    if case.runner.startswith("kill"):
        p["big"] = str(_big_trace(fx, w))
    return p


def _manifest_edit(b: Path, **kv: Any) -> None:
    m = json.loads((b / "manifest.json").read_text())
    m.update(kv)
    (b / "manifest.json").write_text(json.dumps(m, indent=1))


def _tamper(t: str, bundle: Path, evil: Path, w: Path) -> None:
    b = w / "B"
    shutil.copytree(bundle, b)
    so = b / "policy.so"
    if t == "swapped-so":
        shutil.copy2(so, b / "good.so")
        shutil.copy2(evil, so)
        _manifest_edit(b, policy_so="good.so")
    elif t == "lying-sha256":
        shutil.copy2(evil, so)
    elif t == "lying-size":
        m = json.loads((b / "manifest.json").read_text())
        _manifest_edit(b, size_bytes=int(m.get("size_bytes", so.stat().st_size
                                               if so.exists() else 0)) + 1)
    elif t == "format-evil":
        _manifest_edit(b, format="evil/9")
    elif t == "system-other":
        m = json.loads((b / "manifest.json").read_text())
        _manifest_edit(b, system="kml" if m.get("system") != "kml" else "mat")
    elif t == "capabilities-empty":
        _manifest_edit(b, capabilities=[])
    elif t == "capabilities-extra":
        m = json.loads((b / "manifest.json").read_text())
        caps = list(m.get("capabilities") or [])
        extra = next(c for c in ("admission", "prefetch", "eviction", "partition", "readahead")
                     if c not in caps)
        _manifest_edit(b, capabilities=[*caps, extra])
    elif t == "symlink-so-evil":
        shutil.copy2(evil, w / "elsewhere.so")
        so.unlink()
        so.symlink_to(w / "elsewhere.so")
        _manifest_edit(b, sha256=hashlib.sha256(evil.read_bytes()).hexdigest(),
                       size_bytes=evil.stat().st_size)
    elif t == "symlink-so-good":
        shutil.move(so, w / "elsewhere.so")
        so.symlink_to(w / "elsewhere.so")
    elif t == "fifo-so":
        so.unlink()
        os.mkfifo(so)
    elif t == "fifo-manifest":
        (b / "manifest.json").unlink()
        os.mkfifo(b / "manifest.json")
    elif t == "bare-so":
        shutil.copy2(so if so.exists() else evil, w / "B.so")
    elif t == "bare-evil-so":
        shutil.copy2(evil, w / "B.so")
    elif t == "race":  # the good and the evil .so beside the bundle, for the flipper
        shutil.copy2(so, w / "good.so")
        shutil.copy2(evil, w / "evil.so")
    elif t == "manifest-nan-knob":  # a knob the policy runs with (else the ABI version)
        m = (b / "manifest.json").read_text()
        for key in ("admit_threshold", "k", "sharpness", "promotion_pct", "abi_version"):
            pat = re.compile(rf'("{key}":\s*)-?[0-9][-0-9.eE+]*')
            if pat.search(m):
                m = pat.sub(r"\1NaN", m, count=1)
                break
        (b / "manifest.json").write_text(m)


def _hostile_trace(t: str, fx: dict[str, Path], w: Path) -> None:
    lines = fx["trace"].read_text().splitlines()
    head = [ln for ln in lines if ln.startswith("#")]
    body = [ln for ln in lines if ln and not ln.startswith("#")][:200]
    if t == "op-count-huge":
        row = body[0].split()
        rows = []
        for i in range(60):  # op_count is the last field of the 2019 schema's ... any schema:
            r = list(row)
            r[-1] = str(1 << 20)
            r[3] = str(float(row[3]) + i)
            rows.append(" ".join(r))
        (w / "h.trace").write_text("\n".join([*head, *rows]) + "\n")
        # the op_count column, wherever the header puts it
        hdr = head[0].lstrip("#").split()
        if "op_count" in hdr:
            j = hdr.index("op_count")
            out = []
            for i in range(60):
                r = list(row)
                r[j] = str(1 << 20)
                r[hdr.index("io_size")] = "8388608" if "io_size" in hdr else r[2]
                r[hdr.index("io_offset")] = "0" if "io_offset" in hdr else r[1]
                r[3] = f"{float(row[3]) + i:.3f}"
                out.append(" ".join(r))
            (w / "h.trace").write_text("\n".join([*head, *out]) + "\n")
    elif t in ("time-1e300-last", "time-neg-1e300-first", "time-inf"):
        hdr = head[0].lstrip("#").split()
        j = hdr.index("op_time") if "op_time" in hdr else 3
        rows = [ln.split() for ln in body]
        if t == "time-1e300-last":
            rows[-1][j] = "1e300"
        elif t == "time-neg-1e300-first":
            rows[0][j] = "-1e300"
        else:
            rows[len(rows) // 2][j] = "inf"
        (w / "h.trace").write_text("\n".join([*head, *(" ".join(r) for r in rows)]) + "\n")
    elif t == "parquet-inf-times":
        import polars as pl
        import pyarrow.parquet as pq

        tbl = pq.read_table(fx["pq"])
        df = pl.from_arrow(tbl)
        assert isinstance(df, pl.DataFrame)
        times = df["time"].to_list()
        times[-1] = math.inf
        times[0] = -math.inf
        df = df.with_columns(pl.Series("time", times, dtype=df.schema["time"]))
        pq.write_table(df.to_arrow().replace_schema_metadata(tbl.schema.metadata),
                       w / "h.parquet")
    elif t.startswith("msr"):
        shutil.copy2(fx["msr"], w / "h.csv")
    else:
        (w / "h.trace").write_text("\n".join([*head, *body]) + "\n")


_BIG: dict[str, bytes] = {}


def _big_trace(fx: dict[str, Path], w: Path) -> Path:
    """A trace of a few 1 MiB chunks for kill -9 (generated once per process)."""
    if "big" not in _BIG:
        from flashml.trace.generate import generate_trace

        with tempfile.TemporaryDirectory() as d:
            generate_trace("region1-like", 3, Path(d) / "big.trace", accesses=60_000,
                           progress=False)
            _BIG["big"] = (Path(d) / "big.trace").read_bytes()
    out = w / "big.trace"
    out.write_bytes(_BIG["big"])
    return out


# --- judging ----------------------------------------------------------------------------------
def _snapshot(w: Path) -> dict[str, tuple[str, str]]:
    """Every path under `w` (not following links): its kind and content hash."""
    out: dict[str, tuple[str, str]] = {}
    for root, dirs, files in os.walk(w):
        for name in dirs + files:
            path = Path(root) / name
            rel = str(path.relative_to(w))
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(path))
            elif stat.S_ISREG(st.st_mode):
                out[rel] = ("file", _sha(path))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", "")
            else:
                out[rel] = ("other", str(stat.S_IFMT(st.st_mode)))
    return out


def _sha(path: Path) -> str:
    """sha256 of a file's size and data extents (holes of a sparse file are not read)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        fd = f.fileno()
        size = os.fstat(fd).st_size
        h.update(str(size).encode())
        pos = 0
        while pos < size:
            try:
                start = os.lseek(fd, pos, os.SEEK_DATA)
                end = os.lseek(fd, start, os.SEEK_HOLE)
            except OSError:  # no data after pos (ENXIO), or no SEEK_DATA here
                break
            h.update(f"@{start}".encode())
            f.seek(start)
            left = end - start
            while left > 0:
                chunk = f.read(min(left, 1 << 20))
                if not chunk:
                    break
                h.update(chunk)
                left -= len(chunk)
            pos = end
    return h.hexdigest()


def judge(case: Case, p: dict[str, str], w: Path, before: dict[str, tuple[str, str]],
          rc: int | None, stderr: str, seconds: float, marker: Path, argv: list[str],
          hang: bool = False) -> Result:
    stopped = hang and case.budget > 0
    after = _snapshot(w)
    outputs = {str(Path(p[o]).relative_to(w)) for o in case.outputs if o in p}
    # a new file under an output folder counts as the output
    changed = sorted(k for k, v in before.items()
                     if after.get(k, v) != v and v[0] != "dir" and k not in outputs
                     and k != marker.name)
    gone = sorted(k for k in before if k not in after and k not in outputs)
    # (ctx/: `trace validate`'s Great Expectations store, a cache it keeps, not an output)
    new = sorted(k for k in after if k not in before and k != marker.name
                 and k.split(os.sep)[0] != "ctx")
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    err_lines = ERROR_LINE.findall(stderr)
    first = next((ln for ln in lines if ERROR_LINE.match(ln)), lines[-1] if lines else "")
    cls, detail = "ok", ""
    if marker.exists():
        cls, detail = "unverified", "the evil constructor ran"
    elif changed or gone:
        cls, detail = "changed", f"changed: {changed[:5]} removed: {gone[:5]}"
    elif stopped and not _command_traceback(stderr):
        cls = "accepted" if case.must_refuse else "ok"
        detail = f"still running after {case.budget:g} s: the value was taken (stopped)"
    elif hang:
        cls, detail = "hang", f"no exit after {seconds:.0f} s"
    elif rc is not None and (rc < 0 or rc >= 128):
        cls, detail = "abort", f"exit {rc}"
    elif "Traceback (most recent call last)" in stderr:
        cls = "traceback"
        tb = [ln for ln in lines if re.match(r"^\w+(\.\w+)*(Error|Exception|Exit)\b", ln)]
        first = tb[-1] if tb else first
    elif rc not in (0, None) and new and not stopped:
        cls, detail = "partial", f"left: {new[:5]}"
    elif rc == 3 and case.tool == "flashrt":
        cls = "wrong"
    elif rc == 0 or (rc in case.verdicts and not err_lines):
        cls = "accepted" if case.must_refuse else "ok"
        if rc == 0 and any(Path(k).name.startswith(".") and ".tmp" in k for k in new):
            cls, detail = "partial", f"temporary files left: {new[:5]}"
    elif case.family == "base":  # a valid command line must run
        cls, detail = "wrong", f"exit {rc}: a valid command line failed"
    elif rc in (1, 2) and len(err_lines) == 1:
        cls = "error"
    else:
        cls, detail = "unclear", f"exit {rc}, {len(err_lines)} error lines"
    names_it = None
    if cls in ("error", "unclear"):
        msg = first
        wants = [case.option] if case.option else []
        for n in case.names:
            if n in p:
                wants += [p[n], Path(p[n]).name]
        names_it = any(x and x in msg for x in wants) if wants else None
    return Result(case.id, case.family, cls, " ".join(argv)[:600], rc, round(seconds, 3),
                  first[:300], names_it, detail[:300])


# --- running ----------------------------------------------------------------------------------
def _limits() -> None:
    os.setsid()
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


class Worker:
    """A long-lived `python tests/adversarial.py --worker` running flashml's cli.main in
    process, one case at a time; killed and replaced after a hang or a crash."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None

    def _start(self) -> subprocess.Popen[bytes]:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen([PY, str(Path(__file__).resolve()), "--worker"],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL, cwd=REPO, env=self.env,
                                         preexec_fn=_limits)
        return self.proc

    def run(self, argv: list[str], cwd: Path, env: dict[str, str], timeout: float,
            err_path: Path, entry: str = "") -> tuple[int | None, bool]:
        """(exit status, hung): the status is negative when the worker died of a signal.
        `entry` (module:function) runs instead of flashml's cli.main."""
        proc = self._start()
        assert proc.stdin and proc.stdout
        req: dict[str, Any] = {"argv": argv, "cwd": str(cwd), "env": env, "timeout": timeout,
                               "err": str(err_path), **({"entry": entry} if entry else {})}
        proc.stdin.write((json.dumps(req) + "\n").encode())
        proc.stdin.flush()
        ready, _, _ = select.select([proc.stdout], [], [], timeout + 30)
        if not ready:
            self.kill()
            return None, True
        line = proc.stdout.readline()
        if not line:
            rc = proc.wait()
            self.proc = None
            return (rc if rc < 0 else 128 + rc if rc > 0 else -1), False
        ans = json.loads(line)
        if ans.get("fresh"):
            # a case stopped or crashed in the middle (of an import, of MLflow's store...):
            # the next one gets a fresh interpreter, not its half-made state
            self.kill()
        return ans["rc"], bool(ans["hang"])

    def kill(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.proc = None


def _command_traceback(stderr: str) -> bool:
    """Whether a stopped case's stderr holds a traceback of the command's own: the harness's
    stop (Hang, raised by its alarm, or a KeyboardInterrupt) unwinding a job may be logged
    with its traceback, which ends in that exception and is not the command's."""
    if "Traceback (most recent call last)" not in stderr:
        return False
    ends = [ln for ln in stderr.splitlines()
            if re.match(r"^\w+(\.\w+)*(Error|Exception|Exit|Hang|Interrupt)\b", ln)]
    return not ends or any(not ln.split(":")[0].endswith(("Hang", "KeyboardInterrupt"))
                           for ln in ends)


class Hang(BaseException):
    """A case ran past its timeout (raised by SIGALRM in the worker)."""


def _entry(spec: str) -> Callable[[list[str]], int | None]:
    """`module:function` run instead of flashml's cli.main (the harness's own tests)."""
    import importlib

    mod, fn = spec.split(":")
    return getattr(importlib.import_module(mod), fn)


def worker_main() -> None:
    """The in-process runner: one JSON request per line on stdin, one answer per line."""
    proto = os.fdopen(os.dup(1), "w")
    requests = os.fdopen(os.dup(0), "r")
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)  # a command reading stdin reads nothing, never the requests
    sys.path.insert(0, str(REPO))
    from flashml.cli import main

    home = os.getcwd()

    # Where stderr stood when the alarm first stopped the case (None: it did not): what the
    # command prints after it is the interruption's noise (a cleanup meeting the half-done
    # operation the exception landed in), not the command's answer, and is cut. Whatever the
    # exception turns into on its way out (swallowed by a garbage collector's callback,
    # wrapped by a class body's __set_name__), a case the alarm fired in ran past its time;
    # the alarm fires again each second until the case has stopped.
    stopped_at: list[int | None] = [None]

    def on_alarm(signum: int, frame: Any) -> None:  # noqa: ARG001
        signal.setitimer(signal.ITIMER_REAL, 1.0)
        if stopped_at[0] is None:
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            stopped_at[0] = os.lseek(2, 0, os.SEEK_CUR)
            with open(req["err"] + ".stacks", "w") as f:
                faulthandler.dump_traceback(file=f, all_threads=True)
        raise Hang()

    signal.signal(signal.SIGALRM, on_alarm)
    for line in requests:
        req = json.loads(line)
        saved_env = dict(os.environ)
        os.environ.update(req["env"])
        os.chdir(req["cwd"])
        err = os.open(req["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        out = os.open(os.devnull, os.O_WRONLY)
        sys.stdout.flush()
        sys.stderr.flush()
        old1, old2 = os.dup(1), os.dup(2)
        os.dup2(out, 1)
        os.dup2(err, 2)
        rc, tb = 0, False
        stopped_at[0] = None
        signal.setitimer(signal.ITIMER_REAL, req["timeout"])
        try:
            try:
                rc = int((_entry(req["entry"]) if "entry" in req else main)(req["argv"]) or 0)
            except SystemExit as e:
                rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except BaseException:  # noqa: BLE001 - what an uncaught exception prints
                if stopped_at[0] is None:
                    traceback.print_exc()
                    rc, tb = 1, True
        except Hang:  # fired again while the first one was being handled
            pass
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        hang = stopped_at[0] is not None
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os.dup2(old1, 1)
        os.dup2(old2, 2)
        if stopped_at[0] is not None:
            os.ftruncate(err, stopped_at[0])
        for fd in (old1, old2, out, err):
            os.close(fd)
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(home)
        proto.write(json.dumps({"rc": rc, "hang": hang, "fresh": hang or tb}) + "\n")
        proto.flush()


def _cmd(case: Case, argv: list[str]) -> list[str]:
    if case.tool == "flashrt":
        return [str(FLASHRT), *argv]
    return [PY, "-m", "flashml.cli", *argv]


def _subprocess(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float,
                err_path: Path) -> tuple[int | None, bool]:
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=err,
                                stdin=subprocess.DEVNULL, preexec_fn=_limits)
        try:
            return proc.wait(timeout=timeout), False
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return None, True


class Runner:
    """Runs cases `parallel` at a time, each in a fresh folder under `scratch`."""

    def __init__(self, fixtures: dict[str, Path], scratch: Path, parallel: int = 2) -> None:
        self.fx = fixtures
        self.scratch = scratch
        self.parallel = parallel
        home = scratch / "flashml-home"
        home.mkdir(parents=True, exist_ok=True)
        self.env = {**os.environ, "FLASHML_HOME": str(home), "PYTHONUNBUFFERED": "1",
                    "MLFLOW_TRACKING_URI": "", "FLASHML_TEST": "1"}
        self.env.pop("MLFLOW_TRACKING_URI")
        self.env["PYTHONPATH"] = os.pathsep.join(
            [str(REPO), str(REPO / "tests"), self.env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        # MLflow's store made once: cases running at once would race in its migrations
        subprocess.run([PY, "-c", "from flashml.tracking import setup; setup()"], cwd=REPO,
                       env=self.env, capture_output=True, timeout=600)
        self._workers: list[Worker] = []
        self._local = threading.local()
        self._lock = threading.Lock()

    def _worker(self) -> Worker:
        w = getattr(self._local, "worker", None)
        if w is None:
            w = Worker(self.env)
            self._local.worker = w
            with self._lock:
                self._workers.append(w)
        return w

    def close(self) -> None:
        for w in self._workers:
            w.kill()

    def run_case(self, case: Case) -> Result:
        w = Path(tempfile.mkdtemp(prefix="case-", dir=self.scratch))
        marker = w / "EVIL_MARKER"
        started = time.perf_counter()
        try:
            p = prepare(case, self.fx, w)
            argv = [a.format(**p) if "{" in a else a for a in case.argv]
            before = _snapshot(w)
            env = {"FLASHML_EVIL_MARKER": str(marker)}
            err = self.scratch / f"{w.name}.err"
            t0 = time.perf_counter()
            if case.runner:
                res = RUNNERS[case.runner.split(":")[0]](self, case, p, w, argv, env)
                return res
            # a timeout guards against a hang and a budget is how long a job may run before it
            # is stopped as having taken its value (a value it must refuse is refused before
            # any work): neither is a speed check, both stretch with the machine's load (on 2
            # cores at a load of 10 an import takes 5 times as long)
            limit = (case.budget or case.timeout) * load_factor()
            if case.inproc and case.tool == "flashml":
                rc, hang = self._worker().run(argv, w, env, limit, err)
            else:
                rc, hang = _subprocess(_cmd(case, argv), w, {**self.env, **env}, limit, err)
            secs = time.perf_counter() - t0
            stderr = err.read_text(errors="replace") if err.exists() else ""
            err.unlink(missing_ok=True)
            res = judge(case, p, w, before, rc, stderr, secs, marker, argv, hang)
            stacks = Path(f"{err}.stacks")
            if stacks.exists():
                if res.cls == "hang":
                    res.detail += "; where it was: " + stacks.read_text(errors="replace")[-1500:]
                stacks.unlink()
            return res
        except Exception as e:  # noqa: BLE001 - a harness error is reported, not raised
            return Result(case.id, case.family, "harness", " ".join(case.argv), None,
                          time.perf_counter() - started, f"{type(e).__name__}: {e}"[:300],
                          detail=traceback.format_exc()[-1500:])
        finally:
            _rmtree(w)

    def run(self, cases: list[Case], progress: Callable[[int, Result], None] | None = None
            ) -> list[Result]:
        results: list[Result] = []
        with ThreadPoolExecutor(self.parallel) as ex:
            for i, r in enumerate(ex.map(self.run_case, cases)):
                results.append(r)
                if progress:
                    progress(i, r)
        self.close()
        return results


def _rmtree(w: Path) -> None:
    for root, dirs, _ in os.walk(w):  # read-only folders a case made
        for d in dirs:
            with contextlib.suppress(OSError):
                os.chmod(Path(root) / d, 0o755)
    shutil.rmtree(w, ignore_errors=True)


def _locked_by(pgid: int) -> bool:
    """Whether a process of group `pgid` holds a file lock (/proc/locks)."""
    try:
        text = Path("/proc/locks").read_text()
    except OSError:
        return False
    for line in text.splitlines():
        parts = line.split()
        if len(parts) > 4 and parts[4].isdigit():
            with contextlib.suppress(OSError):
                if os.getpgid(int(parts[4])) == pgid:
                    return True
    return False


def _run_twice(r: Runner, case: Case, p: dict[str, str], w: Path, argv: list[str],
               env: dict[str, str]) -> Result:
    """Two runs on one output that certainly overlap: the first is started, and once it holds
    a file lock (or its output exists) it is stopped (SIGSTOP) while the second runs from
    start to end, then resumed. The second must be refused with one clear error (the first
    holds the output); the first must then finish. Both exiting 0 (nothing kept them apart),
    flashrt's exit 3 (bytes served wrong), a traceback or a hang are failures."""
    before = _snapshot(w)
    errs = [w.parent / f"{w.name}.err{i}" for i in range(2)]
    out = Path(p["w"]) / ("run" if case.tool == "flashml" else
                          "flash.img" if "--flash" in case.argv else "cache.img")
    t0 = time.perf_counter()
    deadline = time.monotonic() + case.timeout * load_factor()
    rcs: list[int | None] = [None, None]
    hang = False

    def start(i: int) -> subprocess.Popen[bytes]:
        with open(errs[i], "wb") as f:
            return subprocess.Popen(_cmd(case, argv), cwd=w, env={**r.env, **env},
                                    stdout=subprocess.DEVNULL, stderr=f,
                                    stdin=subprocess.DEVNULL, preexec_fn=_limits)

    def wait(proc: subprocess.Popen[bytes]) -> int | None:
        nonlocal hang
        try:
            return proc.wait(timeout=max(deadline - time.monotonic(), 1))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            hang = True
            return None

    first = start(0)
    seen_out = None
    while first.poll() is None and time.monotonic() < deadline:
        if _locked_by(first.pid):
            break
        if out.exists():
            seen_out = seen_out or time.monotonic()
            if time.monotonic() - seen_out > 0.5:  # no lock is coming
                break
        time.sleep(0.002)
    stopped = first.poll() is None
    if stopped:
        os.killpg(first.pid, signal.SIGSTOP)
    second = start(1)
    rcs[1] = wait(second)
    if stopped:
        os.killpg(first.pid, signal.SIGCONT)
    rcs[0] = wait(first)
    secs = time.perf_counter() - t0
    stderrs = [e.read_text(errors="replace") for e in errs]
    for e in errs:
        e.unlink(missing_ok=True)
    case_out = Case(**{**asdict(case), "must_refuse": False})
    inputs = {Path(p[f]).name for f in case.files}
    res = judge(case_out, p, w, {k: v for k, v in before.items() if k in inputs},
                rcs[1], stderrs[1] + stderrs[0], secs, w / "EVIL_MARKER", argv, hang)
    res.argv = "2x " + res.argv
    res.rc = rcs[1]
    if res.cls in ("ok", "error", "partial", "unclear"):
        clear = len(ERROR_LINE.findall(stderrs[1])) == 1
        if 3 in rcs and case.tool == "flashrt":
            res.cls, res.detail = "wrong", f"exits {rcs}: bytes served wrong"
        elif not stopped:
            res.cls, res.detail = ("ok" if rcs == [0, 0] else "unclear",
                                   f"exits {rcs}: the first ended before the second started")
        elif rcs == [0, 0]:
            res.cls, res.detail = "accepted", "both runs on one output exited 0"
        elif rcs[0] == 0 and rcs[1] in (1, 2) and clear:
            res.cls, res.detail = "error", "the second was refused, the first finished"
        else:
            res.cls, res.detail = "unclear", f"exits {rcs} (first, second)"
        res.first_stderr = next((ln for s in (stderrs[1], stderrs[0]) for ln in s.splitlines()
                                 if ERROR_LINE.match(ln)), res.first_stderr)
    return res


def _run_kill(r: Runner, case: Case, p: dict[str, str], w: Path, argv: list[str],
              env: dict[str, str]) -> Result:
    """kill -9 of `flashml trace ingest` at a random point (the case's fraction of a full
    run): the output is absent or complete, temporary files are hidden `.tmp` ones that the
    next run removes; the rerun completes (tests/trust/test_fuzz_kill.py's helpers)."""
    import polars as pl

    _test_folders_on_path()
    from test_fuzz_kill import _kill, _popen, _temp_files  # type: ignore[import-not-found]

    frac = float(case.runner.split(":")[1])
    out = Path(p["w"]) / "out.parquet"
    t0 = time.perf_counter()
    full = getattr(r, "_ingest_s", None)
    if full is None:
        proc = _popen(*argv[:-3], "-o", w / "timing.parquet", "--chunk-mb", "1",
                      env={"FLASHML_HOME": r.env["FLASHML_HOME"]})
        proc.wait(timeout=case.timeout * load_factor())
        Path(proc.log_path).unlink(missing_ok=True)
        full = r._ingest_s = time.perf_counter() - t0  # type: ignore[attr-defined]
        (w / "timing.parquet").unlink(missing_ok=True)
    proc = _popen(*argv, env={"FLASHML_HOME": r.env["FLASHML_HOME"]})
    time.sleep(frac * full)
    rc = _kill(proc)
    cls, detail = "ok", f"killed at {frac:.2f} of {full:.1f} s (exit {rc})"
    if out.exists():
        try:
            pl.read_parquet(out)
        except Exception as e:  # noqa: BLE001
            cls, detail = "wrong", f"torn output: {e}"[:300]
    left = [n for n in _temp_files(out.parent, out.name) if not n.endswith(".tmp")]
    if cls == "ok" and left:
        cls, detail = "partial", f"non-.tmp leftovers: {left}"
    err = w.parent / f"{w.name}.rerun"
    rrc, hang = _subprocess(_cmd(case, argv), w, {**r.env, **env},
                            case.timeout * load_factor(), err)
    text = err.read_text(errors="replace") if err.exists() else ""
    err.unlink(missing_ok=True)
    if cls == "ok" and (hang or rrc != 0):
        cls, detail = ("hang" if hang else "traceback" if "Traceback" in text else "wrong",
                       f"the rerun failed (exit {rrc}): {text[-200:]}")
    if cls == "ok" and _temp_files(out.parent, out.name):
        cls, detail = "partial", f"the rerun left {_temp_files(out.parent, out.name)}"
    return Result(case.id, case.family, cls, " ".join(argv), rc,
                  round(time.perf_counter() - t0, 3), "", None, detail)


def _run_race(r: Runner, case: Case, p: dict[str, str], w: Path, argv: list[str],
              env: dict[str, str]) -> Result:
    """The command run `n` times while a thread swaps B/policy.so between the good and the
    evil .so (atomic renames of fresh copies); every load that ran the evil constructor is
    counted (the marker file is removed after each)."""
    n = int(case.runner.split(":")[1])
    so, good, evil = w / "B" / "policy.so", w / "good.so", w / "evil.so"
    marker = w / "EVIL_MARKER"
    stop = threading.Event()

    def flip() -> None:
        i = 0
        while not stop.is_set():
            tmp = w / "B" / f".flip{i % 2}"
            shutil.copyfile(evil if i % 2 == 0 else good, tmp)
            os.replace(tmp, so)
            i += 1
            time.sleep(0.0005)

    t = threading.Thread(target=flip, daemon=True)
    t0 = time.perf_counter()
    runs = {"evil": 0, "served_by_evil": 0, "ok": 0, "refused": 0, "bad": 0}
    bad: list[str] = []
    err = w.parent / f"{w.name}.race"
    t.start()
    try:
        for _ in range(n):
            if case.inproc and case.tool == "flashml":
                rc, hang = r._worker().run(argv, w, env, 60, err)
            else:
                rc, hang = _subprocess(_cmd(case, argv), w, {**r.env, **env}, 60, err)
            text = err.read_text(errors="replace") if err.exists() else ""
            if marker.exists():
                runs["evil"] += 1
                runs["served_by_evil"] += rc == 0
                marker.unlink()
            if hang or rc is None or rc < 0 or rc >= 128 or "Traceback" in text:
                runs["bad"] += 1
                bad.append(f"exit {rc}{' (hang)' if hang else ''}: "
                           f"{(text.strip().splitlines() or [''])[-1][:150]}")
            elif rc == 0:
                runs["ok"] += 1
            else:
                runs["refused"] += 1
    finally:
        stop.set()
        t.join()
        err.unlink(missing_ok=True)
    cls = "unverified" if runs["evil"] else ("traceback" if any("Traceback" in b for b in bad)
                                             else "abort" if bad else "ok")
    detail = (f"{n} loads: {runs['evil']} ran the evil constructor ({runs['served_by_evil']} "
              f"of them exit 0), {runs['ok']} served, {runs['refused']} refused, "
              f"{runs['bad']} bad {bad[:2]}")
    return Result(case.id, case.family, cls, " ".join(argv), None,
                  round(time.perf_counter() - t0, 3), bad[0] if bad else "", None, detail)


RUNNERS: dict[str, Callable[..., Result]] = {"twice": _run_twice, "kill": _run_kill,
                                             "race": _run_race}


# --- summaries --------------------------------------------------------------------------------
def summarize(results: list[Result]) -> dict[str, Any]:
    fam: dict[str, dict[str, int]] = {}
    for r in results:
        fam.setdefault(r.family, dict.fromkeys((*CLASSES, "harness"), 0))[r.cls] += 1
    total = dict.fromkeys((*CLASSES, "harness"), 0)
    for counts in fam.values():
        for k, v in counts.items():
            total[k] += v
    rejections = [r for r in results if r.cls in ("error", "unclear")]
    named = [r for r in rejections if r.names_it]
    return {
        "cases": len(results),
        "per_family": fam,
        "per_class": total,
        "totals": {
            "unverified_code_executions": total["unverified"],
            "user_files_changed": total["changed"],
            "tracebacks": total["traceback"],
            "hangs": total["hang"],
            "aborts": total["abort"],
            "partial_outputs": total["partial"],
            "accepted_nonsense": total["accepted"],
            "unclear_errors": total["unclear"],
            "wrong_results": total["wrong"],
            "harness_errors": total["harness"],
            "rejections": len(rejections),
            "rejections_naming_file_or_option": len(named),
            "rejections_checked_for_a_name": sum(1 for r in rejections
                                                 if r.names_it is not None),
        },
    }


def table(summary: dict[str, Any]) -> str:
    cols = [c for c in (*CLASSES, "harness")
            if summary["per_class"].get(c) or c in ("ok", "error")]
    rows = [["family", "cases", *cols]]
    for name, counts in sorted(summary["per_family"].items()):
        rows.append([name, str(sum(counts.values())), *(str(counts[c]) for c in cols)])
    rows.append(["total", str(summary["cases"]), *(str(summary["per_class"][c]) for c in cols)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(x.rjust(wd) if i else x.ljust(wd)
                               for i, (x, wd) in enumerate(zip(r, widths, strict=True)))
                     for r in rows)


def fixtures_key() -> str:
    """A hash of everything the fixtures are made by (the compiler, the runtime's loader, the
    helpers): a cached set is reused only while none of it changed."""
    h = hashlib.sha256()
    files = [*sorted((REPO / "flashml" / "compiler").glob("*.py")),
             *sorted((REPO / "flashml" / "compiler").glob("*.in")),
             *sorted((REPO / "runtime" / "src").rglob("*.[ch]")),
             *(REPO / "tests" / n for n in ("adversarial.py", "demo_policy.py",
                                            "runtime_support.py",
                                            "runtime/test_runtime_mat.py",
                                            "runtime/test_runtime_readahead.py"))]
    for f in files:
        if f.exists():
            h.update(f.name.encode() + b"\0" + f.read_bytes())
    if FLASHRT.exists():
        h.update(str(FLASHRT.stat().st_mtime_ns).encode())
    return h.hexdigest()[:16]


@contextlib.contextmanager
def session(scratch: Path | None = None, log: Callable[[str], None] = print,
            cache: bool = False) -> Iterator[tuple[dict[str, Path], Path]]:
    """Fixtures and a scratch folder for one run of the suite. cache: keep the fixtures in
    .flashml/adversarial-fixtures/<fixtures_key()> and reuse them (the tests)."""
    own = scratch is None
    scratch = scratch or Path(tempfile.mkdtemp(prefix="flashml-adversarial-"))
    held = None
    try:
        where = scratch / "fixtures"
        if cache:
            # One checkout, several sessions at once (two pytest runs, an edit that changes the
            # key mid-run): a set is built under its key's exclusive lock, used under a shared
            # one, and an older key's set is removed only when nobody holds its lock.
            base = REPO / ".flashml" / "adversarial-fixtures"
            base.mkdir(parents=True, exist_ok=True)
            key = fixtures_key()
            where = base / key
            held = open(base / f"{key}.lock", "a+")  # noqa: SIM115 - held for the session
            fcntl.flock(held, fcntl.LOCK_SH)  # (a session in this process may hold it too)
            _remove_unused_fixture_sets(base, key)
            if not (where / "fixtures.json").exists():
                fcntl.flock(held, fcntl.LOCK_EX)  # build it (or read what another built)
        fx = build_fixtures(where, log)
        if held is not None:
            fcntl.flock(held, fcntl.LOCK_SH)
        before = {k: _snapshot_path(v) for k, v in fx.items()}
        yield fx, scratch
        after = {k: _snapshot_path(v) for k, v in fx.items()}
        bad = [k for k in fx if before[k] != after[k]]
        if bad:
            log(f"WARNING: fixtures changed during the run: {bad}")
    finally:
        if held is not None:
            held.close()
        if own:
            _rmtree(scratch)


def _remove_unused_fixture_sets(base: Path, keep: str) -> None:
    """Remove every cached fixture set but `keep` that no session holds (its lock file free)."""
    for d in base.iterdir():
        if not d.is_dir() or d.name == keep:
            continue
        with open(base / f"{d.name}.lock", "a+") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # another session is using it
            shutil.rmtree(d, ignore_errors=True)
            (base / f"{d.name}.lock").unlink(missing_ok=True)


def _snapshot_path(p: Path) -> Any:
    return _snapshot(p) if p.is_dir() else _sha(p)


if __name__ == "__main__" and sys.argv[1:] == ["--worker"]:
    worker_main()
