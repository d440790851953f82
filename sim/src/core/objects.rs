//! Object-cache mode (libCacheSim's model): every request is one whole object (key, size).
//! A hit refreshes recency (LRU) or does nothing (FIFO) and never changes the recorded size;
//! a miss inserts the object, evicting victims until it fits; an object larger than the whole
//! cache is never inserted. Capacity in bytes or in objects (sizes ignored).

use std::time::Instant;

use crate::core::config::{err, CapacityUnit, EvictionKind, ObjectConfig, SimError};
use crate::core::eviction::{Eviction, Fifo, Lru};
use crate::core::hash::{new_map, FastMap};

#[derive(Debug, Clone, PartialEq)]
pub struct ObjectResult {
    pub requests: u64,
    pub hits: u64,
    pub miss_ratio: f64,
    pub byte_miss_ratio: f64,
    pub evictions: u64,
    pub wall_s: f64,
}

struct ObjectCache<E: Eviction> {
    evict: E,
    map: FastMap<u64, u32>,
    slot_key: Vec<u64>,
    slot_size: Vec<u64>,
    free: Vec<u32>,
    used: u64,
    capacity: u64,
    evictions: u64,
}

impl<E: Eviction> ObjectCache<E> {
    fn evict_one(&mut self) {
        let victim = self
            .evict
            .victim()
            .expect("used > 0 implies a cached object");
        self.evict.remove(victim);
        let v = victim as usize;
        self.map.remove(&self.slot_key[v]);
        self.used -= self.slot_size[v];
        self.free.push(victim);
        self.evictions += 1;
    }

    fn run(&mut self, keys: &[u64], sizes: &[u64], unit: CapacityUnit) -> (u64, u64, u64) {
        let (mut hits, mut miss_bytes, mut req_bytes) = (0u64, 0u64, 0u64);
        for (&key, &raw_size) in keys.iter().zip(sizes) {
            req_bytes += raw_size;
            if let Some(&slot) = self.map.get(&key) {
                hits += 1;
                if E::REORDERS_ON_TOUCH {
                    self.evict.touch(slot);
                }
                continue;
            }
            miss_bytes += raw_size;
            let size = unit.charge(raw_size);
            if size > self.capacity {
                continue;
            }
            while self.used + size > self.capacity {
                self.evict_one();
            }
            let slot = match self.free.pop() {
                Some(s) => {
                    self.slot_key[s as usize] = key;
                    self.slot_size[s as usize] = size;
                    s
                }
                None => {
                    self.slot_key.push(key);
                    self.slot_size.push(size);
                    (self.slot_key.len() - 1) as u32
                }
            };
            self.map.insert(key, slot);
            self.evict.insert(slot);
            self.used += size;
        }
        (hits, miss_bytes, req_bytes)
    }
}

fn run_with<E: Eviction>(
    evict: E,
    keys: &[u64],
    sizes: &[u64],
    cfg: &ObjectConfig,
) -> ObjectResult {
    let start = Instant::now();
    let mut c = ObjectCache {
        evict,
        map: new_map(),
        slot_key: Vec::new(),
        slot_size: Vec::new(),
        free: Vec::new(),
        used: 0,
        capacity: cfg.capacity,
        evictions: 0,
    };
    let (hits, miss_bytes, req_bytes) = c.run(keys, sizes, cfg.unit);
    let n = keys.len() as u64;
    ObjectResult {
        requests: n,
        hits,
        miss_ratio: super::ratio(n - hits, n),
        byte_miss_ratio: super::ratio(miss_bytes, req_bytes),
        evictions: c.evictions,
        wall_s: start.elapsed().as_secs_f64(),
    }
}

/// Object-cache mode with the built-in eviction policy `cfg.eviction`.
pub fn simulate_objects(
    keys: &[u64],
    sizes: &[u64],
    cfg: &ObjectConfig,
) -> Result<ObjectResult, SimError> {
    Ok(match cfg.eviction {
        EvictionKind::Lru => simulate_objects_with(Lru::new(), keys, sizes, cfg)?,
        EvictionKind::Fifo => simulate_objects_with(Fifo::new(), keys, sizes, cfg)?,
    })
}

/// Object-cache mode with any [`Eviction`] policy (`cfg.eviction` is ignored): how a new
/// policy runs on the same loop before it has a name (ARCHITECTURE.md; `sim/tests/
/// toy_eviction.rs` plugs a policy in from outside the crate).
pub fn simulate_objects_with<E: Eviction>(
    evict: E,
    keys: &[u64],
    sizes: &[u64],
    cfg: &ObjectConfig,
) -> Result<ObjectResult, SimError> {
    check_trace(keys, sizes, cfg)?;
    Ok(run_with(evict, keys, sizes, cfg))
}

/// The checks every object-mode simulation makes of its input (the config, equal lengths,
/// at least one request).
pub(crate) fn check_trace(keys: &[u64], sizes: &[u64], cfg: &ObjectConfig) -> Result<(), SimError> {
    cfg.validate()?;
    if keys.len() != sizes.len() {
        return err(format!(
            "'key' has {} elements but 'size' has {}",
            keys.len(),
            sizes.len()
        ));
    }
    if keys.is_empty() {
        return err("the trace has no requests");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(e: EvictionKind, capacity: u64, unit: CapacityUnit) -> ObjectConfig {
        ObjectConfig {
            eviction: e,
            capacity,
            unit,
        }
    }

    #[test]
    fn lru_and_fifo_by_hand() {
        // capacity 2 objects: a b a c b
        let keys = [1, 2, 1, 3, 2];
        let sizes = [10; 5];
        let lru = simulate_objects(
            &keys,
            &sizes,
            &cfg(EvictionKind::Lru, 2, CapacityUnit::Objects),
        )
        .unwrap();
        // a miss, b miss, a hit, c miss evicts b, b miss
        assert_eq!(lru.hits, 1);
        let fifo = simulate_objects(
            &keys,
            &sizes,
            &cfg(EvictionKind::Fifo, 2, CapacityUnit::Objects),
        )
        .unwrap();
        // a, b, a hit, c evicts a, b hit
        assert_eq!(fifo.hits, 2);
        assert_eq!(fifo.miss_ratio, 3.0 / 5.0);
    }

    #[test]
    fn bytes_and_oversized() {
        let keys = [1, 2, 1, 2, 3, 3];
        let sizes = [60, 40, 60, 40, 200, 200];
        let r = simulate_objects(
            &keys,
            &sizes,
            &cfg(EvictionKind::Lru, 100, CapacityUnit::Bytes),
        )
        .unwrap();
        assert_eq!(r.hits, 2); // object 3 never fits
                               // a hit never changes the recorded size
        let keys = [1, 1, 2];
        let sizes = [50, 90, 50];
        let r = simulate_objects(
            &keys,
            &sizes,
            &cfg(EvictionKind::Lru, 100, CapacityUnit::Bytes),
        )
        .unwrap();
        assert_eq!(r.evictions, 0);
    }

    #[test]
    fn errors() {
        assert!(
            simulate_objects(&[1], &[1], &cfg(EvictionKind::Lru, 0, CapacityUnit::Bytes)).is_err()
        );
        assert!(simulate_objects(
            &[1, 2],
            &[1],
            &cfg(EvictionKind::Lru, 5, CapacityUnit::Bytes)
        )
        .is_err());
        assert!(
            simulate_objects(&[], &[], &cfg(EvictionKind::Lru, 5, CapacityUnit::Bytes)).is_err()
        );
    }
}
