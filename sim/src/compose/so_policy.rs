//! The compiled policy .so (compiler/, ABI of compiler/flashml_policy.h) as the simulator's
//! admission + prefetch policy: the artifact production caches load is the one simulated.
//!
//! On each GET miss the policy computes the access's features online
//! ([`crate::flash::online_features`]), then, exactly like the precomputed-score path (Threshold
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
//! capabilities its bundle has ([`crate::core::contract::CAPABILITIES`]). This path uses
//! admission and prefetch; a .so without them (e.g. MAT's eviction-only bundle) is refused
//! with an error naming the bundle and the missing capability ([`require_capabilities`]).

use std::cell::RefCell;
use std::ffi::{c_char, CStr};
use std::path::Path;

use libloading::Library;

use crate::compose::flash_mat::{self, MatFlashResult};
use crate::core::config::{
    err, AdmissionKind, FlashConfig, PeakSchedule, PrefetchKind, SimError, WhenKind,
};
use crate::core::contract::{ABI_VERSION, CONTRACT_HASH, NUM_FEATURES};
use crate::core::solib::{load_verified, require_capabilities, symbol, Expected};
use crate::flash::admission::{Admission, MissCtx};
use crate::flash::online_features::{FeatureColumns, OnlineFeatures};
use crate::flash::prefetch::Prefetch;
use crate::flash::{self, FlashResult, Trace};
use crate::mat::{DenseTrace, MatParams, Predictor};

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

impl PolicyLib {
    /// Load `path` through [`load_verified`] (its size and sha256 checked against `expect`,
    /// the ELF checks, the verified bytes mapped from a sealed memfd) and check it against
    /// this simulator's contract: ABI version, the admission and prefetch capabilities,
    /// feature count and contract hash.
    pub fn load(path: &Path, expect: Option<&Expected>) -> Result<Self, SimError> {
        let p = path.display().to_string();
        let lib = load_verified(path, expect)?;
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

/// The checks and thresholds shared by [`simulate`] and [`simulate_mat`]: `cfg` with its
/// admission and prefetch replaced by the .so's (AdmitAll / None, validated as a plain run),
/// and the admission and when thresholds.
fn prepare(
    trace: &Trace,
    cols: &FeatureColumns,
    cfg: &FlashConfig,
    lib: &PolicyLib,
    overrides: Overrides,
) -> Result<(FlashConfig, f64, f64), SimError> {
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
    let mut base = cfg.clone();
    base.admission = AdmissionKind::AdmitAll;
    base.prefetch = PrefetchKind::None;
    base.prefetch_when = WhenKind::Miss;
    Ok((base, admit_threshold, when_threshold))
}

/// The policy .so as admission + prefetch over `trace` (the same features, thresholds and
/// calls on each GET miss), handed to `run` with the config it simulates.
fn with_so_policy<R>(
    trace: &Trace,
    cols: FeatureColumns,
    cfg: &FlashConfig,
    lib: &PolicyLib,
    overrides: Overrides,
    get_ops: &[u8],
    run: impl FnOnce(&FlashConfig, &mut SoAdmission, &mut SoPrefetch) -> R,
) -> Result<R, SimError> {
    let (base, admit_threshold, when_threshold) = prepare(trace, &cols, cfg, lib, overrides)?;
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
    Ok(run(&base, &mut adm, &mut pf))
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
    with_so_policy(
        trace,
        cols,
        cfg,
        lib,
        overrides,
        get_ops,
        |base, adm, pf| flash::simulate_with(trace, base, adm, pf),
    )?
}

/// Baleen + MAT: the policy .so as admission + prefetch (as [`simulate`]: the same features,
/// thresholds and calls on each GET miss) and MAT as the eviction
/// ([`flash_mat::simulate_mat_flash_with`], its predictor and parameters). `cfg` must have
/// LRU eviction with block-level recency; its admission/prefetch settings are ignored.
#[allow(clippy::too_many_arguments)]
pub fn simulate_mat<P: Predictor>(
    trace: &Trace,
    cols: FeatureColumns,
    cfg: &FlashConfig,
    lib: &PolicyLib,
    overrides: Overrides,
    get_ops: &[u8],
    params: MatParams,
    predictor: P,
    dense: &DenseTrace,
) -> Result<MatFlashResult, SimError> {
    with_so_policy(
        trace,
        cols,
        cfg,
        lib,
        overrides,
        get_ops,
        |base, adm, pf| {
            flash_mat::simulate_mat_flash_with(trace, base, adm, pf, params, predictor, dense)
        },
    )?
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::solib::*;
    use crate::mat::so_evict::EvictLib;
    use std::path::PathBuf;
    use std::process::Command;

    /// Every spelling of one descriptor is a different string that names the same file.
    #[test]
    fn memfd_names_differ_and_name_the_descriptor() {
        let names: Vec<String> = (0..300).map(|k| memfd_name(7, k)).collect();
        assert_eq!(names[0], "/proc/self/fd/7");
        assert_eq!(names[1], "/proc/self/fd/./7");
        assert_eq!(names[2], "/proc/self/fd/.///7");
        let unique: std::collections::HashSet<&String> = names.iter().collect();
        assert_eq!(unique.len(), names.len());
        let f = std::fs::File::open("/proc/self/exe").unwrap();
        use std::os::fd::AsRawFd;
        let fd = f.as_raw_fd();
        let want = std::fs::metadata(memfd_name(fd, 0)).unwrap();
        for k in [1, 2, 5, 255, 100_000] {
            let got = std::fs::metadata(memfd_name(fd, k)).unwrap();
            use std::os::unix::fs::MetadataExt;
            assert_eq!((got.dev(), got.ino()), (want.dev(), want.ino()), "k = {k}");
        }
    }

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
        let lib = EvictLib::load(&so, None).unwrap();
        assert_eq!(
            lib.predict(&[0.0; crate::mat::lrb_features::EVICT_NUM_FEATURES]),
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
            assert_eq!(PolicyLib::load(&so, None).err().expect(name).0, e, "{name}");
            assert_eq!(EvictLib::load(&so, None).err().expect(name).0, e, "{name}");
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    fn sha256_hex(data: &[u8]) -> String {
        use sha2::{Digest, Sha256};
        Sha256::digest(data)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    #[test]
    fn only_bytes_matching_the_manifest_are_mapped() {
        let (dir, good) = build_so("verify");
        let so = write(&dir, "policy.so", &good);
        let want = Expected {
            sha256: sha256_hex(&good),
            size_bytes: good.len() as u64,
        };
        // the verified bytes load, twice in a row (a fresh memfd name each time)
        for _ in 0..3 {
            let lib = EvictLib::load(&so, Some(&want)).unwrap();
            assert_eq!(
                lib.predict(&[0.0; crate::mat::lrb_features::EVICT_NUM_FEATURES]),
                1.0
            );
        }
        let lying_size = Expected {
            size_bytes: want.size_bytes + 1,
            ..want.clone()
        };
        let e = EvictLib::load(&so, Some(&lying_size)).err().unwrap().0;
        assert!(e.contains("bytes does not match manifest.json"), "{e}");
        let lying_sha = Expected {
            sha256: "0".repeat(64),
            ..want.clone()
        };
        let e = PolicyLib::load(&so, Some(&lying_sha)).err().unwrap().0;
        assert!(
            e.contains("sha256") && e.contains("does not match manifest.json"),
            "{e}"
        );
        // a symlink and a FIFO are refused (the FIFO without blocking)
        let link = dir.join("link.so");
        std::os::unix::fs::symlink(&so, &link).unwrap();
        let e = EvictLib::load(&link, Some(&want)).err().unwrap().0;
        assert!(e.contains("a symbolic link; refused"), "{e}");
        let fifo = dir.join("fifo.so");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = EvictLib::load(&fifo, None).err().unwrap().0;
        assert!(e.contains("a FIFO, not a regular file; refused"), "{e}");
        assert!(Expected::from_parts("x", None, None, false).is_err());
        assert!(Expected::from_parts("x", Some("a".into()), None, true).is_err());
        assert_eq!(Expected::from_parts("x", None, None, true).unwrap(), None);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
