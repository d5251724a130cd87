//! Gemini: `GenerateContentResponse` objects, whether streamed as SSE, streamed as a JSON
//! array, or returned whole. Thought parts are reasoning; `thoughtSignature` is a signature.

use serde_json::Value;

use super::event::{StreamEvent, Usage};
use super::json::{array_at, at, error_event, nonempty_str_at, push_usage, str_at, u64_at};

/// Usage from a Gemini `usageMetadata` object.
fn usage(v: &Value) -> Usage {
    Usage {
        input_tokens: u64_at(v, &["promptTokenCount"]),
        output_tokens: u64_at(v, &["candidatesTokenCount"]),
        cache_read: u64_at(v, &["cachedContentTokenCount"]),
        cache_write: None,
        reasoning_tokens: u64_at(v, &["thoughtsTokenCount"]),
        total_tokens: u64_at(v, &["totalTokenCount"]),
    }
}

/// Interprets one `GenerateContentResponse` after another. Gemini sends each function call
/// whole, so a call's start, arguments and end come out of one object.
#[derive(Debug, Default)]
pub(crate) struct GeminiStream {
    /// The number the next function call gets.
    next_call: u64,
}

impl GeminiStream {
    /// The normalized events of one response object.
    pub fn event(&mut self, v: &Value) -> Vec<StreamEvent> {
        let mut out = Vec::new();
        if let Some(error) = at(v, &["error"]).filter(|e| !e.is_null()) {
            out.push(error_event(error));
        }
        for (position, candidate) in (0u64..).zip(array_at(v, &["candidates"])) {
            let index = u64_at(candidate, &["index"]).unwrap_or(position);
            for part in array_at(candidate, &["content", "parts"]) {
                self.part(index, part, &mut out);
            }
            if let Some(reason) = str_at(candidate, &["finishReason"]) {
                out.push(StreamEvent::Stop {
                    reason: reason.to_owned(),
                });
            }
        }
        if let Some(reason) = str_at(v, &["promptFeedback", "blockReason"]) {
            out.push(StreamEvent::Stop {
                reason: reason.to_owned(),
            });
        }
        if let Some(u) = at(v, &["usageMetadata"]) {
            push_usage(&mut out, usage(u));
        }
        if out.is_empty() {
            out.push(StreamEvent::Other {
                kind: "response".to_owned(),
            });
        }
        out
    }

    fn part(&mut self, index: u64, part: &Value, out: &mut Vec<StreamEvent>) {
        if let Some(text) = nonempty_str_at(part, &["text"]) {
            let text = text.to_owned();
            if at(part, &["thought"]).and_then(Value::as_bool) == Some(true) {
                out.push(StreamEvent::ReasoningDelta { index, text });
            } else {
                out.push(StreamEvent::TextDelta { index, text });
            }
        }
        if let Some(call) = at(part, &["functionCall"]) {
            let call_index = self.next_call;
            self.next_call += 1;
            out.push(StreamEvent::ToolCallStart {
                index: call_index,
                id: str_at(call, &["id"]).unwrap_or_default().to_owned(),
                name: str_at(call, &["name"]).unwrap_or_default().to_owned(),
                server: false,
            });
            let args = at(call, &["args"]).map_or_else(|| "{}".to_owned(), Value::to_string);
            out.push(StreamEvent::ToolCallArgsDelta {
                index: call_index,
                json: args,
            });
            out.push(StreamEvent::ToolCallEnd { index: call_index });
        }
        if let Some(sig) = nonempty_str_at(part, &["thoughtSignature"]) {
            out.push(StreamEvent::ReasoningSignature {
                index,
                signature: sig.to_owned(),
            });
        }
    }
}

/// The normalized events of a non-streaming Gemini body (a response or an error).
pub(crate) fn response(v: &Value) -> Vec<StreamEvent> {
    GeminiStream::default().event(v)
}
