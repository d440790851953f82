//! Fixtures shared by MAT's tests.

use crate::core::config::{CapacityUnit, EvictionKind, ObjectConfig};

pub(super) fn cfg(capacity: u64, unit: CapacityUnit) -> ObjectConfig {
    ObjectConfig {
        eviction: EvictionKind::Lru,
        capacity,
        unit,
    }
}

pub(super) fn trace(n: usize, keys: u64, seed: u64) -> (Vec<u64>, Vec<u64>) {
    let mut x = seed;
    let mut step = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let k: Vec<u64> = (0..n)
        .map(|_| {
            let a = step() % keys;
            let b = step() % keys;
            a.min(b) // skewed
        })
        .collect();
    let s = k.iter().map(|&k| 1 + k % 7 * 100).collect();
    (k, s)
}
