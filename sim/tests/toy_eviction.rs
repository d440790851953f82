//! ARCHITECTURE.md's worked example, part 1 (the simulator): a new eviction policy plugged
//! into the object cache from outside the crate, without touching the core loop. The toy is
//! MRU (evict the most recently used object), checked against a slow obvious simulation.

use flashml_sim::core::config::{CapacityUnit, EvictionKind, ObjectConfig};
use flashml_sim::core::eviction::Eviction;
use flashml_sim::core::objects::{simulate_objects, simulate_objects_with};

/// Most recently used: a hit moves the unit to the top of a stack; the victim is the top.
#[derive(Default)]
struct Mru {
    stack: Vec<u32>,
}

impl Eviction for Mru {
    const REORDERS_ON_TOUCH: bool = true;
    fn insert(&mut self, unit: u32) {
        self.stack.push(unit);
    }
    fn touch(&mut self, unit: u32) {
        self.remove(unit);
        self.stack.push(unit);
    }
    fn victim(&self) -> Option<u32> {
        self.stack.last().copied()
    }
    fn remove(&mut self, unit: u32) {
        let i = self
            .stack
            .iter()
            .rposition(|&u| u == unit)
            .expect("cached unit");
        self.stack.remove(i);
    }
    fn len(&self) -> usize {
        self.stack.len()
    }
}

/// The slow obvious MRU over object counts: (hits, evictions).
fn reference_mru(keys: &[u64], capacity: usize) -> (u64, u64) {
    let mut order: Vec<u64> = Vec::new(); // least recent first
    let (mut hits, mut evictions) = (0, 0);
    for &k in keys {
        if let Some(i) = order.iter().position(|&x| x == k) {
            hits += 1;
            order.remove(i);
        } else if order.len() == capacity {
            order.pop(); // the most recently used
            evictions += 1;
        }
        order.push(k);
    }
    (hits, evictions)
}

fn trace(n: usize, keys: u64, seed: u64) -> Vec<u64> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // skewed: low keys far more often
            (x % keys).min((x >> 20) % keys)
        })
        .collect()
}

#[test]
fn toy_mru_matches_the_obvious_simulation() {
    for (seed, cap) in [(1u64, 3u64), (7, 10), (42, 50)] {
        let keys = trace(5_000, 200, seed);
        let sizes = vec![1u64; keys.len()];
        let cfg = ObjectConfig {
            eviction: EvictionKind::Lru, // ignored by simulate_objects_with
            capacity: cap,
            unit: CapacityUnit::Objects,
        };
        let got = simulate_objects_with(Mru::default(), &keys, &sizes, &cfg).unwrap();
        let (hits, evictions) = reference_mru(&keys, cap as usize);
        assert_eq!(
            (got.hits, got.evictions),
            (hits, evictions),
            "seed {seed} cap {cap}"
        );
        // and it is a different policy from the built-in LRU on the same loop
        let lru = simulate_objects(&keys, &sizes, &cfg).unwrap();
        assert_ne!(lru.hits, got.hits);
    }
}

#[test]
fn hand_example() {
    // capacity 2: a b a c b -> a miss, b miss, a hit (a on top), c evicts a, b hit
    let cfg = ObjectConfig {
        eviction: EvictionKind::Lru,
        capacity: 2,
        unit: CapacityUnit::Objects,
    };
    let r = simulate_objects_with(Mru::default(), &[1, 2, 1, 3, 2], &[1; 5], &cfg).unwrap();
    assert_eq!((r.hits, r.evictions), (2, 1));
}
