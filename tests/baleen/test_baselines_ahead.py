"""The simple baselines tuned ahead on a low-priority thread (baselines_ahead.py): the stage
takes the thread's results, waits for one it is running, and searches itself one the thread
has not started; a job that ends first cancels the running search and waits for the
thread."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from flashml.systems.baleen import baselines, baselines_ahead
from flashml.systems.baleen.baselines_ahead import BaselinesAhead
from flashml.systems.baleen.tuning import SearchCancelled


@pytest.fixture
def fake(monkeypatch):
    calls: list[tuple[str, str]] = []
    gate = threading.Event()

    def tuner(name: str, wait: bool):
        def tune(df, base, target, *, cancel):
            calls.append((name, threading.current_thread().name))
            deadline = time.monotonic() + 10
            while wait and not gate.is_set() and time.monotonic() < deadline:
                if cancel.is_set():  # as a search checks before each simulation
                    raise SearchCancelled("cancelled")
                time.sleep(0.01)
            return SimpleNamespace(name=name, target=target)
        return tune

    monkeypatch.setattr(baselines, "tune_rejectx", tuner("rejectx", True))
    monkeypatch.setattr(baselines, "tune_coinflip", tuner("coinflip", False))
    monkeypatch.setattr(baselines_ahead, "base_config", lambda run, s: "base")
    run = SimpleNamespace(frame=lambda: ("df", "meta"))
    return run, SimpleNamespace(target_write_rate_mbps=37.0), calls, gate


def test_the_stage_takes_what_the_thread_tuned(fake) -> None:
    run, s, calls, gate = fake
    ahead = BaselinesAhead(run, s)
    while not calls:  # the thread is in RejectX's search
        time.sleep(0.01)
    gate.set()
    got = ahead.take("rejectx")  # waits for the search the thread runs
    assert got is not None and got[0].name == "rejectx" and got[0].target == 37.0
    assert ahead.take("coinflip")[0].name == "coinflip"
    assert [n for n, _ in calls] == ["rejectx", "coinflip"]
    assert all(t == "baselines-ahead" for _, t in calls)


def test_the_stage_claims_a_search_the_thread_has_not_started(fake) -> None:
    run, s, calls, gate = fake
    ahead = BaselinesAhead(run, s)
    while not calls:
        time.sleep(0.01)
    assert ahead.take("coinflip") is None  # not started: the stage searches it itself
    gate.set()
    assert ahead.take("rejectx")[0].name == "rejectx"
    ahead._thread.join(10)
    assert [n for n, _ in calls] == ["rejectx"]  # the thread skipped the claimed one


def test_a_stopped_thread_cancels_its_search_and_ends(fake) -> None:
    run, s, calls, gate = fake
    ahead = BaselinesAhead(run, s)
    while not calls:
        time.sleep(0.01)
    t0 = time.monotonic()
    ahead.stop()  # returns once the thread has ended: its search cancelled, not finished
    assert not ahead._thread.is_alive() and time.monotonic() - t0 < 5
    assert ahead.take("rejectx") is None and ahead.take("coinflip") is None
    assert [n for n, _ in calls] == ["rejectx"]


@pytest.mark.parametrize("tune", [baselines.tune_rejectx, baselines.tune_coinflip])
def test_a_cancelled_search_runs_no_simulation(tune) -> None:
    stop = threading.Event()
    stop.set()
    with pytest.raises(SearchCancelled):  # before the first simulation (no table needed)
        tune(None, SimpleNamespace(replace=lambda **kw: None), 37.0, cancel=stop)
