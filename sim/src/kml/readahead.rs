//! KML's offline twin: a closed-loop page cache with Linux-like mmap readahead over
//! a device with a simple cost model, run one feature window at a time so that a readahead
//! tuner can pick the size of the next window from the contract's features
//! (features/readahead.toml; the reference is `flashml.features.readahead.window_features`).
//!
//! The model (the slow reference in tests/kml/test_kml_twin.py implements the same rules):
//!
//! * Requests `(file, page, npages, write)` run in order, closed loop (the next one starts when
//!   the previous one finished, like db_bench with one thread); trace timestamps are not used.
//! * The page cache is an LRU of `cache_pages` pages keyed by (file, page). Adding a page to a
//!   full cache first evicts the least recently used one (with its readahead mark).
//! * `ra` = max(1, readahead_kib * 1024 / page_bytes) pages; `async` = max(1, ra / 4).
//! * A read touches its pages in ascending order. A miss on page p does what Linux's
//!   `filemap_fault` does for mmap without VM_SEQ_READ (read-around): the window
//!   [start, start + ra) with start = p - ra/2 (saturating at 0); its pages that are not cached
//!   are added in ascending order (one event each) with one device IO of the added pages; the
//!   file's window becomes (start, ra) and the page start + ra - async gets the readahead mark
//!   if this IO added it. The faulting page is not touched again after the read-around.
//! * A hit is an LRU touch; a hit on a marked page clears the mark and issues the async
//!   readahead: the window [end, end + ra) with end = the end of the file's last window, the
//!   same add/mark rules, the file's window becomes (end, ra). An async readahead that finds
//!   every page cached does no IO.
//! * Windows are not capped by a file size: files have no size in the model (readahead past
//!   the end of a file reads pages nobody asks for, which the kernel would not read).
//! * A write adds each of its pages that is not cached (an event, no device IO: buffered,
//!   writeback is not modelled) and touches those that are.
//! * Costs on the simulated clock: cpu_us per request plus 1/riops + bytes/rbps per device
//!   IO. The clock advances by a request's whole cost when the request completes, so every
//!   event of a request is stamped with the request's start time.
//! * A window is [k w, (k+1) w) of the clock (w = window_ms); `run_window` runs the requests
//!   starting in the clock's current window (the one that crosses the boundary completes in
//!   it). Windows the clock skips over (a request longer than a window) are not reported. The
//!   window index of a time is Python's `t // w` exactly (fmod based), so a reference built
//!   on `window_features` puts every event in the same window.

use crate::core::config::SimError;
use crate::core::contract::{READAHEAD_NUM_FEATURES, READAHEAD_PAGE_BYTES, READAHEAD_WINDOW_MS};
use crate::core::hash::FastMap;
use crate::core::list::DList;
use crate::kml::settings;

/// Largest page index a request may touch (offsets stay exact in f64).
pub const MAX_PAGE: u64 = 1 << 53;
/// Largest readahead accepted, KiB (1 TiB; far beyond any device's setting).
pub const MAX_RA_KIB: u64 = 1 << 30;
/// CPU time of every request by default, microseconds.
pub const CPU_US: f64 = 5.0;
/// The device's read bandwidth by default, bytes per second (the declared read_mbps).
pub const RBPS: f64 = settings::READ_MBPS * (1u64 << 20) as f64;

/// The device and cache of the twin.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadaheadConfig {
    /// Page-cache capacity, pages.
    pub cache_pages: usize,
    /// Device read IOs per second.
    pub riops: f64,
    /// Device read bandwidth, bytes per second.
    pub rbps: f64,
    /// CPU time of every request, microseconds.
    pub cpu_us: f64,
    /// Bytes per page.
    pub page_bytes: u64,
    /// Feature window, ms of the simulated clock.
    pub window_ms: u64,
}

impl Default for ReadaheadConfig {
    /// The real testbed's device and page cache (flashml/systems/kml/settings.toml's
    /// read_iops, read_mbps and twin_cache_pages), the contract's page and window.
    fn default() -> Self {
        ReadaheadConfig {
            cache_pages: settings::TWIN_CACHE_PAGES as usize,
            riops: settings::READ_IOPS as f64,
            rbps: RBPS,
            cpu_us: CPU_US,
            page_bytes: READAHEAD_PAGE_BYTES,
            window_ms: READAHEAD_WINDOW_MS,
        }
    }
}

impl ReadaheadConfig {
    pub fn validate(&self) -> Result<(), SimError> {
        let err = |m: String| Err(SimError(m));
        if self.cache_pages == 0 || self.cache_pages >= u32::MAX as usize {
            return err(format!(
                "cache_pages must be in 1..{}, got {}",
                u32::MAX,
                self.cache_pages
            ));
        }
        if !(self.riops.is_finite() && self.riops > 0.0) {
            return err(format!("riops must be > 0, got {}", self.riops));
        }
        if !(self.rbps.is_finite() && self.rbps > 0.0) {
            return err(format!("rbps must be > 0, got {}", self.rbps));
        }
        if !(self.cpu_us.is_finite() && self.cpu_us >= 0.0) {
            return err(format!("cpu_us must be >= 0, got {}", self.cpu_us));
        }
        if !(512..=(1 << 20)).contains(&self.page_bytes) {
            return err(format!(
                "page_bytes must be in 512..=1048576, got {}",
                self.page_bytes
            ));
        }
        if !(1..=3_600_000).contains(&self.window_ms) {
            return err(format!(
                "window_ms must be in 1..=3600000, got {}",
                self.window_ms
            ));
        }
        Ok(())
    }
}

/// The requests, as owned columns (the Python class keeps them across windows).
#[derive(Debug, Clone, Default)]
pub struct ReadaheadTrace {
    pub files: Vec<u32>,
    pub pages: Vec<u64>,
    pub npages: Vec<u32>,
    pub writes: Vec<bool>,
}

impl ReadaheadTrace {
    /// The columns, checked: equal lengths, npages >= 1, page + npages <= 2^53.
    pub fn new(
        files: Vec<u32>,
        pages: Vec<u64>,
        npages: Vec<u32>,
        writes: Vec<bool>,
    ) -> Result<Self, SimError> {
        let n = files.len();
        for (name, len) in [
            ("pages", pages.len()),
            ("npages", npages.len()),
            ("writes", writes.len()),
        ] {
            if len != n {
                return Err(SimError(format!(
                    "'files' has {n} elements but '{name}' has {len}"
                )));
            }
        }
        if let Some(i) = npages.iter().position(|&k| k == 0) {
            return Err(SimError(format!("npages[{i}] must be >= 1, got 0")));
        }
        if let Some(i) = (0..n).find(|&i| pages[i] > MAX_PAGE - npages[i] as u64) {
            return Err(SimError(format!(
                "pages[{i}] + npages[{i}] must be <= 2^53, got {} + {}",
                pages[i], npages[i]
            )));
        }
        Ok(ReadaheadTrace {
            files,
            pages,
            npages,
            writes,
        })
    }

    pub fn len(&self) -> usize {
        self.files.len()
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}

/// One window's outcome.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct WindowStats {
    /// Index k of the window [k w, (k+1) w) the requests started in.
    pub window: u64,
    /// The contract's features, in order (readahead_kib = this window's readahead).
    pub features: [f64; READAHEAD_NUM_FEATURES],
    /// No page was added in the window (a tuner leaves the readahead as it is).
    pub empty: bool,
    pub requests: u64,
    /// Read page accesses that hit / missed.
    pub hits: u64,
    pub misses: u64,
    /// Device IOs and their bytes.
    pub ios: u64,
    pub read_bytes: u64,
    /// Pages added to the cache (reads, readahead and writes).
    pub events: u64,
    /// Pages written.
    pub write_pages: u64,
    /// Simulated seconds the window's requests took.
    pub elapsed: f64,
    /// The clock after the window, s.
    pub clock: f64,
    /// The trace is finished.
    pub done: bool,
}

/// A whole run's totals.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Totals {
    pub requests: u64,
    pub clock: f64,
    pub ops_per_s: f64,
    pub hits: u64,
    pub misses: u64,
    pub hit_ratio: f64,
    pub ios: u64,
    pub read_bytes: u64,
    pub events: u64,
    pub write_pages: u64,
    pub windows: u64,
}

/// Python's float floor division `t // w` for t >= 0, w > 0 (fmod based, as CPython computes
/// it), so that window indexes agree bit for bit with `window_features`.
#[inline]
pub fn py_floordiv(t: f64, w: f64) -> f64 {
    let m = t % w;
    let div = (t - m) / w;
    let f = div.floor();
    if div - f > 0.5 {
        f + 1.0
    } else {
        f
    }
}

/// An LRU page cache over dense slots with a readahead mark per page.
struct PageCache {
    map: FastMap<(u32, u64), u32>,
    keys: Vec<(u32, u64)>,
    marked: Vec<bool>,
    lru: DList,
    cap: usize,
}

impl PageCache {
    fn new(cap: usize) -> Self {
        let mut map = FastMap::default();
        map.reserve(cap.min(1 << 24) + 1);
        PageCache {
            map,
            keys: Vec::new(),
            marked: Vec::new(),
            lru: DList::new(),
            cap,
        }
    }

    #[inline]
    fn get(&self, file: u32, page: u64) -> Option<u32> {
        self.map.get(&(file, page)).copied()
    }

    /// Add the page at the MRU end if it is absent (evicting the LRU page when full), with
    /// the mark; whether it was added.
    #[inline]
    fn add_if_absent(&mut self, file: u32, page: u64, mark: bool) -> bool {
        use std::collections::hash_map::Entry;
        let full = self.map.len() >= self.cap;
        let (slot, old) = match self.map.entry((file, page)) {
            Entry::Occupied(_) => return false,
            Entry::Vacant(v) => {
                let (slot, old) = if full {
                    let victim = self.lru.back().expect("a full cache has pages");
                    let old = std::mem::replace(&mut self.keys[victim as usize], (file, page));
                    self.marked[victim as usize] = mark;
                    (victim, Some(old))
                } else {
                    let s = self.keys.len() as u32;
                    self.keys.push((file, page));
                    self.marked.push(mark);
                    (s, None)
                };
                v.insert(slot);
                (slot, old)
            }
        };
        if let Some(old) = old {
            self.map.remove(&old);
            self.lru.move_to_front(slot);
        } else {
            self.lru.push_front(slot);
        }
        true
    }

    #[cfg(test)]
    fn contains(&self, file: u32, page: u64) -> bool {
        self.map.contains_key(&(file, page))
    }
}

/// The twin: a trace, a page cache and a clock, run window by window.
pub struct ReadaheadSim {
    cfg: ReadaheadConfig,
    trace: ReadaheadTrace,
    w: f64,
    pos: usize,
    clock: f64,
    cache: PageCache,
    /// Per file: its last readahead window (start, size).
    windows: FastMap<u32, (u64, u64)>,
    ra: u64,
    // Events: the current window's Welford statistics and consecutive differences.
    mean: f64,
    m2: f64,
    win_count: u64,
    win_absdiff: f64,
    last: u64,
    stats: WindowStats,
}

impl ReadaheadSim {
    pub fn new(trace: ReadaheadTrace, cfg: ReadaheadConfig) -> Result<Self, SimError> {
        cfg.validate()?;
        Ok(ReadaheadSim {
            w: cfg.window_ms as f64 / 1000.0,
            cache: PageCache::new(cfg.cache_pages),
            cfg,
            trace,
            pos: 0,
            clock: 0.0,
            windows: FastMap::default(),
            ra: 1,
            mean: 0.0,
            m2: 0.0,
            win_count: 0,
            win_absdiff: 0.0,
            last: 0,
            stats: WindowStats::default(),
        })
    }

    /// Back to the start: empty cache, clock 0, no events.
    pub fn reset(&mut self) {
        let trace = std::mem::take(&mut self.trace);
        let cfg = self.cfg.clone();
        *self = ReadaheadSim::new(trace, cfg).expect("validated");
    }

    pub fn config(&self) -> &ReadaheadConfig {
        &self.cfg
    }

    /// Requests done so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// The simulated clock, s.
    pub fn clock(&self) -> f64 {
        self.clock
    }

    pub fn done(&self) -> bool {
        self.pos >= self.trace.len()
    }

    /// Pages of a readahead of `ra_kib` KiB.
    pub fn ra_pages(&self, ra_kib: u64) -> Result<u64, SimError> {
        if ra_kib == 0 || ra_kib > MAX_RA_KIB {
            return Err(SimError(format!(
                "ra_kib must be in 1..={MAX_RA_KIB}, got {ra_kib}"
            )));
        }
        Ok((ra_kib * 1024 / self.cfg.page_bytes).max(1))
    }

    #[inline]
    fn event(&mut self, page: u64) {
        self.stats.events += 1;
        if self.win_count > 0 {
            self.win_absdiff += page.abs_diff(self.last) as f64;
        }
        self.last = page;
        self.win_count += 1;
        let x = page as f64;
        let d = x - self.mean;
        self.mean += d / self.win_count as f64;
        self.m2 += d * (x - self.mean);
    }

    /// Add the uncached pages of [start, start + ra) of `file` in ascending order, marking
    /// start + ra - max(1, ra/4) if added; the file's window becomes (start, ra). Pages added.
    #[inline]
    fn read_window(&mut self, file: u32, start: u64, ra: u64) -> u64 {
        let end = start.saturating_add(ra);
        let mark = end - (ra / 4).max(1);
        let mut added = 0;
        for q in start..end {
            if self.cache.add_if_absent(file, q, q == mark) {
                self.event(q);
                added += 1;
            }
        }
        self.windows.insert(file, (start, ra));
        added
    }

    #[inline]
    fn io_cost(&mut self, pages: u64) -> f64 {
        let bytes = pages * self.cfg.page_bytes;
        self.stats.ios += 1;
        self.stats.read_bytes += bytes;
        1.0 / self.cfg.riops + bytes as f64 / self.cfg.rbps
    }

    fn request(&mut self, i: usize) {
        let file = self.trace.files[i];
        let p0 = self.trace.pages[i];
        let n = self.trace.npages[i] as u64;
        let write = self.trace.writes[i];
        let ra = self.ra;
        let mut cost = self.cfg.cpu_us * 1e-6;
        for p in p0..p0 + n {
            match self.cache.get(file, p) {
                Some(s) => {
                    self.cache.lru.move_to_front(s);
                    if write {
                        self.stats.write_pages += 1;
                        continue;
                    }
                    self.stats.hits += 1;
                    if self.cache.marked[s as usize] {
                        self.cache.marked[s as usize] = false;
                        let (ws, wn) = self.windows.get(&file).copied().unwrap_or((p, 0));
                        let added = self.read_window(file, ws.saturating_add(wn), ra);
                        if added > 0 {
                            cost += self.io_cost(added);
                        }
                    }
                }
                None if write => {
                    self.stats.write_pages += 1;
                    self.cache.add_if_absent(file, p, false);
                    self.event(p);
                }
                None => {
                    self.stats.misses += 1;
                    let added = self.read_window(file, p.saturating_sub(ra / 2), ra);
                    cost += self.io_cost(added);
                }
            }
        }
        self.clock += cost;
    }

    /// Run the current window at `ra_kib` KiB of readahead (see the module doc).
    pub fn run_window(&mut self, ra_kib: u64) -> Result<WindowStats, SimError> {
        self.ra = self.ra_pages(ra_kib)?;
        let k = py_floordiv(self.clock, self.w);
        let start = self.clock;
        // Below this the index cannot have moved past k (saves the fmod per request).
        let sure = (k + 1.0) * self.w * (1.0 - 1e-9);
        self.stats = WindowStats {
            window: k as u64,
            ..WindowStats::default()
        };
        self.win_count = 0;
        self.win_absdiff = 0.0;
        self.mean = 0.0;
        self.m2 = 0.0;
        while self.pos < self.trace.len() {
            let i = self.pos;
            self.request(i);
            self.pos += 1;
            self.stats.requests += 1;
            if self.clock >= sure && py_floordiv(self.clock, self.w) > k {
                break;
            }
        }
        let c = self.win_count;
        let mut s = self.stats;
        s.features = [
            c as f64,
            self.mean,
            if c > 1 {
                (self.m2 / c as f64).sqrt()
            } else {
                0.0
            },
            if c > 1 {
                self.win_absdiff / (c - 1) as f64
            } else {
                0.0
            },
            ra_kib as f64,
        ];
        s.empty = c == 0;
        s.elapsed = self.clock - start;
        s.clock = self.clock;
        s.done = self.done();
        Ok(s)
    }

    /// The whole trace from the start (the state is reset first) at one readahead size.
    pub fn run_fixed(&mut self, ra_kib: u64) -> Result<Totals, SimError> {
        self.ra_pages(ra_kib)?;
        self.reset();
        let mut t = Totals::default();
        loop {
            let s = self.run_window(ra_kib)?;
            t.add(&s);
            if s.done {
                break;
            }
        }
        t.finish(self.clock);
        Ok(t)
    }
}

impl Totals {
    pub fn add(&mut self, s: &WindowStats) {
        self.requests += s.requests;
        self.hits += s.hits;
        self.misses += s.misses;
        self.ios += s.ios;
        self.read_bytes += s.read_bytes;
        self.events += s.events;
        self.write_pages += s.write_pages;
        self.windows += 1;
    }

    pub fn finish(&mut self, clock: f64) {
        self.clock = clock;
        self.ops_per_s = if clock > 0.0 {
            self.requests as f64 / clock
        } else {
            0.0
        };
        let reads = self.hits + self.misses;
        self.hit_ratio = if reads > 0 {
            self.hits as f64 / reads as f64
        } else {
            0.0
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reads(files: &[u32], pages: &[u64]) -> ReadaheadTrace {
        let n = pages.len();
        ReadaheadTrace::new(files.to_vec(), pages.to_vec(), vec![1; n], vec![false; n]).unwrap()
    }

    fn cfg(cache_pages: usize) -> ReadaheadConfig {
        ReadaheadConfig {
            cache_pages,
            ..ReadaheadConfig::default()
        }
    }

    /// ra pages <-> KiB at 4 KiB pages.
    fn kib(ra: u64) -> u64 {
        ra * 4
    }

    #[test]
    fn sequential_scan_ios() {
        // One pass over pages 0..n at ra pages, a = max(1, ra/4): the miss on page 0 reads
        // [0, ra) (the start saturates at 0) and marks page ra - a; the hit on the marked page
        // j ra - a reads [j ra, (j+1) ra) with one IO and marks (j+1) ra - a. So
        // IOs = 1 + #{j >= 1: j ra - a < n}, one miss, every other access a hit.
        for (ra, n) in [(32u64, 1000u64), (4, 1000), (2, 999), (256, 4096), (64, 10)] {
            let pages: Vec<u64> = (0..n).collect();
            let files = vec![0; n as usize];
            let mut sim = ReadaheadSim::new(reads(&files, &pages), cfg(1 << 16)).unwrap();
            let t = sim.run_fixed(kib(ra)).unwrap();
            let a = (ra / 4).max(1);
            let expect = 1 + (1..).take_while(|j| j * ra - a < n).count() as u64;
            assert_eq!(t.ios, expect, "ra {ra} n {n}");
            assert_eq!((t.misses, t.hits), (1, n - 1));
            assert_eq!(t.read_bytes, expect * ra * 4096);
            assert_eq!(t.events, expect * ra);
        }
        // By hand: ra 32 pages (128 KiB), 1000 pages: the fault at 0 and the async reads at
        // pages 24, 56, ..., 984 (32 j - 8 < 1000 for j = 1..=31): 32 IOs.
        let pages: Vec<u64> = (0..1000).collect();
        let mut sim = ReadaheadSim::new(reads(&[0; 1000], &pages), cfg(1 << 16)).unwrap();
        assert_eq!(sim.run_fixed(128).unwrap().ios, 32);
        // ra 1 page: the mark falls on the faulting page itself, which a single pass never
        // hits again: every page is a miss and an IO.
        let t = sim.run_fixed(4).unwrap();
        assert_eq!((t.ios, t.misses, t.hits), (1000, 1000, 0));
    }

    #[test]
    fn random_reads_one_io_each() {
        // Distinct pages far apart: every read misses, reads ra pages with one IO, and no
        // marked page is ever hit.
        let ra = 16u64;
        let pages: Vec<u64> = (0..200u64).map(|i| 1000 + i * 997 * 64).collect();
        let files: Vec<u32> = (0..200u32).map(|i| i % 3).collect();
        let mut sim = ReadaheadSim::new(reads(&files, &pages), cfg(1 << 16)).unwrap();
        let t = sim.run_fixed(kib(ra)).unwrap();
        assert_eq!((t.ios, t.misses, t.hits), (200, 200, 0));
        assert_eq!(t.read_bytes, 200 * ra * 4096);
        let c = ReadaheadConfig::default();
        let per = c.cpu_us * 1e-6 + 1.0 / c.riops + (ra * 4096) as f64 / c.rbps;
        assert!((t.clock - 200.0 * per).abs() < 1e-9);
        assert!((t.ops_per_s - 1.0 / per).abs() < 1e-6);
    }

    #[test]
    fn lru_evicts_least_recent() {
        // A 12-page cache, ra 4 pages (a miss on p reads [p-2, p+2) and marks p+1): reads of
        // 100, 200, 300 fill it; rereading 100 makes it the most recent; the read of 400 adds
        // 398..=401 and evicts the four least recent pages: 98, 99, 101, 198.
        let pages = [100u64, 200, 300, 100, 400];
        let mut sim = ReadaheadSim::new(reads(&[0; 5], &pages), cfg(12)).unwrap();
        let t = sim.run_fixed(16).unwrap();
        assert_eq!((t.misses, t.hits, t.ios, t.events), (4, 1, 4, 16));
        for gone in [98, 99, 101, 198] {
            assert!(!sim.cache.contains(0, gone), "{gone}");
        }
        for kept in [100, 199, 200, 201, 298, 301, 398, 401] {
            assert!(sim.cache.contains(0, kept), "{kept}");
        }
        let c = &sim.cache;
        let order: Vec<u64> = c
            .lru
            .iter_from_back()
            .map(|s| c.keys[s as usize].1)
            .collect();
        assert_eq!(
            order,
            vec![199, 200, 201, 298, 299, 300, 301, 100, 398, 399, 400, 401]
        );
    }

    #[test]
    fn lru_plain_eviction_without_marks() {
        // Writes never carry marks: write 0, 1, 2 into a 3-page cache, touch 0, write 3 ->
        // the least recent (1) is evicted.
        let tr = ReadaheadTrace::new(vec![0; 5], vec![0, 1, 2, 0, 3], vec![1; 5], vec![true; 5])
            .unwrap();
        let mut sim = ReadaheadSim::new(tr, cfg(3)).unwrap();
        let t = sim.run_fixed(8).unwrap();
        assert_eq!((t.events, t.ios, t.write_pages), (4, 0, 5));
        assert!(sim.cache.contains(0, 0) && sim.cache.contains(0, 2) && sim.cache.contains(0, 3));
        assert!(!sim.cache.contains(0, 1));
    }

    #[test]
    fn features_of_a_hand_stream() {
        // Writes of pages 10, 12, 11 (npages 1) then 40..=41 (npages 2): events 10, 12, 11,
        // 40, 41 in one window (writes cost 5 us each).
        let tr = ReadaheadTrace::new(
            vec![0, 0, 0, 1],
            vec![10, 12, 11, 40],
            vec![1, 1, 1, 2],
            vec![true; 4],
        )
        .unwrap();
        let mut sim = ReadaheadSim::new(tr, cfg(100)).unwrap();
        let s = sim.run_window(64).unwrap();
        let xs = [10.0f64, 12.0, 11.0, 40.0, 41.0];
        let mean = xs.iter().sum::<f64>() / 5.0; // 22.8
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / 5.0;
        let absdiff = (2.0 + 1.0 + 29.0 + 1.0) / 4.0; // 8.25
        assert_eq!(s.features[0], 5.0);
        assert!((s.features[1] - 22.8).abs() < 1e-12);
        assert!((s.features[2] - var.sqrt()).abs() < 1e-12);
        assert_eq!(s.features[3], absdiff);
        assert_eq!(s.features[4], 64.0);
        assert!(s.done && !s.empty && s.requests == 4);
        assert!((s.elapsed - 4.0 * 5e-6).abs() < 1e-15);
        // Another window on a finished trace: empty, every statistic the empty window's.
        let e = sim.run_window(8).unwrap();
        assert!(e.empty && e.done && e.requests == 0);
        assert_eq!(e.features[..4], [0.0; 4]);
    }

    #[test]
    fn windows_split_at_the_boundary() {
        // 1 ms windows, random reads of 4 KiB: each costs 5 us + 0.5 ms + 4096 / 64 MiB.
        let pages: Vec<u64> = (0..10u64).map(|i| i * 1000).collect();
        let mut sim = ReadaheadSim::new(
            reads(&[0; 10], &pages),
            ReadaheadConfig {
                window_ms: 1,
                ..cfg(100)
            },
        )
        .unwrap();
        let mut seen = vec![];
        loop {
            let s = sim.run_window(4).unwrap();
            seen.push((s.window, s.requests));
            if s.done {
                break;
            }
        }
        // 0.566 ms per request, requests end at 0.566, 1.132 | 1.698, 2.264 | 2.830, 3.396 |
        // 3.962, 4.528 | 5.094 | 5.660: the request crossing a boundary ends its window.
        assert_eq!(seen, vec![(0, 2), (1, 2), (2, 2), (3, 2), (4, 1), (5, 1)]);
    }

    #[test]
    fn floordiv_matches_python() {
        // Python: 0.3 // 0.1 == 2.0, 1.0 // 0.1 == 9.0, 0.7 // 0.1 == 6.0.
        assert_eq!(py_floordiv(0.3, 0.1), 2.0);
        assert_eq!(py_floordiv(1.0, 0.1), 9.0);
        assert_eq!(py_floordiv(0.7, 0.1), 6.0);
        assert_eq!(py_floordiv(2.5, 1.0), 2.0);
    }

    #[test]
    fn bad_input() {
        let e = ReadaheadTrace::new(vec![0], vec![0, 1], vec![1], vec![false]).unwrap_err();
        assert!(e.0.contains("'pages'"), "{e}");
        let e = ReadaheadTrace::new(vec![0], vec![0], vec![0], vec![false]).unwrap_err();
        assert!(e.0.contains("npages"), "{e}");
        assert!(ReadaheadSim::new(ReadaheadTrace::default(), cfg(0)).is_err());
        let mut sim = ReadaheadSim::new(ReadaheadTrace::default(), cfg(1)).unwrap();
        assert!(sim.run_window(0).unwrap_err().0.contains("ra_kib"));
        let s = sim.run_window(8).unwrap();
        assert!(s.done && s.empty && s.requests == 0);
    }

    #[test]
    #[ignore]
    fn speed() {
        // cargo test --release readahead::tests::speed -- --ignored --nocapture
        let mut next = crate::core::hash::lcg(7);
        let n = 4_000_000usize;
        let files: Vec<u32> = (0..n).map(|_| (next() % 16) as u32).collect();
        let random: Vec<u64> = (0..n).map(|_| next() % 16384).collect();
        // readseq: ~10 requests per page
        let seq: Vec<u64> = (0..n as u64).map(|i| i * 400 / 4096).collect();
        for (name, files, pages) in [("readrandom", files, random), ("readseq", vec![0; n], seq)] {
            let tr = ReadaheadTrace::new(files, pages, vec![1; n], vec![false; n]).unwrap();
            let mut sim = ReadaheadSim::new(tr, ReadaheadConfig::default()).unwrap();
            for ra in [8u64, 128, 1024] {
                let t0 = std::time::Instant::now();
                let t = sim.run_fixed(ra).unwrap();
                let dt = t0.elapsed().as_secs_f64();
                println!(
                    "{name} ra {ra} KiB: {:.2} M page accesses/s, {:.1} M pages added/s",
                    n as f64 / dt / 1e6,
                    t.events as f64 / dt / 1e6
                );
            }
        }
    }
}
