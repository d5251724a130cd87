//! A loop round's answer as the next round sends it back to the provider.
//!
//! When the model's answer holds only the proxy's calls, the next round appends the model's
//! turn and the calls' results. That turn must be the answer as the provider sent it, not a
//! rebuild from its visible text and calls:
//! - Anthropic: every content block in its order. With thinking on, the assistant message
//!   before tool results starts with a thinking block, and thinking that came between
//!   blocks (after a server tool's result, or between calls) stays where it was; a server
//!   tool's call and result stay, or the model loses what it ran;
//! - Responses: every output item in its order; a reasoning item (encrypted reasoning
//!   carries the model's thread from call to call) goes right before the item it produced;
//! - Gemini: every part in its order, thought parts included; Gemini 3 refuses a function
//!   call of the current turn that comes back without the signature it was sent with;
//! - Chat: the reasoning DeepSeek's thinking mode (`reasoning_content`) and OpenRouter
//!   (`reasoning_details`, signed for the models that sign theirs) want back on the message
//!   with the calls it led to (the message's text and calls have one order only).
//!
//! A [`RoundAnswer`] is read from the answer's events (or its body) once a round follows;
//! the dialect says which payloads may matter ([`super::Dialect::answer_markers`]) and how
//! to read them ([`super::Dialect::observe_answer`]), and its `round_items` puts the answer
//! back, falling back to the text and calls (with the reasoning the wire requires) when the
//! answer read does not hold every call, or when the round asks for its minimal form.

use serde_json::Value;

use foldwire_core::Wire;

use super::dialect;

/// What of one answer goes back with its calls.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RoundAnswer {
    /// The answer's parts as the provider sent them, in order: Anthropic content blocks
    /// (streamed blocks put together from their deltas), Responses output items, Gemini
    /// parts (streamed text of one kind joined); Chat: OpenRouter's `reasoning_details`
    /// entries (each put together from its deltas), which go back in either form.
    pub items: Vec<Value>,
    /// Whether `items` are the whole answer as it was sent ([`RoundAnswer::from_payloads`]);
    /// only then does a round send them back as they came. Otherwise (the default, and
    /// [`RoundAnswer::minimal`]) a round is built from the text and calls, with the
    /// reasoning the wire requires.
    pub whole: bool,
    /// Chat: reasoning streamed as text (DeepSeek's `reasoning_content`), which goes back
    /// on the message that made the calls.
    pub reasoning_text: String,
    /// Anthropic: the streamed blocks of `items` still open.
    pub(crate) open: Vec<OpenBlock>,
}

/// A streamed Anthropic content block whose deltas are still arriving.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct OpenBlock {
    /// The block's `index` in the stream.
    pub(crate) index: u64,
    /// Where the block is in [`RoundAnswer::items`].
    pub(crate) at: usize,
    /// The block's input so far, from `input_json_delta` pieces (a call's input is whole
    /// JSON only at the block's end).
    pub(crate) input_json: String,
}

impl RoundAnswer {
    /// Whether a streamed event's payload (its SSE `data`, or a JSON array element) or a
    /// whole answer body of `wire` may hold part of the answer a round sends back. A caller
    /// keeps only these, and reads them ([`RoundAnswer::from_payloads`]) only when a round
    /// follows: most answers end the turn, and their events are not parsed twice.
    pub fn may_hold(wire: Wire, payload: &str) -> bool {
        dialect(wire)
            .answer_markers()
            .iter()
            .any(|m| payload.contains(m))
    }

    /// The answer of `wire` read from its payloads in order (those [`RoundAnswer::may_hold`]
    /// kept, or all of them).
    pub fn from_payloads<'a>(wire: Wire, payloads: impl IntoIterator<Item = &'a str>) -> Self {
        let d = dialect(wire);
        let mut answer = RoundAnswer {
            whole: true,
            ..RoundAnswer::default()
        };
        for payload in payloads {
            if Self::may_hold(wire, payload)
                && let Ok(value) = serde_json::from_str::<Value>(payload)
            {
                d.observe_answer(&value, &mut answer);
            }
        }
        answer
    }

    /// The same answer for a round in its minimal form: the text and calls, with only the
    /// reasoning the wire requires (for a provider that refused part of the answer as
    /// input).
    pub fn minimal(&self) -> Self {
        RoundAnswer {
            whole: false,
            ..self.clone()
        }
    }
}
