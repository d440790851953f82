"""Load a compiled policy bundle from Python (ctypes): verification and batch scoring.

    pol = load_policy("out/policy")          # checks manifest, sha256, ABI, contract hash
    pol.admit_scores(X)                      # X: rows x 18 float64, contract order
    start, end = pol.prefetch_ranges(X)
    pol.when_scores(X)

    mat = load_policy("out/mat", need=("eviction",))
    mat.evict_predict(E)                     # E: rows x 44 float64, eviction contract order

A loader is asked for capabilities (`need`; default admission + prefetch, what the
simulator's and the runtime's admission path use): a bundle whose manifest lacks one
(`capabilities`; a manifest without the field has admission and prefetch), or whose .so
lacks its functions, is refused with a UserError naming the bundle and what is missing.
"""

from __future__ import annotations

import _ctypes
import ctypes
import errno
import fcntl
import hashlib
import itertools
import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from flashml import knobs
from flashml.compiler import manifest as manifest_schema
from flashml.compiler.build import MANIFEST_NAME, SO_NAME
from flashml.compiler.bundle import EVICT_KNOBS
from flashml.errors import UserError
from flashml.features import eviction
from flashml.features import partition as partition_contract
from flashml.features import readahead as readahead_contract
from flashml.features.abi import (
    ABI_VERSION,
    CAPABILITIES,
    LEGACY_CAPABILITIES,
    SYM,
    bind,
    exports,
    required_functions,
)
from flashml.features.contract import contract

#: What a loader asks for unless told otherwise: Baleen's admission + prefetch.
DEFAULT_NEED: tuple[str, ...] = ("admission", "prefetch")
#: How to get a bundle with each capability (for the refusal message).
_HOW = {"admission": "compile a bundle with the admission models (admission.txt, "
                     "range_start.txt, range_end.txt, when.txt)",
        "prefetch": "compile a bundle with the admission models (admission.txt, "
                    "range_start.txt, range_end.txt, when.txt)",
        "eviction": "compile a bundle with MAT's eviction model (evict.txt, "
                    "compiler.bundle.save_evict_model)",
        "partition": "compile a bundle with MLCache's partition network (partition.json, "
                     "compiler.bundle.save_partition_model; flashml mlcache run)",
        "readahead": "compile a bundle with KML's readahead model (readahead.json, "
                     "compiler.readahead.save_readahead_model; flashml kml run)"}

_DOUBLE_P = ctypes.POINTER(ctypes.c_double)


#: The largest policy .so a loader reads (bytes).
MAX_SO_BYTES = 512 << 20
#: How a loader opens a bundle's files: never through a symlink, never blocking on a FIFO.
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC

log = logging.getLogger(__name__)


def _read_regular(dir_fd: int | None, name: str, shown: Path, limit: int,
                  missing: str = "missing") -> bytes:
    """The bytes of `name` (relative to dir_fd, or a path), read from one descriptor opened
    without following a symlink and without blocking: a symlink, FIFO, socket, device or
    folder is refused, and so is a file larger than `limit` bytes (UserError naming
    `shown`)."""
    try:
        fd = os.open(name, _OPEN_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        raise UserError(f"{shown}: {missing}") from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UserError(f"{shown}: a symbolic link; refused (a bundle's files must be "
                            "regular files inside it)") from None
        raise UserError(f"{shown}: cannot read: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a folder"
                    if stat.S_ISDIR(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode)
                    else "a device")
            raise UserError(f"{shown}: {kind}, not a regular file; refused")
        if st.st_size > limit:
            raise UserError(f"{shown}: {st.st_size} bytes; at most {limit} are read")
        chunks, total = [], 0
        while True:
            b = os.read(fd, min(1 << 20, limit + 1 - total))
            if not b:
                break
            chunks.append(b)
            total += len(b)
            if total > limit:
                raise UserError(f"{shown}: grew past {limit} bytes while being read")
        return b"".join(chunks)
    except OSError as e:
        raise UserError(f"{shown}: cannot read: {e.strerror or e}") from None
    finally:
        os.close(fd)


def read_manifest(bundle: str | os.PathLike[str]) -> dict[str, Any]:
    """manifest.json of a bundle folder, checked against the schema
    (compiler/manifest.schema.json): any other content is a UserError naming the file and
    the field."""
    return _open_bundle(Path(bundle))[1]


class _NoManifest(UserError):
    """A folder without manifest.json."""


def _open_bundle(bundle: Path) -> tuple[int, dict[str, Any]]:
    """(an O_DIRECTORY descriptor of the bundle folder, its checked manifest); the caller
    closes the descriptor."""
    try:
        dfd = os.open(bundle, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise UserError(f"{bundle}: no such policy bundle folder") from None
    except OSError as e:
        raise UserError(f"{bundle}: not a policy bundle folder: {e.strerror or e}") from None
    try:
        where = bundle / MANIFEST_NAME
        try:
            data = _read_regular(dfd, MANIFEST_NAME, where, manifest_schema.MAX_MANIFEST_BYTES)
        except UserError as e:
            if str(e) == f"{where}: missing":
                raise _NoManifest(f"{where}: missing; not a compiled policy bundle (flashml "
                                  "compile -o DIR)") from None
            raise
        return dfd, manifest_schema.parse_manifest(data, str(where))
    except BaseException:
        os.close(dfd)
        raise


def policy_so_path(bundle: Path, m: dict[str, Any]) -> Path:
    """The bundle's policy .so: the manifest's `policy_so`, a file name inside the bundle."""
    name = m.get("policy_so", SO_NAME)
    if not isinstance(name, str) or not name or name in (".", "..") or "/" in name \
            or "\0" in name or len(name.encode()) > 255:
        raise UserError(f"{bundle / MANIFEST_NAME}: field 'policy_so': expected the file name "
                        f"of the policy .so inside the bundle, got {str(name)[:80]!r}")
    return bundle / name


#: ELF identification of the .so files this machine can load: 64-bit little-endian.
_ELF64_LE = b"\x7fELF\x02\x01"


def check_elf_bytes(data: bytes, so: Path | str) -> None:
    """Refuse (UserError naming `so`) bytes that are not a whole 64-bit ELF shared object
    before they are mapped: a truncated one can kill the process that maps it (SIGBUS),
    even when a manifest vouches for its sha256."""
    import struct

    size = len(data)
    head = data[:64]
    if len(head) < 64 or not head.startswith(_ELF64_LE):
        raise UserError(f"{so}: not a 64-bit ELF shared object; recompile the policy")
    e_type = struct.unpack_from("<H", head, 16)[0]
    phoff, shoff = struct.unpack_from("<QQ", head, 32)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", head, 54)
    if e_type != 3:  # ET_DYN
        raise UserError(f"{so}: an ELF file but not a shared object; recompile the policy")
    if phentsize < 56 or phoff + phnum * phentsize > size \
            or (shnum and shoff + shnum * shentsize > size):
        raise UserError(f"{so}: truncated ELF file ({size} bytes); recompile the policy")
    for i in range(phnum):
        at = phoff + i * phentsize
        p_type, _, p_offset = struct.unpack_from("<IIQ", data, at)
        p_filesz = struct.unpack_from("<Q", data, at + 32)[0]
        if p_type == 1 and p_offset + p_filesz > size:  # PT_LOAD past the end of the file
            raise UserError(f"{so}: truncated ELF file ({size} bytes, a segment ends at "
                            f"{p_offset + p_filesz}); recompile the policy")


def elf_exports(data: bytes, so: Path | str) -> set[str]:
    """The names of the functions and objects a whole 64-bit ELF shared object (bytes that
    passed check_elf_bytes) defines in its dynamic symbol table, read from the bytes without
    mapping them. UserError naming `so` if it has no such table or it lies outside the file.
    Written here, not with a library: pyelftools would be a dependency for forty lines."""
    import struct

    size = len(data)
    shoff = struct.unpack_from("<Q", data, 40)[0]
    shentsize, shnum = struct.unpack_from("<HH", data, 58)

    def section(i: int) -> tuple[int, int, int, int]:  # type, offset, size, link
        at = shoff + i * shentsize
        sh_type = struct.unpack_from("<I", data, at + 4)[0]
        off, length = struct.unpack_from("<QQ", data, at + 24)
        link = struct.unpack_from("<I", data, at + 40)[0]
        return sh_type, off, length, link

    bad = UserError(f"{so}: no readable dynamic symbol table; recompile the policy")
    if shnum == 0 or shentsize < 64:
        raise bad
    dynsym = next((section(i) for i in range(shnum) if section(i)[0] == 11), None)  # DYNSYM
    if dynsym is None or dynsym[3] >= shnum:
        raise bad
    _, off, length, link = dynsym
    _, str_off, str_len, _ = section(link)
    if off + length > size or str_off + str_len > size:
        raise bad
    names: set[str] = set()
    for at in range(off, off + length - 23, 24):  # Elf64_Sym
        st_name, st_info, _, st_shndx = struct.unpack_from("<IBBH", data, at)
        if st_shndx == 0 or st_info >> 4 not in (1, 2) or st_name >= str_len:
            continue  # undefined, or neither GLOBAL nor WEAK
        end = data.find(b"\0", str_off + st_name, str_off + str_len)
        if end >= 0:
            names.add(data[str_off + st_name:end].decode("utf-8", "replace"))
    return names


def check_exports(data: bytes, so: Path | str, capabilities: list[str],
                  where: Path | str) -> None:
    """Refuse (UserError) a .so whose bytes do not define every function of the
    capabilities its manifest (`where`) claims: checked before it is mapped, so a loader
    that hands the .so on (the Rust simulator) refuses a lying manifest as ctypes does."""
    have = elf_exports(data, so)
    for c in ["core", *capabilities]:
        if c not in CAPABILITIES:
            continue  # the schema has refused unknown names already
        lacking = [f for f in required_functions(c) if f not in have]
        if lacking:
            raise UserError(f"{so}: refused: {where} claims the {c} capability but the .so "
                            f"does not export {lacking[0]}")


def check_elf(so: Path) -> None:
    """check_elf_bytes of the file `so` (read from one descriptor, never through a symlink)."""
    check_elf_bytes(_read_regular(None, str(so), so, MAX_SO_BYTES), so)


@dataclass(frozen=True)
class VerifiedSo:
    """A policy .so's bytes, read from one descriptor and checked: its size and sha256 are
    the manifest's (unless `unverified`), and it is a whole 64-bit ELF shared object."""

    path: Path
    data: bytes
    sha256: str
    manifest: dict[str, Any] | None
    bundle: Path | None
    unverified: bool = False

    @property
    def size(self) -> int:
        return len(self.data)


def read_verified(target: str | os.PathLike[str], *, unverified: bool = False,
                  need: tuple[str, ...] | list[str] | str | None = None) -> VerifiedSo:
    """The one way a policy .so is read before it is mapped (by ctypes here, or by the Rust
    simulator, which is handed the path, the sha256 and the size and checks them again on
    its own descriptor).

    `target`: a bundle folder, or the policy .so of one (then its folder's manifest must name
    it). The folder is opened once; manifest.json and the .so are opened relative to it
    without following symlinks or blocking (FIFOs, sockets, devices refused), bounded in
    size (1 MiB, 512 MiB); the manifest is checked against the schema, the .so's bytes
    against its size_bytes and sha256, then the ELF checks. With `need`, the manifest's
    capabilities and contract hashes are checked too (verify_bundle's checks).

    A .so with no manifest beside it is refused unless `unverified` (then it is read the
    same way, its sha256 reported, and a WARNING logged)."""
    target = Path(target)
    bundle, so_name = target, None
    if not target.is_dir():
        bundle, so_name = target.parent, target.name
    try:
        dfd, m = _open_bundle(bundle)
    except _NoManifest as e:
        if unverified:
            return _read_unverified(target if so_name else target / SO_NAME)
        if so_name is not None:
            raise UserError(f"{target}: refused: no {MANIFEST_NAME} beside it vouches for "
                            "this .so (give the `flashml compile -o DIR` folder; "
                            "--unverified loads a bare .so anyway)") from None
        raise UserError(f"{e}; --unverified loads its {SO_NAME} anyway") from None
    try:
        if need is not None:
            _check_need(bundle, m, _checked_need(need))
        if not m.get("capabilities", LEGACY_CAPABILITIES):
            raise UserError(f"{bundle}: a knobs-only bundle (system {m.get('system')}, "
                            "capabilities []): it has no policy .so to load")
        so = policy_so_path(bundle, m)
        if so_name is not None and so_name != so.name:
            raise UserError(f"{target}: refused: {bundle / MANIFEST_NAME} vouches for "
                            f"{so.name}, not {so_name}")
        return _verified(dfd, so, m["sha256"], m["size_bytes"], m, bundle)
    finally:
        os.close(dfd)


def _verified(dfd: int, so: Path, sha256: str, size_bytes: int,
              m: dict[str, Any] | None, bundle: Path | None) -> VerifiedSo:
    """so.name (relative to the folder descriptor dfd) read once and checked: its size,
    sha256 and the ELF checks."""
    data = _read_regular(dfd, so.name, so, MAX_SO_BYTES)
    if len(data) != size_bytes:
        raise UserError(f"{so}: {len(data)} bytes does not match {MANIFEST_NAME} (size_bytes "
                        f"{size_bytes}); the .so was changed after compiling")
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256:
        raise UserError(f"{so}: sha256 {digest[:12]}... does not match {MANIFEST_NAME} "
                        f"({str(sha256)[:12]}...); the .so was changed after compiling")
    check_elf_bytes(data, so)
    if m is not None:
        check_exports(data, so, manifest_capabilities(m, bundle / MANIFEST_NAME
                                                      if bundle else MANIFEST_NAME),
                      bundle / MANIFEST_NAME if bundle else MANIFEST_NAME)
    return VerifiedSo(path=so, data=data, sha256=digest, manifest=m, bundle=bundle)


def verify_so_file(so: Path, sha256: str, size_bytes: int) -> VerifiedSo:
    """A .so whose sha256 and size the caller knows (the compiler's own check of what it
    just linked, before the manifest exists), read and checked as read_verified does."""
    try:
        dfd = os.open(so.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise UserError(f"{so.parent}: cannot open: {e.strerror or e}") from None
    try:
        return _verified(dfd, so, sha256, size_bytes, None, None)
    finally:
        os.close(dfd)


def _read_unverified(so: Path) -> VerifiedSo:
    data = _read_regular(None, str(so), so, MAX_SO_BYTES, "no such policy .so")
    digest = hashlib.sha256(data).hexdigest()
    check_elf_bytes(data, so)
    log.warning("UNVERIFIED policy: %s (sha256 %s) has no manifest vouching for it; it is "
                "loaded as it is (--unverified)", so, digest)
    return VerifiedSo(path=so, data=data, sha256=digest, manifest=None, bundle=None,
                      unverified=True)


def _loaded(name: str) -> bool:
    """Whether the dynamic linker already has an object loaded under `name`."""
    try:
        h = ctypes.CDLL(name, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    except OSError:
        return False
    _ctypes.dlclose(h._handle)
    return True


#: MFD_EXEC (Linux 6.3; older kernels refuse it with EINVAL, and every memfd is executable).
_MFD_EXEC = 0x0010


def map_verified(v: VerifiedSo) -> Any:
    """Map exactly `v`'s bytes: copied into a sealed memfd (no shrink, grow, write; seals
    sealed) and dlopen()ed as /proc/self/fd/N, a name no other loaded object has. Returns the
    ctypes library."""
    try:  # executable where the kernel tells memfds apart (vm.memfd_noexec)
        fd = os.memfd_create("flashml-policy",
                             os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING | _MFD_EXEC)
    except OSError as e:
        if e.errno != errno.EINVAL:
            raise UserError(f"{v.path}: cannot load: memfd_create: {e.strerror}") from None
        fd = os.memfd_create("flashml-policy", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        with open(fd, "wb", closefd=False, buffering=0) as f:
            view = memoryview(v.data)
            while view:
                view = view[f.write(view):]
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW
                    | fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SEAL)
        name = _free_name(fd)
        try:
            return ctypes.CDLL(name)
        except OSError as e:
            why = str(e).replace(name, str(v.path))
            raise UserError(f"{v.path}: cannot load: {why}") from None
    finally:
        os.close(fd)


#: How many names _free_name handed out in this process: where the next search starts.
_names_used = itertools.count()


def memfd_name(fd: int, k: int) -> str:
    """The k-th spelling of /proc/self/fd/<fd>: k's binary digits as "/." (1) and "//" (0)
    between the folder and the number, so every k names the same descriptor by a different
    string (k = 0 is the plain /proc/self/fd/<fd>)."""
    bits = "".join("/." if b == "1" else "//" for b in format(k, "b")) if k else ""
    return f"/proc/self/fd{bits}/{fd}"


def _free_name(fd: int) -> str:
    """A name for `fd` that no loaded object has. The dynamic linker takes an object whose
    name matches an earlier one for that one, and a memfd's number is reused once it is
    closed while the object loaded from it stays (ctypes never unloads): spelling the path
    differently each time (memfd_name) keeps names unique without holding descriptors.
    The Rust simulator's loader in this process checks the same names the same way."""
    k = next(_names_used)
    while _loaded(name := memfd_name(fd, k)):
        k = next(_names_used)
    return name


def core_args(target: str | os.PathLike[str], need: tuple[str, ...] | list[str] | str, *,
              unverified: bool = False) -> dict[str, Any]:
    """What the Rust simulator's loaders take for a policy (a bundle folder or its .so):
    the .so's path, the sha256 and size it must have (checked here against the manifest,
    and by Rust again on the bytes it maps) and whether it is unverified."""
    v = read_verified(target, unverified=unverified, need=need)
    return {"path": str(v.path), "sha256": v.sha256, "size_bytes": v.size,
            "unverified": v.unverified}


def _checked_need(need: Any) -> tuple[str, ...]:
    need = (need,) if isinstance(need, str) else tuple(need)
    bad = [c for c in need if c not in CAPABILITIES or c == "core"]
    if bad or not need:
        raise ValueError(f"need: unknown capabilities {bad or need}; known: "
                         f"{[c for c in CAPABILITIES if c != 'core']}")
    return need


def manifest_capabilities(m: dict[str, Any], where: Any = MANIFEST_NAME) -> list[str]:
    """The capabilities a manifest declares; one without the field (compiled before
    capabilities existed) has admission and prefetch."""
    caps = m.get("capabilities", list(LEGACY_CAPABILITIES))
    if not isinstance(caps, list) or not all(isinstance(c, str) for c in caps):
        raise UserError(f"{where}: field 'capabilities': expected a list of names, got "
                        f"{caps!r}")
    return caps


def refuse_missing(bundle: Any, have: list[str], need: tuple[str, ...]) -> None:
    """UserError naming the bundle and the first capability of `need` it lacks."""
    for c in need:
        if c not in have:
            raise UserError(f"{bundle}: refused: the policy bundle has no {c} capability "
                            f"(it has: {', '.join(have) or 'none'}); {_HOW[c]}")


def _check_need(bundle: Path, m: dict[str, Any], need: tuple[str, ...]) -> None:
    """The manifest against this flashml for the capabilities in `need`: the ABI version,
    the capabilities (refused if the bundle lacks one) and the contract hash of each."""
    refuse_missing(bundle, manifest_capabilities(m, bundle / MANIFEST_NAME), need)
    if m.get("abi_version") != ABI_VERSION:
        raise UserError(f"{bundle}: ABI version {m.get('abi_version')} in {MANIFEST_NAME}, "
                        f"this flashml speaks ABI {ABI_VERSION}; recompile the policy")
    if ("admission" in need or "prefetch" in need) and m.get("contract_hash") != contract().hash:
        raise UserError(f"{bundle}: contract mismatch: the policy was compiled for feature "
                        f"contract {str(m.get('contract_hash'))[:12]}..., this flashml has "
                        f"{contract().hash[:12]}...")
    for cap, key, module, toml in (
            ("partition", "partition_contract_hash", partition_contract, "partition"),
            ("readahead", "readahead_contract_hash", readahead_contract, "readahead"),
            ("eviction", "evict_contract_hash", eviction, "eviction")):
        want = module.contract().hash
        if cap in need and m.get(key) != want:
            raise UserError(f"{bundle}: {cap} contract mismatch: the policy was compiled for "
                            f"{cap} feature contract {str(m.get(key))[:12]}..., this flashml "
                            f"has {want[:12]}... (features/{toml}.toml)")


def verify_bundle(bundle: str | os.PathLike[str],
                  need: tuple[str, ...] | list[str] | str = DEFAULT_NEED) -> dict[str, Any]:
    """Check a compiled bundle against this flashml without mapping it: the manifest against
    the schema, its ABI version, the capabilities in `need` (refused if the bundle lacks
    one) and the contract hash of each (admission/prefetch: features/contract.toml,
    eviction: features/eviction.toml), then policy.so's size, sha256 and ELF checks
    (read_verified). Returns the manifest; a mismatch raises UserError (one clear line)."""
    need = _checked_need(need)
    bundle = Path(bundle)
    v = read_verified(bundle, need=need)
    assert v.manifest is not None
    return v.manifest


class PolicyLibrary:
    """A policy .so loaded with ctypes from verified bytes (read_verified, map_verified):
    checks its ABI version, that it exports the functions of the capabilities in `need` and
    of every capability its manifest claims, and their feature counts and contract hashes.

    `so`: a bundle folder or its policy .so; a .so without a manifest is refused unless
    `unverified` (then `unverified` is True on the loaded library and `sha256` says what
    ran)."""

    def __init__(self, so: str | os.PathLike[str],
                 need: tuple[str, ...] | list[str] | str = DEFAULT_NEED, *,
                 unverified: bool = False, _manifest_need: bool = False) -> None:
        need = _checked_need(need)
        v = read_verified(so, unverified=unverified, need=need if _manifest_need else None)
        self.path = v.path
        self.sha256 = v.sha256
        self.size_bytes = v.size
        self.unverified = v.unverified
        self.manifest = v.manifest
        lib = map_verified(v)
        self._handle: int | None = lib._handle
        if not exports(lib, "policy_abi_version"):
            raise UserError(f"{self.path}: not a flashml policy (no {SYM['policy_abi_version']})")
        self.lib = lib
        abi = bind(lib, "policy_abi_version")()
        if abi != ABI_VERSION:
            raise UserError(f"{self.path}: ABI version {abi}, expected {ABI_VERSION}")
        #: The capabilities whose functions the .so exports (its optional ones aside).
        self.capabilities = [c for c in CAPABILITIES if c != "core" and all(
            hasattr(lib, f) for f in required_functions(c))]
        self.need = need
        for c in need:
            if c not in self.capabilities:
                lacking = [f for f in required_functions(c) if not hasattr(lib, f)]
                raise UserError(f"{self.path}: refused: the policy has no {c} capability "
                                f"(no {lacking[0]}; it has: "
                                f"{', '.join(self.capabilities) or 'none'}); {_HOW[c]}")
        # that it exports what its manifest claims was checked on its bytes (check_exports)
        if "admission" in need or "prefetch" in need:
            self._bind_admission(lib)
        if "eviction" in need:
            self._bind_eviction(lib)
        if "partition" in need:
            self._bind_partition(lib)
        if "readahead" in need:
            self._bind_readahead(lib)

    def close(self) -> None:
        """dlclose the library (ctypes never does): for a process that loads many policies.
        Nothing of this object may be called afterwards."""
        if self._handle is not None:
            handle, self._handle = self._handle, None
            self.lib = None
            _ctypes.dlclose(handle)

    def _contract_hash(self, fn: Any, want: str, kind: str) -> str:
        """A capability's contract hash as the .so reports it (fn: its ..._contract_hash),
        refused unless it is `want`, this flashml's (features/<kind>.toml)."""
        raw = fn()
        h = raw.decode(errors="replace") if raw else "(none)"
        if h != want:
            raise UserError(f"{self.path}: {kind} contract mismatch: {h[:12]}..., this "
                            f"flashml has {want[:12]}... (features/{kind}.toml)")
        return h

    def _bind_partition(self, lib: Any) -> None:
        c = partition_contract.contract()
        bind(lib, "partition")
        got = (bind(lib, "partition_num_features")(), bind(lib, "partition_max_streams")(),
               bind(lib, "partition_steps")())
        if got != (c.num_features, c.max_streams, c.steps):
            raise UserError(f"{self.path}: its partition network reads {got[0]} features for "
                            f"{got[1]} streams and {got[2]} steps; the partition contract has "
                            f"{c.num_features}, {c.max_streams} and {c.steps}")
        self.partition_contract_hash = self._contract_hash(
            bind(lib, "partition_contract_hash"), c.hash, "partition")

    def _bind_readahead(self, lib: Any) -> None:
        c = readahead_contract.contract()
        bind(lib, "readahead_kib")
        got = (bind(lib, "readahead_num_features")(), bind(lib, "readahead_window_ms")())
        if got != (c.num_features, c.window_ms):
            raise UserError(f"{self.path}: its readahead model reads {got[0]} features of "
                            f"{got[1]} ms windows; the readahead contract has "
                            f"{c.num_features} of {c.window_ms} ms")
        self.readahead_contract_hash = self._contract_hash(
            bind(lib, "readahead_contract_hash"), c.hash, "readahead")

    def readahead_kib(self, x: Any) -> np.ndarray:
        """flashml_readahead_kib of every row of x (rows x the readahead features), KiB."""
        x = self._rows(x, readahead_contract.contract().num_features)
        f = bind(self.lib, "readahead_kib")
        return np.array([f(row.ctypes.data_as(_DOUBLE_P)) for row in x], dtype=np.int64)

    def partition(self, x: Any, streams: int) -> tuple[np.ndarray, np.ndarray]:
        """flashml_partition of every row of x (rows x the partition contract's features):
        the shares (rows, streams) and each call's status (0, or 1 where the network gave
        no positive share and the split is even)."""
        x = self._rows(x, partition_contract.contract().num_features)
        if not 1 <= streams <= partition_contract.contract().max_streams:
            raise ValueError(f"streams must be in 1..{partition_contract.contract().max_streams}"
                             f", got {streams}")
        out = np.empty((x.shape[0], streams), dtype=np.float64)
        status = np.empty(x.shape[0], dtype=np.int32)
        f = bind(self.lib, "partition")
        for i in range(x.shape[0]):
            status[i] = f(x[i].ctypes.data_as(_DOUBLE_P), streams,
                          out[i].ctypes.data_as(_DOUBLE_P))
        return out, status

    def _bind_admission(self, lib: Any) -> None:
        for fn in ("admit_score", "prefetch_when_score", "prefetch_range"):
            bind(lib, fn)
        nf = bind(lib, "policy_num_features")()
        if nf != contract().num_features:
            raise UserError(f"{self.path}: {nf} features, the contract has "
                            f"{contract().num_features}")
        h = bind(lib, "policy_contract_hash")().decode()
        if h != contract().hash:
            raise UserError(f"{self.path}: contract mismatch: {h[:12]}..., this flashml has "
                            f"{contract().hash[:12]}...")
        self.contract_hash = h
        self.admit_threshold = bind(lib, "admit_threshold")()
        self.when_threshold = bind(lib, "prefetch_when_threshold")()
        self.target_write_rate_mbps = bind(lib, "target_write_rate_mbps")()
        self.eviction_age_s = bind(lib, "eviction_age_s")()
        # Optional (flashml_policy.h): .so files compiled before the peak schedule have none.
        self.peak_hours: tuple[int, ...] = ()
        self.peak_bonus = 0.0
        if exports(lib, "admit_peak_hours") and exports(lib, "admit_peak_bonus"):
            mask = bind(lib, "admit_peak_hours")()
            self.peak_hours = tuple(h for h in range(24) if mask >> h & 1)
            self.peak_bonus = bind(lib, "admit_peak_bonus")()

    def _bind_eviction(self, lib: Any) -> None:
        e = eviction.contract()
        bind(lib, "evict_predict")
        bind(lib, "evict_predict_batch")
        nf = bind(lib, "evict_num_features")()
        if nf != e.num_features:
            raise UserError(f"{self.path}: its eviction model reads {nf} features, the "
                            f"eviction contract has {e.num_features}")
        self.evict_contract_hash = self._contract_hash(bind(lib, "evict_contract_hash"), e.hash,
                                                       "eviction")
        # MAT's knobs as declared (systems/mat/settings.toml); a .so compiled before the
        # controller and reuse functions existed gets their legacy values (sign, off)
        try:
            got = knobs.read_exports(lib, EVICT_KNOBS)
        except ValueError as err:
            raise UserError(f"{self.path}: {err}") from None
        self.evict_k = got["k"]
        self.evict_max_candidates = got["max_candidates"]
        self.evict_delta = got["delta"]
        self.evict_initial_threshold = got["initial_threshold"]
        self.evict_memory_window = got["memory_window"]
        self.evict_controller = EVICT_KNOBS["controller"].code(got["controller"])
        self.evict_reuse_predictions = got["reuse_predictions"]

    def _rows(self, x: Any, nf: int | None = None) -> np.ndarray:
        nf = contract().num_features if nf is None else nf
        x = np.ascontiguousarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != nf:
            raise ValueError(f"expected rows x {nf} features, got shape {x.shape}")
        return x

    def evict_predict(self, x: Any) -> np.ndarray:
        """flashml_evict_predict of every row of x (rows x 44, eviction contract order):
        log1p of the predicted distance from the last access to the next."""
        x = self._rows(x, eviction.contract().num_features)
        f = bind(self.lib, "evict_predict")
        base, stride = x.ctypes.data, x.strides[0]
        return np.fromiter((f(ctypes.cast(base + i * stride, _DOUBLE_P))
                            for i in range(x.shape[0])), dtype=np.float64, count=x.shape[0])

    def evict_predict_batch(self, x: Any) -> np.ndarray:
        """The same through one flashml_evict_predict_batch call."""
        x = self._rows(x, eviction.contract().num_features)
        out = np.empty(x.shape[0], dtype=np.float64)
        if x.shape[0] >= 2**31:
            raise ValueError("at most 2^31 - 1 rows per batch")
        bind(self.lib, "evict_predict_batch")(x.ctypes.data_as(_DOUBLE_P), x.shape[0],
                                              out.ctypes.data_as(_DOUBLE_P))
        return out

    def _score_rows(self, f: Any, x: Any) -> np.ndarray:
        """`f(features)` of the ABI (a double-returning scorer) for every row of `x`."""
        x = self._rows(x)
        base = x.ctypes.data
        stride = x.strides[0]
        return np.fromiter((f(ctypes.cast(base + i * stride, _DOUBLE_P))
                            for i in range(x.shape[0])), dtype=np.float64, count=x.shape[0])

    def admit_scores(self, x: Any) -> np.ndarray:
        return self._score_rows(bind(self.lib, "admit_score"), x)

    def when_scores(self, x: Any) -> np.ndarray:
        return self._score_rows(bind(self.lib, "prefetch_when_score"), x)

    def prefetch_ranges(self, x: Any) -> tuple[np.ndarray, np.ndarray]:
        x = self._rows(x)
        n = x.shape[0]
        start = np.empty(n, dtype=np.int64)
        end = np.empty(n, dtype=np.int64)
        a, b = ctypes.c_int32(), ctypes.c_int32()
        pa, pb = ctypes.byref(a), ctypes.byref(b)
        f = bind(self.lib, "prefetch_range")
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
            decide = bind(self.lib, "policy_decide")

            def f(row: Any, pa: Any, pb: Any, i: int) -> int:
                return decide(row, pa, pb)
        else:
            t = np.ascontiguousarray(times, dtype=np.float64)
            if t.shape != (n,):
                raise ValueError(f"expected {n} times, got shape {t.shape}")
            decide_at = bind(self.lib, "policy_decide_at")

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


def load_policy(bundle: str | os.PathLike[str],
                need: tuple[str, ...] | list[str] | str = DEFAULT_NEED, *,
                unverified: bool = False) -> PolicyLibrary:
    """Verify a compiled bundle (manifest schema, the capabilities in `need` and their
    contract hashes, size, sha256, ELF) and load exactly the verified bytes of its policy .so
    for them. A bare .so (no manifest) only with `unverified`."""
    return PolicyLibrary(bundle, need, unverified=unverified, _manifest_need=True)
