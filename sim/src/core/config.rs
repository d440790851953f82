//! Simulator configuration: `sim_params!` is the one declaration of every config key, its
//! type, default and doc; Python's `SimConfig` is generated from it (flashml/simulation.py).

use std::fmt;

#[derive(Debug, Clone, PartialEq)]
pub struct SimError(pub String);

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SimError {}

pub fn err<T>(msg: impl Into<String>) -> Result<T, SimError> {
    Err(SimError(msg.into()))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvictionKind {
    Lru,
    Fifo,
}

impl EvictionKind {
    /// The name `parse` reads.
    pub fn name(self) -> &'static str {
        match self {
            EvictionKind::Lru => "lru",
            EvictionKind::Fifo => "fifo",
        }
    }

    pub fn parse(s: &str) -> Result<Self, SimError> {
        match s.to_ascii_lowercase().as_str() {
            "lru" => Ok(EvictionKind::Lru),
            "fifo" => Ok(EvictionKind::Fifo),
            _ => err(format!(
                "unknown eviction policy {s:?}; {}",
                one_of(&EVICTIONS)
            )),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AdmissionKind {
    AdmitAll,
    CoinFlip {
        p: f64,
        seed: u64,
    },
    /// The artifact's RejectX: history keyed by (block, segment), asked per missed segment.
    RejectX {
        x: u32,
        factor: f64,
    },
    /// RejectX keyed by block, asked once per miss (`admission::RejectXBlock`).
    RejectXBlock {
        x: u32,
        factor: f64,
    },
    /// Per-access admit flags.
    Opt,
    /// Per-access scores; admit iff score >= the threshold at the access's hour
    /// (`PeakSchedule::threshold_at`).
    Threshold {
        threshold: f64,
        peak: PeakSchedule,
    },
}

/// Peak-aware admission (Baleen §3.1 leaves "optimising for peak" to future work): in the
/// listed hours of the day (UTC, of the trace's clock) the admission threshold is lowered by
/// `bonus`, so more of the write budget is spent while the disks are busiest. The empty
/// schedule (`hours == 0`) is a flat threshold. The same rule is compiled into the policy .so
/// (`flashml_policy_decide_at`) and used by the C runtime.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PeakSchedule {
    /// Bit h set: hour h (0..24) of the day is a peak hour.
    pub hours: u32,
    /// How much lower the threshold is in peak hours, in [0, 1].
    pub bonus: f64,
}

impl PeakSchedule {
    /// Hour of the day (0..24, UTC) of a trace time in seconds.
    #[inline]
    pub fn hour_of_day(t: f64) -> u32 {
        (t.rem_euclid(86_400.0) / 3_600.0) as u32
    }

    /// The admission threshold at time `t`: `threshold - bonus` in a peak hour, else
    /// `threshold` (the same expression, in the same doubles, everywhere it is used).
    #[inline]
    pub fn threshold_at(&self, threshold: f64, t: f64) -> f64 {
        if self.hours == 0 {
            return threshold; // a flat schedule: no fmod per request (7% of a simulation)
        }
        let h = Self::hour_of_day(t);
        if h < 24 && (self.hours >> h) & 1 == 1 {
            threshold - self.bonus
        } else {
            threshold
        }
    }

    pub fn validate(&self) -> Result<(), SimError> {
        if self.hours >> 24 != 0 {
            return err(format!(
                "peak hours must be in 0..24, got mask {:#x}",
                self.hours
            ));
        }
        in_unit("peak bonus", self.bonus)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrefetchKind {
    None,
    Block,
    /// Per-access ranges (start, end), inclusive segment indices.
    Range,
}

impl PrefetchKind {
    pub fn parse(s: &str) -> Result<Self, SimError> {
        match s.to_ascii_lowercase().as_str() {
            "none" => Ok(PrefetchKind::None),
            "block" => Ok(PrefetchKind::Block),
            "range" => Ok(PrefetchKind::Range),
            _ => err(format!(
                "unknown prefetch policy {s:?}; {}",
                one_of(&PREFETCHES)
            )),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum WhenKind {
    Miss,
    PartialHit,
    /// Per-access "when" scores; prefetch iff score >= threshold.
    Score {
        threshold: f64,
    },
}

/// The one declaration of the simulator's configuration: every key Python passes (flat,
/// string-valued where Rust has an enum), its Rust type, its default and its doc. It calls
/// `$m!` with the field list, so each consumer generates its code from the same list:
/// [`SimParams`], its `Default` and [`PARAM_FIELDS`] here, the Python dict conversions and
/// `flashml_sim.config_fields()` in `python/mod.rs`, and from those the Python `SimConfig`
/// dataclass (flashml/simulation.py). Field syntax:
/// `/// doc` `name: Type = default_expr` optionally `, one of CHOICES` (a `[&str; N]`), then `;`.
///
/// Defaults that are also Python units (segment and block size, the disk model, the
/// artifact's cache size, disks, window, warm-up, sample ratio) are declared here;
/// flashml/config.py keeps the same values for the Python code that must not import the
/// extension, and flashml/simulation.py checks at import that the two agree.
macro_rules! sim_params {
    ($m:ident) => {
        $m! {
            /// Full-node cache size in GB (2^30 bytes, as the artifact computes it).
            cache_gb: f64 = 366.475;
            /// Percent of the full node's traffic in the trace, in (0, 100].
            sample_ratio: f64 = 100.0;
            /// If > 0, the cache capacity in segments at trace scale (overrides cache_gb).
            capacity_segments: u64 = 0;
            /// Eviction policy.
            eviction: String = String::from("lru"), one of EVICTIONS;
            /// Every GET refreshes the recency of all cached segments of its block.
            block_level_recency: bool = true;
            /// Admission policy (opt reads the per-access array `admit`, threshold reads
            /// `score`).
            admission: String = String::from("admitall"), one of ADMISSIONS;
            /// CoinFlip: probability of admitting a miss.
            coinflip_p: f64 = 0.5;
            /// CoinFlip: seed of its random stream.
            coinflip_seed: u64 = 0;
            /// RejectX: admit a key (a block's segment; a block for rejectx_block) once it was
            /// seen x times before within the history.
            rejectx_x: u32 = 1;
            /// RejectX: history length in keys as a multiple of the capacity in segments
            /// (the artifact's default 2).
            rejectx_factor: f64 = 2.0;
            /// Threshold admission: admit iff score >= threshold, in [0, 1].
            threshold: f64 = 0.5;
            /// Peak-aware admission: in these hours of the day (0..24, UTC) the threshold is
            /// `threshold - peak_bonus` (PeakSchedule).
            peak_hours: Vec<u32> = Vec::new();
            /// How much lower the threshold is in peak hours, in [0, 1].
            peak_bonus: f64 = 0.0;
            /// Prefetch policy (range reads `prefetch_start` and `prefetch_end`).
            prefetch: String = String::from("none"), one of PREFETCHES;
            /// When to prefetch (score reads `when_score`).
            prefetch_when: String = String::from("miss"), one of PREFETCH_WHENS;
            /// Prefetch-when score: prefetch iff score >= when_threshold, in [0, 1].
            when_threshold: f64 = 0.5;
            /// Segment size in bytes (the unit of caching).
            segment_bytes: u64 = 128 * 1024;
            /// Block size in bytes, a multiple of segment_bytes.
            block_bytes: u64 = 8 * 1024 * 1024;
            /// Disk seek time per backend IO in seconds.
            t_seek_s: f64 = 11.5e-3;
            /// Disk bandwidth in bytes per second.
            bandwidth_bytes_per_s: f64 = 143.0 * 1024.0 * 1024.0;
            /// Backend disks at full-node scale.
            disks: u32 = 36;
            /// Length of a disk-time window in seconds.
            window_s: f64 = 600.0;
            /// Seconds at the start of the trace that are simulated but not measured.
            warmup_s: f64 = 86_400.0;
            /// Op codes that are PUTs (charged disk time, never admitted); all other ops are
            /// GETs. Equal to flashml.config.PUT_OPS (checked at import).
            put_ops: Vec<u32> = vec![3, 4, 6];
        }
    };
}

#[cfg(feature = "python")]
pub(crate) use sim_params;

/// The name, type, doc and choices of a field of [`SimParams`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParamField {
    pub name: &'static str,
    /// The Python type: int, float, bool, str or tuple[int, ...].
    pub py_type: &'static str,
    /// The doc comment, one line per source line.
    pub doc: &'static str,
    /// The accepted values of a string field (empty for other fields).
    pub choices: &'static [&'static str],
}

/// The Python type of a field's Rust type (what `flashml_sim.config_fields()` reports).
pub trait ParamType {
    const PY_TYPE: &'static str;
}

macro_rules! param_types {
    ($($t:ty => $py:literal),* $(,)?) => {
        $(impl ParamType for $t {
            const PY_TYPE: &'static str = $py;
        })*
    };
}

param_types!(f64 => "float", u64 => "int", u32 => "int", bool => "bool", String => "str",
    Vec<u32> => "tuple[int, ...]");

/// A field's choices as a slice (none if it has no `one of`).
macro_rules! choices_of {
    () => {
        &[]
    };
    ($c:expr) => {
        &$c
    };
}

macro_rules! declare_params {
    ($($(#[doc = $doc:literal])* $name:ident: $ty:ty = $default:expr $(, one of $choices:expr)?;)*) => {
        /// The simulator's configuration as Python gives it: flat, with string-valued
        /// policies (declared once, in `sim_params!`). [`SimParams::build`] validates it
        /// into the [`FlashConfig`] the simulator runs with.
        #[derive(Debug, Clone, PartialEq)]
        pub struct SimParams {
            $($(#[doc = $doc])* pub $name: $ty,)*
        }

        impl Default for SimParams {
            fn default() -> Self {
                SimParams {
                    $($name: $default,)*
                }
            }
        }

        /// Every field of [`SimParams`], in declaration order.
        pub const PARAM_FIELDS: &[ParamField] = &[$(ParamField {
            name: stringify!($name),
            py_type: <$ty as ParamType>::PY_TYPE,
            doc: concat!($($doc, "\n"),*),
            choices: choices_of!($($choices)?),
        }),*];
    };
}

pub const EVICTIONS: [&str; 2] = ["lru", "fifo"];
pub const ADMISSIONS: [&str; 6] = [
    "admitall",
    "coinflip",
    "rejectx",
    "rejectx_block",
    "opt",
    "threshold",
];
pub const PREFETCHES: [&str; 3] = ["none", "block", "range"];
pub const PREFETCH_WHENS: [&str; 3] = ["miss", "partial", "score"];

sim_params!(declare_params);

/// The validated configuration the simulator runs with: [`SimParams`] with its policies
/// parsed into enums, the peak hours into a bit mask and the op codes into bytes. The plain
/// fields are copied from [`SimParams`] (their meaning and defaults are documented there);
/// `FlashConfig::default()` is `SimParams::default().build()`.
#[derive(Debug, Clone, PartialEq)]
pub struct FlashConfig {
    pub segment_bytes: u64,
    pub block_bytes: u64,
    pub t_seek_s: f64,
    pub bandwidth_bytes_per_s: f64,
    pub disks: u32,
    pub window_s: f64,
    pub warmup_s: f64,
    pub sample_ratio: f64,
    pub cache_gb: f64,
    pub capacity_segments: u64,
    pub eviction: EvictionKind,
    pub block_level_recency: bool,
    pub admission: AdmissionKind,
    pub prefetch: PrefetchKind,
    pub prefetch_when: WhenKind,
    pub put_ops: Vec<u8>,
}

pub const GIB: f64 = 1_073_741_824.0;

impl Default for FlashConfig {
    fn default() -> Self {
        SimParams::default()
            .build()
            .expect("the declared defaults are a valid configuration")
    }
}

/// "expected one of a, b, c" for an error message.
fn one_of(names: &[&str]) -> String {
    format!("expected one of {}", names.join(", "))
}

/// The bit mask of a list of hours of the day.
fn peak_mask(hours: &[u32]) -> Result<u32, SimError> {
    hours.iter().try_fold(0u32, |m, &h| {
        if h < 24 {
            Ok(m | 1 << h)
        } else {
            err(format!("peak hours must be in 0..24, got {h}"))
        }
    })
}

impl SimParams {
    /// The validated [`FlashConfig`] of these parameters (an error names the bad key).
    pub fn build(&self) -> Result<FlashConfig, SimError> {
        let admission = match self.admission.to_ascii_lowercase().as_str() {
            "admitall" => AdmissionKind::AdmitAll,
            "coinflip" => AdmissionKind::CoinFlip {
                p: self.coinflip_p,
                seed: self.coinflip_seed,
            },
            "rejectx" => AdmissionKind::RejectX {
                x: self.rejectx_x,
                factor: self.rejectx_factor,
            },
            "rejectx_block" => AdmissionKind::RejectXBlock {
                x: self.rejectx_x,
                factor: self.rejectx_factor,
            },
            "opt" => AdmissionKind::Opt,
            "threshold" => AdmissionKind::Threshold {
                threshold: self.threshold,
                peak: PeakSchedule {
                    hours: peak_mask(&self.peak_hours)?,
                    bonus: self.peak_bonus,
                },
            },
            other => {
                return err(format!(
                    "unknown admission policy {other:?}; {}",
                    one_of(&ADMISSIONS)
                ))
            }
        };
        let prefetch_when = match self.prefetch_when.to_ascii_lowercase().as_str() {
            "miss" => WhenKind::Miss,
            "partial" => WhenKind::PartialHit,
            "score" => WhenKind::Score {
                threshold: self.when_threshold,
            },
            other => {
                return err(format!(
                    "unknown prefetch-when {other:?}; {}",
                    one_of(&PREFETCH_WHENS)
                ))
            }
        };
        let put_ops = self
            .put_ops
            .iter()
            .map(|&o| {
                u8::try_from(o).map_err(|_| SimError(format!("put_ops: op code {o} is not a byte")))
            })
            .collect::<Result<Vec<u8>, SimError>>()?;
        let c = FlashConfig {
            segment_bytes: self.segment_bytes,
            block_bytes: self.block_bytes,
            t_seek_s: self.t_seek_s,
            bandwidth_bytes_per_s: self.bandwidth_bytes_per_s,
            disks: self.disks,
            window_s: self.window_s,
            warmup_s: self.warmup_s,
            sample_ratio: self.sample_ratio,
            cache_gb: self.cache_gb,
            capacity_segments: self.capacity_segments,
            eviction: EvictionKind::parse(&self.eviction)?,
            block_level_recency: self.block_level_recency,
            admission,
            prefetch: PrefetchKind::parse(&self.prefetch)?,
            prefetch_when,
            put_ops,
        };
        c.validate()?;
        Ok(c)
    }
}

fn in_unit(name: &str, v: f64) -> Result<(), SimError> {
    if !(0.0..=1.0).contains(&v) {
        return err(format!("{name} must be in [0, 1], got {v}"));
    }
    Ok(())
}

impl FlashConfig {
    pub fn segments_per_block(&self) -> u32 {
        (self.block_bytes / self.segment_bytes) as u32
    }

    /// Cache capacity in segments at trace scale:
    /// floor(cache_gb * 2^30 * sample_ratio/100 / segment_bytes), unless given directly.
    pub fn capacity(&self) -> u64 {
        if self.capacity_segments > 0 {
            return self.capacity_segments;
        }
        let c = self.cache_gb * GIB * (self.sample_ratio / 100.0) / self.segment_bytes as f64;
        if c.is_finite() && c >= 1.0 {
            c.floor() as u64
        } else {
            0
        }
    }

    /// Segment-time: seconds to transfer one segment.
    pub fn segment_time(&self) -> f64 {
        self.segment_bytes as f64 / self.bandwidth_bytes_per_s
    }

    pub fn validate(&self) -> Result<(), SimError> {
        if self.segment_bytes == 0 {
            return err("segment_bytes must be > 0");
        }
        if self.block_bytes == 0 || !self.block_bytes.is_multiple_of(self.segment_bytes) {
            return err(format!(
                "block_bytes ({}) must be a positive multiple of segment_bytes ({})",
                self.block_bytes, self.segment_bytes
            ));
        }
        if self.block_bytes / self.segment_bytes > 1 << 20 {
            return err("block_bytes / segment_bytes must be at most 2^20 segments per block");
        }
        if !(self.t_seek_s.is_finite() && self.t_seek_s >= 0.0) {
            return err(format!("t_seek_s must be >= 0, got {}", self.t_seek_s));
        }
        if !(self.bandwidth_bytes_per_s.is_finite() && self.bandwidth_bytes_per_s > 0.0) {
            return err(format!(
                "bandwidth must be > 0, got {}",
                self.bandwidth_bytes_per_s
            ));
        }
        if self.disks == 0 {
            return err("disks must be > 0");
        }
        if !(self.window_s.is_finite() && self.window_s > 0.0) {
            return err(format!("window_s must be > 0, got {}", self.window_s));
        }
        if !(self.warmup_s.is_finite() && self.warmup_s >= 0.0) {
            return err(format!("warmup_s must be >= 0, got {}", self.warmup_s));
        }
        if !(self.sample_ratio > 0.0 && self.sample_ratio <= 100.0) {
            return err(format!(
                "sample_ratio must be in (0, 100] percent, got {}",
                self.sample_ratio
            ));
        }
        if self.capacity_segments == 0 && !(self.cache_gb.is_finite() && self.cache_gb > 0.0) {
            return err(format!("cache size must be > 0 GB, got {}", self.cache_gb));
        }
        let cap = self.capacity();
        if cap == 0 {
            return err(format!(
                "cache of {} GB at sample ratio {}% holds less than one {}-byte segment",
                self.cache_gb, self.sample_ratio, self.segment_bytes
            ));
        }
        let units = if self.eviction == EvictionKind::Lru && self.block_level_recency {
            cap
        } else {
            cap.saturating_mul(self.segments_per_block() as u64)
        };
        if units >= u32::MAX as u64 {
            return err(format!(
                "cache capacity of {cap} segments is too large for one simulator"
            ));
        }
        match self.admission {
            AdmissionKind::CoinFlip { p, .. } => in_unit("coinflip p", p)?,
            AdmissionKind::RejectX { factor, .. } | AdmissionKind::RejectXBlock { factor, .. } => {
                if !(factor.is_finite() && factor > 0.0) {
                    return err(format!("rejectx history factor must be > 0, got {factor}"));
                }
                if (factor * cap as f64) > 1e10 {
                    return err("rejectx history (factor x capacity) is too large");
                }
            }
            AdmissionKind::Threshold { threshold, peak } => {
                in_unit("admission threshold", threshold)?;
                peak.validate()?;
            }
            AdmissionKind::AdmitAll | AdmissionKind::Opt => {}
        }
        if let WhenKind::Score { threshold } = self.prefetch_when {
            in_unit("prefetch-when threshold", threshold)?;
        }
        Ok(())
    }

    /// RejectX's history window in keys, factor x capacity (a real number: the artifact's
    /// test is `len >= window`).
    pub fn rejectx_window(&self) -> f64 {
        match self.admission {
            AdmissionKind::RejectX { factor, .. } | AdmissionKind::RejectXBlock { factor, .. } => {
                factor * self.capacity() as f64
            }
            _ => 0.0,
        }
    }

    /// RejectX history length in keys: the most keys it holds, ceil(window) for the
    /// artifact's RejectX, max(1, floor(window)) for rejectx_block (plus its dithering).
    pub fn rejectx_history(&self) -> usize {
        match self.admission {
            AdmissionKind::RejectX { .. } => (self.rejectx_window().ceil() as usize).max(1),
            AdmissionKind::RejectXBlock { .. } => (self.rejectx_window().floor() as usize).max(1),
            _ => 0,
        }
    }

    /// The fractional part of factor * capacity (0 below one key): the share of RejectX
    /// queries that look one key further back (see `admission::RejectX`).
    pub fn rejectx_fraction(&self) -> f64 {
        match self.admission {
            AdmissionKind::RejectXBlock { factor, .. } => {
                let h = factor * self.capacity() as f64;
                if h < 1.0 {
                    0.0
                } else {
                    h - h.floor()
                }
            }
            _ => 0.0,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapacityUnit {
    Bytes,
    Objects,
}

impl CapacityUnit {
    /// What a request of `raw_size` bytes occupies in this unit (objects: 1).
    #[inline]
    pub fn charge(self, raw_size: u64) -> u64 {
        match self {
            CapacityUnit::Bytes => raw_size,
            CapacityUnit::Objects => 1,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectConfig {
    pub eviction: EvictionKind,
    pub capacity: u64,
    pub unit: CapacityUnit,
}

impl ObjectConfig {
    pub fn validate(&self) -> Result<(), SimError> {
        if self.capacity == 0 {
            return err("capacity must be > 0");
        }
        if self.unit == CapacityUnit::Objects && self.capacity >= u32::MAX as u64 {
            return err("object-count capacity must be < 2^32");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn artifact_capacity() {
        let c = FlashConfig {
            sample_ratio: 0.1,
            ..Default::default()
        };
        assert_eq!(c.capacity(), 3002);
        assert_eq!(c.segments_per_block(), 64);
        c.validate().unwrap();
    }

    #[test]
    fn declared_fields() {
        let d = SimParams::default();
        assert_eq!(FlashConfig::default(), d.build().unwrap());
        let names: Vec<&str> = PARAM_FIELDS.iter().map(|f| f.name).collect();
        for (i, f) in PARAM_FIELDS.iter().enumerate() {
            assert!(!names[..i].contains(&f.name), "{} declared twice", f.name);
            assert!(!f.doc.trim().is_empty(), "{} has no doc", f.name);
            assert_eq!(f.choices.is_empty(), f.py_type != "str", "{}", f.name);
        }
        let field = |n: &str| PARAM_FIELDS.iter().find(|f| f.name == n).unwrap();
        assert_eq!(field("disks").py_type, "int");
        assert_eq!(field("put_ops").py_type, "tuple[int, ...]");
        // every declared choice parses (and builds, given the arrays it needs at run time)
        type Access = fn(&mut SimParams) -> &mut String;
        let strings: [(&str, Access); 4] = [
            ("eviction", |p| &mut p.eviction),
            ("admission", |p| &mut p.admission),
            ("prefetch", |p| &mut p.prefetch),
            ("prefetch_when", |p| &mut p.prefetch_when),
        ];
        for (key, value) in strings {
            for &c in field(key).choices {
                let mut p = d.clone();
                *value(&mut p) = c.into();
                p.build().unwrap_or_else(|e| panic!("{key}={c}: {e}"));
                *value(&mut p) = c.to_ascii_uppercase();
                assert!(p.build().is_ok(), "{key}={c} (upper case)");
                *value(&mut p) = "nonsense".into();
                let e = p.build().unwrap_err().0;
                assert!(e.contains("expected one of") && e.contains(c), "{e}");
            }
        }
        let bad_op = SimParams {
            put_ops: vec![3, 256],
            ..d.clone()
        };
        assert!(bad_op.build().unwrap_err().0.contains("put_ops"));
        let peak = SimParams {
            admission: "threshold".into(),
            peak_hours: vec![0, 23],
            peak_bonus: 0.1,
            ..d.clone()
        };
        let want = PeakSchedule {
            hours: 1 | 1 << 23,
            bonus: 0.1,
        };
        assert!(matches!(peak.build().unwrap().admission,
            AdmissionKind::Threshold { peak, .. } if peak == want));
        let bad_hour = SimParams {
            peak_hours: vec![24],
            ..peak
        };
        assert!(bad_hour.build().unwrap_err().0.contains("0..24"));
    }

    #[test]
    fn bad_configs() {
        let bad = [
            FlashConfig {
                cache_gb: 0.0,
                ..Default::default()
            },
            FlashConfig {
                cache_gb: -1.0,
                ..Default::default()
            },
            FlashConfig {
                cache_gb: 1e-9,
                ..Default::default()
            },
            FlashConfig {
                sample_ratio: 0.0,
                ..Default::default()
            },
            FlashConfig {
                block_bytes: 1000,
                ..Default::default()
            },
            FlashConfig {
                window_s: 0.0,
                ..Default::default()
            },
            FlashConfig {
                admission: AdmissionKind::Threshold {
                    threshold: 1.5,
                    peak: PeakSchedule::default(),
                },
                ..Default::default()
            },
            FlashConfig {
                admission: AdmissionKind::CoinFlip {
                    p: f64::NAN,
                    seed: 0,
                },
                ..Default::default()
            },
            FlashConfig {
                admission: AdmissionKind::RejectX { x: 1, factor: 0.0 },
                ..Default::default()
            },
            FlashConfig {
                prefetch_when: WhenKind::Score { threshold: -0.1 },
                ..Default::default()
            },
        ];
        for c in bad {
            assert!(c.validate().is_err(), "{c:?}");
        }
        assert!(EvictionKind::parse("lfu").is_err());
        assert!(PrefetchKind::parse("x").is_err());
    }
}
