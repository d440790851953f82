//! What every system shares: the configuration and its errors ([`config`]), the feature
//! contract's constants ([`contract`], generated from flashml/features/contract.toml), hashing
//! and the deterministic draws ([`hash`]), the intrusive list ([`list`]), the eviction trait
//! and its heuristics ([`eviction`]), the capacity split across streams ([`shares`]), the
//! verified loader of compiled .so files ([`solib`]), the tree ensembles ([`forest`]) and
//! libCacheSim's object-cache loop ([`objects`]).

pub mod config;
pub mod contract;
pub mod eviction;
pub mod forest;
pub mod hash;
pub mod list;
pub mod objects;
pub mod shares;
pub mod solib;
