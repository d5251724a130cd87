//! The layout's persisted state, topic resets, the head fingerprints the kernel reads, and
//! the calibration update.

use bytes::Bytes;
use foldwire_core::{
    Budget, Conversation, Message, MessageId, MessageKind, Origin, Role, SessionState, Wire,
    block::ExtraFields,
};
use foldwire_wire::dialect::WireDialect;
use serde::{Deserialize, Serialize};

/// Weight of the newest usage sample in the calibration's exponential average.
pub const DEFAULT_CALIBRATION_ALPHA: f64 = 0.3;

/// One unit of the previous request as it was sent: its fingerprint and its tokens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct SentUnit {
    /// The unit's fingerprint.
    pub id: MessageId,
    /// Its estimated tokens.
    pub tokens: u64,
}

/// A topic transition: the text that opens a new head and where it sits among the client's
/// messages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct Transition {
    /// The transition text, sent as a user text unit.
    pub text: String,
    /// The fingerprint the stage gives the transition unit.
    pub id: MessageId,
    /// The last unit the session had sent when the reset was asked for (`None`: the
    /// transition opens the conversation).
    pub after: Option<MessageId>,
    /// The first unit that followed the transition, once one has (the head's second unit;
    /// never folded, so the most reliable anchor).
    pub before: Option<MessageId>,
}

/// The layout stage's state, kept in [`SessionState::head`]. Every field has a default, so
/// older or partial state loads; unknown fields are kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct HeadState {
    /// How many resets the session has had.
    pub generation: u64,
    /// The live transition, when the head starts at a reset.
    pub transition: Option<Transition>,
    /// Transitions of earlier resets: ordinary history now, still re-inserted every turn
    /// (the client never stores them) until a fold takes them.
    pub past_transitions: Vec<Transition>,
    /// Fingerprints of the head's units, in order.
    pub head_ids: Vec<MessageId>,
    /// True once a unit no longer fitted the head: its membership is then fixed, so a
    /// calibration change cannot make the head flip between filling and full.
    pub sealed: bool,
    /// The layout strategy's own state.
    pub strategy: serde_json::Value,
    /// The previous request as sent, for the rewrite metric.
    pub previous: Vec<SentUnit>,
    /// A digest of the previous request's frame (system, tools, params).
    pub previous_frame: Option<u64>,
    /// The newest usage-sample turn already folded into the calibration.
    pub calibrated_through: Option<u64>,
    /// The estimated tokens of the last request sent (what a usage sample compares with).
    pub last_estimate: u64,
    /// The newest client unit of the last request, in store order: where a reset's
    /// transition goes.
    pub last_stored: Option<MessageId>,
    /// Fields written by newer versions.
    #[serde(flatten)]
    pub extra: ExtraFields,
}

/// Errors of the layout's library calls.
#[derive(Debug, thiserror::Error)]
pub enum LayoutStateError {
    /// A reset was asked for without a transition text.
    #[error("reset: the transition text is empty; give the new topic in words")]
    EmptyTransition,
    /// `SessionState::head` holds something that is not the layout's state.
    #[error("session state field `head` is not layout.head_window state: {0}")]
    Corrupt(#[from] serde_json::Error),
}

impl HeadState {
    /// Reads the state from a session, defaulting when the field is null.
    ///
    /// # Errors
    /// The field holds JSON of another shape.
    pub fn load(state: &SessionState) -> Result<Self, LayoutStateError> {
        if state.head.is_null() {
            return Ok(HeadState::default());
        }
        // Deserialize from the borrowed value: no copy of the previous request's list.
        Ok(HeadState::deserialize(&state.head)?)
    }

    /// Writes the state into a session.
    ///
    /// # Errors
    /// Serialization failed (not expected for this type).
    pub fn store(&self, state: &mut SessionState) -> Result<(), LayoutStateError> {
        state.head = serde_json::to_value(self)?;
        Ok(())
    }
}

/// Starts a new head at a transition message: the next turn places a user text unit with
/// `text` after the last unit the session sent, and the old head becomes ordinary history.
/// Returns the new reset generation.
///
/// The transition is not stored by the client, so the stage re-inserts it every turn at
/// the same place (after the unit that preceded it, or before the unit that followed it).
///
/// # Errors
/// An empty text, or a `head` field that is not this stage's state.
pub fn reset(state: &mut SessionState, transition_text: &str) -> Result<u64, LayoutStateError> {
    if transition_text.trim().is_empty() {
        return Err(LayoutStateError::EmptyTransition);
    }
    let mut head = HeadState::load(state)?;
    head.generation += 1;
    if let Some(old) = head.transition.take() {
        head.past_transitions.push(old);
    }
    head.transition = Some(Transition {
        text: transition_text.to_owned(),
        id: MessageId(format!("foldwire-transition-{}", head.generation)),
        after: head.last_stored.clone(),
        before: None,
    });
    head.head_ids.clear();
    head.sealed = false;
    head.store(state)?;
    Ok(head.generation)
}

/// The head's units, as the kernel reads them; defined where kernel and stage meet.
pub use crate::head_record::head_fingerprints;

/// Folds the usage samples newer than the last update into `state.calibration`: an
/// exponential average of reported/estimated with weight `alpha` for each new sample,
/// bounded by [`Budget::CALIBRATION_BOUNDS`]. Samples with a zero estimate or report are
/// skipped. Runs at most once per turn (it remembers the newest sample turn it used).
/// Returns the calibration in force.
pub fn update_calibration(state: &mut SessionState, head: &mut HeadState, alpha: f64) -> f64 {
    let (lo, hi) = Budget::CALIBRATION_BOUNDS;
    let alpha = if alpha.is_finite() {
        alpha.clamp(0.0, 1.0)
    } else {
        DEFAULT_CALIBRATION_ALPHA
    };
    let mut calibration = if state.calibration.is_finite() {
        state.calibration.clamp(lo, hi)
    } else {
        1.0
    };
    let mut newest = head.calibrated_through;
    for sample in &state.usage {
        if head.calibrated_through.is_some_and(|t| sample.turn <= t) {
            continue;
        }
        newest = Some(newest.map_or(sample.turn, |t| t.max(sample.turn)));
        if sample.estimated == 0 || sample.reported == 0 {
            continue;
        }
        let ratio = (sample.reported as f64 / sample.estimated as f64).clamp(lo, hi);
        calibration = (1.0 - alpha) * calibration + alpha * ratio;
    }
    head.calibrated_through = newest;
    state.calibration = calibration.clamp(lo, hi);
    state.calibration
}

/// The raw JSON of a text block of `text` in the shape `wire` uses inside a message.
pub fn text_block(wire: Wire, text: &str) -> Bytes {
    Bytes::from(wire.dialect().text_part(text).to_string())
}

/// Inserts the live transition into the conversation as a user text unit on a new entry,
/// and returns its index in `messages`. Placement: before the unit that first followed it,
/// else after the unit that preceded it (moved past any tool results answering calls before
/// it, so a call stays with its result), else at the start when it opened the conversation,
/// else at the end (`anchor_lost` is then true).
pub fn place_transition(conv: &mut Conversation, transition: &mut Transition) -> (usize, bool) {
    let find = |id: &MessageId| conv.messages.iter().position(|m| &m.id == id);
    let group_start = |conv: &Conversation, i: usize| {
        let mut s = i;
        while s > 0
            && conv.messages.get(s - 1).map(|m| m.entry) == conv.messages.get(i).map(|m| m.entry)
        {
            s -= 1;
        }
        s
    };
    let group_end = |conv: &Conversation, i: usize| {
        let mut e = i + 1;
        while e < conv.messages.len()
            && conv.messages.get(e).map(|m| m.entry) == conv.messages.get(i).map(|m| m.entry)
        {
            e += 1;
        }
        e
    };
    let mut anchor_lost = false;
    let at = if let Some(i) = transition.before.as_ref().and_then(find) {
        group_start(conv, i)
    } else if let Some(j) = transition.after.as_ref().and_then(find) {
        let mut at = group_end(conv, j);
        // Never between a call and its result: step over groups holding results of calls
        // made before the insertion point.
        while at < conv.messages.len() && answers_earlier_call(&conv.messages, at) {
            at = group_end(conv, at);
        }
        at
    } else if transition.after.is_none() {
        0
    } else {
        anchor_lost = true;
        conv.messages.len()
    };
    let entry = conv.push_entry(Role::User);
    if let Some(e) = conv.entries.get_mut(entry) {
        e.unit_count = 1;
    }
    let mut unit = Message::synthesized(
        entry,
        Role::User,
        transition.text.clone(),
        Origin::Injected,
        text_block(conv.wire, &transition.text),
    );
    unit.id = transition.id.clone();
    unit.kind = MessageKind::Text;
    conv.messages.insert(at, unit);
    if transition.before.is_none() {
        transition.before = conv.messages.get(at + 1).map(|m| m.id.clone());
    }
    (at, anchor_lost)
}

/// True when the group starting at `at` holds a tool result whose call sits before `at`.
fn answers_earlier_call(messages: &[Message], at: usize) -> bool {
    let Some(entry) = messages.get(at).map(|m| m.entry) else {
        return false;
    };
    messages
        .iter()
        .skip(at)
        .take_while(|m| m.entry == entry)
        .filter(|m| m.kind == MessageKind::ToolResult)
        .filter_map(|m| m.tool.as_ref())
        .any(|link| {
            messages.iter().take(at).any(|c| {
                c.kind == MessageKind::ToolCall
                    && c.tool.as_ref().is_some_and(|t| t.call_id == link.call_id)
            })
        })
}
