//! Algorithm 1's knobs and its threshold controller.

use crate::core::config::{err, SimError};
use crate::mat::lrb_features::check_memory_window;
use crate::mat::settings;

/// How the threshold controller moves T after each eviction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Controller {
    /// Algorithm 1's rule: r = the try that found the victim (L + 1 on exhaustion);
    /// T *= 1 + delta if r < k, T *= 1 - delta if r > k. It balances the evictions that take
    /// fewer tries than k against those that take more, so with a long tail of tries the
    /// mean number of predictions lies above k (2.9-3.1 at k ~2.4 on CloudPhysics).
    #[default]
    Sign,
    /// The rule's stated aim, "the average number of predictions per eviction stays at k":
    /// T *= 1 + delta (k - p), p = the candidates taken (L on exhaustion); T stops moving
    /// (in the mean of log T) when the mean of p is k. The same direction as `Sign` at every
    /// eviction, a step in proportion to the miss of the target.
    Mean,
}

impl Controller {
    /// Its number in the policy ABI (`flashml_evict_controller`) and the bundles: its place
    /// in the declared choices (`settings::CONTROLLER_CHOICES`: 0 sign, 1 mean).
    pub fn code(self) -> u32 {
        match self {
            Controller::Sign => 0,
            Controller::Mean => 1,
        }
    }
    pub fn from_code(code: i64) -> Result<Self, SimError> {
        match code {
            0 => Ok(Controller::Sign),
            1 => Ok(Controller::Mean),
            _ => err(format!(
                "controller must be 0 (sign) or 1 (mean), got {code}"
            )),
        }
    }
    /// Its name in Python and the bundles (`from_name`'s inverse).
    pub fn name(self) -> &'static str {
        settings::CONTROLLER_CHOICES[self.code() as usize]
    }
    pub fn from_name(name: &str) -> Result<Self, SimError> {
        match settings::CONTROLLER_CHOICES.iter().position(|c| *c == name) {
            Some(i) => Self::from_code(i as i64),
            None => err(format!(
                "controller must be one of {}, got {name:?}",
                settings::CONTROLLER_CHOICES.join(", ")
            )),
        }
    }
    /// The declared default (`settings::CONTROLLER`).
    pub fn default_choice() -> Self {
        Self::from_name(settings::CONTROLLER).expect("settings.toml declares a controller")
    }
    /// What a loader takes for a .so without `flashml_evict_controller`.
    pub fn legacy() -> Self {
        Self::from_name(settings::CONTROLLER_LEGACY).expect("settings.toml declares a controller")
    }
}

/// Algorithm 1's knobs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MatParams {
    /// Target predictions per eviction (paper: 2).
    pub k: f64,
    /// L: at most this many candidates per eviction (paper: 10).
    pub max_candidates: u32,
    /// Threshold step (paper: 1e-4).
    pub delta: f64,
    /// How T moves (paper: `Sign`).
    pub controller: Controller,
    /// Keep each candidate's predicted distance until the object's next access and judge it
    /// by that when it comes to the tail again (the paper's recorded predictions, §4.6);
    /// false: a prediction per candidate taken (Algorithm 1 as written).
    pub reuse_predictions: bool,
    /// T0 in logical requests; `None`: the number of cached objects at the first eviction.
    pub initial_threshold: Option<f64>,
    /// The contract's memory window (labels, forgetting, features).
    pub memory_window: u64,
    pub collect_samples: bool,
    /// Record every victim as (logical time of the miss, key) in [`MatResult::victims`]
    /// (comparing decision sequences, e.g. with the C runtime); changes no decision.
    ///
    /// [`MatResult::victims`]: crate::mat::MatResult::victims
    pub record_victims: bool,
}

impl Default for MatParams {
    fn default() -> Self {
        MatParams {
            k: settings::K,
            max_candidates: settings::MAX_CANDIDATES as u32,
            delta: settings::DELTA,
            controller: Controller::default_choice(),
            reuse_predictions: settings::REUSE_PREDICTIONS,
            initial_threshold: (settings::INITIAL_THRESHOLD > 0.0)
                .then_some(settings::INITIAL_THRESHOLD),
            memory_window: settings::MEMORY_WINDOW,
            collect_samples: false,
            record_victims: false,
        }
    }
}

impl MatParams {
    /// Algorithm 1 as the paper writes it: the sign controller, a prediction per candidate
    /// taken; the other knobs their defaults.
    pub fn algorithm1() -> Self {
        MatParams {
            controller: Controller::Sign,
            reuse_predictions: false,
            ..MatParams::default()
        }
    }

    /// The factor T is multiplied by after an eviction whose victim came at try `r`
    /// (L + 1: none of the L reached T).
    pub fn step(&self, r: u32) -> f64 {
        let k = self.k;
        match self.controller {
            Controller::Sign => {
                let r = r as f64;
                if r < k {
                    1.0 + self.delta
                } else if r > k {
                    1.0 - self.delta
                } else {
                    1.0
                }
            }
            Controller::Mean => {
                let p = r.min(self.max_candidates) as f64; // the candidates taken
                1.0 + self.delta * (k - p)
            }
        }
    }

    /// Each knob within its declared bounds (settings.toml, as `settings::*_problem` say) and
    /// its rules: k <= max_candidates; the mean controller needs delta * (L - k) < 1.
    pub fn validate(&self) -> Result<(), SimError> {
        let bound = |name: &str, why: Option<&str>, got: String| match why {
            Some(w) => err(format!("{name} must be {w}, got {got}")),
            None => Ok(()),
        };
        bound("k", settings::k_problem(self.k), self.k.to_string())?;
        bound(
            "max_candidates",
            settings::max_candidates_problem(self.max_candidates.into()),
            self.max_candidates.to_string(),
        )?;
        bound(
            "delta",
            settings::delta_problem(self.delta),
            self.delta.to_string(),
        )?;
        if let Some(t) = self.initial_threshold {
            bound(
                "initial_threshold",
                settings::initial_threshold_problem(t),
                t.to_string(),
            )?;
        }
        check_memory_window(self.memory_window)?;
        if self.k > self.max_candidates as f64 {
            return err(format!(
                "k must be at most max_candidates, got k {} and max_candidates {}",
                self.k, self.max_candidates
            ));
        }
        let worst = self.max_candidates as f64 - self.k; // the largest step down
        if self.controller == Controller::Mean && self.delta * worst >= 1.0 {
            return err(format!(
                "the mean controller needs delta * (max_candidates - k) < 1 (T stays > 0), \
                 got delta {} and max_candidates - k {worst}",
                self.delta
            ));
        }
        Ok(())
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::config::CapacityUnit;
    use crate::mat::testing::{cfg, trace};
    use crate::mat::{simulate_mat, DenseTrace, Oracle};

    /// The mean controller's steps by hand: T *= 1 + delta (k - p), p the candidates taken
    /// (L on exhaustion, not L + 1); the sign rule's at the same tries for contrast.
    #[test]
    fn mean_controller_steps_by_hand() {
        let mean = MatParams {
            k: 2.0,
            max_candidates: 3,
            delta: 0.25,
            controller: Controller::Mean,
            ..MatParams::algorithm1()
        };
        assert_eq!(mean.step(1), 1.25); // one prediction: 1 + 0.25 (2 - 1)
        assert_eq!(mean.step(2), 1.0); // on target
        assert_eq!(mean.step(3), 0.75); // found at the last try
        assert_eq!(mean.step(4), 0.75); // exhausted: 3 predictions, as at the last try
        let k15 = MatParams { k: 1.5, ..mean };
        assert_eq!(k15.step(1), 1.125);
        assert_eq!(k15.step(4), 1.0 - 0.25 * 1.5);
        let sign = MatParams {
            controller: Controller::Sign,
            ..mean
        };
        assert_eq!(
            (sign.step(1), sign.step(2), sign.step(3), sign.step(4)),
            (1.25, 1.0, 0.75, 0.75)
        );
        // a step that could turn T negative is refused
        let bad = MatParams {
            delta: 0.5,
            max_candidates: 10,
            ..mean
        };
        assert!(bad.validate().is_err());
        assert!(MatParams {
            controller: Controller::Sign,
            ..bad
        }
        .validate()
        .is_ok());
        assert!(Controller::from_name("median").is_err() && Controller::from_code(2).is_err());
        for c in [Controller::Sign, Controller::Mean] {
            assert_eq!(Controller::from_code(c.code() as i64).unwrap(), c);
        }
    }

    /// The mean controller holds the mean predictions per eviction at k (what the sign rule
    /// does not: its tries above k outweigh), with the oracle on a skewed trace.
    #[test]
    fn mean_controller_holds_the_mean_at_k() {
        let (keys, s) = trace(200_000, 5_000, 11);
        let c = cfg(500, CapacityUnit::Objects);
        let dt = DenseTrace::new(&keys).unwrap();
        let next = dt.next();
        for k in [1.5, 2.0, 2.5] {
            let p = MatParams {
                k,
                delta: 1e-3,
                controller: Controller::Mean,
                ..MatParams::algorithm1()
            };
            let m = simulate_mat(&keys, &s, &c, p, Oracle { next: &next }, &dt).unwrap();
            let ppe = m.predictions_per_eviction();
            assert!(
                (ppe - k).abs() < 0.05 * k,
                "k {k}: {ppe} predictions per eviction"
            );
        }
    }
}
