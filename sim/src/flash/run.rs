//! The per-access loop of [`FlashSim`] (the module docs' semantics): PUTs charged to the
//! backend, GET lookups and their recency refresh, misses asked to the admission and
//! prefetch policies, the backend IOs in disk-head time, and the metrics at the end.

use crate::core::eviction::Eviction;
use crate::core::ratio;
use crate::flash::admission::{Admission, MissCtx};
use crate::flash::cache::{for_cached_in, FlashSim};
use crate::flash::input::{StreamPartition, Trace};
use crate::flash::metrics::{window_stats, FlashMetrics, FlashResult, Info, Series};
use crate::flash::orders::Orders;
use crate::flash::prefetch::Prefetch;

/// A run's fixed quantities: the disk model, the windows, and which ops are PUTs.
struct Setup {
    seg_bytes: u64,
    seg_time: f64,
    t_seek: f64,
    t0: f64,
    span: f64,
    n_windows: usize,
    per_segment: bool,
    is_put: [bool; 256],
}

/// A run's counts and disk-head time (per window and whole trace).
#[derive(Default)]
struct Totals {
    win_dt: Vec<f64>,
    win_put_dt: Vec<f64>,
    get_dt: f64,
    get_dt_nocache: f64,
    gets: u64,
    puts: u64,
    hits: u64,
    get_bytes: u64,
    hit_bytes: u64,
    get_segs: u64,
    hit_segs: u64,
    backend_ios: u64,
    backend_bytes: u64,
}

/// One access: its index, time, block and size, the segments `s0..=s1` it covers (`nseg`)
/// and its window `k`.
struct Access {
    i: usize,
    t: f64,
    key: u64,
    size: u64,
    s0: u32,
    s1: u32,
    nseg: u32,
    k: usize,
}

/// A GET's lookup: its block's slot if cached, the requested segments cached, the first and
/// last missing ones, and whether the block's refresh waits for the insertions.
struct Lookup {
    slot: Option<u32>,
    cached: u32,
    m0: u32,
    m1: u32,
    deferred: bool,
}

impl<E: Eviction, L: Orders<E>> FlashSim<'_, E, L> {
    /// Simulate the (validated) trace; `part` is the partition when `L::PARTITIONED`.
    pub(crate) fn run(
        &mut self,
        trace: &Trace,
        admission: &mut dyn Admission,
        prefetch: &mut dyn Prefetch,
        part: Option<&StreamPartition>,
    ) -> FlashResult {
        let cfg = self.cfg;
        let n = trace.time.len();
        let seg_bytes = cfg.segment_bytes;
        let seg_time = cfg.segment_time();
        let t_seek = cfg.t_seek_s;
        let t0 = trace.time[0];
        let span = trace.time[n - 1] - t0;
        let n_windows = (span / cfg.window_s).floor() as usize + 1;
        let mut tot = Totals {
            win_dt: vec![0.0f64; n_windows],
            win_put_dt: vec![0.0f64; n_windows],
            ..Default::default()
        };
        let per_segment = admission.per_segment();
        self.win_admitted = vec![0u64; n_windows];
        let mut is_put = [false; 256];
        for &p in &cfg.put_ops {
            is_put[p as usize] = true;
        }
        let setup = Setup {
            seg_bytes,
            seg_time,
            t_seek,
            t0,
            span,
            n_windows,
            per_segment,
            is_put,
        };

        let (stream_of, bounds, shares): (&[u32], &[u64], &[f64]) = match part {
            Some(p) if L::PARTITIONED => (p.stream, p.bounds, p.shares),
            _ => (&[], &[], &[]),
        };
        let n_streams = self.quota.len();
        // The next interval to start.
        let mut next_iv = 0usize;

        for i in 0..n {
            let t = trace.time[i];
            if L::PARTITIONED {
                while next_iv < bounds.len() && bounds[next_iv] == i as u64 {
                    let row = &shares[next_iv * n_streams..(next_iv + 1) * n_streams];
                    self.set_quotas(row, t);
                    next_iv += 1;
                }
            }
            let key = trace.key[i];
            let off = trace.offset[i];
            let size = trace.size[i];
            let s0 = (off / seg_bytes) as u32;
            let s1 = ((off + size - 1) / seg_bytes) as u32;
            let nseg = s1 - s0 + 1;
            // (the cast truncates and saturates: floor for every double, negatives to 0)
            let k = (((t - t0) / cfg.window_s) as usize).min(n_windows - 1);
            if setup.is_put[trace.op[i] as usize] {
                tot.puts += 1;
                tot.backend_ios += 1;
                tot.backend_bytes += nseg as u64 * seg_bytes;
                tot.win_put_dt[k] += t_seek + nseg as f64 * seg_time;
                continue;
            }
            let a = Access {
                i,
                t,
                key,
                size,
                s0,
                s1,
                nseg,
                k,
            };
            self.get(&a, stream_of, &setup, &mut tot, admission, prefetch);
        }

        self.result(n, &setup, tot)
    }

    /// A GET: the lookup and its recency refresh; a hit ends there, a miss goes on to
    /// [`Self::miss`].
    #[inline]
    fn get(
        &mut self,
        a: &Access,
        stream_of: &[u32],
        setup: &Setup,
        tot: &mut Totals,
        admission: &mut dyn Admission,
        prefetch: &mut dyn Prefetch,
    ) {
        let (s0, s1, nseg) = (a.s0, a.s1, a.nseg);
        tot.get_dt_nocache += setup.t_seek + nseg as f64 * setup.seg_time;
        tot.gets += 1;
        tot.get_bytes += a.size;
        tot.get_segs += nseg as u64;
        let slot = self.map.get(&a.key).copied();
        self.orders.on_get(a.i, slot);
        let stream = if L::PARTITIONED {
            let s = stream_of[a.i];
            self.streams.gets[s as usize] += 1;
            // the block's owner, if cached, else the access's stream
            self.part = slot.map_or(s, |sl| self.orders.part_of(sl));
            s as usize
        } else {
            0
        };
        let (cached, m0, m1) = match slot {
            None => (0, s0, s1),
            Some(sl) => self.scan(sl, s0, s1),
        };
        // A miss refreshes its block after inserting the requested segments (below).
        let deferred = self.block_level && cached < nseg;
        if let Some(sl) = slot {
            self.refresh_at_lookup(sl, a, cached, deferred);
        }
        if cached == nseg {
            if L::PARTITIONED {
                self.streams.hits[stream] += 1;
            }
            tot.hits += 1;
            tot.hit_bytes += a.size;
            tot.hit_segs += nseg as u64;
            return;
        }
        tot.hit_segs += cached as u64;
        let look = Lookup {
            slot,
            cached,
            m0,
            m1,
            deferred,
        };
        self.miss(a, &look, setup, tot, admission, prefetch);
    }

    /// The lookup's refresh of cached block `sl`: the whole block (block-level recency; on a
    /// miss deferred until the requested segments are in, unless the orders refresh such a
    /// block at once, `Orders::EARLY_REFRESH`) or the cached requested segments.
    #[inline]
    fn refresh_at_lookup(&mut self, sl: u32, a: &Access, cached: u32, deferred: bool) {
        let t = a.t;
        if self.block_level {
            if !deferred {
                self.touch_block(sl, t);
            } else if L::EARLY_REFRESH && self.block_units && self.slot_count[sl as usize] == cached
            {
                // only the order: the last access is set by the deferred refresh
                let part = self.orders.part_of(sl);
                self.orders.touch(part, sl);
            }
        } else {
            let spb = self.spb;
            let base = sl * spb;
            let part = self.orders.part_of(sl);
            let (seg_last, orders) = (&mut self.seg_last, &mut self.orders);
            let masks = &self.masks;
            let words = self.words;
            for_cached_in(masks, sl as usize * words, a.s0, a.s1, |s| {
                let u = base + s;
                seg_last[u as usize] = t;
                if E::REORDERS_ON_TOUCH {
                    orders.touch(part, u);
                }
            });
        }
    }

    /// A GET miss: ask the admission policy, insert the admitted requested segments, refresh
    /// the block, prefetch, and charge one backend IO from the first to the last segment read.
    #[inline]
    fn miss(
        &mut self,
        a: &Access,
        look: &Lookup,
        setup: &Setup,
        tot: &mut Totals,
        admission: &mut dyn Admission,
        prefetch: &mut dyn Prefetch,
    ) {
        let (key, t, k) = (a.key, a.t, a.k);
        let (slot, m0, m1) = (look.slot, look.m0, look.m1);
        let ctx = MissCtx {
            index: a.i,
            key,
            time: t,
            first_seg: a.s0,
            last_seg: a.s1,
            first_missing: m0,
            last_missing: m1,
            partial_hit: look.cached > 0,
        };
        let admitted = self.admit(&ctx, slot, setup.per_segment, admission);
        // A partition whose quota is <= 1 caches nothing: the miss is treated as rejected.
        let admitted = admitted && (!L::PARTITIONED || self.quota[self.part as usize] > 1);
        // Prefetch only for an admitted miss (a rejected one keeps nothing it reads).
        let range = if admitted {
            prefetch.range(&ctx).and_then(|(p0, p1)| {
                let (p0, p1) = (p0.max(0), p1.min(self.spb as i64 - 1));
                (p0 <= p1).then_some((p0 as u32, p1 as u32))
            })
        } else {
            None
        };
        let mut cur = slot;
        if admitted {
            // the requested segments, with the block at its old place
            if self.block_units && look.deferred {
                self.pending = slot.map(|sl| (sl, a.s0, a.s1));
            }
            for i_adm in 0..self.to_insert.len() {
                let s = self.to_insert[i_adm];
                cur = Some(self.insert(key, cur, s, t));
                self.admitted += 1;
                self.win_admitted[k] += 1;
            }
            self.pending = None;
        }
        if look.deferred {
            if let Some(sl) = cur {
                self.touch_block(sl, t);
            }
        }
        // One backend IO from the first to the last segment read: the missing requested
        // ones and the prefetched ones (as the artifact: the prefetch range's segments
        // not cached once the requested ones are in, nor missing requested ones).
        let (mut lo, mut hi) = (m0, m1);
        if let Some((p0, p1)) = range {
            // then the prefetched segments, ascending
            for s in p0..=p1 {
                if self.missing.binary_search(&s).is_ok()
                    || cur.is_some_and(|sl| self.is_cached(sl, s))
                {
                    continue;
                }
                if setup.per_segment && !admission.admit_segment(&ctx, s) {
                    continue;
                }
                cur = Some(self.insert(key, cur, s, t));
                self.admitted += 1;
                self.win_admitted[k] += 1;
                self.prefetched += 1;
                lo = lo.min(s);
                hi = hi.max(s);
            }
        }
        let io_segs = hi - lo + 1;
        tot.backend_ios += 1;
        tot.backend_bytes += io_segs as u64 * setup.seg_bytes;
        let dt = setup.t_seek + io_segs as f64 * setup.seg_time;
        tot.win_dt[k] += dt;
        tot.get_dt += dt;
    }

    /// The admission decision of a miss: collects the requested segments missing at lookup
    /// (`self.missing`) and those of them to insert (`self.to_insert`); true if the miss is
    /// admitted (per segment: any segment).
    #[inline]
    fn admit(
        &mut self,
        ctx: &MissCtx,
        slot: Option<u32>,
        per_segment: bool,
        admission: &mut dyn Admission,
    ) -> bool {
        // The requested segments missing at lookup, and those of them to insert (one
        // insertion may evict a requested hit of the same block: it stays evicted).
        self.to_insert.clear();
        self.missing.clear();
        for s in ctx.first_missing..=ctx.last_missing {
            if slot.is_none_or(|sl| !self.is_cached(sl, s)) {
                self.missing.push(s);
            }
        }
        if per_segment {
            for j in 0..self.missing.len() {
                let s = self.missing[j];
                if admission.admit_segment(ctx, s) {
                    self.to_insert.push(s);
                }
            }
            !self.to_insert.is_empty()
        } else {
            let a = admission.admit(ctx);
            if a {
                self.to_insert.extend_from_slice(&self.missing);
            }
            a
        }
    }

    /// The metrics, series and counts of the finished run of `n` accesses.
    fn result(&mut self, n: usize, setup: &Setup, tot: Totals) -> FlashResult {
        let cfg = self.cfg;
        let (seg_bytes, t0, span, n_windows) =
            (setup.seg_bytes, setup.t0, setup.span, setup.n_windows);
        let Totals {
            win_dt,
            win_put_dt,
            get_dt,
            get_dt_nocache,
            gets,
            puts,
            hits,
            get_bytes,
            hit_bytes,
            get_segs,
            hit_segs,
            backend_ios,
            backend_bytes,
        } = tot;
        let sr_scale = 100.0 / cfg.sample_ratio;
        let mut series = Series::default();
        let (mut measured, mut measured_puts) = (Vec::new(), Vec::new());
        let to_util = |dt: f64| dt / cfg.disks as f64 / (cfg.sample_ratio / 100.0) / cfg.window_s;
        for (k, &dt) in win_dt.iter().enumerate() {
            let util = to_util(dt);
            let util_puts = to_util(dt + win_put_dt[k]);
            let wr = self.win_admitted[k] as f64 * seg_bytes as f64 / cfg.window_s * sr_scale / 1e6;
            let warm = (k as f64) * cfg.window_s < cfg.warmup_s;
            series.time.push(t0 + k as f64 * cfg.window_s);
            series.dt_util.push(util);
            series.dt_util_with_puts.push(util_puts);
            series.write_rate_mbps.push(wr);
            series.warmup.push(warm);
            if !warm {
                measured.push(util);
                measured_puts.push(util_puts);
            }
        }
        let (peak, mean, p50, p90, p99) = window_stats(&mut measured);
        let (peak_p, mean_p, p50_p, p90_p, p99_p) = window_stats(&mut measured_puts);
        let written = self.admitted as f64 * seg_bytes as f64 / span * sr_scale;
        let wr = written / 1e6;
        let cache_bytes_full = self.capacity as f64 * seg_bytes as f64 * sr_scale;
        let metrics = FlashMetrics {
            peak_dt_util: peak,
            mean_dt_util: mean,
            p50_dt_util: p50,
            p90_dt_util: p90,
            p99_dt_util: p99,
            peak_dt_util_with_puts: peak_p,
            mean_dt_util_with_puts: mean_p,
            p50_dt_util_with_puts: p50_p,
            p90_dt_util_with_puts: p90_p,
            p99_dt_util_with_puts: p99_p,
            flash_write_rate_mbps: wr,
            flash_write_rate_mibps: written / 1_048_576.0,
            dwpd: wr * 1e6 * 86_400.0 / cache_bytes_full,
            io_hit_ratio: ratio(hits, gets),
            byte_hit_ratio: ratio(hit_bytes, get_bytes),
            segment_hit_ratio: ratio(hit_segs, get_segs),
            service_time_saved_ratio: if get_dt_nocache > 0.0 {
                1.0 - get_dt / get_dt_nocache
            } else {
                f64::NAN
            },
            iops_saved_ratio: ratio(hits, gets),
            avg_eviction_age_s: if self.evictions == 0 {
                f64::NAN
            } else {
                self.age_sum / self.evictions as f64
            },
            backend_ios,
            backend_bytes,
            admitted_segments: self.admitted,
            prefetched_segments: self.prefetched,
            accesses: n as u64,
            wall_s: 0.0,
        };
        let info = Info {
            capacity_segments: self.capacity,
            segments_per_block: self.spb,
            get_accesses: gets,
            put_accesses: puts,
            hits,
            evictions: self.evictions,
            trace_seconds: span,
            windows: n_windows as u64,
            measured_windows: measured.len() as u64,
            rejectx_history: self.cfg.rejectx_history() as u64,
            peak_cached_blocks: self.peak_blocks,
            streams: L::PARTITIONED.then(|| std::mem::take(&mut self.streams)),
        };
        FlashResult {
            metrics,
            series,
            info,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::core::config::FlashConfig;
    use crate::flash::testing::{close, rows, run, tiny, Rows, SEG};
    use crate::flash::PolicyArrays;

    /// The hand-computed trace (two blocks, a PUT in the second window).
    fn hand_rows() -> Rows {
        rows(&[
            (0.0, 1, 0, 2 * SEG, 1),
            (1.0, 1, 0, SEG, 1),
            (2.0, 2, 3 * SEG, 3 * SEG, 1),
            (3.0, 1, 0, 2 * SEG, 1),
            (12.0, 1, 0, SEG, 3),
            (15.0, 2, 4 * SEG, 2 * SEG, 1),
        ])
    }

    #[test]
    fn hand_computed_lru_block_level() {
        let r = hand_rows();
        let res = run(&r, &tiny(), &PolicyArrays::default()).unwrap();
        let m = &res.metrics;
        // window 1 has a PUT (0.11 s) and a hit: no GET disk time
        assert!(close(res.series.dt_util[0], 0.063) && close(res.series.dt_util[1], 0.0));
        assert!(close(res.series.dt_util_with_puts[1], 0.011));
        assert!(close(m.peak_dt_util, 0.063) && close(m.peak_dt_util_with_puts, 0.063));
        assert!(close(m.mean_dt_util, 0.0315) && close(m.mean_dt_util_with_puts, 0.037));
        assert!(close(
            m.flash_write_rate_mibps * 1_048_576.0,
            m.flash_write_rate_mbps * 1e6
        ));
        // GET disk time 0.63 s of 1.05 s with no cache (10 GET segments, 5 GET IOs)
        assert!(close(m.service_time_saved_ratio, 1.0 - 0.63 / 1.05));
        assert!(close(m.iops_saved_ratio, m.io_hit_ratio));
        assert!(close(m.io_hit_ratio, 0.4));
        assert!(close(m.byte_hit_ratio, 0.3));
        assert!(close(m.segment_hit_ratio, 0.4));
        assert_eq!(m.admitted_segments, 6);
        assert!(close(
            m.flash_write_rate_mbps,
            6.0 * SEG as f64 / 15.0 / 1e6
        ));
        assert!(close(m.avg_eviction_age_s, 1.0));
        assert_eq!((m.backend_ios, m.backend_bytes), (4, 7 * SEG));
        assert_eq!(
            (res.info.evictions, res.info.hits, res.info.put_accesses),
            (2, 2, 1)
        );
    }

    /// The same trace at capacity 4: the artifact holds 3 segments, and a miss refreshes its
    /// block only after inserting (computed by hand, README "Flash mode vs BCacheSim").
    #[test]
    fn hand_computed_artifact_capacity_rule() {
        let r = hand_rows();
        let cfg = FlashConfig {
            capacity_segments: 4,
            ..tiny()
        };
        let res = run(&r, &cfg, &PolicyArrays::default()).unwrap();
        let m = &res.metrics;
        // t2: key 2 evicts key 1's segments 0, 1; t3: key 1 misses both, evicts key 2's 3, 4;
        // t15: key 2 misses 4; the LRU block is key 2 itself, with nothing outside the
        // request: it is at the front, and key 1 loses segment 0 (age 12).
        assert!(close(res.series.dt_util[0], 0.073) && close(res.series.dt_util[1], 0.011));
        assert!(close(res.series.dt_util_with_puts[1], 0.022));
        assert!(close(m.io_hit_ratio, 0.2) && close(m.byte_hit_ratio, 0.1));
        assert!(close(m.segment_hit_ratio, 0.2));
        assert_eq!(m.admitted_segments, 8);
        assert!(close(m.avg_eviction_age_s, 16.0 / 5.0));
        assert_eq!((m.backend_ios, m.backend_bytes), (5, 9 * SEG));
        assert_eq!((res.info.evictions, res.info.hits), (5, 1));
    }

    /// A miss's block keeps its old LRU place for its segments outside the request while
    /// the requested ones are inserted (BCacheSim touches the whole block afterwards).
    #[test]
    fn miss_refreshes_its_block_after_inserting() {
        let r = rows(&[
            (0.0, 1, 0, 2 * SEG, 1),   // key 1: 0, 1
            (1.0, 2, 0, SEG, 1),       // key 2: 0 (3 cached: full)
            (2.0, 1, 2 * SEG, SEG, 1), // key 1 is LRU: its segment 0 goes, not key 2's
            (3.0, 2, 0, SEG, 1),       // hit
            (4.0, 1, 0, SEG, 1),       // miss; key 1 is LRU again: its segment 1 goes
            (5.0, 1, 2 * SEG, SEG, 1), // hit
        ]);
        let cfg = FlashConfig {
            capacity_segments: 4,
            ..tiny()
        };
        let res = run(&r, &cfg, &PolicyArrays::default()).unwrap();
        assert_eq!((res.info.hits, res.info.evictions), (2, 2));
        assert!(close(res.metrics.avg_eviction_age_s, 2.0));
    }

    #[test]
    fn multi_word_masks() {
        // 128 segments per block: accesses straddle the 64-bit word boundary.
        let cfg = FlashConfig {
            block_bytes: 128 * SEG,
            capacity_segments: 200,
            ..tiny()
        };
        let r = rows(&[
            (0.0, 1, 60 * SEG, 10 * SEG, 1),
            (1.0, 1, 62 * SEG, 4 * SEG, 1),
            (2.0, 1, 0, 128 * SEG, 1),
            (3.0, 1, 0, 128 * SEG, 1),
        ]);
        let res = run(&r, &cfg, &PolicyArrays::default()).unwrap();
        assert_eq!(res.info.hits, 2);
        assert_eq!(res.metrics.admitted_segments, 128);
        // access 2: missing 0..59 and 70..127 -> one IO over 0..127 (partial hits re-read)
        assert_eq!(res.metrics.backend_bytes, (10 + 128) * SEG);
    }
}
