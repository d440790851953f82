"""A case's folder made ready: its fixtures copied in, a bundle tampered with, a hostile trace
written."""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from .cases import Case


# --- case setup -------------------------------------------------------------------------------
def _copy(src: Path, dst: Path) -> None:
    if src.is_dir():
        shutil.copytree(src, dst, symlinks=True)
    elif src.stat().st_blocks * 512 < src.stat().st_size:  # sparse: keep the holes
        subprocess.run(["cp", "--sparse=always", str(src), str(dst)], check=True)
    else:
        shutil.copy2(src, dst)


def prepare(case: Case, fx: dict[str, Path], w: Path) -> dict[str, str]:
    """Copy the case's fixtures into its folder `w` and apply its setup; the placeholders."""
    p: dict[str, str] = {"w": str(w)}
    for name in case.files:
        dst = w / fx[name].name
        if not dst.exists():
            _copy(fx[name], dst)
        p[name] = str(dst)
    kind, _, arg = case.setup.partition(":")
    if kind.startswith("out_"):
        how = kind[4:]
        out = w / ("out-" + Path(p.get(arg, "x")).name if arg else "out.fifo")
        if how == "same":
            out = Path(p[arg])
        elif how == "symlink":
            out.symlink_to(p[arg])
        elif how == "hardlink":
            os.link(p[arg], out)
        elif how == "fifo":
            os.mkfifo(out)
        p["OUT"] = str(out)
    elif kind == "in_fifo":
        target = Path(p[arg])
        if target.is_dir():
            shutil.rmtree(target)
        else:
            target.unlink()
        os.mkfifo(target)
    elif kind == "tamper":
        t, bkind = arg.split(":")
        _tamper(t, fx[bkind], fx["evil"], w)
        p["B"] = str(w / "B") if not t.startswith("bare") else str(w / "B.so")
    elif kind == "hostile":
        _hostile_trace(arg, fx, w)
        p["h"] = str(next(w.glob("h.*")))
    if case.runner.startswith("kill"):
        p["big"] = str(_big_trace(fx, w))
    return p


def _manifest_edit(b: Path, **kv: Any) -> None:
    m = json.loads((b / "manifest.json").read_text())
    m.update(kv)
    (b / "manifest.json").write_text(json.dumps(m, indent=1))


def _tamper(t: str, bundle: Path, evil: Path, w: Path) -> None:
    b = w / "B"
    shutil.copytree(bundle, b)
    so = b / "policy.so"
    if t == "swapped-so":
        shutil.copy2(so, b / "good.so")
        shutil.copy2(evil, so)
        _manifest_edit(b, policy_so="good.so")
    elif t == "lying-sha256":
        shutil.copy2(evil, so)
    elif t == "lying-size":
        m = json.loads((b / "manifest.json").read_text())
        _manifest_edit(b, size_bytes=int(m.get("size_bytes", so.stat().st_size
                                               if so.exists() else 0)) + 1)
    elif t == "format-evil":
        _manifest_edit(b, format="evil/9")
    elif t == "system-other":
        m = json.loads((b / "manifest.json").read_text())
        _manifest_edit(b, system="kml" if m.get("system") != "kml" else "mat")
    elif t == "capabilities-empty":
        _manifest_edit(b, capabilities=[])
    elif t == "capabilities-extra":
        m = json.loads((b / "manifest.json").read_text())
        caps = list(m.get("capabilities") or [])
        extra = next(c for c in ("admission", "prefetch", "eviction", "partition", "readahead")
                     if c not in caps)
        _manifest_edit(b, capabilities=[*caps, extra])
    elif t == "symlink-so-evil":
        shutil.copy2(evil, w / "elsewhere.so")
        so.unlink()
        so.symlink_to(w / "elsewhere.so")
        _manifest_edit(b, sha256=hashlib.sha256(evil.read_bytes()).hexdigest(),
                       size_bytes=evil.stat().st_size)
    elif t == "symlink-so-good":
        shutil.move(so, w / "elsewhere.so")
        so.symlink_to(w / "elsewhere.so")
    elif t == "fifo-so":
        so.unlink()
        os.mkfifo(so)
    elif t == "fifo-manifest":
        (b / "manifest.json").unlink()
        os.mkfifo(b / "manifest.json")
    elif t == "bare-so":
        shutil.copy2(so if so.exists() else evil, w / "B.so")
    elif t == "bare-evil-so":
        shutil.copy2(evil, w / "B.so")
    elif t == "race":  # the good and the evil .so beside the bundle, for the flipper
        shutil.copy2(so, w / "good.so")
        shutil.copy2(evil, w / "evil.so")
    elif t == "manifest-nan-knob":  # a knob the policy runs with (else the ABI version)
        m = (b / "manifest.json").read_text()
        for key in ("admit_threshold", "k", "sharpness", "promotion_pct", "abi_version"):
            pat = re.compile(rf'("{key}":\s*)-?[0-9][-0-9.eE+]*')
            if pat.search(m):
                m = pat.sub(r"\1NaN", m, count=1)
                break
        (b / "manifest.json").write_text(m)


def _hostile_trace(t: str, fx: dict[str, Path], w: Path) -> None:
    lines = fx["trace"].read_text().splitlines()
    head = [ln for ln in lines if ln.startswith("#")]
    body = [ln for ln in lines if ln and not ln.startswith("#")][:200]
    if t == "op-count-huge":
        row = body[0].split()
        rows = []
        for i in range(60):  # op_count is the last field of the 2019 schema's ... any schema:
            r = list(row)
            r[-1] = str(1 << 20)
            r[3] = str(float(row[3]) + i)
            rows.append(" ".join(r))
        (w / "h.trace").write_text("\n".join([*head, *rows]) + "\n")
        # the op_count column, wherever the header puts it
        hdr = head[0].lstrip("#").split()
        if "op_count" in hdr:
            j = hdr.index("op_count")
            out = []
            for i in range(60):
                r = list(row)
                r[j] = str(1 << 20)
                r[hdr.index("io_size")] = "8388608" if "io_size" in hdr else r[2]
                r[hdr.index("io_offset")] = "0" if "io_offset" in hdr else r[1]
                r[3] = f"{float(row[3]) + i:.3f}"
                out.append(" ".join(r))
            (w / "h.trace").write_text("\n".join([*head, *out]) + "\n")
    elif t in ("time-1e300-last", "time-neg-1e300-first", "time-inf"):
        hdr = head[0].lstrip("#").split()
        j = hdr.index("op_time") if "op_time" in hdr else 3
        rows = [ln.split() for ln in body]
        if t == "time-1e300-last":
            rows[-1][j] = "1e300"
        elif t == "time-neg-1e300-first":
            rows[0][j] = "-1e300"
        else:
            rows[len(rows) // 2][j] = "inf"
        (w / "h.trace").write_text("\n".join([*head, *(" ".join(r) for r in rows)]) + "\n")
    elif t == "parquet-inf-times":
        import polars as pl
        import pyarrow.parquet as pq

        tbl = pq.read_table(fx["pq"])
        df = pl.from_arrow(tbl)
        assert isinstance(df, pl.DataFrame)
        times = df["time"].to_list()
        times[-1] = math.inf
        times[0] = -math.inf
        df = df.with_columns(pl.Series("time", times, dtype=df.schema["time"]))
        pq.write_table(df.to_arrow().replace_schema_metadata(tbl.schema.metadata),
                       w / "h.parquet")
    elif t.startswith("msr"):
        shutil.copy2(fx["msr"], w / "h.csv")
    else:
        (w / "h.trace").write_text("\n".join([*head, *body]) + "\n")


_BIG: dict[str, bytes] = {}


def _big_trace(fx: dict[str, Path], w: Path) -> Path:
    """A trace of a few 1 MiB chunks for kill -9 (generated once per process)."""
    if "big" not in _BIG:
        from flashml.trace.generate import generate_trace

        with tempfile.TemporaryDirectory() as d:
            generate_trace("region1-like", 3, Path(d) / "big.trace", accesses=60_000,
                           progress=False)
            _BIG["big"] = (Path(d) / "big.trace").read_bytes()
    out = w / "big.trace"
    out.write_bytes(_BIG["big"])
    return out
