//! TIRE (Throttle Insertions and Reinsertions for Erasures, Pannier §3.1, Table 1): a
//! multi-step bang-bang controller that keeps flash erasures within a quota per quantum.
//!
//! Time is split into quanta (5 min). The erasure credit carries unused quota over:
//! `credit(t) = credit(t-1) + (q - E(t-1))`, where E is the erasures of the quantum. Within a
//! quantum, with `e` the erasures so far and `b = min(q, credit(t))` the quantum's allowance:
//!
//! | condition                  | admitted                                                |
//! |----------------------------|---------------------------------------------------------|
//! | credit <= 0 at its start   | nothing this quantum                                    |
//! | e <= b                     | everything                                              |
//! | (b, K b] in `steps` equal intervals: 1st | read misses, overwrites, reinsertions; no new writes |
//! | 2nd, 3rd, ...              | the same with access count >= 1, 2, ...                 |
//! | e > K b                    | nothing until the next quantum                          |
//!
//! With a credit of at least q this is the paper's Table 1 as printed (b = q). Choices where
//! the paper is silent or ambiguous, stated here once:
//! * The credit starts at one quantum's quota (a credit of 0 would block the first quantum).
//! * The access count is the number of earlier accesses of the block the ghost cache
//!   remembers (not counting the current one).
//! * A credit in (0, q) at a quantum's start scales the whole ladder down to it (b = credit:
//!   everything up to `credit` erasures, the steps over (credit, K credit]). The credit is
//!   "the running credit of erasures allowed" (§3.1); Table 1 reads literally (b = q) lets a
//!   quantum that starts with almost no credit spend q unthrottled plus the slack, drive the
//!   credit negative and block the whole next quantum, so under a binding budget the
//!   controller alternates between a full slack and a blocked quantum. Rule 1 (credit <= 0:
//!   nothing) is the limit b <= 0 of the same rule. The per-quantum bound K b <= K q holds.
//! * "Writes (new dirty data from a client)", refused from the first interval on, are writes
//!   of blocks the cache does not hold. An overwrite of a block cached in flash
//!   ([`InsertKind::Overwrite`]) keeps a block that is already cached (its old copy is
//!   invalidated either way) and is gated like a reinsertion: refusing it drops a cached,
//!   often hot, block, which the next read of it has to bring back as a read miss.

use crate::core::config::{err, SimError};

/// What is being written to flash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InsertKind {
    /// New data from a client write.
    ClientWrite,
    /// A block read from the backend after a read miss.
    ReadMiss,
    /// A client write of a block cached in flash (the old copy is invalidated; the new data
    /// keeps the block cached): gated like a reinsertion, not like a new write.
    Overwrite,
    /// A block copied forward from an evicted container (or by the FTL's own GC: never gated).
    Reinsertion,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TireConfig {
    /// q: erasures allowed per quantum.
    pub quota: f64,
    /// K: the slack; nothing is admitted beyond K q erasures in a quantum.
    pub slack: f64,
    /// The number of equal intervals (q, K q] is split into (the paper: 3).
    pub steps: u32,
    /// Seconds per quantum (the paper: 300).
    pub quantum_s: f64,
}

impl TireConfig {
    /// The quota from a lifespan target: `epbpd` erasures per erase block per day over
    /// `erase_blocks` blocks, per quantum.
    pub fn from_epbpd(
        epbpd: f64,
        erase_blocks: u32,
        slack: f64,
        steps: u32,
        quantum_s: f64,
    ) -> Self {
        TireConfig {
            quota: epbpd * erase_blocks as f64 * quantum_s / 86_400.0,
            slack,
            steps,
            quantum_s,
        }
    }

    pub fn validate(&self) -> Result<(), SimError> {
        if !(self.quota.is_finite() && self.quota > 0.0) {
            return err(format!(
                "TIRE quota must be > 0 erasures per quantum, got {} (a lifespan target of 0 \
                 erasures per day cannot be met by a cache that writes at all)",
                self.quota
            ));
        }
        if !(self.slack.is_finite() && self.slack >= 1.0) {
            return err(format!("TIRE slack K must be >= 1, got {}", self.slack));
        }
        if self.steps == 0 || self.steps > 16 {
            return err(format!("TIRE steps must be in 1..=16, got {}", self.steps));
        }
        if !(self.quantum_s.is_finite() && self.quantum_s > 0.0) {
            return err(format!(
                "TIRE quantum must be > 0 seconds, got {}",
                self.quantum_s
            ));
        }
        Ok(())
    }
}

/// One closed quantum: its start, the credit at its start, its erasures, and whether it was
/// blocked from the start (credit <= 0).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Quantum {
    pub start_s: f64,
    pub credit: f64,
    pub erasures: u64,
    pub blocked: bool,
}

/// The admission gate: TIRE when configured, else admit everything (still recording the
/// erasures per quantum so both report the same series).
#[derive(Debug, Clone)]
pub struct Gate {
    cfg: Option<TireConfig>,
    quantum_s: f64,
    start_s: Option<f64>,
    credit: f64,
    erasures_at_start: u64,
    blocked: bool,
    pub series: Vec<Quantum>,
}

impl Gate {
    pub fn new(cfg: Option<TireConfig>, quantum_s: f64) -> Self {
        Gate {
            cfg,
            quantum_s: cfg.map_or(quantum_s, |c| c.quantum_s),
            start_s: None,
            credit: cfg.map_or(0.0, |c| c.quota),
            erasures_at_start: 0,
            blocked: false,
            series: Vec::new(),
        }
    }

    pub fn quota(&self) -> Option<f64> {
        self.cfg.map(|c| c.quota)
    }

    /// Time passes to `now_s` with `erasures` erasures so far: closes every quantum that ended.
    pub fn tick(&mut self, now_s: f64, erasures: u64) {
        let start = match self.start_s {
            None => {
                self.start_s = Some(now_s);
                self.blocked = self.credit <= 0.0 && self.cfg.is_some();
                return;
            }
            Some(s) => s,
        };
        if now_s < start + self.quantum_s {
            return;
        }
        let q = self.close(start, erasures);
        let elapsed = ((now_s - start) / self.quantum_s).floor();
        // Quanta with no requests at all used nothing: each adds q.
        let idle = (elapsed as u64).saturating_sub(1);
        self.credit += q * idle as f64;
        self.start_s = Some(start + elapsed * self.quantum_s);
        self.erasures_at_start = erasures;
        self.blocked = self.cfg.is_some() && self.credit <= 0.0;
    }

    /// Close the last (partial) quantum at the end of the trace.
    pub fn finish(&mut self, erasures: u64) {
        if let Some(start) = self.start_s {
            self.close(start, erasures);
            self.start_s = None;
        }
    }

    /// Record the quantum that started at `start` and carry its unused quota over; returns q.
    fn close(&mut self, start: f64, erasures: u64) -> f64 {
        let q = self.cfg.map_or(0.0, |c| c.quota);
        let used = erasures - self.erasures_at_start;
        self.series.push(Quantum {
            start_s: start,
            credit: self.credit,
            erasures: used,
            blocked: self.blocked,
        });
        self.credit += q - used as f64;
        q
    }

    /// The credit after the quanta closed so far.
    pub fn credit(&self) -> f64 {
        self.credit
    }

    /// The quantum's allowance b = min(q, credit at its start) (0 without TIRE).
    pub fn allowance(&self) -> f64 {
        self.cfg.map_or(0.0, |c| c.quota.min(self.credit))
    }

    /// The step the controller is at with `erasures` so far: 0 = admit all, 1..=steps the
    /// throttled intervals, steps + 1 = admit nothing (also when blocked).
    pub fn level(&self, erasures: u64) -> u32 {
        let Some(c) = self.cfg else { return 0 };
        if self.blocked {
            return c.steps + 1;
        }
        let b = self.allowance();
        let e = (erasures - self.erasures_at_start) as f64;
        if e <= b {
            return 0;
        }
        if e > c.slack * b {
            return c.steps + 1;
        }
        let width = (c.slack - 1.0) * b / c.steps as f64;
        // e in (b + (i-1) w, b + i w] -> step i.
        let i = ((e - b) / width).ceil() as u32;
        i.clamp(1, c.steps)
    }

    /// Whether a block may be written to flash now; `count` = its earlier accesses.
    pub fn admit(&self, kind: InsertKind, count: u32, erasures: u64) -> bool {
        let Some(c) = self.cfg else { return true };
        match self.level(erasures) {
            0 => true,
            l if l > c.steps => false,
            l => kind != InsertKind::ClientWrite && count + 1 >= l,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(q: f64) -> Gate {
        let cfg = TireConfig {
            quota: q,
            slack: 4.0,
            steps: 3,
            quantum_s: 300.0,
        };
        cfg.validate().unwrap();
        let mut g = Gate::new(Some(cfg), 300.0);
        g.tick(0.0, 0);
        g
    }

    #[test]
    fn steps_at_q_2q_3q_4q() {
        // q = 10, K = 4, 3 intervals: (10, 20], (20, 30], (30, 40].
        let g = gate(10.0);
        use InsertKind::*;
        for (e, level) in [
            (0, 0),
            (10, 0),
            (11, 1),
            (20, 1),
            (21, 2),
            (30, 2),
            (31, 3),
            (40, 3),
            (41, 4),
        ] {
            assert_eq!(g.level(e), level, "erasures {e}");
        }
        // At or under q: everything.
        assert!(g.admit(ClientWrite, 0, 10));
        // Interval 1: read misses and reinsertions, not client writes.
        assert!(!g.admit(ClientWrite, 9, 15));
        assert!(g.admit(ReadMiss, 0, 15));
        assert!(g.admit(Reinsertion, 0, 20));
        // Interval 2: access count >= 1.
        assert!(!g.admit(ReadMiss, 0, 25));
        assert!(g.admit(ReadMiss, 1, 25));
        // Interval 3: access count >= 2.
        assert!(!g.admit(Reinsertion, 1, 35));
        assert!(g.admit(Reinsertion, 2, 40));
        // Beyond K q: nothing.
        assert!(!g.admit(ReadMiss, 255, 41));
    }

    #[test]
    fn credit_carries_over_and_blocks() {
        let mut g = gate(10.0);
        // Quantum 0 uses 35 erasures: credit 10 + (10 - 35) = -15 -> quantum 1 blocked.
        g.tick(300.0, 35);
        assert_eq!(g.credit(), -15.0);
        assert!(!g.admit(InsertKind::ReadMiss, 255, 35));
        // Quantum 1 uses none: credit -5, still blocked; quantum 3 [900, 1200) is idle, so at
        // 1300 the credit is -5 + 10 (quantum 2) + 10 (idle quantum 3) = 15 > 0 -> open.
        g.tick(600.0, 35);
        assert_eq!(g.credit(), -5.0);
        assert!(!g.admit(InsertKind::ReadMiss, 255, 35));
        g.tick(1300.0, 35);
        assert_eq!(g.credit(), 15.0);
        assert!(g.admit(InsertKind::ClientWrite, 0, 35));
        assert_eq!(g.series.len(), 3);
        assert_eq!(g.series[0].erasures, 35);
        assert!(g.series[1].blocked);
        g.finish(40);
        assert_eq!(g.series.last().unwrap().erasures, 5);
    }

    #[test]
    fn overwrites_of_cached_blocks_pass_interval_1_new_writes_do_not() {
        // q = 10, K = 4, 3 intervals (credit 10 = q, so b = q).
        let g = gate(10.0);
        use InsertKind::*;
        assert_eq!(g.allowance(), 10.0);
        // Interval 1 (10, 20]: a write of a block not in the cache is refused, an overwrite of
        // a cached one is admitted whatever its count, as a read miss would be.
        assert!(!g.admit(ClientWrite, 9, 15));
        assert!(g.admit(Overwrite, 0, 15));
        // Intervals 2 and 3: overwrites need access count >= 1, 2 like read misses.
        assert!(!g.admit(Overwrite, 0, 25));
        assert!(g.admit(Overwrite, 1, 25));
        assert!(!g.admit(Overwrite, 1, 35));
        assert!(g.admit(Overwrite, 2, 35));
        assert!(!g.admit(Overwrite, 255, 41));
    }

    #[test]
    fn a_credit_below_q_scales_the_ladder_down() {
        // q = 10: quantum 0 uses 16 erasures -> credit 10 + (10 - 16) = 4 at quantum 1's
        // start, so b = min(10, 4) = 4: everything up to 4 erasures, then (4, 16] in three
        // intervals of width (4 - 1) x 4 / 3 = 4: (4, 8], (8, 12], (12, 16]; beyond K b = 16
        // nothing. (Table 1 as printed would admit everything up to 10 and stop at 40.)
        let mut g = gate(10.0);
        g.tick(300.0, 16);
        assert_eq!(g.credit(), 4.0);
        assert_eq!(g.allowance(), 4.0);
        use InsertKind::*;
        for (e, level) in [
            (0, 0),
            (4, 0),
            (5, 1),
            (8, 1),
            (9, 2),
            (12, 2),
            (13, 3),
            (16, 3),
            (17, 4),
        ] {
            assert_eq!(g.level(16 + e), level, "erasures {e} into quantum 1");
        }
        assert!(g.admit(ClientWrite, 0, 16 + 4));
        assert!(!g.admit(ClientWrite, 9, 16 + 5));
        assert!(g.admit(ReadMiss, 0, 16 + 5));
        assert!(!g.admit(ReadMiss, 0, 16 + 9));
        assert!(g.admit(Reinsertion, 1, 16 + 9));
        assert!(!g.admit(Overwrite, 1, 16 + 13));
        assert!(g.admit(Overwrite, 2, 16 + 16));
        assert!(!g.admit(ReadMiss, 255, 16 + 17));
        // Quantum 1 uses 6: credit 4 + (10 - 6) = 8; quantum 2 uses 0: credit 18. A credit
        // above q does not raise the allowance: b = q = 10 as in Table 1.
        g.tick(600.0, 22);
        assert_eq!(g.allowance(), 8.0);
        g.tick(900.0, 22);
        assert_eq!(g.credit(), 18.0);
        assert_eq!(g.allowance(), 10.0);
        assert_eq!(g.level(22 + 10), 0);
        assert_eq!(g.level(22 + 11), 1);
        assert_eq!(g.level(22 + 40), 3);
        assert_eq!(g.level(22 + 41), 4);
        // Without TIRE there is no allowance.
        assert_eq!(Gate::new(None, 300.0).allowance(), 0.0);
    }

    #[test]
    fn bad_quota() {
        let c = TireConfig {
            quota: 0.0,
            slack: 4.0,
            steps: 3,
            quantum_s: 300.0,
        };
        assert!(c.validate().unwrap_err().0.contains("quota must be > 0"));
        let c = TireConfig::from_epbpd(5.0, 288, 4.0, 3, 300.0);
        assert!((c.quota - 5.0).abs() < 1e-12);
    }
}
