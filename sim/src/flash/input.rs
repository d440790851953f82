//! The simulator's inputs: the trace's columns, the policies' per-access arrays and the
//! partitioned mode's streams, each checked before a run.

use crate::core::config::{err, AdmissionKind, FlashConfig, PrefetchKind, SimError, WhenKind};

/// The canonical table's columns the simulator reads (borrowed, never copied).
#[derive(Debug, Clone, Copy)]
pub struct Trace<'a> {
    pub time: &'a [f64],
    pub key: &'a [u64],
    pub offset: &'a [u64],
    pub size: &'a [u64],
    pub op: &'a [u8],
}

impl Trace<'_> {
    /// The first column whose length is not `time`'s, as the error message naming it.
    pub fn mismatched_column(&self) -> Option<String> {
        let n = self.time.len();
        [
            ("key", self.key.len()),
            ("offset", self.offset.len()),
            ("size", self.size.len()),
            ("op", self.op.len()),
        ]
        .into_iter()
        .find(|&(_, len)| len != n)
        .map(|(name, len)| format!("column '{name}' has {len} rows but 'time' has {n}"))
    }
}

/// Per-access arrays for the policies that need them.
#[derive(Debug, Clone, Copy, Default)]
pub struct PolicyArrays<'a> {
    pub admit: Option<&'a [u8]>,
    pub score: Option<&'a [f64]>,
    /// Inclusive segment indices (a block has at most `i16::MAX` segments: 2 bytes an access
    /// where i64's 8 were 1.2 GB of a 100 M-access trace's scores).
    pub prefetch_start: Option<&'a [i16]>,
    pub prefetch_end: Option<&'a [i16]>,
    pub when_score: Option<&'a [f64]>,
}

/// The optional partitioned mode's inputs (module docs, "Partitioned mode"): `streams` (k)
/// partitions, the stream of every access, the intervals and each interval's shares.
#[derive(Debug, Clone, Copy)]
pub struct StreamPartition<'a> {
    /// The number of streams, k >= 1.
    pub streams: u32,
    /// Per access (GETs and PUTs alike): its stream, in 0..streams.
    pub stream: &'a [u32],
    /// Access indices where the intervals start: `bounds[0] == 0`, non-decreasing, each below
    /// the number of accesses; interval j covers accesses `bounds[j]..bounds[j+1]` (the last
    /// one to the end of the trace).
    pub bounds: &'a [u64],
    /// Interval j's share of the capacity for each stream: `bounds.len() x k`, row-major.
    pub shares: &'a [f64],
}

/// Check the partitioned mode's inputs against a trace of `n` accesses; O(n), no allocation.
pub fn validate_partition(n: usize, part: &StreamPartition) -> Result<(), SimError> {
    let streams = part.streams;
    if streams == 0 {
        return err("partitioned mode needs at least one stream ('streams' is 0)");
    }
    if part.stream.len() != n {
        return err(format!(
            "array 'stream' has {} elements but the trace has {n} accesses",
            part.stream.len()
        ));
    }
    if let Some((i, s)) = part.stream.iter().enumerate().find(|(_, &s)| s >= streams) {
        return err(format!(
            "array 'stream': access {i} has stream {s}, but there are {streams} streams (0..{streams})"
        ));
    }
    let b = part.bounds;
    match b.first() {
        None => return err("array 'bounds' is empty; it needs at least the first interval's start, 0"),
        Some(&b0) if b0 != 0 => {
            return err(format!(
                "array 'bounds' must start at 0 (the first interval starts with the first access), got {b0}"
            ))
        }
        Some(_) => {}
    }
    if let Some(j) = (1..b.len()).find(|&j| b[j] < b[j - 1]) {
        return err(format!(
            "array 'bounds' must be ascending: bounds[{j}] = {} is below bounds[{}] = {}",
            b[j],
            j - 1,
            b[j - 1]
        ));
    }
    let last = b[b.len() - 1];
    if last >= n as u64 {
        return err(format!(
            "array 'bounds': bounds[{}] = {last} is not below the trace's {n} accesses",
            b.len() - 1
        ));
    }
    let want = b.len() as u128 * streams as u128;
    if part.shares.len() as u128 != want {
        return err(format!(
            "array 'shares' has {} elements but intervals x streams = {} x {streams} = {want}",
            part.shares.len(),
            b.len()
        ));
    }
    Ok(())
}

const MAX_WINDOWS: f64 = 1e7;

fn check_len<T>(name: &str, a: Option<&[T]>, n: usize, needed_by: &str) -> Result<(), SimError> {
    match a {
        None => err(format!("{needed_by} needs the per-access array '{name}'")),
        Some(a) if a.len() != n => err(format!(
            "array '{name}' has {} elements but the trace has {n} accesses",
            a.len()
        )),
        Some(_) => Ok(()),
    }
}

/// Check the trace and the arrays against the config; O(n), no allocation.
pub fn validate(trace: &Trace, arrays: &PolicyArrays, cfg: &FlashConfig) -> Result<(), SimError> {
    cfg.validate()?;
    let n = trace.time.len();
    if n == 0 {
        return err("the trace has no accesses");
    }
    if let Some(msg) = trace.mismatched_column() {
        return err(msg);
    }
    // Arrays given but unused must still agree in length (they are probably a mistake else).
    for (name, len) in [
        ("admit", arrays.admit.map(|a| a.len())),
        ("score", arrays.score.map(|a| a.len())),
        ("prefetch_start", arrays.prefetch_start.map(|a| a.len())),
        ("prefetch_end", arrays.prefetch_end.map(|a| a.len())),
        ("when_score", arrays.when_score.map(|a| a.len())),
    ] {
        if let Some(len) = len {
            if len != n {
                return err(format!(
                    "array '{name}' has {len} elements but the trace has {n} accesses"
                ));
            }
        }
    }
    match cfg.admission {
        AdmissionKind::Opt => check_len("admit", arrays.admit, n, "admission 'opt'")?,
        AdmissionKind::Threshold { .. } => {
            check_len("score", arrays.score, n, "admission 'threshold'")?
        }
        _ => {}
    }
    if cfg.prefetch == PrefetchKind::Range {
        check_len(
            "prefetch_start",
            arrays.prefetch_start,
            n,
            "prefetch 'range'",
        )?;
        check_len("prefetch_end", arrays.prefetch_end, n, "prefetch 'range'")?;
    }
    if matches!(cfg.prefetch_when, WhenKind::Score { .. }) && cfg.prefetch != PrefetchKind::None {
        check_len("when_score", arrays.when_score, n, "prefetch-when 'score'")?;
    }
    let mut prev = f64::NEG_INFINITY;
    for i in 0..n {
        let t = trace.time[i];
        if !t.is_finite() {
            return err(format!("access {i}: time is not finite ({t})"));
        }
        if t < prev {
            return err(format!("access {i}: time {t} is earlier than the previous access ({prev}); the trace must be sorted by time"));
        }
        prev = t;
        let size = trace.size[i];
        if size == 0 {
            return err(format!("access {i}: size is 0"));
        }
        match trace.offset[i].checked_add(size) {
            Some(end) if end <= cfg.block_bytes => {}
            _ => {
                return err(format!(
                    "access {i}: offset {} + size {size} exceeds the block size {}",
                    trace.offset[i], cfg.block_bytes
                ))
            }
        }
    }
    let span = trace.time[n - 1] - trace.time[0];
    if span <= 0.0 {
        return err("the trace spans 0 seconds: rates are undefined");
    }
    if span / cfg.window_s >= MAX_WINDOWS {
        return err(format!(
            "the trace spans {span} s, too many {} s windows",
            cfg.window_s
        ));
    }
    let windows = (span / cfg.window_s).floor() as u64 + 1;
    let measured = (0..windows).any(|k| k as f64 * cfg.window_s >= cfg.warmup_s);
    if !measured {
        return err(format!(
            "the trace spans {span} s, no window starts after the {} s warm-up; use a shorter warm-up (--warmup-s)",
            cfg.warmup_s
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flash::testing::{rows, run, run_part, tiny, SEG};

    #[test]
    fn errors_not_panics() {
        let good = rows(&[(0.0, 1, 0, SEG, 1), (1.0, 1, 0, SEG, 1)]);
        let none = PolicyArrays::default();
        assert!(run(
            &good,
            &FlashConfig {
                warmup_s: 5.0,
                ..tiny()
            },
            &none
        )
        .is_err());
        let opt = FlashConfig {
            admission: AdmissionKind::Opt,
            ..tiny()
        };
        assert!(run(&good, &opt, &none).unwrap_err().0.contains("'admit'"));
        let short = [1u8];
        let a = PolicyArrays {
            admit: Some(&short),
            ..Default::default()
        };
        assert!(run(&good, &opt, &a).unwrap_err().0.contains("1 elements"));
        let unsorted = rows(&[(1.0, 1, 0, SEG, 1), (0.0, 1, 0, SEG, 1)]);
        assert!(run(&unsorted, &tiny(), &none).is_err());
        let too_big = rows(&[(0.0, 1, 8 << 20, 1, 1), (1.0, 1, 0, SEG, 1)]);
        assert!(run(&too_big, &tiny(), &none).is_err());
        let empty = rows(&[]);
        assert!(run(&empty, &tiny(), &none).is_err());
    }
    #[test]
    fn partition_errors_name_the_array() {
        let r = rows(&[
            (0.0, 1, 0, SEG, 1),
            (1.0, 1, 0, SEG, 1),
            (2.0, 2, 0, SEG, 1),
        ]);
        let cfg = tiny();
        let e = |stream: &[u32], bounds: &[u64], shares: &[f64], streams: u32| {
            run_part(&r, &cfg, stream, bounds, shares, streams)
                .unwrap_err()
                .0
        };
        let ok_shares = [0.5, 0.5];
        assert!(e(&[0, 0], &[0], &ok_shares, 2).contains("array 'stream' has 2 elements"));
        assert!(e(&[0, 2, 0], &[0], &ok_shares, 2).contains("array 'stream': access 1"));
        assert!(e(&[0, 1, 0], &[], &[], 2).contains("array 'bounds' is empty"));
        assert!(e(&[0, 1, 0], &[1], &ok_shares, 2).contains("array 'bounds' must start at 0"));
        let four = [0.5; 6];
        assert!(e(&[0, 1, 0], &[0, 2, 1], &four, 2).contains("array 'bounds' must be ascending"));
        assert!(e(&[0, 1, 0], &[0, 3], &[0.5; 4], 2).contains("not below the trace's 3"));
        assert!(e(&[0, 1, 0], &[0, 1], &ok_shares, 2).contains("array 'shares' has 2 elements"));
        assert!(e(&[0, 0, 0], &[0], &[], 0).contains("at least one stream"));
        // the trace's own checks come first
        let bad = FlashConfig {
            warmup_s: 100.0,
            ..tiny()
        };
        assert!(run_part(&r, &bad, &[0, 1, 0], &[0], &ok_shares, 2).is_err());
        // valid: equal bounds make an empty interval
        assert!(run_part(&r, &cfg, &[0, 1, 0], &[0, 1, 1], &four, 2).is_ok());
    }
}
