"""One run's fixtures and scratch folder (`session`), the fixtures cached per `fixtures_key`."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .cases import FLASHRT, REPO
from .fixtures import build_fixtures
from .judge import _sha, _snapshot
from .runner import _rmtree


def fixtures_key() -> str:
    """A hash of everything the fixtures are made by (the compiler, the runtime's loader, the
    helpers): a cached set is reused only while none of it changed."""
    h = hashlib.sha256()
    files = [*sorted((REPO / "flashml" / "compiler").glob("*.py")),
             *sorted((REPO / "flashml" / "compiler").glob("*.in")),
             *sorted((REPO / "runtime" / "src").rglob("*.[ch]")),
             *sorted((REPO / "tests" / "adversarial").glob("*.py")),
             *(REPO / "tests" / n for n in ("demo_policy.py",
                                            "runtime_support.py",
                                            "runtime/test_runtime_mat.py",
                                            "runtime/test_runtime_readahead.py"))]
    for f in files:
        if f.exists():
            h.update(f.name.encode() + b"\0" + f.read_bytes())
    if FLASHRT.exists():
        h.update(str(FLASHRT.stat().st_mtime_ns).encode())
    return h.hexdigest()[:16]


@contextlib.contextmanager
def session(scratch: Path | None = None, log: Callable[[str], None] = print,
            cache: bool = False) -> Iterator[tuple[dict[str, Path], Path]]:
    """Fixtures and a scratch folder for one run of the suite. cache: keep the fixtures in
    .flashml/adversarial-fixtures/<fixtures_key()> and reuse them (the tests)."""
    own = scratch is None
    scratch = scratch or Path(tempfile.mkdtemp(prefix="flashml-adversarial-"))
    held = None
    try:
        where = scratch / "fixtures"
        if cache:
            # One checkout, several sessions at once (two pytest runs, an edit that changes the
            # key mid-run): a set is built under its key's exclusive lock, used under a shared
            # one, and an older key's set is removed only when nobody holds its lock.
            base = REPO / ".flashml" / "adversarial-fixtures"
            base.mkdir(parents=True, exist_ok=True)
            key = fixtures_key()
            where = base / key
            held = open(base / f"{key}.lock", "a+")  # noqa: SIM115 - held for the session
            fcntl.flock(held, fcntl.LOCK_SH)  # (a session in this process may hold it too)
            _remove_unused_fixture_sets(base, key)
            if not (where / "fixtures.json").exists():
                fcntl.flock(held, fcntl.LOCK_EX)  # build it (or read what another built)
        fx = build_fixtures(where, log)
        if held is not None:
            fcntl.flock(held, fcntl.LOCK_SH)
        before = {k: _snapshot_path(v) for k, v in fx.items()}
        yield fx, scratch
        after = {k: _snapshot_path(v) for k, v in fx.items()}
        bad = [k for k in fx if before[k] != after[k]]
        if bad:
            log(f"WARNING: fixtures changed during the run: {bad}")
    finally:
        if held is not None:
            held.close()
        if own:
            _rmtree(scratch)


def _remove_unused_fixture_sets(base: Path, keep: str) -> None:
    """Remove every cached fixture set but `keep` that no session holds (its lock file free)."""
    for d in base.iterdir():
        if not d.is_dir() or d.name == keep:
            continue
        with open(base / f"{d.name}.lock", "a+") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # another session is using it
            shutil.rmtree(d, ignore_errors=True)
            (base / f"{d.name}.lock").unlink(missing_ok=True)


def _snapshot_path(p: Path) -> Any:
    return _snapshot(p) if p.is_dir() else _sha(p)
