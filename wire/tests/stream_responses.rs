//! Non-streaming response and error bodies give the same normalized events as streams.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod stream_support;

use foldwire_core::Wire;
use foldwire_wire::stream::{StreamError, StreamEvent, parse_response};
use stream_support::*;

fn body(wire: Wire, name: &str) -> Option<Vec<u8>> {
    let path = foldwire_core::fixtures::files(wire.as_str(), name).pop()?;
    Some(std::fs::read(path).unwrap())
}

fn summary(wire: Wire, name: &str) -> Option<Summary> {
    let bytes = body(wire, name)?;
    Some(summarize(&parse_response(wire, &bytes).unwrap()))
}

#[test]
fn every_response_and_error_fixture_parses() {
    let mut seen = 0;
    for wire in Wire::ALL {
        for prefix in ["response-", "error-"] {
            for path in foldwire_core::fixtures::files(wire.as_str(), prefix) {
                let events = parse_response(wire, &std::fs::read(&path).unwrap()).unwrap();
                let s = summarize(&events);
                if prefix == "error-" {
                    assert_eq!(s.errors.len(), 1, "{}", path.display());
                    assert!(s.errors[0].len() > 10);
                    assert_eq!(events.len(), 1);
                } else {
                    assert!(s.errors.is_empty(), "{}", path.display());
                    assert_eq!(s.stops.len(), 1, "{}", path.display());
                    assert!(s.usage.is_some(), "{}", path.display());
                }
                seen += 1;
            }
        }
    }
    if foldwire_core::fixtures::dir().is_some() {
        assert_eq!(seen, 8);
    }
}

#[test]
fn anthropic_parallel_tool_use_body() {
    let Some(s) = summary(Wire::Anthropic, "response-parallel-tool-use.json") else {
        return;
    };
    assert!(
        s.text
            .starts_with("I'll help you find out who is the youngest")
    );
    let names: Vec<&str> = s.calls.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["retrieve_entity_info"; 4]);
    let people: Vec<String> = s
        .calls
        .iter()
        .map(|c| {
            let v: serde_json::Value = serde_json::from_str(&c.args).unwrap();
            v["name"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(people, ["Alice", "Bob", "Charlie", "Daisy"]);
    assert_eq!(s.calls[0].id, "toolu_0167cfEnoQaPviGdVXA95zcu");
    assert_eq!(
        s.calls.iter().map(|c| c.index).collect::<Vec<_>>(),
        [1, 2, 3, 4]
    );
    assert!(s.calls.iter().all(|c| c.ended));
    assert_eq!(s.stops, ["tool_use"]);
    let u = s.usage.unwrap();
    assert_eq!(
        (u.input_tokens, u.output_tokens, u.cache_read),
        (Some(423), Some(202), Some(0))
    );
}

#[test]
fn openai_chat_tool_calls_body() {
    let Some(s) = summary(Wire::OpenAiChat, "response-tool-calls.json") else {
        return;
    };
    assert_eq!(s.text, "");
    assert_eq!(s.calls.len(), 1);
    assert_eq!(s.calls[0].id, "call_SkEQ3ZGSJC8m6AvaIGNuuKdm");
    assert_eq!(s.calls[0].name, "get_capital");
    assert_eq!(s.calls[0].args, r#"{"country":"England"}"#);
    assert_eq!(s.stops, ["tool_calls"]);
    let u = s.usage.unwrap();
    assert_eq!(
        (u.input_tokens, u.output_tokens, u.total_tokens),
        (Some(104), Some(16), Some(120))
    );
}

#[test]
fn openai_responses_reasoning_and_function_call_body() {
    let Some(s) = summary(
        Wire::OpenAiResponses,
        "response-reasoning-function-call.json",
    ) else {
        return;
    };
    assert!(s.reasoning.starts_with("**Creating a structured poem**"));
    assert!(
        s.reasoning
            .contains("**Finalizing the poem and updating the plan**")
    );
    assert_eq!(s.signatures.len(), 1);
    assert!(s.signatures[0].starts_with("gAAAAABoxC0_"));
    assert_eq!(s.calls.len(), 1);
    assert_eq!(s.calls[0].name, "update_plan");
    assert_eq!(s.calls[0].index, 1);
    let args: serde_json::Value = serde_json::from_str(&s.calls[0].args).unwrap();
    assert!(args["plan"].as_str().unwrap().starts_with("Plan:"));
    assert_eq!(s.stops, ["completed"]);
    let u = s.usage.unwrap();
    assert_eq!(
        (u.input_tokens, u.reasoning_tokens),
        (Some(124), Some(1792))
    );
}

#[test]
fn gemini_bodies() {
    if let Some(s) = summary(
        Wire::Gemini,
        "response-function-call-thought-signature.json",
    ) {
        assert_eq!(s.calls.len(), 3);
        assert!(
            s.calls
                .iter()
                .all(|c| c.name == "generate_topic" && c.args == "{}")
        );
        assert_eq!(
            s.calls.iter().map(|c| c.index).collect::<Vec<_>>(),
            [0, 1, 2]
        );
        assert_eq!(
            s.signatures.len(),
            1,
            "only the first part carries a signature"
        );
        assert_eq!(s.stops, ["STOP"]);
        assert_eq!(s.usage.unwrap().reasoning_tokens, Some(190));
    }
    if let Some(s) = summary(Wire::Gemini, "response-empty-content-max-tokens.json") {
        assert_eq!(s.text, "");
        assert!(s.calls.is_empty());
        assert_eq!(s.stops, ["MAX_TOKENS"]);
        assert_eq!(s.usage.unwrap().input_tokens, Some(15));
    }
}

#[test]
fn error_bodies_name_the_provider_message() {
    let cases = [
        (
            Wire::Anthropic,
            "error-invalid-request-400.json",
            "This model does not support effort level 'xhigh'",
        ),
        (
            Wire::OpenAiResponses,
            "error-invalid-parameter-400.json",
            "Invalid 'temperature'",
        ),
        (
            Wire::Gemini,
            "error-model-not-found-404.json",
            "models/gemini-3.6-flahs is not found",
        ),
    ];
    for (wire, name, start) in cases {
        let Some(bytes) = body(wire, name) else {
            return;
        };
        let events = parse_response(wire, &bytes).unwrap();
        let StreamEvent::Error { message, raw } = &events[0] else {
            panic!("{name}: {events:?}");
        };
        assert!(message.starts_with(start), "{name}: {message}");
        let raw: serde_json::Value = serde_json::from_str(raw).unwrap();
        assert!(
            raw["message"].is_string(),
            "{name}: raw keeps the error object"
        );
    }
}

#[test]
fn stream_and_body_of_the_same_call_agree() {
    // The Responses stream's final `response.completed` carries the whole response: reading it
    // as a body gives the same calls as the stream's events.
    let Some(path) =
        foldwire_core::fixtures::files("openai-responses", "stream-usage-reasoning").pop()
    else {
        return;
    };
    let events = parse_ok(Wire::OpenAiResponses, &std::fs::read(path).unwrap());
    let streamed = summarize_stream(&events);
    let last = events.iter().rev().find_map(|e| e.data.clone()).unwrap();
    let completed: serde_json::Value = serde_json::from_str(&last).unwrap();
    let body = serde_json::to_vec(&completed["response"]).unwrap();
    let whole = summarize(&parse_response(Wire::OpenAiResponses, &body).unwrap());
    assert_eq!(whole.calls, streamed.calls);
    assert_eq!(whole.usage, streamed.usage);
    assert_eq!(whole.stops, streamed.stops);
    assert_eq!(whole.signatures.len(), 1);
}

#[test]
fn malformed_bodies_are_reported_with_wire_and_place() {
    let err = parse_response(Wire::Gemini, b"{\"candidates\": [").unwrap_err();
    let StreamError::Body { wire, path, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(*wire, Wire::Gemini);
    assert!(path.contains("line 1"), "{path}");
    assert!(err.to_string().starts_with("gemini response body"), "{err}");
    let err = parse_response(Wire::Anthropic, b"[1,2]").unwrap_err();
    assert!(err.to_string().contains("expected a JSON object"), "{err}");
}

/// OpenAI reports the prompt tokens a request wrote to its cache beside those it read, on
/// both of its wires.
#[test]
fn openai_cache_writes_are_read_on_both_wires() {
    let chat = br#"{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5000,"completion_tokens":2,"total_tokens":5002,"prompt_tokens_details":{"cached_tokens":3072,"cache_write_tokens":1920}}}"#;
    let responses = br#"{"id":"r","object":"response","status":"completed","output":[{"type":"message","id":"m","role":"assistant","status":"completed","content":[{"type":"output_text","text":"ok","annotations":[]}]}],"usage":{"input_tokens":5000,"input_tokens_details":{"cached_tokens":3072,"cache_write_tokens":1920},"output_tokens":2,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":5002}}"#;
    for (wire, body) in [
        (Wire::OpenAiChat, &chat[..]),
        (Wire::OpenAiResponses, &responses[..]),
    ] {
        let u = summarize(&parse_response(wire, body).unwrap())
            .usage
            .unwrap();
        assert_eq!(
            (u.input_tokens, u.cache_read, u.cache_write),
            (Some(5000), Some(3072), Some(1920)),
            "{wire}"
        );
    }
}
