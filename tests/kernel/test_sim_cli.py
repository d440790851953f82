"""`flashml sim run` and `flashml sim objects` as a user runs them (subprocess of the
installed `flashml` entry point), including bad input."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from flashml.simulation import METRIC_KEYS, SimConfig, simulate
from flashml.trace.canonical import TraceMeta, read_meta, write_table

from conftest import REPO, SHARED

CLOUDPHYSICS = SHARED / "traces" / "cloudphysics-sample.csv"
FLASHML = REPO / ".venv" / "bin" / "flashml"
SEG = 131072


def flashml(*args: object) -> subprocess.CompletedProcess[str]:
    exe = str(FLASHML) if FLASHML.exists() else shutil.which("flashml")
    assert exe, "the flashml entry point is not installed (bash scripts/setup.sh)"
    return subprocess.run([exe, *map(str, args)], capture_output=True, text=True, cwd=REPO,
                          timeout=300)


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> tuple[Path, pl.DataFrame]:
    """Two days of a small synthetic canonical table at a 0.1% sample."""
    rng = np.random.default_rng(7)
    n = 5000
    df = pl.DataFrame({
        "time": np.sort(rng.uniform(1.6e9, 1.6e9 + 2 * 86400, n)),
        "key": (rng.zipf(1.3, n) % 800).astype(np.uint64),
        "offset": (rng.integers(0, 60, n) * SEG).astype(np.uint64),
        "size": (rng.integers(1, 5, n) * SEG).astype(np.uint64),
        "op": rng.choice([1, 2, 3], n).astype(np.uint8),
        "namespace": np.zeros(n, np.uint32), "user": np.zeros(n, np.uint32),
        "src_line": np.arange(1, n + 1, dtype=np.uint64),
    })
    path = tmp_path_factory.mktemp("sim") / "trace.parquet"
    write_table(df, path, TraceMeta(sample_ratio=0.1, source_format="synthetic"))
    return path, df


def test_run_json_matches_api(trace, tmp_path):
    path, df = trace
    series = tmp_path / "series.csv"
    p = flashml("sim", "run", "--trace", path, "--admission", "rejectx", "--cache-gb", "50",
                "--json", "--series-out", series)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert list(got) == list(METRIC_KEYS)
    want = simulate(df, SimConfig.for_trace(read_meta(path), cache_gb=50,
                                            admission="rejectx")).metrics
    for k in METRIC_KEYS:
        if k != "wall_s":
            assert got[k] == pytest.approx(want[k], rel=1e-12), k
    s = pl.read_csv(series)
    assert s.columns == ["time", "dt_util", "write_rate_mbps", "warmup"]
    assert s["dt_util"].max() >= got["peak_dt_util"]


def test_run_with_arrays_and_prefetch(trace, tmp_path):
    path, df = trace
    rng = np.random.default_rng(1)
    arrays = tmp_path / "arrays.parquet"
    pl.DataFrame({"score": rng.random(df.height), "prefetch_start": np.zeros(df.height),
                  "prefetch_end": np.full(df.height, 10)}).write_parquet(arrays)
    p = flashml("sim", "run", "--trace", path, "--admission", "threshold", "--threshold", "0.3",
                "--prefetch", "range", "--prefetch-when", "partial", "--arrays", arrays,
                "--eviction", "fifo", "--no-block-recency", "--json")
    assert p.returncode == 0, p.stderr
    m = json.loads(p.stdout)
    assert m["prefetched_segments"] > 0
    assert m["accesses"] == df.height
    # human-readable output without --json
    p = flashml("sim", "run", "--trace", path, "--admission", "coinflip", "--coinflip-p", "0.2")
    assert p.returncode == 0, p.stderr
    assert "peak_dt_util" in p.stdout and "{" not in p.stdout


def test_run_with_mat_eviction(trace):
    """--mat none is flash LRU exactly (every metric of the plain run, RejectX admitting);
    --mat oracle (every miss admitted) evicts by each block's next GET, hits more and reports
    MAT's counters."""
    path, _ = trace
    base = ["sim", "run", "--trace", path, "--cache-gb", "50", "--json"]
    rejectx = [*base, "--admission", "rejectx"]
    plain, none = flashml(*rejectx), flashml(*rejectx, "--mat", "none")
    lru, oracle = flashml(*base), flashml(*base, "--mat", "oracle", "--mat-k", "2")
    for p in (plain, none, lru, oracle):
        assert p.returncode == 0, p.stderr
    plain_m, none_m, lru_m, oracle_m = (json.loads(p.stdout) for p in (plain, none, lru, oracle))
    for k in METRIC_KEYS:
        if k != "wall_s":
            assert none_m[k] == pytest.approx(plain_m[k], rel=1e-12, nan_ok=True), k
    assert none_m["mat_predictions"] == 0 and none_m["mat_decisions"] > 0
    assert oracle_m["mat_predictions"] >= oracle_m["mat_decisions"] > 0
    assert oracle_m["io_hit_ratio"] > lru_m["io_hit_ratio"]


def test_objects_json():
    p = flashml("sim", "objects", "--trace", CLOUDPHYSICS, "--format", "cloudphysics",
                "--policy", "lru", "--capacity", "1MiB", "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert round(out["miss_ratio"], 4) == 0.8646
    assert out["requests"] == 113_872
    assert out["requests"] - out["hits"] == round(out["miss_ratio"] * out["requests"])
    p = flashml("sim", "objects", "--trace", CLOUDPHYSICS, "--policy", "fifo",
                "--capacity", "1000obj", "--json")
    assert p.returncode == 0, p.stderr
    assert round(json.loads(p.stdout)["miss_ratio"], 4) == 0.8388


@pytest.mark.parametrize("args, code, message", [
    (["sim", "run", "--trace", "{missing}"], 1, "no such file"),
    (["sim", "run", "--trace", "{trace}", "--cache-gb", "0"], 2,
     "argument --cache-gb: must be >= 1e-06 GB, got 0"),
    (["sim", "run", "--trace", "{trace}", "--capacity-segments", "0"], 2,
     "argument --capacity-segments: must be >= 1 segments, got 0"),  # was: the default
    (["sim", "run", "--trace", "{trace}", "--admission", "lfu"], 2, "invalid choice"),
    (["sim", "run", "--trace", "{trace}", "--admission", "threshold", "--threshold", "7"], 2,
     "argument --threshold: must be at most 1, got 7"),
    (["sim", "run", "--trace", "{trace}", "--admission", "opt"], 1, "field 'admit'"),
    (["sim", "run", "--trace", "{trace}", "--admission", "threshold", "--arrays", "{short}"],
     1, "has 3 rows but the trace has 5000"),
    (["sim", "run", "--trace", "{trace}", "--warmup-s", "1e9"], 1, "warm-up"),
    (["sim", "run", "--trace", "{trace}", "--cache-gb", "abc"], 2, "expected a number"),
    (["sim", "run", "--trace", "{trace}", "--admission", "rejectx", "--rejectx-factor", "-1"],
     2, "argument --rejectx-factor: must be >= 1e-06 x capacity"),
    (["sim", "run", "--trace", "{trace}", "--admission", "rejectx", "--rejectx-factor", "nan"],
     2, "--rejectx-factor"),
    (["sim", "run", "--trace", "{trace}", "--admission", "rejectx_blocks"], 2, "invalid choice"),
    (["sim", "run", "--trace", "{trace}", "--mat", "{missing}"], 1, "no such eviction policy"),
    (["sim", "run", "--trace", "{trace}", "--mat-k", "2"], 1, "--mat-k needs --mat"),
    (["sim", "run", "--trace", "{trace}", "--mat", "oracle", "--eviction", "fifo"], 1, "MAT"),
    (["sim", "run", "--trace", "{trace}", "--mat", "oracle", "--policy", "{short}"], 1,
     "short.parquet: refused"),
    (["sim", "run", "--trace", "{trace}", "--mat", "oracle", "--policy", "{missing}"], 1,
     "no such policy"),
    (["sim", "objects", "--trace", "{cp}", "--capacity", "4XB"], 1, "unknown capacity unit"),
    (["sim", "objects", "--trace", "{cp}", "--capacity", "0obj"], 1, "capacity must be > 0"),
    (["sim", "objects", "--trace", "{missing}", "--capacity", "4MiB"], 1, "no such file"),
    (["sim", "objects", "--trace", "{trace}", "--capacity", "4MiB"], 1, "CloudPhysics"),
])
def test_bad_input(trace, tmp_path, args, code, message):
    short = tmp_path / "short.parquet"
    pl.DataFrame({"score": [0.1, 0.2, 0.3]}).write_parquet(short)
    subst = {"{missing}": tmp_path / "nope.parquet", "{trace}": trace[0], "{short}": short,
             "{cp}": CLOUDPHYSICS}
    p = flashml(*[subst.get(a, a) for a in args])
    assert p.returncode == code, (p.stdout, p.stderr)
    assert message in p.stderr
    assert "Traceback" not in p.stderr
    if code == 1:
        assert len(p.stderr.strip().splitlines()) == 1  # one clear line


def test_help_texts():
    for args, needle in [(["sim", "--help"], "object-cache mode"),
                         (["sim", "run", "--help"], "--prefetch-when"),
                         (["sim", "objects", "--help"], "5000obj")]:
        p = flashml(*args)
        assert p.returncode == 0 and needle in p.stdout, p.stdout


def test_run_options_are_the_simulator_config_keys():
    """`sim run`'s options named as a simulator config key restate the key's default (None:
    the key's own applies, or the policy's) and choices (sim/src/core/config.rs), so that
    `--help` needs no simulator import: they agree."""
    import dataclasses

    from flashml.commands.sim import RUN_OPTIONS

    fields = {f.name: f for f in dataclasses.fields(SimConfig)}
    named = [o for o in RUN_OPTIONS.values() if o.name in fields]
    assert len(named) >= 15, [o.name for o in named]
    for o in named:
        f = fields[o.name]
        if o.default is not None:
            assert o.default == f.default, o.name
        assert o.choices == f.metadata["choices"], o.name


def test_cli_parser_loads_no_heavy_library():
    """`flashml --help` and every command's --help answer in a fraction of a second because
    building the parser loads none of the libraries the stages use (NumPy alone is about half
    a second; bench/bench_cli.py in `make bench` times it). A module that imports one at its
    top and is reached from a command's `register` fails this."""
    import sys

    code = ("import sys, flashml.cli as c; c.build_parser(); "
            "print(','.join(sorted(m for m in ('numpy', 'polars', 'pyarrow', 'pandas', "
            "'lightgbm', 'mlflow', 'optuna', 'pyspark', 'treelite', 'flashml_sim', "
            "'matplotlib', 'great_expectations') if m in sys.modules)))")
    # a cold interpreter: a warm one (tests/warm_python.py) has them all loaded at its start
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "", f"loaded while building the parser: {p.stdout.strip()}"
