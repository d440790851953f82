//! MAT's victim chooser (`flashml_sim::mat::Mat`) used from outside the crate over another
//! base heuristic: FIFO through the `Reinsert` trait (re-insertion at the head is then FIFO
//! with a second chance, i.e. CLOCK-like). A predictor that always says "far" evicts the
//! first tail candidate, so MAT over FIFO is FIFO; a predictor that says "soon" for one
//! object keeps it, so that object survives where FIFO evicts it.

use flashml_sim::core::config::{CapacityUnit, EvictionKind, ObjectConfig};
use flashml_sim::core::eviction::{Eviction, Fifo};
use flashml_sim::core::objects::simulate_objects;
use flashml_sim::mat::lrb_features::{MetaStore, MEMORY_WINDOW};
use flashml_sim::mat::{FnPredictor, Mat, MatParams, Predictor, Slots};

/// Count-capacity cache with FIFO order and MAT choosing victims: (hits, evictions).
fn mat_over_fifo<P: Predictor>(keys: &[u64], capacity: usize, predictor: P) -> (u64, u64) {
    let objects = *keys.iter().max().unwrap() as usize + 1;
    let mut mat = Mat::new(MatParams::default(), predictor);
    let mut meta = MetaStore::new(objects, MEMORY_WINDOW);
    let mut order = Fifo::new();
    let mut slots = Slots::default();
    let mut slot_of = vec![u32::MAX; objects];
    let mut hits = 0;
    for (t, &k) in keys.iter().enumerate() {
        let now = t as u64;
        meta.access(k as u32, now, 1);
        if slot_of[k as usize] != u32::MAX {
            hits += 1;
            let s = slot_of[k as usize];
            slots.touch(s, now, 0);
            order.touch(s); // FIFO: no reordering
            continue;
        }
        if order.len() == capacity {
            let v = mat.evict(&mut order, now, &mut slots, Some(&meta), &mut None);
            slot_of[slots.obj(v) as usize] = u32::MAX;
            slots.release(v);
        }
        let s = slots.alloc(k as u32, now, 1, 0);
        slot_of[k as usize] = s;
        order.insert(s);
    }
    (hits, mat.stats.evictions)
}

fn trace() -> Vec<u64> {
    let mut x = 7u64;
    (0..4000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 97).min(x / 97 % 97)
        })
        .collect()
}

#[test]
fn far_predictions_make_mat_over_fifo_fifo() {
    let keys = trace();
    let cfg = ObjectConfig {
        eviction: EvictionKind::Fifo,
        capacity: 20,
        unit: CapacityUnit::Objects,
    };
    let fifo = simulate_objects(&keys, &vec![1; keys.len()], &cfg).unwrap();
    let got = mat_over_fifo(&keys, 20, FnPredictor(|_, _| f64::INFINITY));
    assert_eq!(got, (fifo.hits, fifo.evictions));
}

#[test]
fn a_kept_object_survives() {
    // 0 1 2 3 0 with room for 3: FIFO evicts 0 at 3 (0 then misses); MAT told "0 comes back
    // at once" (d = its age: TTA 0 < T) re-inserts it and evicts 1 instead: 0 hits
    let keys = [0, 1, 2, 3, 0];
    let cfg = ObjectConfig {
        eviction: EvictionKind::Fifo,
        capacity: 3,
        unit: CapacityUnit::Objects,
    };
    assert_eq!(simulate_objects(&keys, &[1; 5], &cfg).unwrap().hits, 0);
    let soon_for_0 = FnPredictor(|last, f: &[f64; 44]| {
        if last == 0 {
            f[0] // d = age: TTA = 0
        } else {
            f64::INFINITY
        }
    });
    assert_eq!(mat_over_fifo(&keys, 3, soon_for_0), (1, 1));
}
