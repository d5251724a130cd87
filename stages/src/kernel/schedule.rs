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
    /// The growth since the last fold is at least this many tokens, whatever the budget:
    /// the rewrite a fold costs (the protected recent window and the summary) does not
    /// shrink with the window, so a smaller budget needs as long a cycle to pay for it.
    pub min_growth_tokens: u64,
    /// Fold in any case past this share (the safety margin before the window).
    pub ceiling: f64,
    /// A fold takes the oldest history until the request is estimated at this share: one
    /// large fold instead of many small ones, each of which rewrites the cached prefix
    /// from its first changed unit.
    pub target: f64,
    /// Fold when the growth since the last fold pays for the fold's rewrite ([`Self::payback_growth`])
    /// instead of at a fixed `growth`, once the tokens the request gains per turn are known.
    pub cost_aware: bool,
    /// With `cost_aware`, the least share of cache reads in the input of a fold cycle
    /// (0: none): the fold waits until the reads of the cycle are this share of what it
    /// sends, when the cheapest cycle would rewrite more often than that.
    pub min_read_share: f64,
    /// Price of a cached read, relative to uncached input (Anthropic: 0.1).
    pub read_price: f64,
    /// Price of a cache write, relative to uncached input (Anthropic's 5-minute writes: 1.25).
    pub write_price: f64,
}

impl Default for ScheduleConfig {
    fn default() -> Self {
        // Measured with `cargo bench -p foldwire-benches --bench economy` against other
        // settings (README, "The fold schedule"). A fold's fixed cost is the rewrite of
        // what stays after it (the recent window, ~4,000–5,000 tokens, at the write price)
        // and its summary; a growth of 0.45 of the budget between folds, and at least
        // `min_growth_tokens`, spreads that over enough turns at every window (at 30k the
        // ceiling comes first), and a target of 0.05 folds all the history that may fold,
        // so the next fold is as far away as it can be.
        ScheduleConfig {
            trigger: 0.45,
            growth: 0.45,
            min_growth_tokens: DEFAULT_MIN_GROWTH_TOKENS,
            ceiling: 0.9,
            target: 0.05,
            cost_aware: false,
            min_read_share: 0.0,
            read_price: 0.1,
            write_price: 1.25,
        }
    }
}

/// Default [`ScheduleConfig::min_growth_tokens`]: below 0.45 of the budget from a 100k window
/// up, 0.76 of a 60k window's, where 0.45 (20,250 tokens) left cache reads at 93.9 % of the
/// input against 95.2 % with this floor (`--bench economy`, three seeds, each ≥ 95.05 %).
pub const DEFAULT_MIN_GROWTH_TOKENS: u64 = 34_000;

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
            && self.trigger <= self.ceiling
            && (0.0..1.0).contains(&self.min_read_share)
            && self.read_price.is_finite()
            && self.read_price > 0.0
            && self.write_price.is_finite()
            && self.write_price >= 0.0;
        if !valid {
            return Err(BuildError::new(
                SCHEDULED,
                format!(
                    "trigger ({}), ceiling ({}), target ({}) must be fractions in (0, 1] with target <= trigger <= ceiling, growth ({}) in [0, 1], min_read_share ({}) in [0, 1), read_price ({}) > 0 and write_price ({}) >= 0",
                    self.trigger,
                    self.ceiling,
                    self.target,
                    self.growth,
                    self.min_read_share,
                    self.read_price,
                    self.write_price
                ),
            ));
        }
        Ok(self)
    }

    /// Whether a fold is due for a request of `request` tokens whose last fold left
    /// `floor` tokens, with `available` tokens of budget; and how urgently.
    /// The request's growth per turn is unknown here; see [`Self::due_at`].
    pub fn due(&self, request: u64, floor: u64, available: u64) -> Option<NudgeTier> {
        self.due_at(request, floor, 0, available)
    }

    /// [`Self::due`] for a request that gains `per_turn` tokens a turn (0: unknown, and the
    /// fixed `growth` gates the fold).
    pub fn due_at(
        &self,
        request: u64,
        floor: u64,
        per_turn: u64,
        available: u64,
    ) -> Option<NudgeTier> {
        let a = available as f64;
        let r = request as f64;
        if r > self.ceiling * a {
            return Some(NudgeTier::Urgent);
        }
        let grown = request.saturating_sub(floor) as f64;
        let wait = match self.payback_growth(floor, per_turn, available) {
            Some(g) => g,
            None => (self.growth * a).max(self.min_growth_tokens as f64),
        };
        (r > self.trigger * a && grown >= wait).then_some(NudgeTier::Due)
    }

    /// With `cost_aware` and a known growth per turn, the growth since the last fold at
    /// which folding costs least per turn. A cycle between folds of growth `G` lasts
    /// `G / per_turn` turns and costs one rewrite of what the fold keeps (about the floor
    /// `F`, at the write price) plus the cached reads of a request growing from `F` to
    /// `F + G` on every turn (the appended tokens are written either way). Per turn that is
    /// `w·F·per_turn / G + r·(F + G/2)` plus a constant, least at `G = √(2·w·F·per_turn / r)`.
    /// Before the first fold the floor is unknown; `target` of the budget stands for it.
    /// With `min_read_share` the cycle is long enough for that share too: its reads,
    /// `(G / per_turn)·(F + G/2)`, are at least `s / (1 − s)` times its writes, `G + F`.
    pub fn payback_growth(&self, floor: u64, per_turn: u64, available: u64) -> Option<f64> {
        if !self.cost_aware || per_turn == 0 {
            return None;
        }
        let kept = (floor as f64).max(self.target * available as f64);
        let g = per_turn as f64;
        let cheapest = (2.0 * self.write_price * kept * g / self.read_price).sqrt();
        let s = self.min_read_share;
        if s <= 0.0 {
            return Some(cheapest);
        }
        // (1 − s)/(2g)·G² + ((1 − s)·F/g − s)·G − s·F ≥ 0: the positive root.
        let (a, b, c) = ((1.0 - s) / (2.0 * g), (1.0 - s) * kept / g - s, -s * kept);
        let share = (-b + (b * b - 4.0 * a * c).sqrt()) / (2.0 * a);
        Some(cheapest.max(share))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `min_read_share` lengthens the cheapest cycle to the one whose reads are that share
    /// of what it sends: at the growth it returns, reads / (reads + writes) is the share.
    #[test]
    fn a_least_read_share_lengthens_the_cheapest_cycle_to_reach_it() {
        let aware = ScheduleConfig {
            cost_aware: true,
            ..ScheduleConfig::default()
        };
        let (floor, per_turn, available) = (9_000, 900, 45_000);
        let cheapest = aware.payback_growth(floor, per_turn, available).unwrap();
        assert!((cheapest - 14_230.0).abs() < 1.0, "{cheapest}");
        let shared = ScheduleConfig {
            min_read_share: 0.95,
            ..aware
        };
        let g = shared.payback_growth(floor, per_turn, available).unwrap();
        let reads = g / per_turn as f64 * (floor as f64 + g / 2.0);
        let share = reads / (reads + g + floor as f64);
        assert!(g > cheapest && (share - 0.95).abs() < 1e-6, "{g}: {share}");
        // Off, or with the growth per turn unknown, the fixed growth rules.
        assert_eq!(
            ScheduleConfig::default().payback_growth(floor, per_turn, available),
            None
        );
        assert_eq!(aware.payback_growth(floor, 0, available), None);
    }
}
