//! `example.tool_heavy_first`: a fold policy that, once a request is over its threshold,
//! folds the ranges holding the most tool calls first (tool output is bulky and rarely needed
//! verbatim once acted on), until the request is estimated back under its target.

use std::sync::Arc;

use foldwire_api::{
    BuildCx, BuildError, Component, ComponentConfig, ComponentKind, FoldDemand, FoldPolicy,
    RangeInfo,
};
use serde::{Deserialize, Serialize};

/// Params of `example.tool_heavy_first`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ToolHeavyFirst {
    /// Fold when the request exceeds this fraction of the available budget.
    pub threshold: f64,
    /// Fold until the request is estimated at this fraction of the available budget.
    pub target: f64,
}

impl Default for ToolHeavyFirst {
    fn default() -> Self {
        ToolHeavyFirst {
            threshold: 0.8,
            target: 0.6,
        }
    }
}

impl ComponentConfig for ToolHeavyFirst {
    const KIND: ComponentKind = ComponentKind::FoldPolicy;
    const NAME: &'static str = "example.tool_heavy_first";
    const DESCRIPTION: &'static str = "Folds the ranges with the most tool calls first.";

    fn build(self, _cx: &BuildCx<'_>) -> Result<Component, BuildError> {
        let fraction = |f: f64| f.is_finite() && f > 0.0 && f <= 1.0;
        if !fraction(self.threshold) || !fraction(self.target) || self.target > self.threshold {
            return Err(BuildError::new(
                Self::NAME,
                "threshold and target must be fractions in (0, 1] with target <= threshold",
            ));
        }
        Ok(Component::FoldPolicy(Arc::new(self)))
    }
}

foldwire_api::register_config!(ToolHeavyFirst);

impl FoldPolicy for ToolHeavyFirst {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn choose(&self, ranges: &[RangeInfo], demand: &FoldDemand) -> Vec<usize> {
        let available = demand.budget.available() as f64;
        let request = demand.request_tokens as f64;
        if request <= self.threshold * available {
            return Vec::new();
        }
        let mut need = (request - self.target * available).max(0.0) as u64;
        let calls = |r: &RangeInfo| r.tool_calls.values().sum::<u32>();
        let mut order: Vec<usize> = (0..ranges.len()).collect();
        order.sort_by_key(|&i| ranges.get(i).map(|r| std::cmp::Reverse(calls(r))));
        let mut chosen = Vec::new();
        for i in order {
            let Some(range) = ranges.get(i) else { continue };
            // A fold saves its range minus the summary that replaces it.
            let saved = range.tokens.saturating_sub(demand.summary_tokens);
            if need == 0 || saved == 0 {
                continue;
            }
            need = need.saturating_sub(saved);
            chosen.push(i);
        }
        chosen.sort_unstable();
        chosen
    }
}
