"""MLCache's main job: partitioning of a page cache across streams, by reuse distance.

    mixes -> train -> compile -> evaluate -> flash -> plots

`flashml mlcache run [--trace FILE --stream-column COL] [--capacity PAGES | --cache-size SIZE]
[--interval N | --interval-s S] [--policy previous_optimal|network] [--bundle DIR]`.

What it ships (`--policy`, `compiled/`: a policy .so exporting `flashml_partition`):

- `previous_optimal` (the default): at the end of every interval, the best split of that
  interval (the paper's discrete optimal, searched on the monitor's histograms in C,
  compiler/partition_rule.c.in) divides the next one. No training.
- `network`: the paper's network (scikit-learn MLP, compiled with emlearn), trained on
  generated multi-stream mixes (flashml/systems/mlcache/multistream.py; `--train-mixes`) to map the
  monitor's features (features/partition.toml) to the discrete-optimal split
  (flashml/systems/mlcache/model.py), the hidden sizes and the shares' sharpness chosen by
  held-out-mix cross-validation.

Why `previous_optimal` is the default: the network learns the map monitor -> best split of
an interval, and `previous_optimal` computes that map exactly; on held-out mixes the network
took 91-97% of the oracle's gain over `even`, `previous_optimal` 95-97%, level or ahead at
every stream count (docs/systems/mlcache.md), with no training (5-6 minutes per stream
count on 2 cores, and over 17 on a 4-host MSR trace at 16,384 pages) and nothing trained on
other traces to go wrong on the user's. So the learned network ships only on request.

`--bundle DIR` applies a compiled partition bundle (either kind; verified as every loader
does, and its streams, cache size and monitor mode checked against this run's) instead of
training or compiling one.

Judged traces: the user's trace alone with `--trace` (generated held-out mixes only with
`--test-mixes N`, reported separately under `mixes`); else `--test-mixes` generated mixes
(default 6; seeds 10000..). Per trace, every policy: `shared` (one LRU), `even`,
`static_optimal` and `discrete_optimal` (hindsight bounds), `previous_optimal` (computed in
Python from the exact curves) and `mlcache` (the shipped .so's shares, as the runtime
computes them). The headline compares `mlcache` with the strongest simple rule a user could
run without MLCache (`shared` or `even`, whichever hits more), and with `previous_optimal`.

Sizes: `--capacity PAGES` or `--cache-size SIZE` (bytes with a unit: pages of `--page-bytes`,
else of the trace's block size (one page per access), 8 KiB for generated mixes; in flash
mode segments). Intervals: `--interval N` requests the cache sees, or `--interval-s S`: S
seconds of the judged trace at its mean rate of requests the cache sees, rounded (the
runtime re-divides by request counts; the summary records both), else twice the cache's
pages (INTERVAL_PER_PAGE; at most half the trace): a partition that grows must have time to
fill before the next split.

The summary: `policies` -> name -> the mean over the judged traces of hit_ratio,
write_hit_ratio, read_hit_ratio, gain_over_even, oracle_gain_fraction; `verdict` (mlcache
against the best simple rule and previous_optimal);
`shipped` (what the .so computes and why); `per_trace`; `mixes` (with a trace and
--test-mixes); `network` (with --policy network).

Flash mode (`--flash`, only with `--trace`): Baleen's flash cache split per namespace, judged
by peak disk-head time (DT) at the same flash write rate
(flashml/systems/mlcache/flash_partition.py):

    flashml mlcache run --trace region1.trace --stream-column namespace --flash \
        --capacity 1000 [--cache-gb GB] [--flash-write-fraction 0.5] [--warmup-s S]

The flash cache's config is `SimConfig.for_trace` of the trace's metadata: `--capacity N`
segments at trace scale, `--cache-size SIZE` bytes at trace scale, else `--cache-gb` (full-node
scale, default 366.475, scaled by the trace's sample ratio). The network's page cache has as
many pages as the flash cache has segments. The `flash` stage takes the GETs' segments as the
monitor's page requests, intervals of page requests mapped to access indices, and runs shared,
even, static_optimal, discrete_optimal, previous_optimal and mlcache with admit-all, then with
CoinFlip admission bisected so every policy writes the same rate (`--flash-write-fraction` of
shared's admit-all rate). Its `headline`: mlcache's peak DT against the lower of shared's and
even's at the same write rate (and previous_optimal's).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from flashml.errors import UserError
from flashml.jobs.run import RunDir, Stage, Timer, finite_numbers
from flashml.systems.mlcache.report import (
    SCORE,
    _means,
    describe,
    flash_headline,
    headlines,
    summary,
)
from flashml.systems.mlcache.settings import (
    INTERVAL_PER_PAGE,
    LEADS,
    MIX_SECONDS,
    PAPER_CAPACITY,
    POLICIES,
    TEST_SEED,
    MlcacheSettings,
    add_cli,
)

log = logging.getLogger("flashml.mlcache")

COMMAND = "mlcache"
HELP = "MLCache: learned cache partitioning across streams by reuse distance -> policy.so"

#: The job module's interface (ARCHITECTURE.md, "A system's five parts"); the settings and
#: the options are in settings.py, the summary and its text in report.py.
__all__ = ["COMMAND", "HELP", "SCORE", "STAGES", "Settings", "add_cli", "describe",
           "headlines", "judged_on", "mlflow_params", "run_name", "shipped", "summary"]


# --- stages --------------------------------------------------------------------------------


def _mix(s: MlcacheSettings, streams: int, seed: int) -> Any:
    from flashml.systems.mlcache.multistream import generate_mix
    from flashml.systems.mlcache.partitioning import page_requests

    df, _ = generate_mix(streams, s.requests, seed)
    return page_requests(df, "namespace")


def _user_table(run: RunDir, s: MlcacheSettings) -> tuple[Any, Any]:
    """The user's trace as a canonical table and its metadata (loaded once per process)."""
    if "user_table" not in run.cache:
        from flashml.trace.ingest import load_trace

        run.cache["user_table"] = load_trace(s.trace, s.format, sample_ratio=s.sample_ratio)
    return run.cache["user_table"]


def _bundle(run: RunDir, s: MlcacheSettings) -> dict[str, Any] | None:
    """--bundle's manifest, verified as every loader verifies a bundle (once per process)."""
    if s.bundle is None:
        return None
    if "bundle_manifest" not in run.cache:
        from flashml.compiler.loader import verify_bundle

        run.cache["bundle_manifest"] = verify_bundle(s.bundle, need="partition")
    return run.cache["bundle_manifest"]


def _flash_config(run: RunDir, s: MlcacheSettings) -> Any:
    """The flash cache of --flash: SimConfig.for_trace (the trace's sample ratio and block
    size) with --capacity segments or --cache-size bytes at trace scale, else --cache-gb at
    full-node scale, else --bundle's capacity (segments), else the default size; and
    --warmup-s."""
    from flashml.simulation import SimConfig, capacity_segments

    _, meta = _user_table(run, s)
    kw: dict[str, Any] = {}
    b = _bundle(run, s)
    if s.capacity is not None:
        kw["capacity_segments"] = s.capacity
    elif s.cache_gb is None and s.cache_size is None and b is not None \
            and b["partition"].get("capacity"):
        kw["capacity_segments"] = int(b["partition"]["capacity"])
    try:
        cfg = SimConfig.for_trace(meta, cache_gb=s.cache_gb, warmup_s=s.warmup_s, **kw)
        if s.cache_size is not None:
            segs = s.cache_size // cfg.segment_bytes
            if segs < 1:
                raise UserError(f"--cache-size: {s.cache_size} bytes is less than one flash "
                                f"segment ({cfg.segment_bytes} bytes)")
            cfg = SimConfig.for_trace(meta, warmup_s=s.warmup_s, capacity_segments=segs)
        capacity_segments(cfg)  # validates the config
    except ValueError as e:
        raise UserError(f"{s.trace}: flash cache: {e}") from None
    return cfg


def _flash_view(run: RunDir, s: MlcacheSettings) -> Any:
    """The flash monitor's view of the user's trace (flash_partition.monitor_view)."""
    if "flash_view" not in run.cache:
        from flashml.systems.mlcache.flash_partition import monitor_view

        df, _ = _user_table(run, s)
        cfg = _flash_config(run, s)
        try:
            run.cache["flash_view"] = monitor_view(df, s.stream_column,
                                                   segment_bytes=cfg.segment_bytes,
                                                   block_bytes=cfg.block_bytes)
        except ValueError as e:
            raise UserError(f"{s.trace}: {e}") from None
    return run.cache["flash_view"]


def _user_trace(run: RunDir, s: MlcacheSettings) -> Any:
    if "user_trace" not in run.cache:
        from flashml.systems.mlcache.partitioning import page_requests

        df, meta = _user_table(run, s)
        try:
            t = page_requests(df, s.stream_column, s.page_bytes, meta.block_bytes)
        except ValueError as e:
            raise UserError(f"{s.trace}: {e}") from None
        run.cache["user_trace"] = t
    return run.cache["user_trace"]


def _pages(run: RunDir, s: MlcacheSettings, streams: int) -> tuple[int, str]:
    """The page cache's size (pages) and where it came from (module doc, "Sizes")."""
    if s.capacity is not None:
        return s.capacity, "--capacity"
    if s.cache_size is not None:
        from flashml.systems.mlcache.settings import PAGE_BYTES

        if s.page_bytes is not None:
            page, what = s.page_bytes, "--page-bytes"
        elif s.trace is not None:
            page, what = int(_user_table(run, s)[1].block_bytes), "the trace's block size"
        else:
            page, what = PAGE_BYTES, "a generated mix's page"
        pages = s.cache_size // page
        if pages < 1:
            raise UserError(f"--cache-size: {s.cache_size} bytes is less than one page "
                            f"({page} bytes, {what})")
        return pages, f"--cache-size {s.cache_size} bytes / {page}-byte pages ({what})"
    b = _bundle(run, s)
    if b is not None and b["partition"].get("capacity"):
        return int(b["partition"]["capacity"]), "--bundle"
    return PAPER_CAPACITY.get(streams, 65 * streams), "default"


def _seconds_interval(seen: int, span_s: float, s: MlcacheSettings, what: str) -> int:
    """--interval-s as requests: S x the mean rate of `seen` requests over `span_s` seconds,
    rounded, at least 1; UserError unless the trace holds two such intervals."""
    assert s.interval_s is not None
    if not span_s > 0:
        raise UserError(f"--interval-s: {what} spans no time (field 'time'); give --interval "
                        "(requests)")
    n = max(1, round(seen * s.interval_s / span_s))
    if 2 * n > seen:
        raise UserError(f"--interval-s {s.interval_s:g}: {n} requests per interval at {what}'s "
                        f"mean rate ({seen} requests in {span_s:.0f} s); it holds fewer than "
                        "two intervals: give a shorter one")
    return int(n)


def _interval(run: RunDir, s: MlcacheSettings, seen: int, span_s: float, capacity: int,
              what: str) -> tuple[int, str]:
    """The interval in requests the cache sees and where it came from: --interval,
    --interval-s at the judged trace's rate (`seen` requests in `span_s` seconds), else
    INTERVAL_PER_PAGE x `capacity` pages (at most half the `seen` requests)."""
    if s.interval is not None:
        return s.interval, "--interval"
    if s.interval_s is not None:
        return _seconds_interval(seen, span_s, s, what), f"--interval-s {s.interval_s:g}"
    n = INTERVAL_PER_PAGE * capacity
    if 2 * n > seen:
        return max(1, seen // 2), (f"half of {what}'s {seen} requests ({INTERVAL_PER_PAGE} x "
                                   f"{capacity} pages would be longer)")
    return n, f"{INTERVAL_PER_PAGE} x {capacity} pages"


def _check_bundle(s: MlcacheSettings, manifest: dict[str, Any], streams: int, capacity: int,
                  where: str) -> None:
    """--bundle against this run: the streams it was made for (`where` says this run's),
    its cache's pages and its monitor (writes only or all requests); UserError naming each
    that differs."""
    pp = manifest["partition"]
    diffs = []
    made = pp.get("trained_streams")
    if made is not None and int(made) != streams:
        diffs.append(f"streams: the bundle's {made}, {where}")
    if pp.get("capacity") is not None and int(pp["capacity"]) != capacity:
        diffs.append(f"capacity: the bundle's {pp['capacity']} pages, this run's {capacity} "
                     "(--capacity/--cache-size)")
    if pp.get("writes_only") is not None and bool(pp["writes_only"]) != s.writes_only:
        mode = {True: "writes only", False: "reads and writes"}
        diffs.append(f"monitor: the bundle's {mode[bool(pp['writes_only'])]}, this run's "
                     f"{mode[s.writes_only]} (--reads-and-writes)")
    if diffs:
        raise UserError(f"--bundle {s.bundle}: made for another cache: " + "; ".join(diffs))


def mixes(run: RunDir, s: MlcacheSettings, timer: Timer) -> dict[str, Any]:
    """The traces: the judged ones (the user's trace alone, or held-out mixes), held-out
    mixes judged apart from a user's trace (--test-mixes), training mixes (--policy
    network); the stream count, the cache's pages and the interval in requests."""
    rec = run.done("mixes")
    if rec is not None:
        return rec
    from flashml.features.partition import contract

    b = _bundle(run, s)
    made = b["partition"].get("trained_streams") if b is not None else None
    streams = s.streams if s.streams is not None else int(made or 4)
    judged: list[dict[str, Any]] = []
    held = [{"name": f"mix{streams}-seed{TEST_SEED + i}", "seed": TEST_SEED + i}
            for i in range(s.held_out)]
    if s.trace is not None:
        with timer.stage("ingest"):
            t = _user_trace(run, s)
        if t.n_streams > contract().max_streams:
            raise UserError(f"{s.trace}: field '{s.stream_column}': {t.n_streams} streams; "
                            f"the partition contract has {contract().max_streams} slots")
        if s.writes_only and not t.writes.any():
            raise UserError(f"{s.trace}: field 'op': no writes, and the cache sees writes only "
                            "(--reads-and-writes to cache reads too)")
        streams = t.n_streams
        held = [{"name": f"mix{streams}-seed{TEST_SEED + i}", "seed": TEST_SEED + i}
                for i in range(s.held_out)]
        judged.append({"name": Path(s.trace).name, "trace": str(s.trace),
                       "streams": list(t.names), "requests": len(t)})
        extra = held
    else:
        if not held:
            raise UserError("--test-mixes 0: nothing to judge; give --trace FILE or a number "
                            "of generated mixes")
        judged, extra = held, []
    capacity, capacity_from = _pages(run, s, streams)
    first = _trace(run, s, judged[0], streams)
    seen = int(first.writes.sum()) if s.writes_only else len(first)
    if s.trace is not None:
        df, _ = _user_table(run, s)
        span = float(df["time"].max() - df["time"].min())
    else:
        span = MIX_SECONDS
    what = Path(s.trace).name if s.trace is not None else "a generated mix"
    flash: dict[str, Any] | None = None
    if s.flash:
        from flashml.simulation import capacity_segments

        with timer.stage("flash view"):
            view = _flash_view(run, s)
        # one page of the network's cache = one segment of the flash cache
        capacity = capacity_segments(_flash_config(run, s))
        capacity_from = "the flash cache's segments"
        f_iv, f_from = _interval(run, s, len(view.trace), span, capacity,
                                 f"{what}'s GET segments")
        flash = {"capacity_segments": capacity, "streams": list(view.trace.names),
                 "page_requests": len(view.trace), "interval": f_iv, "interval_from": f_from}
    interval, interval_from = _interval(run, s, seen, span, capacity, what)
    if b is not None:
        where = (f"the trace's {streams} (field '{s.stream_column}')" if s.trace is not None
                 else f"this run's {streams} (--streams)")
        _check_bundle(s, b, streams, capacity, where)
    if 2 * interval > seen:
        log.warning("--interval %d: the judged trace holds fewer than two (%d requests)",
                    interval, seen)
    train = ([{"name": f"mix{streams}-seed{i}", "seed": i} for i in range(s.train_mixes)]
             if s.trains else [])
    return run.record("mixes", {"streams": streams, "capacity": capacity,
                                "capacity_from": capacity_from, "train": train,
                                "judged": judged, "mixes": extra, "interval": interval,
                                "interval_from": interval_from,
                                "interval_s": s.interval_s, "writes_only": s.writes_only,
                                "flash": flash})


def _trace(run: RunDir, s: MlcacheSettings, item: dict[str, Any], streams: int) -> Any:
    if "seed" not in item:
        return _user_trace(run, s)
    key = f"mix-{item['seed']}"
    if key not in run.cache:
        run.cache[key] = _mix(s, streams, item["seed"])
    return run.cache[key]


def train(run: RunDir, s: MlcacheSettings, timer: Timer) -> dict[str, Any]:
    """The bundle to compile. `previous_optimal`: policy.json naming the rule (no model).
    `network`: rows of every training mix (discrete-optimal labels of `--label`'s interval,
    shuffled slots), cross-validation over the hidden sizes (held-out mixes: the size and the
    shares' sharpness whose fold networks hit most there), the chosen size fitted on all
    rows; its loss curve to MLflow; partition.json + policy.json. `--bundle`: nothing."""
    rec = run.done("train")
    if rec is not None:
        return rec
    m = mixes(run, s, timer)
    if s.bundle is not None:
        return run.record("train", {"skipped": "--bundle", "rule": _bundle(run, s)
                                    ["partition"].get("rule", "network")})
    if s.policy == "previous_optimal":
        from flashml.compiler.bundle import save_partition_rule

        bundle = run.work / "partition-bundle"
        save_partition_rule(bundle, "previous_optimal", mlflow_run_id=run.mlflow_run_id(),
                            capacity=m["capacity"], interval=m["interval"],
                            writes_only=s.writes_only, trained_streams=m["streams"])
        return run.record("train", {"bundle": str(bundle), "rule": "previous_optimal"})
    import mlflow
    import numpy as np
    from mlflow.tracking import MlflowClient
    from tqdm import tqdm

    from flashml.compiler.bundle import save_partition_model
    from flashml.systems.mlcache import model

    rng = np.random.default_rng(s.seed)
    iv = m["interval"]
    traces = []
    data = []
    with timer.stage("training rows"):
        for g, item in enumerate(tqdm(m["train"], desc="training rows", unit="mix",
                                      disable=None, leave=False)):
            t = _trace(run, s, item, m["streams"])
            traces.append(t)
            data.append(model.interval_dataset(t, m["capacity"], iv, rng=rng,
                                               writes_only=s.writes_only,
                                               permutations=s.permutations, group=g,
                                               lead=LEADS[s.label]))
    rows = int(sum(len(d.x) for d in data))
    log.info("%d training rows from %d mixes", rows, len(data))
    cv = {}
    with timer.stage("cross-validation"):
        for h in s.hidden:
            name = "x".join(map(str, h))
            cv[name] = model.cross_validate(data, traces, m["capacity"], iv, hidden=h,
                                            folds=min(s.folds, len(data)),
                                            writes_only=s.writes_only, seed=s.seed,
                                            max_iter=s.max_iter)
            log.info("hidden %s: held-out-mix CV %s", name, cv[name])
    # the hidden sizes and the shares' sharpness whose fold networks hit most on their
    # held-out mixes (ties: the first size given)
    best = max(cv, key=lambda n: cv[n]["cv_hit_ratio"])
    hidden = tuple(int(n) for n in best.split("x"))
    sharp = {"sharpness": cv[best]["sharpness"], "hit_ratio": cv[best]["hit_ratio"]}
    log.info("hidden %s, shares' sharpness %s (held-out hit ratio by sharpness: %s)", best,
             sharp["sharpness"], sharp["hit_ratio"])
    with timer.stage("fit"):
        net = model.train_network(data, hidden=hidden, seed=s.seed, max_iter=s.max_iter)
    metrics = {"train_rows": float(rows), "epochs": float(net.n_iter_),
               "final_loss": float(net.loss_), "sharpness": sharp["sharpness"],
               **{k: v for k, v in cv[best].items() if k.startswith("cv_")}}
    rid = run.mlflow_run_id()
    if rid:
        client = MlflowClient()
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        hist = [Metric("mlcache_train_loss", float(v), now, i)
                for i, v in enumerate(net.loss_curve_)]
        hist += [Metric("mlcache_valid_r2", float(v), now, i)
                 for i, v in enumerate(net.validation_scores_ or [])]
        for i in range(0, len(hist), 1000):
            client.log_batch(rid, metrics=hist[i:i + 1000])
        mlflow.log_metrics({f"mlcache_{k}": v for k, v in finite_numbers(metrics).items()})
    bundle = run.work / "partition-bundle"
    save_partition_model(bundle, net, metrics=finite_numbers(metrics), mlflow_run_id=rid,
                         sharpness=sharp["sharpness"], capacity=m["capacity"],
                         interval=iv, writes_only=s.writes_only,
                         trained_streams=m["streams"])
    return run.record("train", {"bundle": str(bundle), "rule": "network", "hidden": list(hidden),
                                "cv": cv, "sharpness": sharp, "metrics": metrics, "rows": rows})


def compile_network(run: RunDir, s: MlcacheSettings, timer: Timer) -> dict[str, Any]:
    """The bundle -> `compiled/` (policy.so exporting flashml_partition: the rule's C or
    emlearn's network), or --bundle's own folder (verified in `mixes`)."""
    rec = run.done("compile")
    if rec is not None:
        return rec
    tr = train(run, s, timer)
    if s.bundle is not None:
        b = _bundle(run, s)
        assert b is not None
        return run.record("compile", {"dir": str(Path(s.bundle).resolve()),
                                      "sha256": b["sha256"],
                                      "capabilities": b["capabilities"], "applied": True})
    from flashml.compiler.build import compile_policy

    dest = run.path / "compiled"
    with timer.stage("compile"):
        manifest = compile_policy(dest, model_dir=tr["bundle"], log_to_mlflow=False)
    return run.record("compile", {"dir": str(dest), "sha256": manifest["sha256"],
                                  "capabilities": manifest["capabilities"]})


def _judge(run: RunDir, s: MlcacheSettings, lib: Any, t: Any, m: dict[str, Any]
           ) -> tuple[dict[str, Any], Any, Any]:
    """Every policy on one page trace; `mlcache`'s shares from the .so. (per-trace record,
    the features, the .so's shares)."""
    from flashml.systems.mlcache import model
    from flashml.systems.mlcache.partitioning import TRACE_POLICIES, compare

    cap, iv = m["capacity"], m["interval"]
    x, curves = model.trace_features(t, cap, iv, writes_only=s.writes_only)
    shares, status = lib.partition(x, t.n_streams)
    res = compare(t, cap, iv, TRACE_POLICIES, writes_only=s.writes_only)
    prev = model.previous_optimal_shares(t, cap, iv, s.writes_only, curves=curves)
    res["previous_optimal"] = compare(t, cap, iv, ("mlcache",), writes_only=s.writes_only,
                                      shares=prev)["mlcache"]
    res["mlcache"] = compare(t, cap, iv, ("mlcache",), writes_only=s.writes_only,
                             shares=model.schedule(shares, t.n_streams))["mlcache"]
    return {"policies": res, "fallbacks": int(status.sum()), "intervals": len(x)}, x, shares


def evaluate(run: RunDir, s: MlcacheSettings, timer: Timer) -> dict[str, Any]:
    """Every policy on every judged trace (and apart, on the held-out mixes given with a
    trace); `mlcache` takes its shares from the compiled .so (the runtime's path), checked
    against the rule or the network computed in Python."""
    rec = run.done("evaluate")
    if rec is not None:
        return rec

    from tqdm import tqdm

    from flashml.compiler.loader import PolicyLibrary, verify_bundle

    m = mixes(run, s, timer)
    comp = compile_network(run, s, timer)
    manifest = verify_bundle(comp["dir"], need="partition")
    lib = PolicyLibrary(Path(comp["dir"]) / "policy.so", need="partition")
    out: dict[str, dict[str, Any]] = {"judged": {}, "mixes": {}}
    parity: float | None = 0.0
    items = [("judged", item) for item in m["judged"]] + [("mixes", i) for i in m["mixes"]]
    with timer.stage("simulate"):
        for n, (group, item) in enumerate(tqdm(items, desc="simulate", unit="trace",
                                               disable=None, leave=False)):
            t = _trace(run, s, item, m["streams"])
            out[group][item["name"]], x, shares = _judge(run, s, lib, t, m)
            if n == 0:
                src = run.done("train").get("bundle", comp["dir"])
                parity = _parity(src, manifest, x, shares, t.n_streams)
    means = _means(out["judged"])
    import mlflow

    mlflow.log_metrics(finite_numbers({f"{p}_{k}": v for p, r in means.items()
                                       for k, v in r.items()}))
    rule = manifest["partition"].get("rule", "network")
    return run.record("evaluate", {
        "per_trace": out["judged"], "policies": means, "rule": rule,
        "mixes": ({"per_trace": out["mixes"], "policies": _means(out["mixes"])}
                  if out["mixes"] else None),
        "so_vs_python_max_abs": parity})


def _parity(bundle: str, manifest: dict[str, Any], x: Any, so: Any, streams: int
            ) -> float | None:
    """The largest difference between the .so's shares `so` of the features `x` and the
    same policy computed here in float64: the rule (systems/mlcache/model.py rule_shares) or the
    network from its saved layers in `bundle` (float32 C vs float64; None when the folder
    holds no layers: a compiled bundle applied with --bundle)."""
    import numpy as np

    from flashml.compiler.bundle import PARTITION_FILE, read_partition_model
    from flashml.systems.mlcache import model

    if not len(x):
        return 0.0
    pp = manifest["partition"]
    if pp.get("rule", "network") != "network":
        return float(np.abs(model.rule_shares(x, streams) - so).max())
    if not (Path(bundle) / PARTITION_FILE).is_file():
        return None
    ws, bs = read_partition_model(Path(bundle) / PARTITION_FILE)
    a = x
    for i, (w, b) in enumerate(zip(ws, bs, strict=True)):
        a = a @ w + b
        if i < len(ws) - 1:
            a = np.maximum(a, 0.0)
    py, _ = model.shares_from_outputs(a, streams, pp.get("sharpness", 1.0))
    return float(np.abs(py - so).max())


def flash(run: RunDir, s: MlcacheSettings, timer: Timer) -> dict[str, Any]:
    """--flash: every policy on the user's trace's flash cache split per stream, with admit-all
    and at the same write rate (--flash-write-fraction of shared's), mlcache's shares from the
    compiled .so (flashml/systems/mlcache/flash_partition.py)."""
    rec = run.done("flash")
    if rec is not None:
        return rec
    if not s.flash:
        return run.record("flash", {"skipped": "no --flash"})
    import mlflow

    from flashml.simulation import simulate
    from flashml.systems.mlcache.flash_partition import FLASH_POLICIES, compare_flash

    evaluate(run, s, timer)
    m = mixes(run, s, timer)
    comp = compile_network(run, s, timer)
    df, _ = _user_table(run, s)
    cfg = _flash_config(run, s)
    view = _flash_view(run, s)
    with timer.stage("flash"):
        shared = simulate(df, cfg.replace(admission="admitall")).metrics
        target = s.flash_write_fraction * float(shared["flash_write_rate_mbps"])
        res = compare_flash(df, cfg, FLASH_POLICIES, stream_column=s.stream_column,
                            interval=m["flash"]["interval"], bundle=comp["dir"],
                            target_write_mbps=target, view=view)
    res["headline"] = flash_headline(res["same_write_rate"], target, s.flash_write_fraction)
    res["interval_from"] = m["flash"]["interval_from"]
    res["config"] = {k: v for k, v in cfg.to_dict().items()
                     if k in ("cache_gb", "sample_ratio", "capacity_segments", "segment_bytes",
                              "block_bytes", "warmup_s", "window_s", "disks")}
    metrics = {f"flash_{p}_{k}": v for p, r in res["policies"].items() for k, v in r.items()}
    metrics |= {f"flash_same_{p}_{k}": v for p, r in res["same_write_rate"].items()
                for k, v in r.items()}
    metrics |= {f"flash_{k}": v for k, v in res["headline"].items()}
    mlflow.log_metrics(finite_numbers(metrics))
    return run.record("flash", res)


def plots(run: RunDir, s: MlcacheSettings, timer: Timer) -> dict[str, Any]:
    """Write hit ratio per policy (mean over the judged traces), and the allocation over time
    of the first judged trace by mlcache and by the oracle (the paper's Fig. 7)."""
    rec = run.done("plots")
    if rec is not None:
        return rec
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from flashml.compiler.loader import PolicyLibrary
    from flashml.systems.mlcache import model
    from flashml.systems.mlcache.partitioning import simulate_partitioned

    res = evaluate(run, s, timer)
    m = mixes(run, s, timer)
    out_dir = run.path / "plots"
    out_dir.mkdir(parents=True, exist_ok=True)
    names = list(POLICIES)
    vals = [res["policies"][p]["write_hit_ratio"] for p in names]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.bar(names, vals, color=["#999"] * 5 + ["#1f77b4"])
    for i, v in enumerate(vals):
        ax.text(i, v, f"{v:.3f}", ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("write hit ratio")
    ax.set_title(f"{len(res['per_trace'])} judged trace(s), {m['streams']} streams, "
                 f"{m['capacity']} pages")
    plt.setp(ax.get_xticklabels(), rotation=20)
    fig.tight_layout()
    bar = out_dir / "write_hit_ratio.png"
    from flashml.jobs.report import save_figure

    save_figure(fig, bar, dpi=120)
    plt.close(fig)
    item = m["judged"][0]
    t = _trace(run, s, item, m["streams"])
    lib = PolicyLibrary(Path(compile_network(run, s, timer)["dir"]) / "policy.so",
                        need="partition")
    x, _ = model.trace_features(t, m["capacity"], m["interval"], writes_only=s.writes_only)
    shares = model.schedule(lib.partition(x, t.n_streams)[0], t.n_streams)
    fig, axes = plt.subplots(2, 1, figsize=(8, 5), sharex=True)
    for ax, pol, sh in ((axes[0], "mlcache", shares), (axes[1], "discrete_optimal", None)):
        r = simulate_partitioned(t, m["capacity"], m["interval"], pol,
                                 writes_only=s.writes_only,
                                 shares=sh)
        alloc = np.asarray(r["allocations"], dtype=np.float64)
        ax.stackplot(np.arange(len(alloc)), alloc.T, labels=list(t.names), step="post")
        ax.set_ylabel(f"{pol}\npages")
    axes[0].legend(loc="upper left", bbox_to_anchor=(1.01, 1), title="stream", fontsize=7)
    axes[1].set_xlabel(f"interval ({m['interval']} requests)")
    fig.suptitle(f"allocation over time: {item['name']}")
    fig.tight_layout()
    alloc_png = out_dir / "allocation_over_time.png"
    save_figure(fig, alloc_png, dpi=120)
    plt.close(fig)
    return run.record_plots((bar, alloc_png))


STAGES: tuple[Stage, ...] = (
    Stage("mixes", mixes),
    Stage("train", train),
    Stage("compile", compile_network),
    Stage("evaluate", evaluate),
    Stage("flash", flash),
    Stage("plots", plots),
)
Settings = MlcacheSettings


def run_name(s: MlcacheSettings) -> str:
    return f"mlcache-{Path(s.trace).name if s.trace else f'mix{s.streams or 4}'}"


def mlflow_params(run: RunDir, s: MlcacheSettings) -> dict[str, Any]:
    return {"trace": str(s.trace or f"generated mix of {s.streams or 4} streams"),
            "policy": f"bundle {s.bundle}" if s.bundle is not None else s.policy,
            "capacity_pages": s.capacity or (f"{s.cache_size} bytes" if s.cache_size
                                             else "default"),
            "interval": (f"{s.interval_s:g} s" if s.interval_s is not None else
                         s.interval if s.interval is not None else
                         f"{INTERVAL_PER_PAGE} x pages"),
            "requests": s.requests, "test_mixes": s.held_out, "writes_only": s.writes_only,
            "seed": s.seed, "flash": s.flash,
            **({"train_mixes": s.train_mixes, "permutations": s.permutations,
                "label": s.label, "hidden": ",".join("x".join(map(str, h)) for h in s.hidden)}
               if s.trains else {}),
            **({"flash_write_fraction": s.flash_write_fraction,
                "cache_gb": s.cache_gb if s.cache_gb is not None else "default",
                "warmup_s": s.warmup_s if s.warmup_s is not None else "default"}
               if s.flash else {})}


# --- MLflow: the runs table's headline, the shipped bundle (flashml/jobs/ship.py) ----------


def shipped(run: RunDir, summary: dict[str, Any], s: MlcacheSettings) -> Path:
    return Path(summary["compiled"])


def judged_on(run: RunDir, s: MlcacheSettings) -> str:
    what = (Path(s.trace).name if s.trace else
            f"{s.held_out} generated mixes of {s.streams or 4} streams")
    iv = (f"{s.interval_s:g} s" if s.interval_s is not None else
          f"{s.interval} requests" if s.interval is not None else
          f"{INTERVAL_PER_PAGE} x the pages")
    return f"{what}, intervals of {iv}"
