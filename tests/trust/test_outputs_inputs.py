"""Outputs never destroy inputs, and a bad output location is one clear error.

Every command that writes a file or folder compares its outputs with its inputs before any
work (flashml.files.check_outputs: the same device and inode after links; FIFOs, sockets and
character devices refused, /dev/null allowed): the output named as the input, a symlink to
it, a hard link to it and a FIFO are refused naming the output option, and the input's bytes
stay as they were. An -o that cannot be written (a file where a folder is needed, a path
under a file, a folder nobody may write in) is refused naming -o, exit 1, no traceback. A
reader of stdout that goes away (`flashml ... | head`) ends the command quietly.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from flashml import cli

from conftest import DATA, python_argv


class Reached(Exception):
    """The command started its work: the check under test did not refuse."""


@pytest.fixture(autouse=True)
def _no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever is not refused stops where the work starts (nothing is overwritten even when
    a check is missing)."""
    def stop(*a: Any, **k: Any) -> Any:
        raise Reached

    import flashml.commands.train as train
    import flashml.compiler.build as build
    import flashml.jobs.run as run
    import flashml.systems.baleen.episodes.core as core
    import flashml.trace.ingest as ingest

    for module, attr in ((run, "run_job"), (train, "_run"), (core, "build"),
                         (build, "compile_policy"), (ingest, "load_trace"),
                         (ingest, "canonical_path")):
        monkeypatch.setattr(module, attr, stop)


def _alarm(signum: int, frame: Any) -> None:
    raise TimeoutError("the command hung")


def main(argv: list[str]) -> int:
    """cli.main in-process, with a hang guard (a FIFO output must not block)."""
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(60)
    try:
        return cli.main(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 1
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


#: command -> (argv given the input and the output, the output's option, the input option)
COMMANDS: dict[str, tuple[Callable[[Path, Path], list[str]], str]] = {
    "sim run --series-out": (lambda i, o: ["sim", "run", "--trace", str(i), "--series-out",
                                           str(o)], "--series-out"),
    "episodes build": (lambda i, o: ["episodes", "build", "--trace", str(i), "--eviction-age",
                                     "600", "-o", str(o)], "-o"),
    "train": (lambda i, o: ["train", "--trace", str(i), "-o", str(o)], "-o"),
    "sweep": (lambda i, o: ["sweep", "--trace", str(i), "-o", str(o)], "-o"),
    "pipeline run": (lambda i, o: ["pipeline", "run", "--trace", str(i), "-o", str(o)], "-o"),
    "mat run": (lambda i, o: ["mat", "run", "--trace", str(i), "--format", "cloudphysics",
                              "-o", str(o)], "-o"),
    "pannier run": (lambda i, o: ["pannier", "run", "--trace", str(i), "-o", str(o)], "-o"),
    "mlcache run": (lambda i, o: ["mlcache", "run", "--trace", str(i), "-o", str(o)], "-o"),
    "kml run": (lambda i, o: ["kml", "run", "--trace", str(i), "-o", str(o)], "-o"),
}
HOW = ("same", "symlink", "hardlink", "fifo")


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("command", list(COMMANDS))
def test_an_output_that_is_an_input_is_refused(command: str, how: str, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    argv, option = COMMANDS[command]
    trace = tmp_path / "t.trace"
    trace.write_bytes((DATA / "tectonic_2023.trace").read_bytes())
    before = trace.read_bytes()
    out = {"same": trace, "symlink": tmp_path / "link", "hardlink": tmp_path / "hard",
           "fifo": tmp_path / "fifo"}[how]
    if how == "symlink":
        out.symlink_to(trace)
    elif how == "hardlink":
        os.link(trace, out)
    elif how == "fifo":
        os.mkfifo(out)
    rc = main(argv(trace, out))
    err = capsys.readouterr().err
    assert rc == 1, err
    assert err.startswith("flashml: error: ") and len(err.strip().splitlines()) == 1, err
    assert f"option {option}" in err, err
    assert "FIFO" in err if how == "fifo" else "--trace" in err, err
    assert trace.read_bytes() == before


@pytest.mark.parametrize("how", ("same", "symlink", "fifo"))
def test_compile_output_is_not_its_models(how: str, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """`flashml compile --model-dir D -o D` (or a link to D) would replace the models with
    the compiled bundle."""
    models = tmp_path / "models"
    models.mkdir()
    (models / "policy.json").write_text("{}\n")
    out = {"same": models, "symlink": tmp_path / "link", "fifo": tmp_path / "fifo"}[how]
    if how == "symlink":
        out.symlink_to(models)
    elif how == "fifo":
        os.mkfifo(out)
    rc = main(["compile", "--model-dir", str(models), "-o", str(out)])
    err = capsys.readouterr().err
    assert rc == 1 and "option -o" in err, err
    assert (models / "policy.json").read_text() == "{}\n"


def test_an_output_folder_holding_the_input_is_refused(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    """`-o DIR` replaces DIR as a whole: an input inside it would go with it."""
    run = tmp_path / "run"
    run.mkdir()
    trace = run / "t.trace"
    trace.write_bytes(b"x\n")
    assert main(["pannier", "run", "--trace", str(trace), "-o", str(run)]) == 1
    assert "is a folder holding --trace" in capsys.readouterr().err
    assert trace.read_bytes() == b"x\n"


def test_dev_null_is_a_fine_output(tmp_path: Path) -> None:
    from flashml.files import check_outputs

    check_outputs({"--series-out": os.devnull}, {"--trace": DATA / "tectonic_2023.trace"})


# --- -o that cannot be written -------------------------------------------------------------------
BAD_OUT = ("a-file", "under-a-file", "unwritable")
FOLDER_COMMANDS = ("episodes build", "train", "sweep", "pipeline run", "mat run",
                   "pannier run", "mlcache run", "kml run")


def _bad_out(kind: str, tmp_path: Path) -> Path:
    f = tmp_path / "plain-file"
    f.write_text("keep\n")
    if kind == "a-file":
        return f
    if kind == "under-a-file":
        return f / "out"
    return Path("/proc/flashml-no-such-place/out")  # nobody may create files in /proc


@pytest.mark.parametrize("kind", BAD_OUT)
@pytest.mark.parametrize("command", FOLDER_COMMANDS)
def test_unusable_output_folder(command: str, kind: str, tmp_path: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    argv, option = COMMANDS[command]
    trace = tmp_path / "t.trace"
    trace.write_bytes((DATA / "tectonic_2023.trace").read_bytes())
    out = _bad_out(kind, tmp_path)
    rc = main(argv(trace, out))
    err = capsys.readouterr().err
    assert rc == 1, err
    assert err.startswith(f"flashml: error: {out}: option -o: "), err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert (tmp_path / "plain-file").read_text() == "keep\n"


@pytest.mark.parametrize("kind", ("under-a-file", "unwritable", "a-folder"))
def test_unusable_series_out(kind: str, tmp_path: Path,
                             capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.trace"
    trace.write_bytes((DATA / "tectonic_2023.trace").read_bytes())
    out = tmp_path / "dir" if kind == "a-folder" else _bad_out(kind, tmp_path)
    if kind == "a-folder":
        out.mkdir()
    rc = main(["sim", "run", "--trace", str(trace), "--series-out", str(out)])
    err = capsys.readouterr().err
    assert rc == 1 and err.startswith(f"flashml: error: {out}: option --series-out: "), err


# --- a reader that goes away ---------------------------------------------------------------------
class _ClosedPipe(io.StringIO):
    def write(self, s: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


@pytest.mark.parametrize("argv", [
    ["sim", "objects", "--capacity", "2obj", "--format", "cloudphysics", "--json"],
    ["sim", "objects", "--capacity", "2obj", "--format", "cloudphysics"],
], ids=["objects-json", "objects-table"])
def test_stdout_closed_in_process(argv: list[str], tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("version,time,op,size,lbn\n1,1,2a,512,7\n1,2,2a,512,8\n")
    monkeypatch.setattr(sys, "stdout", _ClosedPipe())
    assert cli.main([*argv, "--trace", str(trace)]) == 141
    assert "Traceback" not in capsys.readouterr().err


def test_sim_run_json_into_a_closed_pipe(tmp_path: Path) -> None:
    """`flashml sim run --json | head -c 0`: the pipe's reader is gone before the metrics are
    printed; the command ends quietly (exit 141 as with SIGPIPE), no BrokenPipeError."""
    from flashml.trace.generate import generate_trace

    trace = tmp_path / "t.trace"
    generate_trace("region1-like", 0, trace, accesses=500, progress=False)
    r, w = os.pipe()
    os.close(r)  # the reader is gone
    try:
        proc = subprocess.run([*python_argv(), "-m", "flashml.cli", "sim", "run", "--trace",
                               str(trace), "--json"], stdout=w, stderr=subprocess.PIPE,
                              text=True, timeout=600)
    finally:
        os.close(w)
    assert proc.returncode in (0, 141), proc.stderr
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
