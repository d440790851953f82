//! Timing of the eviction decisions.

use std::time::Instant;

/// Cheap timing of the eviction decisions: the x86-64 time-stamp counter (~10 ns to read, vs
/// ~25-50 ns for two `Instant::now` per decision), converted to ns by the ratio of wall time
/// to ticks over the whole run (the TSC is invariant on x86-64 CPUs of the last decade);
/// `Instant` elsewhere.
pub(crate) struct DecisionClock {
    start: Instant,
    start_ticks: u64,
    ticks: u64,
}

impl DecisionClock {
    pub(crate) fn new() -> Self {
        let start = Instant::now();
        let mut c = DecisionClock {
            start,
            start_ticks: 0,
            ticks: 0,
        };
        c.start_ticks = c.now();
        c
    }

    #[inline]
    pub(crate) fn now(&self) -> u64 {
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY: RDTSC exists on every x86-64 CPU and has no preconditions.
            unsafe { core::arch::x86_64::_rdtsc() }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self.start.elapsed().as_nanos() as u64
        }
    }

    #[inline]
    pub(crate) fn add_since(&mut self, t0: u64) {
        self.ticks += self.now().wrapping_sub(t0);
    }

    /// The decisions' total, ns.
    pub(crate) fn total_ns(&self) -> u64 {
        let wall_ns = self.start.elapsed().as_nanos() as f64;
        let wall_ticks = self.now().wrapping_sub(self.start_ticks) as f64;
        if wall_ticks <= 0.0 {
            return 0;
        }
        (self.ticks as f64 * wall_ns / wall_ticks).round() as u64
    }
}
