//! Fold policies: which compressible ranges to fold, and when.
//!
//! - `fold.scheduled` (the default, [`Scheduled`]): a fold schedule that pays for itself in
//!   prompt-cache terms; see its docs.
//!
//! The two threshold policies act only when the request is over `threshold` × the budget's available
//! tokens, and then pick ranges until the folded tokens bring the request down to `target`
//! × available (a summary is assumed to keep about a tenth of its range, so the estimate
//! counts nine tenths of each range as saved). They differ in the order they pick:
//! - `fold.oldest_first` — oldest ranges first: the prompt-cache prefix that changes is the
//!   oldest one either way, and old history is the least likely to be needed verbatim.
//! - `fold.largest_first` — largest ranges first: the fewest folds (and summaries) for the
//!   tokens needed.

use std::sync::Arc;

use foldwire_core::{
    BuildCx, BuildError, Component, ComponentConfig, ComponentKind, FoldDemand, FoldPolicy,
    RangeInfo,
};
use serde::{Deserialize, Serialize};

/// Settings shared by both policies.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PolicyConfig {
    /// Fold when the request exceeds this fraction of the available budget.
    pub threshold: f64,
    /// Fold until the request is estimated at this fraction of the available budget.
    pub target: f64,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            threshold: 0.8,
            target: 0.6,
        }
    }
}

impl PolicyConfig {
    pub(crate) fn validate(self, name: &str) -> Result<Self, BuildError> {
        let ok = |f: f64| f.is_finite() && f > 0.0 && f <= 1.0;
        if !ok(self.threshold) || !ok(self.target) || self.target > self.threshold {
            return Err(BuildError::new(
                name,
                format!(
                    "threshold ({}) and target ({}) must be fractions in (0, 1] with target <= threshold",
                    self.threshold, self.target
                ),
            ));
        }
        Ok(self)
    }

    /// Tokens to save, or `None` when the request is under the threshold.
    fn need(&self, demand: &FoldDemand) -> Option<u64> {
        let available = demand.budget.available() as f64;
        let request = demand.request_tokens as f64;
        (request > self.threshold * available)
            .then(|| (request - self.target * available).max(0.0) as u64)
    }
}

/// Picks ranges in `order` until `need` tokens are saved. A fold saves its range's tokens
/// minus its summary, which costs at most a tenth of the range and at most
/// `summary_tokens` when that is known.
fn pick(ranges: &[RangeInfo], order: Vec<usize>, need: u64, summary_tokens: u64) -> Vec<usize> {
    let mut saved = 0u64;
    let mut out = Vec::new();
    for i in order {
        if saved >= need {
            break;
        }
        if let Some(r) = ranges.get(i) {
            let summary = match summary_tokens {
                0 => r.tokens / 10,
                cap => (r.tokens / 10).min(cap),
            };
            saved += r.tokens - summary;
            out.push(i);
        }
    }
    out.sort_unstable();
    out
}

/// `fold.oldest_first` (its params are a [`PolicyConfig`]).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct OldestFirst(pub PolicyConfig);

impl FoldPolicy for OldestFirst {
    fn name(&self) -> &'static str {
        Self::NAME
    }
    fn choose(&self, ranges: &[RangeInfo], demand: &FoldDemand) -> Vec<usize> {
        let Some(need) = self.0.need(demand) else {
            return Vec::new();
        };
        let mut order: Vec<usize> = (0..ranges.len()).collect();
        order.sort_by_key(|&i| ranges.get(i).map(|r| r.start));
        pick(ranges, order, need, demand.summary_tokens)
    }
}

/// `fold.largest_first` (its params are a [`PolicyConfig`]).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct LargestFirst(pub PolicyConfig);

impl FoldPolicy for LargestFirst {
    fn name(&self) -> &'static str {
        Self::NAME
    }
    fn choose(&self, ranges: &[RangeInfo], demand: &FoldDemand) -> Vec<usize> {
        let Some(need) = self.0.need(demand) else {
            return Vec::new();
        };
        let mut order: Vec<usize> = (0..ranges.len()).collect();
        order.sort_by_key(|&i| {
            ranges
                .get(i)
                .map(|r| (std::cmp::Reverse(r.tokens), r.start))
        });
        pick(ranges, order, need, demand.summary_tokens)
    }
}

// The schedule's settings live beside the kernel, so the nudges of the tool loop (a stage)
// follow the same schedule as this policy.
pub use foldwire_stages::kernel::schedule::{NudgeTier, SCHEDULED, ScheduleConfig};

/// `fold.scheduled` (the default): folds rarely and a lot at a time, so the prompt cache
/// pays for each rewrite. A fold rewrites everything after its first changed unit; the
/// cost of a session is mostly the cached reads of its whole request on every turn. So the
/// request is kept small (between `target` and `trigger` of the budget rather than near the
/// window), and each fold takes the oldest history down to `target` in one go, right after
/// the summaries already on the wire, so they stay in the cached prefix. Folds are gated by
/// the growth since the last one; past `ceiling` a fold happens whatever the growth.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Scheduled(pub ScheduleConfig);

impl FoldPolicy for Scheduled {
    fn name(&self) -> &'static str {
        SCHEDULED
    }
    fn choose(&self, ranges: &[RangeInfo], demand: &FoldDemand) -> Vec<usize> {
        let available = demand.budget.available();
        if self
            .0
            .due_at(
                demand.request_tokens,
                demand.floor_tokens,
                demand.per_turn_tokens,
                available,
            )
            .is_none()
        {
            return Vec::new();
        }
        let target = (self.0.target * available as f64) as u64;
        let need = demand.request_tokens.saturating_sub(target);
        let mut order: Vec<usize> = (0..ranges.len()).collect();
        order.sort_by_key(|&i| ranges.get(i).map(|r| r.start));
        pick(ranges, order, need, demand.summary_tokens)
    }
}

impl ComponentConfig for Scheduled {
    const KIND: ComponentKind = ComponentKind::FoldPolicy;
    const NAME: &'static str = SCHEDULED;
    const DESCRIPTION: &'static str = "Folds rarely and a lot at a time, gated by growth, so the prompt cache pays for each rewrite.";

    fn build(self, _cx: &BuildCx<'_>) -> Result<Component, BuildError> {
        Ok(Component::FoldPolicy(Arc::new(Scheduled(
            self.0.validate()?,
        ))))
    }
}

impl ComponentConfig for OldestFirst {
    const KIND: ComponentKind = ComponentKind::FoldPolicy;
    const NAME: &'static str = "fold.oldest_first";
    const DESCRIPTION: &'static str =
        "Over its threshold, folds the oldest ranges until the request is back at its target.";

    fn build(self, _cx: &BuildCx<'_>) -> Result<Component, BuildError> {
        Ok(Component::FoldPolicy(Arc::new(OldestFirst(
            self.0.validate(Self::NAME)?,
        ))))
    }
}

impl ComponentConfig for LargestFirst {
    const KIND: ComponentKind = ComponentKind::FoldPolicy;
    const NAME: &'static str = "fold.largest_first";
    const DESCRIPTION: &'static str =
        "Over its threshold, folds the largest ranges until the request is back at its target.";

    fn build(self, _cx: &BuildCx<'_>) -> Result<Component, BuildError> {
        Ok(Component::FoldPolicy(Arc::new(LargestFirst(
            self.0.validate(Self::NAME)?,
        ))))
    }
}

foldwire_core::register_config!(Scheduled);
foldwire_core::register_config!(OldestFirst);
foldwire_core::register_config!(LargestFirst);
