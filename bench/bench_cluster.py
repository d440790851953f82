"""The scaled-out topology run natively (scripts/cluster.sh): what starting it costs, what
the main job costs scaled out against the same job embedded on the same cores, and the DAG's
run under the real Airflow scheduler.

    .venv/bin/python bench/bench_cluster.py                     # the demo trace (63 k accesses)
    .venv/bin/python bench/bench_cluster.py --accesses 1000000  # a generated 1 M-access trace

1. `scripts/cluster.sh up` in a fresh state folder: wall seconds until every health endpoint
   answers (Postgres, the MLflow server, the Spark master with 2 workers, Airflow's
   api-server, scheduler and dag-processor);
2. `flashml pipeline run` embedded (sqlite MLflow and Optuna stores, Polars episodes) and
   then with the cluster's variables (MLflow server, Optuna on Postgres, episodes on the
   Spark cluster), same trace, seed and options (`--sweep-trials 2 --sweep-workers 2`):
   wall seconds of each, their stages' timings, and whether the summaries are equal
   (every policy's metrics, convergence, episodes, the sweep's trials);
3. `flashml_retrain` triggered through Airflow's REST API and run by the scheduler: wall
   seconds from the trigger to the run's end, each task's duration;
4. `scripts/cluster.sh down`: wall seconds, and that no recorded process is left.

Writes bench/results/cluster.json (with the machine and its load: the VM is shared)."""

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


def job(out: Path, trace: list[str], env: dict[str, str], cwd: Path) -> dict[str, Any]:
    wall = timed([*FLASHML, "pipeline", "run", "--out", str(out), *trace,
                  "--sweep-trials", "2", "--sweep-workers", "2"], env, cwd)
    summary = json.loads((out / "summary.json").read_text())
    return {"wall_s": wall, "job_s": summary["seconds"], "stages_s": summary["timings_s"],
            "engine": summary["episodes"]["engine"], "summary": summary}


DOC = ROOT / "docs" / "how-to" / "scale-out.md"
BEGIN = "<!-- cluster: begin (bench/bench_cluster.py --render renders this from " \
    "bench/results/cluster.json) -->"
END = "<!-- cluster: end -->"


def render(res: dict[str, Any]) -> str:
    """The figures block of docs/how-to/scale-out.md from cluster.json."""
    m, d = res["main_job"], res["dag"]
    tasks = ", ".join(f"{t} {v['duration_s']:.0f}" for t, v in d["tasks"].items()
                      if v.get("duration_s") is not None)
    spark = {k: v for k, v in m["scaled_out_stages_s"].items()
             if k == "spark session" or k.startswith("episodes")}
    rows = [
        ("start-up (`cluster.sh up`, every health endpoint answering)",
         f"{res['startup_s']:.0f} s"),
        (f"main job, {res['job_options']}, {res['accesses']}: embedded / scaled out",
         f"{m['embedded_s']:.0f} s / {m['scaled_out_s']:.0f} s "
         f"(x{m['scaled_out_over_embedded']:.2f}); summaries equal: "
         f"{'yes' if m['summaries_equal'] else 'NO'}"),
        ("of which Spark (session start, episodes on 2 workers)",
         ", ".join(f"{'start' if k == 'spark session' else k}: {v:.0f} s"
                   for k, v in spark.items())),
        ("`flashml_retrain` under the scheduler (trigger to end)",
         f"{d['wall_s']:.0f} s, {d['state']}; tasks (s): {tasks}"),
        ("`cluster.sh down`", f"{res['down_s']:.0f} s, {res['processes_left']} processes left"),
    ]
    mach = res["machine"]
    lines = [BEGIN, "", "| what | measured |", "|---|---|",
             *(f"| {a} | {b} |" for a, b in rows), "",
             f"Measured by `bench/bench_cluster.py` on {mach['cores']} cores ({mach['cpu']}), "
             f"load average {mach['load_avg_1m']:.1f} at the start (the VM is shared).",
             "", END]
    return "\n".join(lines)


def write_doc(res: dict[str, Any]) -> None:
    text = DOC.read_text()
    head, rest = text.split(BEGIN, 1)
    DOC.write_text(head + render(res) + rest.split(END, 1)[1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--accesses", type=int, default=None,
                    help="generate a region1-like trace of this many accesses (default: the "
                    "job's demo trace)")
    ap.add_argument("--render", action="store_true",
                    help="only render docs/how-to/scale-out.md's figures from cluster.json")
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
                           "job_options": "--sweep-trials 2 --sweep-workers 2"}
    try:
        res["startup_s"] = timed(["bash", str(SCRIPT), "up"], env, ROOT)
        client = {k: v.strip("'") for k, v in (line.split("=", 1) for line in
                  (state / "cluster.env").read_text().splitlines()
                  if line and not line.startswith("#"))}
        pids = [int(f.read_text().split()[0]) for f in (state / "pids").glob("*.pid")]
        embedded = job(tmp / "embedded", trace, clean_env(FLASHML_HOME=str(tmp / "home")), tmp)
        scaled = job(tmp / "scaled", trace, clean_env() | client, tmp)
        res["main_job"] = {
            "embedded_s": embedded["wall_s"], "scaled_out_s": scaled["wall_s"],
            "scaled_out_over_embedded": round(scaled["wall_s"] / embedded["wall_s"], 2),
            "engines": [embedded["engine"], scaled["engine"]],
            "summaries_equal": cluster_check.steady(scaled["summary"])
            == cluster_check.steady(embedded["summary"]),
            "embedded_stages_s": embedded["stages_s"], "scaled_out_stages_s": scaled["stages_s"],
        }
        os.environ.update(client)
        dag = cluster_check.run_dag("flashml_retrain", {"sweep_trials": 2, "sweep_workers": 2,
                                                        **({"accesses": args.accesses}
                                                           if args.accesses else {})})
        res["dag"] = {"state": dag["run"]["state"], "wall_s": round(dag["wall_s"], 1),
                      "tasks": {t: {"state": ti["state"], "duration_s": ti.get("duration"),
                                    "tries": ti.get("try_number")}
                                for t, ti in dag["tasks"].items()}}
        res["down_s"] = timed(["bash", str(SCRIPT), "down"], env, ROOT)
        res["processes_left"] = sum(Path(f"/proc/{p}").exists() for p in pids)
    finally:
        subprocess.run(["bash", str(SCRIPT), "down"], env=env, capture_output=True)
        pg = state / "pgdata.path"
        if pg.exists() and Path(pg.read_text().strip()).parent.name.startswith("flashml-pg."):
            shutil.rmtree(Path(pg.read_text().strip()).parent, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)
    res["machine_load_avg_1m_after"] = os.getloadavg()[0]
    write_json(OUT, res)
    write_doc(res)
    print(json.dumps({k: v for k, v in res.items() if k != "main_job"}, indent=1))
    print(json.dumps({k: v for k, v in res["main_job"].items() if not k.endswith("stages_s")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
