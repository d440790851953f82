"""KML's main job: a tiny learned readahead tuner, trained offline, run in process.

    sweep -> train -> compile -> evaluate -> plots

`flashml kml run [--device-size SIZE] -o DIR`: on a machine with root the real experiment
(`--mode real`; `auto`, the default, falls back to the twin and says why): RocksDB's
db_bench (Debian's rocksdb-tools) on ext4 on a loop device or a zram RAM disk
(`--backend`), throttled to a slower SSD (`--read-iops`, `--read-mbps`; 0 and 0: not
throttled), page cache dropped and database restored before every run. The sweep runs every
workload (the paper's readrandom, readseq, readreverse, readrandomwriterandom; held out:
updaterandom and mixgraph) at every readahead size of `--sizes`, at Linux's 128 KiB and at
the device's default, `--repeats` times, tracing the page cache (kernel tracepoint, user
space) into the paper's five window features; per workload the best fixed size (highest
mean) and the sizes tied with it by their 95% intervals, the smallest tied one its label.
KML's network (`paper`: 5 -> 15 -> 5 -> 4 sigmoid units, SGD), ours (`mlp16`: 5 -> 16 -> 4,
L-BFGS) and a decision tree learn the workload class from the training workloads' windows
(MLflow), are compiled into policy .so files (`flashml_readahead_kib`; `--network` names the
one shipped as compiled/kml), and `flashrt tune-readahead` runs each beside db_bench,
setting the device's readahead every second. Every workload is then measured under each
tuner, alternating (the order reversed every other repeat: `run_order`), `--repeats` times;
the fixed baselines (`default`, the device's own readahead; `linux_128`; `best_fixed`) are
the sweep's runs.

`--mode twin` (and `flashml pipeline run --system kml`) runs the same stages on the offline
twin (flashml/systems/kml/twin.py: the simulator's page cache with Linux-like readahead over
generated db_bench-like traces), for users without root; deterministic, one run per point.
With `--trace FILE` (a block trace: MSR, CloudPhysics, csv, Tectonic) the twin also judges
the tuner on that trace (its reads and writes replayed closed-loop; each block a file,
offsets in pages), as one more held-out workload named `trace:FILE`.

The summary: `workloads` -> name -> {policies (each policy's runs, mean and 95% interval),
ratios (each tuner against each fixed baseline: ratio, interval, verdict), best_fixed_kib,
tied_kib, and the shipped tuner in short: kml, kml_vs_best_fixed, kml_vs_linux_128, ...},
the models' cross-validation, the compiled bundles, plots (the paper's Figure 2: ops/s and
the chosen readahead over time; the ratios with their intervals).
"""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from flashml.errors import UserError
from flashml.jobs.run import RunDir, Stage, Timer
from flashml.systems.kml.report import SCORE, describe, headlines, summary
from flashml.systems.kml.settings import (
    FIXED,
    HELD_OUT,
    LINUX_KIB,
    TRAIN_WORKLOADS,
    TUNERS,
    KmlSettings,
    add_cli,
)

log = logging.getLogger("flashml.kml")

COMMAND = "kml"
DEFAULT_FORMAT = "msr"
HELP = "KML: a learned readahead tuner (db_bench on a real device, or the twin) -> policy.so"
#: `flashml pipeline run --system kml` runs the offline part on the embedded default.
PIPELINE_ARGS = ("--mode", "twin")

#: The job module's interface (ARCHITECTURE.md, "A system's five parts"); the settings and
#: the options are in settings.py, the summary and its text in report.py.
__all__ = ["COMMAND", "DEFAULT_FORMAT", "HELP", "PIPELINE_ARGS", "SCORE", "STAGES", "Settings",
           "add_cli", "describe", "headlines", "judged_on", "mlflow_params", "run_name",
           "shipped", "summary"]


def run_order(items: tuple[Any, ...], rep: int) -> tuple[Any, ...]:
    """The order of `items` (sizes or tuners) in repeat `rep` (0-based): as given, then
    reversed (A B C D, D C B A, ...): over each pair of repeats every item's mean position is
    the same, so a linear drift (the machine's load changing; before each run restored the
    database, write workloads aged it run by run: best_fixed 1998 -> 1455 ops/s within two
    repeats of updaterandom) cancels."""
    return items if rep % 2 == 0 else items[::-1]


# --- the runner of a mode ------------------------------------------------------------------


def _workloads(s: KmlSettings) -> tuple[str, ...]:
    """Every judged workload: the training ones, the held-out ones, the user's trace."""
    return TRAIN_WORKLOADS + HELD_OUT + ((f"trace:{Path(s.trace).name}",) if s.trace else ())


def _user_trace(s: KmlSettings) -> dict[str, Any]:
    """The user's block trace as the twin's requests: each block a file, its offsets in
    pages, reads and writes in trace order (the block mode's requests, trace/blocks.py, with
    each block's pages numbered from 0 again)."""
    import numpy as np

    from flashml.features.readahead import contract
    from flashml.trace.blocks import block_requests
    from flashml.trace.ingest import load_trace

    assert s.trace is not None
    page = contract().page_bytes
    df, meta = load_trace(s.trace, s.format, sample_ratio=s.sample_ratio)
    try:
        req = block_requests(df, meta.block_bytes, page)
    except ValueError as e:
        raise UserError(f"{s.trace}: {e}") from None
    per_block = np.uint64(-(-meta.block_bytes // page))
    files = req.pages // per_block
    if int(files.max()) >= 2**32:
        raise UserError(f"{s.trace}: more than 2^32 blocks; sample it (--sample-ratio)")
    return {"files": files.astype(np.uint32), "pages": req.pages % per_block,
            "npages": req.lens, "writes": req.writes}


def _mode(s: KmlSettings) -> tuple[str, str | None]:
    """The mode this run uses and, for auto falling back to the twin, why."""
    if s.mode == "twin":
        return "twin", None
    from flashml.systems.kml import collect, testbed

    why = testbed.unavailable(s.backend) or collect.unavailable()
    if why is None:
        try:
            from flashml.systems.kml.experiment import flashrt_binary

            flashrt_binary()
        except UserError as e:
            why = str(e)
    if why is None:
        return "real", None
    if s.mode == "real":
        raise UserError(f"--mode real: the KML testbed cannot run here: {why}")
    log.warning("the real KML testbed cannot run here (%s): running the offline twin", why)
    return "twin", why


def _runner(run: RunDir, s: KmlSettings, mode: str, duration_s: int | None = None) -> Any:
    """The mode's runner; real runs last at most `duration_s` (default --duration)."""
    from flashml.systems.kml.experiment import RealDevice, RealRunner, TwinDevice, TwinRunner

    if mode == "real":
        workdir = s.workdir or run.path / "device"
        workdir.mkdir(parents=True, exist_ok=True)
        return RealRunner(workdir, RealDevice(
            backend=s.backend, device_bytes=s.device_bytes, num=s.num,
            memory_bytes=s.memory_mib << 20,
            read_iops=s.read_iops, read_bps=int(s.read_mbps * (1 << 20)),
            duration_s=duration_s or s.duration_s, reads=s.reads))
    if not s.read_iops:
        raise UserError("--read-iops 0 --read-mbps 0 (no throttle) is for the real device; "
                        "the twin models a device of given IOs/s and MiB/s")
    extra = {_workloads(s)[-1]: _user_trace(s)} if s.trace else {}
    return TwinRunner(TwinDevice(requests=s.twin_requests, cache_pages=s.twin_cache_pages,
                                 riops=float(s.read_iops), rbps=s.read_mbps * (1 << 20),
                                 seed=s.seed), traces=extra)


# --- stages --------------------------------------------------------------------------------


def sweep(run: RunDir, s: KmlSettings, timer: Timer) -> dict[str, Any]:
    """Every workload at every size, Linux's 128 KiB and the device's default, `repeats`
    times (the sizes' order reversed every other repeat), traced: each size's runs and mean
    ops/s, the best fixed size (highest mean) and the sizes tied with it by the 95%
    intervals, the label (the smallest tied size), the page-cache windows (training rows,
    sweep_windows.parquet)."""
    rec = run.done("sweep")
    if rec is not None:
        return rec
    import polars as pl

    from flashml.files import atomic_path
    from flashml.systems.kml.stats import best_sizes

    mode, why = _mode(s)
    rows: list[dict[str, Any]] = []
    runs: dict[str, dict[str, list[float]]] = {}
    with timer.stage("sweep"), _runner(run, s, mode) as r:
        default = int(r.default_kib)
        sizes = tuple(sorted({*s.sizes, LINUX_KIB, default}))
        reps = s.repeats if mode == "real" else 1  # the twin is deterministic
        total = len(_workloads(s)) * len(sizes) * reps
        done = 0
        for w in _workloads(s):
            runs[w] = {str(k): [] for k in sizes}
            for rep in range(reps):
                for kib in run_order(sizes, rep):
                    o = r.run(w, kib=kib, trace=w in TRAIN_WORKLOADS)
                    runs[w][str(kib)].append(o.ops_per_s)
                    rows += [{"workload": w, "run_kib": kib, "repeat": rep, **win}
                             for win in o.windows]
                    done += 1
                    log.info("sweep %d/%d: %s at %d KiB (repeat %d): %.0f ops/s, %d windows",
                             done, total, w, kib, rep + 1, o.ops_per_s, len(o.windows))
    best, tied = {}, {}
    for w, per in runs.items():
        best[w], tied[w] = best_sizes(per)
    table = {w: {k: sum(v) / len(v) for k, v in per.items()} for w, per in runs.items()}
    path = run.path / "sweep_windows.parquet"
    with atomic_path(path) as tmp:
        pl.DataFrame(rows).write_parquet(tmp)
    return run.record("sweep", {"mode": mode, "twin_because": why, "default_kib": default,
                                "sizes": sizes, "repeats": reps, "ops_per_s": table,
                                "runs": runs, "best_fixed_kib": best, "tied_kib": tied,
                                "label_kib": {w: min(t) for w, t in tied.items()},
                                "windows": str(path), "rows": len(rows)})


def train(run: RunDir, s: KmlSettings, timer: Timer) -> dict[str, Any]:
    """Both networks (paper, mlp16) and the tree on the training workloads' windows (class =
    workload, its size = its label: the smallest size tied with the best); stratified k-fold
    accuracy; bundles under models/."""
    rec = run.done("train")
    if rec is not None:
        return rec
    import mlflow
    import polars as pl

    from flashml.compiler.readahead import save_readahead_model
    from flashml.systems.kml import model

    sw = sweep(run, s, timer)
    df = pl.read_parquet(sw["windows"])
    rows = {w: df.filter(pl.col("workload") == w).to_dicts() for w in TRAIN_WORKLOADS}
    data = model.dataset(rows, sw["label_kib"], max_per_workload=s.max_windows,
                         seed=s.seed)
    out: dict[str, Any] = {"rows": int(len(data.y)), "classes_kib": dict(
        zip(data.workloads, data.classes_kib, strict=True)), "models": {}}
    with timer.stage("train"):
        for kind in model.KINDS:
            t = model.fit(data, kind, folds=s.folds, seed=s.seed,
                          **({"hidden": s.hidden} if kind == "mlp16" else
                             {"depth": s.depth} if kind == "tree" else {}))
            kib, rel = model.sizes_for_confusions(data, t.cv_pred, sw["ops_per_s"],
                                                  list(s.sizes),
                                                  start_kib=int(sw["default_kib"]))
            metrics = {**t.metrics, **rel}
            doc = model.model_doc(t.model, replace(data, classes_kib=kib))
            folder = run.path / "models" / f"kml_{kind}"
            save_readahead_model(folder, doc, metrics=metrics, workloads=list(data.workloads))
            mlflow.log_metrics({f"{kind}_{k}": v for k, v in metrics.items()})
            mlflow.log_artifacts(str(folder), artifact_path=f"models/kml_{kind}")
            out["models"][kind] = {"bundle": str(folder), **metrics, "classes_kib": dict(
                zip(data.workloads, kib, strict=True))}
            log.info("%s: %d-fold accuracy %.3f, of the readahead size %.3f (train %.3f) on "
                     "%d windows; class sizes %s for its confusions (held-out relative "
                     "throughput %.3f, with each class's own size %.3f)", kind,
                     int(metrics["cv_folds"]), metrics["cv_accuracy"],
                     metrics["cv_size_accuracy"], metrics["train_accuracy"], len(data.y),
                     out["models"][kind]["classes_kib"], rel["cv_relative_throughput"],
                     rel["cv_relative_throughput_own"])
    return run.record("train", out)


def compile_models(run: RunDir, s: KmlSettings, timer: Timer) -> dict[str, Any]:
    """Every model -> compiled/kml_<kind> (flashml_readahead_kib), and the shipped network
    (--network) again as compiled/kml; the .so's choice checked against the model's on every
    training window."""
    rec = run.done("compile")
    if rec is not None:
        return rec
    import numpy as np
    import polars as pl

    from flashml.compiler.build import compile_policy
    from flashml.compiler.loader import PolicyLibrary
    from flashml.compiler.readahead import predict_kib, read_readahead_model
    from flashml.features.readahead import contract

    tr = train(run, s, timer)
    x = pl.read_parquet(sweep(run, s, timer)["windows"]).select(
        list(contract().names)).to_numpy().astype(np.float64)
    out: dict[str, Any] = {}
    with timer.stage("compile"):
        for kind, name in [(k, f"kml_{k}") for k in tr["models"]] + [(s.network, "kml")]:
            src = Path(tr["models"][kind]["bundle"])
            dest = run.path / "compiled" / name
            manifest = compile_policy(dest, model_dir=src, log_to_mlflow=False)
            lib = PolicyLibrary(dest / "policy.so", need="readahead")
            doc = read_readahead_model(src / "readahead.json")
            agree = float(np.mean(lib.readahead_kib(x) == predict_kib(doc, x))) if len(x) else 1.0
            if agree < 1.0:
                raise UserError(f"{dest}/policy.so disagrees with its model on "
                                f"{1 - agree:.2%} of the windows")
            out[name] = {"dir": str(dest), "sha256": manifest["sha256"],
                         "model_bytes": _model_bytes(doc), "so_vs_model_agreement": agree}
    return run.record("compile", out)


def _model_bytes(doc: dict[str, Any]) -> int:
    """The model's tables in the .so: doubles (8 B) and ints (4 B)."""
    n = 2 * len(doc["mean"]) * 8 + len(doc["classes_kib"]) * 4
    if doc["kind"] == "mlp":
        n += sum(8 * (len(layer["biases"]) + sum(len(r) for r in layer["weights"]))
                 for layer in doc["layers"])
    else:
        n += len(doc["tree"]["left"]) * (4 * 4 + 8)
    return n


def evaluate(run: RunDir, s: KmlSettings, timer: Timer) -> dict[str, Any]:
    """Every workload under each tuner (TUNERS), alternating (run_order), `repeats` times,
    each run as long as the sweep's; the fixed baselines (FIXED) are the sweep's runs at
    their sizes (every run starts from the same database, testbed.Testbed.restore). Per
    workload and policy the runs, mean and 95% interval; per tuner its ratios to each
    baseline with their intervals and verdicts (flashml/systems/kml/stats.py); the tuners' runs'
    timelines (timelines.json) for the plots."""
    rec = run.done("evaluate")
    if rec is not None:
        return rec
    import statistics

    from flashml.files import atomic_path, dumps
    from flashml.systems.kml.stats import interval, ratio

    sw = sweep(run, s, timer)
    comp = compile_models(run, s, timer)
    per: dict[str, dict[str, list[float]]] = {}
    timelines: dict[str, dict[str, Any]] = {}
    decisions: dict[str, dict[str, dict[str, int]]] = {}
    tuner_ns: list[float] = []
    logs = run.path / "tuner_logs"
    logs.mkdir(parents=True, exist_ok=True)
    fixed_kib = {w: {"default": int(sw["default_kib"]), "linux_128": LINUX_KIB,
                     "best_fixed": int(sw["best_fixed_kib"][w])} for w in _workloads(s)}
    with timer.stage("evaluate"), _runner(run, s, sw["mode"]) as r:
        for w in _workloads(s):
            per[w] = {p: list(sw["runs"][w][str(fixed_kib[w][p])]) for p in FIXED}
            per[w] |= {p: [] for p in TUNERS}
            for rep in range(int(sw["repeats"])):
                for p in run_order(TUNERS, rep):
                    o = r.run(w, bundle=Path(comp[p]["dir"]),
                              log_to=logs / f"{w.replace(':', '_')}-{p}-{rep + 1}.jsonl")
                    d = decisions.setdefault(w, {}).setdefault(p, {})
                    for k, n in o.decisions.items():
                        d[k] = d.get(k, 0) + n
                    ns = o.extra.get("tuner", {}).get("mean_inference_ns")
                    if ns:
                        tuner_ns.append(float(ns))
                    per[w][p].append(o.ops_per_s)
                    if rep == 0:
                        timelines.setdefault(w, {})[p] = o.timeline
                log.info("evaluate %s repeat %d: %s", w, rep + 1, ", ".join(
                    f"{p} {per[w][p][-1]:.0f}" for p in TUNERS))
    workloads: dict[str, Any] = {}
    shipped_p = f"kml_{s.network}"
    for w, runs in per.items():
        stats = {p: {**interval(v), "runs": v} for p, v in runs.items()}
        ratios = {t: {b: ratio(runs[t], runs[b]) for b in FIXED} for t in TUNERS}
        workloads[w] = {
            "trained_on": w in TRAIN_WORKLOADS, "fixed_kib": fixed_kib[w],
            "best_fixed_kib": fixed_kib[w]["best_fixed"], "tied_kib": sw["tied_kib"][w],
            "policies": stats, "ratios": ratios, "decisions": decisions.get(w, {}),
            # the shipped tuner (--network) in short: means and ratios of geometric means
            "kml": stats[shipped_p]["mean"],
            **{b: stats[b]["mean"] for b in FIXED},
            **{f"kml_vs_{b}": ratios[shipped_p][b]["ratio"] for b in FIXED}}
    tl = run.path / "timelines.json"
    with atomic_path(tl) as tmp:
        Path(tmp).write_text(dumps(timelines) + "\n")
    return run.record("evaluate", {
        "workloads": workloads, "timelines": str(tl), "shipped": shipped_p,
        "tuner_mean_inference_ns": statistics.mean(tuner_ns) if tuner_ns else None})


def plots(run: RunDir, s: KmlSettings, timer: Timer) -> dict[str, Any]:
    """The paper's Figure 2 per workload (ops/s over time under each tuner, the fixed
    baselines' means as lines, and the readahead each tuner chose), and each tuner's ratios
    to the best fixed size and to Linux's 128 KiB with their 95% intervals."""
    rec = run.done("plots")
    if rec is not None:
        return rec
    import json

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ev = evaluate(run, s, timer)
    tls = json.loads(Path(ev["timelines"]).read_text())
    out_dir = run.path / "plots"
    out_dir.mkdir(parents=True, exist_ok=True)
    names = list(ev["workloads"])
    fig, axes = plt.subplots(2, len(names), figsize=(3.2 * len(names), 5), sharex="col",
                             squeeze=False)
    colours = {"default": "#999", "linux_128": "#8c564b", "best_fixed": "#2ca02c",
               "kml_paper": "#9467bd", "kml_mlp16": "#1f77b4", "kml_tree": "#ff7f0e"}
    for j, w in enumerate(names):
        top, bottom = axes[0][j], axes[1][j]
        for p in FIXED:
            top.axhline(ev["workloads"][w]["policies"][p]["mean"], color=colours[p], lw=0.8,
                        ls="--", label=p)
        for p in TUNERS:
            pts = tls.get(w, {}).get(p, [])
            if pts:
                top.plot([q["t"] for q in pts], [q["ops_per_s"] for q in pts], label=p,
                         color=colours[p], lw=1.2)
                bottom.step([q["t"] for q in pts], [q["readahead_kib"] for q in pts],
                            where="post", label=p, color=colours[p])
        top.set_title(w, fontsize=9)
        bottom.set_yscale("log", base=2)
        bottom.set_xlabel("time (s)")
    axes[0][0].set_ylabel("ops/s")
    axes[1][0].set_ylabel("readahead chosen (KiB)")
    axes[0][-1].legend(fontsize=6)
    fig.suptitle(f"KML ({sweep(run, s, timer)['mode']}): throughput and readahead over time")
    fig.tight_layout()
    fig2 = out_dir / "figure2_over_time.png"
    from flashml.jobs.report import save_figure

    save_figure(fig, fig2, dpi=110)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(9, 3.5))
    bars = [(t, b) for t in TUNERS for b in ("best_fixed", "linux_128")]
    width = 0.8 / len(bars)
    for i, (t, b) in enumerate(bars):
        rs = [ev["workloads"][w]["ratios"][t][b] for w in names]
        ax.bar([k + (i - (len(bars) - 1) / 2) * width for k in range(len(names))],
               [r["ratio"] for r in rs], width, label=f"{t} / {b}",
               yerr=[[r["ratio"] - r["lo"] for r in rs], [r["hi"] - r["ratio"] for r in rs]],
               capsize=2)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.axhline(0.95, color="k", lw=0.5, ls="--")
    ax.set_xticks(range(len(names)), names, rotation=15, fontsize=8)
    ax.set_yscale("log", base=2)
    ax.set_ylabel("ops/s ratio (95% interval)")
    ax.legend(fontsize=6, ncol=3)
    fig.tight_layout()
    ratios = out_dir / "ratios.png"
    save_figure(fig, ratios, dpi=110)
    plt.close(fig)
    return run.record_plots((fig2, ratios))


STAGES: tuple[Stage, ...] = (
    Stage("sweep", sweep),
    Stage("train", train),
    Stage("compile", compile_models),
    Stage("evaluate", evaluate),
    Stage("plots", plots),
)
Settings = KmlSettings


def run_name(s: KmlSettings) -> str:
    return f"kml-{s.mode}"


def mlflow_params(run: RunDir, s: KmlSettings) -> dict[str, Any]:
    return {"mode": s.mode, "network": s.network, "backend": s.backend,
            "device_bytes": s.device_bytes,
            "num": s.num, "memory_mib": s.memory_mib, "read_iops": s.read_iops,
            "read_mbps": s.read_mbps, "duration_s": s.duration_s,
            "reads": s.reads, "repeats": s.repeats,
            "sizes": ",".join(map(str, s.sizes)), "hidden": s.hidden,
            "depth": s.depth,
            "folds": s.folds, "max_windows": s.max_windows, "twin_requests": s.twin_requests,
            "twin_cache_pages": s.twin_cache_pages, "seed": s.seed,
            "trace": str(s.trace) if s.trace else "",
            "cpus": os.cpu_count() or 0}


# --- MLflow: the runs table's headline, the shipped bundle (flashml/jobs/ship.py) ----------


def shipped(run: RunDir, summary: dict[str, Any], s: KmlSettings) -> Path:
    """The shipped network's bundle (`compiled/kml`, a copy of compiled/kml_<--network>;
    the other network's and the tree's are beside it in the run's folder)."""
    return run.path / "compiled" / "kml"


def judged_on(run: RunDir, s: KmlSettings) -> str:
    what = f"the {s.mode} testbed" + (f" + {Path(s.trace).name}" if s.trace else "")
    return f"{what}, seed {s.seed}"
