"""The catalogue: every case of every family (hostile numbers, outputs that are inputs,
FIFOs, tampered bundles, hostile traces, concurrency, races, kill -9), and its subsets."""

from __future__ import annotations

import random
import re
import subprocess

from .cases import FLASHRT, HOSTILE, MUST_REFUSE, Case
from .options import (
    BASE,
    JOBS,
    RT_BASE,
    VERDICTS,
    _drop_option,
    base_cases,
    numeric_options,
    rt_base,
    rt_numeric_options,
)


def _names_of(argv: list[str], files: list[str]) -> list[str]:
    return [f for f in files if "{" + f + "}" in " ".join(argv)]


def number_cases(values: list[str]) -> list[Case]:
    cases: list[Case] = []
    for cmd, opts in numeric_options().items():
        if cmd not in BASE:
            raise KeyError(f"tests/adversarial/options.py BASE has no command line for {cmd!r}")
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
