"""The compiler's object cache: one compiled object file per key, the key a sha256 of
everything that determines the object's bytes, so compiling an unchanged model again links
cached objects instead of running the C compiler over TL2cgen's trees (20-25 s -> about 1 s
for the main job's four models).

What the key covers (`object_key`): the compiler command (flags, `-D` renames, relative
source and object names: every command runs in the build folder, so no temporary path is in
it or in the object), the source's bytes, the bytes of every header beside it and in each
`-I` folder (TL2cgen's `header.h`, `flashml_policy.h`, emlearn's), and the toolchain's
identity (`toolchain_id`: the compiler driver's real path and sha256, its `-v` banner, its
target, the sha256 of the compiler proper it runs (gcc's cc1), the C library's version) with
the environment variables the compiler reads for paths (`COMPILER_ENV`).
A model, a threshold, a flag, a wrapper template or a compiler upgrade that changes the object
therefore changes its key; nothing else does.

Where: `$FLASHML_CACHE_DIR`, else `$XDG_CACHE_HOME/flashml`, else `~/.cache/flashml`
(`flashml.config.cache_dir`); `FLASHML_CACHE_DIR=off` turns the cache off. Entries live in
`objects/<key[:2]>/<key>/` (`object.o` and `entry.json`: its sha256, size, command).

Trust: an entry is written in a temporary folder and renamed into place, never modified
afterwards (two runs that compile the same object at once both publish; the first rename
wins, the other's is discarded), so a reader sees a whole entry or none. A cached object is
still code the `.so` will run: every use reads it through one descriptor opened without
following links, refuses anything but a regular file, and checks its size and sha256 against
its entry before writing those same bytes into the build folder for the linker; a mismatch
(a tampered or damaged entry) is logged, the entry removed and the object compiled afresh.
The cache folder must belong to this user and not be writable by others, else it is not used.
The linked `.so` is checked and verified as without the cache (compiler/build.py `_check_so`,
the manifest's sha256).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import shutil
import stat
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from flashml.files import sha256_file

log = logging.getLogger(__name__)

#: The cache keeps at most this many bytes of objects (oldest use first out), unless
#: $FLASHML_CACHE_MAX_BYTES says otherwise.
DEFAULT_MAX_BYTES = 1 << 30
#: Bumped when the entry layout or the key's recipe changes (old entries are then unused).
KEY_VERSION = "flashml-object-cache/1"
OBJECT_NAME = "object.o"
#: Environment variables the C compiler reads that can change an object (include paths, the
#: compiler's own search paths): part of the key.
COMPILER_ENV = ("CPATH", "C_INCLUDE_PATH", "GCC_EXEC_PREFIX", "COMPILER_PATH",
                "SOURCE_DATE_EPOCH")
ENTRY_NAME = "entry.json"


def _sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _run_text(cmd: list[str]) -> str:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"<{cmd[1:]}: {e}>"
    return f"{p.returncode}\n{p.stdout}\n{p.stderr}"


@functools.lru_cache(maxsize=8)
def toolchain_id(cc: str) -> str:
    """The identity of the C toolchain at `cc` (an absolute path): what the key holds of the
    compiler, so an upgraded or replaced compiler never reuses another's objects."""
    real = os.path.realpath(cc)
    parts = [f"cc={real}"]
    try:
        parts.append(f"cc-sha256={sha256_file(Path(real))}")
    except OSError as e:
        parts.append(f"cc-sha256=<{e}>")
    parts.append(f"cc-v={_run_text([cc, '-v'])}")
    parts.append(f"dumpmachine={_run_text([cc, '-dumpmachine'])}")
    cc1 = _run_text([cc, "-print-prog-name=cc1"]).split("\n")[1].strip()
    if os.path.isabs(cc1) and os.path.isfile(cc1):  # gcc's compiler proper
        parts.append(f"cc1={os.path.realpath(cc1)} {sha256_file(Path(os.path.realpath(cc1)))}")
    libc = os.confstr("CS_GNU_LIBC_VERSION") if "CS_GNU_LIBC_VERSION" in os.confstr_names \
        else "unknown"
    parts.append(f"libc={libc}")
    return "\n".join(parts)


def _include_dirs(argv: list[str], cwd: Path) -> list[Path]:
    out = []
    for i, a in enumerate(argv):
        if a == "-I" and i + 1 < len(argv):
            out.append(cwd / argv[i + 1])
        elif a.startswith("-I") and len(a) > 2:
            out.append(cwd / a[2:])
    return out


def object_key(cc_id: str, argv: list[str], cwd: Path, source: str) -> str:
    """The key of the object `argv` (run in `cwd`) compiles from `source` (relative to
    `cwd`): sha256 of the toolchain's identity, the command after the compiler's path, the
    source's bytes and the bytes of every header beside it and in its `-I` folders."""
    h = hashlib.sha256()

    def put(label: str, data: bytes) -> None:
        h.update(f"{label}\0{len(data)}\0".encode())
        h.update(data)

    put("version", KEY_VERSION.encode())
    put("toolchain", cc_id.encode())
    put("environment", "\0".join(f"{k}={os.environ.get(k, '')}" for k in COMPILER_ENV).encode())
    put("argv", "\0".join(argv[1:]).encode())
    src = cwd / source
    put("source", src.read_bytes())
    seen: set[Path] = set()
    for d in [src.parent, *_include_dirs(argv, cwd)]:
        d = d.resolve()
        if d in seen or not d.is_dir():
            continue
        seen.add(d)
        for hdr in sorted(d.glob("*.h")):
            put(f"header {hdr.name}", hdr.read_bytes())
    return h.hexdigest()


@dataclass
class Stats:
    hits: int = 0
    misses: int = 0
    refused: int = 0
    stored: int = 0


class ObjectCache:
    """Compiled objects by key under `root` (see the module's doc)."""

    def __init__(self, root: Path, max_bytes: int | None = None) -> None:
        self.root = Path(root)
        self.objects = self.root / "objects"
        self.max_bytes = max_bytes if max_bytes is not None else _max_bytes()
        self.stats = Stats()
        self._lock = threading.Lock()  # the stats, counted by the compile's threads

    def _count(self, field: str) -> None:
        with self._lock:
            setattr(self.stats, field, getattr(self.stats, field) + 1)

    @classmethod
    def open(cls, root: Path | None) -> ObjectCache | None:
        """The cache at `root` (created, mode 0700), or None when `root` is None or the folder
        cannot be used safely (not this user's, writable by others, not a folder)."""
        if root is None:
            return None
        root = Path(root)
        try:
            root.mkdir(parents=True, exist_ok=True, mode=0o700)
            (root / "objects").mkdir(exist_ok=True, mode=0o700)
            for d in (root, root / "objects"):
                st = os.lstat(d)
                if not stat.S_ISDIR(st.st_mode):
                    raise OSError(f"{d} is not a folder")
                if st.st_uid != os.geteuid():
                    raise OSError(f"{d} belongs to uid {st.st_uid}, not this user")
                if st.st_mode & 0o022:
                    raise OSError(f"{d} is writable by others (mode {st.st_mode & 0o777:o})")
        except OSError as e:
            log.warning("compile cache not used: %s", e)
            return None
        return cls(root)

    def _entry(self, key: str) -> Path:
        return self.objects / key[:2] / key

    def fetch(self, key: str, dest: Path) -> bool:
        """Write the cached object of `key` to `dest` (a fresh file) if the cache has a whole,
        verified one: read through one descriptor (no links followed, a regular file only),
        its size and sha256 equal to its entry's. False on a miss; a refused entry (damaged
        or tampered) is removed and counted as a miss."""
        entry = self._entry(key)
        if not os.path.lexists(entry):
            self._count("misses")
            return False
        try:
            meta = json.loads(_read_regular(entry / ENTRY_NAME))
            data = _read_regular(entry / OBJECT_NAME)
        except (OSError, ValueError) as e:  # a part missing, a link, not a file, bad JSON
            self._refuse(entry, f"unreadable ({e})")
            return False
        want_sha, want_size = meta.get("sha256"), meta.get("size_bytes")
        if meta.get("key") != key or len(data) != want_size or _sha256_bytes(data) != want_sha:
            self._refuse(entry, f"its object does not match its entry's sha256 {want_sha} and "
                         f"size {want_size} (or key)")
            return False
        with open(dest, "xb") as f:
            f.write(data)
        with contextlib.suppress(OSError):
            os.utime(entry / ENTRY_NAME)  # last use, for pruning
        self._count("hits")
        return True

    def _refuse(self, entry: Path, why: str) -> None:
        log.warning("compile cache entry %s refused: %s; compiling it again", entry, why)
        self._count("refused")
        self._count("misses")
        _remove_entry(entry)

    def store(self, key: str, obj: Path, argv: list[str]) -> None:
        """Publish the object `obj` (just compiled by `argv`) under `key`: a whole entry
        renamed into place, or nothing (another run published it first: kept as it is)."""
        entry = self._entry(key)
        if entry.exists():
            return
        data = obj.read_bytes()
        try:
            entry.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            tmp = Path(tempfile.mkdtemp(prefix=f".{key}.p{os.getpid()}.", suffix=".tmp",
                                        dir=entry.parent))
            try:
                (tmp / OBJECT_NAME).write_bytes(data)
                (tmp / ENTRY_NAME).write_text(json.dumps({
                    "key": key, "sha256": _sha256_bytes(data), "size_bytes": len(data),
                    "argv": argv[1:], "created_unix": time.time()}, indent=1))
                os.rename(tmp, entry)  # fails if another run published it first
            except OSError:
                shutil.rmtree(tmp, ignore_errors=True)
                if not entry.exists():
                    raise
        except OSError as e:
            log.warning("compile cache: could not store %s: %s", entry, e)
            return
        self._count("stored")

    def prune(self) -> None:
        """Remove the least recently used entries while the cache holds more than
        `max_bytes` of objects (and temporaries of dead writers older than an hour)."""
        entries: list[tuple[float, int, Path]] = []
        total = 0
        now = time.time()
        try:
            shards = list(os.scandir(self.objects))
        except OSError:
            return
        for shard in shards:
            if not shard.is_dir(follow_symlinks=False):
                continue
            for e in os.scandir(shard.path):
                p = Path(e.path)
                try:
                    if e.name.endswith(".tmp"):
                        if now - e.stat(follow_symlinks=False).st_mtime > 3600:
                            shutil.rmtree(p, ignore_errors=True)
                        continue
                    used = os.stat(p / ENTRY_NAME, follow_symlinks=False).st_mtime
                    size = os.stat(p / OBJECT_NAME, follow_symlinks=False).st_size
                except OSError:
                    continue
                entries.append((used, size, p))
                total += size
        if total <= self.max_bytes:
            return
        for _used, size, p in sorted(entries):
            _remove_entry(p)
            total -= size
            if total <= self.max_bytes:
                break


def _max_bytes() -> int:
    v = os.environ.get("FLASHML_CACHE_MAX_BYTES", "")
    try:
        return int(v) if v else DEFAULT_MAX_BYTES
    except ValueError:
        log.warning("FLASHML_CACHE_MAX_BYTES=%r is not a number of bytes; using %d", v,
                    DEFAULT_MAX_BYTES)
        return DEFAULT_MAX_BYTES


def _read_regular(path: Path) -> bytes:
    """The bytes of `path` read through one descriptor opened without following a link;
    OSError unless it is a regular file."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{path} is not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read()
    finally:
        os.close(fd)


def _remove_entry(entry: Path) -> None:
    """Take an entry out of use (renamed aside first, so no reader sees half of it)."""
    aside = entry.with_name(f".{entry.name}.p{os.getpid()}.gone.tmp")
    try:
        os.rename(entry, aside)
    except OSError:
        return
    shutil.rmtree(aside, ignore_errors=True)
