//! The reasoning of a model's turn that must go back to the provider with the turn's calls
//! when a loop round continues it:
//! - Anthropic's thinking blocks: with thinking on, the last assistant message before tool
//!   results must start with one, signature intact;
//! - Responses reasoning items: encrypted reasoning carries the model's thread from call to
//!   call, and each item goes back right before the item it produced;
//! - Gemini's thought signatures: Gemini 3 refuses a function call of the current turn that
//!   comes back without the signature it was sent with;
//! - Chat: the reasoning text DeepSeek's thinking mode wants back with the calls it led to.
//!
//! A [`TurnReasoning`] is read from the answer's events (or its body) once a round follows;
//! the dialect says where each wire keeps it ([`super::Dialect::observe_reasoning`]), and
//! the dialect's `round_items` puts it back where the provider sent it.

use serde_json::Value;

use foldwire_core::Wire;

use super::dialect;

/// What of one answer's reasoning goes back with its calls.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TurnReasoning {
    /// What goes back of the answer, as the provider sent it: Anthropic's `thinking` /
    /// `redacted_thinking` blocks (in front of the text and calls); Responses: every output
    /// item of an answer that reasons, in order (the round resends them in place of the
    /// text and calls).
    pub items: Vec<Value>,
    /// Gemini: the `thoughtSignature` of each function call, in the order of the calls.
    pub call_signatures: Vec<Option<String>>,
    /// Chat: reasoning streamed as text (DeepSeek's `reasoning_content`), which goes back
    /// on the message that made the calls.
    pub text: String,
    /// Anthropic: where each open streamed block of `items` is, by content-block index.
    pub(crate) open: Vec<(u64, usize)>,
}

impl TurnReasoning {
    /// Whether a streamed event's payload (its SSE `data`, or a JSON array element) or a
    /// whole answer body of `wire` may hold reasoning to send back. A caller keeps only
    /// these, and reads them ([`TurnReasoning::from_payloads`]) only when a round follows:
    /// most answers end the turn, and their events are not parsed twice.
    pub fn may_hold(wire: Wire, payload: &str) -> bool {
        dialect(wire)
            .reasoning_markers()
            .iter()
            .any(|m| payload.contains(m))
    }

    /// The reasoning of an answer of `wire`, read from its payloads in order (those
    /// [`TurnReasoning::may_hold`] kept, or all of them).
    pub fn from_payloads<'a>(wire: Wire, payloads: impl IntoIterator<Item = &'a str>) -> Self {
        let d = dialect(wire);
        let mut reasoning = TurnReasoning::default();
        for payload in payloads {
            if Self::may_hold(wire, payload)
                && let Ok(value) = serde_json::from_str::<Value>(payload)
            {
                d.observe_reasoning(&value, &mut reasoning);
            }
        }
        reasoning
    }
}
