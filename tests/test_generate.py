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

FIELDS = HEADER.lstrip("#").split()
README = Path(__file__).resolve().parents[1] / "README.md"


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
        generate_trace("region1-like", 0, tmp_path / "x", accesses=10**9, days=1,
                       progress=False)
    with pytest.raises(UserError, match="days"):
        generate_trace("region1-like", 0, tmp_path / "x", days=0, progress=False)
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
def test_readme_section_is_rendered_from_the_preset(name: str,
                                                    preset_traces: dict[str, tuple]) -> None:
    """README.md's section of each preset is exactly `markdown` of its one definition, with
    the statistics of its default trace as `flashml trace stats` measures them (ingested)."""
    from flashml.trace.ingest import load_trace

    info, _, _ = preset_traces[name]
    section = markdown(PRESETS[name], compute_stats(*load_trace(info["path"])))
    assert section in README.read_text(encoding="utf-8"), (
        f"README.md's `{name}` section is out of date; paste the output of "
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
