//! Stage `layout.head_window`: the head window (the opening messages, verbatim, never
//! folded), the recent window, topic resets, Anthropic cache markers, refusals and the
//! rewrite metric.
//!
//! The stage measures the windows over whole wire messages (a layout never splits a wire
//! message, and a head boundary between a tool call and its result is pulled back to before
//! the call); a [`Layout`] strategy from the registry (`layout.store_order_fill` by default,
//! or `layout.head_first`, both in `foldwire-plugins`) decides the order the units go out in.
//!
//! Params (all optional): `layout` (strategy name), `layout_params`, `head_tokens` (else
//! `head_fraction` of the budget, 0.05, at most 4,000), `recent_tokens` (else
//! `recent_fraction` of the budget, 0.3), `cache_markers` (true), `calibration_alpha` (0.3).
//! Per-turn overrides in `turn.options`: `layout`, `window` (replaces `turn.budget.window`),
//! `head_tokens`, `recent_tokens`.
//!
//! Sizes are measured as the request will be encoded ([`crate::kernel::measure`]): each
//! wire message's envelope, rendered summaries and the frame included, and system or
//! developer messages among the messages count as frame, never as head or history.
//!
//! Kernel integration: [`head_fingerprints`] lists the head's units; `ranges.build` and
//! `apply_compression` keep them out of every range ([`crate::kernel::Protection::head`]).

pub mod cache_markers;
pub mod refusal;
pub mod reset;
pub mod rewrite;
pub mod windows;

use std::hash::{Hash, Hasher};
use std::ops::Range;
use std::sync::Arc;

use foldwire_core::{
    BuildCx, BuildError, Component, ComponentConfig, ComponentKind, Conversation, Fact, HeadZone,
    Layout, LayoutRequest, Message, MessageId, Origin, Refusal, Resolved, SessionId, SessionState,
    Stage, StageCx, StageError, StrategyUse, TokenEstimator, Turn,
};
use foldwire_wire::dialect::WireDialect;
use serde::{Deserialize, Serialize};

pub use reset::{
    DEFAULT_CALIBRATION_ALPHA, HeadState, LayoutStateError, SentUnit, Transition,
    head_fingerprints, reset, update_calibration,
};
pub use rewrite::Rewrite;

/// The stage's registered name.
pub const NAME: &str = HeadWindowConfig::NAME;
/// The default layout strategy.
pub const DEFAULT_LAYOUT: &str = "layout.store_order_fill";
/// The largest default head window, in tokens (the head when the budget is large).
pub const DEFAULT_HEAD_TOKENS: u64 = 4_000;
/// The default head window as a share of the budget, when that is below
/// [`DEFAULT_HEAD_TOKENS`].
///
/// Why 0.05: the head is read on every turn and sits under every fold's floor, so at small
/// windows it is paid for on every turn and shortens the time between folds (each of which
/// rewrites the recent window). In the economy bench (`cargo bench -p foldwire-benches
/// --bench economy`, one seed, growth 0.45) a head of 0.15 cost 1.25x client compaction at
/// a 30k window where 0.05 cost 1.19x; at 0.05 the head holds the opening task (about
/// 1,100 tokens at 30k, 2,250 at 60k), and from about 80,000 available tokens the
/// 4,000-token cap applies as before. A
/// fixed 4,000 tokens was most of a small window (6,000 available at an 8k window) and left
/// nothing foldable.
pub const DEFAULT_HEAD_FRACTION: f64 = 0.05;
/// The default recent window, as a share of the budget.
pub const DEFAULT_RECENT_FRACTION: f64 = 0.3;

/// The stage's params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HeadWindowConfig {
    /// The layout strategy's registered name.
    pub layout: String,
    /// Params for the strategy.
    pub layout_params: serde_json::Value,
    /// The head window, in tokens (overrides `head_fraction`).
    pub head_tokens: Option<u64>,
    /// The head window as a share of the budget, capped at [`DEFAULT_HEAD_TOKENS`], when
    /// `head_tokens` is not set.
    pub head_fraction: f64,
    /// The recent window, in tokens (overrides `recent_fraction`).
    pub recent_tokens: Option<u64>,
    /// The recent window as a share of the budget, when `recent_tokens` is not set.
    pub recent_fraction: f64,
    /// Whether to place Anthropic cache markers.
    pub cache_markers: bool,
    /// Weight of a new usage sample in the calibration average.
    pub calibration_alpha: f64,
}

impl Default for HeadWindowConfig {
    fn default() -> Self {
        HeadWindowConfig {
            layout: DEFAULT_LAYOUT.to_owned(),
            layout_params: serde_json::Value::Null,
            head_tokens: None,
            head_fraction: DEFAULT_HEAD_FRACTION,
            recent_tokens: None,
            recent_fraction: DEFAULT_RECENT_FRACTION,
            cache_markers: true,
            calibration_alpha: DEFAULT_CALIBRATION_ALPHA,
        }
    }
}

impl HeadWindowConfig {
    /// Checks the values a deserializer cannot.
    ///
    /// # Errors
    /// A fraction outside 0..=1 or an empty layout name.
    pub fn validate(&self) -> Result<(), BuildError> {
        if !(0.0..=1.0).contains(&self.recent_fraction) {
            return Err(BuildError::new(
                NAME,
                format!(
                    "recent_fraction must be between 0 and 1, got {}",
                    self.recent_fraction
                ),
            ));
        }
        if !(0.0..=1.0).contains(&self.head_fraction) {
            return Err(BuildError::new(
                NAME,
                format!(
                    "head_fraction must be between 0 and 1, got {}",
                    self.head_fraction
                ),
            ));
        }
        if !(0.0..=1.0).contains(&self.calibration_alpha) {
            return Err(BuildError::new(
                NAME,
                format!(
                    "calibration_alpha must be between 0 and 1, got {}",
                    self.calibration_alpha
                ),
            ));
        }
        if self.layout.trim().is_empty() {
            return Err(BuildError::new(
                NAME,
                "layout must name a registered layout strategy",
            ));
        }
        Ok(())
    }

    /// This config with a turn's overrides applied (`layout`, `head_tokens`,
    /// `recent_tokens`; `window` is applied to the budget by the stage).
    pub fn with_options(&self, options: &foldwire_core::TurnOptions) -> Self {
        let mut out = self.clone();
        if let Some(name) = &options.layout
            && *name != out.layout
        {
            out.layout = name.clone();
            out.layout_params = serde_json::Value::Null;
        }
        if let Some(v) = options.head_tokens {
            out.head_tokens = Some(v);
        }
        if let Some(v) = options.recent_tokens {
            out.recent_tokens = Some(v);
        }
        out
    }

    /// The head window in tokens for a request with `available` tokens: `head_tokens` when
    /// set, else [`default_head_tokens`] with this config's fraction.
    pub fn head_tokens_for(&self, available: u64) -> u64 {
        self.head_tokens
            .unwrap_or_else(|| fraction_of(available, self.head_fraction).min(DEFAULT_HEAD_TOKENS))
    }
}

/// The default head window for a request with `available` tokens: [`DEFAULT_HEAD_FRACTION`]
/// of it, at most [`DEFAULT_HEAD_TOKENS`].
pub fn default_head_tokens(available: u64) -> u64 {
    fraction_of(available, DEFAULT_HEAD_FRACTION).min(DEFAULT_HEAD_TOKENS)
}

fn fraction_of(tokens: u64, fraction: f64) -> u64 {
    (tokens as f64 * fraction) as u64
}

/// The stage.
#[derive(Debug, Clone)]
pub struct HeadWindowStage {
    config: HeadWindowConfig,
    layout: Resolved<dyn Layout>,
}

impl Default for HeadWindowStage {
    fn default() -> Self {
        let config = HeadWindowConfig::default();
        HeadWindowStage {
            layout: Resolved::per_turn("layout", &config.layout, &config.layout_params),
            config,
        }
    }
}

impl HeadWindowStage {
    /// A stage with this config, built without a registry: its layout strategy is built
    /// from the turn's registry on each run.
    ///
    /// # Errors
    /// Invalid values.
    pub fn new(config: HeadWindowConfig) -> Result<Self, BuildError> {
        config.validate()?;
        Ok(HeadWindowStage {
            layout: Resolved::per_turn("layout", &config.layout, &config.layout_params),
            config,
        })
    }

    /// A stage with this config whose layout strategy is resolved now, from `cx`'s registry.
    ///
    /// # Errors
    /// Invalid values, or a layout that is not registered or refuses its params.
    pub fn build(config: HeadWindowConfig, cx: &BuildCx<'_>) -> Result<Self, BuildError> {
        config.validate()?;
        Ok(HeadWindowStage {
            layout: Resolved::build(cx, NAME, "layout", &config.layout, &config.layout_params)?,
            config,
        })
    }
}

impl ComponentConfig for HeadWindowConfig {
    const KIND: ComponentKind = ComponentKind::Stage;
    const NAME: &'static str = "layout.head_window";
    const DESCRIPTION: &'static str = "Measures the head and recent windows, orders the units with its layout strategy and places cache markers.";

    fn build(self, cx: &BuildCx<'_>) -> Result<Component, BuildError> {
        Ok(Component::Stage(Arc::new(HeadWindowStage::build(
            self, cx,
        )?)))
    }
}

foldwire_core::register_config!(HeadWindowConfig);

#[foldwire_core::async_trait]
impl Stage for HeadWindowStage {
    fn name(&self) -> &'static str {
        NAME
    }

    fn requires(&self) -> &'static [Fact] {
        &[Fact::Decoded]
    }

    fn provides(&self) -> &'static [Fact] {
        &[Fact::LaidOut]
    }

    fn strategies(&self) -> Vec<StrategyUse> {
        vec![StrategyUse {
            param: "layout",
            kind: ComponentKind::Layout,
            name: self.config.layout.clone(),
            params: self.config.layout_params.clone(),
        }]
    }

    async fn run(&self, turn: &mut Turn, cx: &StageCx) -> Result<(), StageError> {
        let config = self.config.with_options(&turn.options);
        // A turn option naming another layout is built for this turn; the configured one
        // was resolved with the pipeline.
        let layout = if config.layout == self.config.layout {
            self.layout.get(cx.registry.as_ref())
        } else {
            cx.registry.layout(&config.layout, &config.layout_params)
        };
        let layout = layout.map_err(|e| {
            StageError::caused(
                NAME,
                format!(
                    "cannot build layout strategy `{}` (is foldwire_plugins::link() called?)",
                    config.layout
                ),
                e,
            )
        })?;
        if !layout.blocks() {
            return lay_out(turn, layout.as_ref(), cx.estimator.as_ref(), &config).map(|_| ());
        }
        // A layout that waits (an endpoint, a script) would hold the worker other sessions
        // share: the whole layout runs on the blocking pool instead, the turn moved there
        // and back (a stand-in with the same body holds its place meanwhile).
        let stand_in = Turn::new(
            turn.session.clone(),
            turn.wire,
            turn.body.clone(),
            SessionState::new(turn.session.clone()),
        );
        let mut owned = std::mem::replace(turn, stand_in);
        let estimator = Arc::clone(&cx.estimator);
        let laid = crate::strategy_scope::StrategyScope::default()
            .off_worker(move || {
                let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    lay_out(&mut owned, layout.as_ref(), estimator.as_ref(), &config).map(|_| ())
                }));
                (owned, result)
            })
            .await;
        match laid {
            Ok((owned, result)) => {
                *turn = owned;
                result.unwrap_or_else(|_| {
                    Err(StageError::Failed {
                        stage: NAME,
                        message: "the layout strategy panicked".into(),
                    })
                })
            }
            Err(e) => Err(StageError::caused(NAME, "the layout did not finish", e)),
        }
    }
}

/// The zones of one request and what laying it out did.
#[derive(Debug, Clone, PartialEq)]
pub struct LayoutOutcome {
    /// Size and rewrite of the request.
    pub rewrite: Rewrite,
    /// The head window in store order (before reordering).
    pub head: HeadZone,
    /// Tokens per zone.
    pub zones: refusal::ZoneTokens,
    /// True when the request was sent in an order other than store order.
    pub reordered: bool,
    /// What the cache markers did (Anthropic only).
    pub markers: cache_markers::MarkerOutcome,
}

/// The key a unit is compared by across turns: its fingerprint, and for a unit a stage
/// rewrote (a trimmed tool result) also its bytes, so a changed unit counts as a rewrite.
pub fn unit_key(m: &Message) -> MessageId {
    if !m.id.0.is_empty() && !m.modified {
        return m.id.clone();
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    m.raw.hash(&mut h);
    MessageId(format!("{}raw:{:016x}", m.id.0, h.finish()))
}

fn frame_digest(conv: &Conversation) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    conv.source.get(..conv.messages_span.start).hash(&mut h);
    conv.source.get(conv.messages_span.end..).hash(&mut h);
    for o in &conv.overrides {
        o.key.hash(&mut h);
        o.value.hash(&mut h);
    }
    h.finish()
}

fn sum(tokens: &[u64], range: Range<usize>) -> u64 {
    tokens.get(range).map_or(0, |t| t.iter().sum())
}

/// Lays out one turn's conversation with `layout`: places a live reset's transition,
/// measures the windows, orders the units, places cache markers, refuses when the request
/// cannot fit, and records the rewrite metric in the report (`request_tokens`,
/// `rewritten_tokens`) and the state. This is the whole stage without the registry lookup.
///
/// # Errors
/// No decoded conversation, a strategy order that is not a permutation
/// of whole wire messages, or [`StageError::Refused`] when the request is over budget.
pub fn lay_out(
    turn: &mut Turn,
    layout: &dyn Layout,
    estimator: &dyn TokenEstimator,
    config: &HeadWindowConfig,
) -> Result<LayoutOutcome, StageError> {
    if let Some(window) = turn.options.window {
        turn.budget.window = window;
    }
    let mut head = match HeadState::load(&turn.state) {
        Ok(h) => h,
        Err(e) => {
            turn.report.warn(
                NAME,
                "layout_state_unreadable",
                format!("{e}; starting a fresh head"),
            );
            HeadState::default()
        }
    };
    update_calibration(&mut turn.state, &mut head, config.calibration_alpha);
    turn.budget.calibration = turn.state.calibration;
    let budget = turn.budget;
    let available = budget.available();
    let recent_window = config
        .recent_tokens
        .unwrap_or((available as f64 * config.recent_fraction) as u64);
    let conv = turn
        .conversation
        .as_mut()
        .ok_or(StageError::NotDecoded { stage: NAME })?;

    // A live reset: re-insert the transition where it belongs.
    let mut head_start_unit = 0usize;
    let after_reset = head.transition.is_some();
    // Earlier resets' transitions are history now; they stay on the wire unless a block
    // covers them.
    let covered = |id: &MessageId| {
        turn.state
            .blocks
            .iter()
            .any(|b| b.active && b.message_ids.contains(id))
    };
    for past in head.past_transitions.iter_mut() {
        if !covered(&past.id) {
            reset::place_transition(conv, past);
        }
    }
    if let Some(transition) = head.transition.as_mut() {
        let (at, lost) = reset::place_transition(conv, transition);
        if lost {
            turn.report.warn(
                NAME,
                "transition_anchor_lost",
                "the messages around the reset's transition are gone from the request; the transition is sent last",
            );
        }
        head_start_unit = at;
    }

    // As the request will be encoded: envelopes on each wire message's first unit, frame
    // units (system / developer messages) in the frame.
    let crate::kernel::RequestTokens {
        frame: frame_tokens,
        units: tokens,
    } = crate::kernel::measure(conv, estimator);
    let head_tokens = config.head_tokens_for(available);
    let groups = windows::groups(&conv.messages);
    let group_tokens = windows::group_tokens(&groups, &tokens);
    let start_g = windows::group_of(&groups, head_start_unit);
    let sealed_here = head.sealed
        && !head.head_ids.is_empty()
        && conv.messages.get(head_start_unit).map(|m| &m.id) == head.head_ids.first();
    let (end_g, filling) = if sealed_here {
        (
            windows::sealed_end(&conv.messages, &groups, start_g, &head.head_ids),
            false,
        )
    } else {
        windows::head_walk(
            &conv.messages,
            &groups,
            &group_tokens,
            start_g,
            head_tokens,
            after_reset,
        )
    };
    let head_units = windows::units_of(&groups, start_g..end_g);
    let recent_g = windows::recent_start(&group_tokens, end_g, recent_window);
    let recent_unit = windows::units_of(&groups, recent_g..groups.len())
        .start
        .max(head_units.end);
    let n = conv.messages.len();

    let zones = refusal::ZoneTokens {
        budget: available,
        frame: frame_tokens,
        head: sum(&tokens, head_units.clone()),
        history: sum(&tokens, 0..head_units.start) + sum(&tokens, head_units.end..recent_unit),
        recent: sum(&tokens, recent_unit..n),
        pinned: conv
            .messages
            .iter()
            .zip(&tokens)
            .filter(|(m, _)| m.pin.is_some())
            .map(|(_, t)| t)
            .sum(),
        recent_window,
        after_reset,
    };
    if zones.request() > available {
        let relief = refusal::Relief::of(
            &turn.ranges,
            conv,
            &turn.state,
            &crate::ranges_build::UsedProtection::in_extensions(&turn.extensions),
            estimator,
            budget,
        );
        let refused = refusal::refusal(NAME, &zones, &relief);
        turn.report.refusal = Some(refused.clone());
        // Keep the transition's anchor; nothing else of this turn is remembered.
        if let Err(e) = head.store(&mut turn.state) {
            turn.report
                .warn(NAME, "layout_state_unsaved", e.to_string());
        }
        return Err(StageError::Refused(refused));
    }

    if !filling {
        head.sealed = true;
    }
    head.head_ids = conv
        .messages
        .get(head_units.clone())
        .map(|units| units.iter().map(|m| m.id.clone()).collect())
        .unwrap_or_default();

    let zone = HeadZone {
        start: head_units.start,
        end: head_units.end,
        after_reset,
        filling,
        generation: head.generation,
    };
    let keys: Vec<MessageId> = conv.messages.iter().map(unit_key).collect();
    head.last_stored = conv
        .messages
        .iter()
        .rev()
        .find(|m| m.origin != Origin::Injected)
        .map(unit_key);
    let unchanged =
        rewrite::unchanged_prefix_tokens(&head.previous, keys.iter().zip(tokens.iter().copied()));
    // A strategy that calls out (HTTP, a plugin) reports its fallbacks into this report.
    let scope = crate::strategy_scope::StrategyScope::new(&turn.options);
    let plan = scope.enter(|| {
        layout.arrange(&LayoutRequest {
            messages: &conv.messages,
            tokens: &tokens,
            budget,
            state: &head.strategy,
            head: zone,
            unchanged_prefix_tokens: unchanged,
        })
    });
    scope.report_into(&mut turn.report, NAME);
    let plan = plan.map_err(|r| {
        turn.report.refusal = Some(r.clone());
        StageError::Refused(r)
    })?;
    check_order(&plan.order, &groups, n, layout.name())?;
    if plan.seal_head {
        head.sealed = true;
    }
    let reordered = plan.order.iter().enumerate().any(|(i, &o)| i != o);

    // Reorder units and their measurements.
    let mut slots: Vec<Option<Message>> = std::mem::take(&mut conv.messages)
        .into_iter()
        .map(Some)
        .collect();
    conv.messages = plan
        .order
        .iter()
        .filter_map(|&i| slots.get_mut(i).and_then(Option::take))
        .collect();
    let sent: Vec<SentUnit> = plan
        .order
        .iter()
        .filter_map(|&i| {
            Some(SentUnit {
                id: keys.get(i)?.clone(),
                tokens: *tokens.get(i)?,
            })
        })
        .collect();

    let digest = frame_digest(conv);
    let frame_changed = head.previous_frame.is_some_and(|d| d != digest)
        || head.previous_frame.is_none() && !head.previous.is_empty();
    let mut measured = rewrite::measure(
        &head.previous,
        &sent,
        frame_tokens,
        frame_changed || head.previous.is_empty(),
    );

    // The client's own units, unchanged: what the model still reads verbatim.
    let verbatim: u64 = conv
        .messages
        .iter()
        .zip(&sent)
        .filter(|(m, _)| m.origin == Origin::Client && !m.modified)
        .map(|(_, u)| u.tokens)
        .sum();
    let mut markers = cache_markers::MarkerOutcome::default();
    if conv.wire.dialect().cache_markers() && config.cache_markers && !conv.messages.is_empty() {
        let zone_of = |orig: usize| {
            if head_units.contains(&orig) {
                0
            } else if orig >= recent_unit {
                2
            } else {
                1
            }
        };
        let last_of = |z: u8| plan.order.iter().rposition(|&o| zone_of(o) == z);
        let mut boundaries = vec![n.saturating_sub(1)];
        boundaries.extend(last_of(0));
        boundaries.extend(last_of(1));
        match cache_markers::place(conv, &boundaries) {
            Ok(m) => markers = m,
            Err(e) => turn
                .report
                .warn(NAME, "cache_markers_skipped", e.to_string()),
        }
        if markers.placed + markers.dropped > 0 {
            // The markers changed bytes: count the request as it now goes out. Their bytes
            // ride on a rewrite when there is one (they sit at the zone boundaries it moves).
            let total = crate::kernel::measure(conv, estimator).total();
            let added = total.saturating_sub(measured.request_tokens);
            if measured.rewritten_tokens > 0 {
                measured.rewritten_tokens += added;
            }
            measured.request_tokens = total;
        }
    }

    let report = &mut turn.report;
    report.count("request_tokens", measured.request_tokens);
    report.count("layout.frame_tokens", frame_tokens);
    report.count("layout.verbatim_tokens", verbatim);
    report.count("rewritten_tokens", measured.rewritten_tokens);
    report.count("layout.appended_tokens", measured.appended_tokens);
    report.count("layout.head_tokens", zones.head);
    report.count("layout.history_tokens", zones.history);
    report.count("layout.recent_tokens", zones.recent);
    report.count("layout.head_filling", u64::from(filling && after_reset));
    report.count("layout.reordered", u64::from(reordered));
    report.count("layout.cache_markers_placed", markers.placed);
    report.count("layout.cache_markers_client_kept", markers.kept);
    report.count("layout.cache_markers_client_dropped", markers.dropped);

    head.strategy = plan.state;
    head.previous = sent;
    head.previous_frame = Some(digest);
    head.last_estimate = measured.request_tokens;
    head.store(&mut turn.state)
        .map_err(|e| StageError::caused(NAME, "cannot record the head window", e))?;
    Ok(LayoutOutcome {
        rewrite: measured,
        head: zone,
        zones,
        reordered,
        markers,
    })
}

/// The session state as the layout will see it once it has laid out this turn, when the
/// session has no head recorded yet (its first turn): a copy of `state` with the head window
/// `conv` opens with. `ranges.build` builds its ranges against it, so the head holds from
/// the first turn although the layout runs after `fold`. The head is measured the way
/// [`lay_out`] measures it (whole wire messages from the start, `head_tokens` at most, a
/// call never split from its result), so the layout records the same head. `None` (use
/// `state` as it is) once a head is recorded or sealed, while a reset's transition waits to
/// be placed (the layout starts the new head there), or when the head would be empty.
///
/// The copy is not kept: only the layout records a head, so a pipeline without it never
/// protects one beyond the ranges it offers.
///
/// # Errors
/// The state's `head` field holds something that is not this stage's state.
pub fn with_first_head(
    state: &SessionState,
    conv: &Conversation,
    estimator: &dyn TokenEstimator,
    head_tokens: u64,
) -> Result<Option<SessionState>, LayoutStateError> {
    let mut head = HeadState::load(state)?;
    if !head.head_ids.is_empty() || head.sealed || head.transition.is_some() {
        return Ok(None);
    }
    let tokens = crate::kernel::measure(conv, estimator).units;
    let groups = windows::groups(&conv.messages);
    let group_tokens = windows::group_tokens(&groups, &tokens);
    let (end, _) = windows::head_walk(
        &conv.messages,
        &groups,
        &group_tokens,
        0,
        head_tokens,
        false,
    );
    let units = windows::units_of(&groups, 0..end);
    head.head_ids = conv
        .messages
        .get(units)
        .map(|u| u.iter().map(|m| m.id.clone()).collect())
        .unwrap_or_default();
    if head.head_ids.is_empty() {
        return Ok(None);
    }
    let mut with_head = state.clone();
    head.store(&mut with_head)?;
    Ok(Some(with_head))
}

/// Checks a strategy's order: a permutation of `0..n` that keeps each wire message's units
/// together and in order.
/// Checks that a strategy's order is a permutation of the units that keeps each wire
/// message's units together and in order (`groups`: [`windows::groups`]).
///
/// # Errors
/// [`StageError::Failed`] naming the strategy and what was wrong.
pub fn check_order(
    order: &[usize],
    groups: &[Range<usize>],
    n: usize,
    strategy: &str,
) -> Result<(), StageError> {
    let fail = |what: String| StageError::Failed {
        stage: NAME,
        message: format!("layout strategy `{strategy}` returned an invalid order: {what}"),
    };
    if order.len() != n {
        return Err(fail(format!("{} indices for {n} units", order.len())));
    }
    let mut seen = vec![false; n];
    for &i in order {
        match seen.get_mut(i) {
            Some(s) if !*s => *s = true,
            Some(_) => return Err(fail(format!("unit {i} appears twice"))),
            None => return Err(fail(format!("unit {i} does not exist"))),
        }
    }
    let mut pos = vec![0usize; n];
    for (p, &i) in order.iter().enumerate() {
        if let Some(slot) = pos.get_mut(i) {
            *slot = p;
        }
    }
    for g in groups {
        let first = pos.get(g.start).copied().unwrap_or(0);
        for (k, i) in g.clone().enumerate() {
            if pos.get(i).copied() != Some(first + k) {
                return Err(fail(format!(
                    "the wire message of units {}..{} is split",
                    g.start, g.end
                )));
            }
        }
    }
    Ok(())
}

/// One event of a replayed session.
#[derive(Debug, Clone)]
pub enum ReplayEvent {
    /// A request, decoded.
    Request(Box<Conversation>),
    /// A topic reset with its transition text.
    Reset(String),
}

/// One replayed request: its size and rewrite, or the refusal.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayTurn {
    /// 1-based request number.
    pub turn: usize,
    /// Size and rewrite (zero when refused).
    pub rewrite: Rewrite,
    /// True when the request went out in an order other than store order.
    pub reordered: bool,
    /// The refusal, when the request could not fit.
    pub refusal: Option<Refusal>,
}

/// Replays a session turn by turn through the layout (no other stage runs: feed requests
/// that are already folded, or the client's raw requests), returning per-turn tokens and
/// rewrite. `state` carries over between calls, so a caller can interleave its own stages.
///
/// # Errors
/// A turn failed for a reason other than a refusal.
pub fn replay(
    events: impl IntoIterator<Item = ReplayEvent>,
    state: &mut SessionState,
    layout: &dyn Layout,
    estimator: &dyn TokenEstimator,
    config: &HeadWindowConfig,
    budget: foldwire_core::Budget,
) -> Result<Vec<ReplayTurn>, StageError> {
    let session = state
        .session
        .clone()
        .or_else(|| SessionId::new("replay").ok())
        .ok_or_else(|| StageError::Failed {
            stage: NAME,
            message: "replay needs a session id".to_owned(),
        })?;
    let mut out = Vec::new();
    for event in events {
        let conv = match event {
            ReplayEvent::Reset(text) => {
                reset(state, &text).map_err(|e| StageError::Failed {
                    stage: NAME,
                    message: e.to_string(),
                })?;
                continue;
            }
            ReplayEvent::Request(conv) => *conv,
        };
        let mut turn = Turn::new(
            session.clone(),
            conv.wire,
            conv.source.clone(),
            std::mem::take(state),
        );
        turn.budget = budget;
        turn.conversation = Some(conv);
        let result = lay_out(&mut turn, layout, estimator, config);
        *state = std::mem::take(&mut turn.state);
        let number = out.len() + 1;
        match result {
            Ok(o) => out.push(ReplayTurn {
                turn: number,
                rewrite: o.rewrite,
                reordered: o.reordered,
                refusal: None,
            }),
            Err(StageError::Refused(r)) => out.push(ReplayTurn {
                turn: number,
                rewrite: Rewrite::default(),
                reordered: false,
                refusal: Some(r),
            }),
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}
