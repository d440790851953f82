//! What every system shares: the configuration and its errors ([`config`]), the feature
//! contract's constants ([`contract`], generated from flashml/features/contract.toml), the
//! policy ABI's function names ([`abi`], generated from flashml/features/abi.toml), hashing
//! and the deterministic draws ([`hash`]), the intrusive list ([`list`]), the eviction trait
//! and its heuristics ([`eviction`]), the capacity split across streams ([`shares`]), the
//! verified loader of compiled .so files ([`solib`]), the tree ensembles ([`forest`]) and the
//! distinct rows they score ([`rows`]), libCacheSim's object-cache loop ([`objects`]), and the
//! ratio of two counts ([`ratio`]).

pub mod abi;
pub mod config;
pub mod contract;
pub mod eviction;
pub mod forest;
pub mod hash;
pub mod list;
pub mod objects;
pub mod rows;
pub mod shares;
pub mod solib;

/// `a / b` of two counts: a hit or miss ratio, a per-eviction mean. NaN when `b` is 0 (no
/// requests: the ratio is undefined, and reports show it as missing).
pub fn ratio(a: u64, b: u64) -> f64 {
    ratio_or(a, b, f64::NAN)
}

/// `a / b` of two counts, `empty` when `b` is 0.
pub fn ratio_or(a: u64, b: u64, empty: f64) -> f64 {
    if b == 0 {
        empty
    } else {
        a as f64 / b as f64
    }
}
