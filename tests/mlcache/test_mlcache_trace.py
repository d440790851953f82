"""`flashml mlcache run` on a user's trace with its default policy (previous_optimal compiled
into policy.so, no training): the trace judged alone (generated mixes only on request, and
apart), --cache-size and --interval-s beside --capacity and --interval, --bundle applying an
earlier run's policy (checked against the trace), and the headline against the best simple
rule."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from flashml import cli
from flashml.compiler.loader import PolicyLibrary, verify_bundle
from flashml.systems.mlcache import model
from flashml.systems.mlcache.multistream import generate_mix, write_mix
from flashml.systems.mlcache.partitioning import page_requests
from flashml.systems.mlcache.report import flash_headline, headline
from flashml.trace.ingest import load_trace

from conftest import run_cli


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("mlctrace")
    out = {}
    for name, streams, seed in (("four", 4, 7), ("two", 2, 3)):
        df, _ = generate_mix(streams, 30_000, seed)
        out[name] = write_mix(df, tmp / f"{name}.parquet")
    out["tmp"] = tmp
    return out


def _env(tmp: Path) -> dict[str, str]:
    return {"FLASHML_HOME": str(tmp / "state"), "MLFLOW_TRACKING_URI": ""}


@pytest.fixture(scope="module")
def trace_run(traces: dict[str, Path]) -> Path:
    """The default job on a 4-stream trace, sized in bytes and seconds."""
    tmp = traces["tmp"]
    proc = run_cli("mlcache", "run", "--trace", traces["four"], "--cache-size", "2MiB",
                   "--interval-s", "60", "--out", tmp / "run", env=_env(tmp))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "the best simple rule" in proc.stdout and "previous_optimal" in proc.stdout
    return tmp / "run"


def test_the_trace_is_judged_alone(trace_run: Path, traces: dict[str, Path]) -> None:
    """The summary's policies are the user's trace's own figures: no generated mix is
    averaged in (they were: six held-out mixes with the trace, whatever --test-mixes said)."""
    s = json.loads((trace_run / "summary.json").read_text())
    assert [j["name"] for j in s["judged"]] == ["four.parquet"]
    assert list(s["per_trace"]) == ["four.parquet"] and "mixes" not in s
    own = s["per_trace"]["four.parquet"]["policies"]
    for p, r in s["policies"].items():
        assert r["write_hit_ratio"] == own[p]["write_hit_ratio"], p


def test_sizes_in_bytes_and_intervals_in_seconds(trace_run: Path,
                                                 traces: dict[str, Path]) -> None:
    s = json.loads((trace_run / "summary.json").read_text())
    assert s["capacity"] == (2 << 20) // 8192 == 256  # the mix's block (page) is 8 KiB
    df, _ = load_trace(traces["four"], None)
    t = page_requests(df, "namespace")
    span = float(df["time"].max() - df["time"].min())
    assert s["interval"] == round(int(t.writes.sum()) * 60 / span) and s["interval_s"] == 60
    m = verify_bundle(trace_run / "compiled", need="partition")
    assert m["partition"]["rule"] == "previous_optimal"
    assert (m["partition"]["capacity"], m["partition"]["interval"]) == (256, s["interval"])


def test_the_shipped_rule_is_previous_optimal(trace_run: Path, traces: dict[str, Path]) -> None:
    """mlcache's shares come from the compiled rule and equal the Python rule's; on a cache
    whose pages are a multiple of the steps they are previous_optimal's split."""
    s = json.loads((trace_run / "summary.json").read_text())
    assert s["shipped"]["rule"] == "previous_optimal" and s["so_vs_python_max_abs"] == 0.0
    lib = PolicyLibrary(trace_run / "compiled" / "policy.so", need="partition")
    df, _ = load_trace(traces["four"], None)
    t = page_requests(df, "namespace")
    x, curves = model.trace_features(t, 260, 1000)
    so, status = lib.partition(x, 4)
    assert not status.any() and np.array_equal(so, model.rule_shares(x, 4))
    prev = model.previous_optimal_shares(t, 260, 1000, True, curves=curves)
    assert np.array_equal(model.schedule(so, 4), prev / prev.sum(axis=1, keepdims=True))


def test_headline_is_against_the_best_simple_rule(trace_run: Path) -> None:
    s = json.loads((trace_run / "summary.json").read_text())
    v, p = s["verdict"], s["policies"]
    best = max(("shared", "even"), key=lambda n: p[n]["write_hit_ratio"])
    assert v["rival"] == best and v["rival_value"] == p[best]["write_hit_ratio"]
    assert v["vs_rival"] == pytest.approx(p["mlcache"]["write_hit_ratio"] / v["rival_value"] - 1)
    assert s["headline"]["vs_best_simple_rule"] == pytest.approx(v["vs_rival"])


def test_headline_hand_examples() -> None:
    pol = {p: {"write_hit_ratio": v} for p, v in (
        ("shared", 0.30), ("even", 0.20), ("previous_optimal", 0.25), ("mlcache", 0.27))}
    h = headline(pol)
    assert h["rival"] == "shared" and not h["beats_rival"]
    assert h["vs_rival"] == pytest.approx(-0.1) and h["vs_previous_optimal"] == pytest.approx(0.08)
    same = {p: {"peak_dt_util": v, "within": True} for p, v in (
        ("shared", 0.40), ("even", 0.35), ("previous_optimal", 0.30), ("mlcache", 0.33))}
    f = flash_headline(same, 100.0, 0.5)
    assert f["rival"] == "even" and f["beats_rival"]
    assert f["mlcache_vs_rival_peak_dt"] == pytest.approx(0.33 / 0.35 - 1)
    assert f["mlcache_vs_shared_peak_dt"] == pytest.approx(0.33 / 0.40 - 1)


def test_generated_mixes_only_on_request_and_apart(trace_run: Path,
                                                    traces: dict[str, Path]) -> None:
    """--test-mixes with --trace judges generated mixes too, reported under `mixes`; the
    trace's figures are unchanged. --bundle applies the first run's policy: no compile."""
    tmp = traces["tmp"]
    proc = run_cli("mlcache", "run", "--trace", traces["four"], "--capacity", "256",
                   "--interval-s", "60", "--test-mixes", "1", "--requests", "20000",
                   "--bundle", trace_run / "compiled", "--out", tmp / "run-mixes",
                   env=_env(tmp))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "apart from the trace" in proc.stdout
    s = json.loads((tmp / "run-mixes" / "summary.json").read_text())
    first = json.loads((trace_run / "summary.json").read_text())
    assert s["policies"] == first["policies"]
    assert [j["name"] for j in s["mixes"]["judged"]] == ["mix4-seed10000"]
    assert set(s["mixes"]["policies"]) == set(s["policies"])
    assert s["compiled"] == str((trace_run / "compiled").resolve())
    assert not (tmp / "run-mixes" / "compiled").exists()
    assert s["shipped"]["bundle"] == str(trace_run / "compiled")


def test_bad_sizes_intervals_and_bundles(trace_run: Path, traces: dict[str, Path],
                                         monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture) -> None:
    tmp = traces["tmp"]
    monkeypatch.setenv("FLASHML_HOME", str(tmp / "state-bad"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    out = tmp / "bad"
    bundle = str(trace_run / "compiled")
    for args, fragments in (
        (["--capacity", "100", "--cache-size", "1MiB"], ["--capacity", "--cache-size"]),
        (["--interval", "100", "--interval-s", "5"], ["--interval", "--interval-s"]),
        (["--cache-size", "100obj"], ["--cache-size", "bytes"]),
        (["--cache-size", "4KiB"], ["--cache-size", "less than one page"]),
        (["--interval-s", "3000"], ["--interval-s", "fewer than two intervals"]),
        (["--bundle", str(tmp / "nowhere")], ["--bundle", "not a folder"]),
        (["--bundle", bundle, "--policy", "network"], ["--bundle", "--policy"]),
        (["--bundle", bundle, "--capacity", "300"],
         ["made for another cache", "capacity: the bundle's 256 pages, this run's 300"]),
        (["--bundle", bundle, "--reads-and-writes"], ["monitor: the bundle's writes only"]),
    ):
        try:
            rc = cli.main(["mlcache", "run", "--trace", str(traces["four"]), "--out", str(out),
                           *args])
        except SystemExit as e:  # argparse: a value out of the option's range
            rc = e.code
        err = capsys.readouterr().err
        assert rc in (1, 2) and "Traceback" not in err, (args, err)
        assert all(f in err for f in fragments), (args, err)
        assert not (out / "summary.json").exists()
    rc = cli.main(["mlcache", "run", "--trace", str(traces["two"]), "--bundle", bundle,
                   "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 1 and "streams: the bundle's 4, the trace's 2 (field 'namespace')" in err, err


def test_default_interval_is_twice_the_pages() -> None:
    """Without --interval or --interval-s the interval is twice the cache's pages (at most half
    the judged trace's requests): at 1,000 requests a 16,384-page cache's growing partitions
    could not fill (previous_optimal 13% below one shared LRU on the MSR-like trace)."""
    from flashml.systems.mlcache.job import _interval
    from flashml.systems.mlcache.settings import MlcacheSettings

    s = MlcacheSettings()
    assert _interval(None, s, 376_783, 3600.0, 16_384, "t") == (32_768, "2 x 16384 pages")
    assert _interval(None, s, 50_000, 3600.0, 16_384, "t")[0] == 25_000  # half the trace
    assert _interval(None, s.replace(interval=1000), 50_000, 3600.0, 16_384, "t") == (
        1000, "--interval")
    assert _interval(None, s.replace(interval_s=36.0), 50_000, 3600.0, 16_384, "t") == (
        500, "--interval-s 36")
