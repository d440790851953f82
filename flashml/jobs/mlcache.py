"""MLCache's main job (issue 18): learned partitioning of a page cache across streams.

    mixes -> train -> compile -> evaluate -> flash -> plots

`flashml mlcache run [--streams K] [--capacity PAGES] [--interval N] [--out DIR]`: generated
multi-stream mixes (flashml/trace/multistream.py: loop, zipf, scan, shift and hotset streams
whose working sets and intensities change from phase to phase; `--train-mixes` to train on,
`--test-mixes` held out, other seeds), or with `--trace FILE --stream-column COL` a trace of
the user's judged by a network trained on generated mixes of as many streams. Per interval of
`--interval` requests the cache sees (writes only by default: the paper's setting), the
monitor's features (features/partition.toml) label the next interval's discrete-optimal split
(flashml/models/mlcache.py); the network (scikit-learn MLP, the hidden layer sizes of
`--hidden` chosen by held-out-mix cross-validation) is compiled with emlearn into a policy .so
exporting `flashml_partition`; the simulator's `mlcache` policy then takes its shares from
that .so, interval by interval, beside `shared`, `even`, `static_optimal`,
`discrete_optimal` (the oracle) and `previous_optimal` (the last interval's best split: the
predictor to beat).

The summary: `policies` -> name -> the mean over the judged traces of hit_ratio,
write_hit_ratio, read_hit_ratio and the gain over even; `oracle_gain_fraction` (how much of
discrete_optimal's gain over even each policy gets), per trace results, the network's
cross-validation and the shipped bundle in `compiled/`.

Flash mode (`--flash`, only with `--trace`): Baleen's flash cache split per namespace, judged
by peak disk-head time (DT) and flash write rate (flashml/flash_partition.py):

    flashml mlcache run --trace region1.trace --stream-column namespace --flash \
        --capacity 1000 [--cache-gb GB] [--flash-write-fraction 0.5] [--warmup-s S]

The flash cache's config is `SimConfig.for_trace` of the trace's metadata (the builder every
flash command uses): `--capacity N` makes it N segments at trace scale, else `--cache-gb` (the
full-node size of `flashml sim run --cache-gb`, default 366.475, scaled by the trace's sample
ratio) gives its segments. The network's page cache has exactly as many pages as the flash
cache has segments (one page = one segment, so a share means the same in both; the training
mixes, the object-mode evaluation and the flash stage all use that capacity). The `flash`
stage, after `evaluate`, takes the GETs' segments as the monitor's page requests (reads: the
flash cache caches what GETs read), intervals of `--interval` page requests mapped to access
indices, and runs shared (no partition), even, static_optimal, discrete_optimal (each
interval's best page-LRU split in hindsight), previous_optimal and mlcache (the compiled .so's
shares) with admit-all, then again with CoinFlip admission bisected so every policy writes the
same rate: `--flash-write-fraction` (default 0.5) of shared's admit-all write rate. The
summary's `flash`: `policies` (admit-all) and `same_write_rate` -> name -> peak_dt_util,
mean_dt_util, flash_write_rate_mbps, io_hit_ratio, byte_hit_ratio, resize_evictions, quotas
(mean/min/max segments per stream), stream_hit_ratio (and p, achieved_write_mbps, within at
the same rate); `headline`: mlcache's vs shared's peak DT at the same write rate. The text
output ends with that table.
"""

from __future__ import annotations

import argparse
import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from flashml.errors import UserError
from flashml.jobs.run import RunDir, Stage, Timer, finite_numbers
from flashml.settings import MAX_SEED, OPTIONS, Number

log = logging.getLogger("flashml.mlcache")

COMMAND = "mlcache"
HELP = "MLCache: learned cache partitioning across streams by reuse distance -> policy.so"
#: The paper's cache sizes (pages) for 2, 4 and 8 streams (Fig. 8a, §4.1).
PAPER_CAPACITY = {2: 220, 4: 260, 8: 680}
#: Seeds of the held-out mixes start here (training mixes: 0, 1, ...).
TEST_SEED = 10_000
#: --label -> the label's interval offset (models/mlcache.py interval_dataset's `lead`).
LEADS = {"same": 0, "next": 1}
POLICIES = ("shared", "even", "static_optimal", "discrete_optimal", "previous_optimal",
            "mlcache")


@dataclass(frozen=True)
class MlcacheSettings:
    """Everything `flashml mlcache run` needs."""

    trace: Path | None = None
    format: str | None = None
    sample_ratio: float | None = None
    stream_column: str = "namespace"
    page_bytes: int | None = None
    streams: int = 4
    #: Pages; None: the paper's size for the stream count (else 65 per stream).
    capacity: int | None = None
    #: Requests the cache sees per interval. The paper does not give its interval; at 1000
    #: (a fifth of a generated mix's phase of writes) the last interval's best split gets
    #: 95% of the oracle's gain on held-out mixes, at 5000 80-86% (phases change within
    #: intervals): the network can be no better than what one interval tells.
    interval: int = 1000
    requests: int = 200_000
    #: 24 mixes gave the network 81% of the oracle's gain (4 streams), 96 gave 90%.
    train_mixes: int = 96
    #: Which interval's best split labels interval i's features: "same" (i: the network
    #: learns the monitor -> best split map, applied to the next interval) or "next" (i+1:
    #: what it will be judged on, but a noisier target). The paper leaves it open.
    label: str = "same"
    test_mixes: int = 6
    permutations: int = 4
    #: Three layers of 256 ReLUs (the paper's text: two of 256; its figure: one). On 10
    #: held-out mixes (96 training mixes): one layer of 64 took 79% of the oracle's gain at 4
    #: streams, 256x256 88%, 512x512 88%, 128x128x128 90%, 256x256x256 91% (97% at 2
    #: streams, 92% at 8).
    hidden: tuple[tuple[int, ...], ...] = ((256, 256, 256),)
    #: Held-out-mix folds: they choose the shares' sharpness (and the hidden sizes if
    #: several are given); each costs a network.
    folds: int = 2
    max_iter: int = 300
    writes_only: bool = True
    seed: int = 0
    #: Flash mode (with a trace): the flash stage judges the split flash cache (module doc).
    flash: bool = False
    #: The same write rate of the flash stage: this fraction of shared's admit-all rate.
    flash_write_fraction: float = 0.5
    #: Flash cache size at full-node scale, GB (None: the simulator's default) unless
    #: --capacity gives its segments.
    cache_gb: float | None = None
    #: Seconds at the start of the trace excluded from the DT statistics (None: the
    #: simulator's default, a day).
    warmup_s: float | None = None

    def replace(self, **kw: Any) -> MlcacheSettings:
        return replace(self, **kw)

    @property
    def pages(self) -> int:
        return self.capacity or PAPER_CAPACITY.get(self.streams, 65 * self.streams)

    @classmethod
    def from_cli(cls, args: argparse.Namespace) -> MlcacheSettings:
        from flashml.features.partition import contract

        top = contract().max_streams
        if not 2 <= args.streams <= top:
            raise UserError(f"--streams must be in 2..{top} (the partition contract's slots), "
                            f"got {args.streams}")
        checks = {"--capacity": (args.capacity, 1), "--interval": (args.interval, 1),
                  "--requests": (args.requests, 1000), "--train-mixes": (args.train_mixes, 2),
                  "--test-mixes": (args.test_mixes, 1), "--permutations": (args.permutations, 1),
                  "--folds": (args.folds, 2), "--max-iter": (args.max_iter, 1)}
        for flag, (v, lo) in checks.items():
            if v is not None and v < lo:
                raise UserError(f"{flag} must be >= {lo}, got {v}")
        if args.requests < 2 * args.interval:
            raise UserError(f"--requests ({args.requests}) must hold at least two intervals "
                            f"of --interval ({args.interval})")
        try:
            hidden = tuple(tuple(int(n) for n in h.split("x")) for h in args.hidden.split(",")
                           if h.strip())
        except ValueError:
            raise UserError(f"--hidden: expected sizes like 64 or 64,256 or 128x64 (layers), "
                            f"got {args.hidden!r}") from None
        if not hidden or any(n < 1 for h in hidden for n in h):
            raise UserError(f"--hidden: give at least one size >= 1, got {args.hidden!r}")
        if args.flash and args.trace is None:
            raise UserError("--flash judges a trace's flash cache: give it with --trace FILE "
                            "(and --stream-column)")
        if not args.flash:
            for flag, v in (("--cache-gb", args.cache_gb), ("--warmup-s", args.warmup_s)):
                if v is not None:
                    raise UserError(f"{flag} is a flash-mode option: add --flash")
        if not 0 < args.flash_write_fraction <= 1:
            raise UserError(f"--flash-write-fraction must be in (0, 1], got "
                            f"{args.flash_write_fraction}")
        if args.flash and args.capacity is not None and args.cache_gb is not None:
            raise UserError("--capacity (segments) and --cache-gb both size the flash cache: "
                            "give one")
        if args.cache_gb is not None and not args.cache_gb > 0:
            raise UserError(f"--cache-gb must be > 0, got {args.cache_gb}")
        if args.warmup_s is not None and not args.warmup_s >= 0:
            raise UserError(f"--warmup-s must be >= 0, got {args.warmup_s}")
        return cls(trace=args.trace, format=args.format, sample_ratio=args.sample_ratio,
                   stream_column=args.stream_column, page_bytes=args.page_bytes,
                   streams=args.streams, capacity=args.capacity, interval=args.interval,
                   requests=args.requests, train_mixes=args.train_mixes,
                   test_mixes=args.test_mixes, permutations=args.permutations, hidden=hidden,
                   label=args.label,
                   folds=args.folds, max_iter=args.max_iter,
                   writes_only=not args.reads_and_writes, seed=args.seed,
                   flash=args.flash, flash_write_fraction=args.flash_write_fraction,
                   cache_gb=args.cache_gb, warmup_s=args.warmup_s)


def add_cli(p: argparse.ArgumentParser) -> None:
    d = MlcacheSettings()
    p.epilog = ("examples:\n  flashml mlcache run --streams 4 --out runs/mlc4\n"
                "  flashml mlcache run --trace msr.csv --format msr --stream-column "
                "src_hostname --page-bytes 8192 --capacity 4096\n"
                "  flashml mlcache run --trace region1.trace --stream-column namespace "
                "--flash --capacity 1000")
    p.add_argument("--streams", type=Number(int, 2, 64, unit="streams"), default=d.streams,
                   help="streams per generated mix (with --trace: the trace's own count is "
                   "used for the training mixes)")
    p.add_argument("--stream-column", default=d.stream_column,
                   help="with --trace: the canonical column whose values are the streams")
    p.add_argument("--page-bytes", type=Number(int, 512, 1 << 30, unit="bytes"), default=None,
                   help="with --trace: split each access into pages of this size (default: "
                   "one page per access)")
    p.add_argument("--capacity", type=Number(int, 1, unit="pages"), default=None,
                   metavar="PAGES",
                   help="cache pages (default: the paper's 220/260/680 for 2/4/8 streams, "
                   "else 65 per stream); with --flash: the flash cache's segments at trace "
                   "scale, which the network's pages equal")
    p.add_argument("--interval", type=Number(int, 1, unit="requests"), default=d.interval,
                   help="requests the cache sees per interval (the partition is re-divided "
                   "after each)")
    p.add_argument("--requests", type=Number(int, 1000, 10**9, unit="requests"),
                   default=d.requests, help="requests per mix")
    p.add_argument("--train-mixes", type=Number(int, 2, 100_000, unit="mixes"),
                   default=d.train_mixes,
                   help="generated mixes to train on (seeds 0..N-1)")
    p.add_argument("--test-mixes", type=Number(int, 1, 100_000, unit="mixes"),
                   default=d.test_mixes,
                   help=f"held-out mixes to judge on (seeds {TEST_SEED}..; ignored with "
                   "--trace)")
    p.add_argument("--label", choices=("same", "next"), default=d.label,
                   help="interval whose best split labels an interval's features: the same "
                   "one (the network learns the monitor -> best split map) or the next one")
    p.add_argument("--permutations", type=Number(int, 1, 1000, unit="shuffles"),
                   default=d.permutations,
                   help="stream-slot shuffles of every training row")
    p.add_argument("--hidden", default=",".join("x".join(map(str, h)) for h in d.hidden),
                   help="hidden layer sizes to choose among by cross-validation: 64 (one "
                   "layer), 64,256 (two candidates), 256x256 (two layers)")
    p.add_argument("--folds", type=Number(int, 2, 1000, unit="folds"), default=d.folds,
                   help="cross-validation folds over the training mixes")
    p.add_argument("--max-iter", type=Number(int, 1, 1_000_000, unit="epochs"),
                   default=d.max_iter, help="training epochs, at most")
    p.add_argument("--reads-and-writes", action="store_true",
                   help="cache and monitor reads too (default: writes only, the paper's Alg. 1)")
    p.add_argument("--seed", type=Number(int, 0, MAX_SEED), default=d.seed,
                   help="seed of the slot shuffles and the network's initialisation")
    p.add_argument("--flash", action="store_true",
                   help="with --trace: also judge the policies on Baleen's flash cache split "
                   "per stream (peak DT and write rate; the network's pages = the flash "
                   "cache's segments)")
    p.add_argument("--flash-write-fraction", type=Number(float, 0.0, 1.0, low_open=True),
                   default=d.flash_write_fraction,
                   metavar="F", help="--flash: every policy is also judged at the same write "
                   "rate, F (0 < F <= 1) of shared's admit-all rate (CoinFlip admission)")
    p.add_argument("--cache-gb", type=OPTIONS["cache_gb"].type, default=None, metavar="GB",
                   help="--flash: flash cache size at full-node scale, GB of 2^30 bytes, "
                   "scaled by the trace's sample ratio (default 366.475; or --capacity "
                   "segments)")
    p.add_argument("--warmup-s", type=Number(float, 0.0, 1e9, unit="s"), default=None,
                   metavar="S",
                   help="--flash: seconds at the start excluded from the DT statistics "
                   "(default 86400)")


# --- stages --------------------------------------------------------------------------------


def _mix(s: MlcacheSettings, streams: int, seed: int) -> Any:
    from flashml.partitioning import page_requests
    from flashml.trace.multistream import generate_mix

    df, _ = generate_mix(streams, s.requests, seed)
    return page_requests(df, "namespace")


def _user_table(run: RunDir, s: MlcacheSettings) -> tuple[Any, Any]:
    """The user's trace as a canonical table and its metadata (loaded once per process)."""
    if "user_table" not in run.cache:
        from flashml.trace.ingest import load_trace

        run.cache["user_table"] = load_trace(s.trace, s.format, sample_ratio=s.sample_ratio)
    return run.cache["user_table"]


def _flash_config(run: RunDir, s: MlcacheSettings) -> Any:
    """The flash cache of --flash: SimConfig.for_trace (the trace's sample ratio and block
    size) with --capacity segments, or --cache-gb at full-node scale, and --warmup-s."""
    from flashml.simulation import SimConfig, capacity_segments

    _, meta = _user_table(run, s)
    kw: dict[str, Any] = {}
    if s.capacity is not None:
        kw["capacity_segments"] = s.capacity
    try:
        cfg = SimConfig.for_trace(meta, cache_gb=s.cache_gb, warmup_s=s.warmup_s, **kw)
        capacity_segments(cfg)  # validates the config
    except ValueError as e:
        raise UserError(f"{s.trace}: flash cache: {e}") from None
    return cfg


def _flash_view(run: RunDir, s: MlcacheSettings) -> Any:
    """The flash monitor's view of the user's trace (flash_partition.monitor_view)."""
    if "flash_view" not in run.cache:
        from flashml.flash_partition import monitor_view

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
        from flashml.partitioning import page_requests

        df, meta = _user_table(run, s)
        try:
            t = page_requests(df, s.stream_column, s.page_bytes, meta.block_bytes)
        except ValueError as e:
            raise UserError(f"{s.trace}: {e}") from None
        run.cache["user_trace"] = t
    return run.cache["user_trace"]


def mixes(run: RunDir, s: MlcacheSettings, timer: Timer) -> dict[str, Any]:
    """The traces: training mixes (seeds) and the judged traces (held-out mixes, or the
    user's trace), with their stream counts and sizes."""
    rec = run.done("mixes")
    if rec is not None:
        return rec
    from flashml.features.partition import contract

    streams = s.streams
    judged: list[dict[str, Any]] = []
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
        judged.append({"name": Path(s.trace).name, "trace": str(s.trace),
                       "streams": list(t.names), "requests": len(t)})
    capacity = s.pages
    flash: dict[str, Any] | None = None
    if s.flash:
        from flashml.simulation import capacity_segments

        with timer.stage("flash view"):
            view = _flash_view(run, s)
        # one page of the network's cache = one segment of the flash cache
        capacity = capacity_segments(_flash_config(run, s))
        flash = {"capacity_segments": capacity, "streams": list(view.trace.names),
                 "page_requests": len(view.trace)}
    else:
        judged += [{"name": f"mix{streams}-seed{TEST_SEED + i}", "seed": TEST_SEED + i}
                   for i in range(s.test_mixes)]
    train = [{"name": f"mix{streams}-seed{i}", "seed": i} for i in range(s.train_mixes)]
    return run.record("mixes", {"streams": streams, "capacity": capacity, "train": train,
                                "judged": judged, "interval": s.interval,
                                "writes_only": s.writes_only, "flash": flash})


def _trace(run: RunDir, s: MlcacheSettings, item: dict[str, Any], streams: int) -> Any:
    if "seed" not in item:
        return _user_trace(run, s)
    key = f"mix-{item['seed']}"
    if key not in run.cache:
        run.cache[key] = _mix(s, streams, item["seed"])
    return run.cache[key]


def train(run: RunDir, s: MlcacheSettings, timer: Timer) -> dict[str, Any]:
    """Rows of every training mix (discrete-optimal labels of `--label`'s interval, shuffled
    slots), cross-validation over the hidden sizes (held-out mixes: the size and the shares'
    sharpness whose fold networks hit most there), the chosen size fitted on all rows; its
    loss curve to MLflow; the bundle (partition.json + policy.json)."""
    rec = run.done("train")
    if rec is not None:
        return rec
    import mlflow
    import numpy as np
    from mlflow.tracking import MlflowClient

    from flashml.compiler.bundle import save_partition_model
    from flashml.models import mlcache as model

    m = mixes(run, s, timer)
    rng = np.random.default_rng(s.seed)
    traces = [_trace(run, s, item, m["streams"]) for item in m["train"]]
    data = []
    with timer.stage("training rows"):
        for g, t in enumerate(traces):
            data.append(model.interval_dataset(t, m["capacity"], s.interval, rng=rng,
                                               writes_only=s.writes_only,
                                               permutations=s.permutations, group=g,
                                               lead=LEADS[s.label]))
    rows = int(sum(len(d.x) for d in data))
    log.info("%d training rows from %d mixes", rows, len(data))
    cv = {}
    with timer.stage("cross-validation"):
        for h in s.hidden:
            name = "x".join(map(str, h))
            cv[name] = model.cross_validate(data, traces, m["capacity"], s.interval, hidden=h,
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
                         interval=s.interval,
                         writes_only=s.writes_only, trained_streams=m["streams"])
    return run.record("train", {"bundle": str(bundle), "hidden": list(hidden), "cv": cv,
                                "sharpness": sharp, "metrics": metrics, "rows": rows})


def compile_network(run: RunDir, s: MlcacheSettings, timer: Timer) -> dict[str, Any]:
    """The network -> `compiled/` (policy.so exporting flashml_partition, emlearn's C)."""
    rec = run.done("compile")
    if rec is not None:
        return rec
    from flashml.compiler.build import compile_policy

    bundle = train(run, s, timer)["bundle"]
    dest = run.path / "compiled"
    with timer.stage("compile"):
        manifest = compile_policy(dest, model_dir=bundle, log_to_mlflow=False)
    return run.record("compile", {"dir": str(dest), "sha256": manifest["sha256"],
                                  "capabilities": manifest["capabilities"]})


def evaluate(run: RunDir, s: MlcacheSettings, timer: Timer) -> dict[str, Any]:
    """Every policy on every judged trace; `mlcache` takes its shares from the compiled .so
    (the runtime's path), checked against the scikit-learn network."""
    rec = run.done("evaluate")
    if rec is not None:
        return rec

    from flashml.compiler.loader import PolicyLibrary, verify_bundle
    from flashml.models import mlcache as model
    from flashml.partitioning import TRACE_POLICIES, compare

    m = mixes(run, s, timer)
    comp = compile_network(run, s, timer)
    verify_bundle(comp["dir"], need="partition")
    lib = PolicyLibrary(Path(comp["dir"]) / "policy.so", need="partition")
    per_trace: dict[str, Any] = {}
    parity = 0.0
    with timer.stage("simulate"):
        for i, item in enumerate(m["judged"]):
            t = _trace(run, s, item, m["streams"])
            x, curves = model.trace_features(t, m["capacity"], s.interval,
                                             writes_only=s.writes_only)
            shares, status = lib.partition(x, t.n_streams)
            if i == 0:
                parity = _parity(run, x, shares, t.n_streams)
            res = compare(t, m["capacity"], s.interval, TRACE_POLICIES,
                          writes_only=s.writes_only)
            prev = model.previous_optimal_shares(t, m["capacity"], s.interval, s.writes_only,
                                                 curves=curves)
            res["previous_optimal"] = compare(t, m["capacity"], s.interval, ("mlcache",),
                                              writes_only=s.writes_only, shares=prev)["mlcache"]
            res["mlcache"] = compare(t, m["capacity"], s.interval, ("mlcache",),
                                     writes_only=s.writes_only,
                                     shares=model.schedule(shares, t.n_streams))["mlcache"]
            per_trace[item["name"]] = {"policies": res, "fallbacks": int(status.sum()),
                                       "intervals": len(x)}
    means = _means(per_trace)
    import mlflow

    mlflow.log_metrics(finite_numbers({f"{p}_{k}": v for p, r in means.items()
                                       for k, v in r.items()}))
    return run.record("evaluate", {"per_trace": per_trace, "policies": means,
                                   "so_vs_python_max_abs": parity})


def _parity(run: RunDir, x: Any, so: Any, streams: int) -> float:
    """The largest difference between the .so's shares `so` of the features `x` and the
    network's own, computed here in float64 from its saved layers (float32 C vs float64)."""
    import numpy as np

    from flashml.compiler.bundle import read_partition_model
    from flashml.models import mlcache as model

    ws, bs = read_partition_model(Path(run.done("train")["bundle"]) / "partition.json")
    a = x
    for i, (w, b) in enumerate(zip(ws, bs, strict=True)):
        a = a @ w + b
        if i < len(ws) - 1:
            a = np.maximum(a, 0.0)
    py, _ = model.shares_from_outputs(a, streams, run.done("train")["sharpness"]["sharpness"])
    return float(np.abs(py - so).max()) if len(x) else 0.0


def _means(per_trace: dict[str, Any]) -> dict[str, Any]:
    import numpy as np

    out: dict[str, Any] = {}
    for p in POLICIES:
        vals = [r["policies"][p] for r in per_trace.values()]
        out[p] = {k: float(np.mean([v[k] for v in vals]))
                  for k in ("hit_ratio", "write_hit_ratio", "read_hit_ratio")}
    metric = "write_hit_ratio"
    even, oracle = out["even"][metric], out["discrete_optimal"][metric]
    for p in POLICIES:
        out[p]["gain_over_even"] = out[p][metric] / even - 1.0 if even > 0 else float("nan")
        out[p]["oracle_gain_fraction"] = ((out[p][metric] - even) / (oracle - even)
                                          if oracle > even else float("nan"))
    return out


def flash(run: RunDir, s: MlcacheSettings, timer: Timer) -> dict[str, Any]:
    """--flash: every policy on the user's trace's flash cache split per stream, with admit-all
    and at the same write rate (--flash-write-fraction of shared's), mlcache's shares from the
    compiled .so (flashml/flash_partition.py)."""
    rec = run.done("flash")
    if rec is not None:
        return rec
    if not s.flash:
        return run.record("flash", {"skipped": "no --flash"})
    import mlflow

    from flashml.flash_partition import FLASH_POLICIES, compare_flash
    from flashml.simulation import simulate

    evaluate(run, s, timer)
    comp = compile_network(run, s, timer)
    df, _ = _user_table(run, s)
    cfg = _flash_config(run, s)
    view = _flash_view(run, s)
    with timer.stage("flash"):
        shared = simulate(df, cfg.replace(admission="admitall")).metrics
        target = s.flash_write_fraction * float(shared["flash_write_rate_mbps"])
        res = compare_flash(df, cfg, FLASH_POLICIES, stream_column=s.stream_column,
                            interval=s.interval, bundle=comp["dir"], target_write_mbps=target,
                            view=view)
    same = res["same_write_rate"]
    ml, sh = same["mlcache"], same["shared"]
    res["headline"] = {
        "target_write_mbps": target, "write_fraction": s.flash_write_fraction,
        "mlcache_peak_dt_util": ml["peak_dt_util"], "shared_peak_dt_util": sh["peak_dt_util"],
        "mlcache_vs_shared_peak_dt": (ml["peak_dt_util"] / sh["peak_dt_util"] - 1.0
                                      if sh["peak_dt_util"] > 0 else float("nan")),
        "both_within_1pct": bool(ml["within"] and sh["within"])}
    res["config"] = {k: v for k, v in cfg.to_dict().items()
                     if k in ("cache_gb", "sample_ratio", "capacity_segments", "segment_bytes",
                              "block_bytes", "warmup_s", "window_s", "disks")}
    metrics = {f"flash_{p}_{k}": v for p, r in res["policies"].items() for k, v in r.items()}
    metrics |= {f"flash_same_{p}_{k}": v for p, r in same.items() for k, v in r.items()}
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
    import mlflow
    import numpy as np

    from flashml.compiler.loader import PolicyLibrary
    from flashml.models import mlcache as model
    from flashml.partitioning import simulate_partitioned

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
    lib = PolicyLibrary(Path(run.done("compile")["dir"]) / "policy.so", need="partition")
    x, _ = model.trace_features(t, m["capacity"], s.interval, writes_only=s.writes_only)
    shares = model.schedule(lib.partition(x, t.n_streams)[0], t.n_streams)
    fig, axes = plt.subplots(2, 1, figsize=(8, 5), sharex=True)
    for ax, pol, sh in ((axes[0], "mlcache", shares), (axes[1], "discrete_optimal", None)):
        r = simulate_partitioned(t, m["capacity"], s.interval, pol, writes_only=s.writes_only,
                                 shares=sh)
        alloc = np.asarray(r["allocations"], dtype=np.float64)
        ax.stackplot(np.arange(len(alloc)), alloc.T, labels=list(t.names), step="post")
        ax.set_ylabel(f"{pol}\npages")
    axes[0].legend(loc="upper left", bbox_to_anchor=(1.01, 1), title="stream", fontsize=7)
    axes[1].set_xlabel(f"interval ({s.interval} requests)")
    fig.suptitle(f"allocation over time: {item['name']}")
    fig.tight_layout()
    alloc_png = out_dir / "allocation_over_time.png"
    save_figure(fig, alloc_png, dpi=120)
    plt.close(fig)
    for p in (bar, alloc_png):
        mlflow.log_artifact(str(p), artifact_path="plots")
    return run.record("plots", {"plots": [str(bar), str(alloc_png)]})


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
    return f"mlcache-{Path(s.trace).name if s.trace else f'mix{s.streams}'}"


def mlflow_params(run: RunDir, s: MlcacheSettings) -> dict[str, Any]:
    return {"trace": str(s.trace or f"generated mix of {s.streams} streams"),
            "capacity_pages": (s.pages if not s.flash else
                               s.capacity or "the flash cache's segments"),
            "interval": s.interval, "requests": s.requests,
            "train_mixes": s.train_mixes, "test_mixes": s.test_mixes,
            "permutations": s.permutations, "label": s.label,
            "hidden": ",".join("x".join(map(str, h)) for h in s.hidden),
            "writes_only": s.writes_only, "seed": s.seed, "flash": s.flash,
            **({"flash_write_fraction": s.flash_write_fraction,
                "cache_gb": s.cache_gb if s.cache_gb is not None else "default",
                "warmup_s": s.warmup_s if s.warmup_s is not None else "default"}
               if s.flash else {})}


def summary(records: dict[str, dict[str, Any]], s: MlcacheSettings) -> dict[str, Any]:
    ev = records["evaluate"]
    return {"streams": records["mixes"]["streams"], "capacity": records["mixes"]["capacity"],
            "interval": s.interval, "writes_only": s.writes_only,
            "judged": records["mixes"]["judged"], "policies": ev["policies"],
            "per_trace": ev["per_trace"], "so_vs_python_max_abs": ev["so_vs_python_max_abs"],
            "network": {"hidden": records["train"]["hidden"], "cv": records["train"]["cv"],
                        "sharpness_hit_ratio": records["train"]["sharpness"]["hit_ratio"],
                        **records["train"]["metrics"]},
            "compiled": records["compile"]["dir"], "plots": records["plots"]["plots"],
            **({"flash": records["flash"]} if "skipped" not in records["flash"] else {})}


def _fmt(v: Any, spec: str) -> str:
    """`v` formatted by `spec`, or "n/a" for what JSON gives back for NaN (None): e.g. the
    oracle's gain fraction when the oracle gains nothing over even."""
    return "n/a" if v is None else format(v, spec)


def describe(summary: dict[str, Any], s: MlcacheSettings) -> str:
    lines = [f"{summary['streams']} streams, {summary['capacity']} pages, intervals of "
             f"{summary['interval']} requests, {len(summary['judged'])} judged trace(s):"]
    for p, r in summary["policies"].items():
        lines.append(f"  {p:17} write hit ratio {_fmt(r['write_hit_ratio'], '.4f')}  vs even "
                     f"{_fmt(r['gain_over_even'], '+.1%')}  of the oracle's gain "
                     f"{_fmt(r['oracle_gain_fraction'], '.0%')}")
    lines.append(f"network {summary['network']['hidden']}, shares' sharpness "
                 f"{summary['network']['sharpness']}: held-out-mix CV L1 "
                 f"{summary['network']['cv_l1']:.3f}; .so vs scikit-learn shares max diff "
                 f"{summary['so_vs_python_max_abs']:.1e}")
    if "flash" in summary:
        lines += describe_flash(summary["flash"])
    return "\n".join(lines)


def describe_flash(f: dict[str, Any]) -> list[str]:
    """The flash stage's table: peak DT, mean DT, write rate, IO hit ratio per policy with
    admit-all and at the same write rate."""
    h = f["headline"]
    lines = [f"flash cache of {f['capacity_segments']} segments split among "
             f"{len(f['streams'])} streams, intervals of {f['interval']} page requests "
             f"({f['intervals']}):",
             f"  {'policy':17} {'admit-all: peak DT':>18} {'mean DT':>8} {'MB/s':>8} "
             f"{'IO hit':>7} | {'same rate: p':>12} {'MB/s':>8} {'peak DT':>8} {'IO hit':>7}"]
    for p, r in f["policies"].items():
        q = f["same_write_rate"][p]
        mark = "" if q["within"] else " (" + (q["note"] or "not within 1%") + ")"
        lines.append(f"  {p:17} {r['peak_dt_util']:18.4f} {r['mean_dt_util']:8.4f} "
                     f"{r['flash_write_rate_mbps']:8.2f} {r['io_hit_ratio']:7.4f} | "
                     f"{q['p']:12.4f} {q['achieved_write_mbps']:8.2f} "
                     f"{q['peak_dt_util']:8.4f} {q['io_hit_ratio']:7.4f}{mark}")
    lines.append(f"at {h['target_write_mbps']:.2f} MB/s ({h['write_fraction']:.0%} of shared's "
                 f"admit-all rate): mlcache peak DT {h['mlcache_peak_dt_util']:.4f} vs shared "
                 f"{h['shared_peak_dt_util']:.4f} ({h['mlcache_vs_shared_peak_dt']:+.1%})")
    return lines


# --- MLflow: the runs table's headline, the shipped bundle (flashml/jobs/ship.py) ----------

#: The registry judges a candidate by MLCache's write hit ratio on the judged traces.
SCORE = ("write_hit_ratio", "max")


def headlines(summary: dict[str, Any], s: MlcacheSettings) -> dict[str, Any]:
    """MLCache's write hit ratio, its gain over an even split and its share of the oracle's
    gain; in flash mode also its peak-DT cut vs the shared cache at the same write rate."""
    m = summary["policies"]["mlcache"]
    out = {"write_hit_ratio": m["write_hit_ratio"], "hit_ratio_gain": m["gain_over_even"],
           "oracle_gain_fraction": m["oracle_gain_fraction"]}
    if "flash" in summary:
        out["peak_dt_cut"] = -summary["flash"]["headline"]["mlcache_vs_shared_peak_dt"]
    return out


def shipped(run: RunDir, summary: dict[str, Any], s: MlcacheSettings) -> Path:
    return Path(summary["compiled"])


def judged_on(run: RunDir, s: MlcacheSettings) -> str:
    what = Path(s.trace).name if s.trace else f"{s.streams} generated streams (seed {s.seed})"
    return f"{what}, {s.requests} requests, intervals of {s.interval}"
