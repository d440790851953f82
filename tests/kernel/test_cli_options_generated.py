"""Every numeric option of every command, found from `flashml.cli`'s own parser (a new option
or command is covered without a test being written), given hostile values through
`flashml.cli.main` in-process: 0, -1, nan, inf, -inf, 1e300, 1e-300, 2^63 and a non-number.

Each either succeeds, or is refused with one error naming the option (and its unit, where it
has one): argparse's usage error (exit 2) or one `flashml: error:` line (exit 1); never a
traceback, never a hang, never an output left behind by a refusal.

A refusal costs a parse; an accepted value runs its command. The cheap commands run for real;
the others stop at the start of their work (`Command.stub`: reaching it means every check
before the work passed) unless FLASHML_FUZZ_PROFILE=fuzz, which runs them for real where
their minimal arguments can (`Command.real`). What the trace commands do with hostile trace
files is tests/trust/test_fuzz_traces.py's and its friends'.

Every system's job options are generated from its option table (`flashml.settings.Option`
records, declared in the system's settings.py) and its settings.toml knobs: no system module
calls argparse itself, and each table's defaults are its settings dataclass's. The kernel
commands' options are such tables too (declared in their flashml/commands/ module): only
their positional arguments are argparse's own.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import os
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from flashml import cli, knobs
from flashml.errors import UserError
from flashml.settings import (
    Number,
    Option,
    add_options,
    is_numeric_type,
    option_table,
    option_values,
    positive_ints,
    size_text,
)
from flashml.systems import SYSTEMS

from conftest import REPO

VALUES = ("0", "-1", "nan", "inf", "-inf", "1e300", "1e-300", str(2**63), "many")
FUZZ = os.environ.get("FLASHML_FUZZ_PROFILE") == "fuzz"
#: Seconds one case may take (a refusal: a parse; an accepted value: a tiny run).
CASE_S = 600 if FUZZ else 120


class Reached(Exception):
    """The command got past its checks to the work it was stopped at (`Command.stub`)."""


@dataclass(frozen=True)
class Command:
    #: argv after the command path, given the case folder and the shared inputs.
    args: Callable[[Path, dict[str, Path]], list[str]]
    #: `module:attribute` replaced by one raising Reached; None: the command runs.
    stub: str | None = None
    #: Run for real under FLASHML_FUZZ_PROFILE=fuzz (its minimal args make a real run).
    real: bool = True
    #: Options that need another option to mean anything: option -> those arguments.
    needs: tuple[tuple[str, tuple[str, ...]], ...] = ()


def _out(d: Path, i: dict[str, Path]) -> list[str]:
    return ["-o", str(d / "out")]


#: Minimal otherwise-valid arguments of each command (keyed by its path).
COMMANDS: dict[tuple[str, ...], Command] = {
    ("trace", "ingest"): Command(lambda d, i: [str(i["raw"]), *_out(d, i)],
                                 stub="flashml.trace.ingest:ingest", real=False),
    ("trace", "sample"): Command(lambda d, i: [str(i["table"]), "--size", "50", *_out(d, i)],
                                 stub="flashml.trace.sample:sample_by_key", real=False),
    ("trace", "generate"): Command(lambda d, i: ["--accesses", "1000", *_out(d, i)],
                                   stub="flashml.trace.generate:generate_trace", real=False,
                                   needs=(("--zipf", ("--preset", "web-like")),
                                          ("--overwrites", ("--preset", "web-like")))),
    ("trace", "mix"): Command(lambda d, i: ["--requests", "1000", *_out(d, i)],
                              stub="flashml.systems.mlcache.multistream:generate_mix",
                              real=False),
    ("trace", "stats"): Command(lambda d, i: [str(i["table"])]),
    ("trace", "validate"): Command(lambda d, i: [str(i["table"]), "--context-dir",
                                                 str(d / "gx")],
                                   stub="flashml.trace.validate:validate_table", real=False),
    ("sim", "run"): Command(lambda d, i: ["--trace", str(i["table"])],
                            needs=tuple((f"--mat-{n.replace('_', '-')}", ("--mat", "none"))
                                        for n in ("k", "max-candidates", "delta",
                                                  "initial-threshold", "controller",
                                                  "reuse-predictions", "memory-window"))),
    ("sim", "objects"): Command(lambda d, i: ["--trace", str(i["objects"]), "--capacity",
                                              "2obj"]),
    ("sim", "partition"): Command(lambda d, i: ["--trace", str(i["table"]), "--capacity", "8",
                                                "--interval", "100"]),
    ("episodes", "build"): Command(lambda d, i: ["--trace", str(i["table"]), "--eviction-age",
                                                 "600", "--engine", "polars", *_out(d, i)],
                                   stub="flashml.systems.baleen.episodes.core:build"),
    ("train",): Command(lambda d, i: ["--trace", str(i["table"]), *_out(d, i)],
                        stub="flashml.commands.train:_run"),
    ("sweep",): Command(lambda d, i: ["--trace", str(i["table"]), *_out(d, i)],
                        stub="flashml.commands.train:_run"),
    ("compile",): Command(lambda d, i: ["--model-dir", str(d / "models"), *_out(d, i)],
                          stub="flashml.compiler.build:compile_policy", real=False),
    ("regress",): Command(lambda d, i: ["--candidate", str(d), "--baseline", str(d),
                                        "--trace", str(i["table"])],
                          stub="flashml.commands.regress:resolve", real=False),
    ("ui",): Command(lambda d, i: ["docs", "--context-dir", str(d / "gx")],
                     stub="flashml.commands.ui:command", real=False),
    ("pipeline", "run"): Command(lambda d, i: ["--trace", str(i["table"]), *_out(d, i)],
                                 stub="flashml.jobs.run:run_job"),
    ("mat", "run"): Command(lambda d, i: ["--accesses", "3000", "--trials", "0", "--windows",
                                          "0", "--baselines", "none", *_out(d, i)],
                            stub="flashml.jobs.run:run_job"),
    ("pannier", "run"): Command(lambda d, i: ["--requests", "2000", "--trials", "0",
                                              "--presets", "prn0-like", *_out(d, i)],
                                stub="flashml.jobs.run:run_job"),
    ("mlcache", "run"): Command(lambda d, i: ["--requests", "2000", "--interval", "500",
                                              "--train-mixes", "2", "--test-mixes", "1",
                                              "--max-iter", "5", *_out(d, i)],
                                stub="flashml.jobs.run:run_job"),
    ("kml", "run"): Command(lambda d, i: ["--mode", "twin", "--twin-requests", "10000",
                                          "--repeats", "1", *_out(d, i)],
                            stub="flashml.jobs.run:run_job"),
    # the device commands stop before any device work (root, loop devices, FUSE)
    ("device", "probe"): Command(lambda d, i: [str(i["table"]), *_out(d, i)],
                                 stub="flashml.device.probe:probe", real=False),
    ("device", "check"): Command(lambda d, i: ["--trace", str(i["table"]), *_out(d, i)],
                                 stub="flashml.device.throttled:unavailable", real=False),
}


def leaf_commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
                  ) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every runnable command of the parser tree: (path, its parser)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
    for action in subs:
        for name, sub in action.choices.items():
            yield from leaf_commands(sub, (*path, name))


def numeric_options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings and is_numeric_type(a.type)]


def _commands() -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    return list(leaf_commands(cli.build_parser()))


def _cases() -> list[Any]:
    out = []
    for path, p in _commands():
        for a in numeric_options(p):
            out.append(pytest.param(path, a.option_strings[-1] if a.option_strings[-1]
                                    .startswith("--") else a.option_strings[0],
                                    id=f"{' '.join(path)} {a.option_strings[-1]}"))
    return out


def test_every_command_has_minimal_arguments() -> None:
    """A new command gets an entry in COMMANDS, so its options are tried too."""
    missing = [path for path, _ in _commands() if path not in COMMANDS]
    assert not missing, f"add minimal arguments to COMMANDS for: {missing}"
    stale = [path for path in COMMANDS if path not in dict(_commands())]
    assert not stale, f"no such command any more: {stale}"


def test_every_numeric_option_is_a_bounded_number() -> None:
    """Each numeric option is declared as a Number (bounds and unit in one place), not a
    bare int/float that takes nan, -1 or 1e300."""
    bare = [f"{' '.join(path)} {a.option_strings[0]}" for path, p in _commands()
            for a in numeric_options(p) if a.type in (int, float)]
    assert not bare, f"declare these with flashml.settings.Number: {bare}"


#: argparse's calls that declare an option or a group of options.
ARGPARSE_CALLS = ("add_argument", "add_mutually_exclusive_group", "add_argument_group")


def test_no_system_module_declares_options_itself() -> None:
    """A system's job options are its option table's (flashml.settings.add_options) and its
    settings.toml knobs' (flashml.knobs.add_options): no module of flashml/systems/ (nor the
    toy system, ARCHITECTURE.md's worked example) calls argparse's add_argument."""
    files = [*sorted((REPO / "flashml" / "systems").rglob("*.py")),
             *sorted((REPO / "tests" / "toy_system").rglob("*.py"))]
    found = [f"{path.relative_to(REPO)}:{node.lineno} {node.func.attr}"
             for path in files for node in ast.walk(ast.parse(path.read_text(), str(path)))
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
             and node.func.attr in ARGPARSE_CALLS]
    assert not found, f"declare these options in the system's option table: {found}"


def _job_parser(module: str) -> tuple[Any, argparse.ArgumentParser]:
    from flashml.commands.systems import system_parser

    job = importlib.import_module(module)
    return job, system_parser(job)


@pytest.mark.parametrize("module", SYSTEMS)
def test_option_table_defaults_are_the_settings_defaults(module: str) -> None:
    """`flashml <system> run` with no options builds the job's Settings dataclass defaults:
    each option's default in the table is taken from the dataclass (written once there) and
    read back by `from_cli`."""
    job, parser = _job_parser(module)
    assert job.Settings.from_cli(parser.parse_args([])) == job.Settings()


@pytest.mark.parametrize("module", SYSTEMS)
def test_every_job_option_is_its_tables_or_a_knob(module: str) -> None:
    """Each option of `flashml <system> run` (besides the trace input) is an entry of the
    system's option table, with its flag, type, default and choices, or one of the system's
    settings.toml knobs."""
    job, parser = _job_parser(module)
    table = importlib.import_module(job.Settings.__module__).OPTIONS
    system = module.split(".")[2]
    declared = knobs.load(system).knobs if system in knobs.declared_systems() else {}
    for a in parser._actions:
        if not a.option_strings or a.dest in ("help", "trace", "format", "sample_ratio"):
            continue
        if a.dest in declared:
            assert a.option_strings[0] == declared[a.dest].flag, a.option_strings
            continue
        assert a.dest in table, f"{module}: {a.option_strings} is not in its option table"
        o = table[a.dest]
        assert a.option_strings == [o.flag], (o.name, a.option_strings)
        assert a.default == o.default, o.name
        assert a.choices == o.choices, o.name
        assert a.type is (None if o.type is bool else o.type), o.name


def _kernel_tables() -> dict[tuple[str, ...], dict[str, Option]]:
    """The option table of each kernel command that has one, by command path."""
    from flashml.commands import compile as compile_
    from flashml.commands import episodes, regress, sim, trace, train

    return {**{("trace", name): table for name, table in trace.TABLES.items()},
            ("sim", "run"): sim.RUN_OPTIONS, ("sim", "objects"): sim.OBJECTS_OPTIONS,
            ("sim", "partition"): sim.PARTITION_OPTIONS,
            ("episodes", "build"): episodes.BUILD_OPTIONS, ("train",): train.TRAIN_OPTIONS,
            ("sweep",): train.SWEEP_OPTIONS, ("compile",): compile_.COMPILE_OPTIONS,
            ("regress",): regress.REGRESS_OPTIONS}


#: The modules of the kernel commands whose options are option tables (`_kernel_tables`).
TABLED_COMMANDS = ("trace", "sim", "episodes", "train", "compile", "regress")


@pytest.mark.parametrize("path", list(_kernel_tables()), ids=" ".join)
def test_every_kernel_command_option_is_its_tables(path: tuple[str, ...]) -> None:
    """Each option of a kernel command is an entry of its option table, with its spellings,
    type, default, choices and whether it must be given, and each entry is an option of the
    command (`sim run`'s --mat-* are MAT's settings.toml knobs)."""
    table = _kernel_tables()[path]
    parser = dict(_commands())[path]
    seen = set()
    for a in parser._actions:
        if not a.option_strings or isinstance(a, argparse._HelpAction):
            continue
        if path == ("sim", "run") and a.dest.startswith("mat_"):
            assert a.dest.removeprefix("mat_") in knobs.load("mat").knobs, a.option_strings
            continue
        assert a.dest in table, f"{' '.join(path)}: {a.option_strings} is not in its table"
        o = table[a.dest]
        assert a.option_strings == list(o.option_strings), o.name
        assert a.default == o.default, o.name
        assert a.choices == o.choices, o.name
        assert a.type is (None if o.type is bool else o.type), o.name
        assert a.required == (o.required and o.exclusive is None), o.name
        seen.add(a.dest)
    assert seen == set(table), f"not options of {' '.join(path)}: {set(table) - seen}"


def test_no_kernel_command_declares_options_itself() -> None:
    """The kernel commands of TABLED_COMMANDS build their options from their tables
    (flashml.settings.add_options): argparse's add_argument only for a positional argument."""
    files = [REPO / "flashml" / "commands" / f"{name}.py" for name in TABLED_COMMANDS]
    found = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ARGPARSE_CALLS):
                continue
            first = node.args[0] if node.args else None
            if (node.func.attr == "add_argument" and isinstance(first, ast.Constant)
                    and not str(first.value).startswith("-")):
                continue  # a positional argument
            found.append(f"{path.relative_to(REPO)}:{node.lineno} {node.func.attr}")
    assert not found, f"declare these options in the command's option table: {found}"


def test_an_option_table_expresses_every_kind_of_option() -> None:
    """Choices, switches (on unless --no-...: negatable), paths, lists (positive_ints), numbers
    and mutually exclusive options, from one table: the parser, the help and the checks of
    values from elsewhere."""
    opts = option_table(
        Option("mode", "--mode", str, "a", "the mode", choices=("a", "b")),
        Option("fast", "--fast", bool, False, "a switch"),
        Option("cache", "--cache", bool, True, "on or off", negatable=True),
        Option("folder", "--folder", Path, None, "a folder", metavar="DIR"),
        Option("ks", "--ks", positive_ints, (6, 1), "a list"),
        Option("pages", "--pages", Number(int, 1, unit="pages"), None, "pages",
               exclusive="size"),
        Option("size", "--size", str, "1MiB", "bytes", exclusive="size"),
    )
    p = argparse.ArgumentParser(exit_on_error=False)
    add_options(p, options=opts)
    assert option_values(opts, p.parse_args([])) == {
        "mode": "a", "fast": False, "cache": True, "folder": None, "ks": (6, 1),
        "pages": None, "size": "1MiB"}
    given = p.parse_args(["--mode", "b", "--fast", "--no-cache", "--folder", "x", "--ks",
                          "1,12", "--pages", "3"])
    assert option_values(opts, given) == {
        "mode": "b", "fast": True, "cache": False, "folder": Path("x"), "ks": (1, 12),
        "pages": 3, "size": "1MiB"}
    with pytest.raises((argparse.ArgumentError, SystemExit)):
        p.parse_args(["--pages", "3", "--size", "2MiB"])
    help_ = " ".join(p.format_help().split())
    for text in ("the mode (default a)", "a list (default 6,1)", "bytes (default 1MiB)",
                 "on or off (default on)", "[--cache | --no-cache]",
                 "[--pages PAGES | --size SIZE]"):
        assert text in help_, text
    # values from elsewhere (a DAG param, settings by name) are checked against the table
    with pytest.raises(UserError, match="--pages must be >= 1 pages, got 0"):
        option_values(opts, {"pages": 0})
    with pytest.raises(UserError, match="--mode must be one of a, b"):
        option_values(opts, {"mode": "c"})
    with pytest.raises(UserError, match="--fast must be true or false"):
        option_values(opts, {"fast": "yes"})
    with pytest.raises(ValueError, match="declared twice"):
        option_table(opts["mode"], Option("mode", "--other", str, None, ""))
    assert (size_text(4 << 30), size_text(2 << 20), size_text(1000)) == ("4GiB", "2MiB", "1000")


def test_an_option_table_declares_spellings_required_options_and_steps() -> None:
    """Other spellings (`-o`, `--output`), options that must be given (alone, or one of an
    exclusive group), and numbers that are a multiple of a step, from one table; --help
    gives a number's values, unit and default."""
    opts = option_table(
        Option("out", "--out", Path, None, "where", required=True, aliases=("-o", "--output")),
        Option("uri", "--uri", str, None, "a URI", exclusive="source", required=True),
        Option("dir", "--dir", Path, None, "a folder", exclusive="source", required=True),
        Option("block", "--block", Number(int, 4, 64, unit="bytes", multiple=4), 8, "a block"),
    )
    p = argparse.ArgumentParser(exit_on_error=False)
    add_options(p, options=opts)
    assert option_values(opts, p.parse_args(["-o", "x", "--dir", "d", "--block", "12"])) == {
        "out": Path("x"), "uri": None, "dir": Path("d"), "block": 12}
    assert p.parse_args(["--output", "y", "--uri", "u"]).out == Path("y")
    for argv in (["--dir", "d"], ["-o", "x"], ["-o", "x", "--uri", "u", "--dir", "d"],
                 ["-o", "x", "--dir", "d", "--block", "6"]):
        with pytest.raises((argparse.ArgumentError, SystemExit)):
            p.parse_args(argv)
    help_ = " ".join(p.format_help().split())
    for text in ("-o OUT, --out OUT, --output OUT", "(--uri URI | --dir DIR)",
                 "a block (an integer >= 4 and at most 64 and a multiple of 4 bytes; "
                 "default 8)"):
        assert text in help_, text
    with pytest.raises(UserError, match="--block must be a multiple of 4 bytes, got 6"):
        option_values(opts, {"out": "x", "block": 6})
    with pytest.raises(ValueError, match="declared twice"):
        option_table(opts["out"], Option("o", "-o", str, None, ""))


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A small raw trace and its canonical table (2,000 generated accesses), and a tiny
    object trace."""
    from flashml.trace.generate import generate_trace
    from flashml.trace.ingest import ingest

    d = tmp_path_factory.mktemp("inputs")
    raw = d / "small.trace"
    generate_trace("region1-like", 0, raw, accesses=2000, progress=False)
    table = ingest(raw, d / "small.parquet", progress=False).out
    objects = d / "objects.csv"
    objects.write_text("version,time,op,size,lbn\n1,1,2a,512,7\n1,2,2a,512,8\n1,3,2a,512,7\n")
    return {"raw": raw, "table": Path(table), "objects": objects}


def _listing(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


class _Timeout(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Timeout


def _resolve(spec: str) -> tuple[Any, str]:
    import importlib

    module, attr = spec.split(":")
    return importlib.import_module(module), attr


def run_case(path: tuple[str, ...], option: str, value: str, tmp: Path,
             inputs: dict[str, Path], monkeypatch: pytest.MonkeyPatch,
             capsys: pytest.CaptureFixture[str]) -> tuple[str, int | None, str]:
    """`flashml PATH MINIMAL OPTION=VALUE` in-process -> (outcome, exit code, stderr):
    outcome "ok" (exit 0), "reached" (stopped at the stub), "exit" (SystemExit/return)."""
    cmd = COMMANDS[path]
    if cmd.stub is not None and not (FUZZ and cmd.real):
        module, attr = _resolve(cmd.stub)

        def stop(*a: Any, **k: Any) -> Any:
            raise Reached

        monkeypatch.setattr(module, attr, stop)
    argv = [*path, *cmd.args(tmp, inputs), *dict(cmd.needs).get(option, ()),
            f"{option}={value}"]
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(CASE_S)
    try:
        rc: int | None = cli.main(argv)
        outcome = "ok" if rc == 0 else "exit"
    except SystemExit as e:
        rc, outcome = (e.code if isinstance(e.code, int) else 1), "exit"
    except Reached:
        rc, outcome = None, "reached"
    except _Timeout:
        pytest.fail(f"flashml {' '.join(argv)}: no answer in {CASE_S} s")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return outcome, rc, capsys.readouterr().err


@pytest.mark.parametrize("path,option", _cases())
def test_numeric_option(path: tuple[str, ...], option: str, inputs: dict[str, Path],
                        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                        capsys: pytest.CaptureFixture[str]) -> None:
    parser = dict(_commands())[path]
    action = next(a for a in parser._actions if option in a.option_strings)
    unit = action.type.unit if isinstance(action.type, Number) else ""
    monkeypatch.chdir(tmp_path)
    for value in VALUES:
        case = tmp_path / f"case-{VALUES.index(value)}"
        case.mkdir()
        before = _listing(tmp_path)
        outcome, rc, err = run_case(path, option, value, case, inputs, monkeypatch, capsys)
        where = f"flashml {' '.join(path)} {option}={value}: exit {rc}\n{err}"
        assert "Traceback" not in err, where
        if outcome in ("ok", "reached"):
            continue
        lines = [ln for ln in err.splitlines() if "error:" in ln]
        assert len(lines) == 1, where
        assert any(o in lines[0] for o in action.option_strings), where
        if rc == 1:
            assert lines[0].startswith("flashml: error: "), where
        else:
            assert rc == 2, where
        if unit and value in lines[0]:  # a refusal of the value names its unit
            assert unit in lines[0], f"the unit {unit!r} is not named: {where}"
        # a refusal leaves nothing behind (outputs, temporaries)
        assert _listing(tmp_path) == before, where
