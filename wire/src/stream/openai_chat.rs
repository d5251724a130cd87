//! OpenAI Chat Completions: `chat.completion.chunk` stream payloads (including the
//! OpenAI-compatible dialects of DeepSeek, GLM and OpenRouter) and the non-streaming body.

use std::collections::BTreeSet;

use serde_json::Value;

use super::event::{StreamEvent, Usage};
use super::json::{array_at, at, error_event, is_set, nonempty_str_at, push_usage, str_at, u64_at};

/// Usage from an OpenAI Chat `usage` object.
fn usage(v: &Value) -> Usage {
    Usage {
        input_tokens: u64_at(v, &["prompt_tokens"]),
        output_tokens: u64_at(v, &["completion_tokens"]),
        cache_read: u64_at(v, &["prompt_tokens_details", "cached_tokens"]),
        cache_write: u64_at(v, &["prompt_tokens_details", "cache_write_tokens"]),
        reasoning_tokens: u64_at(v, &["completion_tokens_details", "reasoning_tokens"]),
        total_tokens: u64_at(v, &["total_tokens"]),
    }
}

/// Reasoning and answer text of a `delta` or `message` object.
fn text_events(index: u64, m: &Value, out: &mut Vec<StreamEvent>) {
    // DeepSeek says `reasoning_content`, OpenRouter says `reasoning`.
    let reasoning =
        nonempty_str_at(m, &["reasoning_content"]).or_else(|| nonempty_str_at(m, &["reasoning"]));
    if let Some(text) = reasoning {
        out.push(StreamEvent::ReasoningDelta {
            index,
            text: text.to_owned(),
        });
    }
    if let Some(text) = nonempty_str_at(m, &["content"]) {
        out.push(StreamEvent::TextDelta {
            index,
            text: text.to_owned(),
        });
    }
}

/// Interprets one chunk after another.
#[derive(Debug, Default)]
pub(crate) struct ChatStream {
    /// `tool_calls[].index` values started and not yet ended.
    open_tools: BTreeSet<u64>,
}

impl ChatStream {
    /// The `data: [DONE]` sentinel: closes any call left open.
    pub fn done(&mut self) -> Vec<StreamEvent> {
        let mut out = self.close_all();
        out.push(StreamEvent::Other {
            kind: "done".to_owned(),
        });
        out
    }

    fn close_all(&mut self) -> Vec<StreamEvent> {
        std::mem::take(&mut self.open_tools)
            .into_iter()
            .map(|index| StreamEvent::ToolCallEnd { index })
            .collect()
    }

    /// The normalized events of one chunk.
    pub fn event(&mut self, v: &Value) -> Vec<StreamEvent> {
        let mut out = Vec::new();
        for (position, choice) in (0u64..).zip(array_at(v, &["choices"])) {
            let index = u64_at(choice, &["index"]).unwrap_or(position);
            let delta = at(choice, &["delta"]).unwrap_or(&Value::Null);
            text_events(index, delta, &mut out);
            for (tpos, call) in (0u64..).zip(array_at(delta, &["tool_calls"])) {
                let ti = u64_at(call, &["index"]).unwrap_or(tpos);
                let id = str_at(call, &["id"]);
                let name = str_at(call, &["function", "name"]);
                if (id.is_some() || name.is_some()) && self.open_tools.insert(ti) {
                    out.push(StreamEvent::ToolCallStart {
                        index: ti,
                        id: id.unwrap_or_default().to_owned(),
                        name: name.unwrap_or_default().to_owned(),
                        server: false,
                    });
                }
                if let Some(args) = nonempty_str_at(call, &["function", "arguments"]) {
                    out.push(StreamEvent::ToolCallArgsDelta {
                        index: ti,
                        json: args.to_owned(),
                    });
                }
            }
            if let Some(reason) = str_at(choice, &["finish_reason"]) {
                out.extend(self.close_all());
                out.push(StreamEvent::Stop {
                    reason: reason.to_owned(),
                });
            }
        }
        if let Some(u) = at(v, &["usage"]).filter(|u| u.is_object()) {
            push_usage(&mut out, usage(u));
        }
        if let Some(error) = at(v, &["error"]).filter(|e| !e.is_null()) {
            out.push(error_event(error));
        }
        if out.is_empty() {
            out.push(StreamEvent::Other {
                kind: "chunk".to_owned(),
            });
        }
        out
    }
}

/// The normalized events of a non-streaming Chat body (a completion or an error).
pub(crate) fn response(v: &Value) -> Vec<StreamEvent> {
    let mut out = Vec::new();
    if is_set(at(v, &["error"])) {
        out.push(error_event(at(v, &["error"]).unwrap_or(v)));
        return out;
    }
    for (position, choice) in (0u64..).zip(array_at(v, &["choices"])) {
        let index = u64_at(choice, &["index"]).unwrap_or(position);
        let message = at(choice, &["message"]).unwrap_or(&Value::Null);
        text_events(index, message, &mut out);
        for (ti, call) in (0u64..).zip(array_at(message, &["tool_calls"])) {
            out.push(StreamEvent::ToolCallStart {
                index: ti,
                id: str_at(call, &["id"]).unwrap_or_default().to_owned(),
                name: str_at(call, &["function", "name"])
                    .unwrap_or_default()
                    .to_owned(),
                server: false,
            });
            out.push(StreamEvent::ToolCallArgsDelta {
                index: ti,
                json: str_at(call, &["function", "arguments"])
                    .unwrap_or_default()
                    .to_owned(),
            });
            out.push(StreamEvent::ToolCallEnd { index: ti });
        }
        if let Some(reason) = str_at(choice, &["finish_reason"]) {
            out.push(StreamEvent::Stop {
                reason: reason.to_owned(),
            });
        }
    }
    if let Some(u) = at(v, &["usage"]).filter(|u| u.is_object()) {
        push_usage(&mut out, usage(u));
    }
    out
}
