"""Every command's base line and its numeric options: flashml's from its parsers, flashrt's
from each command's --help."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from .cases import FLASHRT, Case

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
                    or (a.type in (None, str) and longest in NUMERIC_BY_NAME):
                opts.append(longest)
        out[" ".join(path)] = opts

    walk(build_parser(), [])
    return out




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
