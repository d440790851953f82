//! Loading a compiled .so (compiler/, ABI of compiler/flashml_policy.h) the one verified way:
//! open it once, check its size and sha256 against the bundle's manifest ([`Expected`]) and
//! its ELF headers, then map exactly the bytes that were checked ([`load_verified`]); its
//! symbols and capabilities ([`symbol`], [`capabilities`], [`require_capabilities`]). Used by
//! every compiled policy: admission + prefetch (`flash::so_policy`) and MAT's eviction
//! predictor (`mat::so_evict`).

use std::ffi::CStr;
use std::path::Path;

use libloading::Library;

use crate::core::config::{err, SimError};
use crate::core::contract::{CAPABILITIES, OPTIONAL_FUNCTIONS};

pub fn symbol<T: Copy>(lib: &Library, path: &str, name: &str) -> Result<T, SimError> {
    // SAFETY: the symbol's type is the one flashml_policy.h declares for `name`.
    unsafe {
        lib.get::<T>(name.as_bytes())
            .map(|s| *s)
            .map_err(|e| SimError(format!("{path}: not a flashml policy: {name}: {e}")))
    }
}

/// Whether `lib` exports `name`.
pub fn exports(lib: &Library, name: &str) -> bool {
    // SAFETY: only looks the symbol up; it is never called through this type.
    unsafe { lib.get::<unsafe extern "C" fn()>(name.as_bytes()).is_ok() }
}

/// The functions a .so must export to have `capability` (its optional ones aside).
pub fn required(capability: &str) -> impl Iterator<Item = &'static str> + '_ {
    CAPABILITIES
        .iter()
        .filter(move |(c, _)| *c == capability)
        .flat_map(|(_, fns)| fns.iter().copied())
        .filter(|f| !OPTIONAL_FUNCTIONS.contains(f))
}

/// The capabilities whose functions `lib` exports ("admission", "prefetch", "eviction").
pub fn capabilities(lib: &Library) -> Vec<&'static str> {
    CAPABILITIES
        .iter()
        .map(|(c, _)| *c)
        .filter(|c| *c != "core" && required(c).all(|f| exports(lib, f)))
        .collect()
}

/// How a policy .so is named in errors: its bundle folder when it is a bundle's policy.so.
pub fn bundle_name(path: &Path) -> String {
    match (path.file_name(), path.parent()) {
        (Some(f), Some(dir)) if f == "policy.so" && !dir.as_os_str().is_empty() => {
            dir.display().to_string()
        }
        _ => path.display().to_string(),
    }
}

/// Refuse a .so that lacks one of the capabilities in `need`, naming the bundle, the missing
/// capability and what the .so has.
pub fn require_capabilities(lib: &Library, path: &Path, need: &[&str]) -> Result<(), SimError> {
    for cap in need {
        if let Some(missing) = required(cap).find(|f| !exports(lib, f)) {
            let have = capabilities(lib);
            let how = if *cap == "eviction" {
                "compile a bundle with MAT's eviction model (evict.txt)"
            } else {
                "compile a bundle with the admission models (admission.txt, range_start.txt, \
                 range_end.txt, when.txt)"
            };
            return err(format!(
                "{}: refused: the policy bundle has no {cap} capability (policy.so exports no \
                 {missing}; it has: {}); {how}",
                bundle_name(path),
                if have.is_empty() {
                    "none".to_string()
                } else {
                    have.join(", ")
                }
            ));
        }
    }
    Ok(())
}

/// ELF identification of the .so files this simulator can load: 64-bit little-endian.
const ELF64_LE: &[u8] = b"\x7fELF\x02\x01";

/// The largest policy .so a loader reads (bytes).
pub const MAX_SO_BYTES: u64 = 512 << 20;

/// What a policy .so must be, from its manifest (checked against the schema by flashml's
/// Python loader, compiler/loader.py, which passes these on): its size and sha256.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    pub sha256: String,
    pub size_bytes: u64,
}

impl Expected {
    /// Both or neither of a manifest's sha256 and size_bytes (None: an unverified load,
    /// which the caller must have asked for with `unverified`).
    pub fn from_parts(
        what: &str,
        sha256: Option<String>,
        size_bytes: Option<u64>,
        unverified: bool,
    ) -> Result<Option<Expected>, SimError> {
        match (sha256, size_bytes) {
            (Some(sha256), Some(size_bytes)) => Ok(Some(Expected { sha256, size_bytes })),
            (None, None) if unverified => Ok(None),
            (None, None) => err(format!(
                "{what}: refused: no sha256 and size_bytes to verify the policy .so against \
                 (load it through flashml.compiler.loader, which reads them from the bundle's \
                 manifest; unverified=True loads it anyway)"
            )),
            _ => err(format!(
                "{what}: give both sha256 and size_bytes, or neither"
            )),
        }
    }
}

/// The bytes of `path`, read from one descriptor opened without following a symlink and
/// without blocking: a symlink, FIFO, socket, device or folder is refused, and so is a file
/// larger than [`MAX_SO_BYTES`].
fn read_regular(path: &Path) -> Result<Vec<u8>, SimError> {
    use std::io::Read;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};

    let p = path.display().to_string();
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match (e.kind(), e.raw_os_error()) {
            (std::io::ErrorKind::NotFound, _) => SimError(format!("{p}: no such policy .so")),
            (_, Some(libc::ELOOP)) => SimError(format!(
                "{p}: a symbolic link; refused (a bundle's files must be regular files inside \
                 it)"
            )),
            _ => SimError(format!("{p}: cannot read: {e}")),
        })?;
    let io = |e: std::io::Error| SimError(format!("{p}: cannot read: {e}"));
    let md = f.metadata().map_err(io)?;
    let ft = md.file_type();
    if !ft.is_file() {
        let kind = if ft.is_fifo() {
            "a FIFO"
        } else if ft.is_dir() {
            "a folder"
        } else if ft.is_socket() {
            "a socket"
        } else {
            "a device"
        };
        return err(format!("{p}: {kind}, not a regular file; refused"));
    }
    if md.len() > MAX_SO_BYTES {
        return err(format!(
            "{p}: {} bytes; at most {MAX_SO_BYTES} are read",
            md.len()
        ));
    }
    let mut data = Vec::with_capacity(md.len() as usize);
    f.take(MAX_SO_BYTES + 1)
        .read_to_end(&mut data)
        .map_err(io)?;
    if data.len() as u64 > MAX_SO_BYTES {
        return err(format!(
            "{p}: grew past {MAX_SO_BYTES} bytes while being read"
        ));
    }
    Ok(data)
}

/// Whether the dynamic linker already has an object loaded under `name`.
fn loaded(name: &CStr) -> bool {
    // SAFETY: RTLD_NOLOAD maps nothing; a handle it returns is released at once.
    unsafe {
        let h = libc::dlopen(name.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY);
        if h.is_null() {
            false
        } else {
            libc::dlclose(h);
            true
        }
    }
}

/// How many names [`free_name`] handed out in this process: where the next search starts.
static NAMES_USED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The k-th spelling of /proc/self/fd/<fd>: k's binary digits as "/." (1) and "//" (0)
/// between the folder and the number, so every k names the same descriptor by a different
/// string (k = 0 is the plain /proc/self/fd/<fd>). The Python loader spells them the same.
pub fn memfd_name(fd: i32, k: usize) -> String {
    let bits: String = if k == 0 {
        String::new()
    } else {
        format!("{k:b}")
            .chars()
            .map(|b| if b == '1' { "/." } else { "//" })
            .collect()
    };
    format!("/proc/self/fd{bits}/{fd}")
}

/// A name for `fd` that no loaded object has. The dynamic linker takes an object whose name
/// matches an earlier one for that one, and a memfd's number is reused once it is closed
/// while the object loaded from it may stay: spelling the path differently each time
/// ([`memfd_name`]) keeps names unique without holding descriptors.
fn free_name(fd: i32) -> std::ffi::CString {
    use std::sync::atomic::Ordering;
    loop {
        let k = NAMES_USED.fetch_add(1, Ordering::Relaxed);
        let name = std::ffi::CString::new(memfd_name(fd, k)).expect("no NUL in a path");
        if !loaded(&name) {
            return name;
        }
    }
}

/// Map exactly `data`: copied into a sealed memfd (no shrink, grow or write; the seals
/// sealed) and dlopen()ed as /proc/self/fd/N under a name no loaded object has.
fn map_bytes(data: &[u8], p: &str) -> Result<Library, SimError> {
    use std::io::Write;
    use std::os::fd::FromRawFd;

    let sys = |what: &str| {
        SimError(format!(
            "{p}: cannot load: {what}: {}",
            std::io::Error::last_os_error()
        ))
    };
    // MFD_EXEC (Linux 6.3): executable where the kernel tells memfds apart
    // (vm.memfd_noexec); older kernels refuse the flag with EINVAL (every memfd executable).
    const MFD_EXEC: libc::c_uint = 0x0010;
    let create = |flags: libc::c_uint| {
        // SAFETY: a NUL-terminated name; the returned descriptor is owned by `file` below.
        unsafe { libc::memfd_create(c"flashml-policy".as_ptr(), flags) }
    };
    let base = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
    let mut fd = create(base | MFD_EXEC);
    if fd < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
        fd = create(base);
    }
    if fd < 0 {
        return Err(sys("memfd_create"));
    }
    // SAFETY: `fd` is a fresh descriptor nothing else owns.
    let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
    file.write_all(data)
        .map_err(|e| SimError(format!("{p}: cannot load: memfd: {e}")))?;
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE | libc::F_SEAL_SEAL;
    // SAFETY: fcntl on a descriptor this function owns.
    if unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, seals) } != 0 {
        return Err(sys("sealing the memfd"));
    }
    let name = free_name(fd);
    let shown = name.to_string_lossy().into_owned();
    // SAFETY: loading a shared object runs its initialisers; these bytes passed the checks
    // the caller asked for (the manifest's size and sha256, or an explicit unverified load).
    let lib = unsafe {
        libloading::os::unix::Library::open(
            Some(name.as_c_str().to_str().expect("ASCII")),
            libc::RTLD_NOW | libc::RTLD_LOCAL,
        )
    }
    .map_err(|e| {
        SimError(format!(
            "{p}: cannot load policy .so: {}",
            e.to_string().replace(&shown, p)
        ))
    })?;
    Ok(lib.into())
}

/// The one way the simulator maps a policy .so: open `path` once (no symlink, no FIFO,
/// a regular file of at most [`MAX_SO_BYTES`]), read its bytes, check their size and
/// sha256 against `expect` (None only for an unverified load) and the ELF checks
/// ([`check_elf_bytes`]), then map exactly those bytes ([`map_bytes`]). Nothing is mapped
/// before it is verified.
pub fn load_verified(path: &Path, expect: Option<&Expected>) -> Result<Library, SimError> {
    use sha2::{Digest, Sha256};

    let p = path.display().to_string();
    let data = read_regular(path)?;
    if let Some(e) = expect {
        if data.len() as u64 != e.size_bytes {
            return err(format!(
                "{p}: {} bytes does not match manifest.json (size_bytes {}); the .so was \
                 changed after compiling",
                data.len(),
                e.size_bytes
            ));
        }
        let digest: String = Sha256::digest(&data)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        if digest != e.sha256 {
            return err(format!(
                "{p}: sha256 {}... does not match manifest.json ({}...); the .so was changed \
                 after compiling",
                &digest[..12],
                e.sha256.chars().take(12).collect::<String>()
            ));
        }
    }
    check_elf_bytes(&data, &p)?;
    map_bytes(&data, &p)
}

/// Refuse a file that is not a whole 64-bit ELF shared object before it is dlopen()ed: a
/// truncated one can kill the process that maps it (SIGBUS), even when a manifest vouches
/// for its sha256. Reads `path` as [`load_verified`] does and runs [`check_elf_bytes`].
pub fn check_elf(path: &Path) -> Result<(), SimError> {
    check_elf_bytes(&read_regular(path)?, &path.display().to_string())
}

/// The ELF checks of flashml's own loader (compiler/loader.py `check_elf_bytes`) on the
/// bytes that will be mapped (`p` names them in errors): the ELF header, a shared object
/// (ET_DYN), the program and section header tables inside the file, and every loadable
/// segment (PT_LOAD) inside the file.
pub fn check_elf_bytes(data: &[u8], p: &str) -> Result<(), SimError> {
    let size = data.len() as u64;
    if data.len() < 64 || !data.starts_with(ELF64_LE) {
        return err(format!(
            "{p}: not a 64-bit ELF shared object; recompile the policy"
        ));
    }
    let head = &data[..64];
    let u16_at = |i: usize| u64::from(u16::from_le_bytes([head[i], head[i + 1]]));
    let u64_at = |b: &[u8], i: usize| {
        let mut x = [0u8; 8];
        x.copy_from_slice(&b[i..i + 8]);
        u64::from_le_bytes(x)
    };
    if u16_at(16) != 3 {
        return err(format!(
            "{p}: an ELF file but not a shared object; recompile the policy"
        ));
    }
    let (phoff, shoff) = (u64_at(head, 32), u64_at(head, 40));
    let (phentsize, phnum, shentsize, shnum) = (u16_at(54), u16_at(56), u16_at(58), u16_at(60));
    // u16 * u16 fits in u64; an offset near 2^64 must not wrap past the size.
    let inside = |off: u64, len: u64| off.checked_add(len).is_some_and(|end| end <= size);
    if phentsize < 56
        || !inside(phoff, phnum * phentsize)
        || (shnum > 0 && !inside(shoff, shnum * shentsize))
    {
        return err(format!(
            "{p}: truncated ELF file ({size} bytes); recompile the policy"
        ));
    }
    let table = &data[phoff as usize..(phoff + phnum * phentsize) as usize];
    for entry in table.chunks_exact(phentsize as usize) {
        let p_type = u32::from_le_bytes([entry[0], entry[1], entry[2], entry[3]]);
        let (offset, filesz) = (u64_at(entry, 8), u64_at(entry, 32));
        if p_type == 1 && !inside(offset, filesz) {
            return err(format!(
                "{p}: truncated ELF file ({size} bytes, a segment ends at {}); recompile the \
                 policy",
                u128::from(offset) + u128::from(filesz)
            ));
        }
    }
    Ok(())
}
