//! One JSON answer from several rounds of the compress loop: a non-streaming client gets the
//! last round's body with everything it would have seen streamed from the earlier rounds
//! (text the model wrote before a proxy call, other client-visible parts) put in front, in
//! order.

use serde_json::Value;

use foldwire_core::Wire;
use foldwire_wire::dialect::WireDialect;

/// The client-visible content of one round's answer, proxy calls already removed
/// (see [`super::calls::strip_json`]), in the wire's shape ([`foldwire_wire::dialect`]).
pub fn visible(wire: Wire, body: &Value) -> Vec<Value> {
    wire.dialect().visible(body)
}

/// Puts `earlier` (from [`visible`] of the earlier rounds, in order) in front of the last
/// round's content. Chat text is joined without a separator, as a streaming client would
/// have concatenated the deltas.
pub fn prepend(wire: Wire, body: &mut Value, earlier: Vec<Value>) {
    if earlier.is_empty() {
        return;
    }
    wire.dialect().prepend(body, earlier);
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
