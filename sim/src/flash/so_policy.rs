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

use crate::core::abi;
use crate::core::config::{
    err, AdmissionKind, FlashConfig, PeakSchedule, PrefetchKind, SimError, WhenKind,
};
use crate::core::contract::{ABI_VERSION, CONTRACT_HASH, NUM_FEATURES};
use crate::core::solib::{load_verified, require_capabilities, symbol, Expected};
use crate::flash::admission::{Admission, MissCtx};
use crate::flash::online_features::{FeatureColumns, OnlineFeatures};
use crate::flash::prefetch::Prefetch;
use crate::flash::{self, FlashResult, Trace};

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
        let abi_fn: IntFn = symbol(&lib, &p, abi::POLICY_ABI_VERSION)?;
        // SAFETY: ABI functions without arguments.
        let abi_version = unsafe { abi_fn() };
        if abi_version != ABI_VERSION {
            return err(format!(
                "{p}: policy ABI version {abi_version}, this simulator speaks ABI {ABI_VERSION}; \
                 recompile the policy (flashml compile)"
            ));
        }
        require_capabilities(&lib, path, &["admission", "prefetch"])?;
        let nf: IntFn = symbol(&lib, &p, abi::POLICY_NUM_FEATURES)?;
        let num_features = unsafe { nf() };
        if num_features != NUM_FEATURES as i32 {
            return err(format!(
                "{p}: policy reads {num_features} features, the feature contract has {NUM_FEATURES}"
            ));
        }
        let hash_fn: StrFn = symbol(&lib, &p, abi::POLICY_CONTRACT_HASH)?;
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
        let admit_threshold = f64_of(abi::ADMIT_THRESHOLD)?;
        let when_threshold = f64_of(abi::PREFETCH_WHEN_THRESHOLD)?;
        let target_write_rate_mbps = f64_of(abi::TARGET_WRITE_RATE_MBPS)?;
        let eviction_age_s = f64_of(abi::EVICTION_AGE_S)?;
        // Optional (policies compiled before the peak schedule have none: a flat threshold).
        let peak = match (
            symbol::<U32Fn>(&lib, &p, abi::ADMIT_PEAK_HOURS),
            symbol::<F64Fn>(&lib, &p, abi::ADMIT_PEAK_BONUS),
        ) {
            (Ok(h), Ok(b)) => PeakSchedule {
                hours: unsafe { h() },
                bonus: unsafe { b() },
            },
            _ => PeakSchedule::default(),
        };
        peak.validate()
            .map_err(|e| SimError(format!("{p}: bad peak schedule: {}", e.0)))?;
        let admit_score: ScoreFn = symbol(&lib, &p, abi::ADMIT_SCORE)?;
        let when_score: ScoreFn = symbol(&lib, &p, abi::PREFETCH_WHEN_SCORE)?;
        let range: RangeFn = symbol(&lib, &p, abi::PREFETCH_RANGE)?;
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

pub(crate) struct SoAdmission<'s, 'a> {
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

pub(crate) struct SoPrefetch<'s, 'a> {
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

/// The checks and thresholds shared by [`simulate`] and `compose::so_policy::simulate_mat`:
/// `cfg` with its admission and prefetch replaced by the .so's (AdmitAll / None, validated as a
/// plain run), and the admission and when thresholds.
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
pub(crate) fn with_so_policy<R>(
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
