//! Anthropic Messages: stream events (`message_start`, `content_block_*`, `message_delta`, …)
//! and the non-streaming message body, as normalized events.

use std::collections::BTreeSet;

use serde_json::Value;

use super::event::{StreamEvent, Usage};
use super::json::{array_at, at, error_event, is_set, nonempty_str_at, push_usage, str_at, u64_at};

/// Usage from an Anthropic `usage` object.
fn usage(v: &Value) -> Usage {
    Usage {
        input_tokens: u64_at(v, &["input_tokens"]),
        output_tokens: u64_at(v, &["output_tokens"]),
        cache_read: u64_at(v, &["cache_read_input_tokens"]),
        cache_write: u64_at(v, &["cache_creation_input_tokens"]),
        reasoning_tokens: u64_at(v, &["output_tokens_details", "thinking_tokens"]),
        total_tokens: None,
    }
}

/// True for block types that are tool calls; the flag says whether the provider runs it.
fn tool_kind(block_type: &str) -> Option<bool> {
    match block_type {
        "tool_use" => Some(false),
        "server_tool_use" | "mcp_tool_use" => Some(true),
        _ => None,
    }
}

/// The events a content block carries when it arrives whole (block start, or a body).
fn block_events(index: u64, block: &Value, out: &mut Vec<StreamEvent>) -> bool {
    let kind = str_at(block, &["type"]).unwrap_or_default();
    match kind {
        "text" => {
            if let Some(text) = nonempty_str_at(block, &["text"]) {
                out.push(StreamEvent::TextDelta {
                    index,
                    text: text.to_owned(),
                });
            }
        }
        "thinking" => {
            if let Some(text) = nonempty_str_at(block, &["thinking"]) {
                out.push(StreamEvent::ReasoningDelta {
                    index,
                    text: text.to_owned(),
                });
            }
            if let Some(sig) = nonempty_str_at(block, &["signature"]) {
                out.push(StreamEvent::ReasoningSignature {
                    index,
                    signature: sig.to_owned(),
                });
            }
        }
        "redacted_thinking" => {
            if let Some(data) = nonempty_str_at(block, &["data"]) {
                out.push(StreamEvent::ReasoningSignature {
                    index,
                    signature: data.to_owned(),
                });
            }
        }
        _ => {
            if let Some(server) = tool_kind(kind) {
                out.push(StreamEvent::ToolCallStart {
                    index,
                    id: str_at(block, &["id"]).unwrap_or_default().to_owned(),
                    name: str_at(block, &["name"]).unwrap_or_default().to_owned(),
                    server,
                });
                return true;
            }
        }
    }
    false
}

/// Interprets one Anthropic stream event after another.
#[derive(Debug, Default)]
pub(crate) struct AnthropicStream {
    /// Indices of open tool-call blocks.
    tool_blocks: BTreeSet<u64>,
}

impl AnthropicStream {
    /// The normalized events of one `data:` payload.
    pub fn event(&mut self, v: &Value) -> Vec<StreamEvent> {
        let mut out = Vec::new();
        let kind = str_at(v, &["type"]).unwrap_or_default();
        let index = u64_at(v, &["index"]).unwrap_or(0);
        match kind {
            "message_start" => {
                if let Some(u) = at(v, &["message", "usage"]) {
                    push_usage(&mut out, usage(u));
                }
            }
            "content_block_start" => {
                if let Some(block) = at(v, &["content_block"])
                    && block_events(index, block, &mut out)
                {
                    self.tool_blocks.insert(index);
                }
            }
            "content_block_delta" => {
                let delta = at(v, &["delta"]).unwrap_or(&Value::Null);
                let field = match str_at(delta, &["type"]).unwrap_or_default() {
                    "text_delta" => Some("text"),
                    "thinking_delta" => Some("thinking"),
                    "signature_delta" => Some("signature"),
                    "input_json_delta" => Some("partial_json"),
                    _ => None,
                };
                if let Some(text) = field.and_then(|f| str_at(delta, &[f])) {
                    let text = text.to_owned();
                    out.push(match field {
                        Some("text") => StreamEvent::TextDelta { index, text },
                        Some("thinking") => StreamEvent::ReasoningDelta { index, text },
                        Some("signature") => StreamEvent::ReasoningSignature {
                            index,
                            signature: text,
                        },
                        _ => StreamEvent::ToolCallArgsDelta { index, json: text },
                    });
                }
            }
            "content_block_stop" if self.tool_blocks.remove(&index) => {
                out.push(StreamEvent::ToolCallEnd { index });
            }
            "message_delta" => {
                if let Some(u) = at(v, &["usage"]) {
                    push_usage(&mut out, usage(u));
                }
                if let Some(reason) = str_at(v, &["delta", "stop_reason"]) {
                    out.push(StreamEvent::Stop {
                        reason: reason.to_owned(),
                    });
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

/// The normalized events of a non-streaming Anthropic body (a message or an error).
pub(crate) fn response(v: &Value) -> Vec<StreamEvent> {
    let mut out = Vec::new();
    if str_at(v, &["type"]) == Some("error") || is_set(at(v, &["error"])) {
        out.push(error_event(at(v, &["error"]).unwrap_or(v)));
        return out;
    }
    for (index, block) in (0u64..).zip(array_at(v, &["content"])) {
        if block_events(index, block, &mut out) {
            let input = at(block, &["input"]).map(Value::to_string);
            out.push(StreamEvent::ToolCallArgsDelta {
                index,
                json: input.unwrap_or_else(|| "{}".to_owned()),
            });
            out.push(StreamEvent::ToolCallEnd { index });
        }
    }
    if let Some(u) = at(v, &["usage"]) {
        push_usage(&mut out, usage(u));
    }
    if let Some(reason) = str_at(v, &["stop_reason"]) {
        out.push(StreamEvent::Stop {
            reason: reason.to_owned(),
        });
    }
    out
}
