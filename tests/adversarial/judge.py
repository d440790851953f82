"""A finished case judged into one class (`judge`), and the snapshots it compares."""

from __future__ import annotations

import hashlib
import os
import re
import stat
from pathlib import Path

from .cases import ERROR_LINE, Case, Result


# --- judging ----------------------------------------------------------------------------------
def _snapshot(w: Path) -> dict[str, tuple[str, str]]:
    """Every path under `w` (not following links): its kind and content hash."""
    out: dict[str, tuple[str, str]] = {}
    for root, dirs, files in os.walk(w):
        for name in dirs + files:
            path = Path(root) / name
            rel = str(path.relative_to(w))
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(path))
            elif stat.S_ISREG(st.st_mode):
                out[rel] = ("file", _sha(path))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", "")
            else:
                out[rel] = ("other", str(stat.S_IFMT(st.st_mode)))
    return out


def _sha(path: Path) -> str:
    """sha256 of a file's size and data extents (holes of a sparse file are not read)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        fd = f.fileno()
        size = os.fstat(fd).st_size
        h.update(str(size).encode())
        pos = 0
        while pos < size:
            try:
                start = os.lseek(fd, pos, os.SEEK_DATA)
                end = os.lseek(fd, start, os.SEEK_HOLE)
            except OSError:  # no data after pos (ENXIO), or no SEEK_DATA here
                break
            h.update(f"@{start}".encode())
            f.seek(start)
            left = end - start
            while left > 0:
                chunk = f.read(min(left, 1 << 20))
                if not chunk:
                    break
                h.update(chunk)
                left -= len(chunk)
            pos = end
    return h.hexdigest()


def judge(case: Case, p: dict[str, str], w: Path, before: dict[str, tuple[str, str]],
          rc: int | None, stderr: str, seconds: float, marker: Path, argv: list[str],
          hang: bool = False) -> Result:
    stopped = hang and case.budget > 0
    after = _snapshot(w)
    outputs = {str(Path(p[o]).relative_to(w)) for o in case.outputs if o in p}
    # a new file under an output folder counts as the output
    changed = sorted(k for k, v in before.items()
                     if after.get(k, v) != v and v[0] != "dir" and k not in outputs
                     and k != marker.name)
    gone = sorted(k for k in before if k not in after and k not in outputs)
    # (ctx/: `trace validate`'s Great Expectations store, a cache it keeps, not an output)
    new = sorted(k for k in after if k not in before and k != marker.name
                 and k.split(os.sep)[0] != "ctx")
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    err_lines = ERROR_LINE.findall(stderr)
    first = next((ln for ln in lines if ERROR_LINE.match(ln)), lines[-1] if lines else "")
    cls, detail = "ok", ""
    if marker.exists():
        cls, detail = "unverified", "the evil constructor ran"
    elif changed or gone:
        cls, detail = "changed", f"changed: {changed[:5]} removed: {gone[:5]}"
    elif stopped and not _command_traceback(stderr):
        cls = "accepted" if case.must_refuse else "ok"
        detail = f"still running after {case.budget:g} s: the value was taken (stopped)"
    elif hang:
        cls, detail = "hang", f"no exit after {seconds:.0f} s"
    elif rc is not None and (rc < 0 or rc >= 128):
        cls, detail = "abort", f"exit {rc}"
    elif "Traceback (most recent call last)" in stderr:
        cls = "traceback"
        tb = [ln for ln in lines if re.match(r"^\w+(\.\w+)*(Error|Exception|Exit)\b", ln)]
        first = tb[-1] if tb else first
    elif rc not in (0, None) and new and not stopped:
        cls, detail = "partial", f"left: {new[:5]}"
    elif rc == 3 and case.tool == "flashrt":
        cls = "wrong"
    elif rc == 0 or (rc in case.verdicts and not err_lines):
        cls = "accepted" if case.must_refuse else "ok"
        if rc == 0 and any(Path(k).name.startswith(".") and ".tmp" in k for k in new):
            cls, detail = "partial", f"temporary files left: {new[:5]}"
    elif case.family == "base":  # a valid command line must run
        cls, detail = "wrong", f"exit {rc}: a valid command line failed"
    elif rc in (1, 2) and len(err_lines) == 1:
        cls = "error"
    else:
        cls, detail = "unclear", f"exit {rc}, {len(err_lines)} error lines"
    names_it = None
    if cls in ("error", "unclear"):
        msg = first
        wants = [case.option] if case.option else []
        for n in case.names:
            if n in p:
                wants += [p[n], Path(p[n]).name]
        names_it = any(x and x in msg for x in wants) if wants else None
    return Result(case.id, case.family, cls, " ".join(argv)[:600], rc, round(seconds, 3),
                  first[:300], names_it, detail[:300])



def _command_traceback(stderr: str) -> bool:
    """Whether a stopped case's stderr holds a traceback of the command's own: the harness's
    stop (Hang, raised by its alarm, or a KeyboardInterrupt) unwinding a job may be logged
    with its traceback, which ends in that exception and is not the command's."""
    if "Traceback (most recent call last)" not in stderr:
        return False
    ends = [ln for ln in stderr.splitlines()
            if re.match(r"^\w+(\.\w+)*(Error|Exception|Exit|Hang|Interrupt)\b", ln)]
    return not ends or any(not ln.split(":")[0].endswith(("Hang", "KeyboardInterrupt"))
                           for ln in ends)
