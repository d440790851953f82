//! TIRE (Throttle Insertions and Reinsertions for Erasures, Pannier §3.1, Table 1): a
//! multi-step bang-bang controller that keeps flash erasures within a quota per quantum.
//!
//! Time is split into quanta (5 min). The erasure credit carries unused quota over:
//! `credit(t) = credit(t-1) + (q - E(t-1))`, where E is the erasures of the quantum. Within a
//! quantum, with `e` the erasures so far:
//!
//! | condition                  | admitted                                                |
//! |----------------------------|---------------------------------------------------------|
//! | credit <= 0 at its start   | nothing this quantum                                    |
//! | e <= q                     | everything                                              |
//! | (q, K q] in `steps` equal intervals: 1st | read misses and reinsertions, no client writes |
//! | 2nd, 3rd, ...              | read misses and reinsertions with access count >= 1, 2, ... |
//! | e > K q                    | nothing until the next quantum                          |
//!
//! Choices where the paper is silent, stated here once: the credit starts at one quantum's
//! quota (a credit of 0 would block the first quantum); the access count is the number of
//! earlier accesses of the block the ghost cache remembers (not counting the current one).

use crate::config::{err, SimError};

/// What is being written to flash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InsertKind {
    /// New data from a client write.
    ClientWrite,
    /// A block read from the backend after a read miss.
    ReadMiss,
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

    /// The step the controller is at with `erasures` so far: 0 = admit all, 1..=steps the
    /// throttled intervals, steps + 1 = admit nothing (also when blocked).
    pub fn level(&self, erasures: u64) -> u32 {
        let Some(c) = self.cfg else { return 0 };
        if self.blocked {
            return c.steps + 1;
        }
        let e = (erasures - self.erasures_at_start) as f64;
        if e <= c.quota {
            return 0;
        }
        if e > c.slack * c.quota {
            return c.steps + 1;
        }
        let width = (c.slack - 1.0) * c.quota / c.steps as f64;
        // e in (q + (i-1) w, q + i w] -> step i.
        let i = ((e - c.quota) / width).ceil() as u32;
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
