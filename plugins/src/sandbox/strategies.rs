//! The strategies a plugin provides: each calls its script with the protocol request, checks
//! the answer like an HTTP strategy's, and lets the built-in fallback decide when the call
//! or the answer fails — or when the plugin was removed since the pipeline was built.

use std::sync::Arc;

use foldwire_core::{
    FoldDemand, FoldPolicy, Layout, LayoutPlan, LayoutRequest, RangeInfo, Refusal, StrategyError,
    Summarizer, Summary, SummaryRequest, async_trait,
};
use serde_json::{Value, json};

use super::{CallError, Script};
use crate::fallback;
use crate::protocol::{self, VERSION};
use crate::summarizer::Extractive;

/// Entry point of fold-policy plugins.
pub const CHOOSE: &str = "choose";
/// Entry point of layout plugins.
pub const ARRANGE: &str = "arrange";
/// Entry point of summarizer plugins.
pub const SUMMARIZE: &str = "summarize";

/// What every plugin strategy holds.
#[derive(Debug, Clone)]
pub struct Plugged {
    /// The plugin's name.
    pub name: &'static str,
    /// Its script, or `None` when it was removed.
    pub script: Option<Arc<Script>>,
    /// The pipeline's `config` param, handed to the script.
    pub config: Value,
}

impl Plugged {
    /// Runs the entry point on `request` (with `config` added); the answer with its version.
    fn call(&self, entry: &str, mut request: Value) -> Result<Value, CallError> {
        let Some(script) = &self.script else {
            return Err(CallError::Bad(
                "nothing: the plugin was removed after this pipeline was built".to_owned(),
            ));
        };
        if let Some(map) = request.as_object_mut() {
            map.insert("config".to_owned(), self.config.clone());
        }
        script.call(entry, &request)
    }

    fn fell_back(&self, e: &CallError, fallback: &str) {
        fallback::fell_back(self.name, e.reason(), &e.to_string(), fallback);
    }
}

/// Scripts answer bare values; the protocol's checks take versioned documents.
fn versioned(key: &str, answer: Value) -> Value {
    match answer {
        Value::Object(mut map) => {
            map.entry("version").or_insert(json!(VERSION));
            Value::Object(map)
        }
        other => json!({"version": VERSION, key: other}),
    }
}

/// A fold policy from a plugin.
#[derive(Debug)]
pub struct ScriptFold {
    /// The plugin.
    pub plugged: Plugged,
    /// The built-in that decides when it cannot.
    pub fallback: Arc<dyn FoldPolicy>,
}

impl FoldPolicy for ScriptFold {
    fn name(&self) -> &'static str {
        self.plugged.name
    }
    /// A script may run up to its time limit: off the shared worker.
    fn blocks(&self) -> bool {
        true
    }
    fn choose(&self, ranges: &[RangeInfo], demand: &FoldDemand) -> Vec<usize> {
        let answer = self
            .plugged
            .call(CHOOSE, protocol::fold_request(ranges, demand))
            .and_then(|a| {
                protocol::fold_answer(&versioned("fold", a), ranges.len())
                    .map_err(|e| CallError::Bad(e.0))
            });
        answer.unwrap_or_else(|e| {
            self.plugged.fell_back(&e, self.fallback.name());
            self.fallback.choose(ranges, demand)
        })
    }
}

/// A layout from a plugin.
#[derive(Debug)]
pub struct ScriptLayout {
    /// The plugin.
    pub plugged: Plugged,
    /// The built-in that decides when it cannot.
    pub fallback: Arc<dyn Layout>,
}

impl Layout for ScriptLayout {
    fn name(&self) -> &'static str {
        self.plugged.name
    }
    /// A script may run up to its time limit: off the shared worker.
    fn blocks(&self) -> bool {
        true
    }
    fn arrange(&self, request: &LayoutRequest<'_>) -> Result<LayoutPlan, Refusal> {
        let answer = self
            .plugged
            .call(ARRANGE, protocol::layout_request(request))
            .and_then(|a| {
                protocol::layout_answer(&versioned("order", a), request)
                    .map_err(|e| CallError::Bad(e.0))
            });
        match answer {
            Ok(plan) => Ok(plan),
            Err(e) => {
                self.plugged.fell_back(&e, self.fallback.name());
                self.fallback.arrange(request)
            }
        }
    }
}

/// A summarizer from a plugin.
#[derive(Debug)]
pub struct ScriptSummarizer {
    /// The plugin.
    pub plugged: Plugged,
    /// The extractive summarizer, when the plugin cannot.
    pub fallback: Arc<Extractive>,
}

#[async_trait]
impl Summarizer for ScriptSummarizer {
    fn name(&self) -> &'static str {
        self.plugged.name
    }
    async fn summarize(&self, request: SummaryRequest<'_>) -> Result<Summary, StrategyError> {
        // The call is bounded by the plugin's limits, so it runs in place.
        let answer = self
            .plugged
            .call(SUMMARIZE, protocol::summary_request(&request))
            .and_then(|a| {
                protocol::summary_answer(
                    &versioned("summary", a),
                    request.max_chars,
                    self.plugged.name,
                )
                .map_err(|e| CallError::Bad(e.0))
            });
        match answer {
            Ok(summary) => Ok(summary),
            Err(e) => {
                self.plugged.fell_back(&e, self.fallback.name());
                self.fallback.summarize(request).await
            }
        }
    }
}
