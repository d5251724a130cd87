//! What a request costs as it will be sent: the estimate every budget check compares, made
//! from what the codec encodes rather than from the client's units alone.
//!
//! Counting only the units misses what the provider reads besides them: the wire message
//! around each unit (`{"role":"user","content":[…]}`), the summaries and notes foldwire
//! renders (synthesized units hold text, not bytes), and top-level overrides. At small
//! windows that gap was a quarter of the request, so calibration learned it as a factor
//! and shrank every budget. [`measure`] adds each wire message's encoded overhead to its
//! first unit ([`foldwire_wire::request::message_sizes`]) and counts the frame as encoded
//! ([`foldwire_wire::request::frame`]), so its total matches the encoded body.

use foldwire_core::{Conversation, SessionState, TokenEstimator};
use foldwire_wire::request;
use foldwire_wire::tokens::raw_tokens;

use super::prune::{FoldOutcome, fold_copy_linked};
use super::units::{KnownUnitTokens, Links, unit_tokens};

/// A request's estimated tokens, split the way the layout's zones need them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RequestTokens {
    /// The frame: everything outside the messages array (system, tools, params, overrides)
    /// plus the system and developer messages among the messages, which are frame too.
    pub frame: u64,
    /// Per unit, in conversation order: its own tokens plus, on the first unit of each wire
    /// message, that message's envelope. Zero for frame units (counted in `frame`).
    pub units: Vec<u64>,
}

impl RequestTokens {
    /// The whole request.
    pub fn total(&self) -> u64 {
        self.frame + self.units.iter().sum::<u64>()
    }
}

/// Estimates `conversation` as the codec would encode it now.
///
/// Envelope bytes are counted at four to a token whatever the estimator (they are JSON
/// punctuation and field names, which every tokenizer splits finely). When the
/// conversation cannot be encoded the envelopes are left out rather than failing: the
/// encode stage reports that error itself.
pub fn measure(conversation: &Conversation, estimator: &dyn TokenEstimator) -> RequestTokens {
    measure_knowing(conversation, estimator, None)
}

/// [`measure`], taking each unit's own estimate from `known` where the turn made it already.
pub fn measure_knowing(
    conversation: &Conversation,
    estimator: &dyn TokenEstimator,
    known: Option<&KnownUnitTokens>,
) -> RequestTokens {
    let wire = conversation.wire;
    let mut units: Vec<u64> = conversation
        .messages
        .iter()
        .enumerate()
        .map(|(i, u)| match known {
            Some(known) => known.unit(wire, i, u, estimator),
            None => unit_tokens(wire, u, estimator),
        })
        .collect();
    let mut frame = match request::frame(conversation) {
        Ok(bytes) => raw_tokens(wire, &bytes, estimator),
        Err(_) => (conversation.frame_len() as u64).div_ceil(4),
    };
    if let Ok(sizes) = request::message_sizes(conversation) {
        for size in sizes {
            let content: usize = conversation
                .messages
                .get(size.units.clone())
                .unwrap_or_default()
                .iter()
                .map(|u| {
                    if u.raw.is_empty() {
                        u.text.len()
                    } else {
                        u.raw.len()
                    }
                })
                .sum();
            let envelope = (size.bytes.saturating_sub(content) as u64).div_ceil(4);
            if let Some(first) = units.get_mut(size.units.start) {
                *first += envelope;
            }
        }
    }
    for (u, t) in conversation.messages.iter().zip(units.iter_mut()) {
        if u.is_frame() {
            frame += std::mem::take(t);
        }
    }
    RequestTokens { frame, units }
}

/// The estimated tokens of `conversation` once `state`'s active blocks are applied to it
/// (covered units off the wire, summaries rendered in their place, as the `fold` stage
/// sends it): what a fold policy must bring under its budget.
pub fn folded_request_tokens(
    conversation: &Conversation,
    state: &SessionState,
    estimator: &dyn TokenEstimator,
) -> u64 {
    fold_and_measure(conversation, state, estimator, None, None).0
}

/// [`folded_request_tokens`], with the folded copy it measured and what folding it did, so
/// a caller that goes on to send the same view need not fold it again; `None` when no
/// block covers anything (the conversation was measured as it is, not copied).
///
/// `known`: the units' estimates the turn made already ([`KnownUnitTokens`]), if any;
/// `links`: the units' links, when the caller has them for `conversation`.
pub fn fold_and_measure(
    conversation: &Conversation,
    state: &SessionState,
    estimator: &dyn TokenEstimator,
    known: Option<&KnownUnitTokens>,
    links: Option<&Links>,
) -> (u64, Option<(Conversation, FoldOutcome)>) {
    // No block covers anything (a new session's first measure): folding changes nothing,
    // so the conversation is measured as it is rather than copied whole first.
    if state.active_blocks().all(|b| b.effective.is_empty()) {
        return (
            measure_knowing(conversation, estimator, known).total(),
            None,
        );
    }
    let (folded, outcome) = fold_copy_linked(conversation, state, links);
    let tokens = measure_knowing(&folded, estimator, known).total();
    (tokens, Some((folded, outcome)))
}
