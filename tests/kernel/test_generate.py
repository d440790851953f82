"""Synthetic trace generator: determinism, Tectonic format, and each preset's statistics."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from flashml.config import UNITS
from flashml.errors import UserError
from flashml.trace.canonical import TraceMeta
from flashml.trace.generate import HEADER, generate_trace
from flashml.trace.presets import PRESETS, markdown
from flashml.trace.stats import compute_stats

from conftest import REPO

FIELDS = HEADER.lstrip("#").split()
#: The page whose preset sections `markdown` / `object_markdown` render.
PRESETS_DOC = REPO / "docs" / "reference" / "synthetic-traces.md"


def parse(path: Path) -> tuple[list[str], pl.DataFrame]:
    """Parse a generated trace with plain Python: (comment lines, canonical-like table).
    Asserts the line format on the way."""
    comments: list[str] = []
    rows: list[tuple[int, ...]] = []
    times: list[float] = []
    with open(path, encoding="ascii") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("#"):
                comments.append(line)
                continue
            parts = line.split(" ")
            assert len(parts) == 8, line
            times.append(float(parts[3]))
            rows.append(tuple(int(p) for i, p in enumerate(parts) if i != 3))
    a = np.array(rows, dtype=np.int64).reshape(-1, 7)
    df = pl.DataFrame({
        "time": np.array(times),
        "key": a[:, 0].astype(np.uint64),
        "offset": a[:, 1].astype(np.uint64),
        "size": a[:, 2].astype(np.uint64),
        "op": a[:, 3].astype(np.uint8),
        "namespace": a[:, 5].astype(np.uint32),
        "user": a[:, 6].astype(np.uint32),
        "pipeline": a[:, 4].astype(np.uint32),
    })
    return comments, df


def settings(comments: list[str]) -> dict[str, str]:
    line = next(c for c in comments if c.startswith("# flashml:"))
    return dict(kv.split("=", 1) for kv in line.removeprefix("# flashml:").split())


@pytest.fixture(scope="module")
def preset_traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple]:
    """Each preset at its default size, seed 0 (the documented configuration)."""
    d = tmp_path_factory.mktemp("presets")
    out = {}
    for name in PRESETS:
        info = generate_trace(name, 0, d / f"{name}.trace", progress=False)
        comments, df = parse(d / f"{name}.trace")
        out[name] = (info, comments, df)
    return out


def test_same_seed_same_bytes_other_seed_differs(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a.trace", tmp_path / "b.trace", tmp_path / "c.trace"
    generate_trace("region1-like", 7, a, accesses=5_000, progress=False)
    generate_trace("region1-like", 7, b, accesses=5_000, progress=False)
    generate_trace("region1-like", 8, c, accesses=5_000, progress=False)
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.trace", "b.trace", "c.trace"]


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_format_is_valid_tectonic(name: str, preset_traces: dict[str, tuple]) -> None:
    info, comments, df = preset_traces[name]
    assert comments[0] == HEADER
    assert FIELDS == ["block_id", "io_offset", "io_size", "op_time", "op_name", "pipeline",
                      "user_namespace", "user_name"]
    kv = settings(comments)
    assert kv["preset"] == name and kv["seed"] == "0"
    assert int(kv["accesses"]) == df.height == info["accesses"]
    assert float(kv["sample_ratio"]) == pytest.approx(PRESETS[name].sample_ratio)
    t = df["time"].to_numpy()
    assert (np.diff(t) >= 0).all()
    assert t[0] >= 1_572_000_000 and t[-1] - t[0] <= PRESETS[name].days * 86_400
    assert (df["size"] > 0).all()
    assert ((df["offset"] + df["size"]) <= UNITS.block_bytes).all()
    assert (df["offset"] % 4096 == 0).all() and (df["size"] % 4096 == 0).all()
    assert set(df["op"].unique().to_list()) <= {1, 2, 3, 4}


def test_accesses_and_days_overrides(tmp_path: Path) -> None:
    p = PRESETS["region2-like"]
    out = tmp_path / "t.trace"
    info = generate_trace("region2-like", 1, out, accesses=20_000, days=2.0, progress=False)
    comments, df = parse(out)
    assert df.height == info["accesses"] == 20_000
    ratio = float(settings(comments)["sample_ratio"])
    assert ratio == pytest.approx(100 * 20_000 / (p.full_node_rate_per_s * 2 * 86_400), rel=1e-6)
    st = compute_stats(df, TraceMeta(sample_ratio=ratio))
    assert st["duration_s"] == pytest.approx(2 * 86_400, rel=0.01)
    assert st["request_rate_per_s"] == pytest.approx(p.full_node_rate_per_s, rel=0.02)

    info = generate_trace("region1-like", 1, out, days=1.0, progress=False)
    assert info["accesses"] == round(244 * 0.1 / 100 * 86_400)


def test_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="unknown preset"):
        generate_trace("nope", 0, tmp_path / "x", progress=False)
    with pytest.raises(UserError, match="sample ratio"):
        generate_trace("region1-like", 0, tmp_path / "x", accesses=10**8, days=1,
                       progress=False)
    with pytest.raises(UserError, match="days"):
        generate_trace("region1-like", 0, tmp_path / "x", days=0, progress=False)
    # the options that together ask too much are named
    with pytest.raises(UserError, match=r"^--accesses 300 in --days 1e-300 exceed the full "):
        generate_trace("region1-like", 0, tmp_path / "x", accesses=300, days=1e-300,
                       progress=False)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_stats_in_documented_ranges(name: str, preset_traces: dict[str, tuple]) -> None:
    info, _, df = preset_traces[name]
    st = compute_stats(df, TraceMeta(sample_ratio=info["sample_ratio"]))
    p = PRESETS[name]
    assert 50_000 <= st["requests"] <= 150_000
    bad = {k: (st[k], lo, hi) for k, (lo, hi) in p.expected.items() if not lo <= st[k] <= hi}
    assert not bad, bad
    assert set(p.expected) >= {"compulsory_miss_rate", "one_hit_wonder_rate",
                               "put_only_block_rate", "put_fraction", "request_rate_per_s",
                               "peak_to_mean_hourly"}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_docs_section_is_rendered_from_the_preset(name: str,
                                                  preset_traces: dict[str, tuple]) -> None:
    """docs/reference/synthetic-traces.md's section of each preset is exactly `markdown` of its
    one definition, with the statistics of its default trace as `flashml trace stats` measures
    them (ingested)."""
    from flashml.trace.ingest import load_trace

    info, _, _ = preset_traces[name]
    section = markdown(PRESETS[name], compute_stats(*load_trace(info["path"])))
    assert section in PRESETS_DOC.read_text(encoding="utf-8"), (
        f"docs/reference/synthetic-traces.md's `{name}` section is out of date; paste the "
        "output of "
        "`python -m flashml.trace.presets`")


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_zipf_popularity_and_diurnal_load(name: str, preset_traces: dict[str, tuple]) -> None:
    _, _, df = preset_traces[name]
    counts = np.sort(df.group_by("key").len()["len"].to_numpy())[::-1]
    top = counts[:1000]
    slope = np.polyfit(np.log(np.arange(1, top.size + 1)), np.log(top), 1)[0]
    assert 0.65 <= -slope <= 1.0
    hours = ((df["time"] - df["time"].min()) // 3600).cast(pl.Int64).value_counts()
    per_hour = hours.filter(pl.col("time") < 72)["count"].to_numpy()
    assert per_hour.min() < 0.6 * per_hour.mean() < per_hour.max() / 1.5


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_metadata_carries_reuse_signal(name: str, preset_traces: dict[str, tuple]) -> None:
    _, _, df = preset_traces[name]
    groups = (df.group_by("namespace", "user")
              .agg(acc=pl.len(), blocks=pl.col("key").n_unique())
              .with_columns(reuse=pl.col("acc") / pl.col("blocks")))
    assert df["namespace"].n_unique() >= 3
    assert groups["reuse"].max() > 5 * groups["reuse"].min()
    # within one namespace, users differ: some re-read, some scan once
    by_ns = groups.group_by("namespace").agg(lo=pl.col("reuse").min(), hi=pl.col("reuse").max())
    assert (by_ns["hi"] > 5 * by_ns["lo"]).any()


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_puts_are_put_ops_and_temp_put_precedes_gets(name: str,
                                                    preset_traces: dict[str, tuple]) -> None:
    _, _, df = preset_traces[name]
    first = df.group_by("key", maintain_order=True).agg(first_op=pl.col("op").first(),
                                                       ops=pl.col("op").unique())
    temp = first.filter(pl.col("ops").list.contains(3))
    assert temp.height > 0 and (temp["first_op"] == 3).all()
    st = compute_stats(df, TraceMeta(sample_ratio=1))
    assert st["puts"] == df.filter(pl.col("op").is_in([3, 4])).height > 0


def test_ingest_reads_generated_trace(tmp_path: Path) -> None:
    ingest = pytest.importorskip("flashml.trace.ingest")
    out = tmp_path / "g.trace"
    info = generate_trace("region3-like", 3, out, accesses=8_000, progress=False)
    df, meta = ingest.load_trace(out)
    assert meta.sample_ratio == pytest.approx(info["sample_ratio"], rel=1e-9)
    _, mine = parse(out)
    a = compute_stats(df, meta)
    b = compute_stats(mine, TraceMeta(sample_ratio=info["sample_ratio"]))
    assert a == pytest.approx(b)


# --- object-trace presets (cdn-like, kv-like: objects-csv) --------------------------------------

from flashml.trace.generate import build_object_requests  # noqa: E402
from flashml.trace.objects import object_stats, read_objects  # noqa: E402
from flashml.trace.presets import (  # noqa: E402
    OBJECT_PRESETS,
    object_markdown,
    object_preset_stats,
)


def parse_objects(path: Path) -> pl.DataFrame:
    """Parse an objects-csv trace with plain Python, asserting the line format."""
    times, keys, sizes = [], [], []
    with open(path, encoding="ascii") as f:
        assert f.readline() == "time,key,size\n"
        for line in f:
            t, k, s = line.rstrip("\n").split(",")
            assert len(t.split(".")[-1]) <= 3, line  # milliseconds at most
            times.append(float(t))
            keys.append(int(k))
            sizes.append(int(s))
    return pl.DataFrame({"time": np.array(times), "key": np.array(keys, dtype=np.uint64),
                         "size": np.array(sizes, dtype=np.uint64)})


@pytest.fixture(scope="module")
def object_traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple]:
    """Each object preset at its default size, seed 0 (the documented configuration)."""
    d = tmp_path_factory.mktemp("object-presets")
    out = {}
    for name in OBJECT_PRESETS:
        path = d / f"{name}.csv"
        info = generate_trace(name, 0, path, progress=False)
        out[name] = (info, path, object_preset_stats(name, path))
    return out


def test_object_presets_same_seed_same_bytes(tmp_path: Path) -> None:
    for name in OBJECT_PRESETS:
        a, b, c = (tmp_path / f"{name}-{x}.csv" for x in "abc")
        generate_trace(name, 7, a, accesses=20_000, progress=False)
        generate_trace(name, 7, b, accesses=20_000, progress=False)
        generate_trace(name, 8, c, accesses=20_000, progress=False)
        assert a.read_bytes() == b.read_bytes()
        assert a.read_bytes() != c.read_bytes()
    assert len(list(tmp_path.iterdir())) == 3 * len(OBJECT_PRESETS)


@pytest.mark.parametrize("name", sorted(OBJECT_PRESETS))
def test_object_trace_format(name: str, tmp_path: Path) -> None:
    """objects-csv: header, ms timestamps non-decreasing from the epoch, integer keys, every
    size inside its classes' range and fixed per object; `read_objects` reads the same."""
    p = OBJECT_PRESETS[name]
    path = tmp_path / "t.csv"
    info = generate_trace(name, 3, path, accesses=30_000, days=0.5, progress=False)
    mine = parse_objects(path)
    assert mine.height == info["accesses"] == 30_000
    t = mine["time"].to_numpy()
    assert (np.diff(t) >= 0).all() and t[0] >= 1_572_000_000
    assert t[-1] - t[0] <= 0.5 * 86_400 and t[-1] - t[0] > 0.45 * 86_400
    lo = min(c.size_range[0] for c in p.classes)
    hi = max(c.size_range[1] for c in p.classes)
    assert mine["size"].min() >= lo and mine["size"].max() <= hi
    assert (mine.group_by("key").agg(pl.col("size").n_unique())["size"] == 1).all()
    assert info["keys"] == mine["key"].n_unique()
    assert info["bytes"] == mine.unique("key")["size"].sum()
    got = read_objects(path, "objects-csv")
    assert got["key"].to_list() == mine["key"].to_list()
    assert got["size"].to_list() == mine["size"].to_list()
    assert np.allclose(got["time"].to_numpy(), t)


@pytest.mark.parametrize("name", sorted(OBJECT_PRESETS))
def test_object_preset_stats_in_documented_ranges(name: str, object_traces: dict) -> None:
    info, _, st = object_traces[name]
    p = OBJECT_PRESETS[name]
    assert info["accesses"] == st["requests"] == p.default_accesses()
    bad = {k: (st[k], lo, hi) for k, (lo, hi) in p.expected.items() if not lo <= st[k] <= hi}
    assert not bad, bad
    assert set(p.expected) >= {"one_hit_wonder_rate", "zipf_slope", "size_p50",
                               "hot_set_kept", "request_rate_per_s"}


@pytest.mark.parametrize("name", sorted(OBJECT_PRESETS))
def test_object_docs_section_is_rendered_from_the_preset(name: str,
                                                           object_traces: dict) -> None:
    _, _, st = object_traces[name]
    section = object_markdown(OBJECT_PRESETS[name], st)
    assert section in PRESETS_DOC.read_text(encoding="utf-8"), (
        f"docs/reference/synthetic-traces.md's `{name}` section is out of date; paste the "
        "output of "
        "`python -m flashml.trace.presets`")


def test_object_presets_size_and_skew_differ() -> None:
    """cdn-like: KB..MB sizes; kv-like: 100 B..10 KB and more skewed."""
    cdn, kv = OBJECT_PRESETS["cdn-like"], OBJECT_PRESETS["kv-like"]
    assert cdn.expected["size_p50"][0] > 100 * kv.expected["size_p50"][1]
    assert kv.expected["zipf_slope"][0] > cdn.expected["zipf_slope"][0]
    assert all(100 <= c.size_range[0] and c.size_range[1] <= 10_000 for c in kv.classes)
    assert all(0.8 <= c.zipf_alpha <= 1.0 for c in cdn.classes)


@pytest.mark.parametrize("name", sorted(OBJECT_PRESETS))
def test_popularity_shifts_replace_part_of_the_hot_set(name: str) -> None:
    """The same trace without shifts keeps its hot set; with them, new objects enter the
    hot ranks at each shift, and the objects they displace stay in the trace's tail."""
    from dataclasses import replace

    p = OBJECT_PRESETS[name]
    n, dur = 300_000, p.hours * 3600.0
    window = p.shift_every_h * 3600.0
    shifted = build_object_requests(p, 1, n, dur)
    still = build_object_requests(replace(p, shift_fraction=0.0), 1, n, dur)
    kept_shifted = object_stats(shifted, window_s=window)["hot_set_kept"]
    kept_still = object_stats(still, window_s=window)["hot_set_kept"]
    assert kept_still > kept_shifted + 0.1, (kept_still, kept_shifted)
    # objects first seen after the first shift are among the most requested of the trace
    t0 = shifted["time"][0]
    first = shifted.group_by("key").agg(t=pl.col("time").min(), n=pl.len())
    late = first.filter(pl.col("t") > t0 + window * 1.05)
    top = first.sort("n", descending=True).head(200)
    assert top.join(late, on="key").height >= 10
    assert still["key"].n_unique() < shifted["key"].n_unique()


def test_object_preset_overrides_and_errors(tmp_path: Path) -> None:
    p = OBJECT_PRESETS["kv-like"]
    out = tmp_path / "kv.csv"
    info = generate_trace("kv-like", 0, out, days=0.25, progress=False)
    assert info["accesses"] == round(p.request_rate_per_s * 0.25 * 86_400)
    assert info["format"] == "objects-csv"
    with pytest.raises(UserError, match="days"):
        generate_trace("kv-like", 0, tmp_path / "x.csv", days=-1, progress=False)
    with pytest.raises(UserError, match="accesses"):
        generate_trace("cdn-like", 0, tmp_path / "x.csv", accesses=0, progress=False)
    assert sorted(f.name for f in tmp_path.iterdir()) == ["kv.csv"]


def test_generate_object_preset_cli(tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "cdn.csv"
    proc = cli("trace", "generate", "--preset", "cdn-like", "--accesses", "5000", "--quiet",
               "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert "format=objects-csv" in proc.stdout
    assert out.read_text().splitlines()[0] == "time,key,size"
    proc = cli("trace", "generate", "--preset", "cdn-lik", "-o", tmp_path / "x.csv")
    assert proc.returncode == 1 and "cdn-like, kv-like" in proc.stderr
    assert not (tmp_path / "x.csv").exists()
    # ingest: objects-csv -> the object table that object mode reads as parquet
    table = tmp_path / "cdn.parquet"
    proc = cli("trace", "ingest", out, "--format", "objects-csv", "-o", table)
    assert proc.returncode == 0, proc.stderr
    a, b = read_objects(table, "parquet"), read_objects(out, "objects-csv")
    assert a.equals(b)


# bad objects-csv input: (content, line, field, message fragment)
BAD_OBJECTS = {
    "not an integer key": ("time,key,size\n1.0,5,100\n2.0,x7,100\n", 3, "key",
                           "expected an integer, found 'x7'"),
    "negative key": ("time,key,size\n1.0,-5,100\n", 2, "key", "negative key -5"),
    "key too big": (f"time,key,size\n1.0,{1 << 64},100\n", 2, "key", "does not fit in 64"),
    "bad time": ("time,key,size\n1.0,5,100\nnoon,6,100\n", 3, "time", "expected a number"),
    "time backwards": ("time,key,size\n1.0,5,100\n2.0,6,100\n1.5,7,100\n", 4, "time",
                       "time goes backwards (1.5 after 2.0)"),
    "size zero": ("time,key,size\n1.0,5,100\n2.0,6,0\n", 3, "size", "size must be >= 1"),
    "size missing": ("time,key,size\n1.0,5,100\n2.0,6\n", 3, "size", "expected 3 fields"),
    "size not a number": ("time,key,size\n1.0,5,1e3\n", 2, "size", "expected an integer"),
    "no size column": ("time,key\n1.0,5\n", 1, "size", "missing column"),
    "no header": ("1.0,5,100\n", 1, "time", "missing column"),
    "blank line inside": ("time,key,size\n1.0,5,100\n\n2.0,6,7\n", 3, "time", "blank line"),
    "double carriage return": ("time,key,size\r\n1.0,5,100\r\r\n", 2, "size",
                               "expected an integer, found '100\\r'"),
    "not utf-8": ("time,key,size\n1.0,5,100\n2.0,6\udcff,7\n", 3, "key", "not UTF-8"),
    "empty": ("", 1, None, "empty file"),
    "header only": ("time,key,size\n", 2, None, "no requests"),
}


@pytest.mark.parametrize("case", sorted(BAD_OBJECTS))
def test_bad_objects_csv_names_file_line_field(tmp_path: Path, case: str) -> None:
    from flashml.errors import TraceError

    content, line, field, fragment = BAD_OBJECTS[case]
    src = tmp_path / "bad.csv"
    src.write_bytes(content.encode("utf-8", "surrogateescape"))
    with pytest.raises(TraceError) as e:
        read_objects(src, "objects-csv")
    assert (e.value.line, e.value.field) == (line, field)
    assert fragment in str(e.value)
    assert str(e.value).startswith(f"{src}:{line}")


@pytest.mark.parametrize("case", ["not an integer key", "time backwards", "no size column"])
def test_bad_objects_csv_cli_exit_1_no_output(tmp_path: Path, cli, case: str) -> None:  # type: ignore[no-untyped-def]
    content, line, field, fragment = BAD_OBJECTS[case]
    src = tmp_path / "bad.csv"
    src.write_text(content)
    out = tmp_path / "out" / "t.parquet"
    proc = cli("trace", "ingest", src, "--format", "objects-csv", "-o", out)
    assert proc.returncode == 1, proc.stderr
    where = f"{src}:{line}" + (f": field '{field}'" if field else "")
    assert where in proc.stderr and fragment in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists()
    assert not out.parent.exists() or list(out.parent.iterdir()) == []


def test_objects_csv_extra_columns_and_order(tmp_path: Path) -> None:
    src = tmp_path / "t.csv"
    src.write_text("size,op,key,time\n100,get,5,1.5\n200,set,6,2\n")
    df = read_objects(src, "csv")  # `csv` is another name for objects-csv
    assert df.columns == ["key", "size", "time"]
    assert df.rows() == [(5, 100, 1.5), (6, 200, 2.0)]


def test_objects_csv_line_endings_and_trailing_blank_lines(tmp_path: Path) -> None:
    src = tmp_path / "t.csv"
    src.write_bytes(b"time,key,size\r\n1.0,5,100\r\n2.0,6,7\r\n\r\n\n")
    assert read_objects(src, "objects-csv").rows() == [(5, 100, 1.0), (6, 7, 2.0)]


@pytest.mark.parametrize("content, line, field, fragment", [
    ("version,time,op,size,lbn\n1,5,28,512,7\n1,6,28,512\n", 3, "lbn", "expected 5 fields"),
    ("version,time,op,size,lbn\n1,5,28,,7\n", 2, "size", "expected an integer, found ''"),
    ("version,time,op,size,lbn\n1,5,28,512,-7\n", 2, "lbn", "negative lbn -7"),
    ("version,time,op,size,lbn\n1,inf,28,512,7\n", 2, "time", "finite"),
    ("version,time,op,size\n1,5,28,512\n", 1, "lbn", "missing column"),
])
def test_bad_cloudphysics_object_rows(tmp_path: Path, content: str, line: int, field: str,
                                      fragment: str) -> None:
    from flashml.errors import TraceError

    src = tmp_path / "cp.csv"
    src.write_text(content)
    with pytest.raises(TraceError) as e:
        read_objects(src, "cloudphysics")
    assert (e.value.line, e.value.field) == (line, field) and fragment in str(e.value)


def test_bad_object_parquet(tmp_path: Path) -> None:
    from flashml.errors import TraceError

    src = tmp_path / "t.parquet"
    src.write_bytes(b"PAR1 not really")
    with pytest.raises(TraceError, match="cannot read Parquet"):
        read_objects(src, "parquet")
    for df, field, fragment in [
        (pl.DataFrame({"key": [1, None], "size": [1, 2]}), "key", "null key in row 2"),
        (pl.DataFrame({"key": [1, 2], "size": [1, -2]}), "size", "negative size -2 in row 2"),
        (pl.DataFrame({"key": ["a"], "size": [1]}), "key", "expected unsigned integers"),
        (pl.DataFrame({"key": [1], "size": [1], "time": [float("nan")]}), "time", "finite"),
        (pl.DataFrame({"key": [1]}), "size", "missing column"),
    ]:
        df.write_parquet(src)
        with pytest.raises(TraceError) as e:
            read_objects(src, "parquet")
        assert e.value.field == field and fragment in str(e.value), str(e.value)
