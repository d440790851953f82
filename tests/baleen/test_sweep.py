"""The Optuna sweep as its users see it (flashml/systems/baleen/sweep.py), with the convergence loop
replaced by a stand-in whose TCO is a known function of the write rate: the trials are the
grid (the target, then log-spaced points over the range), every trial a FINISHED nested
MLflow run tagged COMPLETE, the study carries its objective's name and the user attributes,
and the write-rate range grows while the best point sits at its top edge (and stops where
the policy cannot write more)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from flashml.systems.baleen.sweep import WIDEN, grid, widened_range

from conftest import REPO, python_argv, seed_mlflow_store

FAKE = r"""
import inspect, json, os, sys, time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

import flashml.systems.baleen.sweep as sweep

cfg = json.loads(sys.argv[1])
SAT = cfg["saturation_mbps"]


def fake_loop(df, table, feats, base, wr, workdir, gbm, settings, final_base=None, warm=None,
              cancel=None, warn=True, build_lock=None):
    # measured write rate: the target, up to what the policy can write; peak DT falls with
    # the write rate, so TCO (eq. 4b) falls until the saturation point, then rises
    w = min(wr, SAT)
    peak = 0.2 + 0.3 * np.exp(-w / cfg["scale_mbps"])
    its = [SimpleNamespace(peak_dt_util=peak * (1 + 0.2 / (i + 1)), write_rate_mbps=w,
                           measured_eviction_age_s=3600.0, warm=False) for i in range(3)]
    metrics = {"peak_dt_util": peak, "flash_write_rate_mbps": w, "pid": os.getpid()}
    if cfg.get("sync"):
        rendezvous(wr, Path(workdir).name.startswith("ahead-"))
    end = time.monotonic() + cfg.get(f"{ROLE}_trial_s", cfg.get("trial_s", 0.0))
    while time.monotonic() < end:  # as run_loop does between its stages
        if cancel is not None and cancel.is_set():
            from flashml.systems.baleen.converge import Cancelled
            raise Cancelled("cancelled")
        time.sleep(0.05)
    # a warm sweep's screen (its loop's first iteration only) converges where cfg says
    converged = settings.max_iter > 1 or cfg.get("screen_converges", False)
    if settings.max_iter == 1:
        with open(Path(cfg["tmp"]) / "screens", "a") as f:
            f.write(f"{wr}\n")
    if settings.max_iter > 1:  # a trial's loop: when it ran, and its "build" under the lock
        t0 = time.monotonic()
        if build_lock is not None:
            with build_lock:
                time.sleep(0.05)
        time.sleep(cfg.get("loop_s", 0.0))
        with open(Path(cfg["tmp"]) / "loops", "a") as f:
            f.write(f"{wr} {t0} {time.monotonic()} {int(build_lock is not None)}\n")
    if warm is not None:  # the search points it started from; then one of its own
        with open(Path(cfg["tmp"]) / "points_seen", "a") as f:
            f.write(f"{wr} {settings.max_iter} {len(warm.points)}\n")
        warm.points.append((wr, w))
    return SimpleNamespace(iterations=its[:settings.max_iter], converged=converged,
                           tuned=SimpleNamespace(result=SimpleNamespace(metrics=metrics)))


SYNC = Path(cfg["tmp"]) / "sync"
SYNC.mkdir(parents=True, exist_ok=True)
MAX_WIDEN = inspect.signature(sweep.run_sweep).parameters["max_widen"].default


def round_of(wr):
    # the round whose range holds write rate wr: the first one's top is cfg["top"], each
    # next round's WIDEN times the last's
    r, top = 0, cfg["top"]
    while wr > top * (1 + 1e-9):
        r, top = r + 1, top * sweep.WIDEN
    return r


def mark(name):
    (SYNC / name).touch()


def wait_for(name):
    # a hang guard only: the other process writes it as soon as it gets there
    end = time.monotonic() + 300
    while not (SYNC / name).exists():
        if time.monotonic() > end:
            raise RuntimeError(f"{ROLE}: waited 300 s for {name}")
        time.sleep(0.01)


def rendezvous(wr, ahead):
    # Makes the two processes' share of the points a fact, not a race: a trial marks that
    # its process started a trial of its round, then waits for the event its test asks for.
    # "share": for the other process to have started one of the round too (each process runs
    # at least one point of every round: a round has two or more). "ahead": the fast process
    # waits for the slow one to be running a point of the round; the slow one's trial lasts
    # until the fast one, out of points, has started the next round's first point ahead of
    # time (when a next round can follow). A loop run ahead of time only marks that it started.
    r = round_of(wr)
    if ahead:
        mark(f"ahead-{r}")
        return
    mark(f"{ROLE}-{r}")
    other = "main" if ROLE == "worker" else "worker"
    if cfg["sync"] == "share" or ROLE != cfg["slow"]:
        wait_for(f"{other}-{r}")
    elif r < MAX_WIDEN:  # the slow process, in a round another can follow
        wait_for(f"ahead-{r + 1}")


sweep.run_loop = fake_loop
ROLE = "worker"
# a warm sweep's trials start from the main loop's eviction age (all a fake trial reads of
# it; each screen runs on its own copy of it)
from flashml.systems.baleen.converge import WarmStart
WARM = WarmStart(3600.0, 6, None, {}, 1.0) if cfg.get("warm") else None
"""

# A worker process: serves the points it is sent, as flashml/systems/baleen/sweep_worker.py does.
WORKER = FAKE + r"""
from flashml.settings import JOB_GBM, LoopSettings
from flashml.tracking import setup
setup()
seed, parent = sys.argv[2:]
if cfg.get("worker_fails_at"):
    real = sweep.run_loop
    def failing(*a, **k):
        if a[4] > cfg["worker_fails_at"]:
            if cfg.get("sync"):
                mark(f"worker-{round_of(a[4])}")  # it took a point of this round
            raise ValueError("a broken trial")
        return real(*a, **k)
    sweep.run_loop = failing
sweep.serve(sweep.TrialSetup(None, Path("t"), None, None, 0.4, 10.0, Path(cfg["tmp"]), JOB_GBM,
                             LoopSettings(), "s", warm=WARM), cfg["storage"], int(seed),
            parent, sys.stdin, sys.stdout)
"""

DRIVER = FAKE + r"""
import subprocess
import mlflow

from flashml.settings import JOB_GBM, LoopSettings
from flashml.tracking import setup

setup()
ROLE = "main"
with mlflow.start_run(run_name="parent") as parent:
    spawn = None
    if cfg.get("workers", 1) > 1:
        def spawn(seed):
            return subprocess.Popen([*cfg["python"], "-c", cfg["worker"], json.dumps(cfg),
                                     str(seed), parent.info.run_id], text=True,
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    res = sweep.run_sweep(None, Path("t"), None, None, 10.0, 0.4, 10.0, Path(cfg["tmp"]),
                          JOB_GBM, LoopSettings(), trials=cfg["trials"], storage=cfg["storage"],
                          study_name="s", user_attrs={"trace": "t.trace", "git_commit": "abc"},
                          workers=cfg.get("workers", 1), spawn=spawn, warm=WARM,
                          promote_within=cfg.get("promote_within"))
import optuna
study = optuna.load_study(study_name="s", storage=res.storage)
runs = mlflow.search_runs(search_all_experiments=True, output_format="list",
                          filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
print("RESULT " + json.dumps({
    "trials": res.trials, "range": res.range_mbps, "widened": res.widened,
    "metric_names": study.metric_names, "user_attrs": study.user_attrs,
    "runs": [{"name": r.info.run_name, "status": r.info.status,
              "state": r.data.tags.get(sweep.STATE_TAG),
              "ran_ahead": r.data.tags.get("flashml.ran_ahead") == "true",
              "screen_tco": r.data.metrics.get("screen_tco"),
              "pid": r.data.metrics.get("pid"),
              "target": float(r.data.params["write_rate_mbps"])} for r in runs]}))
"""


def _sweep(tmp: Path, fails: bool = False, **cfg: object) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLASHML_", "MLFLOW_"))}
    env |= {"FLASHML_HOME": str(seed_mlflow_store(tmp / "state")),
            "PYTHONPATH": str(REPO / "tests")}
    # top: the first round's top, 4 x the 10 MB/s target DRIVER asks for
    cfg = {"tmp": str(tmp), "worker": WORKER, "top": 40.0, "python": python_argv(),
           "storage": f"sqlite:///{tmp / 'state' / 'optuna.db'}", **cfg}
    proc = subprocess.run(python_argv("-c", DRIVER, json.dumps(cfg)),
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    if fails:
        assert proc.returncode != 0
        return {"stderr": proc.stderr}
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.split("RESULT ", 1)[1].splitlines()[0])


def test_grid_widening_and_study_attributes(tmp_path: Path) -> None:
    """TCO falls until 120 MB/s, 12x the 10 MB/s target: the first range (2.5-40 MB/s) has
    its best point at the top edge (the grid visits 40 MB/s itself), so the sweep widens it
    (x4 a step, 4 new points above the old top each time) until it brackets the minimum;
    every trial's MLflow run ends FINISHED, tagged COMPLETE."""
    res = _sweep(tmp_path, trials=8, saturation_mbps=400.0, scale_mbps=60.0)
    assert res["widened"] >= 1
    targets = [t["target_write_rate_mbps"] for t in res["trials"]]
    assert targets[:8] == pytest.approx(grid(2.5, 40.0, 8, 10.0))
    assert targets[8:12] == pytest.approx(grid(40.0, 160.0, 5)[1:])
    assert res["range"][1] == pytest.approx(10.0 * 4.0 * WIDEN ** res["widened"])
    best = min((t for t in res["trials"] if t["state"] == "COMPLETE"), key=lambda t: t["tco"])
    assert best["target_write_rate_mbps"] > 40.0  # beyond the first range's top
    # TCO's minimum is at 120 MB/s here: the last range brackets it
    assert res["range"][0] < 120.0 < res["range"][1]
    assert res["metric_names"] == ["tco"]
    assert res["user_attrs"]["trace"] == "t.trace" and res["user_attrs"]["git_commit"] == "abc"
    assert res["user_attrs"]["target_write_rate_mbps"] == 10.0
    assert res["user_attrs"]["write_rate_range_mbps"] == pytest.approx(res["range"])
    states = {t["number"]: t["state"] for t in res["trials"]}
    assert set(states.values()) == {"COMPLETE"}, states
    runs = {int(r["name"].rsplit("-", 1)[1]): r for r in res["runs"]}
    assert set(runs) == set(states)
    assert all((r["status"], r["state"]) == ("FINISHED", "COMPLETE") for r in runs.values())


def test_beyond_saturation_reuses_the_saturated_trial(tmp_path: Path) -> None:
    """The policy writes at most 20 MB/s: the grid point at 23 MB/s falls short (a real
    trial), and the one at 40 MB/s, above it, is not run again but takes its result."""
    res = _sweep(tmp_path, trials=6, saturation_mbps=20.0, scale_mbps=60.0)
    by_target = {round(t["target_write_rate_mbps"], 1): t for t in res["trials"]}
    assert sorted(by_target) == [2.5, 4.4, 7.6, 10.0, 23.0, 40.0]
    sat, top = by_target[23.0], by_target[40.0]
    assert sat["write_rate_mbps"] == pytest.approx(20.0) and sat["same_as_trial"] is None
    assert top["same_as_trial"] == sat["number"] and top["tco"] == sat["tco"]
    assert all(t["same_as_trial"] is None for t in res["trials"] if t is not top)
    assert res["widened"] == 0  # saturated: more range would repeat the same point
    # no MLflow run for the copied trial: it trained and simulated nothing
    assert {int(r["name"].rsplit("-", 1)[1]) for r in res["runs"]} == \
        {t["number"] for t in res["trials"]} - {top["number"]}


def test_a_warm_sweep_runs_only_the_points_its_screen_finds_promising(tmp_path: Path) -> None:
    """A warm sweep screens each round's points with the main loop's model (one iteration,
    nothing trained) and runs the loop only where the screened TCO is within 15% of the best
    screened one: the others are PRUNED trials carrying their screen's figures (MLflow runs
    FINISHED, tagged PRUNED), never the chosen point; the widened round is screened too."""
    res = _sweep(tmp_path, trials=6, saturation_mbps=400.0, scale_mbps=60.0, warm=True,
                 promote_within=0.15)
    screened = [float(x) for x in (tmp_path / "screens").read_text().split()]
    assert len(screened) == len(res["trials"])  # every point once
    # each round's points judged against the best screened by then (this round's included)
    seen: list[float] = []
    for r in range(res["widened"] + 1):  # round r: (its bottom, 40 x WIDEN^r MB/s]
        lo, top = (0.0 if r == 0 else 40.0 * WIDEN ** (r - 1)), 40.0 * WIDEN ** r
        now = [t for t in res["trials"] if lo < t["target_write_rate_mbps"] <= top * 1.001]
        seen += [t["screen_tco"] for t in now]
        for t in now:
            assert t["state"] == ("PRUNED" if t["screen_tco"] > 1.15 * min(seen)
                                  else "COMPLETE"), t
            assert (t["tco"] is None) == (t["state"] == "PRUNED")
    best = min(seen)
    states = [t["state"] for t in res["trials"]]
    assert states.count("PRUNED") >= 4 and res["widened"] >= 1  # 2.5-10 MB/s: 15-30% above
    runs = {int(r["name"].rsplit("-", 1)[1]): r for r in res["runs"]}
    for t in res["trials"]:
        r = runs[t["number"]]
        assert r["status"] == "FINISHED" and r["state"] == t["state"]
        if t["state"] == "PRUNED":
            assert r["screen_tco"] == pytest.approx(t["screen_tco"])
    done = [t for t in res["trials"] if t["state"] == "COMPLETE"]
    assert min(t["tco"] for t in done) == pytest.approx(best)
    # the screens of a round run side by side, each from the points measured before the
    # round (what a screen finds does not depend on which ran first); the trials after it
    # start from every screen's points
    seen_by = [line.split() for line in (tmp_path / "points_seen").read_text().splitlines()]
    first = {float(wr) for wr, it, _ in seen_by if it == "1" and float(wr) <= 40.0 * 1.001}
    assert len(first) == 6
    assert {int(n) for wr, it, n in seen_by if float(wr) in first and it == "1"} == {0}
    trials = [int(n) for wr, it, n in seen_by if it != "1"]
    assert trials and min(trials) >= 6


def test_promoted_points_loops_run_side_by_side(tmp_path: Path) -> None:
    """After a round's screens, the promoted points' loops run two at a time in the main
    process (sharing one build lock), from the lowest up to the first point whose screen fell
    short of its target; their trials take them as loops run ahead of time, with the figures
    a loop run in its trial gives."""
    res = _sweep(tmp_path, trials=6, saturation_mbps=400.0, scale_mbps=60.0, warm=True,
                 promote_within=0.15, loop_s=0.5)
    loops = [line.split() for line in (tmp_path / "loops").read_text().splitlines()]
    spans = {float(wr): (float(a), float(b)) for wr, a, b, _ in loops}
    assert all(lock == "1" for *_, lock in loops)
    first = sorted(wr for wr in spans if wr <= 40.0 * 1.001)
    assert len(first) >= 2
    (a0, a1), (b0, b1) = spans[first[0]], spans[first[1]]
    assert a0 < b1 and b0 < a1  # they overlapped
    ran = {r["target"]: r["ran_ahead"] for r in res["runs"] if r["state"] == "COMPLETE"}
    assert all(ran[wr] for wr in first if wr in ran)
    for t in res["trials"]:
        if t["state"] == "COMPLETE" and t["screen_tco"] is not None:
            assert t["tco"] is not None


def test_a_screen_that_converges_is_its_trial(tmp_path: Path) -> None:
    """A point whose screen converges (the main model meets its target at the main loop's
    eviction age) is complete: its trial takes the screen, no loop runs again."""
    res = _sweep(tmp_path, trials=4, saturation_mbps=400.0, scale_mbps=60.0, warm=True,
                 promote_within=0.15, screen_converges=True)
    assert {t["state"] for t in res["trials"]} == {"COMPLETE"}
    assert all(t["screen_tco"] == t["tco"] for t in res["trials"])
    screened = (tmp_path / "screens").read_text().split()
    assert len(screened) == len(res["trials"])  # the screens only: no loop ran after them


def test_grid() -> None:
    """Log-spaced, both ends included; the target replaces its nearest grid point."""
    assert grid(1.0, 1000.0, 4) == pytest.approx([1.0, 10.0, 100.0, 1000.0])
    assert grid(2.5, 40.0, 5, 10.0) == pytest.approx([10.0, 2.5, 5.0, 20.0, 40.0])
    six = grid(9.33, 149.3, 6, 37.33)
    assert six[0] == 37.33 and six[1] == pytest.approx(9.33) and six[-1] == pytest.approx(149.3)
    assert len(six) == 6 and len(set(six)) == 6
    assert grid(1.0, 4.0, 1, 3.0) == [3.0] and grid(1.0, 4.0, 0) == []
    # 10 is the geometric middle of 7.58 and 13.19: a tie, which goes to the upper point
    assert grid(2.5, 40.0, 6, 10.0) == pytest.approx([10.0, 2.5, 4.353, 7.579, 22.97, 40.0],
                                                     rel=1e-3)


def test_widened_range() -> None:
    def trial(target: float, measured: float, tco: float) -> dict:
        return {"state": "COMPLETE", "tco": tco, "target_write_rate_mbps": target,
                "write_rate_mbps": measured}

    edge = [trial(10, 10, 1.0), trial(38, 38, 0.8), trial(20, 20, 0.9)]
    assert widened_range(edge, 2.5, 40.0) == (19.0, 160.0)
    inside = [trial(10, 10, 1.0), trial(20, 20, 0.7), trial(38, 38, 0.8)]
    assert widened_range(inside, 2.5, 40.0) is None
    # the policy could not write its target: more range would only repeat the same point
    saturated = edge + [trial(39, 30, 0.85)]
    assert widened_range(saturated, 2.5, 40.0) is None
    assert widened_range([], 2.5, 40.0) is None


def test_tco_curve_shows_the_searched_range(tmp_path: Path) -> None:
    from flashml.jobs.report import plot_tco_curve

    curve = [(37.0, 0.78), (146.0, 0.656), (205.0, 0.685)]
    plain = plot_tco_curve(curve, 146.0, tmp_path / "a.png").read_bytes()
    ranged = plot_tco_curve(curve, 146.0, tmp_path / "b.png", bounds=(9.3, 597.0)).read_bytes()
    assert plain != ranged  # the dashed bounds and their legend entry


def test_parallel_workers_share_the_study(tmp_path: Path) -> None:
    """--sweep-workers 2: the main process and a worker process run the round's trials on
    one sqlite study, every trial's MLflow run nested under the job's run, the widening
    rounds shared too, by the same worker (started once), each point run once. Each process's
    first trial of a round waits until the other has started one of that round too (sync
    "share"), so both take part in every round however long the worker takes to start."""
    res = _sweep(tmp_path, trials=6, saturation_mbps=400.0, scale_mbps=60.0, workers=2,
                 trial_s=0.3, sync="share")
    assert res["widened"] >= 1
    done = [t for t in res["trials"] if t["state"] == "COMPLETE"]
    assert len(done) == len(res["trials"]) == 6 + res["widened"] * 3
    targets = [t["target_write_rate_mbps"] for t in res["trials"]]
    assert sorted(targets[:6]) == pytest.approx(sorted(grid(2.5, 40.0, 6, 10.0)))
    assert len(set(targets)) == len(targets)
    pids = {r["pid"] for r in res["runs"]}
    # the main process and the one worker, which took trials from every round
    assert len(pids) == 2, pids
    rounds = [[r["pid"] for r in res["runs"]
               if lo < r["target"] <= hi * (1 + 1e-9)]
              for lo, hi in ((0.0, 40.0), (40.0, 160.0), (160.0, 640.0))[:res["widened"] + 1]]
    assert all(set(r) == pids for r in rounds), rounds
    assert {int(r["name"].rsplit("-", 1)[1]) for r in res["runs"]} == \
        {t["number"] for t in res["trials"]}
    assert all(r["status"] == "FINISHED" for r in res["runs"])


def test_a_failing_worker_fails_the_sweep(tmp_path: Path) -> None:
    """A worker whose trial raises: the sweep stops with an error naming the worker and the
    trial's error, instead of hanging or finishing without that point."""
    # the worker takes part in every round (sync "share"), and every point but the first
    # round's lowest two (2.5 and 4.4 MB/s) is above 5 MB/s: it gets one
    res = _sweep(tmp_path, fails=True, trials=6, saturation_mbps=400.0, scale_mbps=60.0,
                 workers=2, trial_s=0.3, worker_fails_at=5.0, sync="share")
    assert "sweep workers failed" in res["stderr"]
    assert "ValueError: a broken trial" in res["stderr"]


def _same_trials(a: dict, b: dict) -> None:
    """The same points with the same results, a copied one copying the same point (trial
    numbers follow the order the trials started in, which two processes change)."""
    def rows(res: dict) -> list:
        target = {t["number"]: t["target_write_rate_mbps"] for t in res["trials"]}
        return sorted((t["target_write_rate_mbps"], t["write_rate_mbps"], t["tco"],
                       target.get(t["same_as_trial"])) for t in res["trials"])
    assert rows(a) == rows(b)


@pytest.fixture(scope="module")
def one_process_sweep(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """The one-process warm sweep at a saturation, run once for the tests that compare with
    it (its trials' results do not depend on how long a trial takes)."""
    done: dict[float, dict] = {}

    def get(saturation: float) -> dict:
        if saturation not in done:
            done[saturation] = _sweep(tmp_path_factory.mktemp("one"), trials=6,
                                      saturation_mbps=saturation, scale_mbps=60.0, warm=True)
        return done[saturation]
    return get


@pytest.mark.parametrize(("saturation", "slow"), [(400.0, "main"), (30.0, "main"),
                                                  (400.0, "worker"), (30.0, "worker")])
def test_a_free_process_runs_the_next_rounds_first_point_ahead(tmp_path: Path,
                                                               saturation: float,
                                                               slow: str,
                                                               one_process_sweep) -> None:
    """A warm sweep with a worker process: when one process has no point left while the
    other still runs the round's last one, it runs the next round's first point ahead of
    time (a worker in its process, the main process in a thread). If the range widens, that
    point's trial takes the loop already run (tagged flashml.ran_ahead) and goes first, so
    the points above it that it saturates are copied as with one process; if it does not
    widen, the worker is stopped (the main process's loop cancelled) and the sweep ends as it
    would have. Either way the trials are those of the one-process sweep."""
    cfg = dict(trials=6, saturation_mbps=saturation, scale_mbps=60.0, warm=True, trial_s=0.3)
    one = one_process_sweep(saturation)
    # the slow process's trial lasts until the other, out of points, runs the next round's
    # first point ahead of time (sync "ahead"; the other waits for the slow one to have
    # taken a point of the round first, however long the worker takes to start)
    two = _sweep(tmp_path / "two", workers=2, sync="ahead", slow=slow, **cfg)
    _same_trials(one, two)
    ahead = [r for r in two["runs"] if r["ran_ahead"]]
    if saturation == 400.0:  # the best point sits at the top: the range widens
        assert two["widened"] >= 1 and len(ahead) >= 1
        assert all(r["status"] == "FINISHED" for r in two["runs"])
        assert not any(r["ran_ahead"] for r in one["runs"])
    else:  # saturated inside the first range: no second round, nothing ran ahead is kept
        assert two["widened"] == 0 and ahead == []
        assert len(two["trials"]) == 6
