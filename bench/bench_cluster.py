"""The scaled-out topology run natively (scripts/cluster.sh): what starting it costs, what
the main job costs scaled out against the same job embedded on the same cores, the sweep
with two worker processes against one, the DAG under the real Airflow scheduler against
`dag.test()`, and what the faults a cluster has lose.

    .venv/bin/python bench/bench_cluster.py                     # the demo trace
    .venv/bin/python bench/bench_cluster.py --accesses 1000000  # a generated 1 M-access trace
    .venv/bin/python bench/bench_cluster.py --render            # only re-render the docs

1. `scripts/cluster.sh up` in a fresh state folder: wall seconds until every health endpoint
   answers (Postgres, the MLflow server, the Spark master with 2 workers, Airflow's
   api-server, scheduler and dag-processor);
2. `flashml pipeline run` embedded (sqlite MLflow and Optuna stores, Polars episodes) and
   then with the cluster's variables (MLflow server, Optuna on Postgres, episodes on the
   Spark cluster), same trace, seed and options (`--sweep-trials 2 --sweep-workers 2`):
   wall seconds of each, their stages' timings, and whether the summaries are equal
   (every policy's metrics, convergence, episodes, the sweep's trials);
3. the same scaled-out job with `--sweep-workers 1`: its sweep stage against step 2's;
4. `flashml_retrain` triggered through Airflow's REST API and run by the scheduler (wall
   seconds from the trigger to the run's end, each task's duration), and the same DAG run
   by `dag.test()` in one process (a sqlite Airflow database, no cluster);
5. the faults (scripts/cluster_faults.py), each on the scaled-out main job or DAG: the MLflow
   server restarted during the sweep, the scheduler killed mid-DAG (in `train`) and
   restarted, a Spark worker killed with its executor during the episodes stage; for each,
   the runs on the MLflow server, the trials in the Optuna study and the artifacts on the
   artifact store that were lost (counted by `cluster_faults.tally`);
6. `scripts/cluster.sh down`: wall seconds, and that no recorded process is left.

Writes bench/results/cluster.json (with the machine and its load average at each step: the
VM is shared) and renders its figures into docs/how-to/scale-out.md and README.md's
"Scaling out" section."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "scripts"))

import cluster_check  # noqa: E402
import cluster_faults  # noqa: E402
from machine import machine  # noqa: E402

from flashml.files import write_json  # noqa: E402

OUT = ROOT / "bench" / "results" / "cluster.json"
SCRIPT = ROOT / "scripts" / "cluster.sh"
FLASHML = [sys.executable, "-m", "flashml.cli"]
CLIENT_VARS = ("MLFLOW_TRACKING_URI", "FLASHML_OPTUNA_STORAGE", "FLASHML_SPARK_MASTER",
               "FLASHML_HOME", "FLASHML_RETRAIN_DIR", "FLASHML_EXPORT_DIR", "AIRFLOW_HOME")


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in CLIENT_VARS and not k.startswith(("AIRFLOW__", "FLASHML_CLUSTER_"))}
    return env | extra


def timed(cmd: list[str], env: dict[str, str], cwd: Path) -> float:
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return round(time.monotonic() - t0, 2)


JOB_OPTIONS = ["--sweep-trials", "2", "--sweep-workers", "2"]
DAG_CONF = {"sweep_trials": 2, "sweep_workers": 2}


def job(out: Path, trace: list[str], env: dict[str, str], cwd: Path,
        options: list[str] = JOB_OPTIONS) -> dict[str, Any]:
    wall = timed([*FLASHML, "pipeline", "run", "--out", str(out), *trace, *options], env, cwd)
    summary = json.loads((out / "summary.json").read_text())
    return {"wall_s": wall, "job_s": summary["seconds"], "stages_s": summary["timings_s"],
            "engine": summary["episodes"]["engine"], "summary": summary}


def load() -> float:
    return round(os.getloadavg()[0], 2)


def sweep_s(stages: dict[str, float]) -> float | None:
    return next((v for k, v in stages.items() if k.startswith("sweep")), None)


DAG_TEST_DRIVER = r"""
import json, runpy, sys, time

import pendulum

cfg = json.loads(sys.argv[1])
dag = runpy.run_path(cfg["dag_file"])["dag_object"]
t0 = time.monotonic()
dr = dag.test(run_conf=cfg["conf"], logical_date=pendulum.datetime(2026, 1, 2, tz="UTC"))
print("RESULT " + json.dumps({"state": str(dr.state), "wall_s": time.monotonic() - t0}))
"""


def dag_test(tmp: Path, conf: dict[str, Any]) -> dict[str, Any]:
    """flashml_retrain by `dag.test()` in one process: a sqlite Airflow database (migrated
    first, not timed) and embedded stores, no cluster."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AIRFLOW", "FLASHML_", "MLFLOW_"))}
    env |= {"AIRFLOW_HOME": str(tmp / "airflow"), "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "FLASHML_HOME": str(tmp / "state")}
    subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"], env=env,
                   check=True, capture_output=True)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", DAG_TEST_DRIVER, json.dumps(
        {"dag_file": str(ROOT / "dags" / "flashml_retrain.py"), "conf": conf})],
        env=env, cwd=tmp, capture_output=True, text=True)
    if proc.returncode != 0 or "RESULT " not in proc.stdout:
        raise RuntimeError(f"dag.test() failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    res = json.loads(proc.stdout.split("RESULT ", 1)[1].splitlines()[0])
    return {"state": res["state"].removeprefix("DagRunState.").lower(),
            "wall_s": round(res["wall_s"], 1),
            "process_wall_s": round(time.monotonic() - t0, 1)}


def lost(t: dict[str, Any]) -> dict[str, Any]:
    """A tally's counts (cluster_faults.tally), with what was lost if anything."""
    out = {"runs": t["runs"], "trials": t["trials"], "artifacts": t["artifacts"],
           "lost_runs": len(t["lost_runs"]), "lost_trials": t["lost_trials"],
           "lost_artifacts": len(t["lost_artifacts"]),
           "duplicate_trial_runs": t["duplicate_trial_runs"]}
    if t["lost_runs"] or t["lost_artifacts"]:
        out["lost"] = t["lost_runs"] + t["lost_artifacts"]
    return out


def save(res: dict[str, Any], done: bool = False) -> None:
    """cluster.json as measured so far (`"complete": false` until the last step)."""
    write_json(OUT, res | {"complete": done,
                           "machine_load_avg_1m_after": os.getloadavg()[0]})


def step(res: dict[str, Any], name: str, fn: Any) -> None:
    """res[name] = fn() with the load average before it; an error is recorded, not raised
    (the other steps still run)."""
    la = load()
    t0 = time.monotonic()
    try:
        res[name] = fn() | {"load_avg_1m": la}
    except Exception as e:  # recorded in the results, shown by the render
        res[name] = {"error": f"{type(e).__name__}: {str(e)[-1500:]}", "load_avg_1m": la}
    print(f"{name}: {time.monotonic() - t0:.0f} s", {k: v for k, v in res[name].items()
                                                     if not isinstance(v, dict)},
          file=sys.stderr, flush=True)
    if ROOT_RES:
        save(ROOT_RES[0])


#: the results being measured (saved after each step)
ROOT_RES: list[dict[str, Any]] = []


DOC = ROOT / "docs" / "how-to" / "scale-out.md"
BEGIN = "<!-- cluster: begin (bench/bench_cluster.py --render renders this from " \
    "bench/results/cluster.json) -->"
END = "<!-- cluster: end -->"
README = ROOT / "README.md"
README_BEGIN = "<!-- scale-out: begin (bench/bench_cluster.py --render renders this from " \
    "bench/results/cluster.json) -->"
README_END = "<!-- scale-out: end -->"
FAULTS = {"mlflow_restart_during_sweep": "MLflow server restarted during the sweep",
          "scheduler_killed_mid_dag": "scheduler killed (SIGKILL) in `train`, restarted",
          "spark_worker_killed_mid_episodes": "Spark worker killed with its executor "
          "during the episodes"}


def _fault_row(key: str, f: dict[str, Any]) -> tuple[str, str]:
    if "error" in f:
        return FAULTS[key], f"FAILED: {f['error'][:200]}"
    t = f["tally"]
    detail = {"mlflow_restart_during_sweep":
              lambda: f"server down {f['server_down_s']:.0f} s, {f['retries_logged']} "
              "retries logged",
              "scheduler_killed_mid_dag":
              lambda: f"killed {f['killed_at_s']:.0f} s after the trigger, restarted "
              f"{f['restarted_at_s'] - f['killed_at_s']:.0f} s later; `train` tries: "
              f"{f['train_tries']}",
              "spark_worker_killed_mid_episodes":
              lambda: f"worker {f['worker']} killed {f['killed_at_s']:.0f} s into the job"}
    equal = f.get("summary_equal")
    return (FAULTS[key],
            f"{f['state']} in {f['wall_s']:.0f} s ({detail[key]()}"
            + ("" if equal is None else f"; summary equal: {'yes' if equal else 'NO'}")
            + f"); lost: {t['lost_runs']} of {t['runs']} runs, {t['lost_trials']} of "
            f"{t['trials']} trials, {t['lost_artifacts']} of {t['artifacts']} artifacts"
            + (f" ({f['source']})" if f.get("source") else ""))


def training_note(m: dict[str, Any]) -> str:
    """The training stage of both runs (the same code in the job's process either way): how
    much of the jobs' ratio is the machine's load."""
    key = "convergence + training (baleen)"
    e, c = m["embedded_stages_s"].get(key), m["scaled_out_stages_s"].get(key)
    if e is None or c is None:
        return "compare the stages the scaled-out path changes rather than the totals."
    return (f"the training stage, the same code in the job's process in both runs, took "
            f"{e:.0f} s embedded and {c:.0f} s scaled out, so the totals' ratio mostly "
            "measures the load; the stages the scaled-out path changes are its cost.")


def path_cost(m: dict[str, Any]) -> str:
    """The stages the scaled-out path changes, embedded against scaled out: the episodes
    (Polars in the job's process, or a Spark session and the episodes on the workers), the
    sweep (sqlite or Postgres study), logging the model (local store or the server)."""
    e, c = m["embedded_stages_s"], m["scaled_out_stages_s"]

    def pick(d: dict[str, float], prefix: str) -> float:
        return sum(v for k, v in d.items() if k.startswith(prefix))

    eps_e = pick(e, "episodes")
    eps_c = pick(c, "episodes") + c.get("spark session", 0.0)
    parts = [f"episodes {eps_e:.0f} s → {eps_c:.0f} s (Spark start included)",
             f"sweep {pick(e, 'sweep'):.0f} s → {pick(c, 'sweep'):.0f} s",
             f"logging the model {pick(e, 'log the'):.1f} s → {pick(c, 'log the'):.1f} s"]
    return "; ".join(parts)


def _s(x: Any) -> str:
    return f"{x:.0f} s" if isinstance(x, (int, float)) else "not measured"


def render(res: dict[str, Any]) -> str:
    """The figures block of docs/how-to/scale-out.md from cluster.json."""
    m, d = res["main_job"], res.get("dag", {})
    size = res.get("accesses_label") or res["accesses"]
    tasks = ", ".join(f"{t} {v['duration_s']:.0f}" for t, v in d.get("tasks", {}).items()
                      if v.get("duration_s") is not None)
    spark = {k: v for k, v in m["scaled_out_stages_s"].items()
             if k == "spark session" or k.startswith("episodes")}
    rows = [
        ("start-up (`cluster.sh up`, every health endpoint answering)",
         f"{res['startup_s']:.0f} s"),
        (f"main job, {res['job_options']}, {size}: embedded / scaled out",
         f"{m['embedded_s']:.0f} s / {m['scaled_out_s']:.0f} s "
         f"(x{m['scaled_out_over_embedded']:.2f}); summaries equal: "
         f"{'yes' if m['summaries_equal'] else 'NO'}"),
        ("of which Spark (session start, episodes on 2 workers)",
         ", ".join(f"{'start' if k == 'spark session' else k}: {v:.0f} s"
                   for k, v in spark.items())),
        ("the stages the scaled-out path changes, embedded → scaled out", path_cost(m)),
    ]
    sw = res.get("sweep_workers", {})
    if "error" in sw:
        rows.append(("sweep on the cluster, 2 worker processes / 1",
                     f"FAILED: {sw['error'][:200]}"))
    elif sw:
        rows.append(("sweep stage on the cluster (2 trials), 2 worker processes / 1",
                     f"{_s(sw['two_s'])} / {_s(sw['one_s'])} (job {sw['job_two_s']:.0f} s / "
                     f"{sw['job_one_s']:.0f} s)"))
    if d:
        rows.append(("`flashml_retrain` under the scheduler (trigger to end)",
                     f"FAILED: {d['error'][:200]}" if "error" in d else
                     f"{d['wall_s']:.0f} s, {d['state']}; tasks (s): {tasks}"))
    dt = res.get("dag_test", {})
    if "error" in dt:
        rows.append(("the same DAG by `dag.test()` (one process, no cluster)",
                     f"FAILED: {dt['error'][:200]}"))
    elif dt and "wall_s" in d:
        rows.append(("the same DAG by `dag.test()` (one process, no cluster)",
                     f"{dt['wall_s']:.0f} s, {dt['state']}; the scheduler's run takes "
                     f"x{d['wall_s'] / dt['wall_s']:.2f}"))
    for key in FAULTS:
        if key in res.get("faults", {}):
            rows.append(_fault_row(key, res["faults"][key]))
        else:
            rows.append((FAULTS[key], "not measured by the bench (out of time)"))
    if "faults_lost" in res:
        fl = res["faults_lost"]
        rows.append((f"lost across the {fl.get('faults', 3)} faults measured",
                     f"**{fl['runs']} runs, {fl['trials']} trials, {fl['artifacts']} "
                     "artifacts**"))
    if "down_s" in res:
        rows.append(("`cluster.sh down`",
                     f"{res['down_s']:.0f} s, {res['processes_left']} processes left"))
    if not res.get("complete", True):
        names = {"sweep_workers": "the sweep with 1 worker process",
                 "dag": "the DAG under the scheduler", "dag_test": "`dag.test()`"}
        missing = [v for k, v in names.items() if k not in res]
        if missing:
            rows.append(("not measured (out of time)", ", ".join(missing)))
    mach = res["machine"]
    loads = [v["load_avg_1m"] for v in res.values() if isinstance(v, dict)
             and "load_avg_1m" in v and v is not mach]
    lines = [BEGIN, "", "| what | measured |", "|---|---|",
             *(f"| {a} | {b} |" for a, b in rows), "",
             f"Measured by `bench/bench_cluster.py` on {mach['cores']} cores ({mach['cpu']}) "
             f"shared with other jobs: load average {mach['load_avg_1m']:.1f} at the start"
             + (f", {min(loads):.1f}-{max(loads):.1f} over the steps" if loads else "")
             + f", {res['machine_load_avg_1m_after']:.1f} at the end. Every wall time above "
             "is inflated by that load and moves with it from one step to the next: "
             + training_note(m) + (
                 f" {res['size_note']}" if res.get("size_note") else ""),
             "", END]
    return "\n".join(lines)


def render_readme(res: dict[str, Any]) -> str:
    """README.md's "Scaling out" figures from cluster.json."""
    m, d, dt = res["main_job"], res.get("dag", {}), res.get("dag_test", {})
    fl = res.get("faults_lost")
    which = (fl or {}).get("which", "MLflow restarted mid-sweep, scheduler killed mid-DAG, "
                                    "a Spark worker killed mid-episodes")
    parts = [README_BEGIN,
             "```",
             "scripts/cluster.sh up                    # Postgres, MLflow server, Spark "
             "master + 2 workers, Airflow",
             "set -a; . .flashml/cluster/cluster.env; set +a",
             "flashml pipeline run --sweep-workers 2   # episodes on Spark, sweep on "
             "Postgres, MLflow server",
             "scripts/cluster.sh stop mlflow --kill    # one service down (a crash); "
             "start brings it back",
             "scripts/cluster.sh start mlflow",
             "scripts/cluster.sh down                  # no process, no port left",
             "make cluster-test                        # the jobs, the DAG and the faults",
             "```",
             "",
             f"Measured ({res.get('accesses_label') or res['accesses']}, 2 shared cores, "
             "load average "
             f"{res['machine']['load_avg_1m']:.0f}): start-up **{res['startup_s']:.0f} s**; "
             f"the main job scaled out {m['scaled_out_s']:.0f} s vs "
             f"{m['embedded_s']:.0f} s embedded (same summary: "
             f"{'yes' if m['summaries_equal'] else 'NO'}; the totals follow the load), the "
             f"stages the scaled-out path changes: {path_cost(m)}; the DAG under the "
             f"scheduler {_s(d.get('wall_s'))}"
             + (f" vs {dt['wall_s']:.0f} s by `dag.test()`" if "wall_s" in dt else "")
             + ("" if fl is None else
                f"; lost across {fl.get('faults', 3)} faults ({which}): **{fl['runs']} "
                f"runs, {fl['trials']} trials, {fl['artifacts']} artifacts**") + ".",
             README_END]
    return "\n".join(parts)


def _replace(path: Path, begin: str, end: str, block: str) -> None:
    text = path.read_text()
    head, rest = text.split(begin, 1)
    path.write_text(head + block + rest.split(end, 1)[1])


def write_doc(res: dict[str, Any]) -> None:
    _replace(DOC, BEGIN, END, render(res))
    _replace(README, README_BEGIN, README_END, render_readme(res))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--accesses", type=int, default=None,
                    help="generate a region1-like trace of this many accesses (default: the "
                    "job's demo trace)")
    ap.add_argument("--render", action="store_true",
                    help="only render the docs' and README's figures from cluster.json")
    ap.add_argument("--size-note", default="",
                    help="a sentence on the trace size, shown under the figures")
    args = ap.parse_args()
    if args.render:
        write_doc(json.loads(OUT.read_text()))
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    state = tmp / "cluster"
    env = clean_env(FLASHML_CLUSTER_DIR=str(state))
    trace: list[str] = []
    if args.accesses:
        path = tmp / f"region1-like-{args.accesses}.trace"
        subprocess.run([*FLASHML, "trace", "generate", "--preset", "region1-like", "--seed",
                        "0", "--accesses", str(args.accesses), "-o", str(path)], check=True,
                       cwd=ROOT, stdout=subprocess.DEVNULL)
        trace = ["--trace", str(path)]
    res: dict[str, Any] = {"machine": machine(), "accesses": args.accesses or "demo trace",
                           "accesses_label": f"{args.accesses / 1e6:g} M accesses"
                           if args.accesses else "the demo trace",
                           "size_note": args.size_note,
                           "job_options": " ".join(JOB_OPTIONS)}
    conf = DAG_CONF | ({"accesses": args.accesses} if args.accesses else {})
    ROOT_RES.append(res)
    try:
        res["startup_s"] = timed(["bash", str(SCRIPT), "up"], env, ROOT)
        client = {k: v.strip("'") for k, v in (line.split("=", 1) for line in
                  (state / "cluster.env").read_text().splitlines()
                  if line and not line.startswith("#"))}
        cenv = clean_env() | client
        res["load_avg_1m_up"] = load()
        embedded = job(tmp / "embedded", trace, clean_env(FLASHML_HOME=str(tmp / "home")), tmp)
        la = load()
        scaled = job(tmp / "scaled", trace, cenv, tmp)
        res["main_job"] = {
            "embedded_s": embedded["wall_s"], "scaled_out_s": scaled["wall_s"],
            "scaled_out_over_embedded": round(scaled["wall_s"] / embedded["wall_s"], 2),
            "engines": [embedded["engine"], scaled["engine"]],
            "summaries_equal": cluster_check.steady(scaled["summary"])
            == cluster_check.steady(embedded["summary"]),
            "embedded_stages_s": embedded["stages_s"], "scaled_out_stages_s": scaled["stages_s"],
            "load_avg_1m": la,
        }
        ref = cluster_check.steady(embedded["summary"])
        save(res)
        ref_artifacts = cluster_faults.artifact_paths(client, scaled["summary"]["mlflow_run_id"])
        dag_artifacts: set[str] = set(cluster_faults.DAG_ARTIFACTS)

        def one_worker() -> dict[str, Any]:
            one = job(tmp / "scaled-1", trace, cenv, tmp,
                      ["--sweep-trials", "2", "--sweep-workers", "1"])
            return {"two_s": sweep_s(scaled["stages_s"]), "one_s": sweep_s(one["stages_s"]),
                    "job_two_s": scaled["wall_s"], "job_one_s": one["wall_s"],
                    "summary_equal": cluster_check.steady(one["summary"]) == ref}

        step(res, "sweep_workers", one_worker)
        os.environ.update(client)

        def dag() -> dict[str, Any]:
            r = cluster_check.run_dag("flashml_retrain", conf)
            folder = cluster_faults.dag_run_folder(client, r["run"]["dag_run_id"])
            dag_artifacts.update(cluster_faults.artifact_paths(
                client, cluster_faults.dag_run_ids(folder)[0]))
            return {"state": r["run"]["state"], "wall_s": round(r["wall_s"], 1),
                    "tasks": {t: {"state": ti["state"], "duration_s": ti.get("duration"),
                                  "tries": ti.get("try_number")}
                              for t, ti in r["tasks"].items()}}

        faults: dict[str, Any] = {}
        res["faults"] = faults

        def mlflow_fault() -> dict[str, Any]:
            r = cluster_faults.restart_mlflow_during_sweep(state, cenv, tmp / "fault-mlflow",
                                                           [*trace, *JOB_OPTIONS])
            summ = r["summary"]
            t = cluster_faults.tally(client, state, summ["mlflow_run_id"], r["study"], 2,
                                     want_artifacts=ref_artifacts)
            return {"state": "success", "wall_s": round(r["wall_s"], 1),
                    "server_down_s": round(r["server_down_s"], 1),
                    "retries_logged": r["retries_logged"], "first_retry": r["first_retry"],
                    "summary_equal": cluster_check.steady(summ) == ref, "tally": lost(t)}

        def scheduler_fault() -> dict[str, Any]:
            r = cluster_faults.kill_scheduler_mid_dag(state, cenv, dict(conf), task="train")
            folder = cluster_faults.dag_run_folder(client, r["run"]["dag_run_id"])
            run_id, study = cluster_faults.dag_run_ids(folder)
            t = cluster_faults.tally(client, state, run_id, study, 2,
                                     want_artifacts=dag_artifacts)
            return {"state": r["state"], "wall_s": round(r["wall_s"], 1),
                    "killed_at_s": round(r["killed_at_s"], 1),
                    "restarted_at_s": round(r["restarted_at_s"], 1),
                    "train_tries": r["tasks"]["train"]["try_number"],
                    "tasks": {k: v["state"] for k, v in r["tasks"].items()}, "tally": lost(t)}

        def spark_fault() -> dict[str, Any]:
            r = cluster_faults.kill_spark_worker_mid_episodes(
                state, cenv, tmp / "fault-spark", [*trace, *JOB_OPTIONS])
            summ = r["summary"]
            t = cluster_faults.tally(client, state, summ["mlflow_run_id"],
                                     summ["sweep"]["study"], 2, want_artifacts=ref_artifacts)
            return {"state": "success", "wall_s": round(r["wall_s"], 1),
                    "worker": r["worker"], "killed_at_s": round(r["killed_at_s"], 1),
                    "engine": summ["episodes"]["engine"],
                    "summary_equal": cluster_check.steady(summ) == ref, "tally": lost(t)}

        # the jobs' faults, then the DAG (both workers again), dag.test(), the DAG's fault
        step(faults, "mlflow_restart_during_sweep", mlflow_fault)
        step(faults, "spark_worker_killed_mid_episodes", spark_fault)
        if not (state / "pids" / "spark-worker-2.pid").exists():
            cluster_faults.cluster_cmd(state, cenv, "start", "spark-worker-2")
        step(res, "dag", dag)
        step(res, "dag_test", lambda: dag_test(tmp / "dag-test", dict(conf)))
        step(faults, "scheduler_killed_mid_dag", scheduler_fault)
        if all("tally" in f for f in faults.values()):
            res["faults_lost"] = {k: sum(f["tally"][f"lost_{k}"] for f in faults.values())
                                  for k in ("runs", "trials", "artifacts")}
        pids = [int(f.read_text().split()[0]) for f in (state / "pids").glob("*.pid")]
        res["down_s"] = timed(["bash", str(SCRIPT), "down"], env, ROOT)
        res["processes_left"] = sum(Path(f"/proc/{p}").exists() for p in pids)
    finally:
        subprocess.run(["bash", str(SCRIPT), "down"], env=env, capture_output=True)
        pg = state / "pgdata.path"
        if pg.exists() and Path(pg.read_text().strip()).parent.name.startswith("flashml-pg."):
            shutil.rmtree(Path(pg.read_text().strip()).parent, ignore_errors=True)
        if os.environ.get("FLASHML_BENCH_KEEP") != "1":
            shutil.rmtree(tmp, ignore_errors=True)
    res["machine_load_avg_1m_after"] = os.getloadavg()[0]
    save(res, done=True)
    write_doc(res)
    print(json.dumps({k: v for k, v in res.items() if k != "main_job"}, indent=1))
    print(json.dumps({k: v for k, v in res["main_job"].items() if not k.endswith("stages_s")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
