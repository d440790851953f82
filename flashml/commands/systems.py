"""`flashml <system> run`: every system's main job end to end, one command shape for all.

For each job module in `flashml.systems.SYSTEMS` (e.g. flashml/systems/baleen/job.py, whose
command is `pipeline`): `--trace/--format/--sample-ratio` and `--out`, the job's own options
(`add_cli`), settings built once (`Settings.from_cli`, validated before any work), then
`flashml.jobs.run.run_job`: every stage of `STAGES` over the run folder, one MLflow run,
`summary.json`, and the job's `describe(summary, settings)` printed at the end.
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path
from types import ModuleType

from flashml.commands.trace import add_trace_option


def _job(module: str) -> ModuleType:
    return importlib.import_module(module)


def command_name(job: ModuleType) -> str:
    return getattr(job, "COMMAND", None) or job.__name__.rsplit(".", 1)[1]


def system_parser(job: ModuleType) -> argparse.ArgumentParser:
    """A `flashml <system> run` parser for `job` (its options and their defaults)."""
    p = argparse.ArgumentParser(prog=f"flashml {command_name(job)} run")
    add_trace_option(p, required=False, formats=getattr(job, "FORMATS", None),
                     default_format=getattr(job, "DEFAULT_FORMAT", "tectonic"))
    job.add_cli(p)
    return p


def _check_out(args: argparse.Namespace) -> None:
    """The run folder can be written and is not (nor holds) the trace: refused before any
    work, naming -o."""
    from flashml.files import check_outputs

    check_outputs({"-o": args.out}, {"--trace": args.trace}, folders=("-o",))


def _make_run(job: ModuleType):  # type: ignore[no-untyped-def]
    def cmd_run(args: argparse.Namespace) -> int:
        from flashml.jobs.run import run_job

        system = getattr(args, "system", None)
        if system and system != command_name(job):
            # `flashml pipeline run --system NAME`: that system's job on its embedded
            # default (its own options at their defaults; --trace/--format passed on)
            from flashml.systems import SYSTEMS

            other = next(_job(m) for m in SYSTEMS if command_name(_job(m)) == system)
            passed = []
            if args.trace is not None:
                passed += ["--trace", str(args.trace)]
            if args.format is not None:
                passed += ["--format", args.format]
            # a job may say what its embedded default is (KML: the offline twin)
            passed += list(getattr(other, "PIPELINE_ARGS", ()))
            oargs = system_parser(other).parse_args(passed)
            s = other.Settings.from_cli(oargs)
            _check_out(args)
            summary, path, timer = run_job(other, s, args.out, resume=args.resume)
            print(other.describe(summary, s))
            print(f"summary: {path}; MLflow run {summary['mlflow_run_id']}")
            return 0
        s = job.Settings.from_cli(args)
        _check_out(args)
        summary, path, timer = run_job(job, s, args.out, resume=args.resume)
        print(job.describe(summary, s))
        print("time per stage (s): " + ", ".join(f"{k} {v}" for k, v in timer.stages.items()))
        print(f"summary: {path}; MLflow run {summary['mlflow_run_id']}")
        return 0

    return cmd_run


def register(sub: argparse._SubParsersAction) -> None:
    from flashml.systems import SYSTEMS

    for module in SYSTEMS:
        job = _job(module)
        name = command_name(job)
        doc = (job.__doc__ or "").strip()
        p = sub.add_parser(name, help=job.HELP, description=doc.split("\n\n")[0])
        psub = p.add_subparsers(dest=f"{name}_command", metavar="SUBCOMMAND", required=True)
        r = psub.add_parser("run", help=f"run the {name} job end to end", description=doc,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
        add_trace_option(r, required=False, formats=getattr(job, "FORMATS", None),
                         default_format=getattr(job, "DEFAULT_FORMAT", "tectonic"),
                         trace_help="raw trace or canonical .parquet "
                         "(default: the job's embedded default)")
        r.add_argument("-o", "--out", "--workdir", dest="out", type=Path,
                       default=Path(f".flashml/runs/{name}/latest" if name != "pipeline"
                                    else ".flashml/runs/latest"),
                       help="run folder (stage records, outputs, summary.json)")
        r.add_argument("--resume", action="store_true",
                       help="go on with an interrupted run in --out from its last finished "
                       "stage (same options; the same MLflow run) instead of starting over")
        job.add_cli(r)
        if name == "pipeline":
            names = [command_name(_job(m)) for m in SYSTEMS]
            r.add_argument("--system", choices=names, default="pipeline",
                           help="run another system's job end to end on its embedded default "
                           "instead (its options at their defaults; `flashml SYSTEM run` takes "
                           "them all): " + ", ".join(n for n in names if n != "pipeline"))
        r.set_defaults(func=_make_run(job))
