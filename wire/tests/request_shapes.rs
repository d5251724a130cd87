#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Hand-made bodies for every shape issue 3 names, per wire: how each is cut into units, that
//! it round-trips byte-identical, and how edits are rebuilt.

use bytes::Bytes;
use foldwire_core::{
    Conversation, FieldOverride, Message, MessageKind as K, Origin, Pin, Role, ToolLink,
    UnitSlot as S, Wire,
};
use foldwire_wire::request::{decode, encode};
use serde_json::{Value, json};

fn dec(wire: Wire, body: &str) -> Conversation {
    let conv = decode(wire, Bytes::from(body.to_owned())).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(encode(&conv).unwrap(), body.as_bytes(), "round trip");
    conv
}

fn enc(conv: &Conversation) -> Value {
    serde_json::from_slice(&encode(conv).unwrap()).unwrap()
}

fn kinds(conv: &Conversation) -> Vec<(usize, S, K)> {
    conv.messages
        .iter()
        .map(|m| (m.entry, m.slot, m.kind))
        .collect()
}

fn synth_text(entry: usize, role: Role, text: &str) -> Message {
    Message::synthesized(entry, role, text.to_owned(), Origin::Injected, Bytes::new())
}

fn synth_result(entry: usize, call_id: &str, name: Option<&str>, text: &str) -> Message {
    let mut m = Message::synthesized(
        entry,
        Role::Tool,
        text.to_owned(),
        Origin::Stub,
        Bytes::new(),
    );
    m.kind = K::ToolResult;
    m.tool = Some(ToolLink {
        call_id: call_id.to_owned(),
        name: name.map(str::to_owned),
    });
    m
}

const ANTHROPIC: &str = r#"{"model":"claude","system":[{"type":"text","text":"sys","cache_control":{"type":"ephemeral"}}],"messages":[
 {"role":"user","content":"plain string"},
 {"role":"user","content":[{"type":"text","text":"look","cache_control":{"type":"ephemeral","ttl":"1h"}},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}},{"type":"image","source":{"type":"url","url":"https://x.test/a.png"}},{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"JVBERi0="},"title":"spec"}]},
 {"role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":"c2ln"},{"type":"redacted_thinking","data":"ZW5j"},{"type":"tool_use","id":"tu_1","name":"bash","input":{"cmd":"ls"}},{"type":"server_tool_use","id":"srv_1","name":"web_search","input":{"query":"q"}},{"type":"web_search_tool_result","tool_use_id":"srv_1","content":[]},{"type":"future_block","x":1}]},
 {"role":"user","content":[{"type":"tool_result","tool_use_id":"tu_1","content":[{"type":"text","text":"out"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"}}],"cache_control":{"type":"ephemeral"}},{"type":"tool_result","tool_use_id":"tu_2","content":"plain result","is_error":true}]}
],"max_tokens":100,"unknown_field":{"kept":true}}"#;

#[test]
fn anthropic_shapes_are_cut_into_blocks() {
    let c = dec(Wire::Anthropic, ANTHROPIC);
    assert_eq!(c.entries.len(), 4);
    assert_eq!(
        kinds(&c),
        vec![
            (0, S::StringContent, K::Text),
            (1, S::Content(0), K::Text),
            (1, S::Content(1), K::Media),
            (1, S::Content(2), K::Media),
            (1, S::Content(3), K::Media),
            (2, S::Content(0), K::Reasoning),
            (2, S::Content(1), K::Reasoning),
            (2, S::Content(2), K::ToolCall),
            (2, S::Content(3), K::Other),
            (2, S::Content(4), K::Other),
            (2, S::Content(5), K::Other),
            (3, S::Content(0), K::ToolResult),
            (3, S::Content(1), K::ToolResult),
        ]
    );
    let m = &c.messages;
    assert_eq!(m[0].text, "plain string");
    assert_eq!(m[5].text, "hmm");
    assert_eq!(m[7].text, r#"{"cmd":"ls"}"#);
    assert_eq!(
        m[7].tool,
        Some(ToolLink {
            call_id: "tu_1".into(),
            name: Some("bash".into())
        })
    );
    assert_eq!(m[11].text, "out");
    assert_eq!(m[11].tool.as_ref().unwrap().call_id, "tu_1");
    assert_eq!(m[12].text, "plain result");
    assert!(
        m.iter()
            .all(|u| u.origin == Origin::Client && !u.modified && u.media.is_empty())
    );
    assert_eq!(c.model.as_deref(), Some("claude"));
}

#[test]
fn anthropic_edits_rebuild_only_the_touched_message() {
    let c = dec(Wire::Anthropic, ANTHROPIC);
    // Drop the redacted thinking and the unknown block; replace the image url with a text.
    let mut e = c.clone();
    e.messages
        .retain(|u| !(u.entry == 2 && matches!(u.slot, S::Content(1) | S::Content(5))));
    let img = e
        .messages
        .iter()
        .position(|u| u.entry == 1 && u.slot == S::Content(2))
        .unwrap();
    e.messages[img] = synth_text(1, Role::User, "[image folded]");
    let v = enc(&e);
    let msgs = v["messages"].as_array().unwrap();
    assert_eq!(msgs[0]["content"], "plain string");
    assert_eq!(msgs[1]["content"][0]["cache_control"]["ttl"], "1h");
    assert_eq!(
        msgs[1]["content"][2],
        json!({"type":"text","text":"[image folded]"})
    );
    assert_eq!(msgs[1]["content"].as_array().unwrap().len(), 4);
    let types: Vec<&str> = msgs[2]["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        [
            "thinking",
            "tool_use",
            "server_tool_use",
            "web_search_tool_result"
        ]
    );
    assert_eq!(msgs[2]["content"][0]["signature"], "c2ln");
    assert_eq!(v["unknown_field"], json!({"kept": true}));
    assert_eq!(v["system"][0]["cache_control"]["type"], "ephemeral");
    // Untouched messages are verbatim.
    let out = String::from_utf8(encode(&e).unwrap().to_vec()).unwrap();
    let raw3 = std::str::from_utf8(c.entries[3].raw.as_ref().unwrap()).unwrap();
    assert!(out.contains(raw3));
}

/// A unit a stage rewrites keeps the bytes the client sent, whatever is written after: a
/// fold archives those, so it restores as the client sent it. Units foldwire made keep none.
#[test]
fn a_rewritten_unit_keeps_the_bytes_the_client_sent() {
    let c = dec(Wire::Anthropic, ANTHROPIC);
    let mut unit = c.messages[0].clone();
    let sent = unit.raw.clone();
    assert_eq!(unit.client_raw, None);
    assert_eq!(unit.client_bytes(), &sent);
    unit.replace_raw(Bytes::from_static(b"\"shorter\""));
    unit.replace_raw(Bytes::from_static(b"\"shorter still\""));
    assert_eq!(unit.raw, Bytes::from_static(b"\"shorter still\""));
    assert_eq!(unit.client_bytes(), &sent);
    let mut made = synth_text(0, Role::User, "note");
    made.replace_raw(Bytes::from_static(b"\"other\""));
    assert_eq!(made.client_raw, None);
    assert_eq!(made.client_bytes(), &Bytes::from_static(b"\"other\""));
}

#[test]
fn anthropic_string_content_and_empty_entries() {
    let c = dec(Wire::Anthropic, ANTHROPIC);
    // A modified string unit alone stays a string.
    let mut e = c.clone();
    e.messages[0].replace_raw(Bytes::from_static(b"\"shorter\""));
    assert_eq!(enc(&e)["messages"][0]["content"], "shorter");
    // With a synthesized sibling it becomes blocks.
    e.messages.insert(1, synth_text(0, Role::User, "note"));
    assert_eq!(
        enc(&e)["messages"][0]["content"],
        json!([{"type":"text","text":"shorter"},{"type":"text","text":"note"}])
    );
    // All units of an entry removed: the message is dropped, never sent empty.
    let mut d = c.clone();
    d.messages.retain(|u| u.entry != 1);
    let v = enc(&d);
    assert_eq!(v["messages"].as_array().unwrap().len(), 3);
    // A new entry, and a synthesized tool result.
    let mut n = c.clone();
    let at = n.push_entry(Role::User);
    n.messages
        .push(synth_result(at, "tu_9", Some("bash"), "stub: no result"));
    let v = enc(&n);
    assert_eq!(
        v["messages"][4],
        json!({"role":"user","content":[{"type":"tool_result","tool_use_id":"tu_9","content":"stub: no result"}]})
    );
}

const CHAT: &str = r#"{"model":"gpt","messages":[
 {"role":"system","content":"be brief"},
 {"role":"developer","content":[{"type":"text","text":"dev rules"}]},
 {"role":"user","content":[{"type":"text","text":"see"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA","detail":"high"}},{"type":"image_url","image_url":{"url":"https://x.test/i.jpg"}},{"type":"input_audio","input_audio":{"data":"UklG","format":"wav"}},{"type":"file","file":{"file_id":"file-1"}}]},
 {"role":"assistant","content":null,"reasoning_content":"think","tool_calls":[{"id":"c1","type":"function","function":{"name":"ls","arguments":"{\"p\":1}"}},{"id":"c2","type":"function","function":{"name":"cat","arguments":"{}"}}],"name":"bot"},
 {"role":"tool","tool_call_id":"c1","content":"a.txt"},
 {"role":"tool","tool_call_id":"c2","content":[{"type":"text","text":"hello"}]},
 {"role":"assistant","content":"done"}
],"temperature":0.2}"#;

#[test]
fn chat_shapes_are_cut_into_parts_calls_and_reasoning() {
    let c = dec(Wire::OpenAiChat, CHAT);
    assert_eq!(
        kinds(&c),
        vec![
            (0, S::StringContent, K::Text),
            (1, S::Content(0), K::Text),
            (2, S::Content(0), K::Text),
            (2, S::Content(1), K::Media),
            (2, S::Content(2), K::Media),
            (2, S::Content(3), K::Media),
            (2, S::Content(4), K::Media),
            (3, S::ReasoningField, K::Reasoning),
            (3, S::ToolCalls(0), K::ToolCall),
            (3, S::ToolCalls(1), K::ToolCall),
            (4, S::Whole, K::ToolResult),
            (5, S::Whole, K::ToolResult),
            (6, S::StringContent, K::Text),
        ]
    );
    assert_eq!(c.messages[0].role, Role::System);
    assert_eq!(c.messages[1].role, Role::System);
    assert_eq!(c.messages[7].text, "think");
    assert_eq!(c.messages[8].text, r#"{"p":1}"#);
    assert_eq!(
        c.messages[8].tool,
        Some(ToolLink {
            call_id: "c1".into(),
            name: Some("ls".into())
        })
    );
    assert_eq!(c.messages[10].tool.as_ref().unwrap().call_id, "c1");
    assert_eq!(c.messages[11].text, "hello");
    assert_eq!(c.messages[11].role, Role::Tool);
}

#[test]
fn chat_edits_keep_fields_and_render_tool_messages() {
    let c = dec(Wire::OpenAiChat, CHAT);
    // Remove the second call and its result; drop the reasoning.
    let mut e = c.clone();
    e.messages.retain(|u| {
        !(u.entry == 3 && matches!(u.slot, S::ToolCalls(1) | S::ReasoningField)) && u.entry != 5
    });
    let v = enc(&e);
    let m = &v["messages"][3];
    assert_eq!(m["name"], "bot");
    assert_eq!(m["content"], Value::Null);
    assert!(m.get("reasoning_content").is_none());
    assert_eq!(m["tool_calls"].as_array().unwrap().len(), 1);
    assert_eq!(v["messages"].as_array().unwrap().len(), 6);
    // Replace the tool result for c1 with a stub inside a new entry.
    let mut s = c.clone();
    s.messages.retain(|u| u.entry != 4);
    let at = s.push_entry(Role::Tool);
    let pos = s.messages.iter().position(|u| u.entry == 5).unwrap();
    s.messages
        .insert(pos, synth_result(at, "c1", Some("ls"), "stub"));
    let v = enc(&s);
    assert_eq!(
        v["messages"][4],
        json!({"role":"tool","tool_call_id":"c1","content":"stub"})
    );
    // A synthesized text beside an image becomes a text part; a lone one a string.
    let mut t = c.clone();
    let img = t
        .messages
        .iter()
        .position(|u| u.entry == 2 && u.slot == S::Content(1))
        .unwrap();
    t.messages[img] = synth_text(2, Role::User, "[image m00003 archived]");
    let v = enc(&t);
    assert_eq!(
        v["messages"][2]["content"][1],
        json!({"type":"text","text":"[image m00003 archived]"})
    );
    let mut n = c.clone();
    let at = n.push_entry(Role::User);
    n.messages.push(synth_text(at, Role::User, "summary"));
    assert_eq!(
        enc(&n)["messages"][7],
        json!({"role":"user","content":"summary"})
    );
}

const RESPONSES: &str = r#"{"model":"o4","instructions":"be good","input":[
 {"role":"user","content":"hi"},
 {"type":"message","role":"user","content":[{"type":"input_text","text":"see"},{"type":"input_image","image_url":"data:image/png;base64,AAAA"},{"type":"input_file","filename":"a.pdf","file_data":"data:application/pdf;base64,JVBE"}]},
 {"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"plan"}],"encrypted_content":"gAAA"},
 {"type":"function_call","call_id":"call_1","name":"ls","arguments":"{}"},
 {"type":"function_call_output","call_id":"call_1","output":"a.txt"},
 {"type":"compaction","id":"cmp_1","encrypted_content":"xyz"},
 {"type":"message","role":"assistant","id":"msg_1","content":[{"type":"output_text","text":"done","annotations":[]}]},
 {"type":"web_search_call","id":"ws_1","status":"completed"}
],"store":false}"#;

#[test]
fn responses_shapes_are_items_and_message_parts() {
    let c = dec(Wire::OpenAiResponses, RESPONSES);
    assert_eq!(
        kinds(&c),
        vec![
            (0, S::StringContent, K::Text),
            (1, S::Content(0), K::Text),
            (1, S::Content(1), K::Media),
            (1, S::Content(2), K::Media),
            (2, S::Whole, K::Reasoning),
            (3, S::Whole, K::ToolCall),
            (4, S::Whole, K::ToolResult),
            (5, S::Whole, K::Opaque),
            (6, S::Content(0), K::Text),
            (7, S::Whole, K::Other),
        ]
    );
    assert_eq!(c.messages[4].text, "plan");
    assert_eq!(
        c.messages[5].tool,
        Some(ToolLink {
            call_id: "call_1".into(),
            name: Some("ls".into())
        })
    );
    assert_eq!(c.messages[6].role, Role::Tool);
    assert!(matches!(c.messages[7].pin, Some(Pin::Protected(_))));
    assert_eq!(c.messages[8].role, Role::Assistant);
}

#[test]
fn responses_edits_render_items() {
    let c = dec(Wire::OpenAiResponses, RESPONSES);
    let mut e = c.clone();
    // Fold the reasoning, call and output into a summary message; stub a missing result.
    e.messages.retain(|u| !matches!(u.entry, 2..=4));
    let at = e.push_entry(Role::User);
    let pos = e.messages.iter().position(|u| u.entry == 5).unwrap();
    e.messages
        .insert(pos, synth_text(at, Role::User, "summary b1"));
    let at2 = e.push_entry(Role::Tool);
    e.messages.push(synth_result(at2, "call_9", None, "stub"));
    let v = enc(&e);
    let input = v["input"].as_array().unwrap();
    assert_eq!(
        input[2],
        json!({"type":"message","role":"user","content":[{"type":"input_text","text":"summary b1"}]})
    );
    assert_eq!(input[3]["type"], "compaction");
    assert_eq!(
        input[6],
        json!({"type":"function_call_output","call_id":"call_9","output":"stub"})
    );
    // An assistant message part renders as output_text and keeps its id.
    let mut a = c.clone();
    let k = a.messages.iter().position(|u| u.entry == 6).unwrap();
    a.messages
        .insert(k + 1, synth_text(6, Role::Assistant, "more"));
    let v = enc(&a);
    assert_eq!(v["input"][6]["id"], "msg_1");
    assert_eq!(
        v["input"][6]["content"][1],
        json!({"type":"output_text","text":"more"})
    );
    assert_eq!(v["instructions"], "be good");
    // A compaction item is never rewritten: modifying it is an encode error, dropping it or
    // moving it keeps its bytes.
    let mut m = c.clone();
    m.messages[7].replace_raw(Bytes::from_static(
        br#"{"type":"compaction","encrypted_content":"forged"}"#,
    ));
    let err = encode(&m).unwrap_err().to_string();
    assert!(
        err.contains("messages[7]") && err.contains("opaque"),
        "{err}"
    );
    let mut moved = c.clone();
    let item = moved.messages.remove(7);
    moved.messages.push(item);
    let out = encode(&moved).unwrap();
    let raw = c.entries[5].raw.clone().unwrap();
    assert!(out.windows(raw.len()).any(|w| w == &raw[..]));
}

#[test]
fn responses_string_input_round_trips_and_grows_into_items() {
    let body = r#"{"model":"o4","input":"just a question","stream":true}"#;
    let c = dec(Wire::OpenAiResponses, body);
    assert_eq!(kinds(&c), vec![(0, S::StringContent, K::Text)]);
    assert!(c.stream);
    let mut e = c.clone();
    let at = e.push_entry(Role::User);
    e.messages.push(synth_text(at, Role::User, "and another"));
    let v = enc(&e);
    assert_eq!(
        v["input"],
        json!([{"type":"message","role":"user","content":"just a question"},
               {"type":"message","role":"user","content":[{"type":"input_text","text":"and another"}]}])
    );
}

const GEMINI: &str = r#"{"systemInstruction":{"parts":[{"text":"sys"}]},"contents":[
 {"role":"user","parts":[{"text":"hi"},{"inlineData":{"mimeType":"image/jpeg","data":"/9j/"}},{"fileData":{"mimeType":"video/mp4","fileUri":"https://youtu.be/x"},"videoMetadata":{"startOffset":"1s"}}]},
 {"role":"model","parts":[{"text":"thinking...","thought":true,"thoughtSignature":"c2ln"},{"functionCall":{"name":"ls","args":{"p":1}},"thoughtSignature":"c2ln2"},{"functionCall":{"name":"ls","args":{"p":2}}},{"functionCall":{"id":"real-1","name":"cat","args":{}}}]},
 {"role":"user","parts":[{"functionResponse":{"name":"ls","response":{"out":"a"}}},{"functionResponse":{"name":"ls","response":{"out":"b"},"parts":[{"inlineData":{"mimeType":"image/png","data":"AAAA"}}]}},{"functionResponse":{"id":"real-1","name":"cat","response":{"out":"c"}}}]},
 {"role":"model","parts":[{"executableCode":{"language":"PYTHON","code":"1"}}]}
],"generationConfig":{"temperature":0}}"#;

#[test]
fn gemini_shapes_and_derived_call_ids() {
    let c = dec(Wire::Gemini, GEMINI);
    assert_eq!(
        kinds(&c),
        vec![
            (0, S::Content(0), K::Text),
            (0, S::Content(1), K::Media),
            (0, S::Content(2), K::Media),
            (1, S::Content(0), K::Reasoning),
            (1, S::Content(1), K::ToolCall),
            (1, S::Content(2), K::ToolCall),
            (1, S::Content(3), K::ToolCall),
            (2, S::Content(0), K::ToolResult),
            (2, S::Content(1), K::ToolResult),
            (2, S::Content(2), K::ToolResult),
            (3, S::Content(0), K::Other),
        ]
    );
    let id = |k: usize| c.messages[k].tool.as_ref().unwrap().call_id.clone();
    assert_eq!(id(4), "gemini:1:ls:0");
    assert_eq!(id(5), "gemini:1:ls:1");
    assert_eq!(id(6), "real-1");
    assert_eq!(id(7), id(4));
    assert_eq!(id(8), id(5));
    assert_eq!(id(9), "real-1");
    assert_eq!(c.messages[4].text, r#"{"p":1}"#);
    assert_eq!(c.messages[8].text, r#"{"out":"b"}"#);
    assert_eq!(c.messages[3].role, Role::Assistant);
    assert_eq!(c.model, None);
}

#[test]
fn gemini_edits_render_parts_and_responses() {
    let c = dec(Wire::Gemini, GEMINI);
    let mut e = c.clone();
    // Replace the first response by a stub for the same derived call; add a new model turn.
    let k = 7;
    let tool = c.messages[k].tool.clone().unwrap();
    e.messages[k] = synth_result(2, &tool.call_id, tool.name.as_deref(), "stub");
    let real = 9;
    e.messages[real] = synth_result(2, "real-1", Some("cat"), "stub2");
    let at = e.push_entry(Role::Assistant);
    e.messages.push(synth_text(at, Role::Assistant, "ok"));
    let v = enc(&e);
    let parts = &v["contents"][2]["parts"];
    assert_eq!(
        parts[0],
        json!({"functionResponse":{"name":"ls","response":{"content":"stub"}}})
    );
    assert_eq!(
        parts[2],
        json!({"functionResponse":{"id":"real-1","name":"cat","response":{"content":"stub2"}}})
    );
    assert_eq!(
        parts[1]["functionResponse"]["parts"][0]["inlineData"]["data"],
        "AAAA"
    );
    assert_eq!(
        v["contents"][4],
        json!({"role":"model","parts":[{"text":"ok"}]})
    );
    assert_eq!(v["systemInstruction"]["parts"][0]["text"], "sys");
    // Round trip of the edited body keeps the ids paired.
    let again = decode(Wire::Gemini, encode(&e).unwrap()).unwrap();
    assert_eq!(
        again.messages[7].tool.as_ref().unwrap().call_id,
        "gemini:1:ls:0"
    );
}

#[test]
fn overrides_replace_in_place_or_append() {
    let body = r#"{"model":"claude","messages":[{"role":"user","content":"hi"}],"tools":[],"max_tokens":5}"#;
    let mut c = dec(Wire::Anthropic, body);
    c.overrides.push(FieldOverride {
        key: "tools".into(),
        value: Bytes::from_static(br#"[{"name":"compress"}]"#),
    });
    c.overrides.push(FieldOverride {
        key: "metadata".into(),
        value: Bytes::from_static(br#"{"user_id":"u"}"#),
    });
    let out = encode(&c).unwrap();
    assert_eq!(
        std::str::from_utf8(&out).unwrap(),
        r#"{"model":"claude","messages":[{"role":"user","content":"hi"}],"tools":[{"name":"compress"}],"max_tokens":5,"metadata":{"user_id":"u"}}"#
    );
    // Overriding the messages array itself, or with bytes that are not JSON, is refused.
    let mut bad = dec(Wire::Anthropic, body);
    bad.overrides.push(FieldOverride {
        key: "messages".into(),
        value: Bytes::from_static(b"[]"),
    });
    assert!(
        encode(&bad)
            .unwrap_err()
            .to_string()
            .contains("overrides[0]")
    );
    let mut bad = dec(Wire::Anthropic, body);
    bad.overrides.push(FieldOverride {
        key: "x".into(),
        value: Bytes::from_static(b"{nope"),
    });
    assert!(
        encode(&bad)
            .unwrap_err()
            .to_string()
            .contains("one JSON value")
    );
}

#[test]
fn whitespace_and_pretty_bodies_round_trip() {
    let body = "{\n  \"model\": \"claude\",\n  \"messages\": [\n    { \"role\": \"user\", \"content\": [ { \"type\": \"text\", \"text\": \"a\\u00e9\\n\" } ] },\n    {\"role\":\"assistant\",\"content\":\"b\"}\n  ]\n}\n";
    let c = dec(Wire::Anthropic, body);
    assert_eq!(c.messages[0].text, "aé\n");
    let mut e = c.clone();
    e.messages.remove(1);
    let v = enc(&e);
    assert_eq!(v["messages"].as_array().unwrap().len(), 1);
    let out = String::from_utf8(encode(&e).unwrap().to_vec()).unwrap();
    assert!(out.starts_with("{\n  \"model\": \"claude\",\n  \"messages\": ["));
    assert!(out.ends_with("]\n}\n"));
}

#[test]
fn a_modified_unit_with_broken_bytes_is_an_encode_error() {
    let mut c = dec(Wire::Anthropic, ANTHROPIC);
    c.messages[1].replace_raw(Bytes::from_static(b"{\"type\":"));
    let err = encode(&c).unwrap_err().to_string();
    assert!(
        err.contains("anthropic") && err.contains("messages[1]"),
        "{err}"
    );
    let mut c = dec(Wire::Anthropic, ANTHROPIC);
    c.messages[0].entry = 99;
    assert!(
        encode(&c)
            .unwrap_err()
            .to_string()
            .contains("messages[0].entry")
    );
}

#[test]
fn reordered_units_are_rebuilt_not_copied() {
    let c = dec(Wire::Anthropic, ANTHROPIC);
    let mut e = c.clone();
    e.messages.swap(1, 2);
    let v = enc(&e);
    assert_eq!(v["messages"][1]["content"][0]["type"], "image");
    assert_eq!(v["messages"][1]["content"][1]["type"], "text");
}

#[test]
fn unit_texts_are_decoded_only_when_read() {
    let body = r#"{"model":"m","messages":[{"role":"user","content":"line one\nline \"two\""},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"bash","arguments":"{\"cmd\":\"ls\"}"}}]},{"role":"tool","tool_call_id":"c1","content":[{"type":"text","text":"a\tb"},{"type":"text","text":"c"}]}]}"#;
    let c = dec(Wire::OpenAiChat, body);
    assert!(c.messages.iter().all(|m| !m.text.is_decoded()));
    let copy = c.clone();
    assert_eq!(c.messages[0].text, "line one\nline \"two\"");
    assert!(c.messages[0].text.is_decoded());
    assert!(!c.messages[1].text.is_decoded());
    assert_eq!(c.messages[1].text, r#"{"cmd":"ls"}"#);
    assert_eq!(c.messages[2].text, "a\tb\nc");
    // A clone taken before any read decodes the same text on its own.
    assert_eq!(copy.messages, c.messages);
    // Reading texts changes nothing on the wire.
    assert_eq!(encode(&c).unwrap(), body.as_bytes());
}

// acp §26 #120: reasoning an open-weight model writes inline as `<think>…</think>` at the
// start of its answer is recognized on the decoded unit (one unit, so no range can part the
// reasoning from its answer), user text never is, and the body still round-trips
// byte-identical (`dec` checks it).
#[test]
fn inline_think_in_assistant_text_is_marked_as_reasoning() {
    let chat = r#"{"model":"qwen","messages":[
 {"role":"user","content":"<think>\nuser text is never reasoning\n</think>\nhi"},
 {"role":"assistant","content":"<think>\nThe user greets; reply briefly.\n</think>\n\nHello!"},
 {"role":"user","content":"again"},
 {"role":"assistant","content":[{"type":"text","text":"\u003cthink\u003e\nescaped tags\n\u003c/think\u003e\nHi again."}]},
 {"role":"assistant","content":"no reasoning here"}
]}"#;
    let c = dec(Wire::OpenAiChat, chat);
    let split: Vec<Option<(String, String)>> = c
        .messages
        .iter()
        .map(|m| {
            m.inline_reasoning()
                .map(|s| (s.reasoning.to_owned(), s.answer.to_owned()))
        })
        .collect();
    assert_eq!(
        split,
        vec![
            None,
            Some((
                "<think>\nThe user greets; reply briefly.\n</think>\n".to_owned(),
                "\nHello!".to_owned()
            )),
            None,
            Some((
                "<think>\nescaped tags\n</think>\n".to_owned(),
                "Hi again.".to_owned()
            )),
            None,
        ]
    );
    assert_eq!(c.messages[1].kind, K::Text, "still the answer's unit");
    assert_eq!(c.messages[1].answer_text(), "\nHello!");
    assert_eq!(c.messages[4].answer_text(), "no reasoning here");

    let responses = r#"{"model":"m","input":[
 {"type":"message","role":"assistant","content":[{"type":"output_text","text":"<thinking>\nweigh it\n</thinking>\nDone."}]}
]}"#;
    let r = dec(Wire::OpenAiResponses, responses);
    assert_eq!(r.messages[0].answer_text(), "Done.");
}

/// The reason a unit is pinned, if it is.
fn pinned(c: &Conversation, i: usize) -> Option<&str> {
    match &c.messages[i].pin {
        Some(Pin::Protected(why)) => Some(why.as_str()),
        _ => None,
    }
}

#[test]
fn anthropic_blocks_that_load_tools_are_pinned() {
    // Claude Code's ToolSearch answers with tool_reference blocks; the server tool search
    // answers in its own pair; the beta tool changes and MCP listings set the tools too. A
    // result that only mentions "tool_reference" in its text loads nothing.
    let body = r#"{"model":"m","messages":[
 {"role":"user","content":"go"},
 {"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"ToolSearch","input":{"query":"select:WebFetch"}}]},
 {"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"tool_reference","tool_name":"WebFetch"},{"type":"tool_reference","tool_name":"NotebookEdit"}]},{"type":"text","text":"Tool loaded."}]},
 {"role":"assistant","content":[{"type":"server_tool_use","id":"srvtoolu_1","name":"tool_search_tool_regex","input":{"query":"weather"}},{"type":"tool_search_tool_result","tool_use_id":"srvtoolu_1","content":{"type":"tool_search_tool_search_result","tool_references":[{"type":"tool_reference","tool_name":"get_weather"}]}},{"type":"server_tool_use","id":"srvtoolu_2","name":"web_search","input":{"query":"x"}},{"type":"tool_use","id":"t2","name":"Read","input":{}}]},
 {"role":"user","content":[{"type":"tool_result","tool_use_id":"t2","content":"the docs say tool_reference blocks load tools"},{"type":"tool_addition","tool":{"type":"tool_reference","name":"get_time"}},{"type":"tool_removal","tool":{"type":"tool_reference","name":"get_weather"}}]},
 {"role":"assistant","content":[{"type":"mcp_tool_listing","mcp_server_name":"files","tools":[]},{"type":"text","text":"ok"}]}
]}"#;
    let c = dec(Wire::Anthropic, body);
    let why: Vec<Option<&str>> = (0..c.messages.len()).map(|i| pinned(&c, i)).collect();
    let expect_pinned = [2, 5, 9, 10, 11];
    for (i, w) in why.iter().enumerate() {
        assert_eq!(w.is_some(), expect_pinned.contains(&i), "unit {i}: {w:?}");
    }
    assert_eq!(
        why[2],
        Some("loads the deferred tool(s) WebFetch, NotebookEdit: folded, they would be unloaded")
    );
    assert_eq!(
        why[5],
        Some("tool_search_tool_result block: sets the model's tools from here on")
    );
    // The pinned blocks keep their kinds: a result stays a result, paired with its call.
    assert_eq!(c.messages[2].kind, K::ToolResult);
    assert_eq!(c.messages[5].kind, K::Other);
    // A server tool's call and result are linked by its id (so they fold together, and the
    // search's call stays with its pinned result), as kind other: no client tool pairing.
    let link = |i: usize| c.messages[i].tool.clone().map(|t| (t.call_id, t.name));
    assert_eq!(
        link(4),
        Some(("srvtoolu_1".into(), Some("tool_search_tool_regex".into())))
    );
    assert_eq!(link(5), Some(("srvtoolu_1".into(), None)));
    assert_eq!(
        link(6),
        Some(("srvtoolu_2".into(), Some("web_search".into())))
    );
    assert_eq!(c.messages[4].kind, K::Other);
}

#[test]
fn an_anthropic_compaction_block_is_opaque_and_pinned() {
    let body = r#"{"model":"m","messages":[
 {"role":"assistant","content":[{"type":"compaction","content":"Earlier: we set up the repo.","signature":"sig","tool_changes":[]}]},
 {"role":"user","content":"go on"}
]}"#;
    let c = dec(Wire::Anthropic, body);
    assert_eq!(c.messages[0].kind, K::Opaque);
    assert_eq!(
        pinned(&c, 0),
        Some("Anthropic compaction block: sent back unchanged")
    );
    assert_eq!(pinned(&c, 1), None);
}

#[test]
fn responses_tool_search_items_are_pinned() {
    let body = r#"{"model":"gpt","input":[
 {"role":"user","content":"hi"},
 {"type":"tool_search_call","id":"tsc_1","call_id":"call_ts","execution":"client","status":"completed","arguments":{"paths":["crm"]}},
 {"type":"tool_search_output","id":"tso_1","call_id":"call_ts","execution":"client","status":"completed","tools":[{"type":"function","name":"crm_lookup","parameters":{},"defer_loading":true}]},
 {"type":"function_call","call_id":"call_1","name":"crm_lookup","arguments":"{}"},
 {"type":"function_call_output","call_id":"call_1","output":"tool_search_output is just text here"}
]}"#;
    let c = dec(Wire::OpenAiResponses, body);
    let why: Vec<Option<&str>> = (0..c.messages.len()).map(|i| pinned(&c, i)).collect();
    assert_eq!(
        why,
        vec![
            None,
            Some("tool_search_call item: sets the model's tools from here on"),
            Some("tool_search_output item: sets the model's tools from here on"),
            None,
            None
        ]
    );
}

#[test]
fn a_responses_item_that_declares_the_tools_is_pinned_in_its_role() {
    // Codex's "Responses lite" requests: no `tools`, an `additional_tools` item instead.
    let body = r#"{"model":"gpt","input":[
 {"type":"additional_tools","id":"at_1","role":"developer","tools":[{"type":"namespace","name":"functions","description":"","tools":[{"type":"custom","name":"exec","description":"Run code."}]}]},
 {"role":"user","content":"hi"}
]}"#;
    let c = dec(Wire::OpenAiResponses, body);
    assert_eq!(
        pinned(&c, 0),
        Some("additional_tools item: declares the model's tools")
    );
    assert_eq!(c.messages[0].role, foldwire_core::Role::System);
    assert!(foldwire_wire::request::declares_tools_in_items(&c));
    let plain = dec(
        Wire::OpenAiResponses,
        r#"{"model":"gpt","input":[{"role":"user","content":"additional_tools"}]}"#,
    );
    assert!(!foldwire_wire::request::declares_tools_in_items(&plain));
}

#[test]
fn responses_built_in_tool_calls_and_their_outputs_are_linked() {
    // The shell and apply_patch tools the client runs, and an MCP approval: each call and
    // its output are other items (no client tool pairing) linked by their id.
    let body = r#"{"model":"gpt","input":[
 {"role":"user","content":"fix it"},
 {"type":"shell_call","id":"sh_1","call_id":"call_sh","action":{"commands":["ls"]},"status":"completed"},
 {"type":"shell_call_output","call_id":"call_sh","output":[{"stdout":"a.rs","stderr":"","outcome":{"type":"exit","exit_code":0}}]},
 {"type":"apply_patch_call","id":"ap_1","call_id":"call_ap","operation":{"type":"update_file","path":"a.rs","diff":"-a\n+b"},"status":"completed"},
 {"type":"apply_patch_call_output","call_id":"call_ap","status":"completed"},
 {"type":"mcp_approval_request","id":"mcpr_1","name":"deploy","server_label":"ops","arguments":"{}"},
 {"type":"mcp_approval_response","approval_request_id":"mcpr_1","approve":true}
]}"#;
    let c = dec(Wire::OpenAiResponses, body);
    let links: Vec<Option<(String, Option<String>)>> = c
        .messages
        .iter()
        .map(|m| m.tool.clone().map(|t| (t.call_id, t.name)))
        .collect();
    let link = |id: &str, name: Option<&str>| Some((id.to_owned(), name.map(str::to_owned)));
    assert_eq!(
        links,
        vec![
            None,
            link("call_sh", Some("shell")),
            link("call_sh", None),
            link("call_ap", Some("apply_patch")),
            link("call_ap", None),
            link("mcpr_1", Some("deploy")),
            link("mcpr_1", None),
        ]
    );
    assert!(c.messages[1..].iter().all(|m| m.kind == K::Other));
    assert_eq!(c.messages[2].role, Role::Tool);
}
