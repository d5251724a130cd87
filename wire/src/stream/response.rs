//! Non-streaming bodies (`response-*.json`, `error-*.json`) as the same normalized events a
//! stream of the same answer would give.

use foldwire_core::Wire;
use serde_json::Value;

use super::error::StreamError;
use super::event::StreamEvent;
use super::{anthropic, gemini, openai_chat, openai_responses};

/// Reads a whole response or error body of `wire` into normalized events.
pub fn parse_response(wire: Wire, body: &[u8]) -> Result<Vec<StreamEvent>, StreamError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| StreamError::Body {
        wire,
        path: format!("$ (line {}, column {})", e.line(), e.column()),
        expected: format!("a JSON document: {e}"),
    })?;
    if !value.is_object() {
        return Err(StreamError::Body {
            wire,
            path: "$".to_owned(),
            expected: "a JSON object".to_owned(),
        });
    }
    Ok(match wire {
        Wire::Anthropic => anthropic::response(&value),
        Wire::OpenAiChat => openai_chat::response(&value),
        Wire::OpenAiResponses => openai_responses::response(&value),
        Wire::Gemini => gemini::response(&value),
    })
}
