//! OpenAI Responses.

use foldwire_core::Wire;
use serde_json::{Map, Value, json};

use super::{
    CallOutput, Dialect, MediaSink, Pairing, Provider, RoundAnswer, TrailingText, data_url,
    file_name, forced_or_forbidden, joined, openai_chat, path_or,
};
use crate::request::extend::{ToolSpec, to_json};
use crate::stream::HiddenCall;

/// OpenAI Responses (`POST /v1/responses`).
pub(super) struct OpenAiResponses;

impl Dialect for OpenAiResponses {
    fn wire(&self) -> Wire {
        Wire::OpenAiResponses
    }

    fn provider(&self) -> Provider {
        Provider::OpenAi
    }

    fn messages_key(&self) -> &'static str {
        "input"
    }

    /// A response stored by the provider, or a conversation object, carries the history.
    fn provider_held_keys(&self) -> &'static [&'static str] {
        &["previous_response_id", "conversation"]
    }

    fn chain_key(&self) -> Option<&'static str> {
        Some("previous_response_id")
    }

    fn provider_held_item(&self) -> Option<&'static str> {
        Some("item_reference")
    }

    fn tool_entries(&self, tools: &[ToolSpec<'_>]) -> Vec<Value> {
        tools
            .iter()
            .map(|t| json!({"type": "function", "name": t.name, "description": t.description, "parameters": t.schema}))
            .collect()
    }

    /// The note follows the client's `instructions` after a blank line.
    fn note_slot(
        &self,
        field: &dyn Fn(&str) -> Option<Vec<u8>>,
        note: &str,
    ) -> Option<(&'static str, Vec<u8>)> {
        let current = field("instructions").and_then(|v| serde_json::from_slice::<Value>(&v).ok());
        let text = match current.as_ref().and_then(Value::as_str) {
            Some(s) if !s.is_empty() => format!("{s}\n\n{note}"),
            _ => note.to_owned(),
        };
        Some(("instructions", to_json(&text)))
    }

    fn trailing_text(&self, text: &str) -> TrailingText {
        TrailingText::Message(to_json(text))
    }

    fn image_tokens(&self, width: u32, height: u32) -> u64 {
        openai_chat::image_tokens(width, height)
    }

    fn low_detail_image_tokens(&self) -> Option<u64> {
        Some(openai_chat::LOW_DETAIL_TOKENS)
    }

    fn pairing(&self) -> Pairing {
        openai_chat::pairing(true)
    }

    fn text_part(&self, text: &str) -> Value {
        json!({"type": "input_text", "text": text})
    }

    fn is_tool_data(&self, map: &Map<String, Value>, key: &str) -> bool {
        openai_chat::is_tool_data(map, key)
    }

    fn media_markers(&self) -> &'static [&'static [u8]] {
        openai_chat::MEDIA_TYPES
    }

    fn media_at(&self, map: &Map<String, Value>, f: &mut dyn MediaSink) -> bool {
        openai_chat::media_at(map, f)
    }

    /// A string `input` is one user message; anything else that is not a list starts empty.
    fn list_from_scalar(&self, raw: &[u8]) -> Option<Vec<u8>> {
        if raw.first() != Some(&b'"') {
            return Some(b"[]".to_vec());
        }
        let mut list = br#"[{"role":"user","content":"#.to_vec();
        list.extend_from_slice(raw);
        list.extend_from_slice(b"}]");
        Some(list)
    }

    fn round_items(
        &self,
        answer: &RoundAnswer,
        text: &str,
        calls: &[HiddenCall],
        results: &[CallOutput<'_>],
    ) -> Vec<Value> {
        // The answer goes back as its own items, in its order, when they hold every call:
        // a reasoning item then stays right before the item it produced, as the API
        // requires, and a built-in tool's item stays with what followed it.
        let has = |c: &HiddenCall| {
            answer.items.iter().any(|i| {
                i.get("type").and_then(Value::as_str) == Some("function_call")
                    && i.get("call_id").and_then(Value::as_str) == Some(c.id.as_str())
            })
        };
        let mut items = Vec::new();
        if answer.whole && !calls.is_empty() && calls.iter().all(has) {
            // Ids and all, as clients send output items back (the API pairs a reasoning
            // item with the item it produced by their ids).
            items.extend(answer.items.iter().cloned());
        } else {
            if !text.is_empty() {
                items.push(json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}));
            }
            for c in calls {
                items.push(json!({"type": "function_call", "call_id": c.id, "name": c.name, "arguments": c.arguments}));
            }
        }
        for (c, r) in calls.iter().zip(results) {
            items.push(
                json!({"type": "function_call_output", "call_id": c.id, "output": output(r)}),
            );
        }
        items
    }

    fn answer_markers(&self) -> &'static [&'static str] {
        &["output_item.done", "\"output\""]
    }

    /// Every output item of the answer, in order: a reasoning item must go back right
    /// before the item it produced, so the round resends the answer as it came.
    fn observe_answer(&self, payload: &Value, into: &mut RoundAnswer) {
        match payload.get("type").and_then(Value::as_str) {
            Some("response.output_item.done") => into.items.extend(payload.get("item").cloned()),
            // A whole answer (a response object has no `type`); streamed `response.completed`
            // repeats the items `output_item.done` gave, so it is not read.
            None => into.items.extend(
                payload
                    .get("output")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .cloned(),
            ),
            _ => {}
        }
    }

    fn side_request(&self, body: &Value) -> Option<&'static str> {
        // The run goes on at the provider after the answer (`queued`); the client reads its
        // outcome later, past the proxy's loop.
        if body.get("background") == Some(&Value::Bool(true)) {
            return Some("background response");
        }
        let format = body
            .get("text")
            .and_then(|t| t.get("format"))
            .and_then(|f| f.get("type"))
            .and_then(Value::as_str);
        if format.is_some_and(|t| t != "text") {
            return Some("structured output");
        }
        forced_or_forbidden(body.get("tool_choice"))
    }

    fn credential(&self, key: &str) -> (String, String) {
        openai_chat::credential(key)
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
            path_or(path, "/v1/responses"),
            json!({"model": model, "max_output_tokens": max_tokens, "instructions": system,
                   "input": ask, "store": false}),
        )
    }

    fn claims_path(&self, path: &str) -> Option<Option<String>> {
        path.ends_with("/responses").then_some(None)
    }

    fn counts_at(&self, path: &str) -> Option<Option<String>> {
        path.ends_with("/responses/input_tokens").then_some(None)
    }

    fn strip_calls(&self, body: &mut Value, is_proxy: &dyn Fn(&str) -> bool) -> bool {
        let Some(output) = body.get_mut("output").and_then(Value::as_array_mut) else {
            return false;
        };
        let before = output.len();
        let hidden = |o: &Value| {
            o.get("type").and_then(Value::as_str) == Some("function_call")
                && o.get("name").and_then(Value::as_str).is_some_and(is_proxy)
        };
        // A reasoning item goes with the hidden call it produced: the client would send it
        // back without its following item, which the API refuses.
        let kept: Vec<Value> = output
            .iter()
            .enumerate()
            .filter(|(i, o)| {
                let produced_hidden = o.get("type").and_then(Value::as_str) == Some("reasoning")
                    && output.get(i + 1).is_some_and(hidden);
                !hidden(o) && !produced_hidden
            })
            .map(|(_, o)| o.clone())
            .collect();
        *output = kept;
        output.len() != before
    }

    fn visible(&self, body: &Value) -> Vec<Value> {
        super::items_of(body.get("output"))
    }

    fn prepend(&self, body: &mut Value, earlier: Vec<Value>) {
        super::prepend_items(body.get_mut("output"), earlier);
    }

    fn answer_text(&self, answer: &Value) -> Option<String> {
        joined(
            answer
                .get("output")?
                .as_array()?
                .iter()
                .filter(|i| i.get("type").and_then(Value::as_str) == Some("message"))
                .filter_map(|i| i.get("content")?.as_array())
                .flatten()
                .filter(|c| c.get("type").and_then(Value::as_str) == Some("output_text"))
                .filter_map(|c| c.get("text")?.as_str())
                .collect(),
        )
    }

    fn is_overflow(&self, status: u16, raw: &str, lower: &str) -> bool {
        openai_chat::is_overflow(status, raw, lower)
    }

    fn typed_events(&self) -> bool {
        true
    }

    fn is_opening(&self, kind: Option<&str>) -> bool {
        matches!(kind, Some("response.created" | "response.in_progress"))
    }

    fn opens_item(&self, kind: Option<&str>) -> bool {
        kind == Some("response.output_item.added")
    }

    fn is_closing(&self, _data: Option<&str>, kind: Option<&str>) -> bool {
        matches!(
            kind,
            Some(
                "response.completed" | "response.incomplete" | "response.failed" | "response.done"
            )
        )
    }

    fn position_field(&self) -> Option<&'static str> {
        Some("output_index")
    }

    fn carries_response_id(&self) -> bool {
        true
    }

    fn response_id<'v>(&self, event: &'v Value) -> Option<&'v Value> {
        event.get("response").and_then(|r| r.get("id"))
    }

    fn response_id_mut<'v>(&self, event: &'v mut Value) -> Option<&'v mut Value> {
        event.get_mut("response").and_then(|r| r.get_mut("id"))
    }

    fn completes_item(&self, kind: Option<&str>) -> bool {
        kind == Some("response.output_item.done")
    }

    fn output_snapshot<'v>(&self, event: &'v mut Value) -> Option<&'v mut Vec<Value>> {
        event
            .get_mut("response")
            .and_then(|r| r.get_mut("output"))
            .and_then(Value::as_array_mut)
    }

    fn numbered_events(&self) -> bool {
        true
    }
}

/// A function output: the text alone, or input parts with the media.
fn output(r: &CallOutput<'_>) -> Value {
    if r.media.is_empty() {
        return Value::from(r.text);
    }
    let mut parts = vec![json!({"type": "input_text", "text": r.text})];
    for (part, m) in r.media.iter().enumerate() {
        parts.push(if m.media_type.starts_with("image/") {
            json!({"type": "input_image", "image_url": data_url(m)})
        } else {
            json!({"type": "input_file", "filename": file_name(m, part), "file_data": data_url(m)})
        });
    }
    Value::Array(parts)
}
