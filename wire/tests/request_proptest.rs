#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Property tests: arbitrary conversations of each wire round-trip byte-identical, random
//! unit removals still encode to valid JSON that decodes again, no input panics, a mutated
//! body decodes only while it is still JSON, and a decode that starts from an earlier
//! request's decode gives exactly a fresh decode.

use bytes::Bytes;
use foldwire_core::{UnitSlot, Wire};
use foldwire_wire::request::{decode, encode};
use proptest::prelude::*;
use serde_json::{Value, json};

mod resume_support;

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z ]{0,12}",
        any::<String>(),
        Just("quote \" back \\ slash / tab \t nl \n é 😀".to_owned()),
    ]
}

fn id() -> impl Strategy<Value = String> {
    "[a-z0-9_]{1,8}"
}

fn small_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i32>().prop_map(|n| json!(n)),
        (-1e6f64..1e6).prop_map(|f| json!(f)),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{1,5}", inner, 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn anthropic_block() -> impl Strategy<Value = Value> {
    prop_oneof![
        text().prop_map(|t| json!({"type":"text","text":t})),
        text().prop_map(|t| json!({"type":"text","text":t,"cache_control":{"type":"ephemeral"}})),
        "[A-Za-z0-9+/]{0,16}".prop_map(|d| json!({"type":"image","source":{"type":"base64","media_type":"image/png","data":d}})),
        (id(), id(), small_json()).prop_map(|(i, n, input)| json!({"type":"tool_use","id":i,"name":n,"input":input})),
        (id(), text()).prop_map(|(i, t)| json!({"type":"tool_result","tool_use_id":i,"content":t})),
        (id(), text()).prop_map(|(i, t)| json!({"type":"tool_result","tool_use_id":i,"content":[{"type":"text","text":t}]})),
        (text(), id()).prop_map(|(t, s)| json!({"type":"thinking","thinking":t,"signature":s})),
        small_json().prop_map(|x| json!({"type":"mystery_block","x":x})),
    ]
}

fn anthropic_body() -> impl Strategy<Value = Value> {
    let content = prop_oneof![
        text().prop_map(Value::String),
        prop::collection::vec(anthropic_block(), 1..4).prop_map(Value::Array),
    ];
    let message = (prop::sample::select(vec!["user", "assistant"]), content)
        .prop_map(|(r, c)| json!({"role":r,"content":c}));
    (prop::collection::vec(message, 1..6), small_json())
        .prop_map(|(m, extra)| json!({"model":"claude","messages":m,"extra":extra,"max_tokens":10}))
}

fn chat_body() -> impl Strategy<Value = Value> {
    let part = prop_oneof![
        text().prop_map(|t| json!({"type":"text","text":t})),
        "[a-z]{0,10}".prop_map(
            |u| json!({"type":"image_url","image_url":{"url":format!("https://{u}.test/x.png")}})
        ),
        "[A-Za-z0-9]{0,10}"
            .prop_map(|d| json!({"type":"input_audio","input_audio":{"data":d,"format":"wav"}})),
    ];
    let content = prop_oneof![
        text().prop_map(Value::String),
        prop::collection::vec(part, 1..3).prop_map(Value::Array),
        Just(Value::Null),
    ];
    let call = (id(), id(), text()).prop_map(
        |(i, n, a)| json!({"id":i,"type":"function","function":{"name":n,"arguments":a}}),
    );
    let message = prop_oneof![
        (
            prop::sample::select(vec!["system", "developer", "user"]),
            content.clone()
        )
            .prop_map(|(r, c)| json!({"role":r,"content":c})),
        (
            content,
            prop::collection::vec(call, 0..3),
            prop::option::of(text())
        )
            .prop_map(|(c, calls, rc)| {
                let mut m = json!({"role":"assistant","content":c});
                if !calls.is_empty() {
                    m["tool_calls"] = Value::Array(calls);
                }
                if let Some(rc) = rc {
                    m["reasoning_content"] = Value::String(rc);
                }
                m
            }),
        (id(), text()).prop_map(|(i, t)| json!({"role":"tool","tool_call_id":i,"content":t})),
    ];
    prop::collection::vec(message, 1..6)
        .prop_map(|m| json!({"model":"gpt","messages":m,"temperature":0.5}))
}

fn responses_body() -> impl Strategy<Value = Value> {
    let part = prop_oneof![
        text().prop_map(|t| json!({"type":"input_text","text":t})),
        "[a-z]{0,10}"
            .prop_map(|u| json!({"type":"input_image","image_url":format!("https://{u}.test")})),
        "[A-Za-z0-9]{0,10}"
            .prop_map(|d| json!({"type":"input_file","filename":"a.pdf","file_data":d})),
    ];
    let item = prop_oneof![
        (prop::sample::select(vec!["user", "assistant", "developer"]), text())
            .prop_map(|(r, t)| json!({"role":r,"content":t})),
        prop::collection::vec(part, 1..3).prop_map(|p| json!({"type":"message","role":"user","content":p})),
        (id(), id(), text()).prop_map(|(c, n, a)| json!({"type":"function_call","call_id":c,"name":n,"arguments":a})),
        (id(), text()).prop_map(|(c, o)| json!({"type":"function_call_output","call_id":c,"output":o})),
        (text(), id()).prop_map(|(t, e)| json!({"type":"reasoning","summary":[{"type":"summary_text","text":t}],"encrypted_content":e})),
        id().prop_map(|e| json!({"type":"compaction","encrypted_content":e})),
    ];
    prop_oneof![
        prop::collection::vec(item, 1..6)
            .prop_map(|i| json!({"model":"o4","instructions":"x","input":i})),
        text().prop_map(|t| json!({"model":"o4","input":t})),
    ]
}

fn tool_name() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["read".to_owned(), "grep".to_owned()])
}

fn gemini_body() -> impl Strategy<Value = Value> {
    let part = prop_oneof![
        text().prop_map(|t| json!({"text":t})),
        (text(), id()).prop_map(|(t, s)| json!({"text":t,"thought":true,"thoughtSignature":s})),
        "[A-Za-z0-9]{0,10}".prop_map(|d| json!({"inlineData":{"mimeType":"image/png","data":d}})),
        // Few names, so id-less calls and responses pair up, also across contents.
        (tool_name(), small_json(), prop::option::of(id())).prop_map(|(n, a, i)| match i {
            Some(i) => json!({"functionCall":{"id":i,"name":n,"args":a}}),
            None => json!({"functionCall":{"name":n,"args":a}}),
        }),
        (tool_name(), small_json(), prop::option::of(id())).prop_map(|(n, r, i)| match i {
            Some(i) => json!({"functionResponse":{"id":i,"name":n,"response":{"r":r}}}),
            None => json!({"functionResponse":{"name":n,"response":{"r":r}}}),
        }),
    ];
    let content = (
        prop::sample::select(vec!["user", "model"]),
        prop::collection::vec(part, 1..4),
    )
        .prop_map(|(r, p)| json!({"role":r,"parts":p}));
    prop::collection::vec(content, 1..6)
        .prop_map(|c| json!({"contents":c,"generationConfig":{"temperature":0}}))
}

fn body_for(wire: Wire) -> BoxedStrategy<Value> {
    match wire {
        Wire::Anthropic => anthropic_body().boxed(),
        Wire::OpenAiChat => chat_body().boxed(),
        Wire::OpenAiResponses => responses_body().boxed(),
        Wire::Gemini => gemini_body().boxed(),
    }
}

fn wire_and_body() -> impl Strategy<Value = (Wire, Vec<u8>)> {
    (prop::sample::select(Wire::ALL.to_vec()), any::<bool>()).prop_flat_map(|(wire, pretty)| {
        body_for(wire).prop_map(move |v| {
            let bytes = if pretty {
                serde_json::to_vec_pretty(&v)
            } else {
                serde_json::to_vec(&v)
            };
            (wire, bytes.unwrap())
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_conversations_round_trip_byte_identical((wire, body) in wire_and_body()) {
        let conv = decode(wire, Bytes::from(body.clone())).unwrap();
        prop_assert_eq!(encode(&conv).unwrap(), Bytes::from(body));
    }

    #[test]
    fn removing_units_still_gives_valid_json((wire, body) in wire_and_body(), drop in prop::collection::vec(any::<bool>(), 0..24)) {
        let conv = decode(wire, Bytes::from(body.clone())).unwrap();
        let mut edited = conv.clone();
        let mut k = 0;
        edited.messages.retain(|_| { k += 1; !drop.get(k - 1).copied().unwrap_or(false) });
        let out = encode(&edited).unwrap();
        let original: Value = serde_json::from_slice(&body).unwrap();
        let value: Value = serde_json::from_slice(&out).unwrap();
        // The frame is kept: every top-level key but the messages array is unchanged.
        for (key, v) in original.as_object().unwrap() {
            if !["messages", "input", "contents"].contains(&key.as_str()) {
                prop_assert_eq!(&value[key], v);
            }
        }
        if !edited.messages.is_empty() {
            let again = decode(wire, out).unwrap();
            // A Chat message left with only its reasoning gets `"content":""` so it stays a
            // valid message: one more unit on the way back (untouched ones are copied as sent).
            let mut reasoning_only = 0;
            if wire == Wire::OpenAiChat {
                let mut entries: Vec<usize> = edited.messages.iter().map(|m| m.entry).collect();
                entries.dedup();
                reasoning_only = entries
                    .iter()
                    .filter(|e| {
                        let units: Vec<_> = edited.messages.iter().filter(|m| m.entry == **e).collect();
                        units.len() < edited.entries[**e].unit_count
                            && units.iter().all(|m| m.slot == UnitSlot::ReasoningField)
                    })
                    .count();
            }
            prop_assert_eq!(again.messages.len(), edited.messages.len() + reasoning_only);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(wire in prop::sample::select(Wire::ALL.to_vec()), body in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = decode(wire, Bytes::from(body.clone()));
        let _ = foldwire_wire::request::detect(None, &body);
    }

    #[test]
    fn mutated_bodies_never_panic((wire, body) in wire_and_body(), at in any::<prop::sample::Index>(), byte in any::<u8>(), cut in any::<bool>()) {
        let mut body = body;
        let i = at.index(body.len());
        if cut { body.truncate(i); } else { body[i] = byte; }
        if let Ok(conv) = decode(wire, Bytes::from(body.clone())) {
            // Whatever decodes is JSON: a byte that breaks it (a raw newline in a string, a
            // leading zero) is refused, never folded and passed on.
            let json = serde_json::from_slice::<serde::de::IgnoredAny>(&body);
            prop_assert!(json.is_ok(), "{:?}: {}", json, String::from_utf8_lossy(&body));
            prop_assert_eq!(encode(&conv).unwrap(), Bytes::from(body));
        }
    }

    #[test]
    fn decoding_after_an_earlier_request_equals_decoding_afresh(
        (wire, body) in wire_and_body(),
        keep in any::<prop::sample::Index>(),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
        change in 0u8..3,
    ) {
        let full = decode(wire, Bytes::from(body.clone())).unwrap();
        let keep = keep.index(full.entries.len() + 1);
        let prior = decode(wire, Bytes::from(resume_support::history_prefix(&full, keep))).unwrap();
        // The history grew: every message of the earlier request is reused (a string
        // `input` is not an array).
        let reused = resume_support::check_resume(wire, &prior, &body);
        let resumable = full.source.get(full.messages_span.start) == Some(&b'[');
        prop_assert_eq!(reused, if resumable { keep } else { 0 });
        // Anything else: a byte changed or cut anywhere, or the same body again.
        let mut other = body.clone();
        let i = at.index(other.len());
        match change {
            0 => other[i] = byte,
            1 => other.truncate(i),
            _ => {}
        }
        resume_support::check_resume(wire, &full, &other);
    }
}
