//! Anthropic Messages.

use foldwire_core::{Role, Wire};
use serde_json::{Map, Value, json};

use super::answer::OpenBlock;
use super::{
    CallOutput, Dialect, MediaSink, Pairing, Provider, ResultMedia, RoundAnswer, TrailingText,
    arguments_value, base64_of, forced_or_forbidden, joined, obj_at, path_or, str_at,
};
use crate::request::extend::{ToolSpec, array_with, to_json};
use crate::stream::{HiddenCall, Usage};

/// Anthropic Messages (`POST /v1/messages`).
pub(super) struct Anthropic;

impl Dialect for Anthropic {
    fn wire(&self) -> Wire {
        Wire::Anthropic
    }

    fn provider(&self) -> Provider {
        Provider::Anthropic
    }

    fn messages_key(&self) -> &'static str {
        "messages"
    }

    fn tool_entries(&self, tools: &[ToolSpec<'_>]) -> Vec<Value> {
        tools
            .iter()
            .map(
                |t| json!({"name": t.name, "description": t.description, "input_schema": t.schema}),
            )
            .collect()
    }

    /// A string `system` becomes a text block list so the note can follow it.
    fn note_slot(
        &self,
        field: &dyn Fn(&str) -> Option<Vec<u8>>,
        note: &str,
    ) -> Option<(&'static str, Vec<u8>)> {
        let text_part = to_json(&self.text_part(note));
        let value = match field("system") {
            Some(s) if s.first() == Some(&b'"') => {
                let mut v = br#"[{"type":"text","text":"#.to_vec();
                v.extend_from_slice(&s);
                v.extend_from_slice(b"},");
                v.extend_from_slice(&text_part);
                v.push(b']');
                v
            }
            Some(a) => array_with(&a, &[text_part]).unwrap_or_else(|| to_json(note)),
            None => to_json(note),
        };
        Some(("system", value))
    }

    fn trailing_text(&self, text: &str) -> TrailingText {
        TrailingText::Part(to_json(&self.text_part(text)))
    }

    /// The long side is at most 1568 px and the area at most 1.15 megapixels; 750 pixels a
    /// token.
    fn image_tokens(&self, width: u32, height: u32) -> u64 {
        const MAX_SIDE: f64 = 1568.0;
        const MAX_PIXELS: f64 = 1_150_000.0;
        const PIXELS_PER_TOKEN: f64 = 750.0;
        let (w, h) = (f64::from(width), f64::from(height));
        let scale = 1.0_f64
            .min(MAX_SIDE / w.max(h))
            .min((MAX_PIXELS / (w * h)).sqrt());
        let (w, h) = ((w * scale).floor().max(1.0), (h * scale).floor().max(1.0));
        (w * h / PIXELS_PER_TOKEN).ceil() as u64
    }

    fn pairing(&self) -> Pairing {
        Pairing {
            result_role: Role::User,
            results_in_one_message: true,
            calls_are_items: false,
        }
    }

    fn cache_markers(&self) -> bool {
        true
    }

    fn text_part(&self, text: &str) -> Value {
        json!({"type": "text", "text": text})
    }

    fn is_tool_data(&self, map: &Map<String, Value>, key: &str) -> bool {
        let kind = map.get("type").and_then(Value::as_str);
        key == "input" && matches!(kind, Some("tool_use" | "server_tool_use"))
    }

    /// Every media object is a block of type `image` or `document`.
    fn media_markers(&self) -> &'static [&'static [u8]] {
        &[br#""image""#, br#""document""#]
    }

    fn media_at(&self, map: &Map<String, Value>, f: &mut dyn MediaSink) -> bool {
        let Some(kind @ ("image" | "document")) = str_at(map, "type") else {
            return false;
        };
        let Some(source) = obj_at(map, "source") else {
            f.unrecoverable(
                kind,
                "",
                None,
                format!("Anthropic {kind} block without a source"),
            );
            return true;
        };
        let declared = str_at(source, "media_type");
        match str_at(source, "type") {
            Some("base64") => match str_at(source, "data") {
                Some(data) => f.inline(kind, "/source/data", data, declared),
                None => f.unrecoverable(
                    kind,
                    "/source",
                    declared,
                    "Anthropic base64 source without data".to_owned(),
                ),
            },
            Some("url") => {
                let url = str_at(source, "url").unwrap_or_default();
                f.url(kind, "/source/url", url, declared);
            }
            Some("file") => {
                let id = str_at(source, "file_id").unwrap_or("(no file_id)");
                f.unrecoverable(
                    kind,
                    "/source/file_id",
                    declared,
                    format!("Anthropic file reference {id}"),
                );
            }
            // Plain-text and content-block documents carry text, not bytes; images nested in
            // a content source are found by the walk.
            Some("text" | "content") => return false,
            other => {
                f.unrecoverable(
                    kind,
                    "/source",
                    declared,
                    format!("Anthropic {kind} source of unknown type {other:?}"),
                );
            }
        }
        true
    }

    fn round_items(
        &self,
        answer: &RoundAnswer,
        text: &str,
        calls: &[HiddenCall],
        results: &[CallOutput<'_>],
    ) -> Vec<Value> {
        // The round's call a block is, if it is one.
        let call_of = |b: &Value| -> Option<&HiddenCall> {
            if b.get("type").and_then(Value::as_str) != Some("tool_use") {
                return None;
            }
            let id = b.get("id").and_then(Value::as_str)?;
            calls.iter().find(|c| c.id == id)
        };
        let holds_every_call = calls.iter().all(|c| {
            answer
                .items
                .iter()
                .any(|b| call_of(b).is_some_and(|held| held.id == c.id))
        });
        let content: Vec<Value> = if answer.whole && !calls.is_empty() && holds_every_call {
            // The answer's blocks in their order: thinking stays where the model put it
            // (first, and between a server tool's result and what followed), a server
            // tool's call and result stay. A call's input is what the proxy ran.
            answer
                .items
                .iter()
                .filter(|b| !is_empty_text(b))
                .map(|b| match call_of(b) {
                    Some(c) => {
                        let mut b = b.clone();
                        b["input"] = arguments_value(&c.arguments);
                        b
                    }
                    None => b.clone(),
                })
                .collect()
        } else {
            // With thinking on, the assistant message before tool results starts with the
            // thinking blocks the model sent, unmodified.
            let mut content: Vec<Value> = answer
                .items
                .iter()
                .filter(|b| is_thinking(b))
                .cloned()
                .collect();
            if !text.is_empty() {
                content.push(json!({"type": "text", "text": text}));
            }
            for c in calls {
                let input = arguments_value(&c.arguments);
                content
                    .push(json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input}));
            }
            content
        };
        let outputs: Vec<Value> = calls
            .iter()
            .zip(results)
            .map(|(c, r)| {
                json!({"type": "tool_result", "tool_use_id": c.id, "content": result_content(r)})
            })
            .collect();
        vec![
            json!({"role": "assistant", "content": content}),
            json!({"role": "user", "content": outputs}),
        ]
    }

    fn answer_markers(&self) -> &'static [&'static str] {
        // Every streamed block event, and a whole answer's body.
        &["content_block", "\"content\""]
    }

    fn observe_answer(&self, payload: &Value, into: &mut RoundAnswer) {
        let index = payload.get("index").and_then(Value::as_u64);
        match payload.get("type").and_then(Value::as_str) {
            // A whole answer: its blocks as they are.
            Some("message") => into.items.extend(
                payload
                    .get("content")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .cloned(),
            ),
            Some("content_block_start") => {
                if let (Some(index), Some(block)) = (index, payload.get("content_block")) {
                    into.open.push(OpenBlock {
                        index,
                        at: into.items.len(),
                        input_json: String::new(),
                    });
                    into.items.push(block.clone());
                }
            }
            Some("content_block_delta") => {
                let open = into.open.iter_mut().find(|o| Some(o.index) == index);
                let (Some(open), Some(delta)) = (open, payload.get("delta")) else {
                    return;
                };
                let Some(block) = into.items.get_mut(open.at).and_then(Value::as_object_mut) else {
                    return;
                };
                let piece = |key: &str| delta.get(key).and_then(Value::as_str).unwrap_or_default();
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => append_to(block, "text", piece("text")),
                    Some("thinking_delta") => append_to(block, "thinking", piece("thinking")),
                    Some("signature_delta") => append_to(block, "signature", piece("signature")),
                    Some("input_json_delta") => open.input_json.push_str(piece("partial_json")),
                    Some("citations_delta") => {
                        if let Some(citation) = delta.get("citation") {
                            let list = block
                                .entry("citations")
                                .or_insert_with(|| Value::Array(Vec::new()));
                            if !list.is_array() {
                                *list = Value::Array(Vec::new());
                            }
                            if let Value::Array(list) = list {
                                list.push(citation.clone());
                            }
                        }
                    }
                    _ => {}
                }
            }
            Some("content_block_stop") => {
                let Some(at) = into.open.iter().position(|o| Some(o.index) == index) else {
                    return;
                };
                let open = into.open.swap_remove(at);
                // A streamed call's input is whole JSON only now; a block whose input never
                // parses keeps the input it opened with.
                if !open.input_json.is_empty()
                    && let Ok(input) = serde_json::from_str::<Value>(&open.input_json)
                    && let Some(block) = into.items.get_mut(open.at).and_then(Value::as_object_mut)
                {
                    block.insert("input".to_owned(), input);
                }
            }
            _ => {}
        }
    }

    fn side_request(&self, body: &Value) -> Option<&'static str> {
        let format = body
            .get("output_format")
            .or_else(|| body.get("output_config").and_then(|c| c.get("format")));
        if format.is_some_and(|f| !f.is_null()) {
            return Some("structured output");
        }
        forced_or_forbidden(body.get("tool_choice"))
    }

    fn required_headers(&self) -> &'static [(&'static str, &'static str)] {
        &[("anthropic-version", "2023-06-01")]
    }

    fn credential(&self, key: &str) -> (String, String) {
        ("x-api-key".to_owned(), key.to_owned())
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
            path_or(path, "/v1/messages"),
            json!({"model": model, "max_tokens": max_tokens, "system": system,
                   "messages": [{"role": "user", "content": ask}]}),
        )
    }

    fn claims_path(&self, path: &str) -> Option<Option<String>> {
        (path == "/v1/messages").then_some(None)
    }

    fn counts_at(&self, path: &str) -> Option<Option<String>> {
        (path == "/v1/messages/count_tokens").then_some(None)
    }

    fn strip_calls(&self, body: &mut Value, is_proxy: &dyn Fn(&str) -> bool) -> bool {
        let mut changed = false;
        let mut left = 0;
        if let Some(content) = body.get_mut("content").and_then(Value::as_array_mut) {
            let before = content.len();
            content.retain(|b| !b.get("name").and_then(Value::as_str).is_some_and(is_proxy));
            changed = content.len() != before;
            left = content
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"))
                .count();
        }
        if changed && left == 0 && body["stop_reason"] == "tool_use" {
            body["stop_reason"] = json!("end_turn");
        }
        changed
    }

    fn visible(&self, body: &Value) -> Vec<Value> {
        super::items_of(body.get("content"))
    }

    fn prepend(&self, body: &mut Value, earlier: Vec<Value>) {
        super::prepend_items(body.get_mut("content"), earlier);
    }

    fn answer_text(&self, answer: &Value) -> Option<String> {
        joined(
            answer
                .get("content")?
                .as_array()?
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|b| b.get("text")?.as_str())
                .collect(),
        )
    }

    /// Anthropic reports cached tokens apart from `input_tokens`.
    fn prompt_tokens(&self, usage: &Usage) -> Option<u64> {
        let input = usage.input_tokens?;
        Some(input + usage.cache_read.unwrap_or(0) + usage.cache_write.unwrap_or(0))
    }

    fn is_overflow(&self, _status: u16, _raw: &str, lower: &str) -> bool {
        lower.contains("prompt is too long") || lower.contains("context window")
    }

    fn typed_events(&self) -> bool {
        true
    }

    fn is_opening(&self, kind: Option<&str>) -> bool {
        kind == Some("message_start")
    }

    fn opens_item(&self, kind: Option<&str>) -> bool {
        kind == Some("content_block_start")
    }

    fn is_closing(&self, _data: Option<&str>, kind: Option<&str>) -> bool {
        matches!(kind, Some("message_delta" | "message_stop"))
    }

    fn position_field(&self) -> Option<&'static str> {
        Some("index")
    }

    fn fix_stop(&self, event: &mut Value) -> bool {
        if let Some(delta) = event.get_mut("delta")
            && delta.get("stop_reason").and_then(Value::as_str) == Some("tool_use")
        {
            delta["stop_reason"] = Value::from("end_turn");
            return true;
        }
        false
    }
}

/// A tool result's content: the text alone, or the text and the media as image / document
/// blocks (other types are named in the text: Anthropic has no block for them).
fn result_content(r: &CallOutput<'_>) -> Value {
    if r.media.is_empty() {
        return Value::from(r.text);
    }
    let mut text = r.text.to_owned();
    let mut blocks = Vec::new();
    for m in &r.media {
        match media_block(m) {
            Some(block) => blocks.push(block),
            None => text.push_str(&format!(
                "\n{}: {} cannot travel in an Anthropic tool result; the user can restore it with `foldwire restore --image-ref {}`",
                m.label, m.media_type, m.label
            )),
        }
    }
    let mut content = vec![json!({"type": "text", "text": text})];
    content.extend(blocks);
    Value::Array(content)
}

fn media_block(m: &ResultMedia<'_>) -> Option<Value> {
    let source = json!({"type": "base64", "media_type": m.media_type, "data": base64_of(m.bytes)});
    if m.media_type.starts_with("image/") {
        Some(json!({"type": "image", "source": source}))
    } else if m.media_type == "application/pdf" {
        Some(json!({"type": "document", "source": source}))
    } else if m.media_type.starts_with("text/") {
        let data = foldwire_core::text::utf8_lossy(m.bytes);
        Some(
            json!({"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": data}}),
        )
    } else {
        None
    }
}

/// Whether a content block is the model's thinking.
fn is_thinking(block: &Value) -> bool {
    matches!(
        block.get("type").and_then(Value::as_str),
        Some("thinking" | "redacted_thinking")
    )
}

/// Whether a content block is text with nothing in it (a stream opens every text block
/// empty, and the API refuses an empty one).
fn is_empty_text(block: &Value) -> bool {
    block.get("type").and_then(Value::as_str) == Some("text")
        && block
            .get("text")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
}

/// Appends a streamed piece to a block's string field.
fn append_to(block: &mut Map<String, Value>, field: &str, piece: &str) {
    match block.get_mut(field) {
        Some(Value::String(whole)) => whole.push_str(piece),
        _ => {
            block.insert(field.to_owned(), Value::from(piece));
        }
    }
}
