"""The CLI: `--help` on every command, and the main job end to end."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from flashml.cli import build_parser, main


def all_commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()):
    yield prefix
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from all_commands(sub, prefix + (name,))


COMMANDS = list(all_commands(build_parser()))


def test_expected_commands_exist() -> None:
    for cmd in [("trace", "ingest"), ("trace", "generate"), ("trace", "stats"),
                ("trace", "validate"), ("trace", "sample"), ("pipeline", "run"),
                ("sim", "run"), ("sim", "objects")]:
        assert cmd in COMMANDS


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: " ".join(c) or "flashml")
def test_every_command_has_help(cmd: tuple[str, ...], capsys) -> None:
    with pytest.raises(SystemExit) as e:
        main([*cmd, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: flashml")
    assert len(out.splitlines()) > 3


def test_main_job_end_to_end(tmp_path: Path, cli) -> None:
    work = tmp_path / "run"
    proc = cli("pipeline", "run", "--workdir", work, check=True)
    summary = json.loads((work / "summary.json").read_text())
    assert summary["validate"]["success"] is True
    assert Path(summary["validate"]["data_docs"]).exists()
    stats = summary["stats"]
    assert stats["requests"] == summary["ingest"]["rows"] == summary["generate"]["accesses"]
    assert 0.15 < stats["compulsory_miss_rate"] < 0.21  # region1-like's documented range
    sim = summary["simulate"]
    for name in ("admitall", "rejectx"):
        assert sim[name]["accesses"] == stats["requests"]
        assert 0 < sim[name]["peak_dt_util"] < 1
    # RejectX admits a subset of what admit-all admits at the same size
    assert sim["rejectx"]["flash_write_rate_mbps"] < sim["admitall"]["flash_write_rate_mbps"]
    assert (work / "dt_util.png").stat().st_size > 10_000
    assert "peak_dt_util" in proc.stdout and "validation" not in proc.stderr.lower()
