#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Wire detection from the path, then the body; unknown or undecidable shapes are errors.

use foldwire_core::{Wire, fixtures};
use foldwire_wire::request::{DetectError, detect};

#[test]
fn paths_decide() {
    let body = b"{}";
    assert_eq!(detect(Some("/v1/messages"), body), Ok(Wire::Anthropic));
    assert_eq!(
        detect(Some("/v1/messages?beta=true"), body),
        Ok(Wire::Anthropic)
    );
    assert_eq!(
        detect(Some("/v1/chat/completions"), body),
        Ok(Wire::OpenAiChat)
    );
    assert_eq!(
        detect(Some("/api/v1/chat/completions/"), body),
        Ok(Wire::OpenAiChat)
    );
    assert_eq!(
        detect(Some("/v1/responses"), body),
        Ok(Wire::OpenAiResponses)
    );
    assert_eq!(
        detect(Some("/v1beta/models/gemini-2.5-pro:generateContent"), body),
        Ok(Wire::Gemini)
    );
    assert_eq!(
        detect(Some("/v1beta/models/x:streamGenerateContent?alt=sse"), body),
        Ok(Wire::Gemini)
    );
}

#[test]
fn bodies_decide_when_the_path_does_not() {
    let d = |b: &str| detect(Some("/proxy"), b.as_bytes());
    assert_eq!(d(r#"{"contents":[]}"#), Ok(Wire::Gemini));
    assert_eq!(
        d(r#"{"input":"hi","model":"o4"}"#),
        Ok(Wire::OpenAiResponses)
    );
    assert_eq!(d(r#"{"system":"s","messages":[]}"#), Ok(Wire::Anthropic));
    assert_eq!(
        d(
            r#"{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"x"}]}]}"#
        ),
        Ok(Wire::Anthropic)
    );
    assert_eq!(
        d(r#"{"messages":[{"role":"system","content":"s"}]}"#),
        Ok(Wire::OpenAiChat)
    );
    assert_eq!(
        detect(
            None,
            br#"{"messages":[{"role":"assistant","tool_calls":[]}]}"#
        ),
        Ok(Wire::OpenAiChat)
    );
}

#[test]
fn unknown_and_ambiguous_shapes_are_reported() {
    match detect(Some("/v2/complete"), br#"{"prompt":"x","model":"m"}"#) {
        Err(DetectError::Unknown { path, keys }) => {
            assert_eq!(path.as_deref(), Some("/v2/complete"));
            assert_eq!(keys, ["prompt", "model"]);
        }
        other => panic!("{other:?}"),
    }
    match detect(
        None,
        br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#,
    ) {
        Err(DetectError::Ambiguous {
            candidates, keys, ..
        }) => {
            assert_eq!(candidates, [Wire::Anthropic, Wire::OpenAiChat]);
            assert_eq!(keys, ["model", "messages"]);
        }
        other => panic!("{other:?}"),
    }
    let e = detect(None, b"[1]").unwrap_err();
    assert!(matches!(e, DetectError::NotAnObject { .. }));
    assert!(e.to_string().contains("an array"), "{e}");
    assert!(matches!(
        detect(None, b"{nope"),
        Err(DetectError::NotAnObject { .. })
    ));
}

#[test]
fn every_request_fixture_is_detected_from_its_body() {
    for (wire, dir) in [
        (Wire::Anthropic, "anthropic"),
        (Wire::OpenAiChat, "openai-chat"),
        (Wire::OpenAiResponses, "openai-responses"),
        (Wire::Gemini, "gemini"),
    ] {
        for f in fixtures::files(dir, "request-") {
            let body = std::fs::read(&f).unwrap();
            match detect(None, &body) {
                Ok(w) => assert_eq!(w, wire, "{}", f.display()),
                // A body with nothing wire-specific may be ambiguous, never wrong.
                Err(DetectError::Ambiguous { candidates, .. }) => {
                    assert!(candidates.contains(&wire), "{}", f.display())
                }
                Err(e) => panic!("{}: {e}", f.display()),
            }
        }
    }
}
