"""The adversarial suite's fixed-seed subset (tests/adversarial/; the full catalogue is
`make fuzz` and bench/bench_adversarial.py): about 100 cases, every family represented,
hostile numbers, outputs that are inputs, FIFOs, tampered bundles against every loader,
hostile traces, two flashrt runs on one output and kill -9 of ingest. Every case must end
ok or in one clear error: no unverified code run, no user file changed, no traceback, hang,
abort or partial output, nothing that must be refused accepted."""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

import adversarial as adv
import pytest
from adversarial import sessions

from conftest import REPO

SEED = 40
CASES = int(os.environ.get("FLASHML_ADVERSARIAL_CASES", "100"))
_SUBSET = adv.subset(adv.catalogue(seed=SEED, quick=True), CASES, SEED)


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, adv.Result]]:
    """Every case of the subset, two at a time (fixtures cached across sessions)."""
    scratch = tmp_path_factory.mktemp("adversarial")
    with adv.session(scratch, log=lambda s: None, cache=True) as (fx, scratch):
        r = adv.Runner(fx, Path(scratch), parallel=2)
        yield {x.id: x for x in r.run(_SUBSET)}


@pytest.mark.parametrize("case", _SUBSET, ids=[c.id for c in _SUBSET])
def test_adversarial_case(results: dict[str, adv.Result], case: adv.Case) -> None:
    r = results[case.id]
    assert r.cls in ("ok", "error"), (
        f"{r.cls}: {r.argv}\nexit {r.rc}: {r.first_stderr}\n{r.detail}")


def test_the_subset_covers_every_family() -> None:
    fams = {c.family for c in adv.catalogue(seed=SEED, quick=True)}
    assert fams == {c.family for c in _SUBSET}
    assert len(adv.catalogue(seed=SEED, quick=True)) >= 1000


def test_every_numeric_option_has_a_base_command() -> None:
    """A new command is covered (or this fails, naming it) without writing a test."""
    for cmd, opts in adv.numeric_options().items():
        assert cmd in adv.BASE, cmd
        assert all(o.startswith("--") for o in opts)


def test_flashrt_numeric_options_come_from_its_help() -> None:
    """flashrt's numeric options are read from each command's --help: the engine's slots'
    knobs are covered, and every option given a context is one the help names."""
    opts = adv.rt_numeric_options()
    for o in ("--flash-bytes", "--region-bytes", "--partition-shares", "--partition-interval",
              "--rejectx-x", "--rejectx-factor", "--coinflip-p", "--coinflip-seed",
              "--lifespan-epbpd", "--tire-slack", "--tire-steps", "--tire-quantum-s",
              "--readahead-window-ms", "--write-burst-s"):
        assert o in opts["replay"], o
    for cmd, opt in adv.RT_CONTEXT:
        assert opt in opts[cmd], (cmd, opt)
    assert all(opts[cmd] for cmd in adv.RT_BASE)


def test_every_flashrt_base_command_runs(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The command lines the hostile values are added to run as they are: a fixture that
    broke one (a bundle whose manifest does not match its .so) would turn every case of that
    command into a refusal for the wrong reason. (flashml's, jobs to their end: the `base`
    family of the full suite.)"""
    scratch = tmp_path_factory.mktemp("adversarial-base")
    with adv.session(scratch, log=lambda s: None, cache=True) as (fx, scratch):
        got = adv.Runner(fx, Path(scratch), parallel=2).run(
            [c for c in adv.base_cases() if c.tool == "flashrt"])
    bad = [f"{r.id}: exit {r.rc}: {r.first_stderr} {r.detail}" for r in got if r.rc != 0]
    assert not bad, "\n".join(bad)


def test_a_cached_fixture_set_in_use_is_not_removed(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A session whose key changed (an edit to the runtime mid-run) leaves alone the set
    another session is still using; the next session removes it once nobody holds it."""
    def build(root: Path, log: object) -> dict[str, Path]:
        if not (root / "fixtures.json").exists():
            root.mkdir(parents=True, exist_ok=True)
            (root / "f").write_text(root.name)
            (root / "fixtures.json").write_text("{}")
        return {"f": root / "f"}

    monkeypatch.setattr(sessions, "REPO", tmp_path)
    monkeypatch.setattr(sessions, "build_fixtures", build)
    monkeypatch.setattr(sessions, "fixtures_key", lambda: "old")
    with adv.session(tmp_path, log=lambda s: None, cache=True) as (fx, _):
        monkeypatch.setattr(sessions, "fixtures_key", lambda: "new")
        with adv.session(tmp_path, log=lambda s: None, cache=True) as (fx2, _):
            assert fx["f"].read_text() == "old" and fx2["f"].read_text() == "new"
        assert fx["f"].read_text() == "old"
    with adv.session(tmp_path, log=lambda s: None, cache=True) as (fx3, _):
        with adv.session(tmp_path, log=lambda s: None, cache=True) as (fx4, _):
            assert fx3 == fx4  # one set, two sessions of one process at once
    assert sorted(p.name for p in (tmp_path / ".flashml" / "adversarial-fixtures").iterdir()
                  ) == ["new", "new.lock"]


_RT_NUMBERS = [c for c in adv.number_cases(adv.HOSTILE) if c.family == "numbers-flashrt"]


def test_flashrt_numbers_refused_with_option_and_unit(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """Every hostile value of every numeric option of every flashrt replay command (`replay`'s
    each in a context where its slot's policy takes it): ok or one clear error; a value that
    must be refused is refused by a line naming the option and what it expects (its unit:
    "(expected ...)", "must be in ..." or a declared knob's "(must be at most 100 %)")."""
    scratch = tmp_path_factory.mktemp("adversarial-rt")
    with adv.session(scratch, log=lambda s: None, cache=True) as (fx, scratch):
        got = adv.Runner(fx, Path(scratch), parallel=2).run(_RT_NUMBERS)
    bad = [f"{r.cls}: {r.argv}\n  exit {r.rc}: {r.first_stderr} {r.detail}"
           for r in got if r.cls not in ("ok", "error")]
    unnamed = [f"{r.id}: {r.first_stderr}" for r, c in zip(got, _RT_NUMBERS, strict=True)
               if c.must_refuse and not (r.names_it and ("expected" in r.first_stderr
                                                         or "must be in" in r.first_stderr
                                                         or "(must be " in r.first_stderr))]
    assert not bad, "\n".join(bad)
    assert not unnamed, "\n".join(unnamed)


def test_docs_figures_are_the_committed_results() -> None:
    """docs/security.md's adversarial table is rendered from bench/results/adversarial.json."""
    import json
    import sys

    repo = REPO
    sys.path.insert(0, str(repo / "bench"))
    from bench_adversarial import security_section

    doc = json.loads((repo / "bench" / "results" / "adversarial.json").read_text())
    assert security_section(doc) in (repo / "docs" / "security.md").read_text(), (
        "docs/security.md's adversarial table is stale: run bench/bench_adversarial.py "
        "(it rewrites the section) or paste the section it prints")


def noop(argv: list[str]) -> int:  # noqa: ARG001
    return 0


def slow_then_noisy(argv: list[str]) -> int:
    """A command that says one line, works until it is stopped, and then (as a cleanup meeting
    an operation the stop interrupted can) prints a traceback while unwinding."""
    print(f"flashml: working on {argv[0]}", file=sys.stderr, flush=True)
    try:
        time.sleep(60)
    finally:
        traceback.print_stack()
        print("sqlite3.ProgrammingError: Cannot operate on a closed database.", file=sys.stderr)
    return 0


def swallows_the_stop(argv: list[str]) -> int:
    """The stop raised where it is swallowed (as in a garbage collector's callback)."""
    print(f"flashml: working on {argv[0]}", file=sys.stderr, flush=True)
    try:
        time.sleep(60)
    except BaseException:  # noqa: BLE001, S110 - what a GC callback does to an exception
        pass
    time.sleep(60)
    return 0


def wraps_the_stop(argv: list[str]) -> int:
    """The stop raised in a class body and re-raised as another error (__set_name__ does)."""
    print(f"flashml: working on {argv[0]}", file=sys.stderr, flush=True)
    try:
        time.sleep(60)
    except BaseException as e:
        raise RuntimeError("Error calling __set_name__ on 'cached_property' instance") from e
    return 0


@pytest.mark.parametrize("entry", ["slow_then_noisy", "swallows_the_stop", "wraps_the_stop"])
def test_a_stop_at_the_budget_judges_what_came_before_it(tmp_path: Path, entry: str) -> None:
    """The in-process worker stops a case at its budget by raising in it; what the command
    prints while unwinding is the stop's noise and is cut, and whatever the stop turns into
    on its way out, the case ran past its time: a job stopped at its budget is `ok`, not a
    `hang` or a `traceback`, and the worker answers (it is not killed). Where every thread
    stood is kept for a real hang."""
    # the worker imports this module (its entries below) from its folder
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests"),
                                                        str(Path(__file__).resolve().parent)])}
    worker = adv.Worker(env)
    err = tmp_path / "case.err"
    try:
        # the worker's interpreter and this module imported first (outside the timed case):
        # the case's first line is then printed at once, long before its 3 s
        assert worker.run(["x"], tmp_path, {}, 600.0, tmp_path / "warm.err",
                          entry="test_adversarial:noop") == (0, False)
        rc, hang = worker.run(["trace.csv"], tmp_path, {}, 3.0, err,
                              entry=f"test_adversarial:{entry}")
    finally:
        worker.kill()
    assert hang and rc is not None
    assert err.read_text() == "flashml: working on trace.csv\n"
    assert entry in Path(f"{err}.stacks").read_text()
    case = adv.Case(id="job", family="numbers", tool="flashml", argv=[], budget=3.0,
                    timeout=3.0)
    got = adv.judge(case, {}, tmp_path, adv._snapshot(tmp_path), rc, err.read_text(), 3.0,
                    tmp_path / "EVIL_MARKER", [], hang)
    assert got.cls == "ok", got


def test_a_cases_timeout_stretches_with_the_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """A timeout guards against a hang, a budget stops a job that took its value: at a load of
    8 on 2 cores a command gets 4 times either (a FIFO refusal by a job command, with its
    imports, took over 10 s at a load of 5; a refusal of an output that is a hard link of the
    input came after an 8 s budget at a load of 10)."""
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (8.0, 1.0, 1.0))
    assert adv.load_factor() == 4.0
    monkeypatch.setattr(os, "getloadavg", lambda: (0.5, 1.0, 1.0))
    assert adv.load_factor() == 1.0
