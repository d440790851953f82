"""flashml/files.py: atomic writes never replace what is not a regular file."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from flashml.files import atomic_path


def test_atomic_path_writes_a_device_in_place():
    # `-o /dev/null` must not rename a file onto the device node (as root it would turn
    # /dev/null into a regular file for every other process on the machine)
    if not os.path.exists("/dev/null"):
        pytest.skip("no /dev/null here")
    before = os.stat("/dev/null")
    assert stat.S_ISCHR(before.st_mode)
    with atomic_path("/dev/null") as tmp:
        assert str(tmp) == "/dev/null"
        tmp.write_bytes(b"x" * 1000)
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_ino == before.st_ino
    assert not [n for n in os.listdir("/dev") if n.startswith(".null")]


def test_atomic_path_into_a_fifo(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = subprocess.Popen([sys.executable, "-c", f"print(open({str(fifo)!r}).read())"],
                              stdout=subprocess.PIPE, text=True)
    with atomic_path(fifo) as tmp:
        tmp.write_text("hello")
    assert reader.communicate(timeout=30)[0].strip() == "hello"
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_atomic_path_still_replaces_a_regular_file(tmp_path):
    out = tmp_path / "x.json"
    out.write_text("old")
    with atomic_path(out) as tmp:
        assert tmp != out
        tmp.write_text("new")
    assert out.read_text() == "new"
