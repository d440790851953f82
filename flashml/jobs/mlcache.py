"""MLCache's main job (issue 18): learned partitioning of a page cache across streams.

    mixes -> train -> compile -> evaluate -> plots

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
    hidden: tuple[tuple[int, ...], ...] = ((64,),)
    folds: int = 4
    max_iter: int = 300
    writes_only: bool = True
    seed: int = 0

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
        return cls(trace=args.trace, format=args.format, sample_ratio=args.sample_ratio,
                   stream_column=args.stream_column, page_bytes=args.page_bytes,
                   streams=args.streams, capacity=args.capacity, interval=args.interval,
                   requests=args.requests, train_mixes=args.train_mixes,
                   test_mixes=args.test_mixes, permutations=args.permutations, hidden=hidden,
                   label=args.label,
                   folds=args.folds, max_iter=args.max_iter,
                   writes_only=not args.reads_and_writes, seed=args.seed)


def add_cli(p: argparse.ArgumentParser) -> None:
    d = MlcacheSettings()
    p.epilog = ("examples:\n  flashml mlcache run --streams 4 --out runs/mlc4\n"
                "  flashml mlcache run --trace msr.csv --format msr --stream-column "
                "src_hostname --page-bytes 8192 --capacity 4096")
    p.add_argument("--streams", type=int, default=d.streams,
                   help="streams per generated mix (with --trace: the trace's own count is "
                   "used for the training mixes)")
    p.add_argument("--stream-column", default=d.stream_column,
                   help="with --trace: the canonical column whose values are the streams")
    p.add_argument("--page-bytes", type=int, default=None,
                   help="with --trace: split each access into pages of this size (default: "
                   "one page per access)")
    p.add_argument("--capacity", type=int, default=None, metavar="PAGES",
                   help="cache pages (default: the paper's 220/260/680 for 2/4/8 streams, "
                   "else 65 per stream)")
    p.add_argument("--interval", type=int, default=d.interval,
                   help="requests the cache sees per interval (the partition is re-divided "
                   "after each)")
    p.add_argument("--requests", type=int, default=d.requests, help="requests per mix")
    p.add_argument("--train-mixes", type=int, default=d.train_mixes,
                   help="generated mixes to train on (seeds 0..N-1)")
    p.add_argument("--test-mixes", type=int, default=d.test_mixes,
                   help=f"held-out mixes to judge on (seeds {TEST_SEED}..; ignored with "
                   "--trace)")
    p.add_argument("--label", choices=("same", "next"), default=d.label,
                   help="interval whose best split labels an interval's features: the same "
                   "one (the network learns the monitor -> best split map) or the next one")
    p.add_argument("--permutations", type=int, default=d.permutations,
                   help="stream-slot shuffles of every training row")
    p.add_argument("--hidden", default=",".join("x".join(map(str, h)) for h in d.hidden),
                   help="hidden layer sizes to choose among by cross-validation: 64 (one "
                   "layer), 64,256 (two candidates), 256x256 (two layers)")
    p.add_argument("--folds", type=int, default=d.folds,
                   help="cross-validation folds over the training mixes")
    p.add_argument("--max-iter", type=int, default=d.max_iter, help="training epochs, at most")
    p.add_argument("--reads-and-writes", action="store_true",
                   help="cache and monitor reads too (default: writes only, the paper's Alg. 1)")
    p.add_argument("--seed", type=int, default=d.seed,
                   help="seed of the slot shuffles and the network's initialisation")


# --- stages --------------------------------------------------------------------------------


def _mix(s: MlcacheSettings, streams: int, seed: int) -> Any:
    from flashml.partitioning import page_requests
    from flashml.trace.multistream import generate_mix

    df, _ = generate_mix(streams, s.requests, seed)
    return page_requests(df, "namespace")


def _user_trace(run: RunDir, s: MlcacheSettings) -> Any:
    if "user_trace" not in run.cache:
        from flashml.partitioning import page_requests
        from flashml.trace.ingest import load_trace

        df, meta = load_trace(s.trace, s.format, sample_ratio=s.sample_ratio)
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
    else:
        judged += [{"name": f"mix{streams}-seed{TEST_SEED + i}", "seed": TEST_SEED + i}
                   for i in range(s.test_mixes)]
    train = [{"name": f"mix{streams}-seed{i}", "seed": i} for i in range(s.train_mixes)]
    return run.record("mixes", {"streams": streams, "capacity": s.pages, "train": train,
                                "judged": judged, "interval": s.interval,
                                "writes_only": s.writes_only})


def _trace(run: RunDir, s: MlcacheSettings, item: dict[str, Any], streams: int) -> Any:
    if "seed" not in item:
        return _user_trace(run, s)
    key = f"mix-{item['seed']}"
    if key not in run.cache:
        run.cache[key] = _mix(s, streams, item["seed"])
    return run.cache[key]


def train(run: RunDir, s: MlcacheSettings, timer: Timer) -> dict[str, Any]:
    """Rows of every training mix (next-interval discrete-optimal labels, shuffled slots),
    cross-validation over the hidden sizes (held-out mixes), the chosen size fitted on all
    rows; its loss curve to MLflow; the bundle (partition.json + policy.json)."""
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
    data = []
    with timer.stage("training rows"):
        for g, item in enumerate(m["train"]):
            t = _trace(run, s, item, m["streams"])
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
            cv[name] = model.cross_validate(data, hidden=h, folds=min(s.folds, len(data)),
                                            seed=s.seed, max_iter=s.max_iter)
            log.info("hidden %s: held-out-mix CV %s", name, cv[name])
    best = min(cv, key=lambda n: cv[n]["cv_l1"])
    hidden = tuple(int(n) for n in best.split("x"))
    with timer.stage("sharpness"):
        sharp = model.choose_sharpness(
            data, [_trace(run, s, item, m["streams"]) for item in m["train"]], m["capacity"],
            s.interval, hidden=hidden, writes_only=s.writes_only, seed=s.seed,
            max_iter=s.max_iter)
    log.info("shares' sharpness %s (held-out hit ratio by sharpness: %s)", sharp["sharpness"],
             sharp["hit_ratio"])
    with timer.stage("fit"):
        net = model.train_network(data, hidden=hidden, seed=s.seed, max_iter=s.max_iter)
    metrics = {"train_rows": float(rows), "epochs": float(net.n_iter_),
               "final_loss": float(net.loss_), "sharpness": sharp["sharpness"], **cv[best]}
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
    fig.savefig(bar, dpi=120)
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
    fig.savefig(alloc_png, dpi=120)
    plt.close(fig)
    for p in (bar, alloc_png):
        mlflow.log_artifact(str(p), artifact_path="plots")
    return run.record("plots", {"plots": [str(bar), str(alloc_png)]})


STAGES: tuple[Stage, ...] = (
    Stage("mixes", mixes),
    Stage("train", train),
    Stage("compile", compile_network),
    Stage("evaluate", evaluate),
    Stage("plots", plots),
)
Settings = MlcacheSettings


def run_name(s: MlcacheSettings) -> str:
    return f"mlcache-{Path(s.trace).name if s.trace else f'mix{s.streams}'}"


def mlflow_params(run: RunDir, s: MlcacheSettings) -> dict[str, Any]:
    return {"trace": str(s.trace or f"generated mix of {s.streams} streams"),
            "capacity_pages": s.pages, "interval": s.interval, "requests": s.requests,
            "train_mixes": s.train_mixes, "test_mixes": s.test_mixes,
            "permutations": s.permutations, "label": s.label,
            "hidden": ",".join("x".join(map(str, h)) for h in s.hidden),
            "writes_only": s.writes_only, "seed": s.seed}


def summary(records: dict[str, dict[str, Any]], s: MlcacheSettings) -> dict[str, Any]:
    ev = records["evaluate"]
    return {"streams": records["mixes"]["streams"], "capacity": records["mixes"]["capacity"],
            "interval": s.interval, "writes_only": s.writes_only,
            "judged": records["mixes"]["judged"], "policies": ev["policies"],
            "per_trace": ev["per_trace"], "so_vs_python_max_abs": ev["so_vs_python_max_abs"],
            "network": {"hidden": records["train"]["hidden"], "cv": records["train"]["cv"],
                        "sharpness_hit_ratio": records["train"]["sharpness"]["hit_ratio"],
                        **records["train"]["metrics"]},
            "compiled": records["compile"]["dir"], "plots": records["plots"]["plots"]}


def describe(summary: dict[str, Any], s: MlcacheSettings) -> str:
    lines = [f"{summary['streams']} streams, {summary['capacity']} pages, intervals of "
             f"{summary['interval']} requests, {len(summary['judged'])} judged trace(s):"]
    for p, r in summary["policies"].items():
        lines.append(f"  {p:17} write hit ratio {r['write_hit_ratio']:.4f}  vs even "
                     f"{r['gain_over_even']:+.1%}  of the oracle's gain "
                     f"{r['oracle_gain_fraction']:.0%}")
    lines.append(f"network {summary['network']['hidden']}, shares' sharpness "
                 f"{summary['network']['sharpness']}: held-out-mix CV L1 "
                 f"{summary['network']['cv_l1']:.3f}; .so vs scikit-learn shares max diff "
                 f"{summary['so_vs_python_max_abs']:.1e}")
    return "\n".join(lines)
