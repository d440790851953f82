"""An example in every command's help: the commands whose parsers do not carry their own
(`epilog` with "example"), by command path. `apply` adds them after the parser is built;
tests/kernel/test_cli.py checks that every command has one."""

from __future__ import annotations

import argparse

EXAMPLES: dict[tuple[str, ...], tuple[str, ...]] = {
    ("trace", "ingest"): (
        "flashml trace ingest full_0_0.1.trace -o t.parquet",
        "flashml trace ingest --trace msr_prn_0.csv --format msr -o prn0.parquet",
        "flashml trace ingest cdn.csv --format objects-csv -o objects.parquet"),
    ("trace", "sample"): (
        "flashml trace sample t.parquet --size 10 --seed 1 -o t10.parquet",),
    ("trace", "generate"): (
        "flashml trace generate --preset region1-like --seed 3 --accesses 1000000 -o r1.trace",
        "flashml trace generate --preset cdn-like --seed 0 -o cdn.csv"),
    ("trace", "mix"): (
        "flashml trace mix --streams 4 --requests 200000 --seed 0 -o mix4.parquet",),
    ("trace", "stats"): (
        "flashml trace stats t.parquet",
        "flashml trace stats --trace sample.csv --format cloudphysics --json"),
    ("trace", "validate"): (
        "flashml trace validate t.parquet --context-dir .flashml/gx",
        "flashml ui docs --context-dir .flashml/gx      # the Data Docs in a browser"),
    ("sim", "objects"): (
        "flashml sim objects --trace sample.csv --format cloudphysics --policy lru "
        "--capacity 5000obj --json",),
    ("train",): (
        "flashml train --trace t.parquet --target-write-rate 35.599 -o bundle/",
        "flashml compile --model-dir bundle/ -o compiled/"),
    ("sweep",): (
        "flashml sweep --trace t.parquet --trials 6 -o sweep/",
        "flashml ui optuna                               # the study in optuna-dashboard"),
    ("pipeline", "run"): (
        "flashml pipeline run                            # the embedded default trace",
        "flashml pipeline run --trace full_0_0.1.trace --out runs/r1 --sweep-trials 6",
        "flashml pipeline run --trace sample.csv --format cloudphysics --train-hours 0.5 "
        "--target-write-rate 0.1"),
    ("mat", "run"): (
        "flashml mat run                                 # a generated cdn-like trace",
        "flashml mat run --trace sample.csv --format cloudphysics --capacity "
        "1000obj,5000obj,10000obj"),
    ("regress",): (
        "flashml regress --candidate runs:/RUN_ID --baseline models:/flashml-policy@champion "
        "--trace t.parquet",),
}


class _ExampleFormatter(argparse.HelpFormatter):
    """Wraps the description as argparse does, keeps an `examples:` epilog's lines."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("examples:"):
            return "\n".join(indent + line for line in text.splitlines())
        return super()._fill_text(text, width, indent)


def has_example(p: argparse.ArgumentParser) -> bool:
    return "example" in (p.epilog or "").lower()


def apply(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> None:
    """Give every command without an example of its own the one in EXAMPLES."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                apply(sub, (*path, name))
            return
    if path in EXAMPLES and not has_example(parser):
        parser.epilog = "examples:\n" + "\n".join(f"  {e}" for e in EXAMPLES[path])
        if parser.formatter_class is argparse.HelpFormatter:
            parser.formatter_class = _ExampleFormatter
