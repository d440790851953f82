"""The C heap's bound (flashml/heap.py): set through mallopt where glibc runs, and left alone
when the environment sets it."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from flashml import heap


def test_the_environment_wins(monkeypatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert heap.bound() is False


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                    reason="mallopt's parameters are glibc's")
def test_a_freed_block_goes_back_to_the_system() -> None:
    """Without the bound, glibc's dynamic mmap threshold keeps an 8 MB block freed after a
    16 MB one in the heap; with it, every block of 1 MB or more is unmapped when freed: the
    resident set falls back after freeing 64 blocks of 8 MB."""
    code = """
import ctypes, os, sys
from flashml import heap
if sys.argv[1] == "bound":
    assert heap.bound()
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
def rss():
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) >> 10
big = libc.malloc(16 << 20); libc.memset(big, 1, 16 << 20); libc.free(big)
before = rss()
blocks = [libc.malloc(8 << 20) for _ in range(64)]
for b in blocks:
    libc.memset(b, 1, 8 << 20)
for b in blocks[:-1]:  # the last one pins the top of the heap
    libc.free(b)
print(rss() - before)
"""
    grown = {how: int(subprocess.run([sys.executable, "-c", code, how], check=True,
                                     capture_output=True, text=True).stdout)
             for how in ("default", "bound")}
    assert grown["default"] >= 400  # the freed blocks stay in the heap (MB)
    assert grown["bound"] <= 50
