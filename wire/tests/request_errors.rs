#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Malformed bodies: an error naming the wire, the JSON path and what was expected.

use bytes::Bytes;
use foldwire_core::Wire;
use foldwire_wire::request::{WireError, decode};

fn err(wire: Wire, body: &[u8]) -> WireError {
    decode(wire, Bytes::copy_from_slice(body)).unwrap_err()
}

fn shape(e: &WireError) -> (&str, &str, &str) {
    match e {
        WireError::Shape {
            path,
            expected,
            found,
            ..
        } => (path, expected, found),
        other => panic!("expected a shape error, got {other:?}"),
    }
}

#[test]
fn wrong_types_name_the_path_and_the_expectation() {
    let e = err(Wire::Anthropic, br#"{"messages":[{"role":"user","content":"a"},{"role":"user","content":[{"type":"text","text":"x"},{"text":"no type"}]}]}"#);
    assert_eq!(
        shape(&e),
        ("messages[1].content[1].type", "a string", "no such field")
    );
    let text = e.to_string();
    assert!(
        text.starts_with("anthropic request: at messages[1].content[1].type: expected a string"),
        "{text}"
    );

    let e = err(
        Wire::OpenAiChat,
        br#"{"messages":[{"role":"user","content":42}]}"#,
    );
    assert_eq!(
        shape(&e),
        (
            "messages[0].content",
            "a string, an array of parts or null",
            "a number"
        )
    );

    let e = err(
        Wire::OpenAiChat,
        br#"{"messages":[{"role":"wizard","content":"x"}]}"#,
    );
    assert_eq!(shape(&e).0, "messages[0].role");
    assert!(shape(&e).2.contains("wizard"));

    let e = err(
        Wire::OpenAiResponses,
        br#"{"input":[{"type":"function_call","name":"x","arguments":"{}"}]}"#,
    );
    assert_eq!(shape(&e), ("input[0].call_id", "a string", "no such field"));

    let e = err(Wire::OpenAiResponses, br#"{"input":5}"#);
    assert_eq!(
        shape(&e),
        ("input", "a string or an array of items", "a number")
    );

    let e = err(
        Wire::Gemini,
        br#"{"contents":[{"role":"user","parts":[{"functionCall":{"args":{}}}]}]}"#,
    );
    assert_eq!(
        shape(&e),
        (
            "contents[0].parts[0].functionCall.name",
            "a string",
            "no such field"
        )
    );
    assert!(e.to_string().starts_with("gemini request"));

    let e = err(Wire::Gemini, br#"{"contents":{"parts":[]}}"#);
    assert_eq!(shape(&e), ("contents", "an array", "an object"));

    let e = err(Wire::Anthropic, br#"{"model":"x"}"#);
    assert_eq!(shape(&e), ("body", "a `messages` field", "none"));

    let e = err(Wire::Anthropic, br#"[1,2]"#);
    assert_eq!(shape(&e), ("body", "an object", "an array"));
}

#[test]
fn a_raw_control_character_in_a_string_is_refused_where_it_stands() {
    // A newline typed into a message as it is, not as `\n`: JSON allows none raw, so the
    // body is malformed (serde_json and the providers refuse it too).
    let body =
        b"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"line one\nline two\"}]}";
    let at = body.iter().position(|&b| b == b'\n').unwrap();
    for wire in [Wire::Anthropic, Wire::OpenAiChat] {
        match err(wire, body) {
            WireError::Syntax {
                path,
                at: found,
                expected,
                ..
            } => {
                assert_eq!((path.as_str(), found), ("messages[0].content", at));
                assert!(expected.contains("control character"), "{expected}");
            }
            other => panic!("{other:?}"),
        }
    }
    // Escaped, it is an ordinary string.
    let escaped = br#"{"model":"m","messages":[{"role":"user","content":"line one\nline two"}]}"#;
    assert!(decode(Wire::Anthropic, Bytes::from_static(escaped)).is_ok());
}

#[test]
fn a_number_with_a_leading_zero_is_refused_where_it_stands() {
    // `0512` is not JSON (serde_json and the providers refuse it), wherever it sits: in a
    // field foldwire reads through or in one it never looks into.
    let body = br#"{"model":"m","max_tokens":0512,"messages":[{"role":"user","content":"hi"}]}"#;
    let at = body.windows(4).position(|w| w == b"0512").unwrap() + 1;
    match err(Wire::Anthropic, body) {
        WireError::Syntax {
            at: found,
            expected,
            ..
        } => {
            assert_eq!(found, at);
            assert!(expected.contains("leading 0"), "{expected}");
        }
        other => panic!("{other:?}"),
    }
    let fine = br#"{"model":"m","max_tokens":512,"temperature":0.5,"messages":[{"role":"user","content":"hi"}]}"#;
    assert!(decode(Wire::Anthropic, Bytes::from_static(fine)).is_ok());
}

#[test]
fn a_key_given_twice_is_refused_where_it_repeats() {
    // JSON readers differ on which of two equal keys counts (most take the last, as the
    // providers' do): foldwire refuses the body rather than fold a `content` the provider
    // would not read, in a message or at the top (and spelled with an escape or not).
    let cases: [(&[u8], &str, &str); 3] = [
        (
            br#"{"model":"m","messages":[{"role":"user","content":"a","content":"b"}]}"#,
            r#""content":"b""#,
            "messages[0]",
        ),
        (
            br#"{"model":"m","messages":[],"messages":[{"role":"user","content":"b"}]}"#,
            r#""messages":[{"#,
            "body",
        ),
        (
            br#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a","te\u0078t":"b"}]}]}"#,
            r#""te\u0078t""#,
            "messages[0].content[0]",
        ),
    ];
    for (body, repeat, at_path) in cases {
        let at = String::from_utf8_lossy(body).rfind(repeat).unwrap();
        match err(Wire::Anthropic, body) {
            WireError::Syntax {
                path,
                at: found,
                expected,
                ..
            } => {
                assert_eq!(found, at, "{}", String::from_utf8_lossy(body));
                assert_eq!(path, at_path);
                assert!(expected.contains("repeats an earlier key"), "{expected}");
            }
            other => panic!("{other:?}"),
        }
    }
    // The same key in two different objects is no repeat.
    let fine = br#"{"model":"m","messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]}"#;
    assert!(decode(Wire::Anthropic, Bytes::from_static(fine)).is_ok());
}

#[test]
fn syntax_errors_name_the_offset_and_expectation() {
    let body = br#"{"messages":[{"role":"user","content":"a"},]}"#;
    match err(Wire::Anthropic, body) {
        WireError::Syntax {
            wire,
            path,
            at,
            expected,
        } => {
            assert_eq!(wire, Wire::Anthropic);
            assert_eq!(path, "messages[1]");
            assert_eq!(at, body.len() - 2);
            assert_eq!(expected, "a JSON value");
        }
        other => panic!("{other:?}"),
    }
    assert!(
        matches!(err(Wire::Gemini, b"{\"contents\":[]} x"), WireError::Syntax { expected, .. } if expected.contains("end of the body"))
    );
    assert!(matches!(
        err(Wire::OpenAiChat, b"{\"messages\":\"unterminated"),
        WireError::Syntax { .. }
    ));
    let e = err(
        Wire::Gemini,
        br#"{"contents":[{"parts":[{"text":"a"}]},{"parts":[{"text" "b"}]}]}"#,
    );
    assert!(
        e.to_string().starts_with(
            "gemini request: invalid JSON in contents[1].parts[0] at byte 56: expected ':'"
        ),
        "{e}"
    );
    assert!(matches!(
        err(Wire::OpenAiChat, b""),
        WireError::Syntax { at: 0, .. }
    ));
    match err(Wire::OpenAiResponses, b"{\"input\":\"\xff\xfe\"}") {
        WireError::NotUtf8 { wire, at } => {
            assert_eq!(wire, Wire::OpenAiResponses);
            assert_eq!(at, 10);
        }
        other => panic!("{other:?}"),
    }
}

/// The path and what stands there, of an error for a request that continues a conversation
/// the provider keeps.
fn held(e: &WireError) -> (&str, &str) {
    match e {
        WireError::ProviderHeld { path, found, .. } => (path, found),
        other => panic!("expected a provider-held error, got {other:?}"),
    }
}

#[test]
fn a_request_that_continues_a_conversation_the_provider_keeps_is_not_decoded() {
    use foldwire_wire::request::{decode_after, provider_held};
    let output = r#"{"type":"function_call_output","call_id":"call_1","output":"42 files"}"#;
    let cases: [(Wire, String, (&str, &str)); 5] = [
        (
            Wire::OpenAiResponses,
            format!(r#"{{"model":"m","previous_response_id":"resp_9","input":[{output}]}}"#),
            ("previous_response_id", r#""resp_9""#),
        ),
        // After the input, where a resumed decode reads only the frame.
        (
            Wire::OpenAiResponses,
            format!(r#"{{"model":"m","input":[{output}],"conversation":{{"id":"conv_1"}}}}"#),
            ("conversation", r#"{"id":"conv_1"}"#),
        ),
        (
            Wire::OpenAiResponses,
            format!(
                r#"{{"model":"m","input":[{{"type":"item_reference","id":"fc_1"}},{output}]}}"#
            ),
            ("input[0]", r#"an "item_reference" item"#),
        ),
        (
            Wire::Gemini,
            r#"{"cachedContent":"cachedContents/abc","contents":[{"role":"user","parts":[{"functionResponse":{"name":"ls","response":{"n":42}}}]}]}"#.to_owned(),
            ("cachedContent", r#""cachedContents/abc""#),
        ),
        (
            Wire::OpenAiResponses,
            format!(r#"{{"previous_response_id":"{}","input":[]}}"#, "r".repeat(200)),
            ("previous_response_id", ""),
        ),
    ];
    for (wire, body, (path, found)) in &cases {
        let e = err(*wire, body.as_bytes());
        assert_eq!(held(&e).0, *path, "{body}");
        if found.is_empty() {
            assert!(held(&e).1.ends_with("(202 bytes)"), "{e}");
        } else {
            assert_eq!(held(&e).1, *found, "{body}");
        }
        assert!(
            e.to_string()
                .contains("continues a conversation the provider keeps"),
            "{e}"
        );
        // The proxy's check before any decode says the same.
        assert_eq!(provider_held(*wire, body.as_bytes()), Some(e), "{body}");
    }

    // Set to null, or named only inside a text (or as one), they tie nothing.
    let free = [
        (
            Wire::OpenAiResponses,
            r#"{"previous_response_id":null,"conversation":null,"input":[{"role":"user","content":"pass \"previous_response_id\", a \"conversation\""},{"role":"user","content":"item_reference"}]}"#.to_owned(),
        ),
        (
            Wire::Gemini,
            r#"{"cachedContent":null,"contents":[{"role":"user","parts":[{"text":"\"cachedContent\""}]}]}"#.to_owned(),
        ),
        // The fields mean nothing on the other wires.
        (
            Wire::Anthropic,
            r#"{"previous_response_id":"resp_9","messages":[{"role":"user","content":"hi"}]}"#.to_owned(),
        ),
    ];
    for (wire, body) in &free {
        assert!(decode(*wire, Bytes::from(body.clone())).is_ok(), "{body}");
        assert_eq!(provider_held(*wire, body.as_bytes()), None, "{body}");
    }

    // A decode resumed from the last request's reads the new frame too.
    let first = r#"{"model":"m","input":[{"role":"user","content":"hi"}]}"#;
    let prior = decode(Wire::OpenAiResponses, Bytes::from_static(first.as_bytes())).unwrap();
    let next =
        r#"{"model":"m","input":[{"role":"user","content":"hi"}],"previous_response_id":"resp_1"}"#;
    let e = decode_after(
        Wire::OpenAiResponses,
        Bytes::from_static(next.as_bytes()),
        prior,
    )
    .unwrap_err();
    assert_eq!(held(&e).0, "previous_response_id");
}
