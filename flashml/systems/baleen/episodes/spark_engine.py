"""Episodes and OPT, Spark engine (the semantics: `flashml.systems.baleen.episodes.core`).

DataFrame operations and window functions only (no Python UDFs):
* per key, ordered by (time, row): `lag` gives the gap, a running `sum` of split flags
  numbers the key's episodes;
* per episode: `row_number` (position), `first` (first row), and a running `bit_or` of the
  64-bit segment masks over the preceding GETs (the per-segment replay);
* per episode aggregates with `groupBy`; the OPT ranking and the running sum of segments
  written are windows over the episodes table ordered by (score desc, first_row), which
  Spark evaluates in one partition -- episodes are far fewer than accesses.

Spark runs `local[*]` inside the job by default (no setup); `master` may be any Spark master
URL, or `sc://host:port` for Spark Connect. Spark writes Parquet parts into the work dir; the
driver streams them into the single published files (same schema and order as the Polars
engine), so both engines' outputs compare row by row.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

import polars as pl

from flashml.errors import UserError
from flashml.systems.baleen.episodes.core import (
    SORT_BY,
    Job,
    conform,
    episode_stages,
    prepared,
    ranked_stages,
)

log = logging.getLogger(__name__)


def spark_session(master: str | None = None, *, shuffle_partitions: int | None = None) -> Any:
    """A small SparkSession: local[*] unless `master` is given, UI off, few shuffle partitions
    (override with FLASHML_SPARK_PARTITIONS)."""
    try:
        from pyspark.sql import SparkSession
    except ImportError as e:  # pragma: no cover - pyspark is a dependency
        raise UserError("the Spark engine needs pyspark; use --engine polars") from e
    if shuffle_partitions is None:
        shuffle_partitions = int(os.environ.get("FLASHML_SPARK_PARTITIONS",
                                                max(2, 2 * (os.cpu_count() or 1))))
    b = SparkSession.builder.appName("flashml-episodes")
    if master and master.startswith("sc://"):
        b = b.remote(master)
    else:
        b = (b.master(master or "local[*]")
             .config("spark.ui.enabled", "false")
             # Spark's stage progress bar on a terminal; none in logs and CI output
             .config("spark.ui.showConsoleProgress", "true" if sys.stderr.isatty() else "false")
             .config("spark.driver.memory", os.environ.get("FLASHML_SPARK_DRIVER_MEMORY",
                                                           "4g")))
    b = (b.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
         .config("spark.sql.adaptive.enabled", "true")
         .config("spark.sql.session.timeZone", "UTC"))
    try:
        spark = b.getOrCreate()
    except Exception as e:
        raise UserError(f"cannot start Spark ({master or 'local[*]'}): {e}") from None
    try:
        spark.sparkContext.setLogLevel("ERROR")
    except Exception:  # Spark Connect has no SparkContext
        pass
    return spark


def _stages(df: Any, stages: list[dict[str, Any]]) -> Any:
    for stage in stages:
        df = df.withColumns(stage)
    return df


def episode_frames(spark: Any, g: Any, job: Job, work: Path) -> tuple[Any, Any]:
    """(per-GET DataFrame, per-episode aggregates) from the prepared GETs `g`."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    col = job.gap_column
    w_key = Window.partitionBy("key").orderBy("time", "row")
    gap = F.col(col) - F.lag(col).over(w_key)
    g = g.withColumn("_new", F.when(gap.isNull() | (gap > F.lit(job.split_threshold)), 1)
                     .otherwise(0))
    g = g.withColumn("_ep", F.sum("_new").over(
        w_key.rowsBetween(Window.unboundedPreceding, Window.currentRow)))
    w_ep = Window.partitionBy("key", "_ep").orderBy("time", "row")
    g = g.withColumns({
        "position": F.row_number().over(w_ep) - 1,
        "first_row": F.first("row").over(
            w_ep.rowsBetween(Window.unboundedPreceding, Window.currentRow)),
        # bits s0..s1 of a 64-bit mask (i64 bit pattern)
        "_mask": F.expr("shiftleft(-1L, s0) & shiftrightunsigned(-1L, 63 - s1)"),
    })
    g = g.withColumn("_prev", F.coalesce(
        F.bit_or("_mask").over(w_ep.rowsBetween(Window.unboundedPreceding, -1)),
        F.lit(0).cast("long")))
    g = g.withColumn("_nb", F.expr("_mask & ~_prev"))
    smear_up, smear_down = "_nb", "_nb"
    for k in (1, 2, 4, 8, 16, 32):
        smear_up = f"({smear_up} | shiftleft({smear_up}, {k}))"
        smear_down = f"({smear_down} | shiftrightunsigned({smear_down}, {k}))"
    # first uncovered segment = trailing zeros; last = index of the highest set bit
    g = g.withColumns({
        "_miss": F.expr("CAST(_nb <> 0 AS INT)"),
        "_first": F.expr(f"64 - bit_count({smear_up})"),
        "_last": F.expr(f"bit_count({smear_down}) - 1"),
        "_written": F.expr("bit_count(_nb)"),
    })
    g = g.withColumn("_io", F.when(F.col("_miss") == 1, F.col("_last") - F.col("_first") + 1)
                     .otherwise(0))
    # Materialise the windowed per-GET frame once; both outputs below read it.
    g.select("row", "key", "time", "first_row", "position", "s0", "s1", "_miss", "_io",
             "_written").write.parquet(str(work / "spark-gets-full"))
    g = spark.read.parquet(str(work / "spark-gets-full"))
    eps = g.groupBy("first_row").agg(
        F.first("key").alias("key"),
        F.min("time").alias("first_time"),
        F.max("time").alias("last_time"),
        F.count(F.lit(1)).cast("long").alias("gets"),
        F.min("s0").alias("range_start"),
        F.max("s1").alias("range_end"),
        F.sum(F.col("s1") - F.col("s0") + 1).cast("long").alias("get_segments"),
        F.sum("_miss").cast("long").alias("replay_ios"),
        F.sum("_io").cast("long").alias("replay_segments"),
        F.sum("_written").cast("long").alias("accessed_segments"),
    )
    per_get = g.select("row", "key", "time", "first_row", "position")
    return per_get, eps


def rank_episodes(eps: Any, job: Job) -> Any:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    eps = _stages(eps, episode_stages(F.col, job))
    eps = eps.withColumn("episode_id", F.row_number().over(Window.orderBy("first_row")) - 1)
    w_rank = Window.orderBy(F.col("score").desc(), F.col("first_row").asc())
    eps = eps.withColumns({
        "rank": F.row_number().over(w_rank) - 1,
        "cum_segments": F.sum("size_segments").over(
            w_rank.rowsBetween(Window.unboundedPreceding, Window.currentRow)),
    })
    return _stages(eps, ranked_stages(F.col, job))


def run_spark(src: Path, outdir: Path, job: Job, work: Path, *, master: str | None = None,
              spark: Any = None) -> None:
    """Write episodes.parquet, labels.parquet, arrays.parquet into `outdir`."""
    import time

    from pyspark.sql import functions as F

    t0 = time.perf_counter()

    def lap(what: str) -> None:
        log.debug("spark episodes: %s done at %.1fs", what, time.perf_counter() - t0)

    # Spark reads unsigned Parquet ints as decimals: hand it the prepared i64 columns.
    prep_path = work / "prepared.parquet"
    prepared(src, job.info.segment_bytes, with_gidx=job.params.time_mode == "logical"
             ).sink_parquet(prep_path)
    if spark is None:
        spark = spark_session(master)
    lap("session")
    prep = spark.read.parquet(str(prep_path))
    per_get, eps = episode_frames(spark, prep.filter(F.col("is_get")).drop("is_get"), job, work)
    lap("windows")
    eps_path = work / "spark-eps"
    rank_episodes(eps, job).write.parquet(str(eps_path))
    lap("episodes")
    eps = spark.read.parquet(str(eps_path))
    k = job.params.accesses_per_episode
    decisions = eps.select("first_row", "episode_id", "admitted", "range_start", "range_end",
                           "when_label")
    labels = per_get.join(decisions, on="first_row", how="left")
    labels = labels.withColumn(
        "opt_label", F.when(F.col("position") < k, F.col("admitted").cast("byte"))
        .otherwise(F.lit(-1).cast("byte")))
    lab_path = work / "spark-labels"
    labels.write.parquet(str(lab_path))
    lap("labels")
    adm = F.coalesce(F.col("admitted"), F.lit(False))
    arrays = prep.select("row").join(
        spark.read.parquet(str(lab_path)).select("row", "admitted", "range_start", "range_end"),
        on="row", how="left").select(
        "row", adm.cast("tinyint").alias("admit"),
        F.when(adm, F.col("range_start")).otherwise(F.lit(-1).cast("long"))
        .alias("prefetch_start"),
        F.when(adm, F.col("range_end")).otherwise(F.lit(-1).cast("long")).alias("prefetch_end"))
    arr_path = work / "spark-arrays"
    arrays.write.parquet(str(arr_path))
    lap("arrays")
    for name, path in (("episodes", eps_path), ("labels", lab_path), ("arrays", arr_path)):
        lf = pl.scan_parquet(str(path / "*.parquet")).sort(SORT_BY[name])
        conform(lf, name).sink_parquet(outdir / f"{name}.parquet")
    lap("published")
