//! A compiled eviction policy .so as MAT's predictor (the same artifact the runtime loads).
//!
//! Required export:
//! * `double flashml_evict_predict(const double *features)`: log1p(predicted logical distance
//!   from the candidate's last access to its next access), reading the eviction contract's
//!   44 features (features/eviction.toml).
//!
//! Optional exports (looked up with dlsym; a caller's explicit value wins over them):
//! * `int flashml_evict_num_features(void)`, `const char *flashml_evict_contract_hash(void)`:
//!   checked against this simulator's eviction contract when present (a mismatch is an
//!   error);
//! * one function per knob of Algorithm 1 the policy was tuned with, as
//!   flashml/systems/mat/settings.toml declares them ([`crate::mat::settings`]: each `*_ABI`
//!   name; their C types in flashml_policy.h): k, max candidates, delta, the initial
//!   threshold, the memory window its features were computed with, the controller (0 sign,
//!   1 mean: [`crate::mat::Controller`]) and reused predictions
//!   ([`crate::mat::MatParams::reuse_predictions`]); a .so without the controller or the
//!   reuse function gets their `*_LEGACY` values (sign, off).

use std::ffi::{c_char, CStr};
use std::path::Path;

use libloading::Library;

use crate::core::abi;
use crate::core::config::{err, SimError};
use crate::core::solib::Expected;
use crate::mat::lrb_features::{EvictFeatures, EVICT_CONTRACT_HASH, EVICT_NUM_FEATURES};
use crate::mat::settings;
use crate::mat::Predictor;

type PredictFn = unsafe extern "C" fn(*const f64) -> f64;
type F64Fn = unsafe extern "C" fn() -> f64;
type IntFn = unsafe extern "C" fn() -> i32;
type I64Fn = unsafe extern "C" fn() -> i64;
type StrFn = unsafe extern "C" fn() -> *const c_char;

/// A loaded eviction policy whose identity (when it reports one) matches the contract.
pub struct EvictLib {
    predict: PredictFn,
    pub k: Option<f64>,
    pub max_candidates: Option<i32>,
    pub delta: Option<f64>,
    pub initial_threshold: Option<f64>,
    pub controller: Option<i32>,
    pub reuse_predictions: Option<i32>,
    pub memory_window: Option<i64>,
    pub num_features: Option<i32>,
    pub contract_hash: Option<String>,
    // Keeps the library mapped while `predict` is used.
    _lib: Library,
}

fn optional<T: Copy>(lib: &Library, name: &str) -> Option<T> {
    // SAFETY: the symbol's type is the one the module docs declare for `name`.
    unsafe { lib.get::<T>(name.as_bytes()).ok().map(|s| *s) }
}

impl EvictLib {
    /// Load `path` through [`crate::core::solib::load_verified`] (size and sha256 against
    /// `expect`, the ELF checks, the verified bytes mapped from a sealed memfd), find
    /// `flashml_evict_predict`, check the optional identity functions.
    pub fn load(path: &Path, expect: Option<&Expected>) -> Result<Self, SimError> {
        let p = path.display().to_string();
        let lib = crate::core::solib::load_verified(path, expect)?;
        let predict: PredictFn = optional(&lib, abi::EVICT_PREDICT).ok_or_else(|| {
            SimError(format!(
                "{p}: not an eviction policy: it does not export flashml_evict_predict \
                 (double flashml_evict_predict(const double *features))"
            ))
        })?;
        // SAFETY (below): ABI functions without arguments.
        let num_features = optional::<IntFn>(&lib, abi::EVICT_NUM_FEATURES).map(|f| unsafe { f() });
        if let Some(n) = num_features {
            if n != EVICT_NUM_FEATURES as i32 {
                return err(format!(
                    "{p}: the policy reads {n} eviction features, the eviction contract has \
                     {EVICT_NUM_FEATURES} (features/eviction.toml)"
                ));
            }
        }
        let contract_hash = match optional::<StrFn>(&lib, abi::EVICT_CONTRACT_HASH) {
            None => None,
            Some(f) => {
                let raw = unsafe { f() };
                if raw.is_null() {
                    return err(format!("{p}: flashml_evict_contract_hash returned NULL"));
                }
                // SAFETY: a NUL-terminated static string inside the library.
                Some(
                    unsafe { CStr::from_ptr(raw) }
                        .to_string_lossy()
                        .into_owned(),
                )
            }
        };
        if let Some(h) = &contract_hash {
            if h != EVICT_CONTRACT_HASH {
                return err(format!(
                    "{p}: eviction contract mismatch: the policy was compiled for {}..., this \
                     simulator has {}... (features/eviction.toml)",
                    h.chars().take(12).collect::<String>(),
                    &EVICT_CONTRACT_HASH[..12]
                ));
            }
        }
        let f64_of = |name: &str| optional::<F64Fn>(&lib, name).map(|f| unsafe { f() });
        let k = f64_of(settings::K_ABI);
        let delta = f64_of(settings::DELTA_ABI);
        let initial_threshold = f64_of(settings::INITIAL_THRESHOLD_ABI);
        let max_candidates =
            optional::<IntFn>(&lib, settings::MAX_CANDIDATES_ABI).map(|f| unsafe { f() });
        let memory_window =
            optional::<I64Fn>(&lib, settings::MEMORY_WINDOW_ABI).map(|f| unsafe { f() });
        let controller = optional::<IntFn>(&lib, settings::CONTROLLER_ABI).map(|f| unsafe { f() });
        let reuse_predictions =
            optional::<IntFn>(&lib, settings::REUSE_PREDICTIONS_ABI).map(|f| unsafe { f() });
        Ok(EvictLib {
            controller,
            reuse_predictions,
            predict,
            memory_window,
            k,
            max_candidates,
            delta,
            initial_threshold,
            num_features,
            contract_hash,
            _lib: lib,
        })
    }

    /// The .so's raw output: log1p(predicted distance).
    #[inline]
    pub fn predict(&self, f: &EvictFeatures) -> f64 {
        // SAFETY: the .so reads EVICT_NUM_FEATURES doubles (the contract; checked when it
        // reports its count).
        unsafe { (self.predict)(f.as_ptr()) }
    }
}

/// The .so as MAT's [`Predictor`]: distance = expm1(flashml_evict_predict(features)).
pub struct SoPredictor<'a> {
    pub lib: &'a EvictLib,
}

impl Predictor for SoPredictor<'_> {
    const NEEDS_FEATURES: bool = true;
    #[inline]
    fn distance(&mut self, _last: u64, _note: u64, features: &EvictFeatures) -> f64 {
        self.lib.predict(features).exp_m1()
    }
}
