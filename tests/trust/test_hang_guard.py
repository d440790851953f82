"""The tests' guard against a hung child stretches with the machine's load, never below the
quiet-machine timeout."""

from __future__ import annotations

import os
import time

from conftest import hang_guard_expired, run_cli


def test_the_guard_expires_after_the_quiet_timeout_on_an_idle_machine() -> None:
    now = time.monotonic()
    assert not hang_guard_expired(now - 9.0, 10.0, busiest=0.0)
    assert hang_guard_expired(now - 11.0, 10.0, busiest=0.0)


def test_the_guard_stretches_with_the_busiest_load_seen() -> None:
    cpus = os.cpu_count() or 1
    now = time.monotonic()
    # a load of 20 per core: 20 times the quiet timeout before a child counts as hung
    assert not hang_guard_expired(now - 150.0, 10.0, busiest=20.0 * cpus)
    assert hang_guard_expired(now - 201.0, 10.0, busiest=20.0 * cpus)


def test_run_cli_returns_what_the_command_printed() -> None:
    proc = run_cli("--help")
    assert proc.returncode == 0 and proc.stdout.startswith("usage: flashml")
