"""The runtime engine's eviction slot (runtime/src/engine/policy_slots.h): `flashrt replay
--eviction mat` (MAT's Algorithm 1 over the block LRU tail, the bundle's eviction capability,
Baleen's admission slot beside it) makes the simulator's decisions (`flashml sim run --mat`,
sim/src/compose/flash_mat.rs) on the same trace, with a hand-written and a trained LightGBM eviction
model: hits, evicted segments, decisions, predictions, re-insertions and the final threshold
T, all equal; its bytes are verified; a bundle without
the capability is refused before any device is touched.

Where the two models coincide, and why only there: the simulator's flash cache evicts one
segment at a time and refreshes a missed block after inserting its segments, keeping the
block's cached segments outside the request at their old place meanwhile (BCacheSim's deferred
refresh). The engine evicts whole regions and refreshes a missed block when the miss starts
(and, for MAT, again after inserting). With regions of one segment, and GETs that each cover
all the cached segments of their block (every block read with one fixed range), neither
difference can show, and the decisions are equal access for access. On other traces the
runtime still serves every byte right (checked below); its decisions are then the engine's."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from runtime_support import (
    BUILD,
    FLASHRT,
    SEG,
    build_runtime,
    evict_bundle,
    fixed_range_trace,
    make_bundle,
)

from conftest import REPO, python_argv


def trained_bundle(directory: Path, trace: Path, capacity: int) -> Path:
    """MAT's model as its job trains it, small: LightGBM on the tail candidates of the
    simulator's flash LRU replay of the trace (labelled by the next GET), compiled by
    flashml.compiler; a fast-moving T (delta 0.05) so that candidates are both kept and
    evicted. Every one of the 44 features then counts in the decisions."""
    import lightgbm as lgb

    from flashml.compiler.build import compile_policy
    from flashml.compiler.bundle import save_evict_model
    from flashml.features import eviction
    from flashml.simulation import SimConfig
    from flashml.systems.mat.model import label_samples
    from flashml.systems.mat.simulation import simulate_mat_flash
    from flashml.trace.ingest import load_trace

    df, meta = load_trace(trace, "tectonic")
    cfg = SimConfig(capacity_segments=capacity, admission="admitall", warmup_s=0.0,
                    sample_ratio=meta.sample_ratio, block_bytes=meta.block_bytes)
    r = simulate_mat_flash(df, cfg, predictor="none", collect_samples=True,
                           mat={"memory_window": 4096})
    rows = label_samples(r.samples, end=df.height, horizon=1000)
    booster = lgb.train({"objective": "regression", "num_leaves": 16, "verbose": -1, "seed": 0,
                         "deterministic": True, "num_threads": 2},
                        lgb.Dataset(rows.features, rows.label,
                                    feature_name=list(eviction.contract().names)),
                        num_boost_round=20)
    save_evict_model(directory / "models", booster, k=2.0, max_candidates=10, delta=0.05,
                     initial_threshold=100.0, memory_window=4096)
    compile_policy(directory / "bundle", model_dir=directory / "models", log_to_mlflow=False)
    return directory / "bundle"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    build_runtime()
    d = tmp_path_factory.mktemp("engine")
    trace = fixed_range_trace(d / "fixed.trace")
    backing = d / "backing.img"
    p = subprocess.run([str(FLASHRT), "prepare-backing", "--backing", str(backing), "--trace",
                        str(trace)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return {"dir": d, "trace": trace, "backing": backing, "evict": evict_bundle(d / "evict"),
            "trained": trained_bundle(d / "trained", trace, 201)}


def replay(env, *extra: object, trace: Path | None = None, backing: Path | None = None,
           flash: Path | None = None) -> subprocess.CompletedProcess[str]:
    flash = flash or env["dir"] / "flash.img"
    flash.unlink(missing_ok=True)
    try:
        return subprocess.run(
            [str(FLASHRT), "replay", "--trace", str(trace or env["trace"]), "--flash", str(flash),
             "--backing", str(backing or env["backing"]), "--warmup-s", "0", "--direct", "off",
             "--json", *map(str, extra)], capture_output=True, text=True, timeout=300)
    finally:
        flash.unlink(missing_ok=True)


def sim(env, *args: object) -> dict:
    p = subprocess.run([*python_argv(), "-m", "flashml.cli", "sim", "run", "--trace",
                        str(env["trace"]), "--warmup-s", "0", "--json", *map(str, args)],
                       capture_output=True, text=True, cwd=REPO)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


@pytest.mark.parametrize("regions", [60, 200])
@pytest.mark.parametrize("bundle", ["evict", "trained"])
def test_mat_eviction_makes_the_simulators_decisions(env, regions, bundle):
    """Baleen's admission slot (admit-all here) + MAT in the eviction slot vs the simulator's
    flash_mat composition, with the hand-written .so and with a trained LightGBM model: every
    count equal, T bit for bit. The runtime's regions of one segment hold `regions` segments
    after an insertion; the simulator's capacity C holds C - 1 (the artifact's rule), hence
    C = regions + 1."""
    p = replay(env, "--policy", "builtin:admitall", "--eviction", "mat", "--eviction-bundle",
               env[bundle], "--region-bytes", "128KiB", "--flash-bytes", regions * SEG)
    assert p.returncode == 0, p.stderr
    rt = json.loads(p.stdout)
    s = sim(env, "--capacity-segments", regions + 1, "--admission", "admitall",
            "--mat", env[bundle])
    assert rt["integrity_errors"] == 0 and rt["verified_bytes"] > 0
    assert rt["eviction"] == "mat" and rt["capacity_segments"] == regions
    # T both keeps and evicts candidates
    assert rt["eviction_decisions"] > 100 and rt["eviction_reinsertions"] > 0
    pairs = {
        "io_hit_ratio": "io_hit_ratio", "byte_hit_ratio": "byte_hit_ratio",
        "segment_hit_ratio": "segment_hit_ratio", "backend_ios": "backend_ios",
        "backend_bytes": "backend_bytes", "admitted_segments": "admitted_segments",
        "evicted_segments": "mat_evicted_segments", "eviction_decisions": "mat_decisions",
        "eviction_predictions": "mat_predictions", "eviction_reinsertions": "mat_reinsertions",
        "eviction_threshold": "final_threshold", "accesses": "accesses",
    }
    got = {k: rt[k] for k in pairs}
    want = {k: s[v] for k, v in pairs.items()}
    assert got == want
    # and MAT chose differently from LRU: the comparison is not LRU against LRU
    lru = sim(env, "--capacity-segments", regions + 1, "--admission", "admitall")
    assert lru["io_hit_ratio"] != rt["io_hit_ratio"]


MAT_PAIRS = {
    "io_hit_ratio": "io_hit_ratio", "byte_hit_ratio": "byte_hit_ratio",
    "segment_hit_ratio": "segment_hit_ratio", "backend_ios": "backend_ios",
    "backend_bytes": "backend_bytes", "admitted_segments": "admitted_segments",
    "prefetched_segments": "prefetched_segments",
    "evicted_segments": "mat_evicted_segments", "eviction_decisions": "mat_decisions",
    "eviction_predictions": "mat_predictions", "eviction_reinsertions": "mat_reinsertions",
    "eviction_threshold": "final_threshold", "accesses": "accesses",
}


@pytest.mark.parametrize("bundle", ["evict", "trained"])
def test_baleen_bundle_with_mat_makes_the_simulators_decisions(env, tmp_path, bundle):
    """Baleen + MAT: `--admission bundle --eviction mat` (a bundle's admission in one slot,
    another's eviction in the other) against `flashml sim run --policy DIR --mat DIR`
    (so_policy::simulate_mat: the bundle asked on each GET miss with the online features, as
    `sim run --policy`, beside flash_mat). With an admission-only bundle (count_admit.so:
    admit a block seen earlier this hour) every figure is equal, T bit for bit; the bundle
    refuses some misses, so this is not admit-all again."""
    baleen = make_bundle(tmp_path / "baleen", BUILD / "policies" / "count_admit.so")
    p = replay(env, "--admission", "bundle", "--policy", baleen, "--eviction", "mat",
               "--eviction-bundle", env[bundle], "--region-bytes", "128KiB",
               "--flash-bytes", R * SEG)
    assert p.returncode == 0, p.stderr
    rt = json.loads(p.stdout)
    assert rt["integrity_errors"] == 0 and rt["verified_bytes"] > 0
    assert (rt["admission"], rt["eviction"]) == ("bundle", "mat")
    assert rt["eviction_decisions"] > 100 and rt["eviction_reinsertions"] > 0
    s = sim(env, "--capacity-segments", R + 1, "--policy", baleen, "--mat", env[bundle])
    assert {k: rt[k] for k in MAT_PAIRS} == {k: s[v] for k, v in MAT_PAIRS.items()}
    full = sim(env, "--capacity-segments", R + 1, "--admission", "admitall", "--mat",
               env[bundle])
    assert 0 < s["admitted_segments"] < full["admitted_segments"]


def test_sim_baleen_with_mat_none_is_baleen_with_lru(env, tmp_path):
    """The simulator's Baleen + MAT with no predictor (MAT's tail block condemned unasked) is
    its Baleen + LRU (`simulate_policy`), prefetch included: the bundle is asked the same
    way in both."""
    from flashml.simulation import SimConfig, simulate_policy
    from flashml.systems.mat.simulation import simulate_mat_flash
    from flashml.trace.ingest import load_trace

    df, meta = load_trace(env["trace"], "tectonic")
    cfg = SimConfig(capacity_segments=R + 1, warmup_s=0.0, sample_ratio=meta.sample_ratio,
                    block_bytes=meta.block_bytes)
    baleen = make_bundle(tmp_path / "baleen", BUILD / "policies" / "count.so")
    lru = simulate_policy(df, baleen, cfg).metrics
    mat = simulate_mat_flash(df, cfg, policy=baleen, predictor="none").metrics
    assert lru["prefetched_segments"] > 0 and lru["admitted_segments"] > 0
    for k, v in lru.items():
        if k != "wall_s":
            assert mat[k] == v, k
    with pytest.raises(ValueError, match="give no score array"):
        simulate_mat_flash(df, cfg, policy=baleen, score=np.zeros(df.height))


def test_baleen_bundle_with_prefetch_and_mat_is_within_two_percent(env, tmp_path):
    """With the bundle's prefetch too (count.so: KIND 1's admission, start..end+2 prefetched
    when the access starts in the block's first half) the prefetched segments lie outside
    the block's later requests, blocks stay partly covered, and the engine's refresh of a
    missed block (when the miss starts) and the simulator's (after its insertions, the
    deferred refresh) order the LRU tail differently: MAT then sees other candidates. The hit
    ratios agree within 0.01 (1% of the GETs: a few hits of about 5,400), the segment and
    byte counts within 2%; the decision counts and T are the engine's."""
    baleen = make_bundle(tmp_path / "baleen", BUILD / "policies" / "count.so")
    p = replay(env, "--policy", baleen, "--eviction", "mat", "--eviction-bundle", env["evict"],
               "--region-bytes", "128KiB", "--flash-bytes", R * SEG)
    assert p.returncode == 0, p.stderr
    rt = json.loads(p.stdout)
    assert rt["integrity_errors"] == 0 and rt["prefetched_segments"] > 0
    s = sim(env, "--capacity-segments", R + 1, "--policy", baleen, "--mat", env["evict"])
    for k in ("io_hit_ratio", "byte_hit_ratio", "segment_hit_ratio"):
        assert abs(rt[k] - s[k]) <= 0.01, (k, rt[k], s[k])
    for k in ("backend_ios", "backend_bytes", "admitted_segments", "prefetched_segments",
              "evicted_segments"):
        v = s[MAT_PAIRS[k]]
        assert abs(rt[k] - v) <= 0.02 * v, (k, rt[k], v)


def test_mat_with_wide_regions_and_any_ranges_serves_right_bytes(env):
    """Regions of 1 MiB (a region leaves whole, other blocks' segments with it) on a trace with
    overlapping ranges and prefetch (the count policy): MAT decides, every byte is right."""
    gen = env["dir"] / "gen.trace"
    subprocess.run([*python_argv(), "-m", "flashml.cli", "trace", "generate", "--preset",
                    "region1-like", "--seed", "1", "--accesses", "3000", "--days", "1",
                    "--quiet", "-o", str(gen)], check=True, capture_output=True, cwd=REPO)
    from runtime_support import small_trace

    trace = env["dir"] / "any.trace"
    small_trace(gen, trace)
    backing = env["dir"] / "any.img"
    p = subprocess.run([str(FLASHRT), "prepare-backing", "--backing", str(backing), "--trace",
                        str(trace)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    count = make_bundle(env["dir"] / "count", BUILD / "policies" / "count.so")
    p = replay(env, "--policy", count, "--eviction", "mat", "--eviction-bundle", env["evict"],
               "--flash-bytes", "16MiB", trace=trace, backing=backing)
    assert p.returncode == 0, p.stderr
    m = json.loads(p.stdout)
    assert m["integrity_errors"] == 0 and m["prefetched_segments"] > 0
    assert m["eviction_decisions"] > 0 and m["evicted_regions"] > 0 and m["hits"] > 0


def test_mat_needs_the_eviction_capability(env):
    """A bundle without it is refused with the bundle named, before any device is touched (the
    flash file is not even created); so is MAT with no bundle at all, or a bundle for a slot
    that is not MAT's."""
    flash = env["dir"] / "never.img"
    baleen = make_bundle(env["dir"] / "baleen", BUILD / "policies" / "count.so")
    p = replay(env, "--policy", baleen, "--eviction", "mat", "--flash-bytes", "8MiB",
               flash=flash)
    assert p.returncode == 1
    assert f"--eviction mat: bundle {baleen} has no evict capability" in p.stderr
    assert not flash.exists()
    p = replay(env, "--policy", "builtin:admitall", "--eviction", "mat", "--eviction-bundle",
               baleen, "--flash-bytes", "8MiB", flash=flash)
    assert p.returncode == 1 and f"bundle {baleen} has no evict capability" in p.stderr
    p = replay(env, "--policy", "builtin:admitall", "--eviction", "mat", "--flash-bytes", "8MiB",
               flash=flash)
    assert p.returncode == 2
    assert "--eviction mat needs a bundle with the evict capability" in p.stderr
    p = replay(env, "--policy", "builtin:admitall", "--eviction-bundle", env["evict"],
               "--flash-bytes", "8MiB", flash=flash)
    assert p.returncode == 2 and "--eviction-bundle is for --eviction mat" in p.stderr
    p = replay(env, "--policy", "builtin:admitall", "--eviction", "lfu", "--flash-bytes", "8MiB",
               flash=flash)
    assert p.returncode == 2 and "lru, fifo, mat or mru" in p.stderr
    assert not flash.exists()


def test_mru_the_worked_example(env):
    """The toy eviction policy (runtime/src/policies/eviction/mru.c, one file) by name: on a
    cyclic scan of 5 blocks through 4 regions LRU never hits after the first round, MRU does."""
    trace = env["dir"] / "scan.trace"
    with open(trace, "w") as f:
        f.write("#block_id io_offset io_size op_time op_name pipeline user_namespace user_name\n")
        f.writelines(f"{100 + i % 5} 0 {SEG} {i}.0 2 1 1 1\n" for i in range(100))
    backing = env["dir"] / "scan.img"
    assert subprocess.run([str(FLASHRT), "prepare-backing", "--backing", str(backing), "--trace",
                           str(trace)], capture_output=True).returncode == 0
    hits = {}
    for ev in ("lru", "mru"):
        p = replay(env, "--policy", "builtin:admitall", "--eviction", ev, "--region-bytes",
                   "128KiB", "--flash-bytes", 4 * SEG, trace=trace, backing=backing)
        assert p.returncode == 0, p.stderr
        m = json.loads(p.stdout)
        assert m["integrity_errors"] == 0 and m["eviction"] == ev
        hits[ev] = m["hits"]
    assert hits["lru"] == 0 and hits["mru"] > 40


# ------------------------------------------------------------------ the admission slot by name

# The window of RejectX is factor x capacity: the runtime's R regions of one segment are the
# simulator's capacity R + 1, so each side gets the factor that makes the same window (exact
# binary fractions: 2 x 63 = 1.96875 x 64 = 126 keys; 2.5 x 63 = 2.4609375 x 64 = 157.5, the
# dithered window of rejectx_block).
R = 63


@pytest.mark.parametrize("eviction", ["lru", "fifo", "mat"])
@pytest.mark.parametrize(("admission", "runtime_args", "sim_args"), [
    ("admitall", [], []),
    ("rejectx", ["--rejectx-factor", 2], ["--rejectx-factor", 1.96875]),
    ("rejectx_block", ["--rejectx-factor", 2], ["--rejectx-factor", 1.96875]),
    ("rejectx_block", ["--rejectx-factor", 2.5, "--rejectx-x", 2],
     ["--rejectx-factor", 2.4609375, "--rejectx-x", 2]),
    ("coinflip", ["--coinflip-p", 0.3, "--coinflip-seed", 7],
     ["--coinflip-p", 0.3, "--coinflip-seed", 7]),
])
def test_admission_builtins_make_the_simulators_decisions(env, eviction, admission,
                                                          runtime_args, sim_args):
    """`--admission NAME` takes the simulator's name and makes its decisions: with MAT in the
    eviction slot (admit-all + MAT, RejectX + MAT, coin flip + MAT, ...), and with FIFO
    (`--eviction fifo` on both sides), hits, admitted and evicted segments equal `flashml sim
    run --admission NAME [--mat | --eviction fifo]` on the same trace. With LRU
    they are equal for admit-all; a policy that admits part of a miss's segments leaves blocks
    partly cached, and then the two models' refresh differs (the engine refreshes a missed
    block before inserting, the simulator's LRU after, runtime/README.md "Policy slots"), so
    there the figures agree within 2%."""
    mat = ["--eviction-bundle", env["evict"]] if eviction == "mat" else []
    p = replay(env, "--admission", admission, *runtime_args, "--eviction", eviction, *mat,
               "--region-bytes", "128KiB", "--flash-bytes", R * SEG)
    assert p.returncode == 0, p.stderr
    rt = json.loads(p.stdout)
    assert rt["integrity_errors"] == 0 and rt["verified_bytes"] > 0
    assert (rt["policy"], rt["admission"], rt["eviction"]) == (admission, admission, eviction)
    s = sim(env, "--capacity-segments", R + 1, "--admission", admission, *sim_args,
            *(["--mat", env["evict"]] if eviction == "mat" else []),
            *(["--eviction", "fifo"] if eviction == "fifo" else []))
    keys = ("io_hit_ratio", "segment_hit_ratio", "backend_ios", "backend_bytes",
            "admitted_segments", "accesses")
    if eviction in ("mat", "fifo") or admission == "admitall":
        assert {k: rt[k] for k in keys} == {k: s[k] for k in keys}
        if eviction == "mat":
            assert rt["evicted_segments"] == s["mat_evicted_segments"]
    else:
        for k in keys:
            assert abs(rt[k] - s[k]) <= 0.02 * s[k], (k, rt[k], s[k])
    # the policy refused some misses (admitall aside) and admitted others
    assert 0 < rt["admitted_segments"]
    if admission != "admitall":
        full = json.loads(replay(env, "--admission", "admitall", "--eviction", eviction, *mat,
                                 "--region-bytes", "128KiB", "--flash-bytes", R * SEG).stdout)
        assert rt["admitted_segments"] < full["admitted_segments"]


def test_builtin_policy_is_the_admission_of_that_name(env):
    """`--policy builtin:NAME` is `--admission NAME` (the same decisions)."""
    runs = [json.loads(replay(env, *args, "--region-bytes", "128KiB", "--flash-bytes",
                              R * SEG).stdout)
            for args in (["--policy", "builtin:rejectx"], ["--admission", "rejectx"])]
    keys = ("hits", "admitted_segments", "evicted_segments", "admission")
    assert {k: runs[0][k] for k in keys} == {k: runs[1][k] for k in keys}


def test_slot_errors_come_before_any_io(env):
    """Two policies for one slot, a name the runtime lacks, a bundle without the capability
    its slot needs, a knob of another policy, a bundle no slot takes: each a message naming
    the option, a non-zero exit, and the flash file never created."""
    flash = env["dir"] / "never.img"
    baleen = make_bundle(env["dir"] / "baleen2", BUILD / "policies" / "count.so")
    cases = [
        (["--admission", "rejectx", "--admission", "admitall"], 2,
         "--admission given twice"),
        (["--policy", "builtin:rejectx", "--admission", "admitall"], 2,
         "two policies for the admission slot: --policy builtin:rejectx and --admission admitall"),
        (["--admission", "admitall", "--eviction", "lru", "--eviction", "fifo"], 2,
         "--eviction given twice"),
        (["--admission", "opt"], 2, "--admission opt: not in this runtime"),
        (["--admission", "threshold"], 2, "--admission threshold: not in this runtime"),
        (["--admission", "lfu"], 2, "--admission: invalid value 'lfu'"),
        ([], 2, "--admission bundle needs --policy DIR"),
        (["--admission", "bundle", "--policy", env["evict"]], 1,
         "--admission bundle: "),
        (["--admission", "admitall", "--coinflip-p", "0.5"], 2,
         "--coinflip-p does not apply: the admission is admitall"),
        (["--admission", "coinflip", "--rejectx-x", "2"], 2,
         "--rejectx-x does not apply: the admission is coinflip"),
        (["--admission", "rejectx", "--fallback", "rejectx"], 2,
         "--fallback does not apply"),
        (["--admission", "rejectx", "--policy", baleen], 2,
         f"--policy {baleen} fills no slot"),
        (["--admission", "coinflip", "--coinflip-p", "1.5"], 2, "--coinflip-p: invalid value"),
        (["--admission", "rejectx", "--rejectx-factor", "0"], 2, "--rejectx-factor: invalid"),
    ]
    for args, code, words in cases:
        p = replay(env, *args, "--flash-bytes", "8MiB", flash=flash)
        assert p.returncode == code and words in p.stderr, (args, p.stderr)
        assert not flash.exists(), args
    # the eviction bundle fills the eviction slot beside a built-in admission
    p = replay(env, "--admission", "rejectx", "--policy", env["evict"], "--eviction", "mat",
               "--flash-bytes", "8MiB")
    assert p.returncode == 0, p.stderr
    m = json.loads(p.stdout)
    assert (m["admission"], m["eviction"]) == ("rejectx", "mat") and m["eviction_decisions"] > 0


# ------------------------------------------------------------------ the budget slot

# Figures of the runtime before the admission and budget slots took names (its built-in RejectX
# was keyed by block, its write-rate limiter inside the admission): the same trace, 8 MiB of
# 1 MiB regions. `rejectx_block` and the bucket must decide exactly as they did.
OLD_REJECTX = {"hits": 378, "admitted_segments": 5383, "evicted_regions": 665,
               "rate_limited": 0, "backend_bytes": 2583429120}
OLD_BUCKET = {"hits": 410, "admitted_segments": 9194, "evicted_regions": 1142,
              "rate_limited": 1701, "backend_bytes": 2604924928}


def figures(m: dict, like: dict) -> dict:
    return {k: m[k] for k in like}


def test_moved_policies_decide_as_before(env):
    """The old built-in RejectX is `--admission rejectx_block`; the write-rate limiter is the
    budget slot's bucket, named or implied by a write rate: their figures are the old ones."""
    p = replay(env, "--admission", "rejectx_block", "--flash-bytes", "8MiB")
    assert p.returncode == 0, p.stderr
    assert figures(json.loads(p.stdout), OLD_REJECTX) == OLD_REJECTX
    for budget in ([], ["--budget", "bucket"]):
        p = replay(env, "--admission", "admitall", *budget, "--flash-bytes", "8MiB",
                   "--write-rate-mbps", "0.2", "--write-burst-s", "30")
        assert p.returncode == 0, p.stderr
        m = json.loads(p.stdout)
        assert figures(m, OLD_BUCKET) == OLD_BUCKET and m["budget"] == "bucket"
    m = json.loads(replay(env, "--admission", "admitall", "--flash-bytes", "8MiB").stdout)
    assert m["budget"] == "none" and m["rate_limited"] == 0


def test_tire_budget_keeps_erasures_to_its_quota(env):
    """`--budget tire`: Pannier's TIRE (the same code as pannier-replay's) over the engine's
    erasures, one per evicted region. A lower target admits less; each quantum's erasures stay
    under K x the quota plus what one admitted miss may still evict (its segments' regions);
    a target no trace reaches decides as no budget at all; every byte still verifies."""
    base = ["--admission", "admitall", "--flash-bytes", "8MiB"]
    none = json.loads(replay(env, *base).stdout)
    runs = {}
    for epbpd in (20, 100, 1e6):
        p = replay(env, *base, "--budget", "tire", "--lifespan-epbpd", epbpd,
                   "--tire-quantum-s", 600)
        assert p.returncode == 0, p.stderr
        m = runs[epbpd] = json.loads(p.stdout)
        assert m["budget"] == "tire" and m["integrity_errors"] == 0
        # 8 regions allowed epbpd erasures a day each, per 600 s quantum
        assert m["budget_quota"] == pytest.approx(epbpd * 8 * 600 / 86400)
        assert m["budget_quanta"] == int(m["trace_seconds"] // 600)
        allowed = 4 * m["budget_quota"] * (m["budget_quanta"] + 1) + 8
        assert m["evicted_regions"] <= allowed
    assert runs[20]["rate_limited"] > runs[100]["rate_limited"] > 0
    assert runs[20]["admitted_segments"] < runs[100]["admitted_segments"]
    assert runs[20]["budget_blocked_quanta"] > 0
    assert figures(runs[1e6], OLD_REJECTX) == figures(none, OLD_REJECTX)


def test_budget_errors_come_before_any_io(env):
    flash = env["dir"] / "never.img"
    cases = [
        (["--budget", "tire"], "--budget tire needs --lifespan-epbpd"),
        (["--budget", "bucket"], "--budget bucket needs --write-rate-mbps"),
        (["--budget", "none", "--write-rate-mbps", "5"], "two policies for the budget slot"),
        (["--budget", "tire", "--lifespan-epbpd", "5", "--write-rate-mbps", "5"],
         "two policies for the budget slot: --budget tire and --write-rate-mbps"),
        (["--budget", "tire", "--lifespan-epbpd", "5", "--rate-clock", "wall"],
         "--rate-clock does not apply: the budget is tire"),
        (["--tire-steps", "2"], "--tire-steps does not apply: the budget is none"),
        (["--budget", "tire", "--budget", "bucket"], "--budget given twice"),
        (["--budget", "lifespan"], "--budget: invalid value 'lifespan'"),
        (["--budget", "tire", "--lifespan-epbpd", "0"], "--lifespan-epbpd: invalid value"),
        (["--budget", "tire", "--lifespan-epbpd", "1", "--tire-steps", "17"],
         "--tire-steps: invalid"),
    ]
    for args, words in cases:
        p = replay(env, "--admission", "admitall", *args, "--flash-bytes", "8MiB", flash=flash)
        assert p.returncode == 2 and words in p.stderr, (args, p.stderr)
        assert not flash.exists(), args
