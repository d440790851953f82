"""Episodes / OPT (Polars engine, the shared code, the CLI): a hand-worked example (Baleen
Fig. 4 and 5), a pure-Python reference on tiny traces, an independent episode count on
generated traces, chunking, bad input, and OPT simulated against the episode model."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal
from test_episodes_reference import reference

from flashml.config import DEFAULTS, GB, MB, UNITS
from flashml.errors import TraceError, UserError
from flashml.systems.baleen.episodes.core import EpisodeParams, build, derive, reusable
from flashml.trace.canonical import TraceMeta, write_table

SEG = UNITS.segment_bytes
T = UNITS.t_seek_s
X = SEG / UNITS.bandwidth_bytes_per_s  # transfer time of one segment


def acc(t, key, s0, s1, op=1):
    """An access covering segments s0..s1 of block `key`."""
    return {"time": float(t), "key": key, "offset": s0 * SEG, "size": (s1 - s0 + 1) * SEG,
            "op": op}


def write_trace(path: Path, rows: list[dict], sample_ratio: float = 100.0) -> Path:
    df = pl.DataFrame({
        "time": [r["time"] for r in rows], "key": [r["key"] for r in rows],
        "offset": [r["offset"] for r in rows], "size": [r["size"] for r in rows],
        "op": [r["op"] for r in rows], "namespace": [0] * len(rows), "user": [0] * len(rows),
        "src_line": list(range(1, len(rows) + 1)),
    }, schema={"time": pl.Float64, "key": pl.UInt64, "offset": pl.UInt64, "size": pl.UInt64,
               "op": pl.UInt8, "namespace": pl.UInt32, "user": pl.UInt32,
               "src_line": pl.UInt64})
    write_table(df, path, TraceMeta(sample_ratio=sample_ratio, source_format="test"))
    return path


# Fig. 4/5: block 1 has two episodes split by a 480 s gap (> EA 100 s) with OPT-Range (1,3)
# and (2,3); block 2 has one single-access episode; block 3 one episode with a hole (seg 4).
HAND = [
    acc(0, 1, 1, 2),      # row 0  ep A (block 1)
    acc(10, 1, 2, 3),     # row 1  ep A
    acc(20, 1, 1, 1),     # row 2  ep A
    acc(30, 2, 0, 0),     # row 3  ep B (block 2)
    acc(40, 3, 0, 0),     # row 4  ep C (block 3)
    acc(45, 3, 5, 5),     # row 5  ep C
    acc(48, 3, 0, 3),     # row 6  ep C
    acc(500, 1, 2, 3),    # row 7  ep D (block 1, after a 480 s gap)
    acc(550, 1, 3, 3),    # row 8  ep D
    acc(1000, 1, 0, 7, op=3),  # row 9  a PUT: never in an episode; sets the 1000 s span
]


def hand_expected():
    """Worked by hand (module docstring of flashml.systems.baleen.episodes.core)."""
    return {
        # episode_id: (first_row, gets, range, size, get_segs, accessed, replay ios/segs,
        #              saved with prefetch, saved without, score, when_label)
        0: (0, 3, (1, 3), 3, 5, 3, (2, 3), 2 * T + 2 * X, T + 2 * X, (2 * T + 2 * X) / 3, 1),
        1: (3, 1, (0, 0), 1, 1, 1, (1, 1), 0.0, 0.0, 0.0, 0),
        2: (4, 3, (0, 5), 6, 6, 5, (3, 5), 2 * T, X, 2 * T / 6, 1),
        3: (7, 2, (2, 3), 2, 3, 2, (1, 2), T + X, T + X, (T + X) / 2, 0),
    }


@pytest.fixture(scope="module")
def hand_trace(tmp_path_factory) -> Path:
    return write_trace(tmp_path_factory.mktemp("hand") / "hand.parquet", HAND)


def read_out(d: Path) -> dict[str, pl.DataFrame]:
    return {n: pl.read_parquet(d / f"{n}.parquet") for n in ("episodes", "labels", "arrays")}


@pytest.mark.parametrize("engine", ["polars", "rust"])
def test_hand_worked_example(hand_trace, tmp_path, engine):
    out = tmp_path / "o"
    r = build(hand_trace, out, EpisodeParams(eviction_age_s=100, target_write_rate_mbps=0.001,
                                             accesses_per_episode=2), engine=engine)
    t = read_out(out)
    ep = t["episodes"]
    assert ep["episode_id"].to_list() == [0, 1, 2, 3]
    for eid, (first, gets, rng, size, gsegs, accessed, (ios, isegs), spf, snp, score,
              when) in hand_expected().items():
        row = ep.row(eid, named=True)
        assert row["first_row"] == first and row["gets"] == gets
        assert (row["range_start"], row["range_end"]) == rng
        assert row["size_segments"] == size and row["get_segments"] == gsegs
        assert row["accessed_segments"] == accessed
        assert (row["replay_ios"], row["replay_segments"]) == (ios, isegs)
        assert row["dt_saved_prefetch_s"] == pytest.approx(spf, abs=1e-15)
        assert row["dt_saved_noprefetch_s"] == pytest.approx(snp, abs=1e-15)
        assert row["score"] == pytest.approx(score, abs=1e-15)
        assert row["when_label"] == when
    # ranking A (0.00825) > D (0.00619) > C (0.00383) > B (0); cum segments 3, 5, 11, 12
    assert ep.sort("rank")["episode_id"].to_list() == [0, 3, 2, 1]
    assert ep.sort("rank")["cum_segments"].to_list() == [3, 5, 11, 12]
    rates = [c * SEG / 1000.0 / MB for c in (3, 5, 11, 12)]  # 0.00039 .. 0.00157 MB/s
    assert ep.sort("rank")["cum_write_rate_mbps"].to_list() == pytest.approx(rates)
    assert ep.sort("episode_id")["admitted"].to_list() == [True, False, False, True]
    s = r.summary
    assert s["episodes"] == 4 and s["admitted_episodes"] == 2
    assert s["cutoff_score"] == pytest.approx((T + X) / 2)
    assert s["opt_write_rate_mbps"] == pytest.approx(rates[1])
    assert s["dt_saved_ratio"] == pytest.approx((3 * T + 3 * X) / (9 * T + 15 * X))
    littles = (3 * (20 + 100) + 2 * (50 + 100)) / 1000.0 * SEG / GB
    assert s["littles_law_cache_gb"] == pytest.approx(littles)
    lab = t["labels"]
    assert lab["row"].to_list() == [0, 1, 2, 3, 4, 5, 6, 7, 8]
    assert lab["episode_id"].to_list() == [0, 0, 0, 1, 2, 2, 2, 3, 3]
    assert lab["position"].to_list() == [0, 1, 2, 0, 0, 1, 2, 0, 1]
    assert lab["opt_label"].to_list() == [1, 1, -1, 0, 0, 0, -1, 1, 1]
    assert lab["range_start"].to_list() == [1, 1, 1, 0, 0, 0, 0, 2, 2]
    assert lab["range_end"].to_list() == [3, 3, 3, 0, 5, 5, 5, 3, 3]
    assert lab["when_label"].to_list() == [1, 1, 1, 0, 1, 1, 1, 0, 0]
    arr = t["arrays"]
    assert arr.height == len(HAND)
    assert arr["admit"].to_list() == [1, 1, 1, 0, 0, 0, 0, 1, 1, 0]
    assert arr["prefetch_start"].to_list() == [1, 1, 1, -1, -1, -1, -1, 2, 2, -1]
    assert arr["prefetch_end"].to_list() == [3, 3, 3, -1, -1, -1, -1, 3, 3, -1]
    on_disk = json.loads((out / "summary.json").read_text())
    for key in ("episodes", "admitted_episodes", "cutoff_score", "target_write_rate_mbps",
                "dt_saved_ratio", "littles_law_cache_gb", "curve"):
        assert key in on_disk
    assert (out / "curve.png").stat().st_size > 0


def test_hand_example_higher_target_and_ea(hand_trace, tmp_path):
    # 0.002 MB/s admits C too (1.44e-3), never B (score 0); EA 1000 s merges A and D
    r = build(hand_trace, tmp_path / "a", EpisodeParams(eviction_age_s=100,
                                                        target_write_rate_mbps=0.002),
              engine="polars", plot=False)
    assert r.summary["admitted_episodes"] == 3
    r = build(hand_trace, tmp_path / "b", EpisodeParams(eviction_age_s=1000), engine="polars",
              plot=False)
    ep = pl.read_parquet(tmp_path / "b" / "episodes.parquet")
    assert ep.height == 3
    assert ep.filter(pl.col("key") == 1).select("gets", "range_start", "range_end").row(0) \
        == (5, 1, 3)


def _random_rows(rng: random.Random, n: int) -> list[dict]:
    rows, t = [], 0.0
    for _ in range(n):
        t += rng.choice([0.0, 1.0, 3.0, 20.0, 70.0])
        s0 = rng.randrange(64)
        s1 = min(63, s0 + rng.choice([0, 0, 1, 3, 10, 63]))
        op = rng.choice([1, 1, 1, 2, 5, 3])
        rows.append(acc(t, rng.randrange(6), s0, s1, op))
    rows.append(acc(t + 1.0, 0, 0, 0, 4))
    return rows


@pytest.mark.parametrize("engine", ["polars", "rust"])
@pytest.mark.parametrize("seed", range(8))
def test_matches_reference(tmp_path, seed, engine):
    rng = random.Random(seed)
    rows = _random_rows(rng, rng.randrange(5, 120))
    ratio = rng.choice([100.0, 1.0, 0.1])
    mode = "logical" if seed % 3 == 2 else "seconds"
    ea, target, k = rng.choice([5.0, 30.0, 100.0]), rng.choice([0.05, 0.5, 5.0, 50.0]), 2
    path = write_trace(tmp_path / "t.parquet", rows, sample_ratio=ratio)
    build(path, tmp_path / "o", EpisodeParams(eviction_age_s=ea, target_write_rate_mbps=target,
                                              accesses_per_episode=k, time_mode=mode),
          engine=engine, chunks=rng.choice([1, 3]), plot=False)
    ref = reference(rows, eviction_age_s=ea, target=target, k=k, sample_ratio=ratio,
                    time_mode=mode)
    got = read_out(tmp_path / "o")
    ep = got["episodes"]
    assert ep.height == len(ref["episodes"])
    for e, row in zip(ref["episodes"], ep.iter_rows(named=True), strict=True):
        for name, v in e.items():
            assert row[name] == v, (name, row, e)
    lab = got["labels"]
    assert lab["row"].to_list() == sorted(ref["labels"])
    for row in lab.iter_rows(named=True):
        want = ref["labels"][row["row"]]
        assert {k2: row[k2] for k2 in want} == want
    arr = got["arrays"]
    got_arrays = zip(arr["admit"], arr["prefetch_start"], arr["prefetch_end"], strict=True)
    assert list(got_arrays) == ref["arrays"]


def generated_table(d: Path, preset: str, seed: int, accesses: int) -> Path:
    """A generated 2-day trace of `preset`, ingested into `d`: its canonical table."""
    from flashml.trace.generate import generate_trace
    from flashml.trace.ingest import ingest

    generate_trace(preset, seed, d / "g.trace", accesses=accesses, days=2, progress=False)
    return ingest(d / "g.trace", d / "g.parquet", progress=False).out


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    return generated_table(tmp_path_factory.mktemp("gen"), "region1-like", 7, 60_000)


def _independent_count(path: Path, ea: float) -> int:
    """keys with GETs + gaps > EA between consecutive GETs of a key (numpy)."""
    df = pl.read_parquet(path).filter(pl.col("op").is_in([1, 2, 5]))
    key = df["key"].to_numpy()
    t = df["time"].to_numpy()
    order = np.lexsort((t, key))
    key, t = key[order], t[order]
    same = key[1:] == key[:-1]
    return int(len(np.unique(key)) + np.sum(same & (np.diff(t) > ea)))


@pytest.mark.parametrize("ea", [600.0, 7200.0])
def test_episode_count_independent(generated, tmp_path, ea):
    r = build(generated, tmp_path / "o", EpisodeParams(eviction_age_s=ea), engine="polars",
              plot=False)
    assert r.summary["episodes"] == _independent_count(generated, ea)
    ep = pl.read_parquet(tmp_path / "o" / "episodes.parquet")
    lab = pl.read_parquet(tmp_path / "o" / "labels.parquet")
    assert int(ep["gets"].sum()) == lab.height == r.summary["gets"]
    adm = ep.filter("admitted")
    assert adm["cum_write_rate_mbps"].max() <= r.summary["target_write_rate_mbps"]
    # the admitted set is a prefix of the ranking, and the next episode would exceed the budget
    assert sorted(adm["rank"].to_list()) == list(range(adm.height))
    nxt = ep.filter(pl.col("rank") == adm.height)
    if nxt.height and nxt["score"][0] > 0:
        assert nxt["cum_write_rate_mbps"][0] > r.summary["target_write_rate_mbps"]


@pytest.mark.parametrize("mode,ea,buckets", [("seconds", 600.0, 1), ("seconds", 7200.0, 3),
                                             ("logical", 3600.0, 1), ("logical", 3600.0, 4)])
def test_rust_equals_polars(generated, tmp_path, monkeypatch, mode, ea, buckets):
    """The in-process engine (flashml_sim.episode_split) writes the Polars engine's tables,
    bit for bit, and the same summary, in one key bucket or several, its labels and arrays
    written a slice of rows at a time."""
    from flashml.systems.baleen.episodes import rust_engine

    monkeypatch.setattr(rust_engine, "WRITE_ROWS", 777)
    p = EpisodeParams(eviction_age_s=ea, time_mode=mode, accesses_per_episode=4)
    rp = build(generated, tmp_path / "p", p, engine="polars", chunks=3, plot=False)
    rr = build(generated, tmp_path / "r", p, engine="rust", chunks=buckets, plot=False)
    a, b = read_out(tmp_path / "p"), read_out(tmp_path / "r")
    for n in a:
        assert_frame_equal(a[n], b[n])
    drop = ("engine", "engine_choice", "seconds", "timings")
    assert {k: v for k, v in rp.summary.items() if k not in drop} == \
        {k: v for k, v in rr.summary.items() if k not in drop}


def test_rust_equals_polars_out_of_time_order(tmp_path):
    """A table whose times are not in row order (episodes still follow each key's times):
    the in-memory engine's other sort gives the Polars engine's tables."""
    rng = random.Random(5)
    rows = _random_rows(rng, 300)
    times = [r["time"] for r in rows]
    rng.shuffle(times)
    for r, t in zip(rows, times, strict=True):
        r["time"] = t
    path = write_trace(tmp_path / "t.parquet", rows)
    p = EpisodeParams(eviction_age_s=30.0, target_write_rate_mbps=0.5, accesses_per_episode=2)
    build(path, tmp_path / "p", p, engine="polars", plot=False)
    build(path, tmp_path / "r", p, engine="rust", plot=False)
    a, b = read_out(tmp_path / "p"), read_out(tmp_path / "r")
    for n in a:
        assert_frame_equal(a[n], b[n])
    assert a["episodes"].height > 20


def test_chunks_give_identical_tables(generated, tmp_path):
    p = EpisodeParams(eviction_age_s=3600)
    build(generated, tmp_path / "one", p, engine="polars", chunks=1, plot=False)
    build(generated, tmp_path / "five", p, engine="polars", chunks=5, plot=False)
    a, b = read_out(tmp_path / "one"), read_out(tmp_path / "five")
    for n in a:
        assert_frame_equal(a[n], b[n])


def test_derived_build_is_the_build(generated, tmp_path):
    """A larger K's build gives a smaller K's tables and summary (what the run's recorded
    episodes take from the convergence loop's last build) exactly as building them does;
    other parameters, or a smaller K, are not served (`reusable`)."""
    big = EpisodeParams(eviction_age_s=3600, accesses_per_episode=12)
    build(generated, tmp_path / "k12", big, engine="rust", plot=False)
    small = EpisodeParams(eviction_age_s=3600, accesses_per_episode=6)
    built = build(generated, tmp_path / "k6", small, engine="rust")
    found = reusable(tmp_path / "k12", small)
    assert found is not None
    derived = derive(found, tmp_path / "k6d", small, source=generated)
    a, b = read_out(tmp_path / "k6"), read_out(tmp_path / "k6d")
    for n in a:
        assert_frame_equal(a[n], b[n])
    assert (a["labels"]["opt_label"] >= 0).sum() < \
        (read_out(tmp_path / "k12")["labels"]["opt_label"] >= 0).sum()
    assert (tmp_path / "k6d" / "curve.png").is_file()
    assert derived.summary["engine_choice"] == "the tables of an earlier build (k12) with this K"
    volatile = ("seconds", "timings", "engine_choice")
    assert {k: v for k, v in derived.summary.items() if k not in volatile} == \
        {k: v for k, v in built.summary.items() if k not in volatile}
    for other in (EpisodeParams(eviction_age_s=1800, accesses_per_episode=6),
                  EpisodeParams(eviction_age_s=3600, accesses_per_episode=24)):
        assert reusable(tmp_path / "k12", other) is None
    assert reusable(None, small) is None


def test_simulated_opt_agrees_with_episode_model(generated, tmp_path):
    """OPT through the Rust simulator lands within 10% of the target write rate, and the
    measured mean eviction age is reported next to the assumed one."""
    r = build(generated, tmp_path / "o", EpisodeParams(eviction_age_s=3600), engine="polars",
              simulate=True, plot=False)
    sim = r.summary["simulation"]
    assert sim["within_10pct"], sim
    target = r.summary["target_write_rate_mbps"]
    assert target == DEFAULTS.target_write_rate_mbps
    assert abs(sim["measured_write_rate_mbps"] / target - 1) <= 0.10
    assert sim["assumed_eviction_age_s"] == 3600
    assert sim["measured_eviction_age_s"] > 0


def test_cli_build_and_sim_reads_arrays(generated, tmp_path, cli):
    out = tmp_path / "o"
    p = cli("episodes", "build", "--trace", generated, "--eviction-age", "3600",
            "--target-write-rate", "35.599", "--engine", "polars", "--accesses-per-episode", "15",
            "--json", "-o", out)
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout)
    assert s["accesses_per_episode"] == 15
    lab = pl.read_parquet(out / "labels.parquet")
    assert lab.filter(pl.col("position") >= 15)["opt_label"].unique().to_list() in ([-1], [])
    p = cli("sim", "run", "--trace", generated, "--arrays", out / "arrays.parquet",
            "--admission", "opt", "--prefetch", "range", "--warmup-s", "0", "--json")
    assert p.returncode == 0, p.stderr
    m = json.loads(p.stdout)
    assert m["flash_write_rate_mbps"] > 0 and m["prefetched_segments"] > 0


def _no_leftovers(parent: Path, name: str) -> None:
    assert not (parent / name).exists()
    assert [p.name for p in parent.iterdir() if p.name.startswith(f".{name}.")] == []


@pytest.mark.parametrize("args,msg", [
    (["--eviction-age", "0"], "argument --eviction-age: must be >= 0.001 s, got 0"),
    (["--eviction-age=-5"], "argument --eviction-age: must be >= 0.001 s, got -5"),
    (["--eviction-age", "60", "--target-write-rate", "0"],
     "argument --target-write-rate: must be >= 1e-06 MB/s, got 0"),
])
def test_bad_parameters(hand_trace, tmp_path, cli, args, msg):
    p = cli("episodes", "build", "--trace", hand_trace, "--engine", "polars", *args,
            "-o", tmp_path / "o")
    assert p.returncode == 2
    assert msg in p.stderr and "Traceback" not in p.stderr
    _no_leftovers(tmp_path, "o")


def test_bad_traces(tmp_path, cli):
    empty = write_trace(tmp_path / "empty.parquet", [])
    puts = write_trace(tmp_path / "puts.parquet", [acc(0, 1, 0, 0, 3), acc(5, 1, 0, 1, 4)])
    nocol = tmp_path / "nocol.parquet"
    pl.DataFrame({"time": [0.0], "key": [1], "offset": [0], "size": [10]}).write_parquet(nocol)
    for path, msg in ((empty, "empty"), (puts, "no GET")):
        p = cli("episodes", "build", "--trace", path, "--eviction-age", "60", "--engine",
                "polars", "-o", tmp_path / "o")
        assert p.returncode == 1, p.stdout
        assert msg in p.stderr and p.stderr.count("\n") == 1, p.stderr
        _no_leftovers(tmp_path, "o")
    for path, msg in ((nocol, "missing column 'op'"), (tmp_path / "nope.parquet", "no such"),
                      (puts, "no GET")):
        with pytest.raises(TraceError, match=msg):
            build(path, tmp_path / "o", EpisodeParams(eviction_age_s=1), engine="polars")
        _no_leftovers(tmp_path, "o")
    with pytest.raises(UserError, match="engine"):
        build(puts, tmp_path / "o", EpisodeParams(eviction_age_s=1), engine="dask")
    _no_leftovers(tmp_path, "o")


def test_failed_rebuild_keeps_old_output(hand_trace, tmp_path):
    out = tmp_path / "o"
    build(hand_trace, out, EpisodeParams(eviction_age_s=100), engine="polars", plot=False)
    before = (out / "episodes.parquet").read_bytes()
    puts = write_trace(tmp_path / "puts.parquet", [acc(0, 1, 0, 0, 3), acc(5, 1, 0, 1, 4)])
    with pytest.raises(TraceError):
        build(puts, out, EpisodeParams(eviction_age_s=100), engine="polars")
    assert (out / "episodes.parquet").read_bytes() == before
    build(hand_trace, out, EpisodeParams(eviction_age_s=1000), engine="polars", plot=False)
    assert pl.read_parquet(out / "episodes.parquet").height == 3
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".o.")] == []
