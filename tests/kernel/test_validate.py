"""The Great Expectations suite passes on good tables and names each failed expectation and
its row count on bad ones (real GE runs, real Data Docs)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest

from flashml.trace.canonical import TraceMeta, read_table, write_table
from flashml.trace.ingest import ingest
from flashml.trace.validate import validate_table

from conftest import DATA


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> tuple[pl.DataFrame, TraceMeta]:
    out = tmp_path_factory.mktemp("v") / "t.parquet"
    ingest(DATA / "tectonic_202110.trace", out, "tectonic", progress=False)
    return read_table(out)


def test_good_table_passes_and_writes_data_docs(tmp_path: Path, good) -> None:
    df, meta = good
    report = validate_table(df, meta, context_dir=tmp_path / "gx", name="tectonic_202110.trace")
    assert report.success, report.describe()
    assert report.docs_index is not None and report.docs_index.exists()
    # the context folder is the one given (no doubled gx/gx), as `--context-dir` says
    assert report.docs_index == tmp_path / "gx" / "uncommitted" / "data_docs" / \
        "local_site" / "index.html"
    assert (tmp_path / "gx" / "great_expectations.yml").is_file()
    assert not (tmp_path / "gx" / "gx").exists()
    # the pages name the trace (the validation run), not `__none__`
    pages = [p.read_text(errors="ignore") for p in report.docs_index.parent.rglob("*.html")]
    assert any("tectonic_202110.trace" in p for p in pages)
    assert "canonical_accesses" in report.docs_index.read_text() or any(
        "canonical_accesses" in p.read_text(errors="ignore")
        for p in report.docs_index.parent.rglob("*.html"))


BREAKAGES = {
    "time not sorted": (lambda df: df.with_columns(time=pl.col("time").reverse()), None,
                        "expect_column_values_to_be_increasing", "time"),
    "zero size": (lambda df: df.with_columns(
        size=pl.when(pl.int_range(pl.len()) < 3).then(0).otherwise(pl.col("size"))
        .cast(pl.UInt64)), None, "expect_column_values_to_be_between", "size"),
    "beyond block": (lambda df: df.with_columns(
        offset=pl.when(pl.int_range(pl.len()) == 1).then(8 * 2**20).otherwise(pl.col("offset"))
        .cast(pl.UInt64)), None, "expect_column_values_to_be_between", "offset_plus_size"),
    # past int64 (the column goes to Great Expectations as float64): still beyond the block
    "offset past 2^63": (lambda df: df.with_columns(
        offset=pl.when(pl.int_range(pl.len()) == 4).then(2**63 + 5).otherwise(pl.col("offset"))
        .cast(pl.UInt64)), None, "expect_column_values_to_be_between", "offset_plus_size"),
    "unknown op": (lambda df: df.with_columns(
        op=pl.when(pl.int_range(pl.len()) < 2).then(9).otherwise(pl.col("op")).cast(pl.UInt8)),
        None, "expect_column_values_to_be_in_set", "op"),
    "null key": (lambda df: df.with_columns(
        key=pl.when(pl.int_range(pl.len()) == 0).then(None).otherwise(pl.col("key"))), None,
        "expect_column_values_to_not_be_null", "key"),
    "sample ratio": (lambda df: df, 150.0, "expect_column_values_to_be_between", "sample_ratio"),
    "time beyond 1e12 s": (lambda df: df.with_columns(
        time=pl.when(pl.int_range(pl.len()) == 7).then(1e300).otherwise(pl.col("time"))),
        None, "expect_column_values_to_be_between", "time"),
}
EXPECTED_ROWS = {"time not sorted": None, "zero size": 3, "beyond block": 1,
                 "offset past 2^63": 1, "unknown op": 2,
                 "null key": 1, "sample ratio": 8, "time beyond 1e12 s": 1}


@pytest.mark.parametrize("name", sorted(BREAKAGES))
def test_each_breakage_fails_its_expectation(tmp_path: Path, good, name: str) -> None:
    df, meta = good
    breaker, ratio, expectation, column = BREAKAGES[name]
    bad_meta = replace(meta, sample_ratio=ratio) if ratio is not None else meta
    report = validate_table(breaker(df), bad_meta, context_dir=tmp_path / "gx")
    assert not report.success
    failed = {(o.expectation, o.column): o for o in report.failures()}
    assert (expectation, column) in failed, report.describe()
    if EXPECTED_ROWS[name] is not None:
        assert failed[(expectation, column)].unexpected_count == EXPECTED_ROWS[name]
    assert len(failed) == 1, report.describe()


def test_validate_cli_exit_codes(tmp_path: Path, good, cli) -> None:
    df, meta = good
    ok = tmp_path / "ok.parquet"
    write_table(df, ok, meta)
    proc = cli("trace", "validate", ok, "--context-dir", tmp_path / "gx")
    assert proc.returncode == 0, proc.stderr
    assert "validation passed: 14 expectations on 8 rows" in proc.stdout
    assert "Data Docs:" in proc.stdout
    bad = tmp_path / "bad.parquet"
    write_table(df.with_columns(size=pl.lit(0, pl.UInt64)), bad, meta)
    proc = cli("trace", "validate", bad, "--context-dir", tmp_path / "gx")
    assert proc.returncode == 1
    assert "FAILED expect_column_values_to_be_between(size): 8 of 8 rows" in proc.stdout
    assert "1 expectation(s) failed" in proc.stderr


@pytest.mark.parametrize("times", [(float("-inf"), float("inf")), (float("nan"), None),
                                   (-1e300, 1e300)])
def test_validate_and_stats_refuse_a_table_with_non_finite_times(tmp_path: Path, good, cli,
                                                                   times) -> None:
    """A canonical table whose time is inf, -inf, NaN or beyond 1e12 s is refused by
    `trace validate` and `trace stats` (every reader of a table) with one clear error naming
    the file and the field, exit 1; never a pass, never a traceback."""
    import pyarrow.parquet as pq

    df, meta = good
    first, last = times
    i = pl.int_range(pl.len())
    t = pl.when(i == 0).then(first).otherwise(pl.col("time"))
    if last is not None:
        t = pl.when(i == len(df) - 1).then(last).otherwise(t)
    bad = tmp_path / "bad.parquet"
    table = df.with_columns(time=t).to_arrow()
    pq.write_table(table.replace_schema_metadata(meta.to_kv()), bad)  # no check on the way
    for cmd in (["validate", bad, "--context-dir", tmp_path / "gx"], ["stats", bad]):
        proc = cli("trace", *cmd)
        assert proc.returncode == 1, (cmd, proc.stdout, proc.stderr)
        assert "Traceback" not in proc.stderr
        assert proc.stderr.startswith(f"flashml: error: {bad}: field 'time'"), proc.stderr
        assert "outside [-1e+12, 1e+12] seconds" in proc.stderr
        assert "validation passed" not in proc.stdout


def test_data_docs_are_static_and_offline(tmp_path: Path, good) -> None:
    """Two validations in one context: the index lists both as static rows (newest first),
    each linking to its page, with no script and nothing from another host (Great
    Expectations' index filled its list with bootstrap-table from a CDN)."""
    import re

    df, meta = good
    validate_table(df, meta, context_dir=tmp_path / "gx", name="first.trace")
    report = validate_table(df, meta, context_dir=tmp_path / "gx", name="second<b>.trace")
    site = report.docs_index.parent
    index = report.docs_index.read_text()
    rows = re.findall(r'<tr class="flashml-row">.*?</tr>', index, re.S)
    assert len(rows) == 3  # two validations, one suite
    assert "second&lt;b&gt;.trace" in rows[0] and "first.trace" in rows[1]  # text escaped
    links = re.findall(r'href="(validations/[^"]+\.html)"', index)
    from urllib.parse import unquote

    assert links and all((site / unquote(link)).is_file() for link in links)
    assert (site / "static" / "styles" / "flashml_offline.css").is_file()
    for page in site.rglob("*.html"):
        text = page.read_text()
        assert "<script" not in text, page
        assert not re.search(r"(src|href)=[\"']?(https?:)?//[^\"']*\.(js|css)", text), page
        assert not re.search(r"<img[^>]*src=[\"']https?:", text), page
        assert not re.search(r"url\(['\"]?https?:", text), page


def test_validation_keeps_no_copy_of_the_table(tmp_path: Path, good) -> None:
    """After a validation, no pandas copy of the table stays alive: Great Expectations keeps
    its context for the process, and the context's datasource cached the batch (the job held
    it for the rest of its stages)."""
    import gc

    import pandas as pd

    df, meta = good
    report = validate_table(df, meta, context_dir=tmp_path / "gx", build_docs=False, name="t")
    assert report.success, report.describe()
    gc.collect()
    alive = [o for o in gc.get_objects() if isinstance(o, pd.DataFrame) and len(o) == len(df)]
    assert alive == []


@pytest.mark.parametrize("name", ["zero size", "unknown op", "null key", "time not sorted"])
def test_batches_of_rows_give_the_whole_tables_outcomes(tmp_path: Path, good, name: str) -> None:
    """A table validated in batches of rows (a long trace's bounded memory) fails the same
    expectations with the same row counts as in one batch, and each batch is a validation
    run of its own in the Data Docs, named by its rows."""
    df, meta = good
    breaker, _, _, _ = BREAKAGES[name]
    bad = breaker(df)
    whole = validate_table(bad, meta, context_dir=tmp_path / "one", build_docs=False)
    parts = validate_table(bad, meta, context_dir=tmp_path / "three", chunk_rows=3,
                           name="t.trace")
    assert not parts.success and parts.rows == whole.rows == len(df)
    counts = {(o.expectation, o.column): (o.success, o.unexpected_count)
              for o in parts.outcomes}
    assert counts == {(o.expectation, o.column): (o.success, o.unexpected_count)
                      for o in whole.outcomes}
    assert parts.docs_index is not None
    pages = " ".join(p.read_text(errors="ignore")
                     for p in parts.docs_index.parent.rglob("*.html"))
    assert f"t.trace (rows 1-3 of {len(df)})" in pages


def test_time_out_of_order_between_two_batches_fails(tmp_path: Path, good) -> None:
    """Each batch checks the order of its own rows; a time that decreases from one batch's
    last row to the next one's first is caught too, and only there."""
    df, meta = good
    t = df["time"].to_list()
    t[3] = t[2] - 1.0  # rows 2 and 3: the last of the first batch of 3, the next one's first
    t[4] = max(t[4], t[2])
    bad = df.with_columns(time=pl.Series(t))
    assert validate_table(bad, meta, context_dir=tmp_path / "gx", build_docs=False,
                          chunk_rows=4).success is False  # within a batch: GE sees it
    rep = validate_table(bad, meta, context_dir=tmp_path / "gx", build_docs=False,
                         chunk_rows=3)
    assert not rep.success
    failed = {(o.expectation, o.column): o for o in rep.failures()}
    assert list(failed) == [("expect_column_values_to_be_increasing", "time")]
    assert failed[("expect_column_values_to_be_increasing", "time")].unexpected_count == 1
    assert validate_table(df, meta, context_dir=tmp_path / "gx", build_docs=False,
                          chunk_rows=3).success
    with pytest.raises(ValueError, match="chunk_rows"):
        validate_table(df, meta, context_dir=tmp_path / "gx", chunk_rows=0)
