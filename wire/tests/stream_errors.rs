//! Bad streams give errors that name the wire, the event and byte offset and what was
//! expected; no input makes the parser panic, and chunking never changes the outcome.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod stream_support;

use foldwire_core::Wire;
use foldwire_wire::stream::{StreamError, StreamFilter, StreamFormat, StreamParser};
use proptest::prelude::*;
use stream_support::*;

#[test]
fn invalid_json_names_wire_event_and_offset() {
    let input = b"event: ping\ndata: {\"type\":\"ping\"}\n\ndata: {oops\n\n";
    let (events, error) = parse_cut(Wire::Anthropic, input, &[]);
    assert_eq!(events.len(), 1);
    let error = error.unwrap();
    assert!(
        matches!(
            error,
            StreamError::Json {
                event: 1,
                offset: 35,
                ..
            }
        ),
        "{error:?}"
    );
    let text = error.to_string();
    assert!(
        text.starts_with("anthropic stream: event 1 at byte 35"),
        "{text}"
    );
}

#[test]
fn error_after_good_events_is_deferred_then_sticks() {
    let mut parser = StreamParser::new(Wire::OpenAiChat);
    let good = parser
        .feed(b"data: {\"choices\":[]}\n\ndata: nope\n\n")
        .unwrap();
    assert_eq!(good.len(), 1, "the good event comes out first");
    let err = parser.feed(b"data: {}\n\n").unwrap_err();
    assert!(matches!(err, StreamError::Json { event: 1, .. }));
    let again = parser.feed(b"data: {}\n\n").unwrap_err();
    assert_eq!(
        again.to_string(),
        "openai-chat stream: parser already failed at event 1; create a new parser"
    );
}

#[test]
fn non_object_payload_and_bad_utf8_are_named() {
    let (_, e) = parse_cut(Wire::OpenAiResponses, b"data: [1]\n\n", &[]);
    assert!(
        e.unwrap()
            .to_string()
            .contains("expected a JSON object payload")
    );
    let (_, e) = parse_cut(Wire::Gemini, b"data: {\"a\":\"\xff\"}\n\n", &[]);
    assert!(matches!(
        e,
        Some(StreamError::Utf8 {
            event: 0,
            offset: 0,
            ..
        })
    ));
}

#[test]
fn json_array_errors() {
    let (events, e) = parse_cut(Wire::Gemini, b"[{\"candidates\":[]} {", &[5]);
    assert_eq!(events.len(), 1);
    let e = e.unwrap();
    assert!(
        e.to_string()
            .contains("at byte 19: expected ',' or ']' after an array element, found {"),
        "{e}"
    );
    let (_, e) = parse_cut(Wire::Gemini, b"[{\"candidates\":[]},", &[]);
    let e = e.unwrap().to_string();
    assert!(
        e.contains("ended at byte 19") && e.contains("expected an array element"),
        "{e}"
    );
    let mut p = StreamParser::with_format(Wire::Gemini, StreamFormat::JsonArray);
    let e = p.feed(b"data: {}").unwrap_err().to_string();
    assert!(e.contains("'[' opening the JSON array stream"), "{e}");
}

#[test]
fn chat_done_closes_open_calls() {
    let input = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c\",",
        "\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}}]}\n\ndata: [DONE]\n\n"
    );
    let s = summarize_stream(&parse_ok(Wire::OpenAiChat, input.as_bytes()));
    assert!(s.calls[0].ended);
}

#[test]
fn empty_and_blank_streams_are_fine() {
    for wire in Wire::ALL {
        assert!(parse_ok(wire, b"").is_empty());
        let events = parse_ok(wire, b"\n\n");
        assert!(events.iter().all(|e| e.events.is_empty()));
        assert_eq!(concat_raw(&events), b"\n\n");
    }
}

/// Parses with the given cuts and runs the filter over whatever was parsed: must not panic.
fn outcome(wire: Wire, bytes: &[u8], cuts: &[usize]) -> Outcome {
    let (events, error) = parse_cut(wire, bytes, cuts);
    let mut filter = StreamFilter::new(wire, ["compress", "f", "bash"]);
    for e in &events {
        let _ = filter.push(e);
    }
    let _ = filter.finish();
    (events, error)
}

fn wire_strategy() -> impl Strategy<Value = Wire> {
    prop_oneof![
        Just(Wire::Anthropic),
        Just(Wire::OpenAiChat),
        Just(Wire::OpenAiResponses),
        Just(Wire::Gemini),
    ]
}

/// Streams made of plausible pieces, so the interpreters get exercised, not just the framers.
fn sse_like() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        Just("data: ".to_owned()),
        Just("event: content_block_start\n".to_owned()),
        Just("\n".to_owned()),
        Just("\r\n".to_owned()),
        Just("\r".to_owned()),
        Just(": keep-alive\n".to_owned()),
        Just("data: [DONE]\n\n".to_owned()),
        Just(r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"t","name":"f"}}"#.to_owned()),
        Just(r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{"}}"#.to_owned()),
        Just(r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"x","function":{"name":"f","arguments":"{}"}}]},"finish_reason":null}]}"#.to_owned()),
        Just(r#"{"type":"response.output_item.added","output_index":0,"sequence_number":3,"item":{"type":"function_call","name":"f","call_id":"c"}}"#.to_owned()),
        Just(r#"{"candidates":[{"content":{"parts":[{"functionCall":{"name":"f","args":{}}},{"text":"é","thought":true}]}}]}"#.to_owned()),
        Just("[".to_owned()),
        Just(",".to_owned()),
        Just("]".to_owned()),
        "[ -~]{0,12}",
    ];
    prop::collection::vec(piece, 0..24).prop_map(|v| v.concat().into_bytes())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn arbitrary_bytes_never_panic_and_chunking_is_irrelevant(
        wire in wire_strategy(),
        bytes in prop::collection::vec(any::<u8>(), 0..400),
        cut_a in any::<prop::sample::Index>(),
        cut_b in any::<prop::sample::Index>(),
    ) {
        let whole = outcome(wire, &bytes, &[]);
        let mut cuts = vec![cut_a.index(bytes.len() + 1), cut_b.index(bytes.len() + 1)];
        cuts.sort_unstable();
        prop_assert_eq!(outcome(wire, &bytes, &cuts), whole.clone());
        if whole.1.is_none() {
            prop_assert_eq!(concat_raw(&whole.0), bytes);
        }
    }

    #[test]
    fn plausible_streams_never_panic_and_chunking_is_irrelevant(
        wire in wire_strategy(),
        bytes in sse_like(),
        cut_a in any::<prop::sample::Index>(),
        cut_b in any::<prop::sample::Index>(),
    ) {
        let whole = outcome(wire, &bytes, &[]);
        let mut cuts = vec![cut_a.index(bytes.len() + 1), cut_b.index(bytes.len() + 1)];
        cuts.sort_unstable();
        prop_assert_eq!(outcome(wire, &bytes, &cuts), whole.clone());
        let every: Vec<usize> = (1..bytes.len()).collect();
        prop_assert_eq!(outcome(wire, &bytes, &every), whole.clone());
        if whole.1.is_none() {
            prop_assert_eq!(concat_raw(&whole.0), bytes);
        }
    }

    #[test]
    fn arbitrary_bodies_never_panic(wire in wire_strategy(), bytes in sse_like()) {
        let _ = foldwire_wire::stream::parse_response(wire, &bytes);
    }
}
