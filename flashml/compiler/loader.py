"""Load a compiled policy bundle from Python (ctypes): verification and batch scoring.

    pol = load_policy("out/policy")          # checks manifest, sha256, ABI, contract hash
    pol.admit_scores(X)                      # X: rows x 18 float64, contract order
    start, end = pol.prefetch_ranges(X)
    pol.when_scores(X)
"""

from __future__ import annotations

import ctypes
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from flashml.compiler.build import MANIFEST_NAME, SO_NAME, sha256_file
from flashml.errors import UserError
from flashml.features.codegen import ABI_VERSION
from flashml.features.contract import contract

_DOUBLE_P = ctypes.POINTER(ctypes.c_double)
_INT32_P = ctypes.POINTER(ctypes.c_int32)


def read_manifest(bundle: str | os.PathLike[str]) -> dict[str, Any]:
    path = Path(bundle) / MANIFEST_NAME
    if not path.is_file():
        raise UserError(f"{path}: missing; not a compiled policy bundle (flashml compile -o DIR)")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: not valid JSON ({e})") from None


def verify_bundle(bundle: str | os.PathLike[str]) -> dict[str, Any]:
    """Check a compiled bundle's manifest against this flashml and its policy.so's sha256.
    Returns the manifest; a mismatch raises UserError (one clear line)."""
    bundle = Path(bundle)
    m = read_manifest(bundle)
    so = bundle / m.get("policy_so", SO_NAME)
    if not so.is_file():
        raise UserError(f"{so}: missing")
    if m.get("abi_version") != ABI_VERSION:
        raise UserError(f"{bundle}: ABI version {m.get('abi_version')} in {MANIFEST_NAME}, "
                        f"this flashml speaks ABI {ABI_VERSION}; recompile the policy")
    if m.get("contract_hash") != contract().hash:
        raise UserError(f"{bundle}: contract mismatch: the policy was compiled for feature "
                        f"contract {str(m.get('contract_hash'))[:12]}..., this flashml has "
                        f"{contract().hash[:12]}...")
    digest = sha256_file(so)
    if digest != m.get("sha256"):
        raise UserError(f"{so}: sha256 {digest[:12]}... does not match {MANIFEST_NAME} "
                        f"({str(m.get('sha256'))[:12]}...); the .so was changed after compiling")
    return m


class PolicyLibrary:
    """A policy .so loaded with ctypes; checks ABI version, feature count, contract hash."""

    def __init__(self, so: str | os.PathLike[str]) -> None:
        self.path = Path(so)
        try:
            lib = ctypes.CDLL(str(self.path.resolve()))
        except OSError as e:
            raise UserError(f"{self.path}: cannot load: {e}") from None
        try:
            lib.flashml_policy_contract_hash.restype = ctypes.c_char_p
            for fn in ("flashml_admit_score", "flashml_prefetch_when_score"):
                getattr(lib, fn).restype = ctypes.c_double
                getattr(lib, fn).argtypes = [_DOUBLE_P]
            for fn in ("flashml_admit_threshold", "flashml_prefetch_when_threshold",
                       "flashml_target_write_rate_mbps", "flashml_eviction_age_s"):
                getattr(lib, fn).restype = ctypes.c_double
            lib.flashml_prefetch_range.restype = None
            lib.flashml_prefetch_range.argtypes = [_DOUBLE_P, _INT32_P, _INT32_P]
        except AttributeError as e:
            raise UserError(f"{self.path}: not a flashml policy ({e})") from None
        self.lib = lib
        abi = lib.flashml_policy_abi_version()
        if abi != ABI_VERSION:
            raise UserError(f"{self.path}: ABI version {abi}, expected {ABI_VERSION}")
        nf = lib.flashml_policy_num_features()
        if nf != contract().num_features:
            raise UserError(f"{self.path}: {nf} features, the contract has "
                            f"{contract().num_features}")
        h = lib.flashml_policy_contract_hash().decode()
        if h != contract().hash:
            raise UserError(f"{self.path}: contract mismatch: {h[:12]}..., this flashml has "
                            f"{contract().hash[:12]}...")
        self.contract_hash = h
        self.admit_threshold = lib.flashml_admit_threshold()
        self.when_threshold = lib.flashml_prefetch_when_threshold()
        self.target_write_rate_mbps = lib.flashml_target_write_rate_mbps()
        self.eviction_age_s = lib.flashml_eviction_age_s()
        # Optional (flashml_policy.h): .so files compiled before the peak schedule have none.
        self.peak_hours: tuple[int, ...] = ()
        self.peak_bonus = 0.0
        if hasattr(lib, "flashml_admit_peak_hours") and hasattr(lib, "flashml_admit_peak_bonus"):
            lib.flashml_admit_peak_hours.restype = ctypes.c_uint32
            lib.flashml_admit_peak_bonus.restype = ctypes.c_double
            mask = lib.flashml_admit_peak_hours()
            self.peak_hours = tuple(h for h in range(24) if mask >> h & 1)
            self.peak_bonus = lib.flashml_admit_peak_bonus()

    def _rows(self, x: Any) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != contract().num_features:
            raise ValueError(f"expected rows x {contract().num_features} features, got shape "
                             f"{x.shape}")
        return x

    def _score_rows(self, f: Any, x: Any) -> np.ndarray:
        """`f(features)` of the ABI (a double-returning scorer) for every row of `x`."""
        x = self._rows(x)
        base = x.ctypes.data
        stride = x.strides[0]
        return np.fromiter((f(ctypes.cast(base + i * stride, _DOUBLE_P))
                            for i in range(x.shape[0])), dtype=np.float64, count=x.shape[0])

    def admit_scores(self, x: Any) -> np.ndarray:
        return self._score_rows(self.lib.flashml_admit_score, x)

    def when_scores(self, x: Any) -> np.ndarray:
        return self._score_rows(self.lib.flashml_prefetch_when_score, x)

    def prefetch_ranges(self, x: Any) -> tuple[np.ndarray, np.ndarray]:
        x = self._rows(x)
        n = x.shape[0]
        start = np.empty(n, dtype=np.int64)
        end = np.empty(n, dtype=np.int64)
        a, b = ctypes.c_int32(), ctypes.c_int32()
        pa, pb = ctypes.byref(a), ctypes.byref(b)
        f = self.lib.flashml_prefetch_range
        base = x.ctypes.data
        stride = x.strides[0]
        for i in range(n):
            f(ctypes.cast(base + i * stride, _DOUBLE_P), pa, pb)
            start[i] = a.value
            end[i] = b.value
        return start, end

    def decisions(self, x: Any, times: Any = None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """flashml_policy_decide for every row (flashml_policy_decide_at with `times`, the
        rows' trace times in seconds): (flags, first, last); flags has FLASHML_DECIDE_ADMIT
        (1) and FLASHML_DECIDE_PREFETCH (2), and first/last are -1 where the row does not
        prefetch."""
        x = self._rows(x)
        n = x.shape[0]
        if times is None:
            decide = self.lib.flashml_policy_decide
            decide.restype = ctypes.c_int
            decide.argtypes = [_DOUBLE_P, _INT32_P, _INT32_P]

            def f(row: Any, pa: Any, pb: Any, i: int) -> int:
                return decide(row, pa, pb)
        else:
            t = np.ascontiguousarray(times, dtype=np.float64)
            if t.shape != (n,):
                raise ValueError(f"expected {n} times, got shape {t.shape}")
            decide_at = self.lib.flashml_policy_decide_at
            decide_at.restype = ctypes.c_int
            decide_at.argtypes = [_DOUBLE_P, ctypes.c_double, _INT32_P, _INT32_P]

            def f(row: Any, pa: Any, pb: Any, i: int) -> int:
                return decide_at(row, t[i], pa, pb)
        flags = np.empty(n, dtype=np.int64)
        first = np.full(n, -1, dtype=np.int64)
        last = np.full(n, -1, dtype=np.int64)
        a, b = ctypes.c_int32(), ctypes.c_int32()
        pa, pb = ctypes.byref(a), ctypes.byref(b)
        base, stride = x.ctypes.data, x.strides[0]
        for i in range(n):
            a.value = b.value = -1
            flags[i] = f(ctypes.cast(base + i * stride, _DOUBLE_P), pa, pb, i)
            first[i], last[i] = a.value, b.value
        return flags, first, last

    def arrays(self, x: Any) -> dict[str, np.ndarray]:
        """Per-row arrays for the simulator's precomputed path: score, prefetch_start,
        prefetch_end, when_score."""
        start, end = self.prefetch_ranges(x)
        return {"score": self.admit_scores(x), "prefetch_start": start, "prefetch_end": end,
                "when_score": self.when_scores(x)}


def load_policy(bundle: str | os.PathLike[str]) -> PolicyLibrary:
    """Verify a compiled bundle (manifest, sha256) and load its policy.so."""
    m = verify_bundle(bundle)
    return PolicyLibrary(Path(bundle) / m.get("policy_so", SO_NAME))
