//! Hiding tool calls from the client: every event of a hidden call is removed, later positions
//! are renumbered so the client sees a consistent stream, nothing else changes, and the hidden
//! calls' complete arguments are handed back.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod stream_support;

use std::collections::BTreeSet;

use bytes::Bytes;

use foldwire_core::Wire;
use foldwire_wire::stream::{HiddenCall, ParsedEvent, StreamFilter, filter_stream};
use serde_json::Value;
use stream_support::*;

/// Keys a re-serialized event may differ in, per wire.
fn allowed_changes(wire: Wire) -> &'static [&'static str] {
    match wire {
        Wire::Anthropic => &["index"],
        Wire::OpenAiChat => &["choices"],
        Wire::OpenAiResponses => &["output_index", "sequence_number", "response"],
        Wire::Gemini => &["candidates"],
    }
}

fn payload(event_bytes: &[u8], wire: Wire) -> Value {
    let start = event_bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace() && *b != b'[' && *b != b',')
        .unwrap();
    if event_bytes[start] == b'{' {
        // A JSON array element with its separator in front.
        return serde_json::from_slice(&event_bytes[start..]).unwrap();
    }
    let events = parse_ok(wire, event_bytes);
    let data = events
        .iter()
        .find_map(|e| e.data.clone())
        .expect("no payload");
    serde_json::from_str(&data).unwrap()
}

fn without(mut v: Value, keys: &[&str]) -> Value {
    if let Some(o) = v.as_object_mut() {
        for k in keys {
            o.remove(*k);
        }
    }
    v
}

/// What the client received after hiding.
struct Hidden {
    output: Vec<u8>,
    calls: Vec<HiddenCall>,
    dropped: usize,
    rewritten: usize,
}

fn hide(wire: Wire, bytes: &[u8], name: &str) -> Hidden {
    let events: Vec<ParsedEvent> = parse_ok(wire, bytes);
    let mut filter = StreamFilter::new(wire, [name]);
    // What reaches the client, in order: events the filter let go after holding them,
    // then each event's own bytes.
    let mut emitted: Vec<(ParsedEvent, Bytes)> = Vec::new();
    for e in &events {
        let current = filter.push(e).unwrap();
        emitted.extend(filter.take_released());
        emitted.extend(current.map(|b| (e.clone(), b)));
    }
    emitted.extend(filter.flush());
    let mut output = Vec::new();
    let dropped = events.len() - emitted.len();
    let mut rewritten = 0;
    for (e, b) in &emitted {
        let (e, b) = (e, b.clone());
        match b {
            b if b == e.raw => output.extend_from_slice(&b),
            b => {
                rewritten += 1;
                // A rewritten event keeps its framing and differs only where it must.
                let before = payload(&e.raw, wire);
                let after = payload(&b, wire);
                let keys = allowed_changes(wire);
                assert_eq!(without(before, keys), without(after, keys));
                if wire != Wire::Gemini
                    || !matches!(
                        e.framing,
                        foldwire_wire::stream::Framing::ArrayElement { .. }
                    )
                {
                    assert!(b.ends_with(b"\n\n") || b.ends_with(b"\r\n\r\n"));
                }
                output.extend_from_slice(&b);
            }
        }
    }
    // Streaming use must agree with the one-shot helper.
    let (whole, calls_whole) = filter_stream(wire, bytes, [name]).unwrap();
    let calls = filter.finish();
    assert_eq!(&whole[..], &output[..]);
    assert_eq!(calls_whole, calls);
    Hidden {
        output,
        calls,
        dropped,
        rewritten,
    }
}

/// The client's view is consistent for its wire.
fn assert_consistent(wire: Wire, output: &[u8], hidden_name: &str) {
    let events = parse_ok(wire, output);
    let payloads: Vec<Value> = events
        .iter()
        .filter_map(|e| e.data.as_deref())
        .filter(|d| d.trim() != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    match wire {
        Wire::Anthropic => {
            let mut started = Vec::new();
            for p in &payloads {
                let index = p["index"].as_u64();
                match p["type"].as_str().unwrap() {
                    "content_block_start" => {
                        assert_eq!(index, Some(started.len() as u64), "blocks renumbered");
                        started.push(index);
                        assert_ne!(p["content_block"]["name"], hidden_name);
                    }
                    "content_block_delta" | "content_block_stop" => {
                        assert!(
                            started.contains(&index),
                            "event for unknown block {index:?}"
                        )
                    }
                    _ => {}
                }
            }
        }
        Wire::OpenAiChat => {
            let mut seen: Vec<u64> = Vec::new();
            for p in &payloads {
                for c in p["choices"].as_array().unwrap() {
                    for call in c["delta"]["tool_calls"].as_array().into_iter().flatten() {
                        assert_ne!(call["function"]["name"], hidden_name);
                        let i = call["index"].as_u64().unwrap();
                        if !seen.contains(&i) {
                            assert_eq!(i, seen.len() as u64, "tool calls renumbered");
                            seen.push(i);
                        }
                    }
                }
            }
        }
        Wire::OpenAiResponses => {
            let mut items = 0u64;
            let mut last_seq: Option<u64> = None;
            for p in &payloads {
                if let Some(seq) = p["sequence_number"].as_u64() {
                    if let Some(last) = last_seq {
                        assert_eq!(seq, last + 1, "sequence numbers contiguous");
                    }
                    last_seq = Some(seq);
                }
                if p["type"] == "response.output_item.added" {
                    assert_eq!(p["output_index"].as_u64(), Some(items));
                    assert_ne!(p["item"]["name"], hidden_name);
                    items += 1;
                }
                if let Some(output) = p["response"]["output"].as_array() {
                    if p["type"] == "response.completed" {
                        assert_eq!(output.len() as u64, items);
                    }
                    assert!(output.iter().all(|i| i["name"] != hidden_name));
                }
            }
        }
        Wire::Gemini => {
            for p in &payloads {
                for c in p["candidates"].as_array().into_iter().flatten() {
                    for part in c["content"]["parts"].as_array().into_iter().flatten() {
                        assert_ne!(part["functionCall"]["name"], hidden_name);
                    }
                }
            }
        }
    }
}

fn check_hiding(wire: Wire, bytes: &[u8], label: &str) -> usize {
    let original = summarize_stream(&parse_ok(wire, bytes));
    let names: BTreeSet<String> = original.calls.iter().map(|c| c.name.clone()).collect();
    for name in &names {
        let hidden = hide(wire, bytes, name);
        let expected: Vec<&Call> = original.calls.iter().filter(|c| &c.name == name).collect();
        assert_eq!(hidden.calls.len(), expected.len(), "{label}: {name}");
        for (got, want) in hidden.calls.iter().zip(&expected) {
            assert_eq!(got.id, want.id);
            assert_eq!(&got.name, name);
            assert!(got.complete);
            let want_args = if want.args.is_empty() {
                "{}"
            } else {
                &want.args
            };
            let got_args: Value = serde_json::from_str(&got.arguments).unwrap();
            assert_eq!(got_args, serde_json::from_str::<Value>(want_args).unwrap());
        }
        assert!(
            hidden.dropped > 0 || wire == Wire::Gemini,
            "{label}: nothing dropped"
        );
        let seen = summarize_stream(&parse_ok(wire, &hidden.output));
        let kept: Vec<(&str, &str, &str)> = original
            .calls
            .iter()
            .filter(|c| &c.name != name)
            .map(|c| (c.id.as_str(), c.name.as_str(), c.args.as_str()))
            .collect();
        let got: Vec<(&str, &str, &str)> = seen
            .calls
            .iter()
            .map(|c| (c.id.as_str(), c.name.as_str(), c.args.as_str()))
            .collect();
        assert_eq!(
            got, kept,
            "{label}: the other calls reach the client unchanged"
        );
        assert_eq!(seen.text, original.text, "{label}");
        assert_eq!(seen.reasoning, original.reasoning, "{label}");
        assert_eq!(seen.usage, original.usage, "{label}");
        assert_eq!(seen.stops, original.stops, "{label}");
        assert_eq!(seen.errors, original.errors, "{label}");
        assert_consistent(wire, &hidden.output, name);
        // Hiding a name twice over is idempotent on the client's view.
        let again = hide(wire, &hidden.output, name);
        assert_eq!(again.output, hidden.output, "{label}");
        assert_eq!(again.rewritten, 0);
    }
    names.len()
}

#[test]
fn hiding_each_tool_of_each_fixture() {
    let mut tried = 0;
    for (wire, path) in stream_fixtures() {
        let bytes = stream_bytes(wire, &path);
        tried += check_hiding(wire, &bytes, &path.display().to_string());
    }
    if foldwire_core::fixtures::dir().is_some() {
        assert!(tried >= 12, "only {tried} tool names tried");
    }
}

fn fixture(wire: Wire, name: &str) -> Option<Vec<u8>> {
    let path = foldwire_core::fixtures::files(wire.as_str(), name).pop()?;
    Some(stream_bytes(wire, &path))
}

#[test]
fn anthropic_later_blocks_are_renumbered_and_earlier_untouched() {
    let Some(bytes) = fixture(Wire::Anthropic, "stream-server-tool-code-execution.sse") else {
        return;
    };
    let hidden = hide(Wire::Anthropic, &bytes, "bash_code_execution");
    // The server tool block 2: start, 9 deltas, stop.
    assert_eq!(hidden.dropped, 11);
    // Blocks 3 (start, stop) and 4 (start, 8 deltas, stop) move down by one.
    assert_eq!(hidden.rewritten, 12);
    let text = String::from_utf8(hidden.output.clone()).unwrap();
    assert!(text.contains(
        r#"{"type":"content_block_start","index":3,"content_block":{"type":"text","text":""}}"#
    ));
    assert!(!text.contains(r#""index":4"#));
    // Everything up to the hidden block is byte-identical.
    let cut = String::from_utf8(bytes.clone())
        .unwrap()
        .find("srvtoolu_")
        .unwrap();
    let prefix_end = bytes[..cut].iter().rposition(|b| *b == b'\n').unwrap();
    let prefix_end = bytes[..prefix_end]
        .iter()
        .rposition(|b| *b == b'\n')
        .unwrap();
    assert_eq!(&hidden.output[..prefix_end], &bytes[..prefix_end]);

    // Hiding the last block changes nothing but removing its frames.
    let Some(bytes) = fixture(Wire::Anthropic, "stream-thinking-then-tool-use.sse") else {
        return;
    };
    let hidden = hide(Wire::Anthropic, &bytes, "fixed_version");
    assert_eq!((hidden.dropped, hidden.rewritten), (3, 0));
    assert_eq!(hidden.calls[0].arguments, "{}");
}

#[test]
fn chat_parallel_calls_renumber_the_survivor() {
    let Some(bytes) = fixture(Wire::OpenAiChat, "stream-parallel-tool-calls-usage.sse") else {
        return;
    };
    let hidden = hide(Wire::OpenAiChat, &bytes, "get_country");
    assert_eq!(
        hidden.dropped, 2,
        "the two chunks that only carried get_country"
    );
    assert_eq!(
        hidden.rewritten, 2,
        "get_product_name's two chunks now say index 0"
    );
    let seen = summarize_stream(&parse_ok(Wire::OpenAiChat, &hidden.output));
    assert_eq!(seen.calls.len(), 1);
    assert_eq!(seen.calls[0].index, 0);
    assert_eq!(seen.calls[0].name, "get_product_name");
    assert_eq!(hidden.calls[0].id, "call_3rqTYrA6H21AYUaRGP4F66oq");

    let hidden = hide(Wire::OpenAiChat, &bytes, "get_product_name");
    assert_eq!((hidden.dropped, hidden.rewritten), (2, 0));
}

#[test]
fn chat_chunk_with_role_survives_without_its_hidden_call() {
    let Some(bytes) = fixture(
        Wire::OpenAiChat,
        "stream-tool-call-arguments-many-fragments.sse",
    ) else {
        return;
    };
    let hidden = hide(Wire::OpenAiChat, &bytes, "final_result");
    assert_eq!(
        hidden.rewritten, 1,
        "the first chunk keeps role and content"
    );
    let text = String::from_utf8(hidden.output).unwrap();
    assert!(text.contains(r#""delta":{"role":"assistant","content":null,"refusal":null}"#));
    assert!(!text.contains("tool_calls\":["));
    assert!(hidden.calls[0].arguments.contains("Mexico City"));
}

/// A Responses stream whose hidden call comes first, so the later message moves down.
const RESPONSES_CALL_FIRST: &str = concat!(
    "event: response.created\n",
    r#"data: {"type":"response.created","sequence_number":0,"response":{"id":"r","status":"in_progress","output":[]}}"#,
    "\n\n",
    "event: response.output_item.added\n",
    r#"data: {"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"type":"function_call","id":"fc_1","call_id":"call_1","name":"compress","arguments":""}}"#,
    "\n\n",
    "event: response.function_call_arguments.delta\n",
    r#"data: {"type":"response.function_call_arguments.delta","sequence_number":2,"output_index":0,"item_id":"fc_1","delta":"{\"from\":\"m00001\","}"#,
    "\n\n",
    "event: response.function_call_arguments.delta\n",
    r#"data: {"type":"response.function_call_arguments.delta","sequence_number":3,"output_index":0,"item_id":"fc_1","delta":"\"to\":\"m00009\"}"}"#,
    "\n\n",
    "event: response.output_item.done\n",
    r#"data: {"type":"response.output_item.done","sequence_number":4,"output_index":0,"item":{"type":"function_call","id":"fc_1","call_id":"call_1","name":"compress","arguments":"{\"from\":\"m00001\",\"to\":\"m00009\"}"}}"#,
    "\n\n",
    "event: response.output_item.added\n",
    r#"data: {"type":"response.output_item.added","sequence_number":5,"output_index":1,"item":{"type":"message","id":"msg_1","role":"assistant","content":[]}}"#,
    "\n\n",
    "event: response.output_text.delta\n",
    r#"data: {"type":"response.output_text.delta","sequence_number":6,"output_index":1,"item_id":"msg_1","content_index":0,"delta":"Hi"}"#,
    "\n\n",
    "event: response.output_item.done\n",
    r#"data: {"type":"response.output_item.done","sequence_number":7,"output_index":1,"item":{"type":"message","id":"msg_1","role":"assistant","content":[{"type":"output_text","text":"Hi"}]}}"#,
    "\n\n",
    "event: response.completed\n",
    r#"data: {"type":"response.completed","sequence_number":8,"response":{"id":"r","status":"completed","output":[{"type":"function_call","id":"fc_1","call_id":"call_1","name":"compress","arguments":"{\"from\":\"m00001\",\"to\":\"m00009\"}"},{"type":"message","id":"msg_1","role":"assistant","content":[{"type":"output_text","text":"Hi"}]}],"usage":{"input_tokens":10,"output_tokens":5}}}"#,
    "\n\n",
);

#[test]
fn responses_later_items_and_sequence_numbers_shift() {
    let bytes = RESPONSES_CALL_FIRST.as_bytes();
    let hidden = hide(Wire::OpenAiResponses, bytes, "compress");
    assert_eq!(hidden.dropped, 4);
    assert_eq!(hidden.rewritten, 4);
    assert_eq!(hidden.calls.len(), 1);
    assert_eq!(
        hidden.calls[0].arguments,
        r#"{"from":"m00001","to":"m00009"}"#
    );
    assert_eq!(hidden.calls[0].id, "call_1");
    let text = String::from_utf8(hidden.output.clone()).unwrap();
    assert!(text.contains(r#""sequence_number":2,"output_index":0,"item_id":"msg_1""#));
    assert!(!text.contains("compress"));
    assert_consistent(Wire::OpenAiResponses, &hidden.output, "compress");
    assert_eq!(check_hiding(Wire::OpenAiResponses, bytes, "synthetic"), 1);
}

/// A Responses stream of a model that reasons: a reasoning item that produced a proxy call,
/// the call, then a reasoning item that produced the answer's text.
const RESPONSES_REASONED_CALL: &str = concat!(
    "event: response.created\n",
    r#"data: {"type":"response.created","sequence_number":0,"response":{"id":"r","status":"in_progress","output":[]}}"#,
    "\n\n",
    "event: response.output_item.added\n",
    r#"data: {"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"type":"reasoning","id":"rs_1","summary":[]}}"#,
    "\n\n",
    "event: response.reasoning_summary_text.delta\n",
    r#"data: {"type":"response.reasoning_summary_text.delta","sequence_number":2,"output_index":0,"item_id":"rs_1","summary_index":0,"delta":"Fold first."}"#,
    "\n\n",
    "event: response.output_item.done\n",
    r#"data: {"type":"response.output_item.done","sequence_number":3,"output_index":0,"item":{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"Fold first."}],"encrypted_content":"ZW5jMQ"}}"#,
    "\n\n",
    "event: response.output_item.added\n",
    r#"data: {"type":"response.output_item.added","sequence_number":4,"output_index":1,"item":{"type":"function_call","id":"fc_1","call_id":"call_1","name":"compress","arguments":""}}"#,
    "\n\n",
    "event: response.output_item.done\n",
    r#"data: {"type":"response.output_item.done","sequence_number":5,"output_index":1,"item":{"type":"function_call","id":"fc_1","call_id":"call_1","name":"compress","arguments":"{}"}}"#,
    "\n\n",
    "event: response.output_item.added\n",
    r#"data: {"type":"response.output_item.added","sequence_number":6,"output_index":2,"item":{"type":"reasoning","id":"rs_2","summary":[]}}"#,
    "\n\n",
    "event: response.output_item.done\n",
    r#"data: {"type":"response.output_item.done","sequence_number":7,"output_index":2,"item":{"type":"reasoning","id":"rs_2","summary":[],"encrypted_content":"ZW5jMg"}}"#,
    "\n\n",
    "event: response.output_item.added\n",
    r#"data: {"type":"response.output_item.added","sequence_number":8,"output_index":3,"item":{"type":"message","id":"msg_1","role":"assistant","content":[]}}"#,
    "\n\n",
    "event: response.output_text.delta\n",
    r#"data: {"type":"response.output_text.delta","sequence_number":9,"output_index":3,"item_id":"msg_1","content_index":0,"delta":"Hi"}"#,
    "\n\n",
    "event: response.output_item.done\n",
    r#"data: {"type":"response.output_item.done","sequence_number":10,"output_index":3,"item":{"type":"message","id":"msg_1","role":"assistant","content":[{"type":"output_text","text":"Hi"}]}}"#,
    "\n\n",
    "event: response.completed\n",
    r#"data: {"type":"response.completed","sequence_number":11,"response":{"id":"r","status":"completed","output":[{"type":"reasoning","id":"rs_1"},{"type":"function_call","id":"fc_1","call_id":"call_1","name":"compress","arguments":"{}"},{"type":"reasoning","id":"rs_2"},{"type":"message","id":"msg_1","role":"assistant","content":[{"type":"output_text","text":"Hi"}]}]}}"#,
    "\n\n",
);

#[test]
fn responses_reasoning_that_produced_a_hidden_call_is_hidden_with_it() {
    let bytes = RESPONSES_REASONED_CALL.as_bytes();
    let hidden = hide(Wire::OpenAiResponses, bytes, "compress");
    // The call's two events and its reasoning item's three; the other reasoning item, held
    // until the message started, went out after all.
    assert_eq!(hidden.dropped, 5);
    assert_eq!(hidden.calls.len(), 1);
    let text = String::from_utf8(hidden.output.clone()).unwrap();
    assert!(
        !text.contains("rs_1") && !text.contains("Fold first."),
        "{text}"
    );
    assert!(
        text.contains(
            r#""sequence_number":1,"output_index":0,"item":{"type":"reasoning","id":"rs_2""#
        ),
        "{text}"
    );
    assert!(
        text.contains(r#""sequence_number":3,"output_index":1,"item":{"type":"message""#),
        "{text}"
    );
    assert_consistent(Wire::OpenAiResponses, &hidden.output, "compress");
    // Hiding another name holds nothing back for good: the stream comes out byte for byte.
    let other = hide(Wire::OpenAiResponses, bytes, "bash");
    assert_eq!(other.output, bytes);
    assert_eq!(other.dropped, 0);
}

/// An Anthropic stream with a proxy call between two text blocks.
const ANTHROPIC_CALL_BETWEEN: &str = concat!(
    "event: message_start\n",
    r#"data: {"type":"message_start","message":{"id":"m","usage":{"input_tokens":3,"output_tokens":1}}}"#,
    "\n\n",
    "event: content_block_start\n",
    r#"data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
    "\n\n",
    "event: content_block_delta\n",
    r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"A"}}"#,
    "\n\n",
    "event: content_block_stop\n",
    r#"data: {"type":"content_block_stop","index":0}"#,
    "\n\n",
    "event: content_block_start\n",
    r#"data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_x","name":"compress","input":{}}}"#,
    "\n\n",
    "event: content_block_delta\n",
    r#"data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"a\":"}}"#,
    "\n\n",
    "event: content_block_delta\n",
    r#"data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"1}"}}"#,
    "\n\n",
    "event: content_block_stop\n",
    r#"data: {"type":"content_block_stop","index":1}"#,
    "\n\n",
    "event: content_block_start\n",
    r#"data: {"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_y","name":"bash","input":{}}}"#,
    "\n\n",
    "event: content_block_delta\n",
    r#"data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{}"}}"#,
    "\n\n",
    "event: content_block_stop\n",
    r#"data: {"type":"content_block_stop","index":2}"#,
    "\n\n",
    "event: message_delta\n",
    r#"data: {"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":9}}"#,
    "\n\n",
    "event: message_stop\n",
    r#"data: {"type":"message_stop"}"#,
    "\n\n",
);

#[test]
fn anthropic_hidden_call_between_blocks() {
    let bytes = ANTHROPIC_CALL_BETWEEN.as_bytes();
    let hidden = hide(Wire::Anthropic, bytes, "compress");
    assert_eq!((hidden.dropped, hidden.rewritten), (4, 3));
    assert_eq!(hidden.calls[0].arguments, r#"{"a":1}"#);
    let text = String::from_utf8(hidden.output.clone()).unwrap();
    assert!(text.contains(r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_y","name":"bash","input":{}}}"#));
    assert_eq!(check_hiding(Wire::Anthropic, bytes, "synthetic"), 2);
}

#[test]
fn gemini_function_call_part_is_removed_in_both_framings() {
    for name in [
        "stream-sse-function-call-thought-signature.sse",
        "stream-json-array-function-call.json",
    ] {
        let Some(bytes) = fixture(Wire::Gemini, name) else {
            return;
        };
        let tool = if name.ends_with(".json") {
            "multiply"
        } else {
            "get_country"
        };
        let hidden = hide(Wire::Gemini, &bytes, tool);
        assert_eq!((hidden.dropped, hidden.rewritten), (0, 1), "{name}");
        assert_eq!(hidden.calls.len(), 1);
        let seen = summarize_stream(&parse_ok(Wire::Gemini, &hidden.output));
        assert!(seen.calls.is_empty());
        assert_eq!(seen.stops, ["STOP"]);
        // The second element (the finish) is byte-identical.
        let tail_len = bytes.len()
            - bytes
                .windows(12)
                .position(|w| w == b"finishReason")
                .unwrap();
        assert_eq!(
            &hidden.output[hidden.output.len() - tail_len..],
            &bytes[bytes.len() - tail_len..]
        );
    }
}
