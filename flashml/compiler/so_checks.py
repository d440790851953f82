"""The policy compiler's checks of a built policy.so: what it needs (libc and libm only), what it
exports, and each baked-in value read back through ctypes against policy.json."""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from flashml import knobs
from flashml.compiler import readahead as ra
from flashml.compiler.bundle import (
    EVICT_KNOBS,
    EVICT_PARAMS,
    PARTITION_PARAMS,
)
from flashml.compiler.toolchain import (
    CompileError,
)
from flashml.compiler.wrapper import (
    peak_mask,
)
from flashml.features import eviction
from flashml.features import partition as partition_contract
from flashml.features import readahead as readahead_contract
from flashml.features.abi import ABI_VERSION, bind, capability_functions
from flashml.features.contract import contract

log = logging.getLogger(__name__)



#: Shared libraries policy.so may depend on (sonames start with these).
ALLOWED_NEEDED = ("libc.so", "libm.so")




def readelf_needed(so: Path) -> list[str]:
    """NEEDED entries of a shared object (`readelf -d`)."""
    out = subprocess.run(["readelf", "-d", str(so)], capture_output=True, text=True,
                         check=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def exported_functions(so: Path) -> list[str]:
    """Defined dynamic function symbols of a shared object (`nm -D --defined-only`),
    including GNU indirect functions (type i: the ifunc-dispatched scorers)."""
    out = subprocess.run(["nm", "-D", "--defined-only", str(so)], capture_output=True,
                         text=True, check=True).stdout
    return sorted(parts[2] for line in out.splitlines()
                  if len(parts := line.split()) == 3 and parts[1] in ("T", "t", "i"))


def _check_so(so: Path, params: dict[str, Any], capabilities: list[str], sha256: str,
              size_bytes: int) -> None:
    """The linked policy.so against its bundle: its dependencies, its exports, and what it
    reports once loaded through the one loader (compiler/loader.py: the bytes of sha256 and
    size_bytes, checked, mapped from a sealed memfd)."""
    from flashml.compiler.loader import map_verified, verify_so_file

    if shutil.which("readelf"):
        bad = [n for n in readelf_needed(so) if not n.startswith(ALLOWED_NEEDED)]
        if bad:
            raise CompileError(f"policy.so depends on {bad}; only libc and libm are allowed")
    if shutil.which("nm"):
        got, want = exported_functions(so), capability_functions(capabilities)
        if got != want:
            raise CompileError(f"policy.so exports {got}, its capabilities {capabilities} "
                               f"declare {want}")
    lib = map_verified(verify_so_file(so, sha256, size_bytes))

    def call(key: str) -> Any:
        """SYM[key]() of the .so, typed as its declaration (features/abi.toml)."""
        return bind(lib, key)()

    checks: dict[str, tuple[Any, Any]] = {"ABI version": (call("policy_abi_version"), ABI_VERSION)}
    if "admission" in capabilities:
        checks.update({
            "feature count": (call("policy_num_features"), contract().num_features),
            "contract hash": (call("policy_contract_hash").decode(), params["contract_hash"]),
            "admit threshold": (call("admit_threshold"), params["admit_threshold"]),
            "when threshold": (call("prefetch_when_threshold"), params["when_threshold"]),
            "peak hours": (call("admit_peak_hours"), peak_mask(params)),
            "peak bonus": (call("admit_peak_bonus"), params.get("peak_bonus", 0.0)),
        })
    if "eviction" in capabilities:
        ev = params[EVICT_PARAMS]
        checks.update({
            "eviction feature count": (call("evict_num_features"),
                                       eviction.contract().num_features),
            "eviction contract hash": (call("evict_contract_hash").decode(),
                                       ev["contract_hash"]),
        })
        # every knob the .so exports equals policy.json's (systems/mat/settings.toml)
        got = knobs.read_exports(lib, EVICT_KNOBS)
        checks.update({f"eviction {name.replace('_', ' ')}": (got[name], ev[name])
                       for name in EVICT_KNOBS.knobs})
    if "readahead" in capabilities:
        rc = readahead_contract.contract()
        checks.update({
            "readahead feature count": (call("readahead_num_features"), rc.num_features),
            "readahead contract hash": (call("readahead_contract_hash").decode(),
                                        params[ra.READAHEAD_PARAMS]["contract_hash"]),
            "readahead window": (call("readahead_window_ms"), rc.window_ms),
        })
    if "partition" in capabilities:
        pc = partition_contract.contract()
        checks.update({
            "partition feature count": (call("partition_num_features"), pc.num_features),
            "partition contract hash": (call("partition_contract_hash").decode(),
                                        params[PARTITION_PARAMS]["contract_hash"]),
            "partition max streams": (call("partition_max_streams"), pc.max_streams),
            "partition steps": (call("partition_steps"), pc.steps),
        })
    for what, (got, want) in checks.items():
        if got != want:
            raise CompileError(f"policy.so reports {what} {got!r}, expected {want!r}")
