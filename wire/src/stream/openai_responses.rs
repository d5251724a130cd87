//! OpenAI Responses: `response.*` stream events (reasoning items, commentary-phase messages,
//! function calls, errors) and the non-streaming response body.

use std::collections::BTreeSet;

use serde_json::Value;

use super::event::{StreamEvent, Usage};
use super::json::{array_at, at, error_event, is_set, nonempty_str_at, push_usage, str_at, u64_at};

/// Usage from a Responses `usage` object.
fn usage(v: &Value) -> Usage {
    Usage {
        input_tokens: u64_at(v, &["input_tokens"]),
        output_tokens: u64_at(v, &["output_tokens"]),
        cache_read: u64_at(v, &["input_tokens_details", "cached_tokens"]),
        cache_write: u64_at(v, &["input_tokens_details", "cache_write_tokens"]),
        reasoning_tokens: u64_at(v, &["output_tokens_details", "reasoning_tokens"]),
        total_tokens: u64_at(v, &["total_tokens"]),
    }
}

/// Usage, error and stop reason of a `response` object.
fn response_end(r: &Value, out: &mut Vec<StreamEvent>) {
    if let Some(u) = at(r, &["usage"]).filter(|u| u.is_object()) {
        push_usage(out, usage(u));
    }
    if let Some(error) = at(r, &["error"]).filter(|e| !e.is_null()) {
        out.push(error_event(error));
    }
    let reason = str_at(r, &["incomplete_details", "reason"]).or_else(|| str_at(r, &["status"]));
    if let Some(reason) = reason {
        out.push(StreamEvent::Stop {
            reason: reason.to_owned(),
        });
    }
}

/// The start of a function-call item; true when `item` is one.
fn call_start(index: u64, item: &Value, out: &mut Vec<StreamEvent>) -> bool {
    let kind = str_at(item, &["type"]).unwrap_or_default();
    if kind != "function_call" && kind != "custom_tool_call" {
        return false;
    }
    out.push(StreamEvent::ToolCallStart {
        index,
        id: str_at(item, &["call_id"]).unwrap_or_default().to_owned(),
        name: str_at(item, &["name"]).unwrap_or_default().to_owned(),
        server: false,
    });
    let args = nonempty_str_at(item, &["arguments"]).or_else(|| nonempty_str_at(item, &["input"]));
    if let Some(args) = args {
        out.push(StreamEvent::ToolCallArgsDelta {
            index,
            json: args.to_owned(),
        });
    }
    true
}

/// The encrypted reasoning of a reasoning item, as a signature event.
fn reasoning_signature(index: u64, item: &Value, out: &mut Vec<StreamEvent>) {
    if str_at(item, &["type"]) == Some("reasoning")
        && let Some(sig) = nonempty_str_at(item, &["encrypted_content"])
    {
        out.push(StreamEvent::ReasoningSignature {
            index,
            signature: sig.to_owned(),
        });
    }
}

/// Interprets one Responses event after another.
#[derive(Debug, Default)]
pub(crate) struct ResponsesStream {
    /// Output indices of function calls not yet done.
    open_calls: BTreeSet<u64>,
}

impl ResponsesStream {
    /// The normalized events of one payload.
    pub fn event(&mut self, v: &Value) -> Vec<StreamEvent> {
        let mut out = Vec::new();
        let kind = str_at(v, &["type"]).unwrap_or_default();
        let index = u64_at(v, &["output_index"]).unwrap_or(0);
        let delta = || str_at(v, &["delta"]).unwrap_or_default().to_owned();
        match kind {
            "response.output_item.added" => {
                let item = at(v, &["item"]).unwrap_or(&Value::Null);
                if call_start(index, item, &mut out) {
                    self.open_calls.insert(index);
                }
            }
            "response.function_call_arguments.delta" | "response.custom_tool_call_input.delta" => {
                out.push(StreamEvent::ToolCallArgsDelta {
                    index,
                    json: delta(),
                })
            }
            "response.output_item.done" => {
                let item = at(v, &["item"]).unwrap_or(&Value::Null);
                if self.open_calls.remove(&index) {
                    out.push(StreamEvent::ToolCallEnd { index });
                }
                reasoning_signature(index, item, &mut out);
            }
            "response.output_text.delta" => out.push(StreamEvent::TextDelta {
                index,
                text: delta(),
            }),
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                out.push(StreamEvent::ReasoningDelta {
                    index,
                    text: delta(),
                })
            }
            "response.completed" | "response.incomplete" | "response.failed" => {
                if let Some(r) = at(v, &["response"]) {
                    response_end(r, &mut out);
                }
            }
            "error" => out.push(error_event(at(v, &["error"]).unwrap_or(v))),
            _ => {}
        }
        if out.is_empty() {
            out.push(StreamEvent::Other {
                kind: kind.to_owned(),
            });
        }
        out
    }
}

/// The normalized events of a non-streaming Responses body (a response or an error).
pub(crate) fn response(v: &Value) -> Vec<StreamEvent> {
    let mut out = Vec::new();
    if is_set(at(v, &["error"])) && at(v, &["output"]).is_none() {
        out.push(error_event(at(v, &["error"]).unwrap_or(v)));
        return out;
    }
    for (index, item) in (0u64..).zip(array_at(v, &["output"])) {
        match str_at(item, &["type"]).unwrap_or_default() {
            "message" => {
                for part in array_at(item, &["content"]) {
                    if let Some(text) = nonempty_str_at(part, &["text"]) {
                        out.push(StreamEvent::TextDelta {
                            index,
                            text: text.to_owned(),
                        });
                    }
                }
            }
            "reasoning" => {
                let summary = array_at(item, &["summary"]);
                for part in summary.iter().chain(array_at(item, &["content"])) {
                    if let Some(text) = nonempty_str_at(part, &["text"]) {
                        out.push(StreamEvent::ReasoningDelta {
                            index,
                            text: text.to_owned(),
                        });
                    }
                }
                reasoning_signature(index, item, &mut out);
            }
            _ => {
                if call_start(index, item, &mut out) {
                    out.push(StreamEvent::ToolCallEnd { index });
                }
            }
        }
    }
    response_end(v, &mut out);
    out
}
