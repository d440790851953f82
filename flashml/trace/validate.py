"""The Great Expectations suite for the canonical access table, and its Data Docs.

The suite is defined here, once, and saved into a file Data Context (default
`.flashml/gx`, next to the other embedded state) where its results and Data Docs also live:
`<context>/uncommitted/data_docs/local_site/index.html`, each validation named by its trace
(the run name of the Data Docs pages). `flashml trace validate`, `flashml pipeline run` and
the retraining DAG's ingest task all validate into that one context (an index across runs:
`flashml ui docs` serves it); one validation at a time holds it (a lock file in it). Great
Expectations' pages load their CSS and JavaScript from CDNs and fill the index in the
browser: every build is made static and offline (flashml/trace/datadocs.py).
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from flashml.config import OPS, state_dir
from flashml.trace.canonical import CORE_COLUMNS, MAX_TIME_S, TraceMeta

log = logging.getLogger(__name__)
SUITE_NAME = "canonical_accesses"


@dataclass(frozen=True)
class ExpectationOutcome:
    expectation: str
    column: str
    success: bool
    unexpected_count: int
    details: str


@dataclass(frozen=True)
class ValidationReport:
    success: bool
    rows: int
    outcomes: list[ExpectationOutcome]
    docs_index: Path | None

    def failures(self) -> list[ExpectationOutcome]:
        return [o for o in self.outcomes if not o.success]

    def describe(self) -> str:
        lines = [f"{'ok' if o.success else 'FAILED':6} {o.expectation}({o.column})"
                 + ("" if o.success else f": {o.unexpected_count} of {self.rows} rows"
                    + (f" ({o.details})" if o.details else ""))
                 for o in self.outcomes]
        return "\n".join(lines)


def build_suite(block_bytes: int):  # type: ignore[no-untyped-def]
    """The expectations every canonical access table must meet."""
    import great_expectations as gx
    import great_expectations.expectations as gxe

    suite = gx.ExpectationSuite(name=SUITE_NAME)
    for col in CORE_COLUMNS:
        suite.add_expectation(gxe.ExpectColumnValuesToNotBeNull(column=col))
    suite.add_expectation(gxe.ExpectColumnValuesToBeIncreasing(column="time", strictly=False))
    suite.add_expectation(gxe.ExpectColumnValuesToBeBetween(column="time", min_value=-MAX_TIME_S,
                                                            max_value=MAX_TIME_S))
    suite.add_expectation(gxe.ExpectColumnValuesToBeBetween(column="size", min_value=1))
    suite.add_expectation(gxe.ExpectColumnValuesToBeBetween(column="offset_plus_size",
                                                            max_value=block_bytes))
    suite.add_expectation(gxe.ExpectColumnValuesToBeInSet(column="op", value_set=sorted(OPS)))
    suite.add_expectation(gxe.ExpectColumnValuesToBeBetween(
        column="sample_ratio", min_value=0, max_value=100, strict_min=True))
    return suite


#: The unsigned columns the suite bounds (`ExpectColumnValuesToBeBetween`): Great
#: Expectations 1.x compares a column value by value in Python unless its dtype is int64 or
#: float64 (at 10 M accesses 11 of a validation's 18 s), so they are handed over signed.
BETWEEN_UNSIGNED = ("size", "offset_plus_size")


def _signed(frame: pl.DataFrame, name: str) -> pl.Expr:
    """Column `name` as Int64 when every value fits (the same values, so the same outcome
    and the same unexpected values in the report), else as Float64 (monotone, exact up to
    2^53: a bound the suite checks, 1 or a block's bytes, is on the same side of every
    value as before)."""
    top = frame[name].max()
    fits = top is None or int(top) <= 2**63 - 1
    return pl.col(name).cast(pl.Int64 if fits else pl.Float64)


#: Rows Great Expectations validates at once. Its pandas engine copies the batch's every
#: column for each expectation it evaluates (the rows whose value is not null), so a batch
#: costs several times its table's bytes: at 10 M accesses the job's peak rose 1.2 GB while it
#: validated. A longer table is validated in batches of this many rows (each a validation run
#: of its own in the Data Docs, named by its rows), its outcomes summed, and the order of time
#: across two batches checked here: memory bounded whatever the trace's length.
CHUNK_ROWS = 10_000_000


def validate_table(df: pl.DataFrame, meta: TraceMeta, *, context_dir: Path | None = None,
                   build_docs: bool = True, name: str | None = None,
                   chunk_rows: int = CHUNK_ROWS) -> ValidationReport:
    """Run the suite over `df` (with its metadata) and build the Data Docs in the file
    context `context_dir` (that folder is the context: great_expectations.yml, expectations/,
    uncommitted/data_docs/); `name` (the trace) names the validation run in the pages. A table
    of more than `chunk_rows` rows is validated in batches of that many (`CHUNK_ROWS`)."""
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import great_expectations as gx

    root = Path(context_dir) if context_dir is not None else state_dir() / "gx"
    root.mkdir(parents=True, exist_ok=True)
    missing = [c for c in CORE_COLUMNS if c not in df.columns]
    if missing:
        return ValidationReport(False, len(df), [ExpectationOutcome(
            "expect_column_to_exist", c, False, len(df), "column missing") for c in missing],
            None)
    import fcntl

    with open(root / ".flashml.lock", "w") as lock:  # runs share the context: one at a time
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _validate(gx, df, meta, root, build_docs, name, chunk_rows)


def _validate(gx: Any, df: pl.DataFrame, meta: TraceMeta, root: Path, build_docs: bool,
              name: str | None, chunk_rows: int) -> ValidationReport:
    checkpoint, source = _checkpoint(gx, root, meta, build_docs)
    from great_expectations.core.run_identifier import RunIdentifier

    n = len(df)
    starts = range(0, max(n, 1), chunk_rows)
    merged: dict[tuple[str, str], ExpectationOutcome] = {}
    success = True
    for lo in starts:
        hi = min(n, lo + chunk_rows)
        run_name = name or "flashml"
        if len(starts) > 1:
            run_name += f" (rows {lo + 1:,}-{hi:,} of {n:,})"
        result = _run_batch(checkpoint, source, _batch(df.slice(lo, hi - lo), meta),
                            RunIdentifier(run_name=run_name))
        success &= bool(result.success)
        for o in _outcomes(result):
            had = merged.get((o.expectation, o.column))
            merged[(o.expectation, o.column)] = o if had is None else ExpectationOutcome(
                o.expectation, o.column, had.success and o.success,
                had.unexpected_count + o.unexpected_count, had.details or o.details)
    # time's order across two batches: each batch checked its own rows' order
    time = df["time"]
    edges = [lo for lo in starts[1:]
             if time[lo] is not None and time[lo - 1] is not None and time[lo] < time[lo - 1]]
    key = ("expect_column_values_to_be_increasing", "time")
    if edges and key in merged:
        o = merged[key]
        merged[key] = ExpectationOutcome(
            o.expectation, o.column, False, o.unexpected_count + len(edges),
            o.details or f"time decreases from row {edges[0]:,} to row {edges[0] + 1:,}")
        success = False
    docs = root / "uncommitted" / "data_docs" / "local_site" / "index.html"
    if docs.exists():
        from flashml.trace.datadocs import make_offline

        make_offline(docs.parent)
    return ValidationReport(success, n, list(merged.values()), docs if docs.exists() else None)


def _batch(df: pl.DataFrame, meta: TraceMeta) -> Any:
    """The pandas batch of `df`'s rows the suite reads."""
    frame = df.select(CORE_COLUMNS).with_columns(
        offset_plus_size=pl.col("offset") + pl.col("size"),
        sample_ratio=pl.lit(meta.sample_ratio, dtype=pl.Float64),
    )
    return frame.with_columns(_signed(frame, c) for c in BETWEEN_UNSIGNED).to_pandas()


def _checkpoint(gx: Any, root: Path, meta: TraceMeta, build_docs: bool) -> tuple[Any, Any]:
    """The context's checkpoint of the suite (updating the Data Docs or not) and its
    pandas datasource."""
    context = gx.get_context(mode="file", context_root_dir=str(root))
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    source = context.data_sources.add_or_update_pandas(name="flashml")
    asset = next((a for a in source.assets if a.name == "accesses"), None) or \
        source.add_dataframe_asset(name="accesses")
    batch_def = next((b for b in asset.batch_definitions if b.name == "whole_table"), None) or \
        asset.add_batch_definition_whole_dataframe("whole_table")
    suite = context.suites.add_or_update(build_suite(meta.block_bytes))
    vdef = context.validation_definitions.add_or_update(
        gx.ValidationDefinition(name=f"{SUITE_NAME}_check", data=batch_def, suite=suite))
    actions = [gx.checkpoint.UpdateDataDocsAction(name="data_docs")] if build_docs else []
    checkpoint = context.checkpoints.add_or_update(gx.Checkpoint(
        name=f"{SUITE_NAME}_checkpoint", validation_definitions=[vdef], actions=actions,
        result_format={"result_format": "SUMMARY"}))
    return checkpoint, source


def _run_batch(checkpoint: Any, source: Any, frame: Any, run_id: Any) -> Any:
    """`checkpoint` run on the pandas batch `frame`; nothing of it kept afterwards."""
    try:
        return checkpoint.run(batch_parameters={"dataframe": frame}, run_id=run_id)
    finally:
        # What a validation leaves behind, given back (at 10 M accesses the process held
        # 0.6 GB more for the rest of a job, and `gc` and `malloc_trim` freed none of it):
        # the datasource's execution engine, cached in the context that Great Expectations
        # keeps for the process, holds the batch and so the pandas copy of the table until
        # its next run; and Arrow's memory pool, which the copy came from, keeps the pages
        # it freed
        import pyarrow as pa

        batches = source.get_execution_engine().batch_manager
        batches.reset_batch_cache()
        batches.batch_data_cache.clear()
        del frame
        pa.default_memory_pool().release_unused()


def _outcomes(result: Any) -> list[ExpectationOutcome]:
    """Each expectation's outcome in a checkpoint's result."""
    outcomes: list[ExpectationOutcome] = []
    for run_result in result.run_results.values():
        for r in run_result.results:
            cfg = r.expectation_config
            res = r.result or {}
            partial = res.get("partial_unexpected_list") or []
            details = ""
            if partial:
                details = "e.g. " + ", ".join(repr(v) for v in partial[:3])
            if r.exception_info and r.exception_info.get("raised_exception"):
                details = str(r.exception_info.get("exception_message"))
            outcomes.append(ExpectationOutcome(
                expectation=cfg.type, column=str(cfg.kwargs.get("column", "")),
                success=bool(r.success), unexpected_count=int(res.get("unexpected_count") or 0),
                details=details))
    return outcomes
