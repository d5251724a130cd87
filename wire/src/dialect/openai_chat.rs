//! OpenAI Chat Completions.

use foldwire_core::{Role, Wire};
use serde_json::{Map, Value, json};

use super::{
    CallOutput, Dialect, MediaSink, Pairing, Provider, ResultMedia, RoundAnswer, TrailingText,
    base64_of, data_url, file_name, forced_or_forbidden, joined, media_type_from_filename, obj_at,
    path_or, str_at,
};
use crate::request::extend::{ToolSpec, to_json};
use crate::stream::HiddenCall;

/// Leads the user message that carries restored media (tool messages carry text only).
const MEDIA_NOTE: &str = "[foldwire] The media restored by the restore call above:";

/// OpenAI Chat Completions (`POST /v1/chat/completions`).
pub(super) struct OpenAiChat;

impl Dialect for OpenAiChat {
    fn wire(&self) -> Wire {
        Wire::OpenAiChat
    }

    fn provider(&self) -> Provider {
        Provider::OpenAi
    }

    fn messages_key(&self) -> &'static str {
        "messages"
    }

    fn tool_entries(&self, tools: &[ToolSpec<'_>]) -> Vec<Value> {
        tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.schema}})
            })
            .collect()
    }

    /// The note is a system message after the client's leading ones.
    fn note_slot(
        &self,
        _field: &dyn Fn(&str) -> Option<Vec<u8>>,
        _note: &str,
    ) -> Option<(&'static str, Vec<u8>)> {
        None
    }

    fn trailing_text(&self, text: &str) -> TrailingText {
        TrailingText::Message(to_json(text))
    }

    fn image_tokens(&self, width: u32, height: u32) -> u64 {
        image_tokens(width, height)
    }

    fn low_detail_image_tokens(&self) -> Option<u64> {
        Some(LOW_DETAIL_TOKENS)
    }

    fn pairing(&self) -> Pairing {
        pairing(false)
    }

    fn text_part(&self, text: &str) -> Value {
        json!({"type": "text", "text": text})
    }

    fn is_tool_data(&self, map: &Map<String, Value>, key: &str) -> bool {
        is_tool_data(map, key)
    }

    fn media_markers(&self) -> &'static [&'static [u8]] {
        MEDIA_TYPES
    }

    fn media_at(&self, map: &Map<String, Value>, f: &mut dyn MediaSink) -> bool {
        media_at(map, f)
    }

    /// Restored media goes in a user message after the tool messages.
    fn round_items(
        &self,
        answer: &RoundAnswer,
        text: &str,
        calls: &[HiddenCall],
        results: &[CallOutput<'_>],
    ) -> Vec<Value> {
        let tool_calls: Vec<Value> = calls
            .iter()
            .map(|c| {
                json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}})
            })
            .collect();
        let content = if text.is_empty() {
            Value::Null
        } else {
            Value::from(text)
        };
        let mut assistant =
            json!({"role": "assistant", "content": content, "tool_calls": tool_calls});
        // Providers that stream their reasoning as text (DeepSeek's thinking mode) want it
        // back on the message whose calls the results answer.
        if !answer.reasoning_text.is_empty() {
            assistant["reasoning_content"] = Value::from(answer.reasoning_text.as_str());
        }
        // OpenRouter asks for `reasoning_details` back unmodified on the message whose
        // calls the results answer (models that sign their reasoning refuse the calls
        // without it).
        if !answer.items.is_empty() {
            assistant["reasoning_details"] = Value::from(answer.items.clone());
        }
        let mut items = vec![assistant];
        for (c, r) in calls.iter().zip(results) {
            items.push(json!({"role": "tool", "tool_call_id": c.id, "content": r.text}));
        }
        let media: Vec<Value> = results
            .iter()
            .flat_map(|r| r.media.iter().enumerate())
            .map(|(part, m)| media_part(m, part))
            .collect();
        if !media.is_empty() {
            let mut parts = vec![json!({"type": "text", "text": MEDIA_NOTE})];
            parts.extend(media);
            items.push(json!({"role": "user", "content": parts}));
        }
        items
    }

    fn answer_piece_numbers<'v>(&self, event: &'v mut Value) -> Vec<&'v mut Value> {
        let choices = event.get_mut("choices").and_then(Value::as_array_mut);
        choices
            .into_iter()
            .flatten()
            .filter_map(|c| {
                c.get_mut("delta")?
                    .get_mut("reasoning_details")?
                    .as_array_mut()
            })
            .flatten()
            .filter_map(|d| d.get_mut("index").filter(|i| i.is_u64()))
            .collect()
    }

    fn answer_piece_marker(&self) -> Option<&'static str> {
        Some("\"reasoning_details\"")
    }

    fn answer_markers(&self) -> &'static [&'static str] {
        &["reasoning_content", "reasoning_details"]
    }

    /// DeepSeek's `reasoning_content` text, and OpenRouter's `reasoning_details` (text,
    /// summaries and encrypted reasoning, with their signatures), each entry put together
    /// from the deltas that share its `index`.
    fn observe_answer(&self, payload: &Value, into: &mut RoundAnswer) {
        let choice = payload.pointer("/choices/0");
        let field = |key: &str| {
            choice
                .and_then(|c| c.get("delta").and_then(|d| d.get(key)))
                .or_else(|| choice.and_then(|c| c.get("message").and_then(|m| m.get(key))))
        };
        if let Some(text) = field("reasoning_content").and_then(Value::as_str) {
            into.reasoning_text.push_str(text);
        }
        let details = field("reasoning_details").and_then(Value::as_array);
        for detail in details.into_iter().flatten() {
            merge_detail(&mut into.items, detail);
        }
    }

    fn side_request(&self, body: &Value) -> Option<&'static str> {
        let format = body
            .get("response_format")
            .and_then(|f| f.get("type"))
            .and_then(Value::as_str);
        if format.is_some_and(|t| t != "text") {
            return Some("structured output");
        }
        // `function_call` is the older spelling of `tool_choice` (`{"name": …}` or "none").
        forced_or_forbidden(
            body.get("tool_choice")
                .or_else(|| body.get("function_call")),
        )
    }

    fn credential(&self, key: &str) -> (String, String) {
        credential(key)
    }

    fn one_shot(
        &self,
        path: &str,
        model: &str,
        system: &str,
        ask: &str,
        max_tokens: u64,
    ) -> (String, Value) {
        (
            path_or(path, "/v1/chat/completions"),
            json!({"model": model, "max_completion_tokens": max_tokens,
                   "messages": [{"role": "system", "content": system}, {"role": "user", "content": ask}]}),
        )
    }

    fn claims_path(&self, path: &str) -> Option<Option<String>> {
        path.ends_with("/chat/completions").then_some(None)
    }

    fn strip_calls(&self, body: &mut Value, is_proxy: &dyn Fn(&str) -> bool) -> bool {
        let mut changed = false;
        for choice in body
            .get_mut("choices")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            let Some(message) = choice.get_mut("message").and_then(Value::as_object_mut) else {
                continue;
            };
            let mut emptied = false;
            if let Some(calls) = message.get_mut("tool_calls").and_then(Value::as_array_mut) {
                let before = calls.len();
                calls.retain(|c| {
                    !c.get("function")
                        .and_then(|f| f.get("name"))
                        .and_then(Value::as_str)
                        .is_some_and(is_proxy)
                });
                changed |= calls.len() != before;
                emptied = calls.is_empty() && before > 0;
            }
            if emptied {
                message.remove("tool_calls");
                if choice["finish_reason"] == "tool_calls" {
                    choice["finish_reason"] = json!("stop");
                }
            }
        }
        changed
    }

    /// The message text (Chat has no list of parts in an answer).
    fn visible(&self, body: &Value) -> Vec<Value> {
        first_message(body)
            .and_then(|m| m.get("content"))
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .map(|t| vec![Value::from(t)])
            .unwrap_or_default()
    }

    /// Text is joined without a separator, as a streaming client concatenates the deltas.
    fn prepend(&self, body: &mut Value, earlier: Vec<Value>) {
        let Some(message) = body
            .get_mut("choices")
            .and_then(|c| c.get_mut(0))
            .and_then(|c| c.get_mut("message"))
            .and_then(Value::as_object_mut)
        else {
            return;
        };
        let mut text: String = earlier.iter().filter_map(Value::as_str).collect();
        if let Some(last) = message.get("content").and_then(Value::as_str) {
            text.push_str(last);
        }
        message.insert("content".into(), Value::from(text));
    }

    fn answer_text(&self, answer: &Value) -> Option<String> {
        joined(vec![first_message(answer)?.get("content")?.as_str()?])
    }

    fn is_overflow(&self, status: u16, raw: &str, lower: &str) -> bool {
        is_overflow(status, raw, lower)
    }

    /// A chunk with a `finish_reason`, the usage-only chunk, and `[DONE]`.
    fn is_closing(&self, data: Option<&str>, _kind: Option<&str>) -> bool {
        let Some(data) = data else {
            return false;
        };
        if data.trim() == "[DONE]" {
            return true;
        }
        let Ok(v) = serde_json::from_str::<Value>(data) else {
            return false;
        };
        let choices = v.get("choices").and_then(Value::as_array);
        let finished = choices
            .into_iter()
            .flatten()
            .any(|c| c.get("finish_reason").is_some_and(|r| !r.is_null()));
        let usage_only =
            choices.is_none_or(Vec::is_empty) && v.get("usage").is_some_and(|u| !u.is_null());
        finished || usage_only
    }

    fn carries_response_id(&self) -> bool {
        true
    }

    fn response_id<'v>(&self, event: &'v Value) -> Option<&'v Value> {
        event.get("id")
    }

    fn response_id_mut<'v>(&self, event: &'v mut Value) -> Option<&'v mut Value> {
        event.get_mut("id")
    }

    fn fix_stop(&self, event: &mut Value) -> bool {
        let mut changed = false;
        for c in event
            .get_mut("choices")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if c.get("finish_reason").and_then(Value::as_str) == Some("tool_calls") {
                c["finish_reason"] = Value::from("stop");
                changed = true;
            }
        }
        changed
    }
}

fn first_message(body: &Value) -> Option<&Value> {
    body.get("choices")?.get(0)?.get("message")
}

/// OpenAI's pairing: one message per result; Responses' calls are items of their own.
pub(super) fn pairing(calls_are_items: bool) -> Pairing {
    Pairing {
        result_role: Role::Tool,
        results_in_one_message: false,
        calls_are_items,
    }
}

/// An OpenAI image's base price, and all a low-detail image costs.
pub(super) const LOW_DETAIL_TOKENS: u64 = 85;

/// OpenAI high detail: fit 2048×2048, then the short side to 768, then 512-px tiles of 170
/// tokens over a base of 85.
pub(super) fn image_tokens(width: u32, height: u32) -> u64 {
    const FIT: f64 = 2048.0;
    const SHORT_SIDE: f64 = 768.0;
    const TILE: f64 = 512.0;
    const TILE_TOKENS: u64 = 170;
    let (w, h) = (f64::from(width), f64::from(height));
    let fit = 1.0_f64.min(FIT / w.max(h));
    let (w, h) = (w * fit, h * fit);
    let short = 1.0_f64.min(SHORT_SIDE / w.min(h));
    let (w, h) = ((w * short).floor().max(1.0), (h * short).floor().max(1.0));
    let tiles = (w / TILE).ceil() as u64 * (h / TILE).ceil() as u64;
    LOW_DETAIL_TOKENS + TILE_TOKENS * tiles
}

/// OpenAI keys travel as a bearer token.
pub(super) fn credential(key: &str) -> (String, String) {
    ("authorization".to_owned(), format!("Bearer {key}"))
}

/// OpenAI's overflow errors (Chat and Responses).
pub(super) fn is_overflow(_status: u16, raw: &str, lower: &str) -> bool {
    raw.contains("context_length_exceeded")
        || lower.contains("maximum context length")
        || lower.contains("context window")
}

/// Call arguments (and a Chat call's `function` object) are the tool's data.
pub(super) fn is_tool_data(map: &Map<String, Value>, key: &str) -> bool {
    key == "arguments" || (key == "function" && map.contains_key("id"))
}

/// A Chat content part for a restored payload.
fn media_part(m: &ResultMedia<'_>, part: usize) -> Value {
    match m.media_type {
        t if t.starts_with("image/") => {
            json!({"type": "image_url", "image_url": {"url": data_url(m)}})
        }
        "audio/wav" | "audio/x-wav" => {
            json!({"type": "input_audio", "input_audio": {"data": base64_of(m.bytes), "format": "wav"}})
        }
        "audio/mpeg" | "audio/mp3" => {
            json!({"type": "input_audio", "input_audio": {"data": base64_of(m.bytes), "format": "mp3"}})
        }
        _ => {
            json!({"type": "file", "file": {"filename": file_name(m, part), "file_data": data_url(m)}})
        }
    }
}

/// OpenAI's media parts (Chat and Responses share the audio part).
/// The part types [`media_at`] recognizes, quoted: a unit without any holds no media.
pub(super) const MEDIA_TYPES: &[&[u8]] = &[
    br#""image_url""#,
    br#""input_image""#,
    br#""input_audio""#,
    br#""input_file""#,
    br#""file""#,
    br#""computer_screenshot""#,
];

pub(super) fn media_at(map: &Map<String, Value>, f: &mut dyn MediaSink) -> bool {
    match str_at(map, "type") {
        // Chat: {"type":"image_url","image_url":{"url":…}} (some clients send a bare string).
        Some("image_url") => {
            match map.get("image_url") {
                Some(Value::Object(inner)) => {
                    let url = str_at(inner, "url").unwrap_or_default();
                    f.url("image", "/image_url/url", url, None);
                }
                Some(Value::String(url)) => f.url("image", "/image_url", url, None),
                _ => f.unrecoverable("image", "", None, "image_url part without a URL".into()),
            }
            true
        }
        // Chat and Responses: {"type":"input_audio","input_audio":{"data":…,"format":"wav"}}.
        Some("input_audio") => {
            let inner = obj_at(map, "input_audio");
            let format = inner.and_then(|i| str_at(i, "format"));
            let declared = format.map(|fmt| format!("audio/{fmt}"));
            match inner.and_then(|i| str_at(i, "data")) {
                Some(data) => f.inline("audio", "/input_audio/data", data, declared.as_deref()),
                None => f.unrecoverable("audio", "", None, "input_audio part without data".into()),
            }
            true
        }
        // Chat: {"type":"file","file":{"file_data":…}|{"file_id":…}}.
        Some("file") => {
            let inner = obj_at(map, "file");
            let declared = inner
                .and_then(|i| str_at(i, "filename"))
                .and_then(media_type_from_filename);
            if let Some(data) = inner.and_then(|i| str_at(i, "file_data")) {
                f.inline("file", "/file/file_data", data, declared);
            } else {
                let id = inner
                    .and_then(|i| str_at(i, "file_id"))
                    .unwrap_or("(no file_id)");
                f.unrecoverable(
                    "file",
                    "/file/file_id",
                    declared,
                    format!("OpenAI file reference {id}"),
                );
            }
            true
        }
        // Responses: {"type":"input_image","image_url":…|"file_id":…}, and a computer-use
        // screenshot, the output of a `computer_call_output`, in the same shape.
        Some("input_image" | "computer_screenshot") => {
            if let Some(url) = str_at(map, "image_url") {
                f.url("image", "/image_url", url, None);
            } else {
                let id = str_at(map, "file_id").unwrap_or("(no file_id)");
                f.unrecoverable(
                    "image",
                    "/file_id",
                    None,
                    format!("OpenAI file reference {id}"),
                );
            }
            true
        }
        // Responses: {"type":"input_file","file_data":…|"file_id":…|"file_url":…}.
        Some("input_file") => {
            let declared = str_at(map, "filename").and_then(media_type_from_filename);
            if let Some(data) = str_at(map, "file_data") {
                f.inline("file", "/file_data", data, declared);
            } else if let Some(url) = str_at(map, "file_url") {
                f.url("file", "/file_url", url, declared);
            } else {
                let id = str_at(map, "file_id").unwrap_or("(no file_id)");
                f.unrecoverable(
                    "file",
                    "/file_id",
                    declared,
                    format!("OpenAI file reference {id}"),
                );
            }
            true
        }
        _ => false,
    }
}

/// Adds one streamed `reasoning_details` entry to those read so far: a piece of an entry
/// already begun (same `index` and `type`) extends its text, summary or data, and its other
/// fields (the signature, which comes last) are taken as they arrive; anything else is a
/// new entry.
fn merge_detail(details: &mut Vec<Value>, piece: &Value) {
    let key = |d: &Value| {
        (
            d.get("index").and_then(Value::as_u64),
            d.get("type").cloned(),
        )
    };
    let begun = details
        .iter_mut()
        .rev()
        .find(|d| piece.get("index").is_some() && key(d) == key(piece));
    let (Some(entry), Some(fields)) = (begun.and_then(Value::as_object_mut), piece.as_object())
    else {
        details.push(piece.clone());
        return;
    };
    for (name, value) in fields {
        match (name.as_str(), entry.get_mut(name), value) {
            ("text" | "summary" | "data", Some(Value::String(whole)), Value::String(more)) => {
                whole.push_str(more);
            }
            (_, _, Value::Null) => {}
            _ => {
                entry.insert(name.clone(), value.clone());
            }
        }
    }
}
