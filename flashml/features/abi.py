"""The policy ABI (features/abi.toml): every function a policy .so may export, its C signature,
its capability and whether it is optional, declared once.

    from flashml.features.abi import SYM, bind
    SYM["admit_score"]                     # flashml_admit_score, as a .so exports it
    f = bind(lib, "admit_score")           # lib's function, restype and argtypes set

`SYM` maps each function's name without its `flashml_` prefix to the name a .so exports; the
loaders and the compiler look functions up through it (or through `bind`), never by a name of
their own (tests/kernel/test_abi.py). `python -m flashml.features.codegen` writes the C and
Rust forms of the same names (flashml_policy.h, sim/src/core/abi.rs).
"""

from __future__ import annotations

import ctypes
import functools
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from flashml import knobs

ABI_PATH = Path(__file__).resolve().parent / "abi.toml"
_PREFIX = "flashml_"
_NAME = re.compile(r"flashml_[a-z0-9_]+")
#: The C types of the ABI as ctypes knows them (a pointer: POINTER of its target).
_CTYPES: dict[str, Any] = {"int": ctypes.c_int, "double": ctypes.c_double,
                           "uint32_t": ctypes.c_uint32, "int32_t": ctypes.c_int32,
                           "int64_t": ctypes.c_int64, "const char *": ctypes.c_char_p,
                           "void": None}


@dataclass(frozen=True)
class Function:
    """One function of the ABI."""

    name: str
    returns: str
    params: tuple[str, ...]
    capability: str
    optional: bool
    #: Where flashml_policy.h declares it (a placeholder of codegen.py's header template).
    group: str

    @property
    def key(self) -> str:
        """Its name without `flashml_`: its key in SYM, and (upper case) its constant's name
        in C (FLASHML_SYM_<KEY>) and Rust (abi::<KEY>)."""
        return self.name.removeprefix(_PREFIX)

    def prototype(self, width: int = 96) -> str:
        """Its C declaration, the parameters wrapped under the first one past `width`."""
        head = f"{self.returns}{'' if self.returns.endswith('*') else ' '}{self.name}("
        params = list(self.params) or ["void"]
        lines, cur = [], head
        for i, p in enumerate(params):
            piece = p + (");" if i == len(params) - 1 else ",")
            if cur not in (head, " " * len(head)) and len(cur) + 1 + len(piece) > width:
                lines.append(cur)
                cur = " " * len(head)
            cur += piece if cur in (head, " " * len(head)) else " " + piece
        return "\n".join([*lines, cur])

    def ctypes_signature(self) -> tuple[Any, list[Any]]:
        """(restype, argtypes) for ctypes."""
        return _ctype(self.returns), [_ctype(_param_type(p)) for p in self.params]


def _param_type(param: str) -> str:
    """`const double *features` -> `const double *`; `int n` -> `int`."""
    m = re.fullmatch(r"(.*?[\s*])\s*[A-Za-z_]\w*", param.strip())
    if not m:
        raise ValueError(f"{ABI_PATH}: parameter {param!r} is not `<type> <name>`")
    return m.group(1).strip()


def _ctype(c: str) -> Any:
    c = " ".join(c.split())
    if c in _CTYPES:
        return _CTYPES[c]
    if c.endswith("*"):
        return ctypes.POINTER(_ctype(c[:-1].strip().removeprefix("const ")))
    raise ValueError(f"{ABI_PATH}: no ctypes type for the C type {c!r}")


@functools.cache
def _load() -> tuple[int, tuple[str, ...], tuple[Function, ...]]:
    data = tomllib.loads(ABI_PATH.read_text())
    out: list[Function] = []
    for d in data["function"]:
        if "knobs" in d:
            out += [Function(k.abi, k.c_type, (), d["capability"], k.legacy is not None,
                             d["group"]) for k in knobs.load(d["knobs"]) if k.abi]
            continue
        out.append(Function(d["name"], d["returns"], tuple(d["params"]), d["capability"],
                            bool(d.get("optional", False)), d["group"]))
    names = [f.name for f in out]
    bad = [n for n in names if not _NAME.fullmatch(n)]
    if bad or len(set(names)) != len(names):
        raise ValueError(f"{ABI_PATH}: names must be unique and flashml_[a-z0-9_]+: "
                         f"{bad or sorted(n for n in names if names.count(n) > 1)}")
    for f in out:
        f.ctypes_signature()  # every type known
    return int(data["version"]), tuple(data["legacy_capabilities"]), tuple(out)


#: Version of the policy .so C ABI (flashml_policy_abi_version).
ABI_VERSION: int = _load()[0]
#: Every function of the ABI, in the order flashml_policy.h declares them.
FUNCTIONS: tuple[Function, ...] = _load()[2]
#: Name without `flashml_` -> the name a .so exports.
SYM: Mapping[str, str] = MappingProxyType({f.key: f.name for f in FUNCTIONS})
_BY_KEY: Mapping[str, Function] = MappingProxyType({f.key: f for f in FUNCTIONS})
#: Every function of the ABI by capability. `core` is exported by every policy .so; the
#: others by a .so that has the capability (manifest.json `capabilities`, in this order).
CAPABILITIES: dict[str, tuple[str, ...]] = {
    c: tuple(f.name for f in FUNCTIONS if f.capability == c)
    for c in dict.fromkeys(f.capability for f in FUNCTIONS)}
#: What a manifest without `capabilities` (compiled before they existed) has.
LEGACY_CAPABILITIES: tuple[str, ...] = _load()[1]
#: Functions .so files compiled before them lack: a loader looks them up with dlsym and does
#: without; a capability is there when its other functions all are.
OPTIONAL_FUNCTIONS: tuple[str, ...] = tuple(f.name for f in FUNCTIONS if f.optional)


def required_functions(capability: str) -> list[str]:
    """The functions a .so must export to have `capability` (its optional ones aside)."""
    return [f for f in CAPABILITIES[capability] if f not in OPTIONAL_FUNCTIONS]


def capability_functions(capabilities: tuple[str, ...] | list[str]) -> list[str]:
    """The functions a .so with these capabilities exports (sorted), `core` included."""
    unknown = [c for c in capabilities if c not in CAPABILITIES or c == "core"]
    if unknown:
        raise ValueError(f"unknown capabilities {unknown}; known: "
                         f"{[c for c in CAPABILITIES if c != 'core']}")
    return sorted({f for c in ("core", *capabilities) for f in CAPABILITIES[c]})


def exports(lib: Any, key: str) -> bool:
    """Whether a loaded .so (a ctypes CDLL) exports the function SYM[key]."""
    return hasattr(lib, SYM[key])


def bind(lib: Any, key: str) -> Any:
    """The function SYM[key] of a loaded .so (a ctypes CDLL), its restype and argtypes set from
    its declaration (AttributeError when the .so lacks it)."""
    f = _BY_KEY[key]
    fn = getattr(lib, f.name)
    fn.restype, fn.argtypes = f.ctypes_signature()
    return fn
