"""MLCache in flash mode (flashml/systems/mlcache/flash_partition.py, `flashml mlcache run
--flash`): the monitor's page requests tied to the flash cache's accesses, the policies' quotas, the
same-write-rate bisection, and the job's bad input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from test_flash_partition import pages_of_shares

from flashml import cli
from flashml.simulation import FlashPartition, SimConfig, capacity_segments, simulate
from flashml.systems.mlcache.flash_partition import compare_flash, monitor_view, same_write_rate
from flashml.trace.generate import generate_trace
from flashml.trace.ingest import load_trace

SEG = 131072
GET, PUT = 2, 4


@pytest.fixture(scope="module")
def region1(tmp_path_factory: pytest.TempPathFactory) -> tuple[pl.DataFrame, SimConfig, Path]:
    """A small region1-like trace (4 namespaces, one of them PUT-only) and a flash cache of 300
    segments (small enough that namespaces compete), no warm-up."""
    path = tmp_path_factory.mktemp("r1") / "r1.trace"
    generate_trace("region1-like", 3, path, accesses=8000, progress=False)
    df, meta = load_trace(path, None)
    return df, SimConfig.for_trace(meta, capacity_segments=300, warmup_s=0.0), path


def tiny_table() -> pl.DataFrame:
    """Six accesses: GETs of 1, 2 and 3 segments of namespaces 7 and 9 with PUTs between
    (namespace 5 only writes)."""
    return pl.DataFrame({
        "time": [0.0, 1.0, 2.0, 3.0, 4.0, 5.0],
        "key": [10, 20, 10, 30, 20, 40],
        "offset": [0, SEG, 0, 0, SEG // 2, 0],
        "size": [SEG, 2 * SEG, SEG, SEG, 2 * SEG + 1, SEG],
        "op": [GET, PUT, GET, PUT, GET, GET],
        "namespace": [7, 5, 9, 5, 7, 9],
    }, schema_overrides={"key": pl.UInt64, "offset": pl.UInt64, "size": pl.UInt64,
                         "op": pl.UInt8, "namespace": pl.UInt32})


def test_monitor_view_maps_page_requests_to_access_rows() -> None:
    v = monitor_view(tiny_table(), "namespace", segment_bytes=SEG)
    # GET rows 0 (1 segment), 2 (1), 4 (offset SEG/2, 2 SEG + 1 bytes: segments 0..2), 5 (1)
    assert v.rows.tolist() == [0, 2, 4, 4, 4, 5]
    assert v.trace.names == ("5", "7", "9")  # every value of the column, PUT-only ones too
    assert v.trace.streams.tolist() == [1, 2, 1, 1, 1, 2]
    assert v.access_stream.tolist() == [1, 0, 2, 0, 1, 2]
    assert not v.trace.writes.any()
    # pages: (block, segment); key 10 seg 0 twice, key 20 segs 0..2
    k = v.trace.keys.tolist()
    assert k[0] == k[1] and len(set(k[2:5])) == 3 and k[5] not in k[:5]
    # intervals of 2 page requests start at page requests 0, 2, 4 -> accesses 0, 4, 4 (an
    # empty interval: access 4 holds page requests 2..4); the PUTs at 1 and 3 belong to the
    # interval in progress
    assert v.bounds(2).tolist() == [0, 4, 4]
    assert v.bounds(3).tolist() == [0, 4]
    assert v.bounds(1).tolist() == [0, 2, 4, 4, 4, 5]
    # a table that starts with PUTs still starts its first interval at access 0
    v2 = monitor_view(tiny_table()[1:], "namespace", segment_bytes=SEG)
    assert v2.rows.tolist() == [1, 3, 3, 3, 4] and v2.bounds(2).tolist() == [0, 3, 4]


def test_even_shares_give_pages_of_shares_quotas(region1) -> None:
    df, cfg, _ = region1
    res = compare_flash(df, cfg, ("shared", "even"), interval=500)
    cap = capacity_segments(cfg)
    k = len(res["streams"])
    want, _ = pages_of_shares([1.0 / k] * k, cap)
    q = res["policies"]["even"]["quotas"]
    assert q["min"] == want and q["max"] == want
    # and as the simulator reports them, interval by interval
    v = monitor_view(df, "namespace", segment_bytes=cfg.segment_bytes)
    b = v.bounds(500)
    r = simulate(df, cfg, partition=FlashPartition(v.access_stream, b, np.full((len(b), k),
                                                                             1.0 / k)))
    assert np.asarray(r.info["quotas"]).tolist() == [want] * len(b)
    assert res["policies"]["shared"]["quotas"] is None
    # the partition changes the cache: even differs from shared
    assert (res["policies"]["even"]["io_hit_ratio"]
            != res["policies"]["shared"]["io_hit_ratio"])


def test_one_namespace_holding_the_cache_starves_the_others(region1) -> None:
    df, cfg, _ = region1
    v = monitor_view(df, "namespace", segment_bytes=cfg.segment_bytes)
    k = v.n_streams
    b = v.bounds(500)
    gets = np.bincount(v.trace.streams, minlength=k)
    busy = [s for s in range(k) if gets[s] > 0]
    assert len(busy) >= 2
    for owner in busy[:2]:
        shares = np.zeros((len(b), k))
        shares[:, owner] = 1.0
        r = simulate(df, cfg, partition=FlashPartition(v.access_stream, b, shares))
        hits = np.asarray(r.info["stream_hits"])
        assert hits[owner] > 0
        assert all(hits[s] == 0 for s in range(k) if s != owner), hits
        assert np.asarray(r.info["quotas"])[:, owner].tolist() == [
            capacity_segments(cfg)] * len(b)


def test_same_write_rate_bisection(region1) -> None:
    df, cfg, _ = region1
    rates = [simulate(df, cfg.replace(admission="coinflip", coinflip_p=p)).metrics[
        "flash_write_rate_mbps"] for p in (0.1, 0.3, 0.5, 0.7, 0.9, 1.0)]
    assert all(a < b for a, b in zip(rates, rates[1:], strict=False)), rates  # grows with p
    full = simulate(df, cfg).metrics["flash_write_rate_mbps"]
    target = 0.4 * full
    res = compare_flash(df, cfg, ("shared", "even", "previous_optimal"), interval=500,
                        target_write_mbps=target)
    for p, r in res["same_write_rate"].items():
        assert r["reached"] and r["within"], (p, r)
        assert abs(r["achieved_write_mbps"] - target) <= 0.01 * target, (p, r)
        assert abs(r["flash_write_rate_mbps"] - target) <= 0.01 * target
        assert 0 < r["p"] < 1
    # the p found reproduces the rate
    p = res["same_write_rate"]["shared"]["p"]
    again = simulate(df, cfg.replace(admission="coinflip", coinflip_p=p)).metrics
    assert again["flash_write_rate_mbps"] == res["same_write_rate"]["shared"][
        "flash_write_rate_mbps"]
    # out of reach: admitting everything writes less than the target
    out = same_write_rate(lambda q: simulate(df, cfg.replace(admission="coinflip",
                                                             coinflip_p=q)), 2 * full)
    assert not out["reached"] and out["p"] == 1.0 and "unreachable" in out["note"]


def test_monitor_view_bad_stream_column() -> None:
    t = tiny_table()
    with pytest.raises(ValueError, match="field 'tenant': no such column"):
        monitor_view(t, "tenant")
    with pytest.raises(ValueError, match="field 'namespace': one value"):
        monitor_view(t.with_columns(pl.lit(3, pl.UInt32).alias("namespace")), "namespace")
    with pytest.raises(ValueError, match="no GETs"):
        monitor_view(t.filter(pl.col("op") == PUT).vstack(
            t.filter(pl.col("op") == PUT).with_columns(pl.lit(1, pl.UInt32).alias(
                "namespace"))), "namespace")


def test_mlcache_flash_job_bad_input(region1, monkeypatch: pytest.MonkeyPatch,
                                     tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    _, _, trace = region1
    monkeypatch.setenv("FLASHML_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    out = tmp_path / "run"
    small = ["--requests", "4000", "--train-mixes", "4", "--test-mixes", "1", "--max-iter",
             "40", "--folds", "2", "--out", str(out)]
    single = tmp_path / "single.trace"
    lines = Path(trace).read_text().splitlines()
    # every access of namespace 1 (the column's 7th field)
    single.write_text("\n".join(ln if ln.startswith("#") else " ".join(
        ln.split()[:6] + ["1"] + ln.split()[7:]) for ln in lines) + "\n")
    for args, fragments in (
        (["--flash"], ["--flash", "--trace"]),
        (["--flash-write-fraction", "0"], ["--flash-write-fraction"]),
        (["--trace", str(trace), "--flash", "--flash-write-fraction", "1.5"],
         ["--flash-write-fraction"]),
        (["--trace", str(trace), "--cache-gb", "10"], ["--cache-gb", "--flash"]),
        (["--trace", str(trace), "--flash", "--capacity", "300", "--cache-gb", "10"],
         ["--capacity", "--cache-gb"]),
        (["--trace", str(trace), "--flash", "--stream-column", "tenant"],
         ["r1.trace", "field 'tenant'"]),
        (["--trace", str(single), "--flash", "--stream-column", "namespace"],
         ["single.trace", "field 'namespace'", "one value"]),
    ):
        try:
            rc = cli.main(["mlcache", "run", *small, *args])
        except SystemExit as e:  # a value refused while parsing: argparse's usage error
            rc = e.code
        err = capsys.readouterr().err
        assert rc in (1, 2) and "Traceback" not in err, (args, err)
        assert all(f in err for f in fragments), (args, err)
        assert not (out / "summary.json").exists()
        assert not (out / "stages" / "train.json").exists()


def test_mlcache_flash_job_end_to_end(region1, tmp_path: Path) -> None:
    """`flashml mlcache run --trace --flash` as a user runs it: the flash table in the text,
    the summary's flash section at the same write rate, mlcache's quotas from the .so."""
    import json

    from conftest import run_cli

    _, cfg, trace = region1
    proc = run_cli("mlcache", "run", "--trace", trace, "--stream-column", "namespace",
                   "--flash", "--capacity", "300", "--warmup-s", "0", "--requests", "4000",
                   "--train-mixes", "4", "--test-mixes", "1", "--max-iter", "40", "--folds",
                   "2", "--out", tmp_path / "run",
                   env={"FLASHML_HOME": str(tmp_path / "state"), "MLFLOW_TRACKING_URI": ""})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "mlcache peak DT" in proc.stdout and "same rate" in proc.stdout
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    f = s["flash"]
    assert s["capacity"] == f["capacity_segments"] == 300  # network pages = flash segments
    shared_rate = f["policies"]["shared"]["flash_write_rate_mbps"]
    assert f["target_write_mbps"] == pytest.approx(0.5 * shared_rate)
    for p in ("shared", "even", "static_optimal", "previous_optimal", "mlcache"):
        q = f["same_write_rate"][p]
        assert q["within"] and abs(q["achieved_write_mbps"] - f["target_write_mbps"]) <= (
            0.01 * f["target_write_mbps"])
    h = f["headline"]
    assert h["mlcache_peak_dt_util"] == f["same_write_rate"]["mlcache"]["peak_dt_util"]
    # mlcache's admit-all run re-simulated from the shipped .so's shares
    from flashml.systems.mlcache.flash_partition import policy_shares

    df, meta = load_trace(trace, None)
    c = SimConfig.for_trace(meta, capacity_segments=300, warmup_s=0.0)
    v = monitor_view(df, "namespace", segment_bytes=c.segment_bytes)
    # the flash stage's interval: twice the segments by default (page requests)
    assert f["interval"] == 600 and s["flash"]["interval_from"] == "2 x 300 pages"
    shares, _ = policy_shares(v, 300, f["interval"], "mlcache",
                              bundle=tmp_path / "run" / "compiled")
    r = simulate(df, c, partition=FlashPartition(v.access_stream, v.bounds(f["interval"]),
                                                 shares))
    assert r.metrics["peak_dt_util"] == f["policies"]["mlcache"]["peak_dt_util"]
    assert r.metrics["flash_write_rate_mbps"] == f["policies"]["mlcache"][
        "flash_write_rate_mbps"]
