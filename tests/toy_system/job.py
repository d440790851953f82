"""The toy system's job module: what flashml/commands/systems.py needs of any job (COMMAND,
HELP, Settings, STAGES, add_cli, run_name, mlflow_params, summary, describe)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flashml.errors import UserError
from flashml.jobs.run import RunDir, Stage, Timer
from flashml.settings import Option, add_options, option_table, option_values

COMMAND = "toy"
HELP = "toy: eviction policies judged on an object trace (ARCHITECTURE.md's example)"


@dataclass(frozen=True)
class Settings:
    trace: Path
    format: str = "cloudphysics"
    capacity: str = "1MiB"
    policies: tuple[str, ...] = ("lru", "fifo")

    @classmethod
    def from_cli(cls, args: argparse.Namespace) -> Settings:
        if args.trace is None:
            raise UserError("--trace is required for the toy job")
        from flashml.simulation import parse_capacity

        v = option_values(OPTIONS, args)
        try:
            parse_capacity(v["capacity"])
        except ValueError as e:
            raise UserError(f"--capacity: {e}") from None
        return cls(trace=args.trace, format=args.format or "cloudphysics",
                   capacity=v["capacity"], policies=tuple(v["policies"].split(",")))


#: The job's options, declared once (flashml.settings.Option), defaults the dataclass's.
OPTIONS = option_table(
    Option("capacity", "--capacity", str, Settings.capacity, "cache capacity (4MiB, 1000obj)"),
    Option("policies", "--policies", str, ",".join(Settings.policies),
           "eviction policies to judge"),
)


def add_cli(p: argparse.ArgumentParser) -> None:
    add_options(p, options=OPTIONS)


def ingest(run: RunDir, s: Settings, timer: Timer) -> dict[str, Any]:
    """The object trace -> `objects.parquet` (key, size)."""
    rec = run.done("ingest")
    if rec is not None:
        return rec
    from flashml.files import atomic_path
    from flashml.trace.objects import read_objects

    with timer.stage("ingest"):
        df = read_objects(s.trace, s.format)
        with atomic_path(run.path / "objects.parquet") as tmp:
            df.write_parquet(tmp)
    return run.record("ingest", {"trace": str(s.trace), "requests": df.height})


def simulate(run: RunDir, s: Settings, timer: Timer) -> dict[str, Any]:
    """Every policy at the capacity, in the simulator's object mode; MLflow metrics."""
    rec = run.done("simulate")
    if rec is not None:
        return rec
    import mlflow
    import polars as pl

    from flashml.simulation import parse_capacity, simulate_objects

    df = pl.read_parquet(run.path / "objects.parquet")
    cap, unit = parse_capacity(s.capacity)
    out = {}
    with timer.stage("simulate"):
        for name in s.policies:
            out[name] = simulate_objects(df["key"], df["size"], cap, name, unit)
            mlflow.log_metric(f"{name}_miss_ratio", out[name]["miss_ratio"])
    return run.record("simulate", {"capacity": s.capacity, "policies": out})


STAGES = (Stage("ingest", ingest), Stage("simulate", simulate))


def run_name(s: Settings) -> str:
    return f"toy-{s.trace.name}"


def mlflow_params(run: RunDir, s: Settings) -> dict[str, Any]:
    return {"trace": str(s.trace), "capacity": s.capacity}


def summary(records: dict[str, dict[str, Any]], s: Settings) -> dict[str, Any]:
    return {"requests": records["ingest"]["requests"], **records["simulate"]}


def describe(summary: dict[str, Any], s: Settings) -> str:
    return "\n".join(f"{n:6} miss ratio {m['miss_ratio']:.4f}"
                     for n, m in summary["policies"].items())
