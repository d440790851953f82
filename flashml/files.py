"""Writing results: atomic files and JSON, one definition for every part of flashml.

Every output a user may read while flashml runs, or that must not be left half-written when
it fails (DESIGN.md "Errors"), goes through `atomic_path` (a file) or `atomic_dir` (a
folder): written under a temporary name in the destination's folder, renamed onto it only
when complete. `jsonable` is the one JSON
sanitiser: NumPy scalars become Python numbers, paths strings, non-finite floats null (so
the output stays valid JSON, e.g. a mean eviction age when nothing was evicted).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import socket
import stat
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

#: A temporary file or folder of a writer that is not alive (or of another host) is
#: removed once untouched this long; one of a dead writer of this host at once.
STALE_TEMPORARY_S = 600.0
_HOST = hashlib.sha1(socket.gethostname().encode()).hexdigest()[:8]
# The middle of a temporary name `.NAME.<middle>.tmp`: `p<pid>-<host>.<random>` (this
# module's), or mkstemp's 8 random characters (written before the pid was in the name).
_TEMP_MIDDLE = re.compile(r"p(?P<pid>[0-9]{1,10})-(?P<host>[0-9a-f]{8})\.[a-z0-9_]{8}"
                          r"|(?P<legacy>[a-z0-9_]{8})")


def sha256_file(path: str | os.PathLike[str]) -> str:
    """The sha256 of a file's bytes, hex, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _temp_prefix(dest: Path) -> str:
    """How this process's temporary names for `dest` begin (then mkstemp's random part and
    `.tmp`): the writer's pid and host are in the name, so a later writer can tell a
    leftover of a killed one from a live one's."""
    return f".{dest.name}.p{os.getpid()}-{_HOST}."


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):  # another user's, or not a pid
        return pid > 0
    return True


def remove_stale_temporaries(dest: str | os.PathLike[str]) -> list[Path]:
    """Remove what killed writers of `dest` left beside it: its temporary files or folders
    (`.NAME.<middle>.tmp` of exactly this NAME). One written by a process of this host that
    is no longer alive goes at once; one of a live process (maybe writing now) stays; one of
    another host, or from before the pid was in the name, goes once untouched for
    STALE_TEMPORARY_S. Returns what was removed."""
    dest = Path(dest)
    head, removed = f".{dest.name}.", []
    try:
        entries = list(os.scandir(dest.parent))
    except OSError:
        return removed
    now = time.time()
    for e in entries:
        if not (e.name.startswith(head) and e.name.endswith(".tmp")):
            continue
        m = _TEMP_MIDDLE.fullmatch(e.name[len(head):-len(".tmp")])
        if m is None:
            continue
        try:
            age = now - e.stat(follow_symlinks=False).st_mtime
            if m["pid"] is not None and m["host"] == _HOST:
                stale = not _pid_alive(int(m["pid"]))
            else:
                stale = age > STALE_TEMPORARY_S
            if not stale:
                continue
            if e.is_dir(follow_symlinks=False):
                shutil.rmtree(e.path)
            else:
                os.unlink(e.path)
            removed.append(Path(e.path))
        except FileNotFoundError:  # another writer removed it first
            continue
        except OSError:
            continue
    return removed


def _is_special(path: Path) -> bool:
    """An existing path that is neither a regular file nor a folder (a device, a FIFO)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


@contextmanager
def atomic_path(dest: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path next to `dest`; rename it onto `dest` only if the block succeeds.
    Leftovers of killed writers of `dest` are removed first (`remove_stale_temporaries`)."""
    dest = Path(dest)
    if _is_special(dest):
        # /dev/null, a FIFO, a terminal: written in place. Renaming a file onto it would
        # replace the device node itself (as root: /dev/null becomes a regular file).
        yield dest
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(dest)
    fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(dest), suffix=".tmp", dir=dest.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    umask = os.umask(0)
    os.umask(umask)
    try:
        yield tmp_path
        if tmp_path.exists():
            os.chmod(tmp_path, 0o666 & ~umask)  # mkstemp makes 0600; give the usual mode
        os.replace(tmp_path, dest)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def replace_dir(src: str | os.PathLike[str], dest: str | os.PathLike[str], *,
                marker: str | None = None, what: str = "output folder",
                error: type[Exception] | None = None) -> Path:
    """Move the finished folder `src` onto `dest`, replacing an earlier one there only after
    `src` is complete (restored if the swap fails). With `marker`, a non-empty `dest`
    without that file is refused (`error`, default UserError): it is not ours to replace."""
    from flashml.errors import UserError

    error = error or UserError
    src, dest = Path(src), Path(dest)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(src, 0o777 & ~umask)  # mkdtemp's 0700 would hide the output from readers
    if not dest.exists():
        os.replace(src, dest)
        return dest
    if not dest.is_dir():
        raise error(f"{dest}: exists and is not a directory")
    if marker is not None and any(dest.iterdir()) and not (dest / marker).exists():
        raise error(f"{dest}: exists and is not a {what} (no {marker}); refusing to "
                        "replace it")
    old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".old", dir=dest.parent))
    os.replace(dest, old / "x")
    try:
        os.replace(src, dest)
    except BaseException:
        os.replace(old / "x", dest)
        raise
    finally:
        shutil.rmtree(old, ignore_errors=True)
    return dest


@contextmanager
def atomic_dir(dest: str | os.PathLike[str], *, marker: str | None = None,
               what: str = "output folder") -> Iterator[Path]:
    """Yield a temporary folder next to `dest`; when the block succeeds it replaces `dest`
    (`replace_dir`), when it fails it is removed and `dest` is untouched. Leftovers of
    killed writers of `dest` are removed first (`remove_stale_temporaries`)."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(dest)
    tmp = Path(tempfile.mkdtemp(prefix=_temp_prefix(dest), suffix=".tmp", dir=dest.parent))
    try:
        yield tmp
        replace_dir(tmp, dest, marker=marker, what=what)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def jsonable(x: Any) -> Any:
    """`x` with only JSON types inside: dicts, lists, str, int, float (finite), bool, None."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, bool) or x is None or isinstance(x, (str, int)):
        return x
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, os.PathLike):
        return os.fspath(x)
    if hasattr(x, "tolist") and not isinstance(x, (str, bytes)):  # NumPy scalars and arrays
        return jsonable(x.tolist())
    return str(x)


def dumps(data: Any, indent: int | None = 2) -> str:
    """JSON text of `jsonable(data)` (strict: no NaN or Infinity)."""
    return json.dumps(jsonable(data), indent=indent, allow_nan=False)


def write_json(path: str | os.PathLike[str], data: Any) -> Path:
    """Write `data` as JSON to `path` atomically (a trailing newline); returns the path."""
    path = Path(path)
    with atomic_path(path) as tmp:
        tmp.write_text(dumps(data) + "\n")
    return path


def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of what `path` names after following links; None if it does not exist."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def refuse_overwriting_inputs(outputs: dict[str, Any], inputs: dict[str, Any]) -> None:
    """Refuse (UserError naming both options) an output that is one of the inputs: the same
    device and inode after following symlinks, so a hard link or a symlink to the input is
    caught as well as the same name. Also refuse an output that is a FIFO, a socket or a
    character device other than /dev/null (a FIFO blocks the writer until someone reads it;
    /dev/null is the one harmless sink), and an output whose existing folder part is not a
    folder. `outputs` and `inputs` map an option name (e.g. "-o", "--trace") to a path or
    None (not given); a folder output is compared with every input inside it as well."""
    from flashml.errors import UserError

    ins = {name: Path(p) for name, p in inputs.items() if p is not None}
    for oname, o in outputs.items():
        if o is None:
            continue
        out = Path(o)
        try:
            mode = os.stat(out).st_mode
        except (OSError, ValueError):
            mode = None
        if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)) \
                and str(out) != os.devnull:
            kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
                    else "a character device" if stat.S_ISCHR(mode)
                    else "a block device" if stat.S_ISBLK(mode) else "not a regular file")
            raise UserError(f"{out}: option {oname}: the output is {kind}; write to a "
                            "regular file")
        oid = _identity(out)
        for iname, i in ins.items():
            iid = _identity(i)
            if iid is None:
                continue
            if oid is not None and oid == iid:
                raise UserError(f"{out}: option {oname} names the same file as {iname} "
                                f"({i}); refusing to overwrite an input; choose another "
                                "output")
            if mode is not None and stat.S_ISDIR(mode):
                # an input inside the output folder would be replaced with the folder
                try:
                    real_i, real_o = os.path.realpath(i), os.path.realpath(out)
                except (OSError, ValueError):
                    continue
                if os.path.commonpath([real_i, real_o]) == real_o:
                    raise UserError(f"{out}: option {oname} is a folder holding {iname} "
                                    f"({i}); refusing to replace an input; choose another "
                                    "output")


def check_writable(option: str, path: str | os.PathLike[str], *, folder: bool = False) -> None:
    """UserError naming `option` unless `path` can be written as an output: a folder
    (`folder`) or a file there already or creatable (its missing parent folders too), in a
    folder this process can create files in (tried with a probe file, removed at once: as
    root, permission bits say nothing). /dev/null is a fine file output."""
    from flashml.errors import UserError

    out = Path(path)
    if not folder and str(out) == os.devnull:
        return
    try:
        mode: int | None = os.stat(out).st_mode
    except (FileNotFoundError, NotADirectoryError):
        mode = None
    except (OSError, ValueError) as e:
        raise UserError(f"{out}: option {option}: cannot use it as the output "
                        f"({getattr(e, 'strerror', None) or e})") from None
    if mode is not None:
        if folder and not stat.S_ISDIR(mode):
            raise UserError(f"{out}: option {option}: exists and is not a folder; give a "
                            "folder (new, or one this command wrote before)")
        if not folder and stat.S_ISDIR(mode):
            raise UserError(f"{out}: option {option}: is a folder; give a file name")
    where = out.absolute().parent
    while not os.path.lexists(where) and where != where.parent:
        where = where.parent
    if not where.is_dir():
        raise UserError(f"{out}: option {option}: {where} is not a folder, so nothing can be "
                        "written under it")
    try:
        fd, probe = tempfile.mkstemp(prefix=".flashml-probe.", suffix=".tmp", dir=where)
    except OSError as e:
        raise UserError(f"{out}: option {option}: cannot write in {where} "
                        f"({e.strerror or e})") from None
    os.close(fd)
    os.unlink(probe)


def check_outputs(outputs: dict[str, Any], inputs: dict[str, Any], *,
                  folders: tuple[str, ...] = ()) -> None:
    """Before any work: no output is an input, a FIFO, a socket or a device
    (`refuse_overwriting_inputs`), and each can be written (`check_writable`; the options in
    `folders` are folder outputs). `outputs` and `inputs` map an option to a path or None."""
    refuse_overwriting_inputs(outputs, inputs)
    for name, o in outputs.items():
        if o is not None:
            check_writable(name, o, folder=name in folders)
