"""The policy compiler's toolchain: the C compiler (found, its version), running it quietly, the
object cache of compiled units and the versions a manifest records."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from flashml.errors import UserError

log = logging.getLogger(__name__)



CFLAGS = ("-std=c11", "-O2", "-fPIC", "-fvisibility=hidden")


#: Warnings of every C unit flashml writes (the wrappers, the partition and readahead units,
#: the fast and compact evaluators; TL2cgen's own code is compiled with -w). The units that
#: define the ABI's functions spell their names and include flashml_policy.h, whose
#: prototypes come from features/abi.toml: with -Wmissing-prototypes a definition the header
#: does not declare (a misspelled ABI function) fails the build.
WRAPPER_WARNINGS = ("-Wall", "-Wextra", "-Werror", "-Wmissing-prototypes")


class CompileError(UserError):
    """The bundle could not be compiled (bad model, compiler failure, ...)."""


def find_cc(cc: str | None = None) -> str:
    cc = cc or os.environ.get("CC") or "cc"
    path = shutil.which(cc)
    if path is None:
        raise CompileError(f"C compiler {cc!r} not found (set CC or --cc)")
    return path


def cc_version(cc: str) -> str:
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30)
    except OSError as e:
        return f"unknown ({e})"
    first = (out.stdout or out.stderr).strip().splitlines()
    return first[0] if first else "unknown"


def _run(cmd: list[str], what: str, cwd: Path | None = None) -> None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, cwd=cwd)
    except OSError as e:
        raise CompileError(f"C compiler failed on {what}: {e}") from None
    if proc.returncode != 0:
        msg = (proc.stderr or proc.stdout).strip().splitlines()
        detail = "; ".join(msg[:3]) if msg else f"exit status {proc.returncode}"
        raise CompileError(f"C compiler failed on {what} (exit {proc.returncode}): {detail}")


@contextlib.contextmanager
def _quiet_native() -> Iterator[list[str]]:
    """Capture what native code writes to fds 1 and 2 (TL2cgen logs every step there)."""
    captured: list[str] = []
    try:
        saved = (os.dup(1), os.dup(2))
    except OSError:
        yield captured
        return
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(tmp.fileno(), 1)
            os.dup2(tmp.fileno(), 2)
            yield captured
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            tmp.seek(0)
            captured.append(tmp.read().decode(errors="replace"))


def _versions(cc: str) -> dict[str, str]:
    # the installed distributions' versions: importing lightgbm only for its version loads
    # scikit-learn, SciPy and pandas (5-30 s of a compile whose objects were all cached)
    from importlib.metadata import version

    from flashml import __version__

    return {"cc": cc_version(cc), "treelite": version("treelite"),
            "tl2cgen": version("tl2cgen"), "lightgbm": version("lightgbm"),
            "flashml": __version__}


def _object_cache(cache: bool | str | os.PathLike[str]) -> Any:
    """compile_policy's object cache (compiler/objcache.py), or None."""
    from flashml.compiler.objcache import ObjectCache
    from flashml.config import cache_dir

    if cache is False:
        return None
    return ObjectCache.open(cache_dir() if cache is True else Path(cache))


def _compile_one(cmd: list[str], what: str, build: Path, objcache: Any) -> None:
    """Run one compiler command (`... -c SRC -o OBJ`, names relative to `build`), or take its
    object from `objcache` when it holds a verified one of the same key; a fresh object goes
    into the cache."""
    src, obj = cmd[-3], cmd[-1]
    assert cmd[-4] == "-c" and cmd[-2] == "-o", cmd
    key = None
    if objcache is not None:
        from flashml.compiler.objcache import object_key, toolchain_id

        key = object_key(toolchain_id(cmd[0]), cmd, build, src)
        if objcache.fetch(key, build / obj):
            return
    _run(cmd, what, cwd=build)
    if objcache is not None and key is not None:
        objcache.store(key, build / obj, cmd)
