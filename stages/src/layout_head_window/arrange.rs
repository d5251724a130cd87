//! Laying out one request: measuring its zones, asking the layout strategy for an order,
//! applying it, and recording what went out for the next turn's rewrite.

use std::hash::{Hash, Hasher};
use std::ops::Range;

use foldwire_core::{
    Conversation, HeadZone, Layout, LayoutRequest, Message, MessageId, Origin, SessionState,
    StageError, TokenEstimator, Turn,
};
use foldwire_wire::dialect::WireDialect;

use super::{
    HeadState, HeadWindowConfig, LayoutStateError, NAME, Rewrite, SentUnit, cache_markers, refusal,
    reset, rewrite, update_calibration, windows,
};

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
    known: Option<&crate::kernel::units::KnownUnitTokens>,
) -> Result<Option<SessionState>, LayoutStateError> {
    with_first_head_measured(state, conv, head_tokens, || {
        crate::kernel::measure_knowing(conv, estimator, known).units
    })
}

/// [`with_first_head`], with the units' tokens as [`crate::kernel::measure`] gives them
/// from `measured`, called only when the session has no head yet: a stage that measured
/// the request already (`ranges.build`, on a first turn the whole history) does not
/// measure it again.
///
/// # Errors
/// As [`with_first_head`].
pub fn with_first_head_measured(
    state: &SessionState,
    conv: &Conversation,
    head_tokens: u64,
    measured: impl FnOnce() -> Vec<u64>,
) -> Result<Option<SessionState>, LayoutStateError> {
    let mut head = HeadState::load(state)?;
    if !head.head_ids.is_empty() || head.sealed || head.transition.is_some() {
        return Ok(None);
    }
    let tokens = measured();
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
