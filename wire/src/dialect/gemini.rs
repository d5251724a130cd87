//! Google Gemini.

use foldwire_core::{Role, Wire};
use serde_json::{Map, Value, json};

use super::{
    CallOutput, Dialect, MediaSink, Pairing, Provider, RoundAnswer, TrailingText, arguments_value,
    base64_of, joined, obj_at, path_or, str_at,
};
use crate::request::extend::{ToolSpec, to_json};
use crate::stream::HiddenCall;

/// The method a streamed request names in its path.
const STREAM_METHOD: &str = ":streamGenerateContent";

/// Google Gemini (`:generateContent` / `:streamGenerateContent`).
pub(super) struct Gemini;

impl Dialect for Gemini {
    fn wire(&self) -> Wire {
        Wire::Gemini
    }

    fn provider(&self) -> Provider {
        Provider::Google
    }

    fn messages_key(&self) -> &'static str {
        "contents"
    }

    /// A context cache holds the contents before the request's.
    fn provider_held_keys(&self) -> &'static [&'static str] {
        &["cachedContent"]
    }

    /// One entry holding every declaration.
    fn tool_entries(&self, tools: &[ToolSpec<'_>]) -> Vec<Value> {
        let decls: Vec<Value> = tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "parameters": t.schema}))
            .collect();
        vec![json!({ "functionDeclarations": decls })]
    }

    fn nested_declarations(&self) -> bool {
        true
    }

    /// The note is one more part of the system instruction, under the spelling the client
    /// used.
    fn note_slot(
        &self,
        field: &dyn Fn(&str) -> Option<Vec<u8>>,
        note: &str,
    ) -> Option<(&'static str, Vec<u8>)> {
        let snake = field("system_instruction");
        let key = if snake.is_some() {
            "system_instruction"
        } else {
            "systemInstruction"
        };
        // The instruction is small; it is read whole.
        let mut slot = snake
            .or_else(|| field(key))
            .and_then(|v| serde_json::from_slice::<Value>(&v).ok())
            .filter(Value::is_object)
            .unwrap_or_else(|| json!({"parts": []}));
        match slot.get_mut("parts").and_then(Value::as_array_mut) {
            Some(parts) => parts.push(json!({"text": note})),
            None => slot = json!({"parts": [{"text": note}]}),
        }
        Some((key, to_json(&slot)))
    }

    fn trailing_text(&self, text: &str) -> TrailingText {
        TrailingText::Part(to_json(&self.text_part(text)))
    }

    /// Gemini's inline parts carry bare base64 under `inlineData` (REST) or `inline_data`
    /// (the Python SDK's spelling), `nline` being in both; a data URL is priced as on the
    /// other wires.
    fn inline_image_markers(&self) -> &'static [&'static [u8]] {
        &[b"nline", b"base64"]
    }

    /// 258 tokens for an image at most 384 px both ways, else 258 per 768×768 tile.
    fn image_tokens(&self, width: u32, height: u32) -> u64 {
        const SMALL: u64 = 384;
        const TILE: u64 = 768;
        const TILE_TOKENS: u64 = 258;
        let (w, h) = (u64::from(width), u64::from(height));
        if w <= SMALL && h <= SMALL {
            TILE_TOKENS
        } else {
            w.div_ceil(TILE) * h.div_ceil(TILE) * TILE_TOKENS
        }
    }

    fn pairing(&self) -> Pairing {
        Pairing {
            result_role: Role::User,
            results_in_one_message: true,
            calls_are_items: false,
        }
    }

    fn text_part(&self, text: &str) -> Value {
        json!({"text": text})
    }

    fn is_tool_data(&self, _map: &Map<String, Value>, key: &str) -> bool {
        matches!(key, "args" | "response")
    }

    fn media_at(&self, map: &Map<String, Value>, f: &mut dyn MediaSink) -> bool {
        let mut hit = false;
        for key in ["inlineData", "inline_data"] {
            if let Some(inner) = obj_at(map, key) {
                let declared = str_at(inner, "mimeType").or_else(|| str_at(inner, "mime_type"));
                match str_at(inner, "data") {
                    Some(data) => f.inline("file", &format!("/{key}/data"), data, declared),
                    None => f.unrecoverable(
                        "file",
                        &format!("/{key}"),
                        declared,
                        "Gemini inlineData without data".into(),
                    ),
                }
                hit = true;
            }
        }
        for key in ["fileData", "file_data"] {
            if let Some(inner) = obj_at(map, key) {
                let declared = str_at(inner, "mimeType").or_else(|| str_at(inner, "mime_type"));
                let uri = str_at(inner, "fileUri")
                    .or_else(|| str_at(inner, "file_uri"))
                    .unwrap_or("(no fileUri)");
                f.unrecoverable(
                    "file",
                    &format!("/{key}"),
                    declared,
                    format!("Gemini fileData {uri}"),
                );
                hit = true;
            }
        }
        for key in ["videoMetadata", "video_metadata"] {
            if map.contains_key(key) {
                f.unrecoverable(
                    "video",
                    &format!("/{key}"),
                    None,
                    "Gemini videoMetadata (a clip of video foldwire never holds)".into(),
                );
                hit = true;
            }
        }
        hit
    }

    /// Restored media goes beside the function response, in the same turn.
    fn round_items(
        &self,
        answer: &RoundAnswer,
        text: &str,
        calls: &[HiddenCall],
        results: &[CallOutput<'_>],
    ) -> Vec<Value> {
        let answered: Vec<&Value> = answer
            .items
            .iter()
            .filter_map(|p| p.get("functionCall"))
            .collect();
        let named = |(call, part): (&HiddenCall, &&Value)| {
            part.get("name").and_then(Value::as_str) == Some(call.name.as_str())
        };
        let parts: Vec<Value> = if answer.whole
            && !calls.is_empty()
            && answered.len() == calls.len()
            && calls.iter().zip(&answered).all(named)
        {
            // The answer's parts in their order, thought parts and signatures included:
            // Gemini 3 wants the whole turn back as it came.
            answer.items.clone()
        } else {
            let mut parts = Vec::new();
            if !text.is_empty() {
                parts.push(json!({"text": text}));
            }
            let signatures = answer
                .items
                .iter()
                .filter(|p| p.get("functionCall").is_some());
            let mut signatures = signatures.map(|p| p.get("thoughtSignature"));
            for c in calls {
                let args = arguments_value(&c.arguments);
                let mut part = json!({"functionCall": {"name": c.name, "args": args}});
                // Gemini 3 refuses a call of the current turn without the signature it
                // came with.
                if let Some(Some(signature)) = signatures.next() {
                    part["thoughtSignature"] = signature.clone();
                }
                parts.push(part);
            }
            parts
        };
        let mut outputs = Vec::new();
        for (c, r) in calls.iter().zip(results) {
            outputs.push(
                json!({"functionResponse": {"name": c.name, "response": {"result": r.text}}}),
            );
            for m in &r.media {
                outputs.push(
                    json!({"inlineData": {"mimeType": m.media_type, "data": base64_of(m.bytes)}}),
                );
            }
        }
        vec![
            json!({"role": "model", "parts": parts}),
            json!({"role": "user", "parts": outputs}),
        ]
    }

    fn answer_markers(&self) -> &'static [&'static str] {
        &["\"parts\""]
    }

    /// Every part of the answer in order; streamed text of one kind (thought or not) is
    /// joined into one part, which takes the signature that closes it.
    fn observe_answer(&self, payload: &Value, into: &mut RoundAnswer) {
        let parts = payload
            .pointer("/candidates/0/content/parts")
            .and_then(Value::as_array);
        for part in parts.into_iter().flatten() {
            if let Some(text) = part.get("text").and_then(Value::as_str)
                && let Some(last) = into.items.last_mut()
                && joins_text(last, part)
                && let Some(fields) = last.as_object_mut()
            {
                if let Some(Value::String(whole)) = fields.get_mut("text") {
                    whole.push_str(text);
                }
                if let Some(signature) = part.get("thoughtSignature") {
                    fields.insert("thoughtSignature".to_owned(), signature.clone());
                }
                continue;
            }
            // An empty text part carries nothing unless it carries a signature.
            let empty = part.get("text").and_then(Value::as_str) == Some("")
                && part.get("thoughtSignature").is_none();
            if !empty {
                into.items.push(part.clone());
            }
        }
    }

    fn side_request(&self, body: &Value) -> Option<&'static str> {
        let config = field(body, "generationConfig", "generation_config");
        let mime = config
            .and_then(|c| field(c, "responseMimeType", "response_mime_type"))
            .and_then(Value::as_str);
        let schema = config.is_some_and(|c| {
            [
                "responseSchema",
                "response_schema",
                "responseJsonSchema",
                "response_json_schema",
            ]
            .iter()
            .any(|k| c.get(*k).is_some_and(|s| !s.is_null()))
        });
        if schema || mime.is_some_and(|m| m != "text/plain") {
            return Some("structured output");
        }
        let mode = field(body, "toolConfig", "tool_config")
            .and_then(|t| field(t, "functionCallingConfig", "function_calling_config"))
            .and_then(|f| f.get("mode"))
            .and_then(Value::as_str)
            .map(str::to_ascii_uppercase);
        match mode.as_deref() {
            Some("ANY") => Some("tool choice forced"),
            Some("NONE") => Some("tools forbidden"),
            _ => None,
        }
    }

    fn credential(&self, key: &str) -> (String, String) {
        ("x-goog-api-key".to_owned(), key.to_owned())
    }

    fn model_in_path(&self) -> bool {
        true
    }

    /// Always the one-shot method, whatever the client streamed with.
    fn one_shot(
        &self,
        path: &str,
        model: &str,
        system: &str,
        ask: &str,
        max_tokens: u64,
    ) -> (String, Value) {
        let p = path_or(path, &format!("/v1beta/models/{model}:generateContent"));
        (
            p.replace(STREAM_METHOD, ":generateContent"),
            json!({"systemInstruction": {"parts": [{"text": system}]},
                   "contents": [{"role": "user", "parts": [{"text": ask}]}],
                   "generationConfig": {"maxOutputTokens": max_tokens}}),
        )
    }

    /// `models/{model}:generateContent` or `:streamGenerateContent` anywhere under a version.
    fn claims_path(&self, path: &str) -> Option<Option<String>> {
        let (model, method) = model_and_method(path)?;
        matches!(method, "generateContent" | "streamGenerateContent").then_some(Some(model))
    }

    fn counts_at(&self, path: &str) -> Option<Option<String>> {
        let (model, method) = model_and_method(path)?;
        (method == "countTokens").then_some(Some(model))
    }

    /// `countTokens` takes `contents` alone at its top level (tools and a system
    /// instruction only inside a whole `generateContentRequest`).
    fn counted_tokens(&self, answer: &Value) -> Option<u64> {
        answer.get("totalTokens").and_then(Value::as_u64)
    }

    fn count_takes_tools(&self) -> bool {
        false
    }

    fn streams_by_path(&self, path_and_query: &str) -> bool {
        path_and_query.contains(STREAM_METHOD)
    }

    /// Without `alt=sse`, a stream is one JSON array.
    fn array_stream(&self, path_and_query: &str) -> bool {
        let alt_sse = path_and_query
            .split_once('?')
            .is_some_and(|(_, query)| query.split('&').any(|p| p == "alt=sse"));
        self.streams_by_path(path_and_query) && !alt_sse
    }

    /// Gemini clients parse every SSE line as JSON (real Gemini never sends comments).
    fn sse_comments(&self) -> bool {
        false
    }

    fn strip_calls(&self, body: &mut Value, is_proxy: &dyn Fn(&str) -> bool) -> bool {
        let mut changed = false;
        for candidate in body
            .get_mut("candidates")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if let Some(parts) = candidate
                .get_mut("content")
                .and_then(|c| c.get_mut("parts"))
                .and_then(Value::as_array_mut)
            {
                let before = parts.len();
                parts.retain(|p| {
                    !p.get("functionCall")
                        .and_then(|c| c.get("name"))
                        .and_then(Value::as_str)
                        .is_some_and(is_proxy)
                });
                changed |= parts.len() != before;
            }
        }
        changed
    }

    /// The parts of the first candidate.
    fn visible(&self, body: &Value) -> Vec<Value> {
        first_parts(body).cloned().unwrap_or_default()
    }

    fn prepend(&self, body: &mut Value, earlier: Vec<Value>) {
        let slot = body
            .get_mut("candidates")
            .and_then(|c| c.get_mut(0))
            .and_then(|c| c.get_mut("content"))
            .and_then(|c| c.get_mut("parts"));
        super::prepend_items(slot, earlier);
    }

    fn answer_text(&self, answer: &Value) -> Option<String> {
        joined(
            first_parts(answer)?
                .iter()
                .filter(|p| p.get("thought").and_then(Value::as_bool) != Some(true))
                .filter_map(|p| p.get("text")?.as_str())
                .collect(),
        )
    }

    fn is_overflow(&self, status: u16, _raw: &str, lower: &str) -> bool {
        status == 400
            && lower.contains("token")
            && (lower.contains("exceeds") || lower.contains("limit") || lower.contains("maximum"))
    }

    /// A chunk with a `finishReason`.
    fn is_closing(&self, data: Option<&str>, _kind: Option<&str>) -> bool {
        data.is_some_and(|d| d.contains("\"finishReason\""))
    }

    fn carries_response_id(&self) -> bool {
        true
    }

    fn response_id<'v>(&self, event: &'v Value) -> Option<&'v Value> {
        event.get("responseId")
    }

    fn response_id_mut<'v>(&self, event: &'v mut Value) -> Option<&'v mut Value> {
        event.get_mut("responseId")
    }

    /// The chunk without its finish fields and usage, when it still has parts to show.
    fn closing_content(&self, event: &mut Value) -> bool {
        let mut any_parts = false;
        for c in event
            .get_mut("candidates")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if let Some(obj) = c.as_object_mut() {
                obj.remove("finishReason");
                obj.remove("finishMessage");
            }
            any_parts |= c
                .get("content")
                .and_then(|c| c.get("parts"))
                .and_then(Value::as_array)
                .is_some_and(|p| !p.is_empty());
        }
        if let Some(obj) = event.as_object_mut() {
            obj.remove("usageMetadata");
        }
        any_parts
    }
}

fn first_parts(body: &Value) -> Option<&Vec<Value>> {
    body.get("candidates")?
        .get(0)?
        .get("content")?
        .get("parts")?
        .as_array()
}

/// A field under its camelCase or snake_case name (Gemini's REST API takes both).
fn field<'v>(value: &'v Value, camel: &str, snake: &str) -> Option<&'v Value> {
    value.get(camel).or_else(|| value.get(snake))
}

/// Whether a streamed text `part` continues the text part `last`: both plain text of the
/// same kind (thought or not), and `last` not yet closed by a signature.
fn joins_text(last: &Value, part: &Value) -> bool {
    let plain = |p: &Value| {
        p.as_object().is_some_and(|f| {
            f.get("text").is_some_and(Value::is_string)
                && f.keys()
                    .all(|k| matches!(k.as_str(), "text" | "thought" | "thoughtSignature"))
        })
    };
    let thought = |p: &Value| p.get("thought").and_then(Value::as_bool).unwrap_or(false);
    plain(last)
        && plain(part)
        && thought(last) == thought(part)
        && last.get("thoughtSignature").is_none()
}

/// The model and the method of a `…/models/{model}:{method}` path.
fn model_and_method(path: &str) -> Option<(String, &str)> {
    let idx = path.find("/models/")?;
    let tail = path.get(idx + "/models/".len()..)?;
    let (model, method) = tail.rsplit_once(':')?;
    Some((model.to_owned(), method))
}
