//! Wire detection: from the request path, else from the body's shape. An unknown or
//! undecidable shape is an error naming what was seen, never a silent guess; a caller that
//! knows the wire simply does not call [`detect`].

use foldwire_core::Wire;

use super::error::DetectError;
use super::scan::{self, Field};

/// The wire of a request, from its path (`/v1/messages`, `/v1/chat/completions`,
/// `/v1/responses`, `/v1beta/models/x:generateContent`) or, when the path is absent or not a
/// known endpoint, from the shape of its body.
pub fn detect(path: Option<&str>, body: &[u8]) -> Result<Wire, DetectError> {
    if let Some(wire) = path.and_then(wire_of_path) {
        return Ok(wire);
    }
    let owned_path = path.map(str::to_owned);
    let not_object = |reason: String| DetectError::NotAnObject {
        path: owned_path.clone(),
        reason,
    };
    let src = std::str::from_utf8(body)
        .map_err(|e| not_object(format!("not UTF-8 at byte {}", e.valid_up_to())))?;
    let start = scan::skip_ws(body, 0);
    let end = scan::value_end(body, start).map_err(|e| {
        not_object(format!(
            "invalid JSON at byte {}: expected {}",
            e.at, e.expected
        ))
    })?;
    if body.get(start) != Some(&b'{') {
        return Err(not_object(format!(
            "it is {}",
            scan::kind_name(body, &(start..end))
        )));
    }
    let top = scan::object_fields(src, &(start..end)).map_err(|e| {
        not_object(format!(
            "invalid JSON at byte {}: expected {}",
            e.at, e.expected
        ))
    })?;
    let keys: Vec<String> = top.iter().map(|f| f.key.to_string()).collect();
    let has = |k: &str| scan::field(&top, k).is_some();
    if has("contents") {
        return Ok(Wire::Gemini);
    }
    if has("input") && !has("messages") {
        return Ok(Wire::OpenAiResponses);
    }
    if !has("messages") {
        return Err(DetectError::Unknown {
            path: owned_path,
            keys,
        });
    }
    let (anthropic, chat) = messages_signals(src, &top);
    match (anthropic, chat) {
        (true, false) => Ok(Wire::Anthropic),
        (false, true) => Ok(Wire::OpenAiChat),
        _ => Err(DetectError::Ambiguous {
            path: owned_path,
            candidates: vec![Wire::Anthropic, Wire::OpenAiChat],
            keys,
        }),
    }
}

/// The wire a known endpoint path speaks.
fn wire_of_path(path: &str) -> Option<Wire> {
    let path = path
        .split(['?', '#'])
        .next()
        .unwrap_or_default()
        .trim_end_matches('/');
    if path.contains(":generateContent")
        || path.contains(":streamGenerateContent")
        || path.contains(":countTokens")
    {
        Some(Wire::Gemini)
    } else if path.ends_with("/chat/completions") {
        Some(Wire::OpenAiChat)
    } else if path.ends_with("/responses") || path.ends_with("/responses/compact") {
        Some(Wire::OpenAiResponses)
    } else if path.ends_with("/messages") || path.ends_with("/messages/count_tokens") {
        Some(Wire::Anthropic)
    } else {
        None
    }
}

const ANTHROPIC_TOP_KEYS: &[&str] = &[
    "system",
    "anthropic_version",
    "stop_sequences",
    "thinking",
    "top_k",
];
const CHAT_TOP_KEYS: &[&str] = &[
    "max_completion_tokens",
    "n",
    "response_format",
    "reasoning_effort",
    "logprobs",
    "frequency_penalty",
    "presence_penalty",
    "stream_options",
    "parallel_tool_calls",
    "logit_bias",
];
const ANTHROPIC_BLOCKS: &[&str] = &[
    "tool_use",
    "tool_result",
    "thinking",
    "redacted_thinking",
    "document",
    "image",
];
const CHAT_PARTS: &[&str] = &["image_url", "input_audio", "file"];

/// Whether the body shows Anthropic signs and whether it shows OpenAI Chat signs.
fn messages_signals(src: &str, top: &[Field<'_>]) -> (bool, bool) {
    let bytes = src.as_bytes();
    let mut anthropic = ANTHROPIC_TOP_KEYS
        .iter()
        .any(|k| scan::field(top, k).is_some());
    let mut chat = CHAT_TOP_KEYS.iter().any(|k| scan::field(top, k).is_some());
    if let Some(tools) = scan::field(top, "tools") {
        for tool in scan::array_items(bytes, &tools.value).unwrap_or_default() {
            let fields = scan::object_fields(src, &tool).unwrap_or_default();
            anthropic |= scan::field(&fields, "input_schema").is_some();
            chat |= scan::field(&fields, "function").is_some();
        }
    }
    let Some(messages) = scan::field(top, "messages") else {
        return (anthropic, chat);
    };
    for message in scan::array_items(bytes, &messages.value).unwrap_or_default() {
        let fields = scan::object_fields(src, &message).unwrap_or_default();
        let role = scan::field(&fields, "role").and_then(|f| scan::string_value(src, &f.value));
        chat |= matches!(role.as_deref(), Some("system" | "developer" | "tool"));
        chat |= ["tool_calls", "reasoning_content", "tool_call_id"]
            .iter()
            .any(|k| scan::field(&fields, k).is_some());
        let Some(content) = scan::field(&fields, "content") else {
            continue;
        };
        for block in scan::array_items(bytes, &content.value).unwrap_or_default() {
            let bf = scan::object_fields(src, &block).unwrap_or_default();
            let ty = scan::field(&bf, "type").and_then(|f| scan::string_value(src, &f.value));
            let ty = ty.as_deref().unwrap_or_default();
            anthropic |= ANTHROPIC_BLOCKS.contains(&ty)
                && (ty != "image" || scan::field(&bf, "source").is_some());
            chat |= CHAT_PARTS.contains(&ty);
        }
    }
    (anthropic, chat)
}
