//! Usage capture and context-overflow learning.
//!
//! Every answered turn records a [`UsageSample`] (foldwire's estimate of the request vs the
//! provider's reported prompt tokens) so the layout stage can calibrate its estimator. A
//! context-overflow error from upstream passes through verbatim but teaches the session its
//! real window, kept in `SessionState::extra` under [`WINDOW_KEY`].

use foldwire_core::state::UsageSample;
use foldwire_core::{SessionState, Wire};
use foldwire_wire::dialect::WireDialect;
use foldwire_wire::stream::{StreamEvent, Usage};
use serde_json::Value;

/// Where a learned window is kept in the session state.
pub const WINDOW_KEY: &str = "learned_window";

/// The last usage report among `events` (providers send cumulative counts).
pub fn last_usage<'a>(events: impl IntoIterator<Item = &'a StreamEvent>) -> Option<Usage> {
    events
        .into_iter()
        .filter_map(|e| match e {
            StreamEvent::Usage(u) => Some(u.clone()),
            _ => None,
        })
        .reduce(merge)
}

/// Later counts win; counts a later report leaves out are kept (Anthropic sends input
/// tokens in `message_start` and output tokens in `message_delta`).
fn merge(a: Usage, b: Usage) -> Usage {
    Usage {
        input_tokens: b.input_tokens.or(a.input_tokens),
        output_tokens: b.output_tokens.or(a.output_tokens),
        cache_read: b.cache_read.or(a.cache_read),
        cache_write: b.cache_write.or(a.cache_write),
        reasoning_tokens: b.reasoning_tokens.or(a.reasoning_tokens),
        total_tokens: b.total_tokens.or(a.total_tokens),
    }
}

/// The whole prompt the provider counted (Anthropic reports cached tokens apart from
/// `input_tokens`; the other wires include them).
pub fn prompt_tokens(wire: Wire, usage: &Usage) -> Option<u64> {
    wire.dialect().prompt_tokens(usage)
}

/// Records one sample for the session's latest turn; keeps the newest `keep` samples.
pub fn record(state: &mut SessionState, estimated: u64, reported: u64, keep: usize) {
    state.usage.push(UsageSample {
        turn: state.turns,
        estimated,
        reported,
    });
    let excess = state.usage.len().saturating_sub(keep.max(1));
    state.usage.drain(..excess);
}

/// The window an error body reveals, if the error is a context overflow: the smallest
/// token count it names (the limit; the other number is the request's size), else, when
/// it names none, `fallback` (the request's own size, which did not fit).
pub fn overflow_window(wire: Wire, status: u16, body: &[u8], fallback: u64) -> Option<u64> {
    let text = String::from_utf8_lossy(body);
    let message = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| {
            let e = v.get("error").cloned().unwrap_or(v);
            e.get("message").and_then(Value::as_str).map(str::to_owned)
        })
        .unwrap_or_else(|| text.to_string());
    let lower = message.to_lowercase();
    let is_overflow = wire.dialect().is_overflow(status, &text, &lower);
    if !is_overflow {
        return None;
    }
    let named = numbers(&message).into_iter().filter(|n| *n >= 1024).min();
    named.or((fallback > 0).then_some(fallback))
}

/// The decimal numbers in a text (digits, possibly with `,` separators).
fn numbers(text: &str) -> Vec<u64> {
    let mut out = Vec::new();
    let mut current = String::new();
    for c in text.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_digit() {
            current.push(c);
        } else if c == ',' && !current.is_empty() {
            continue;
        } else if !current.is_empty() {
            if let Ok(n) = current.parse() {
                out.push(n);
            }
            current.clear();
        }
    }
    out
}

/// Stores a learned window (only ever lowering it) and returns the window now in force.
pub fn learn_window(state: &mut SessionState, window: u64) -> u64 {
    let now = learned_window(state).map_or(window, |w| w.min(window));
    state.extra.insert(WINDOW_KEY.to_owned(), Value::from(now));
    now
}

/// The window learned for this session, if any.
pub fn learned_window(state: &SessionState) -> Option<u64> {
    state.extra.get(WINDOW_KEY).and_then(Value::as_u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overflow_errors_of_each_wire_reveal_the_limit() {
        let a = br#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210345 tokens > 200000 maximum"}}"#;
        assert_eq!(overflow_window(Wire::Anthropic, 400, a, 9), Some(200_000));
        let o = br#"{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130,512 tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}"#;
        assert_eq!(overflow_window(Wire::OpenAiChat, 400, o, 9), Some(128_000));
        let g = br#"{"error":{"code":400,"message":"The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}"#;
        assert_eq!(overflow_window(Wire::Gemini, 400, g, 9), Some(1_048_576));
        let other = br#"{"error":{"message":"invalid x-api-key"}}"#;
        assert_eq!(overflow_window(Wire::Anthropic, 401, other, 9), None);
        let bare = br#"{"error":{"message":"prompt is too long"}}"#;
        assert_eq!(
            overflow_window(Wire::Anthropic, 400, bare, 5000),
            Some(5000)
        );
    }

    #[test]
    fn windows_only_go_down_and_samples_are_bounded() {
        let mut s = SessionState::default();
        assert_eq!(learn_window(&mut s, 100_000), 100_000);
        assert_eq!(learn_window(&mut s, 150_000), 100_000);
        assert_eq!(learned_window(&s), Some(100_000));
        for i in 0..10 {
            record(&mut s, 100, 100 + i, 4);
        }
        assert_eq!(s.usage.len(), 4);
        assert_eq!(s.usage.last().unwrap().reported, 109);
    }
}
