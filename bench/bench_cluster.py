"""The scaled-out topology run natively (scripts/cluster.sh): what starting it costs, what
the main job costs scaled out against the same job embedded on the same cores, the sweep
with two worker processes against one, the DAG under the real Airflow scheduler against
`dag.test()`, and what the faults a cluster has lose.

    .venv/bin/python bench/bench_cluster.py                  # every step, 1 M accesses
    .venv/bin/python bench/bench_cluster.py --steps dag,dag_test   # some steps again,
                                                             # merged into cluster.json
    .venv/bin/python bench/bench_cluster.py --render         # only re-render the docs

Steps (`--steps`; all on one cluster started afresh by this run, measured in the order
startup, dag, dag_test, scheduler_fault, main_job, sweep_workers, small_job, mlflow_fault,
spark_fault, restart; each saved as it ends; SIGTERM or Ctrl-C stops the cluster):

1. `startup`: `scripts/cluster.sh up` in a fresh state folder: wall seconds until every
   health endpoint answers (Postgres, the MLflow server, the Spark master with 2 workers,
   Airflow's api-server, scheduler and dag-processor), and when each was healthy;
2. `main_job`: `flashml pipeline run` on a generated region1-like trace of `--accesses`
   accesses (1 M), embedded (sqlite MLflow and Optuna stores, Polars episodes) and then with
   the cluster's variables (MLflow server, Optuna on Postgres, episodes on the Spark
   cluster), same trace, seed and options (`--sweep-trials 2 --sweep-workers 2`): wall
   seconds of each, their stages' timings, and whether the summaries are equal (every
   policy's metrics, convergence, episodes, the sweep's trials);
3. `sweep_workers`: the same scaled-out job with `--sweep-workers 1`: its sweep stage
   against step 2's;
4. `small_job`: the small job of tests/services/test_cluster.py (20,000 accesses, at most 30
   boosting rounds, 2 trials on 2 workers) embedded and scaled out: the reference the
   faults' runs are compared with (their summary, the artifacts a run logs);
5. `mlflow_fault`, `spark_fault` (scripts/cluster_faults.py), each on the small job scaled
   out: the MLflow server restarted during the sweep; a Spark worker killed with its
   executor during the episodes stage (started again afterwards);
6. `dag`: `flashml_retrain` with the small job's settings, triggered through Airflow's REST
   API and run by the scheduler (wall seconds from the trigger to the run's end, each
   task's duration); `dag_test`: the same DAG run by `dag.test()` in one process (a sqlite
   Airflow database, embedded stores, no cluster);
7. `scheduler_fault`: the same DAG, the scheduler killed in `train` and restarted;
   for each fault, the runs on the MLflow server, the trials in the Optuna study and the
   artifacts on the artifact store that were lost (counted by `cluster_faults.tally`);
8. `scripts/cluster.sh down`: wall seconds, and that no process of the cluster and no port
   is left; `restart`: `up` again on the same state folder (Postgres initialised and
   Airflow's database migrated already), then `down` again.

Writes bench/results/cluster.json (with the machine and its load average at each step: the
VM is shared; run it under `flock /tmp/flashml-timing.lock`) and renders its figures into
docs/how-to/scale-out.md and README.md's "Scaling out" section."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
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
STEPS = ("startup", "main_job", "sweep_workers", "small_job", "mlflow_fault", "spark_fault",
         "dag", "dag_test", "scheduler_fault", "restart")
#: the step that measures each result key (cluster.json)
FAULT_KEYS = {"mlflow_fault": "mlflow_restart_during_sweep",
              "spark_fault": "spark_worker_killed_mid_episodes",
              "scheduler_fault": "scheduler_killed_mid_dag"}


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in CLIENT_VARS and not k.startswith(("AIRFLOW__", "FLASHML_CLUSTER_"))}
    return env | extra


def run(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, str]:
    """Wall seconds and stderr of `cmd` (exits with its stderr when it fails)."""
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return round(time.monotonic() - t0, 2), proc.stderr


def timed(cmd: list[str], env: dict[str, str], cwd: Path) -> float:
    return run(cmd, env, cwd)[0]


def up(env: dict[str, str]) -> dict[str, Any]:
    """`cluster.sh up`: its wall seconds and, per service, the seconds after the start at
    which it was healthy (what the script reports)."""
    wall, err = run(["bash", str(SCRIPT), "up"], env, ROOT)
    healthy = {m.group(1): int(m.group(2)) for m in
               re.finditer(r"cluster: (\S+): healthy \((\d+) s after start\)", err)}
    migrated = re.search(r"airflow: database migrated \((\d+) s after start\)", err)
    return {"wall_s": wall, "healthy_at_s": healthy,
            "airflow_migrated_at_s": int(migrated.group(1)) if migrated else None,
            "airflow_migrate": "skipped" if "database already migrated" in err else "run"}


def open_ports(state: Path) -> list[int]:
    return [p for p in cluster_faults.ports(state) if cluster_faults.listening(p)]


#: the main job's options besides the trace size, embedded and scaled out
JOB_OPTIONS = ["--sweep-trials", "2", "--sweep-workers", "2"]
#: the small job (tests/services/test_cluster.py's): the faults' runs and the DAG's params
SMALL = {"accesses": 20000, "max_rounds": 30, "sweep_trials": 2, "sweep_workers": 2}
SMALL_ARGS = [a for k, v in SMALL.items() for a in (f"--{k.replace('_', '-')}", str(v))]


def job(out: Path, args: list[str], env: dict[str, str], cwd: Path) -> dict[str, Any]:
    wall = timed([*FLASHML, "pipeline", "run", "--out", str(out), *args], env, cwd)
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


def is_complete(res: dict[str, Any]) -> bool:
    """Every step's figures present and none failed."""
    keys = ["startup_s", "main_job", "sweep_workers", "small_job", "dag", "dag_test",
            "restart", "down_s"]
    faults = res.get("faults", {})
    return (all(k in res and "error" not in (res[k] if isinstance(res[k], dict) else {})
                for k in keys)
            and all(k in faults and "error" not in faults[k] for k in FAULT_KEYS.values())
            and res.get("processes_left") == 0 and res.get("ports_left") == [])


def save(res: dict[str, Any]) -> None:
    """cluster.json (or --out) as measured so far (`complete` once every step is)."""
    res["machine_load_avg_1m_after"] = os.getloadavg()[0]
    res["complete"] = is_complete(res)
    write_json(SAVE_TO[0], res)


#: where `save` writes (--out)
SAVE_TO = [OUT]


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
#: what each step measures, as the "not measured" row names it
STEP_NAMES = {"startup_s": "start-up", "main_job": "the main job",
              "sweep_workers": "the sweep with 1 worker process",
              "small_job": "the small job", "dag": "the DAG under the scheduler",
              "dag_test": "`dag.test()`", "restart": "the restart"}


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
              lambda: f"worker {f['worker']} killed {f['killed_at_s']:.0f} s into the job"
              + ("" if f.get("episodes_done_at_kill") is not True
                 else ", after the episodes stage had ended")}
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
            f"{e:.0f} s embedded and {c:.0f} s scaled out: the difference between the "
            "totals beyond that is what the scaled-out path costs (the stages it changes).")


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


def _failed(x: dict[str, Any]) -> str:
    return f"FAILED: {x['error'][:200]}"


def _startup_detail(st: dict[str, Any]) -> str:
    """When each service answered, grouped: "Postgres 3 s, MLflow 20 s, ..."."""
    h = st.get("healthy_at_s", {})
    workers = [v for k, v in h.items() if k.startswith("spark-worker")]
    parts = [("Postgres", h.get("postgres")),
             ("Airflow's database migrated", st.get("airflow_migrated_at_s")),
             ("MLflow", h.get("mlflow")), ("Spark master", h.get("spark-master")),
             ("both workers", max(workers) if workers else None),
             ("Airflow's api-server", h.get("airflow-apiserver")),
             ("scheduler", h.get("airflow-scheduler")),
             ("dag-processor", h.get("airflow-dag-processor"))]
    return ", ".join(f"{a} {b} s" for a, b in parts if b is not None)


def render(res: dict[str, Any]) -> str:
    """The figures block of docs/how-to/scale-out.md from cluster.json."""
    rows: list[tuple[str, str]] = []
    if "startup_s" in res:
        st = res.get("startup", {})
        rows.append(("start-up (`cluster.sh up` in a new state folder, every health "
                     "endpoint answering)", f"**{res['startup_s']:.0f} s**"
                     + (f" (healthy after: {_startup_detail(st)})" if st else "")))
    rs = res.get("restart")
    if rs:
        rows.append(("start-up again on the same state (`down`, then `up`: Postgres "
                     "initialised, Airflow's database migrated already)",
                     f"{rs['wall_s']:.0f} s (Airflow's migration "
                     f"{rs.get('airflow_migrate', '?')})"))
    m = res.get("main_job", {})
    size = res.get("accesses_label") or res.get("accesses")
    if "error" in m:
        rows.append((f"main job, {size}", _failed(m)))
    elif m:
        spark = {k: v for k, v in m["scaled_out_stages_s"].items()
                 if k == "spark session" or k.startswith("episodes")}
        rows += [
            (f"main job, {size}, {res['job_options']}: embedded / scaled out (same 2 cores)",
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
        rows.append(("sweep on the cluster, 2 worker processes / 1", _failed(sw)))
    elif sw:
        rows.append(("sweep stage of the main job on the cluster (2 trials), 2 worker "
                     "processes / 1",
                     f"{_s(sw['two_s'])} / {_s(sw['one_s'])} (job {sw['job_two_s']:.0f} s / "
                     f"{sw['job_one_s']:.0f} s); summaries equal: "
                     f"{'yes' if sw['summary_equal'] else 'NO'}"))
    sj = res.get("small_job", {})
    small = res.get("small_job_options", "the small job")
    if "error" in sj:
        rows.append((f"small job ({small}): embedded / scaled out", _failed(sj)))
    elif sj:
        rows.append((f"small job ({small}), the faults' reference: embedded / scaled out",
                     f"{sj['embedded_s']:.0f} s / {sj['scaled_out_s']:.0f} s; summaries "
                     f"equal: {'yes' if sj['summaries_equal'] else 'NO'}"))
    d, dt = res.get("dag", {}), res.get("dag_test", {})
    if d:
        tasks = ", ".join(f"{t} {v['duration_s']:.0f}" for t, v in d.get("tasks", {}).items()
                          if v.get("duration_s") is not None)
        rows.append(("`flashml_retrain` (the small job's params) under the scheduler, "
                     "trigger to end", _failed(d) if "error" in d else
                     f"{d['wall_s']:.0f} s, {d['state']}; tasks (s): {tasks}"))
    if "error" in dt:
        rows.append(("the same DAG by `dag.test()` (one process, no cluster)", _failed(dt)))
    elif dt:
        rows.append(("the same DAG by `dag.test()` (one process, no cluster)",
                     f"{dt['wall_s']:.0f} s, {dt['state']}"
                     + (f"; the scheduler's run takes x{d['wall_s'] / dt['wall_s']:.2f}"
                        if "wall_s" in d else "")))
    for key in FAULTS:
        if key in res.get("faults", {}):
            rows.append(_fault_row(key, res["faults"][key]))
        else:
            rows.append((FAULTS[key], "not measured"))
    if "faults_lost" in res:
        fl = res["faults_lost"]
        rows.append((f"lost across the {fl.get('faults', 3)} faults measured",
                     f"**{fl['runs']} runs, {fl['trials']} trials, {fl['artifacts']} "
                     "artifacts**"))
    if "down_s" in res:
        rows.append(("`cluster.sh down`",
                     f"{res['down_s']:.0f} s; left: {res['processes_left']} processes, "
                     f"{len(res.get('ports_left', []))} ports"))
    missing = [v for k, v in STEP_NAMES.items() if k not in res]
    if missing:
        rows.append(("not measured", ", ".join(missing)))
    mach = res["machine"]
    loads = [v["load_avg_1m"] for v in [*res.values(), *res.get("faults", {}).values()]
             if isinstance(v, dict) and "load_avg_1m" in v and v is not mach]
    lines = [BEGIN, "", "| what | measured |", "|---|---|",
             *(f"| {a} | {b} |" for a, b in rows), "",
             f"Measured by `bench/bench_cluster.py` on {mach['cores']} cores ({mach['cpu']}) "
             f"shared with other jobs: load average {mach['load_avg_1m']:.1f} at the start"
             + (f", {min(loads):.1f}-{max(loads):.1f} over the steps" if loads else "")
             + f", {res['machine_load_avg_1m_after']:.1f} at the end. Wall times move with "
             "that load"
             + (f"; {training_note(m)}" if m and "error" not in m else ".")
             + (f" {res['size_note']}" if res.get("size_note") else ""),
             "", END]
    return "\n".join(lines)


def render_readme(res: dict[str, Any]) -> str:
    """README.md's "Scaling out" figures from cluster.json."""
    m, d, dt = res.get("main_job", {}), res.get("dag", {}), res.get("dag_test", {})
    fl = res.get("faults_lost")
    figures = [f"start-up **{_s(res.get('startup_s'))}**"]
    if "wall_s" in res.get("restart", {}):
        figures[0] += f" ({res['restart']['wall_s']:.0f} s again on the same state)"
    if m and "error" not in m:
        figures.append(f"the main job ({res.get('accesses_label')}) scaled out "
                       f"{m['scaled_out_s']:.0f} s vs {m['embedded_s']:.0f} s embedded on "
                       f"the same cores (x{m['scaled_out_over_embedded']:.2f}, same summary: "
                       f"{'yes' if m['summaries_equal'] else 'NO'}; the stages the "
                       f"scaled-out path changes: {path_cost(m)})")
    sw = res.get("sweep_workers", {})
    if "two_s" in sw:
        figures.append(f"its sweep with 2 worker processes {_s(sw['two_s'])} vs 1 "
                       f"{_s(sw['one_s'])}")
    if "wall_s" in d:
        figures.append(f"the DAG under the scheduler {d['wall_s']:.0f} s"
                       + (f" vs {dt['wall_s']:.0f} s by `dag.test()`" if "wall_s" in dt
                          else ""))
    if fl is not None:
        figures.append(f"lost across {fl.get('faults', 3)} faults (MLflow restarted "
                       "mid-sweep, scheduler killed mid-DAG, a Spark worker killed "
                       f"mid-episodes): **{fl['runs']} runs, {fl['trials']} trials, "
                       f"{fl['artifacts']} artifacts**")
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
             f"Measured (2 shared cores, load average {res['machine']['load_avg_1m']:.1f}): "
             + "; ".join(figures) + ".",
             README_END]
    return "\n".join(parts)


def _replace(path: Path, begin: str, end: str, block: str) -> None:
    text = path.read_text()
    head, rest = text.split(begin, 1)
    path.write_text(head + block + rest.split(end, 1)[1])


def write_doc(res: dict[str, Any]) -> None:
    _replace(DOC, BEGIN, END, render(res))
    _replace(README, README_BEGIN, README_END, render_readme(res))


def measure(res: dict[str, Any], steps: list[str], accesses: int, tmp: Path) -> None:
    """The steps `steps` (module docstring) on one cluster started in `tmp`, into `res`."""
    state = tmp / "cluster"
    # manual runs only (no scheduled run of the DAG beside the triggered ones)
    env = clean_env(FLASHML_CLUSTER_DIR=str(state), FLASHML_RETRAIN_SCHEDULE="none")
    main_args = ["--accesses", str(accesses), *JOB_OPTIONS]
    la = load()
    started = up(env)
    if "startup" in steps:
        res["startup_s"] = started["wall_s"]
        res["startup"] = started | {"load_avg_1m": la}
    client = {k: v.strip("'") for k, v in (line.split("=", 1) for line in
              (state / "cluster.env").read_text().splitlines()
              if line and not line.startswith("#"))}
    cenv = clean_env() | client
    os.environ.update(client)  # the REST calls (cluster_check) read them
    faults: dict[str, Any] = res.setdefault("faults", {})
    ref: dict[str, Any] = {}
    scaled: dict[str, Any] = {}

    def main_job() -> dict[str, Any]:
        embedded = job(tmp / "embedded", main_args, clean_env(FLASHML_HOME=str(tmp / "home")),
                       tmp)
        scaled.update(job(tmp / "scaled", main_args, cenv, tmp))
        return {
            "embedded_s": embedded["wall_s"], "scaled_out_s": scaled["wall_s"],
            "scaled_out_over_embedded": round(scaled["wall_s"] / embedded["wall_s"], 2),
            "engines": [embedded["engine"], scaled["engine"]],
            "summaries_equal": cluster_check.steady(scaled["summary"])
            == cluster_check.steady(embedded["summary"]),
            "embedded_stages_s": embedded["stages_s"], "scaled_out_stages_s": scaled["stages_s"]}

    def one_worker() -> dict[str, Any]:
        if not scaled:
            raise RuntimeError("needs the main job's scaled-out run (step main_job)")
        one = job(tmp / "scaled-1", [*main_args[:-1], "1"], cenv, tmp)
        return {"two_s": sweep_s(scaled["stages_s"]), "one_s": sweep_s(one["stages_s"]),
                "job_two_s": scaled["wall_s"], "job_one_s": one["wall_s"],
                "summary_equal": cluster_check.steady(one["summary"])
                == cluster_check.steady(scaled["summary"])}

    def small_job() -> dict[str, Any]:
        embedded = job(tmp / "small-embedded", SMALL_ARGS,
                       clean_env(FLASHML_HOME=str(tmp / "home-small")), tmp)
        small = job(tmp / "small-scaled", SMALL_ARGS, cenv, tmp)
        ref["summary"] = cluster_check.steady(embedded["summary"])
        ref["artifacts"] = cluster_faults.artifact_paths(client,
                                                         small["summary"]["mlflow_run_id"])
        return {"embedded_s": embedded["wall_s"], "scaled_out_s": small["wall_s"],
                "summaries_equal": cluster_check.steady(small["summary"]) == ref["summary"],
                "artifacts": len(ref["artifacts"])}

    def mlflow_fault() -> dict[str, Any]:
        r = cluster_faults.restart_mlflow_during_sweep(state, cenv, tmp / "fault-mlflow",
                                                       SMALL_ARGS)
        summ = r["summary"]
        t = cluster_faults.tally(client, state, summ["mlflow_run_id"], r["study"], 2,
                                 want_artifacts=ref["artifacts"])
        return {"state": "success", "wall_s": round(r["wall_s"], 1),
                "server_down_s": round(r["server_down_s"], 1),
                "retries_logged": r["retries_logged"], "first_retry": r["first_retry"],
                "summary_equal": cluster_check.steady(summ) == ref["summary"],
                "tally": lost(t)}

    def spark_fault() -> dict[str, Any]:
        try:
            r = cluster_faults.kill_spark_worker_mid_episodes(state, cenv, tmp / "fault-spark",
                                                              SMALL_ARGS)
        finally:
            if not (state / "pids" / "spark-worker-2.pid").exists():
                cluster_faults.cluster_cmd(state, cenv, "start", "spark-worker-2")
        summ = r["summary"]
        t = cluster_faults.tally(client, state, summ["mlflow_run_id"],
                                 summ["sweep"]["study"], 2, want_artifacts=ref["artifacts"])
        return {"state": "success", "wall_s": round(r["wall_s"], 1),
                "worker": r["worker"], "killed_at_s": round(r["killed_at_s"], 1),
                "episodes_done_at_kill": r["episodes_done_at_kill"],
                "engine": summ["episodes"]["engine"],
                "summary_equal": cluster_check.steady(summ) == ref["summary"],
                "tally": lost(t)}

    dag_artifacts: set[str] = set(cluster_faults.DAG_ARTIFACTS)

    def dag() -> dict[str, Any]:
        r = cluster_check.run_dag("flashml_retrain", dict(SMALL))
        folder = cluster_faults.dag_run_folder(client, r["run"]["dag_run_id"])
        dag_artifacts.update(cluster_faults.artifact_paths(
            client, cluster_faults.dag_run_ids(folder)[0]))
        return {"state": r["run"]["state"], "wall_s": round(r["wall_s"], 1),
                "tasks": {t: {"state": ti["state"], "duration_s": ti.get("duration"),
                              "tries": ti.get("try_number")}
                          for t, ti in r["tasks"].items()}}

    def scheduler_fault() -> dict[str, Any]:
        r = cluster_faults.kill_scheduler_mid_dag(state, cenv, dict(SMALL), task="train")
        folder = cluster_faults.dag_run_folder(client, r["run"]["dag_run_id"])
        run_id, study = cluster_faults.dag_run_ids(folder)
        t = cluster_faults.tally(client, state, run_id, study, 2, want_artifacts=dag_artifacts)
        return {"state": r["state"], "wall_s": round(r["wall_s"], 1),
                "killed_at_s": round(r["killed_at_s"], 1),
                "unhealthy_at_s": round(r["unhealthy_at_s"], 1),
                "restarted_at_s": round(r["restarted_at_s"], 1),
                "train_tries": r["tasks"]["train"]["try_number"],
                "tasks": {k: v["state"] for k, v in r["tasks"].items()}, "tally": lost(t)}

    try:
        # the DAG's figures first, then the jobs' (each step is saved as it ends)
        if "dag" in steps:
            step(res, "dag", dag)
        if "dag_test" in steps:
            step(res, "dag_test", lambda: dag_test(tmp / "dag-test", dict(SMALL)))
        if "scheduler_fault" in steps:
            step(faults, FAULT_KEYS["scheduler_fault"], scheduler_fault)
        if "main_job" in steps:
            step(res, "main_job", main_job)
        if "sweep_workers" in steps:
            step(res, "sweep_workers", one_worker)
        if "small_job" in steps or {"mlflow_fault", "spark_fault"} & set(steps):
            step(res, "small_job", small_job)
        if "mlflow_fault" in steps:
            step(faults, FAULT_KEYS["mlflow_fault"], mlflow_fault)
        if "spark_fault" in steps:
            step(faults, FAULT_KEYS["spark_fault"], spark_fault)
        tallies = [f["tally"] for f in faults.values() if "tally" in f]
        if tallies:
            res["faults_lost"] = {k: sum(t[f"lost_{k}"] for t in tallies)
                                  for k in ("runs", "trials", "artifacts")} | {
                "faults": len(tallies)}
        res["down_s"] = timed(["bash", str(SCRIPT), "down"], env, ROOT)
        res["processes_left"] = len(cluster_faults.cluster_pids(state))
        res["ports_left"] = open_ports(state)
        if "restart" in steps:
            la = load()
            again = up(env)
            res["restart"] = again | {"load_avg_1m": la, "down_s": timed(
                ["bash", str(SCRIPT), "down"], env, ROOT)}
            res["processes_left"] = len(cluster_faults.cluster_pids(state))
            res["ports_left"] = open_ports(state)
        save(res)
    finally:
        subprocess.run(["bash", str(SCRIPT), "down"], env=env, capture_output=True)
        pg = state / "pgdata.path"
        if pg.exists() and Path(pg.read_text().strip()).parent.name.startswith("flashml-pg."):
            shutil.rmtree(Path(pg.read_text().strip()).parent, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--accesses", type=int, default=1_000_000,
                    help="accesses of the main job's generated region1-like trace (default "
                    "1000000)")
    ap.add_argument("--steps", default=",".join(STEPS),
                    help="comma-separated steps to measure (default: all); the others' "
                    f"figures are kept from cluster.json. Steps: {', '.join(STEPS)}")
    ap.add_argument("--render", action="store_true",
                    help="only render the docs' and README's figures from cluster.json")
    ap.add_argument("--out", type=Path, default=OUT,
                    help="results file (default bench/results/cluster.json; another one: "
                    "the docs are not rendered, as for a trial run)")
    ap.add_argument("--size-note", default=None,
                    help="a sentence on the trace size, shown under the figures")
    args = ap.parse_args()
    if args.render:
        write_doc(json.loads(OUT.read_text()))
        return 0
    steps = [s for s in args.steps.split(",") if s]
    bad = sorted(set(steps) - set(STEPS))
    if bad:
        ap.error(f"--steps: no such step {', '.join(bad)} (one of: {', '.join(STEPS)})")
    partial = set(steps) != set(STEPS)
    SAVE_TO[0] = args.out
    res: dict[str, Any] = (json.loads(args.out.read_text()) if partial and args.out.exists()
                           else {})
    if partial and res.get("accesses") != args.accesses and \
            {"main_job", "sweep_workers"} - set(steps) and "main_job" in res:
        ap.error(f"--steps: cluster.json's main job is at {res.get('accesses')} accesses, "
                 f"not {args.accesses}: measure main_job and sweep_workers again")
    res |= {"machine": machine(), "accesses": args.accesses,
            "accesses_label": f"{args.accesses / 1e6:g} M accesses",
            "job_options": " ".join(JOB_OPTIONS), "small_job_options": " ".join(SMALL_ARGS)}
    if args.size_note is not None:
        res["size_note"] = args.size_note
    res.setdefault("measured_steps", {})
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for s in steps:
        res["measured_steps"][s] = stamp
    for s in steps:  # what this run measures again is not kept from an earlier one
        if s in FAULT_KEYS:
            res.get("faults", {}).pop(FAULT_KEYS[s], None)
        elif s != "startup":
            res.pop(s, None)
    ROOT_RES.append(res)

    def interrupted(signum: int, frame: Any) -> None:  # SIGTERM: down the cluster first
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    tmp = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    try:
        measure(res, steps, args.accesses, tmp)
    finally:
        if os.environ.get("FLASHML_BENCH_KEEP") != "1":
            shutil.rmtree(tmp, ignore_errors=True)
    save(res)
    if args.out == OUT:
        write_doc(res)
    print(json.dumps({k: v for k, v in res.items() if k not in ("main_job", "faults")},
                     indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
