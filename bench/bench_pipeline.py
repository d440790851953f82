"""Where the main job's time goes as traces grow: `flashml pipeline run` end to end
on generated region1-like traces of growing size, the time and peak memory of every stage.

    .venv/bin/python bench/bench_pipeline.py                      # 0.1 M and 1 M accesses
    .venv/bin/python bench/bench_pipeline.py --accesses 100000,1000000,10000000
    .venv/bin/python bench/bench_pipeline.py --accesses 100000 --sweep both
    .venv/bin/python bench/bench_pipeline.py --accesses 1000000 --sweep-workers 1,2
    .venv/bin/python bench/bench_pipeline.py --accesses 1000000 --sweep-workers 1,2 \
        --cores-per-worker 1
    .venv/bin/python bench/bench_pipeline.py --accesses 100000000 --days 7 --memory-limit 12

Each size runs in a fresh process (a run folder, MLflow and Optuna stores of its own under a
temporary FLASHML_HOME); the figures come from the run's summary.json (`timings_s`,
`peak_rss_mb`: this process's peak per stage, the Spark JVM not included), and the peaks of
the job's largest process and of its processes' resident sets summed (sampled every
0.2 s). `--sweep both` also runs each size with `--sweep-cold` (trials from scratch), the
sweep's cost before the warm start;
`--memory-limit 12 --days 7` runs a week-long trace's job in a memory cgroup of 12 GiB with
`--memory 12` (root; the row records the cgroup's peak, page cache included, its anonymous
memory's peak, and any OOM kill); `--sweep-workers 1,2` runs each with one and two sweep
processes; with `--cores-per-worker 1`
each run is pinned (taskset) to one core per worker, as that many one-core machines would run
it (on a 2-core VM the unpinned one-worker sweep already keeps 1.6 cores busy, so two
unpinned workers cannot beat ~0.8x of it whatever the code does).
Writes bench/results/pipeline.json and pipeline.png (seconds per stage vs accesses).

Before and after, side by side (`--compare REV`): the same job on the same traces with the code
of git revision REV (a temporary `git worktree`, imported through PYTHONPATH; the installed
simulator extension serves both, unless REV's crate differs: then its own is built into the
worktree) and with this tree, one seed after the other
(`--seeds 3,5`), each run's stage timings, the load average around it and its policy table;
this tree's runs start with an empty compile cache (FLASHML_CACHE_DIR), and the compile of
the run's bundle is then repeated with the cache it filled (a rerun with an unchanged model).
Recorded under `compare` in pipeline.json; the seed-3 run of this tree also replaces the
size's row under `runs`. Timings count only on a quiet machine: run it under
`flock /tmp/flashml-timing.lock`.

    flock /tmp/flashml-timing.lock .venv/bin/python bench/bench_pipeline.py \
        --accesses 1000000 --compare 6b42d71 --seeds 3,5
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from machine import machine  # noqa: E402

from flashml.files import write_json  # noqa: E402

OUT = ROOT / "bench" / "results" / "pipeline.json"
PLOT = ROOT / "bench" / "results" / "pipeline.png"
FLASHML = [sys.executable, "-m", "flashml.cli"]


def sizes(text: str) -> list[int]:
    try:
        out = [int(float(x)) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--accesses: not a list of counts: {text!r}") from None
    if not out or min(out) < 10_000:
        raise argparse.ArgumentTypeError("--accesses: counts of at least 10000")
    return out


def sizes_small(text: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of counts: {text!r}") from None
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError("counts of at least 1")
    return out


def proportional_mb(p: Any) -> float:
    """A process's proportional set size (PSS: each shared page split among the processes
    mapping it) in MiB, else its resident set: summed over a tree, resident sets count a page
    shared by two processes twice, and a child between fork and exec shares all of its
    parent's (the 10 M job's `git` call at the sweep's start once read as 2 x 2.3 GB)."""
    try:
        for line in Path(f"/proc/{p.pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return p.memory_info().rss / 2**20


class TreeMemory:
    """The peak of the summed proportional sets (`proportional_mb`) of a process and its
    descendants, and the largest resident set among them, sampled every `every` seconds on a
    thread until `stop` (psutil)."""

    def __init__(self, pid: int, every: float = 0.2) -> None:
        import threading

        self.peak_mb = 0.0
        self.largest_mb = 0.0
        self._done = threading.Event()
        self._every = every
        self._pid = pid
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import psutil

        try:
            root = psutil.Process(self._pid)
        except psutil.Error:
            return
        while not self._done.is_set():
            sizes, shares = [], []
            try:
                procs = [root, *root.children(recursive=True)]
            except psutil.Error:
                break
            for p in procs:
                try:
                    sizes.append(p.memory_info().rss / 2**20)
                    shares.append(proportional_mb(p))
                except psutil.Error:
                    pass
            self.peak_mb = max(self.peak_mb, sum(shares))
            self.largest_mb = max(self.largest_mb, *sizes, 0.0)
            self._done.wait(self._every)

    def stop(self) -> None:
        self._done.set()
        self._thread.join()


class MemoryCgroup:
    """A memory cgroup (v2 under /sys/fs/cgroup, else v1's memory controller) limited to
    `limit_gib`, for one job: `enter` is the child's preexec hook; `anon_peak_mb` is its
    anonymous memory's peak (sampled every second: the process's own, which the limit cannot
    take back), `peak_mb` the cgroup's own peak (page cache included, which the kernel
    reclaims at the limit, so it reaches the limit on any long job), `oom_kills` the kills."""

    def __init__(self, limit_gib: float) -> None:
        import threading

        name = f"flashml-bench-{os.getpid()}"
        v2 = Path("/sys/fs/cgroup/cgroup.controllers")
        if v2.exists():
            self.path, self.v2 = Path("/sys/fs/cgroup") / name, True
        else:
            self.path, self.v2 = Path("/sys/fs/cgroup/memory") / name, False
        try:
            self.path.mkdir()
            limit = str(int(limit_gib * 2**30))
            (self.path / ("memory.max" if self.v2 else "memory.limit_in_bytes")).write_text(limit)
        except OSError as e:
            raise SystemExit(f"--memory-limit needs a memory cgroup it can create "
                             f"({self.path}: {e}); run as root on Linux") from None
        self.limit_gib = limit_gib
        self.anon_peak_mb = 0.0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def enter(self) -> None:
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def _stat(self) -> dict[str, int]:
        out = {}
        for line in (self.path / "memory.stat").read_text().splitlines():
            k, v = line.split()
            out[k] = int(v)
        return out

    def _run(self) -> None:
        while not self._done.is_set():
            try:
                st = self._stat()
                anon = st.get("anon", st.get("total_rss", 0))
                self.anon_peak_mb = max(self.anon_peak_mb, anon / 2**20)
            except OSError:
                pass
            self._done.wait(1.0)

    def stop(self) -> dict[str, Any]:
        self._done.set()
        self._thread.join()
        if self.v2:
            peak = int((self.path / "memory.peak").read_text())
            events = dict(line.split() for line in
                          (self.path / "memory.events").read_text().splitlines())
            kills = int(events.get("oom_kill", 0))
        else:
            peak = int((self.path / "memory.max_usage_in_bytes").read_text())
            kills = int(dict(line.split() for line in (self.path / "memory.oom_control")
                             .read_text().splitlines()).get("oom_kill", 0))
        self.path.rmdir()
        return {"memory_limit_gib": self.limit_gib, "cgroup_peak_mb": round(peak / 2**20, 1),
                "anon_peak_mb": round(self.anon_peak_mb, 1), "oom_kills": kills}


def run_one(accesses: int, tmp: Path, *, cold: bool, trials: int, engine: str,
            workers: int = 1, cores_per_worker: int | None = None, seed: int = 3,
            code: Path | None = None, tag: str = "", days: float | None = None,
            memory_limit_gib: float | None = None) -> dict[str, Any]:
    """One `flashml pipeline run` on a generated region1-like trace of `accesses` (seed
    `seed`, `days` long: default the preset's), with this tree's code or, with `code`, that
    checkout's (PYTHONPATH); with `memory_limit_gib`, inside a memory cgroup of that limit
    and with the job's `--memory` at it."""
    span = f"-{days:g}d" if days else ""
    trace = tmp / f"region1-like-{accesses}-seed{seed}{span}.trace"
    if not trace.exists():
        subprocess.run([*FLASHML, "trace", "generate", "--preset", "region1-like", "--seed",
                        str(seed), "--accesses", str(accesses), "-o", str(trace),
                        *(["--days", f"{days:g}"] if days else [])], check=True,
                       cwd=ROOT, stdout=subprocess.DEVNULL)
    home = tmp / (f"home-{accesses}-{'cold' if cold else 'warm'}-{workers}-{cores_per_worker}"
                  f"-seed{seed}{tag}")
    out = home / "run"
    cmd = [*FLASHML, "pipeline", "run", "--trace", str(trace), "--out", str(out),
           "--engine", engine, "--sweep-trials", str(trials), "--sweep-workers", str(workers)]
    if cold:
        cmd.append("--sweep-cold")
    if memory_limit_gib:
        cmd += ["--memory", f"{memory_limit_gib:g}"]
    if cores_per_worker:  # the whole job on workers x N cores: N cores for each trial
        cmd = ["taskset", "-c", f"0-{workers * cores_per_worker - 1}", *cmd]
    env = {k: v for k, v in os.environ.items()
           if k not in ("MLFLOW_TRACKING_URI", "FLASHML_OPTUNA_STORAGE")}
    env["FLASHML_HOME"] = str(home)
    env["FLASHML_CACHE_DIR"] = str(home / "cache")  # empty: the run compiles everything
    if code is not None:
        env["PYTHONPATH"] = str(code)
    load_before = os.getloadavg()[0]
    log = tmp / f"{home.name}.log"
    t0 = time.perf_counter()
    cgroup = MemoryCgroup(memory_limit_gib) if memory_limit_gib else None
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, cwd=code or ROOT, env=env, stdout=f,
                                stderr=subprocess.STDOUT,
                                preexec_fn=cgroup.enter if cgroup else None)
        sampler = TreeMemory(proc.pid)
        # this run's own CPU time (wait4: the job and the processes it waited for), not the
        # total over every child the bench ran so far. (Not its ru_maxrss: the job resets its
        # high-water mark at every stage, /proc/self/clear_refs, and the kernel's maxrss
        # follows it, so it is the last stage's peak, not the run's: the sampler's is.)
        _, status, ru = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        sampler.stop()
    bounded = cgroup.stop() if cgroup else {}
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        tail = "\n".join(log.read_text().splitlines()[-20:])
        raise RuntimeError(f"pipeline run failed at {accesses} accesses:\n{tail}")
    # the job's processes' CPU time (user + system, its children included): what a busy
    # machine stretches less than the wall clock
    cpu = ru.ru_utime + ru.ru_stime
    summary = json.loads((out / "summary.json").read_text())
    sweep = (summary.get("sweep") or {})
    return {
        "accesses": accesses, "seed": seed, "days": days,
        "load_avg_1m_before": round(load_before, 2),
        "load_avg_1m_after": round(os.getloadavg()[0], 2),
        "sweep": "cold" if cold else "warm", "sweep_trials": trials,
        "sweep_workers": workers, "cores_per_worker": cores_per_worker,
        "engine": engine, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
        # the largest resident set of the job's processes (sampled)
        "peak_rss_process_tree_mb": round(sampler.largest_mb, 1),
        # the job's processes together (their proportional sets summed, sampled): the memory
        # the machine needs, a child's (the validation's, Spark's JVM) on top of the job's
        "peak_rss_sum_mb": round(sampler.peak_mb, 1),
        # in a memory cgroup (--memory-limit): its limit, peak, anonymous peak and OOM kills
        **bounded,
        "timings_s": summary.get("timings_s", {}),
        "peak_rss_mb": summary.get("peak_rss_mb", {}),
        "models_trained_per_trial": [t.get("models_trained") for t in sweep.get("trials", [])]
        if isinstance(sweep, dict) else None,
        # every trial's point of the TCO curve (to compare warm and cold sweeps point by point)
        "sweep_trials_detail": [{k: t.get(k) for k in (
            "number", "state", "target_write_rate_mbps", "write_rate_mbps", "peak_dt_util",
            "tco", "screen_tco", "converged", "models_trained", "start_eviction_age_s",
            "same_as_trial")}
            for t in sweep.get("trials", [])] if isinstance(sweep, dict) else None,
        "sweep_range_mbps": sweep.get("range_mbps") if isinstance(sweep, dict) else None,
        "chosen_write_rate_mbps": summary.get("chosen_write_rate_mbps"),
        "chosen_tco": summary.get("chosen_tco"),
        "baleen_peak_dt_util": (summary.get("policies", {}).get("baleen") or {})
        .get("peak_dt_util"),
        # every policy's figures at the target, to compare runs (same summary within noise)
        "policies": {name: {k: m.get(k) for k in ("peak_dt_util", "flash_write_rate_mbps",
                                                  "tco")}
                     for name, m in (summary.get("policies") or {}).items()},
        "compiled_sha256": (summary.get("compiled") or {}).get("sha256"),
        "run_dir": str(out),
    }


def compile_again(run: dict[str, Any]) -> dict[str, Any]:
    """Compile a finished run's policy bundle once more with the compile cache its run
    filled (this tree's code): what a rerun with an unchanged model costs."""
    out = Path(run["run_dir"])
    env = dict(os.environ, FLASHML_HOME=str(out.parent),
               FLASHML_CACHE_DIR=str(out.parent / "cache"))
    dest = out.parent / "compiled-again"
    t0 = time.perf_counter()
    subprocess.run([*FLASHML, "compile", "--model-dir", str(out / "policy"), "-o", str(dest),
                    "--no-log"], check=True, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    m = json.loads((dest / "manifest.json").read_text())
    return {"wall_s": round(wall, 2), "compile_s": round(m["build"]["compile_s"], 2),
            "object_cache": m["build"].get("object_cache"), "sha256": m["sha256"]}


def same_results(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """How far two runs' figures are apart: every policy's peak DT, write rate and TCO, and
    the sweep's choice (0.0 everywhere: the same results)."""
    def rel(x: Any, y: Any) -> float:
        if x is None or y is None:
            return float("nan") if x is not y else 0.0
        return abs(float(x) - float(y)) / max(abs(float(x)), 1e-12)

    diffs = {f"{n}.{k}": rel(m.get(k), b["policies"].get(n, {}).get(k))
             for n, m in a["policies"].items() for k in m}
    diffs["chosen_write_rate_mbps"] = rel(a["chosen_write_rate_mbps"],
                                          b["chosen_write_rate_mbps"])
    diffs["chosen_tco"] = rel(a["chosen_tco"], b["chosen_tco"])
    worst = max(diffs, key=lambda k: diffs[k] if diffs[k] == diffs[k] else float("inf"))
    return {"identical": all(v == 0.0 for v in diffs.values()),
            "max_relative_difference": diffs[worst], "where": worst}


def own_simulator(base: Path, rev: str, tmp: Path) -> None:
    """When `rev`'s simulator crate differs from this tree's, build its extension and unpack
    it into the checkout `base`, ahead of the installed one on its PYTHONPATH (the crate's
    Python binding changes with its callers)."""
    same = subprocess.run(["git", "diff", "--quiet", rev, "--", "sim/"], cwd=ROOT).returncode
    if same == 0:
        return
    import zipfile

    print(f"pipeline: building {rev}'s simulator extension ...", flush=True)
    wheels = tmp / f"wheels-{rev}"
    subprocess.run([str(Path(sys.executable).parent / "maturin"), "build", "--release",
                    "-q", "-m", str(base / "sim" / "Cargo.toml"), "-o", str(wheels)],
                   check=True, cwd=base)
    (wheel,) = wheels.glob("*.whl")
    with zipfile.ZipFile(wheel) as z:
        z.extractall(base, [n for n in z.namelist() if n.startswith("flashml_sim/")])


def compare(args: argparse.Namespace, tmp: Path, commit: str) -> dict[str, Any]:
    """The job with the code of `args.compare` and with this tree, side by side per seed."""
    rev = subprocess.run(["git", "rev-parse", "--short", args.compare], cwd=ROOT, text=True,
                         capture_output=True, check=True).stdout.strip()
    base = tmp / f"baseline-{rev}"
    subprocess.run(["git", "worktree", "add", "--detach", str(base), rev], cwd=ROOT,
                   check=True, capture_output=True)
    rows = []
    try:
        own_simulator(base, rev, tmp)
        for n in args.accesses:
            for seed in args.seeds:
                pair: dict[str, Any] = {"accesses": n, "seed": seed}
                for side, code in (("before", base), ("after", None)):
                    print(f"pipeline: {n:,} accesses, seed {seed}, {side} "
                          f"({rev if code else commit}) ...", flush=True)
                    r = run_one(n, tmp, cold=False, trials=args.sweep_trials,
                                engine=args.engine, seed=seed, code=code, tag=f"-{side}")
                    r["commit"] = rev if code else commit
                    r["measured_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                    print(f"  {r['wall_s']:.0f} s (load {r['load_avg_1m_before']:.1f} -> "
                          f"{r['load_avg_1m_after']:.1f})", flush=True)
                    pair[side] = r
                pair["compile_again"] = compile_again(pair["after"])
                pair["results"] = same_results(pair["before"], pair["after"])
                pair["speedup"] = round(pair["before"]["wall_s"] / pair["after"]["wall_s"], 2)
                print(f"  after/before: {pair['speedup']:.2f}x faster; compile again "
                      f"{pair['compile_again']['compile_s']:.1f} s; same results: "
                      f"{pair['results']['identical']}", flush=True)
                rows.append(pair)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT,
                       capture_output=True)
    return {"baseline_commit": rev, "commit": commit, "runs": rows}


def plot(runs: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # one line per stage over the job's default runs (warm sweep, one worker on every core);
    # the episode stage's name carries its eviction age, which differs by size
    warm = [r for r in runs if r["sweep"] == "warm" and (r.get("sweep_workers") or 1) == 1
            and not r.get("cores_per_worker")]
    if len(warm) < 1:
        return

    def times(r: dict[str, Any]) -> dict[str, float]:
        return {re.sub(r" at eviction age \d+ s", "", k): v for k, v in r["timings_s"].items()}

    stages = sorted({k for r in warm for k in times(r)},
                    key=lambda k: -max(times(r).get(k, 0) for r in warm))[:10]
    fig, ax = plt.subplots(figsize=(10, 5))
    xs = [r["accesses"] for r in warm]
    for st in stages:
        ax.plot(xs, [times(r).get(st, 0) for r in warm], marker="o", label=st)
    ax.plot(xs, [r["wall_s"] for r in warm], "k--", marker="s", label="whole job")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("accesses in the trace")
    ax.set_ylabel("seconds (wall clock)")
    ax.set_title("flashml pipeline run: time per stage (10 slowest)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    fig.savefig(PLOT, dpi=110)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--accesses", type=sizes, default=[100_000, 1_000_000],
                    help="comma-separated trace sizes (default 100000,1000000)")
    ap.add_argument("--sweep", choices=["warm", "cold", "both"], default="warm",
                    help="sweep trials from the main loop's state (warm, the default), from "
                    "scratch (cold), or both side by side")
    ap.add_argument("--sweep-trials", type=int, default=6, help="Optuna trials (default 6)")
    ap.add_argument("--sweep-workers", type=sizes_small, default=[1],
                    help="comma-separated worker counts to run side by side (e.g. 1,2)")
    ap.add_argument("--cores-per-worker", type=int, default=None, metavar="N",
                    help="pin each run to N cores per sweep worker (taskset): N workers' "
                    "runs as N machines of N cores each would run them, e.g. 1 with "
                    "--sweep-workers 1,2 on two cores (default: every run on all cores)")
    ap.add_argument("--engine", default="auto", choices=["auto", "spark", "polars"],
                    help="episode engine of the job (default auto, as the job's default)")
    ap.add_argument("--compare", metavar="REV", default=None,
                    help="run each size and seed with the code of git revision REV and with "
                    "this tree, side by side (pipeline.json `compare`)")
    ap.add_argument("--seeds", type=sizes_small, default=[3],
                    help="comma-separated trace seeds for --compare (default 3)")
    ap.add_argument("--days", type=float, default=None,
                    help="length of the generated traces in days (default: the preset's, 3)")
    ap.add_argument("--memory-limit", type=float, default=None, metavar="GIB",
                    help="run each job in a memory cgroup of GIB GiB (root, Linux) with "
                    "`--memory GIB`: the run records the cgroup's peak, its anonymous "
                    "memory's peak and any OOM kill")
    args = ap.parse_args()
    modes = {"warm": [False], "cold": [True], "both": [False, True]}[args.sweep]
    runs = []
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                            capture_output=True).stdout.strip() or "unknown"
    previous = json.loads(OUT.read_text()) if OUT.exists() else {}
    if args.compare:
        with tempfile.TemporaryDirectory(prefix="flashml-bench-pipeline-") as tmp:
            cmp = compare(args, Path(tmp), commit)
        for row in cmp["runs"]:
            for side in ("before", "after"):
                row[side].pop("run_dir", None)
        # this tree's seed-3 run (the bench's default trace) stands for its size in `runs`
        runs = [dict(row["after"]) for row in cmp["runs"] if row["seed"] == 3]
        for r in runs:
            r["sweep_workers"], r["cores_per_worker"] = 1, None
        key = ("accesses", "sweep", "sweep_workers", "cores_per_worker", "memory_limit_gib")

        def of_(r: dict[str, Any]) -> tuple[Any, ...]:
            return tuple(r.get(k) or (0 if k in ("cores_per_worker", "memory_limit_gib") else 1)
                         for k in key)

        new = {of_(r) for r in runs}
        kept = [r for r in previous.get("runs", []) if of_(r) not in new]
        # the pairs of other sizes or seeds measured before stay (each names its commits)
        pairs = {(r["accesses"], r["seed"]) for r in cmp["runs"]}
        old = [r for r in (previous.get("compare") or {}).get("runs", [])
               if (r["accesses"], r["seed"]) not in pairs]
        cmp["runs"] = sorted(old + cmp["runs"], key=lambda r: (r["accesses"], r["seed"]))
        write_json(OUT, {"machine": machine(), "runs": sorted(kept + runs, key=of_),
                         "compare": cmp})
        plot(sorted(kept + runs, key=of_))
        print(f"pipeline: {len(cmp['runs'])} before/after pairs -> {OUT.relative_to(ROOT)}")
        return 0
    with tempfile.TemporaryDirectory(prefix="flashml-bench-pipeline-") as tmp:
        for n, cold, w in [(n, c, w) for n in args.accesses for c in modes
                           for w in args.sweep_workers]:
            print(f"pipeline: {n:,} accesses, sweep {'cold' if cold else 'warm'}, {w} "
                  "worker(s) ...", flush=True)
            r = run_one(n, Path(tmp), cold=cold, trials=args.sweep_trials,
                        engine=args.engine, workers=w, cores_per_worker=args.cores_per_worker,
                        days=args.days, memory_limit_gib=args.memory_limit)
            top = sorted(r["timings_s"].items(), key=lambda kv: -kv[1])[:4]
            print(f"  {r['wall_s']:.0f} s; slowest: "
                  + ", ".join(f"{k} {v:.0f} s" for k, v in top), flush=True)
            r["commit"] = commit
            r["measured_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            r.pop("run_dir", None)
            runs.append(r)
    # runs of other sizes or modes measured before are kept (each says its commit and time)
    key = ("accesses", "sweep", "sweep_workers", "cores_per_worker", "memory_limit_gib")

    def of(r: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(r.get(k) or (0 if k in ("cores_per_worker", "memory_limit_gib") else 1)
                         for k in key)

    new = {of(r) for r in runs}
    kept = [r for r in previous.get("runs", []) if of(r) not in new]
    runs = sorted(kept + runs, key=of)
    write_json(OUT, {"machine": machine(), "runs": runs,
                     **({"compare": previous["compare"]} if "compare" in previous else {})})
    plot(runs)
    print(f"pipeline: {len(runs)} runs -> {OUT.relative_to(ROOT)}, {PLOT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
