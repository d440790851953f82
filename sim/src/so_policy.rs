//! The compiled policy .so (compiler/, ABI of compiler/flashml_policy.h) as the simulator's
//! admission + prefetch policy: the artifact production caches load is the one simulated.
//!
//! On each GET miss the policy computes the access's features online
//! ([`crate::online_features`]), then, exactly like the precomputed-score path (Threshold
//! admission, range prefetch triggered by the when-score):
//! * admission: admit iff `flashml_admit_score(features) >= admit threshold` at the access's
//!   hour (the .so's peak schedule, `flashml_admit_peak_hours` / `flashml_admit_peak_bonus`,
//!   when it exports one: `PeakSchedule::threshold_at`);
//! * prefetch: if `flashml_prefetch_when_score(features) >= when threshold`, the range
//!   `flashml_prefetch_range(features)`; else none.
//!
//! Thresholds default to the ones baked into the .so and may be overridden.
//!
//! Capabilities (compiler/flashml_policy.h): a policy .so exports the functions of the
//! capabilities its bundle has ([`crate::contract::CAPABILITIES`]). This path uses
//! admission and prefetch; a .so without them (e.g. MAT's eviction-only bundle) is refused
//! with an error naming the bundle and the missing capability ([`require_capabilities`]).

use std::cell::RefCell;
use std::ffi::{c_char, CStr};
use std::path::Path;

use libloading::Library;

use crate::admission::{Admission, MissCtx};
use crate::config::{
    err, AdmissionKind, FlashConfig, PeakSchedule, PrefetchKind, SimError, WhenKind,
};
use crate::contract::{ABI_VERSION, CAPABILITIES, CONTRACT_HASH, NUM_FEATURES, OPTIONAL_FUNCTIONS};
use crate::flash::{self, FlashResult, Trace};
use crate::online_features::{FeatureColumns, OnlineFeatures};
use crate::prefetch::Prefetch;

type IntFn = unsafe extern "C" fn() -> i32;
type StrFn = unsafe extern "C" fn() -> *const c_char;
type F64Fn = unsafe extern "C" fn() -> f64;
type U32Fn = unsafe extern "C" fn() -> u32;
type ScoreFn = unsafe extern "C" fn(*const f64) -> f64;
type RangeFn = unsafe extern "C" fn(*const f64, *mut i32, *mut i32);

/// A loaded policy .so whose ABI version, feature count and contract hash were checked.
pub struct PolicyLib {
    admit_score: ScoreFn,
    when_score: ScoreFn,
    range: RangeFn,
    pub admit_threshold: f64,
    pub when_threshold: f64,
    /// The peak schedule of the admission threshold (empty if the .so has none).
    pub peak: PeakSchedule,
    pub target_write_rate_mbps: f64,
    pub eviction_age_s: f64,
    pub contract_hash: String,
    pub abi_version: i32,
    // Keeps the library mapped while the function pointers above are used.
    _lib: Library,
}

fn symbol<T: Copy>(lib: &Library, path: &str, name: &str) -> Result<T, SimError> {
    // SAFETY: the symbol's type is the one flashml_policy.h declares for `name`.
    unsafe {
        lib.get::<T>(name.as_bytes())
            .map(|s| *s)
            .map_err(|e| SimError(format!("{path}: not a flashml policy: {name}: {e}")))
    }
}

/// Whether `lib` exports `name`.
fn exports(lib: &Library, name: &str) -> bool {
    // SAFETY: only looks the symbol up; it is never called through this type.
    unsafe { lib.get::<unsafe extern "C" fn()>(name.as_bytes()).is_ok() }
}

/// The functions a .so must export to have `capability` (its optional ones aside).
fn required(capability: &str) -> impl Iterator<Item = &'static str> + '_ {
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

/// Refuse a file that is not a whole 64-bit ELF shared object before it is dlopen()ed: a
/// truncated one can kill the process that maps it (SIGBUS), even when a manifest vouches
/// for its sha256. The checks of flashml's own loader (compiler/loader.py `check_elf`): the
/// ELF header, a shared object (ET_DYN), the program and section header tables inside the
/// file, and every loadable segment (PT_LOAD) inside the file.
pub fn check_elf(path: &Path) -> Result<(), SimError> {
    use std::io::{Read, Seek, SeekFrom};

    let p = path.display().to_string();
    let io = |e: std::io::Error| SimError(format!("{p}: cannot read: {e}"));
    let mut f = std::fs::File::open(path).map_err(io)?;
    let size = f.metadata().map_err(io)?.len();
    let mut head = [0u8; 64];
    let mut got = 0;
    while got < head.len() {
        match f.read(&mut head[got..]).map_err(io)? {
            0 => break,
            n => got += n,
        }
    }
    if got < head.len() || !head.starts_with(ELF64_LE) {
        return err(format!(
            "{p}: not a 64-bit ELF shared object; recompile the policy"
        ));
    }
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
    let (phoff, shoff) = (u64_at(&head, 32), u64_at(&head, 40));
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
    let mut table = vec![0u8; (phnum * phentsize) as usize];
    f.seek(SeekFrom::Start(phoff)).map_err(io)?;
    f.read_exact(&mut table).map_err(io)?;
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

impl PolicyLib {
    /// dlopen `path` and check it against this simulator's contract: ABI version, the
    /// admission and prefetch capabilities, feature count and contract hash. A file that is
    /// not a whole ELF shared object is refused before dlopen ([`check_elf`]).
    pub fn load(path: &Path) -> Result<Self, SimError> {
        let p = path.display().to_string();
        if !path.is_file() {
            return err(format!("{p}: no such policy .so"));
        }
        check_elf(path)?;
        // SAFETY: loading a shared object runs its initialisers; policy .so files have none
        // beyond the C runtime's (compiler/policy_wrapper.c.in).
        let lib = unsafe { Library::new(path) }
            .map_err(|e| SimError(format!("{p}: cannot load policy .so: {e}")))?;
        let abi: IntFn = symbol(&lib, &p, "flashml_policy_abi_version")?;
        // SAFETY: ABI functions without arguments.
        let abi_version = unsafe { abi() };
        if abi_version != ABI_VERSION {
            return err(format!(
                "{p}: policy ABI version {abi_version}, this simulator speaks ABI {ABI_VERSION}; \
                 recompile the policy (flashml compile)"
            ));
        }
        require_capabilities(&lib, path, &["admission", "prefetch"])?;
        let nf: IntFn = symbol(&lib, &p, "flashml_policy_num_features")?;
        let num_features = unsafe { nf() };
        if num_features != NUM_FEATURES as i32 {
            return err(format!(
                "{p}: policy reads {num_features} features, the feature contract has {NUM_FEATURES}"
            ));
        }
        let hash_fn: StrFn = symbol(&lib, &p, "flashml_policy_contract_hash")?;
        let raw = unsafe { hash_fn() };
        if raw.is_null() {
            return err(format!("{p}: policy returned no contract hash"));
        }
        // SAFETY: a NUL-terminated static string inside the library.
        let contract_hash = unsafe { CStr::from_ptr(raw) }
            .to_string_lossy()
            .into_owned();
        if contract_hash != CONTRACT_HASH {
            return err(format!(
                "{p}: contract mismatch: the policy was compiled for feature contract {}..., \
                 this simulator has {}... (features/contract.toml)",
                &contract_hash.chars().take(12).collect::<String>(),
                &CONTRACT_HASH[..12]
            ));
        }
        let f64_of = |name: &str| -> Result<f64, SimError> {
            let f: F64Fn = symbol(&lib, &p, name)?;
            Ok(unsafe { f() })
        };
        let admit_threshold = f64_of("flashml_admit_threshold")?;
        let when_threshold = f64_of("flashml_prefetch_when_threshold")?;
        let target_write_rate_mbps = f64_of("flashml_target_write_rate_mbps")?;
        let eviction_age_s = f64_of("flashml_eviction_age_s")?;
        // Optional (policies compiled before the peak schedule have none: a flat threshold).
        let peak = match (
            symbol::<U32Fn>(&lib, &p, "flashml_admit_peak_hours"),
            symbol::<F64Fn>(&lib, &p, "flashml_admit_peak_bonus"),
        ) {
            (Ok(h), Ok(b)) => PeakSchedule {
                hours: unsafe { h() },
                bonus: unsafe { b() },
            },
            _ => PeakSchedule::default(),
        };
        peak.validate()
            .map_err(|e| SimError(format!("{p}: bad peak schedule: {}", e.0)))?;
        let admit_score: ScoreFn = symbol(&lib, &p, "flashml_admit_score")?;
        let when_score: ScoreFn = symbol(&lib, &p, "flashml_prefetch_when_score")?;
        let range: RangeFn = symbol(&lib, &p, "flashml_prefetch_range")?;
        Ok(PolicyLib {
            admit_score,
            when_score,
            range,
            admit_threshold,
            when_threshold,
            peak,
            target_write_rate_mbps,
            eviction_age_s,
            contract_hash,
            abi_version,
            _lib: lib,
        })
    }

    #[inline]
    pub fn admit_score(&self, f: &[f64; NUM_FEATURES]) -> f64 {
        // SAFETY: the .so reads NUM_FEATURES doubles (checked at load).
        unsafe { (self.admit_score)(f.as_ptr()) }
    }

    #[inline]
    pub fn when_score(&self, f: &[f64; NUM_FEATURES]) -> f64 {
        unsafe { (self.when_score)(f.as_ptr()) }
    }

    #[inline]
    pub fn prefetch_range(&self, f: &[f64; NUM_FEATURES]) -> (i32, i32) {
        let (mut a, mut b) = (0i32, 0i32);
        unsafe { (self.range)(f.as_ptr(), &mut a, &mut b) };
        (a, b)
    }
}

/// Thresholds for a run: the .so's own unless overridden.
#[derive(Debug, Clone, Copy, Default)]
pub struct Overrides {
    pub admit_threshold: Option<f64>,
    pub when_threshold: Option<f64>,
}

/// Shared by the admission and prefetch halves: features of the current miss, computed once.
struct State<'a> {
    online: OnlineFeatures<'a>,
    row: [f64; NUM_FEATURES],
    row_index: Option<usize>,
    /// Number of .so calls (for the report).
    calls: u64,
}

impl State<'_> {
    #[inline]
    fn row(&mut self, i: usize) -> &[f64; NUM_FEATURES] {
        if self.row_index != Some(i) {
            self.online.features(i, &mut self.row);
            self.row_index = Some(i);
        }
        &self.row
    }
}

struct SoAdmission<'s, 'a> {
    lib: &'s PolicyLib,
    state: &'s RefCell<State<'a>>,
    threshold: f64,
}

impl Admission for SoAdmission<'_, '_> {
    fn admit(&mut self, miss: &MissCtx) -> bool {
        let mut st = self.state.borrow_mut();
        st.calls += 1;
        let row = *st.row(miss.index);
        self.lib.admit_score(&row) >= self.lib.peak.threshold_at(self.threshold, miss.time)
    }
}

struct SoPrefetch<'s, 'a> {
    lib: &'s PolicyLib,
    state: &'s RefCell<State<'a>>,
    threshold: f64,
}

impl Prefetch for SoPrefetch<'_, '_> {
    fn range(&mut self, miss: &MissCtx) -> Option<(i64, i64)> {
        let mut st = self.state.borrow_mut();
        st.calls += 1;
        let row = *st.row(miss.index);
        if self.lib.when_score(&row) >= self.threshold {
            let (a, b) = self.lib.prefetch_range(&row);
            Some((a as i64, b as i64))
        } else {
            None
        }
    }
}

/// Simulate `cfg` (cache, eviction, disk model) with the policy .so as admission + prefetch.
/// `cfg`'s own admission/prefetch settings are ignored.
pub fn simulate(
    trace: &Trace,
    cols: FeatureColumns,
    cfg: &FlashConfig,
    lib: &PolicyLib,
    overrides: Overrides,
    get_ops: &[u8],
) -> Result<FlashResult, SimError> {
    let n = trace.time.len();
    for (name, len) in [
        ("namespace", cols.namespace.len()),
        ("user", cols.user.len()),
    ] {
        if len != n {
            return err(format!("column '{name}' has {len} rows but 'time' has {n}"));
        }
    }
    let admit_threshold = overrides.admit_threshold.unwrap_or(lib.admit_threshold);
    let when_threshold = overrides.when_threshold.unwrap_or(lib.when_threshold);
    for (name, v) in [
        ("admission threshold", admit_threshold),
        ("when threshold", when_threshold),
    ] {
        if !v.is_finite() {
            return err(format!("{name} must be finite, got {v}"));
        }
    }
    // The cache and disk model of `cfg`, policies supplied here (validated as a plain run).
    let mut base = cfg.clone();
    base.admission = AdmissionKind::AdmitAll;
    base.prefetch = PrefetchKind::None;
    base.prefetch_when = WhenKind::Miss;
    let state = RefCell::new(State {
        online: OnlineFeatures::new(*trace, cols, cfg.segment_bytes, get_ops),
        row: [0.0; NUM_FEATURES],
        row_index: None,
        calls: 0,
    });
    let mut adm = SoAdmission {
        lib,
        state: &state,
        threshold: admit_threshold,
    };
    let mut pf = SoPrefetch {
        lib,
        state: &state,
        threshold: when_threshold,
    };
    flash::simulate_with(trace, &base, &mut adm, &mut pf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::so_evict::EvictLib;
    use std::path::PathBuf;
    use std::process::Command;

    /// A real shared object (an eviction policy with a 1 MiB table, so it has several
    /// loadable segments) built with `cc` into a fresh folder.
    fn build_so(tag: &str) -> (PathBuf, Vec<u8>) {
        let dir = std::env::temp_dir().join(format!("flashml-elf-{}-{tag}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("p.c");
        std::fs::write(
            &src,
            "static double table[131072] = {1.0};\n\
             double flashml_evict_predict(const double *f) { return table[(int)f[0] & 1]; }\n",
        )
        .unwrap();
        let so = dir.join("good.so");
        let st = Command::new("cc")
            .args(["-shared", "-fPIC", "-o"])
            .arg(&so)
            .arg(&src)
            .status()
            .expect("cc (needed to build a test .so)");
        assert!(st.success());
        let bytes = std::fs::read(&so).unwrap();
        (dir, bytes)
    }

    fn write(dir: &Path, name: &str, data: &[u8]) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, data).unwrap();
        p
    }

    #[test]
    fn a_whole_so_passes_the_elf_check_and_loads() {
        let (dir, good) = build_so("good");
        let so = write(&dir, "whole.so", &good);
        check_elf(&so).unwrap();
        let lib = EvictLib::load(&so).unwrap();
        assert_eq!(
            lib.predict(&[0.0; crate::lrb_features::EVICT_NUM_FEATURES]),
            1.0
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn truncated_or_foreign_so_is_refused_before_dlopen() {
        let (dir, good) = build_so("bad");
        let mut huge_phoff = good.clone();
        huge_phoff[32..40].copy_from_slice(&(u64::MAX - 8).to_le_bytes());
        let mut exec = good.clone();
        exec[16] = 2; // ET_EXEC
        let mut big_segment = good.clone(); // the first PT_LOAD's p_filesz past the file
        let phoff = u64::from_le_bytes(good[32..40].try_into().unwrap()) as usize;
        let phentsize = u16::from_le_bytes([good[54], good[55]]) as usize;
        let load = (0..u16::from_le_bytes([good[56], good[57]]) as usize)
            .map(|i| phoff + i * phentsize)
            .find(|&o| u32::from_le_bytes(good[o..o + 4].try_into().unwrap()) == 1)
            .unwrap();
        big_segment[load + 32..load + 40].copy_from_slice(&(u64::MAX - 1).to_le_bytes());
        let mut elf32 = good.clone();
        elf32[4] = 1; // ELFCLASS32
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            ("empty", vec![], "not a 64-bit ELF shared object"),
            (
                "63-bytes",
                good[..63].to_vec(),
                "not a 64-bit ELF shared object",
            ),
            (
                "64-bytes",
                good[..64].to_vec(),
                "truncated ELF file (64 bytes)",
            ),
            (
                "half",
                good[..good.len() / 2].to_vec(),
                "truncated ELF file",
            ),
            (
                "last-byte",
                good[..good.len() - 1].to_vec(),
                "truncated ELF file",
            ),
            (
                "text",
                b"#!/bin/sh\necho hello\n".to_vec(),
                "not a 64-bit ELF",
            ),
            (
                "elf-junk",
                [b"\x7fELF".as_slice(), &[0u8; 200]].concat(),
                "not a 64-bit ELF",
            ),
            ("elf32", elf32, "not a 64-bit ELF shared object"),
            ("exec", exec, "an ELF file but not a shared object"),
            ("huge-phoff", huge_phoff, "truncated ELF file"),
            ("segment-past-end", big_segment, "a segment ends at"),
        ];
        for (name, data, want) in cases {
            let so = write(&dir, &format!("{name}.so"), &data);
            let shown = so.display().to_string();
            let e = check_elf(&so).expect_err(name).0;
            assert!(
                e.starts_with(&format!("{shown}: ")) && e.contains(want),
                "{name}: {e}"
            );
            // both loaders refuse it with the same message (before dlopen: no SIGBUS)
            assert_eq!(PolicyLib::load(&so).err().expect(name).0, e, "{name}");
            assert_eq!(EvictLib::load(&so).err().expect(name).0, e, "{name}");
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
