//! The fold schedule: when a fold is due, shared by the `fold.scheduled` policy (which folds)
//! and the tool loop's nudges (which ask the model to fold), so both follow one rule.

use foldwire_core::BuildError;
use serde::{Deserialize, Serialize};

/// Registered name of `fold.scheduled` (foldwire-plugins' `Scheduled`), the default fold policy.
pub const SCHEDULED: &str = "fold.scheduled";

/// Settings of `fold.scheduled`, as fractions of the budget's available tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScheduleConfig {
    /// Fold once the request passes this share of the budget and has grown by `growth`
    /// since the last fold.
    pub trigger: f64,
    /// Growth since the last fold (the floor) a fold waits for, so a context that cannot
    /// shrink below the trigger (a large head or recent window) does not fold on every turn.
    pub growth: f64,
    /// Fold in any case past this share (the safety margin before the window).
    pub ceiling: f64,
    /// A fold takes the oldest history until the request is estimated at this share: one
    /// large fold instead of many small ones, each of which rewrites the cached prefix
    /// from its first changed unit.
    pub target: f64,
}

impl Default for ScheduleConfig {
    fn default() -> Self {
        // Measured with `cargo bench -p foldwire-benches --bench economy` against other
        // settings (README, "The fold schedule"). A fold's fixed cost is the rewrite of
        // what stays after it (the recent window, ~5,000 tokens, at the write price) and
        // its summary; a growth of 0.45 of the budget between folds spreads that over
        // enough turns at every window (at 30k and 60k the ceiling comes first), and a
        // target of 0.05 folds all the history that may fold, so the next fold is as far
        // away as it can be.
        ScheduleConfig {
            trigger: 0.45,
            growth: 0.45,
            ceiling: 0.9,
            target: 0.05,
        }
    }
}

/// How hard a nudge asks the model to compress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NudgeTier {
    /// A fold is due: the request passed the trigger and grew enough since the last fold.
    Due,
    /// Past the ceiling: fold now, the window is near.
    Urgent,
}

impl ScheduleConfig {
    /// The settings, or an error naming the one out of range.
    ///
    /// # Errors
    /// A share outside (0, 1], or target > trigger > ceiling out of order.
    pub fn validate(self) -> Result<Self, BuildError> {
        let ok = |f: f64| f.is_finite() && f > 0.0 && f <= 1.0;
        let valid = ok(self.trigger)
            && ok(self.ceiling)
            && ok(self.target)
            && self.growth.is_finite()
            && (0.0..=1.0).contains(&self.growth)
            && self.target <= self.trigger
            && self.trigger <= self.ceiling;
        if !valid {
            return Err(BuildError::new(
                SCHEDULED,
                format!(
                    "trigger ({}), ceiling ({}), target ({}) must be fractions in (0, 1] with target <= trigger <= ceiling, and growth ({}) in [0, 1]",
                    self.trigger, self.ceiling, self.target, self.growth
                ),
            ));
        }
        Ok(self)
    }

    /// Whether a fold is due for a request of `request` tokens whose last fold left
    /// `floor` tokens, with `available` tokens of budget; and how urgently.
    pub fn due(&self, request: u64, floor: u64, available: u64) -> Option<NudgeTier> {
        let a = available as f64;
        let r = request as f64;
        if r > self.ceiling * a {
            return Some(NudgeTier::Urgent);
        }
        let grown = request.saturating_sub(floor) as f64;
        (r > self.trigger * a && grown >= self.growth * a).then_some(NudgeTier::Due)
    }
}
