//! Strategy kinds: the policies stages consult. Stages are the fixed steps; strategies are
//! the plugins.

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::budget::Budget;
use crate::component::{Params, RegistryError};
use crate::ids::Ref;
use crate::message::Message;
use crate::report::Refusal;
use crate::wire::Wire;

/// Any error a strategy wraps (a model client's, a parser's), kept whole as the source.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a strategy failed.
#[derive(Debug, thiserror::Error)]
#[error("{strategy}: {message}")]
#[non_exhaustive]
pub struct StrategyError {
    /// The strategy name.
    pub strategy: String,
    /// What failed.
    pub message: String,
    /// The underlying error, when one caused it (a summarizer's model call, …).
    #[source]
    pub source: Option<BoxError>,
}

impl StrategyError {
    /// A failure described by a message alone.
    pub fn new(strategy: &str, message: impl Into<String>) -> Self {
        StrategyError {
            strategy: strategy.to_owned(),
            message: message.into(),
            source: None,
        }
    }

    /// A failure caused by another error, which stays reachable through `source()`.
    pub fn caused(strategy: &str, message: impl Into<String>, source: impl Into<BoxError>) -> Self {
        StrategyError {
            strategy: strategy.to_owned(),
            message: message.into(),
            source: Some(source.into()),
        }
    }
}

/// Where a stage gets its strategies from by name: the [`Registry`](crate::registry::Registry)
/// in a running pipeline. A trait so the stage contract need not name the registry (which names
/// stages) and a test can hand a stage exactly the strategies it wants.
pub trait StrategySource: Send + Sync + std::fmt::Debug {
    /// Builds a fold policy.
    ///
    /// # Errors
    /// Unknown name, another kind under that name, or params the factory refuses.
    fn fold_policy(
        &self,
        name: &str,
        params: &Params,
    ) -> Result<Arc<dyn FoldPolicy>, RegistryError>;

    /// Builds a layout.
    ///
    /// # Errors
    /// As [`StrategySource::fold_policy`].
    fn layout(&self, name: &str, params: &Params) -> Result<Arc<dyn Layout>, RegistryError>;

    /// Builds a summarizer.
    ///
    /// # Errors
    /// As [`StrategySource::fold_policy`].
    fn summarizer(&self, name: &str, params: &Params)
    -> Result<Arc<dyn Summarizer>, RegistryError>;
}

/// A compressible range as fold policies see it. Build one with [`RangeInfo::new`] and the
/// `with_` methods, so a field added later does not break the code that builds it.
///
/// ```
/// use foldwire_api::{RangeInfo, Ref};
/// let r = RangeInfo::new(Ref(1), Ref(4), 900, 4)
///     .with_tool_calls([("bash".to_owned(), 2)])
///     .with_tool_units(2);
/// assert_eq!((r.tool_percent(), r.tool_calls["bash"]), (50, 2));
/// ```
///
/// A struct literal does not compile outside this crate:
///
/// ```compile_fail
/// use foldwire_api::{RangeInfo, Ref};
/// let r = RangeInfo { start: Ref(1), end: Ref(1), tokens: 1, messages: 1,
///     tool_calls: Default::default(), tool_units: 0 };
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RangeInfo {
    /// First ref of the range.
    pub start: Ref,
    /// Last ref of the range.
    pub end: Ref,
    /// Estimated tokens it holds.
    pub tokens: u64,
    /// Number of units in it.
    pub messages: usize,
    /// Its tool calls, counted by tool name (the range's composition besides `messages`).
    #[serde(default)]
    pub tool_calls: std::collections::BTreeMap<String, u32>,
    /// How many of its units are tool calls or tool results (the rest is text, reasoning
    /// and other items): what share of the range is tool traffic.
    #[serde(default)]
    pub tool_units: usize,
}

impl RangeInfo {
    /// A range from `start` to `end` of `messages` units holding `tokens` tokens, with no
    /// tool traffic.
    pub fn new(start: Ref, end: Ref, tokens: u64, messages: usize) -> Self {
        RangeInfo {
            start,
            end,
            tokens,
            messages,
            tool_calls: std::collections::BTreeMap::new(),
            tool_units: 0,
        }
    }

    /// This range with its tool calls, counted by tool name.
    pub fn with_tool_calls(mut self, calls: impl IntoIterator<Item = (String, u32)>) -> Self {
        self.tool_calls = calls.into_iter().collect();
        self
    }

    /// This range with `units` of its units being tool calls or results.
    pub fn with_tool_units(mut self, units: usize) -> Self {
        self.tool_units = units;
        self
    }

    /// The share of its units that are tool calls or results, in whole percent.
    pub fn tool_percent(&self) -> u8 {
        if self.messages == 0 {
            return 0;
        }
        let pct = (self.tool_units.min(self.messages) * 200 + self.messages) / (2 * self.messages);
        u8::try_from(pct).unwrap_or(100)
    }

    /// The share of its units that are not tool traffic, in whole percent.
    pub fn text_percent(&self) -> u8 {
        100 - self.tool_percent()
    }

    /// Extends this range with `next`, which follows it with nothing between them: one
    /// range from this start to `next`'s end, its sizes and tool counts summed, so the
    /// shares of the merged range weigh each part by its units.
    pub fn absorb(&mut self, next: &RangeInfo) {
        self.end = next.end;
        self.tokens += next.tokens;
        self.messages += next.messages;
        self.tool_units += next.tool_units;
        for (name, n) in &next.tool_calls {
            *self.tool_calls.entry(name.clone()).or_default() += n;
        }
    }
}

/// How much pressure the request is under. Build one with [`FoldDemand::new`] and the
/// `with_` methods, so a field added later does not break the code that builds it.
///
/// ```
/// use foldwire_api::{Budget, FoldDemand};
/// let d = FoldDemand::new(9_000, Budget::default()).with_summary_tokens(300);
/// assert_eq!((d.request_tokens, d.summary_tokens, d.floor_tokens), (9_000, 300, 0));
/// ```
///
/// ```compile_fail
/// use foldwire_api::{Budget, FoldDemand};
/// let d = FoldDemand { request_tokens: 1, budget: Budget::default(), summary_tokens: 0,
///     floor_tokens: 0 };
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct FoldDemand {
    /// Estimated tokens of the request as it stands.
    pub request_tokens: u64,
    /// The budget.
    pub budget: Budget,
    /// Most tokens one rendered summary costs (0: unknown). A fold saves its range's tokens
    /// minus its summary, so policies must not assume a summary grows with its range.
    pub summary_tokens: u64,
    /// Tokens of the session's request right after its last fold (0: no fold yet), so a
    /// policy can gate folds by the growth since then.
    pub floor_tokens: u64,
    /// Tokens the request gains per turn, averaged over recent turns (0: unknown), so a
    /// policy can weigh a fold's rewrite against the cached reads it saves over the turns
    /// until the next one.
    pub per_turn_tokens: u64,
}

impl FoldDemand {
    /// A request of `request_tokens` against `budget`, with the summary size unknown and no
    /// fold made yet.
    pub fn new(request_tokens: u64, budget: Budget) -> Self {
        FoldDemand {
            request_tokens,
            budget,
            summary_tokens: 0,
            floor_tokens: 0,
            per_turn_tokens: 0,
        }
    }

    /// This demand with the most tokens one rendered summary costs.
    pub fn with_summary_tokens(mut self, tokens: u64) -> Self {
        self.summary_tokens = tokens;
        self
    }

    /// This demand with the request's size right after the session's last fold.
    pub fn with_floor_tokens(mut self, tokens: u64) -> Self {
        self.floor_tokens = tokens;
        self
    }

    /// This demand with the tokens the request gains per turn.
    pub fn with_per_turn_tokens(mut self, tokens: u64) -> Self {
        self.per_turn_tokens = tokens;
        self
    }
}

/// Decides which compressible ranges to fold, and when.
pub trait FoldPolicy: Send + Sync + std::fmt::Debug {
    /// The registered name.
    fn name(&self) -> &'static str;

    /// Indices into `ranges` of the ranges to fold now (empty when no fold is needed).
    fn choose(&self, ranges: &[RangeInfo], demand: &FoldDemand) -> Vec<usize>;

    /// True when `choose` may wait (on an endpoint, a script's wall-clock limit) rather
    /// than only compute: the fold stage then runs it on the blocking pool, so the worker
    /// thread other sessions share stays free while it waits.
    fn blocks(&self) -> bool {
        false
    }
}

/// What a summarizer is asked to summarize.
#[derive(Debug, Clone, Copy)]
pub struct SummaryRequest<'a> {
    /// The wire of the conversation.
    pub wire: Wire,
    /// The units to summarize, in order.
    pub messages: &'a [Message],
    /// An upper bound on the summary length, in characters.
    pub max_chars: usize,
}

/// A summary and its topic.
///
/// ```
/// use foldwire_api::Summary;
///
/// let s = Summary::new("Fixed the parser.", "acme.summarizer").with_topic("parser".to_owned());
/// assert_eq!(s.topic.as_deref(), Some("parser"));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Summary {
    /// The summary text.
    pub text: String,
    /// A short topic line.
    pub topic: Option<String>,
    /// The summarizer that wrote it.
    pub author: String,
}

impl Summary {
    /// A summary without a topic, by the summarizer named `author`.
    pub fn new(text: impl Into<String>, author: impl Into<String>) -> Self {
        Summary {
            text: text.into(),
            topic: None,
            author: author.into(),
        }
    }

    /// This summary with a topic line (or none).
    pub fn with_topic(mut self, topic: impl Into<Option<String>>) -> Self {
        self.topic = topic.into();
        self
    }
}

/// Writes summaries for ranges about to fold.
#[async_trait]
pub trait Summarizer: Send + Sync + std::fmt::Debug {
    /// The registered name.
    fn name(&self) -> &'static str;

    /// Summarizes a range.
    async fn summarize(&self, request: SummaryRequest<'_>) -> Result<Summary, StrategyError>;
}

/// Where the head window sits in a request, as the layout stage measured it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct HeadZone {
    /// Index of the head's first unit in store order.
    pub start: usize,
    /// One past the head's last unit in store order (`start == end`: no head).
    pub end: usize,
    /// True when the head starts at a topic-reset transition rather than at the opening.
    pub after_reset: bool,
    /// True while a reset head still holds every unit since its transition.
    pub filling: bool,
    /// How many resets the session has had; changes each time a new head starts.
    pub generation: u64,
}

/// The zones of a request as a layout sees them.
#[derive(Debug, Clone, Copy)]
pub struct LayoutRequest<'a> {
    /// The units in store order.
    pub messages: &'a [Message],
    /// Estimated tokens per unit, parallel to `messages`.
    pub tokens: &'a [u64],
    /// The budget.
    pub budget: Budget,
    /// The strategy's own persisted state (whatever its last plan returned; null at first).
    pub state: &'a serde_json::Value,
    /// The head window.
    pub head: HeadZone,
    /// Tokens of the longest prefix of the store-order arrangement that is identical to the
    /// previous request of the session (what stays cached if nothing moves).
    pub unchanged_prefix_tokens: u64,
}

/// An arrangement of the units: the order to send them in, and the new layout state.
///
/// ```
/// use foldwire_api::LayoutPlan;
///
/// let plan = LayoutPlan::new(vec![0, 1, 2], serde_json::Value::Null).with_seal_head(true);
/// assert!(plan.seal_head);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LayoutPlan {
    /// Indices into the request's units, in send order; every index appears once and the
    /// units of one wire message stay together, in order.
    pub order: Vec<usize>,
    /// The strategy state to persist.
    pub state: serde_json::Value,
    /// Fix the head's membership now, before it has filled: later units no longer join it.
    pub seal_head: bool,
}

impl LayoutPlan {
    /// Send the units in `order` and persist `state`; the head is not sealed.
    pub fn new(order: Vec<usize>, state: serde_json::Value) -> Self {
        LayoutPlan {
            order,
            state,
            seal_head: false,
        }
    }

    /// This plan, sealing the head's membership now when `seal` holds.
    pub fn with_seal_head(mut self, seal: bool) -> Self {
        self.seal_head = seal;
        self
    }
}

/// The order that sends the head first, then what came before it, then what follows it: the
/// arrangement several layouts share, so a strategy crate need not reach into the stage's
/// internals for it. Indices past `len` are ignored.
///
/// ```
/// assert_eq!(foldwire_api::strategy::head_first_order(5, 2..4), [2, 3, 0, 1, 4]);
/// ```
pub fn head_first_order(len: usize, head: std::ops::Range<usize>) -> Vec<usize> {
    let mut order: Vec<usize> = head.clone().collect();
    order.extend(0..head.start.min(len));
    order.extend(head.end.min(len)..len);
    order
}

/// Head window, recent window, reset behaviour and cache markers. The stage
/// `layout.head_window` measures the windows; the strategy decides the order they go out in.
pub trait Layout: Send + Sync + std::fmt::Debug {
    /// The registered name.
    fn name(&self) -> &'static str;

    /// Arranges a request, or refuses with the numbers and levers when it cannot fit.
    fn arrange(&self, request: &LayoutRequest<'_>) -> Result<LayoutPlan, Refusal>;

    /// True when `arrange` may wait (on an endpoint, a script's wall-clock limit) rather
    /// than only compute: the layout stage then runs it on the blocking pool, so the worker
    /// thread other sessions share stays free while it waits.
    fn blocks(&self) -> bool {
        false
    }
}
