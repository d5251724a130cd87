//! One JSON answer from several rounds of the compress loop: a non-streaming client gets the
//! last round's body with everything it would have seen streamed from the earlier rounds
//! (text the model wrote before a proxy call, other client-visible parts) put in front, in
//! order.

use serde_json::Value;

use foldwire_core::Wire;

/// The client-visible content of one round's answer, proxy calls already removed
/// (see [`super::calls::strip_json`]): Anthropic content blocks, the Chat message text,
/// Responses output items, Gemini parts of the first candidate.
pub fn visible(wire: Wire, body: &Value) -> Vec<Value> {
    match wire {
        Wire::Anthropic => body.get("content").and_then(Value::as_array).cloned(),
        Wire::OpenAiChat => first_message(body)
            .and_then(|m| m.get("content"))
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .map(|t| vec![Value::from(t)]),
        Wire::OpenAiResponses => body.get("output").and_then(Value::as_array).cloned(),
        Wire::Gemini => body
            .get("candidates")
            .and_then(|c| c.get(0))
            .and_then(|c| c.get("content"))
            .and_then(|c| c.get("parts"))
            .and_then(Value::as_array)
            .cloned(),
    }
    .unwrap_or_default()
}

/// Puts `earlier` (from [`visible`] of the earlier rounds, in order) in front of the last
/// round's content. Chat text is joined without a separator, as a streaming client would
/// have concatenated the deltas.
pub fn prepend(wire: Wire, body: &mut Value, earlier: Vec<Value>) {
    if earlier.is_empty() {
        return;
    }
    let slot = match wire {
        Wire::Anthropic => body.get_mut("content"),
        Wire::OpenAiResponses => body.get_mut("output"),
        Wire::Gemini => body
            .get_mut("candidates")
            .and_then(|c| c.get_mut(0))
            .and_then(|c| c.get_mut("content"))
            .and_then(|c| c.get_mut("parts")),
        Wire::OpenAiChat => {
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
            return;
        }
    };
    match slot {
        Some(Value::Array(items)) => {
            let later = std::mem::take(items);
            items.extend(earlier);
            items.extend(later);
        }
        Some(other) => *other = Value::Array(earlier),
        None => {}
    }
}

fn first_message(body: &Value) -> Option<&Value> {
    body.get("choices")?.get(0)?.get("message")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn earlier_rounds_content_goes_in_front_on_every_wire() {
        let mut a = json!({"content": [{"type": "text", "text": "b"}]});
        let earlier = visible(
            Wire::Anthropic,
            &json!({"content": [{"type": "text", "text": "a"}]}),
        );
        prepend(Wire::Anthropic, &mut a, earlier);
        assert_eq!(a["content"][0]["text"], "a");
        assert_eq!(a["content"][1]["text"], "b");

        let round = json!({"choices": [{"message": {"role": "assistant", "content": "a "}}]});
        let mut c = json!({"choices": [{"message": {"role": "assistant", "content": null}}]});
        prepend(Wire::OpenAiChat, &mut c, visible(Wire::OpenAiChat, &round));
        assert_eq!(c["choices"][0]["message"]["content"], "a ");

        let mut r = json!({"output": [{"id": "m2"}]});
        prepend(Wire::OpenAiResponses, &mut r, vec![json!({"id": "m1"})]);
        assert_eq!(r["output"], json!([{"id": "m1"}, {"id": "m2"}]));

        let mut g = json!({"candidates": [{"content": {"parts": [{"text": "b"}]}}]});
        prepend(Wire::Gemini, &mut g, vec![json!({"text": "a"})]);
        assert_eq!(g["candidates"][0]["content"]["parts"][0]["text"], "a");
    }
}
