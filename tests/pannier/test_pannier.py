"""Pannier: block mode from Python, the block presets, `flashml pannier run`.

The simulator's hand examples (S2LRU* promotion, survival queue, aging, copy-forward, TIRE's
steps, the FTL) are Rust tests in sim/src/pannier/; here the Python side
is checked against independent references: a slow obvious LRU, libCacheSim's LRU, and the
paper's orderings.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from flashml.config import OP_CODES
from flashml.systems.pannier import blockcache
from flashml.systems.pannier.blockcache import POLICIES, preset_requests
from flashml.systems.pannier.blockgen import (
    BLOCK_BYTES,
    BLOCK_PRESETS,
    generate_block_requests,
    get_block_preset,
    write_block_msr,
)
from flashml.trace.blocks import block_requests, from_arrays


def simulate(req, policy, cache, **knobs):
    """The flash cache alone (no RAM cache in front: the references have none) unless a test
    gives ram_pct; test_the_declared_ram_cache_is_the_default checks the default itself."""
    return blockcache.simulate(req, policy, cache, **{"ram_pct": 0.0, **knobs})

MiB = 1 << 20


def _slow_lru(req, cache_blocks: int) -> tuple[int, int]:
    """Request-level read hits and page-level read hits of a per-block LRU that caches every
    read miss and every write (the simulator's lru without TIRE), the obvious way."""
    cache: OrderedDict[int, None] = OrderedDict()
    req_hits = page_hits = 0
    for p0, n, w in zip(req.pages.tolist(), req.lens.tolist(), req.writes.tolist(), strict=True):
        allhit = True
        for p in range(p0, p0 + n):
            hit = p in cache
            allhit &= hit
            if hit:
                cache.move_to_end(p)
                page_hits += not w
            else:
                cache[p] = None
                if len(cache) > cache_blocks:
                    cache.popitem(last=False)
        req_hits += allhit and not w
    return req_hits, page_hits


def _small(preset: str = "src11-like", n: int = 30_000, seed: int = 1, **kw):
    return preset_requests(get_block_preset(preset, **kw), seed, n)


def test_lru_matches_slow_reference():
    req = _small()
    cache = 64 * MiB
    r = simulate(req, "lru", cache, container_bytes=1 * MiB)
    hits, page_hits = _slow_lru(req, cache // BLOCK_BYTES)
    assert r["read_hits"] == hits
    assert r["page_read_hits"] == page_hits
    assert r["reads"] == int((~req.writes).sum())


def test_lru_matches_libcachesim():
    lcs = pytest.importorskip("libcachesim")
    del lcs
    from flashml.systems.mat.object_baselines import run_baselines

    req = _small("map-like", 20_000, zipf=0.8)
    req = req.subset(~req.writes)
    # the block stream, spelled out independently of BlockRequests.block_keys
    keys = np.concatenate([np.arange(p, p + n, dtype=np.uint64)
                           for p, n in zip(req.pages.tolist(), req.lens.tolist(), strict=True)])
    assert np.array_equal(keys, req.block_keys())
    blocks = 2048
    ours = simulate(req, "lru", blocks * BLOCK_BYTES, container_bytes=1 * MiB)
    theirs = run_baselines(keys, np.ones(len(keys), dtype=np.int64), blocks, unit="objects",
                           policies=("lru",), isolate=False)[blocks]["lru"]
    assert theirs["requests"] == ours["page_reads"]
    assert theirs["hits"] == ours["page_read_hits"]


def test_block_requests_from_canonical_table():
    df = pl.DataFrame({
        "time": [0.0, 1.0, 2.0], "key": [7, 7, 9], "offset": [0, 6000, 8192],
        "size": [4096, 4000, 1], "op": [OP_CODES["GET_PERM"], OP_CODES["PUT_PERM"],
                                        OP_CODES["GET_PERM"]],
        "namespace": [0, 0, 0], "user": [0, 0, 0], "src_line": [1, 2, 3]})
    req = block_requests(df, block_bytes=16384, page_bytes=4096)
    # 4 pages per key; key 7 -> 0..3, key 9 -> 4..7.
    assert req.pages.tolist() == [0, 1, 6]
    assert req.lens.tolist() == [1, 2, 1]  # bytes 6000..9999 span pages 1 and 2
    assert req.writes.tolist() == [False, True, False]
    assert req.working_set_bytes() == 4 * 4096
    bad = df.with_columns(pl.Series("offset", [0, 16000, 0]))
    with pytest.raises(ValueError, match="row 2: field 'offset'"):
        block_requests(bad, block_bytes=16384)


def test_presets_roundtrip_as_msr(tmp_path: Path):
    from flashml.trace.ingest import load_trace

    p = get_block_preset("prn0-like")
    info = write_block_msr(p, 3, tmp_path / "prn0.csv", requests=5000)
    df, meta = load_trace(tmp_path / "prn0.csv", "msr")
    req = block_requests(df, meta.block_bytes)
    raw = generate_block_requests(p, 3, 5000)
    # IOs crossing an 8 MiB boundary become two rows: the blocks are the same
    assert req.blocks == int(raw["blocks"].sum()) == info["blocks"]
    assert len(req) >= 5000
    assert abs(req.times[0] - raw["time"][0]) < 1e-6
    assert info["reads"] == int((~raw["write"]).sum())
    # the preset's shape: the read share, and IO sizes around io_kib
    assert abs((~raw["write"]).mean() - p.read_share) < 0.02
    assert 0.6 * p.io_kib < raw["blocks"].mean() * 4 < 1.2 * p.io_kib


def test_presets_deterministic_and_validated():
    a = generate_block_requests(BLOCK_PRESETS["web-like"], 5, 2000)
    b = generate_block_requests(BLOCK_PRESETS["web-like"], 5, 2000)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not a["write"].any()
    from flashml.errors import UserError

    with pytest.raises(UserError, match="unknown block preset"):
        get_block_preset("nope")
    with pytest.raises(UserError, match="--zipf"):
        get_block_preset("web-like", zipf=3.0)


def _below_ram(req, ram_blocks: int):
    """The obvious way: the block accesses that reach the flash cache under an LRU RAM cache of
    `ram_blocks` blocks in front (every accessed block enters it; it serves the reads of the
    blocks it holds), one request per block, and the count of reads it served."""
    ram: OrderedDict[int, None] = OrderedDict()
    times, pages, writes, served = [], [], [], 0
    for t, p0, n, w in zip(req.times.tolist(), req.pages.tolist(), req.lens.tolist(),
                           req.writes.tolist(), strict=True):
        for p in range(p0, p0 + n):
            if p in ram:
                ram.move_to_end(p)
                if not w:
                    served += 1
                    continue
            else:
                ram[p] = None
                if len(ram) > ram_blocks:
                    ram.popitem(last=False)
            times.append(t)
            pages.append(p)
            writes.append(w)
    return from_arrays(times, pages, np.ones(len(pages)), writes, req.page_bytes), served


@pytest.mark.parametrize("policy", ["lru", "belady", "lru_plus", "pannier"])
def test_ram_cache_in_front_is_a_filter_of_the_stream(policy: str):
    """With the paper's RAM cache in front (5% of the flash cache, LRU), the flash cache sees
    exactly the accesses the RAM does not serve: the same flash reads, writes, erasures and
    copy-forwards as the flash cache alone on that filtered stream; the RAM's read hits are
    counted."""
    req = _small("src11-like", 20_000)
    cache = 16 * MiB
    ram = simulate(req, policy, cache, ram_pct=5.0)
    below, served = _below_ram(req, int(cache * 0.05) // BLOCK_BYTES)
    alone = simulate(below, policy, cache)
    assert served > 1000 and ram["ram_read_hits"] == served
    for k in ("flash_read_bytes", "host_write_bytes", "internal_write_bytes", "erasures",
              "copied_forward_pages", "page_read_hits", "inserted_pages"):
        assert ram[k] == alone[k], k
    assert ram["reads"] == int((~req.writes).sum())
    with pytest.raises(ValueError, match="RAM cache size"):
        simulate(req, policy, cache, ram_pct=-1.0)


def test_ram_pass_shared_between_runs_changes_nothing():
    """blockcache.simulate computes the RAM cache's pass once per requests, cache size and
    ram_pct and gives it to each policy's run: every figure equals a run that computes its
    own (the simulator called directly), across policies and a change of size; a pass of the
    wrong length (another trace or RAM size) is refused."""
    import flashml_sim

    req = _small("src11-like", 20_000)
    for cache in (16 * MiB, 8 * MiB, 16 * MiB):
        for policy in ("lru", "belady", "ripq_plus", "pannier"):
            shared = simulate(req, policy, cache, ram_pct=5.0)
            own = flashml_sim.simulate_blocks(req.times, req.pages, req.lens, req.writes, policy,
                                              cache, page_bytes=req.page_bytes, ram_pct=5.0)
            assert own["ram_read_hits"] > 0
            for k, v in own.items():
                if k in ("wall_s", "requests_per_s", "blocks_per_s"):
                    continue
                if isinstance(v, np.ndarray):
                    np.testing.assert_array_equal(shared[k], v, err_msg=k)
                else:
                    assert shared[k] == v or (v != v and shared[k] != shared[k]), k
            assert list(req._ram) == [(cache, 5.0)]
    mask, secs = req._ram[(16 * MiB, 5.0)]
    assert mask.dtype == bool and len(mask) == req.blocks and secs > 0
    with pytest.raises(ValueError, match="computed for another trace or RAM size"):
        flashml_sim.simulate_blocks(req.times, req.pages, req.lens, req.writes, "lru",
                                    16 * MiB, page_bytes=req.page_bytes, ram_pct=5.0,
                                    ram_served=mask[:-1])
    # without a RAM cache the pass is empty, and a non-empty one is refused
    with pytest.raises(ValueError, match="computed for another trace or RAM size"):
        flashml_sim.simulate_blocks(req.times, req.pages, req.lens, req.writes, "lru",
                                    16 * MiB, page_bytes=req.page_bytes, ram_pct=0.0,
                                    ram_served=mask)
    # the pass checks only its own knobs: blocks larger than the default container, with
    # containers to match, run with a RAM cache as without one
    big = preset_requests(BLOCK_PRESETS["src11-like"], 0, 3000, page_bytes=4 * MiB)
    r = simulate(big, "lru_plus", 256 * MiB, ram_pct=5.0, container_bytes=8 * MiB)
    assert r["ram_read_hits"] > 0
    with pytest.raises(ValueError, match=r"RAM cache size must be at most 100 % of the flash "
                                         r"cache, got 101"):
        flashml_sim.block_ram_served(req.times, req.pages, req.lens, req.writes, 16 * MiB,
                                     page_bytes=req.page_bytes, ram_pct=101.0)


def test_paper_orderings_on_one_trace():
    """Fig. 6 / 13 shapes on a small web trace (Zipf 0.5, 10% of the working set): Pannier's
    read-hit ratio above LRU+'s; Belady best; per-block LRU has a lower FUE than LRU+ and,
    on small random IOs, erases at least 2x as much (the FTL's copy-forward; paper 2.8x)."""
    req = _small("web-like", 40_000, zipf=0.5)
    cache = max(int(req.working_set_bytes() * 0.10), 8 * MiB)
    r = {p: simulate(req, p, cache) for p in POLICIES}
    assert r["pannier"]["read_hit_ratio"] > r["lru_plus"]["read_hit_ratio"]
    assert r["belady"]["read_hit_ratio"] >= max(r[p]["read_hit_ratio"] for p in POLICIES)
    assert r["lru"]["fue"] < r["lru_plus"]["fue"]
    for p in ("lru_plus", "s2lru_plus"):
        assert r[p]["write_amplification"] == 1.0  # containers are erase-aligned: no GC
    # RIPQ+ copies forward only what was hit (virtual references), never more than it read
    assert 0 < r["ripq_plus"]["copied_forward_pages"] <= r["ripq_plus"]["page_read_hits"]
    # Pannier's only internal writes are its copy-forwards (whole containers of them).
    pan = r["pannier"]
    assert pan["internal_write_bytes"] <= pan["copied_forward_pages"] * 4096
    assert pan["internal_write_bytes"] % (2 * MiB) == 0
    assert r["lru"]["write_amplification"] > 1.2
    # Small random IOs with overwrites (src11-like): the FTL's copies double the erasures.
    req = _small("src11-like", 40_000)
    cache = max(int(req.working_set_bytes() * 0.10), 8 * MiB)
    lru, plus = simulate(req, "lru", cache), simulate(req, "lru_plus", cache)
    assert lru["erasures"] >= 2 * plus["erasures"]


def test_tire_holds_the_quota():
    """Fig. 12: TIRE at half of Pannier's own erasure rate: no quantum beyond K x quota, the
    rate over the run near the target, the read-hit ratio between none-admitted and
    all-admitted."""
    req = _small("src11-like", 60_000)
    cache = 32 * MiB
    free = simulate(req, "pannier", cache)
    target = free["epbpd"] / 2
    t = simulate(req, "pannier", cache, lifespan_epbpd=target)
    assert t["quanta_erasures"].max() <= 4 * t["quota"] + 1
    assert t["epbpd"] <= target * 1.15
    assert t["final_credit"] > -4 * t["quota"]
    assert 0 < t["read_hit_ratio"] < free["read_hit_ratio"]
    assert t["rejected_pages"] > 0


def test_bad_knobs_are_clear():
    req = _small(n=2000)
    with pytest.raises(ValueError, match="smaller than a block"):
        simulate(req, "pannier", 64 * MiB, container_bytes=1024)
    with pytest.raises(ValueError, match="lifespan target"):
        simulate(req, "pannier", 64 * MiB, lifespan_epbpd=0.0)
    with pytest.raises(ValueError, match="fewer than 2 containers"):
        simulate(req, "pannier", 3 * MiB)
    with pytest.raises(ValueError, match="unknown block-mode policy"):
        simulate(req, "arc", 64 * MiB)


def _run(tmp_path: Path, *args: object) -> None:
    """`flashml ARGS` as a user runs it: a fresh interpreter with its own state."""
    from conftest import run_cli

    proc = run_cli(*args, env={"FLASHML_HOME": str(tmp_path / "state"),
                               "MLFLOW_TRACKING_URI": ""})
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_pannier_run_end_to_end(tmp_path: Path):
    out = tmp_path / "run"
    _run(tmp_path, "pannier", "run", "--presets", "web-like,src11-like", "--requests", "20000",
         "--cache-size", "10%", "-o", out)
    s = json.loads((out / "summary.json").read_text())
    names = {"lru", "s2lru", "mq", "belady", "lru_plus", "s2lru_plus", "ripq_plus", "pannier",
             "pannier_tire", "ripq_plus_tire"}
    assert names <= set(s["policies"])
    for m in s["policies"].values():
        assert {"read_hit_ratio", "fue", "fue_with_internal_reads", "erasures",
                "flash_write_bytes", "dwpd"} <= set(m)
    assert len(s["per_run"]) == 2
    # RIPQ+ is one of the rivals the summary judges Pannier against, and the headline's rival
    # is the strongest of them
    assert s["best_rival"] in ("lru_plus", "mq", "ripq_plus")
    assert s["pannier_vs_best_rival"] == s[f"pannier_vs_{s['best_rival']}"]
    assert {v["best_rival"] for v in s["versus_rivals"]} <= {"lru_plus", "mq", "ripq_plus"}
    # the tuned knobs are judged only on the half the tuning did not see, not in `policies`
    assert "pannier_tuned" not in s["policies"]
    for r in s["per_run"]:
        tuned = s["tuned"][r["trace"]]
        total = s["traces"][r["trace"]]["requests"]
        assert r["holdout_from"] == tuned["tuning_requests"] > 0
        assert r["holdout_from"] + r["holdout_requests"] == total
        assert {"pannier_tuned", "pannier_tire", "ripq_plus_tire"} <= set(r["holdout"])
        # FUE without the RAM cache in front: the same runs, no RAM hits
        assert all(m["ram_read_hits"] == 0 for m in r["no_ram"].values())
        assert r["policies"]["pannier"]["ram_read_hits"] > 0
    assert "pannier_tuned" in s["holdout"]["policies"]
    assert "not see" in s["holdout"]["judged_on"] or "saw only" in s["holdout"]["judged_on"]
    assert set(s["fue_without_ram"]["pannier_vs_lru_plus"]) >= {"fue_gain", "read_hit_gain"}
    # TIRE holds Pannier's quanta within K x quota (+1: an admitted container's seal evicts);
    # RIPQ+'s cascades of copy-forward through its 8 open containers may overshoot a little
    assert all(r["within_slack"] for r in s["tire"] if r["policy"] == "pannier_tire")
    for p in s["plots"]:
        assert Path(p).stat().st_size > 10_000
    # MLflow: headline columns, tag, description; the tuned knobs-only bundle as a logged
    # model with a signature and the run's final metrics, registered as flashml-pannier
    from mlflow_checks import check_system_in_mlflow

    check_system_in_mlflow(tmp_path / "state", "pannier", s)
    assert set(s["headline"]) >= {"read_hit_ratio", "read_hit_gain", "fue_gain",
                                  "rival_read_hit_gain"}
    assert s["headline"]["read_hit_ratio"] == pytest.approx(
        s["holdout"]["policies"]["pannier_tuned"]["read_hit_ratio"])


def test_pannier_run_bad_input(tmp_path: Path, capsys):
    from flashml.cli import main

    for args, msg in ((["--cache-size", "0%"], "percentage must be in"),
                      (["--container-size", "1KiB"], "smaller than a block"),
                      (["--lifespan-epbpd", "0"], "lifespan-epbpd: must be > 0 erasures"),
                      (["--ram-pct", "101"], "--ram-pct: must be at most 100 %"),
                      (["--page-bytes", "0"], "--page-bytes: must be >= 512 bytes"),
                      (["--presets", "nope"], "unknown 'nope'")):
        try:
            rc = main(["pannier", "run", *args, "-o", str(tmp_path / "r")])
        except SystemExit as e:  # argparse: a value out of the option's range
            rc = e.code
        assert rc != 0
        assert msg in capsys.readouterr().err
        assert not (tmp_path / "r" / "summary.json").exists()


def test_pipeline_run_system_pannier_on_a_users_trace(tmp_path: Path):
    """`flashml pipeline run --system pannier --trace F --format msr`: the Pannier job with its
    defaults (three sizes, tuning, TIRE) on the given trace, from the main command."""
    write_block_msr(get_block_preset("web-like", overwrites=0.3), 2, tmp_path / "web.csv",
                    requests=15_000)
    out = tmp_path / "run"
    _run(tmp_path, "pipeline", "run", "--system", "pannier", "--trace", tmp_path / "web.csv",
         "--format", "msr", "-o", out)
    s = json.loads((out / "summary.json").read_text())
    assert [r["size"] for r in s["per_run"]] == ["2.5%", "5%", "10%"]
    assert "pannier_tuned" in s["holdout"]["policies"]
    manifest = json.loads((out / "compiled" / "web_csv" / "manifest.json").read_text())
    assert manifest["system"] == "pannier" and manifest["capabilities"] == []
    assert manifest["knobs"]["container_bytes"] % manifest["knobs"]["erase_bytes"] == 0


def _fake_run(trace: str, rhr: dict[str, float]) -> dict:
    pol = {p: {"read_hit_ratio": v, "fue": 0.3, "fue_with_internal_reads": 0.4}
           for p, v in rhr.items()}
    return {"trace": trace, "size": "5%", "policies": pol}


def test_summary_judges_pannier_against_the_strongest_simple_rival():
    """RIPQ+ above Pannier on a run: the summary names it as the strongest rival (not LRU+ or
    MQ alone), the gain against it is negative and the run is listed where Pannier is not at
    or above its best rival."""
    from flashml.systems.pannier.report import _gains, _versus, best_rival

    runs = [_fake_run("web", {"pannier": 0.30, "lru_plus": 0.25, "mq": 0.33, "ripq_plus": 0.37}),
            _fake_run("src11", {"pannier": 0.42, "lru_plus": 0.35, "mq": 0.41,
                                "ripq_plus": 0.36})]
    assert best_rival(runs) == "mq"  # means: mq 0.37, ripq_plus 0.365, lru_plus 0.30
    runs[1]["policies"]["ripq_plus"]["read_hit_ratio"] = 0.40
    assert best_rival(runs) == "ripq_plus"
    g = _gains(runs, "pannier", "ripq_plus")
    assert g["runs_at_or_above"] == 1 and g["read_hit_gain"] < 0
    assert g["read_hit_gain_min"] == pytest.approx(0.30 / 0.37 - 1)
    v = _versus(runs)
    assert [(x["trace"], x["best_rival"], x["pannier_at_or_above"]) for x in v] == [
        ("web", "ripq_plus", False), ("src11", "mq", True)]


def test_fue_with_internal_reads_by_hand():
    """Copy-forward reads every block it writes again: 10 client flash reads + 5 internal
    writes over 30 written = 0.5 (plain FUE 10/30)."""
    from flashml.systems.pannier.blockcache import fue_with_internal_reads

    r = {"flash_read_bytes": 10, "internal_write_bytes": 5, "flash_write_bytes": 30}
    assert fue_with_internal_reads(r) == 0.5
    assert fue_with_internal_reads({**r, "flash_write_bytes": 0}) == 0.0


def test_holdout_split_leaves_each_side_a_request():
    """The tuning window and the held-out half split the trace; neither is ever empty (an
    empty side would make the simulator refuse the run)."""
    from flashml.systems.pannier.job import _holdout_start

    def req(n: int):
        return from_arrays(np.arange(n, dtype=float), np.arange(n), np.ones(n), np.zeros(n))

    assert [_holdout_start(req(n)) for n in (1, 2, 3, 1000)] == [0, 1, 1, 500]


def test_the_declared_ram_cache_is_the_default():
    """Without ram_pct the simulator's Python face puts settings.toml's RAM cache (the
    paper's 5% LRU) in front, as `flashml pannier run` does."""
    from flashml.systems.pannier.settings import KNOBS, PannierSettings

    req = preset_requests(get_block_preset("prn0-like"), 1, 20_000)
    cache = 64 * MiB
    assert KNOBS["ram_pct"].default == PannierSettings().ram_pct == 5.0
    default = blockcache.simulate(req, "lru_plus", cache)
    given = blockcache.simulate(req, "lru_plus", cache, ram_pct=5.0)
    assert (default["page_read_hits"], default["erasures"]) \
        == (given["page_read_hits"], given["erasures"])
    assert default["page_read_hits"] != simulate(req, "lru_plus", cache)["page_read_hits"]
