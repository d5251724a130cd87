//! What a strategy that calls out (HTTP, a sandboxed plugin, a model) does when the call
//! fails: the built-in strategy decides instead, the turn's report gets a warning, the log
//! a line, and a process-wide counter (shown by `GET /metrics`) one more.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use foldwire_core::{BuildError, FoldPolicy, Layout, Params};
use foldwire_stages::strategy_scope;
use serde::Deserialize;

use crate::fold_policy::{LargestFirst, OldestFirst, PolicyConfig};
use crate::layout::{HeadFirst, STORE_ORDER_FILL, StoreOrderFill};
use crate::summarizer::{Extractive, ExtractiveConfig};

/// Warning code of a fallback in the turn report.
pub const CODE: &str = "strategy_fallback";

/// Which built-in decides when the strategy cannot (the `fallback` and `fallback_params`
/// params every calling-out strategy takes).
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct FallbackSpec {
    /// A built-in strategy of the same kind.
    pub fallback: Option<String>,
    /// Its params.
    pub fallback_params: Params,
}

impl Default for FallbackSpec {
    fn default() -> Self {
        FallbackSpec {
            fallback: None,
            fallback_params: Params::Null,
        }
    }
}

static COUNTS: Mutex<BTreeMap<(String, String), u64>> = Mutex::new(BTreeMap::new());

/// Records a fallback: a warning in the current turn (when the call runs inside a
/// [`strategy_scope::StrategyScope`]), a log line, and one more in the counter of
/// `(strategy, reason)`.
pub fn fell_back(strategy: &str, reason: &str, detail: &str, fallback: &str) {
    {
        let mut counts = COUNTS.lock().unwrap_or_else(|p| p.into_inner());
        *counts
            .entry((strategy.to_owned(), reason.to_owned()))
            .or_default() += 1;
    }
    strategy_scope::warn(
        strategy,
        CODE,
        format!("{reason}: {detail}; {fallback} decided instead"),
    );
}

/// Fallbacks so far in this process, by strategy and reason.
pub fn counts() -> Vec<(String, String, u64)> {
    let counts = COUNTS.lock().unwrap_or_else(|p| p.into_inner());
    counts
        .iter()
        .map(|((s, r), n)| (s.clone(), r.clone(), *n))
        .collect()
}

/// The built-in fold policy named by a spec (default `fold.oldest_first`).
///
/// # Errors
/// A name that is not a built-in fold policy, or params it refuses.
pub fn fold_policy(owner: &str, spec: &FallbackSpec) -> Result<Arc<dyn FoldPolicy>, BuildError> {
    let name = spec.fallback.as_deref().unwrap_or("fold.oldest_first");
    let config = || -> Result<PolicyConfig, BuildError> {
        BuildError::parse_params::<PolicyConfig>(owner, &spec.fallback_params)?.validate(owner)
    };
    match name {
        "fold.oldest_first" => Ok(Arc::new(OldestFirst(config()?))),
        "fold.largest_first" => Ok(Arc::new(LargestFirst(config()?))),
        other => Err(BuildError::new(
            owner,
            format!(
                "fallback {other:?} is not a built-in fold policy (fold.oldest_first, fold.largest_first)"
            ),
        )),
    }
}

/// The built-in layout named by a spec (default `layout.store_order_fill`).
///
/// # Errors
/// A name that is not a built-in layout, or params it refuses.
pub fn layout(owner: &str, spec: &FallbackSpec) -> Result<Arc<dyn Layout>, BuildError> {
    let name = spec.fallback.as_deref().unwrap_or(STORE_ORDER_FILL);
    match name {
        crate::layout::STORE_ORDER_FILL => Ok(Arc::new(StoreOrderFill::new(
            BuildError::parse_params(owner, &spec.fallback_params)?,
        ))),
        crate::layout::HEAD_FIRST => Ok(Arc::new(HeadFirst::new(BuildError::parse_params(
            owner,
            &spec.fallback_params,
        )?))),
        other => Err(BuildError::new(
            owner,
            format!(
                "fallback {other:?} is not a built-in layout (layout.store_order_fill, layout.head_first)"
            ),
        )),
    }
}

/// The extractive summarizer, the fallback of every summarizer that calls out.
///
/// # Errors
/// A fallback other than `summarizer.extractive`, or params it refuses.
pub fn summarizer(owner: &str, spec: &FallbackSpec) -> Result<Arc<Extractive>, BuildError> {
    match spec.fallback.as_deref() {
        None | Some(crate::summarizer::NAME) => {}
        Some(other) => {
            return Err(BuildError::new(
                owner,
                format!("fallback {other:?} is not a built-in summarizer (summarizer.extractive)"),
            ));
        }
    }
    let config: ExtractiveConfig = BuildError::parse_params(owner, &spec.fallback_params)?;
    Ok(Arc::new(Extractive(config)))
}
