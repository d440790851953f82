//! Belady's MIN in object mode, on MAT's dense ids.

use std::collections::BinaryHeap;
use std::time::Instant;

use crate::core::config::{ObjectConfig, SimError};
use crate::core::objects::check_trace;
use crate::core::ratio;
use crate::mat::{DenseTrace, NO_NEXT};

/// Belady's MIN in object mode: evict the cached object whose next request is farthest (never
/// = farthest; ties among never-again objects: the larger dense id, i.e. the later first
/// appearance). Every miss is inserted (demand fetching), as in libCacheSim's Belady; with
/// byte capacity this is the classic rule, not the size-aware optimum.
pub fn simulate_belady(
    keys: &[u64],
    sizes: &[u64],
    cfg: &ObjectConfig,
) -> Result<crate::core::objects::ObjectResult, SimError> {
    check_trace(keys, sizes, cfg)?;
    let start = Instant::now();
    let trace = DenseTrace::new(keys)?;
    let next = trace.next();
    let n = keys.len();
    // (next request, id); stale entries (the object was requested or evicted since) skipped
    let mut heap: BinaryHeap<(u32, u32)> = BinaryHeap::new();
    let mut cur_next = vec![NO_NEXT; trace.objects];
    let mut cached = vec![false; trace.objects];
    let mut cached_size = vec![0u64; trace.objects];
    let mut cached_count = 0usize;
    let (mut used, capacity) = (0u64, cfg.capacity);
    let (mut hits, mut miss_bytes, mut req_bytes, mut evictions) = (0u64, 0u64, 0u64, 0u64);
    for (t, (&id, &raw_size)) in trace.ids.iter().zip(sizes).enumerate() {
        let o = id as usize;
        req_bytes += raw_size;
        cur_next[o] = next[t];
        if cached[o] {
            hits += 1;
            heap.push((next[t], id));
            continue;
        }
        miss_bytes += raw_size;
        let size = cfg.unit.charge(raw_size);
        if size > capacity {
            continue;
        }
        while used + size > capacity {
            let (nx, v) = heap.pop().expect("used > 0 implies a cached object");
            if !cached[v as usize] || cur_next[v as usize] != nx {
                continue;
            }
            cached[v as usize] = false;
            used -= cached_size[v as usize];
            cached_count -= 1;
            evictions += 1;
        }
        cached[o] = true;
        cached_size[o] = size;
        cached_count += 1;
        used += size;
        heap.push((next[t], id));
        if heap.len() > 4 * cached_count + 1024 {
            heap.retain(|&(nx, v)| cached[v as usize] && cur_next[v as usize] == nx);
        }
    }
    Ok(crate::core::objects::ObjectResult {
        requests: n as u64,
        hits,
        miss_ratio: (n as u64 - hits) as f64 / n as f64,
        byte_miss_ratio: ratio(miss_bytes, req_bytes),
        evictions,
        wall_s: start.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::config::CapacityUnit;
    use crate::core::objects::simulate_objects;
    use crate::mat::testing::{cfg, trace};

    #[test]
    fn belady_by_hand() {
        let c = cfg(2, CapacityUnit::Objects);
        // a b c a b c: at c evict b (next 4, farther than a's 3); a hits; b evicts a (never
        // again, c's next is 5); c hits
        let r = simulate_belady(&[1, 2, 3, 1, 2, 3], &[1; 6], &c).unwrap();
        assert_eq!((r.hits, r.evictions), (2, 2));
        let lru = simulate_objects(&[1, 2, 3, 1, 2, 3], &[1; 6], &c).unwrap();
        assert_eq!(lru.hits, 0);
        // bytes: 60 + 50 > 100, at c (60) evict the farther
        let r = simulate_belady(
            &[1, 2, 1, 3, 1, 2],
            &[40, 50, 40, 60, 40, 50],
            &cfg(100, CapacityUnit::Bytes),
        )
        .unwrap();
        // t3: cached a(40, next 4) b(50, next 5); need 60: evict b (farthest) -> 40 + 60
        // t4: a hit; t5: b miss, evict farthest of a (never) and c (never): larger id c
        assert_eq!((r.hits, r.evictions), (2, 2));
        // oversized objects are never inserted
        let r = simulate_belady(&[1, 1], &[200, 200], &cfg(100, CapacityUnit::Bytes)).unwrap();
        assert_eq!((r.hits, r.evictions), (0, 0));
    }

    /// Belady never misses more than any other policy, and agrees with a slow MIN.
    #[test]
    fn belady_against_slow_min() {
        let (k, s) = trace(4_000, 200, 9);
        for cap in [1u64, 5, 30, 120] {
            let c = cfg(cap, CapacityUnit::Objects);
            let r = simulate_belady(&k, &s, &c).unwrap();
            let lru = simulate_objects(&k, &s, &c).unwrap();
            assert!(r.hits >= lru.hits);
            let mut cache: Vec<u64> = Vec::new();
            let mut hits = 0;
            for (i, &key) in k.iter().enumerate() {
                if cache.contains(&key) {
                    hits += 1;
                    continue;
                }
                if cache.len() as u64 == cap {
                    let nx = |x: u64| (i + 1..k.len()).find(|&j| k[j] == x).unwrap_or(usize::MAX);
                    let p = (0..cache.len()).max_by_key(|&p| nx(cache[p])).unwrap();
                    cache.remove(p);
                }
                cache.push(key);
            }
            assert_eq!(r.hits, hits, "capacity {cap}");
        }
    }
}
