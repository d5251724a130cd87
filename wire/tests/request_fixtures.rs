#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Every request fixture: decode → encode is byte-identical; edits leave untouched entries
//! and the frame verbatim; ids survive from one turn to the next; a decode that starts from
//! the request before gives exactly a fresh decode.

use std::path::PathBuf;

use bytes::Bytes;
use foldwire_core::{
    Conversation, Message, MessageKind, Origin, Role, ToolLink, UnitSlot, Wire, fixtures,
};
use foldwire_wire::request::{decode, encode};

mod resume_support;

fn wire_dirs() -> [(Wire, &'static str); 4] {
    [
        (Wire::Anthropic, "anthropic"),
        (Wire::OpenAiChat, "openai-chat"),
        (Wire::OpenAiResponses, "openai-responses"),
        (Wire::Gemini, "gemini"),
    ]
}

fn all_request_fixtures() -> Vec<(Wire, PathBuf)> {
    let mut out = Vec::new();
    for (wire, dir) in wire_dirs() {
        for f in fixtures::files(dir, "request-") {
            out.push((wire, f));
        }
    }
    out
}

fn load(wire: Wire, path: &PathBuf) -> (Bytes, Conversation) {
    let body = Bytes::from(std::fs::read(path).unwrap());
    let conv = decode(wire, body.clone()).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (body, conv)
}

#[test]
fn every_request_fixture_round_trips_byte_identical() {
    let files = all_request_fixtures();
    if fixtures::dir().is_some() {
        assert!(
            files.len() >= 20,
            "expected the shared request fixtures, found {}",
            files.len()
        );
    }
    for (wire, path) in files {
        let (body, conv) = load(wire, &path);
        assert!(!conv.messages.is_empty(), "{}: no units", path.display());
        let total: usize = conv.entries.iter().map(|e| e.unit_count).sum();
        assert_eq!(total, conv.messages.len(), "{}", path.display());
        for m in &conv.messages {
            // Every unit's raw bytes are a slice of the body inside the messages span.
            let off = m.raw.as_ptr() as usize - body.as_ptr() as usize;
            assert!(off >= conv.messages_span.start && off + m.raw.len() <= conv.messages_span.end);
            serde_json::from_slice::<serde_json::Value>(&m.raw).unwrap();
        }
        let out = encode(&conv).unwrap();
        assert_eq!(out, body, "{} did not round-trip", path.display());
        // The same through the rebuild path: force every entry to be rebuilt with its units
        // unchanged by marking them modified; the JSON value must be equal.
        let mut touched = conv.clone();
        for m in touched
            .messages
            .iter_mut()
            .filter(|m| m.kind != MessageKind::Opaque)
        {
            m.modified = true;
        }
        let rebuilt = encode(&touched).unwrap();
        let a: serde_json::Value = serde_json::from_slice(&rebuilt).unwrap();
        let b: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            a,
            b,
            "{}: rebuilding unchanged units changed the JSON",
            path.display()
        );
    }
}

fn entry_raw(conv: &Conversation, i: usize) -> Bytes {
    conv.entries[i].raw.clone().unwrap()
}

fn frame_parts(conv: &Conversation) -> (Bytes, Bytes) {
    (
        conv.source.slice(..conv.messages_span.start),
        conv.source.slice(conv.messages_span.end..),
    )
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Edits one unit in the middle; everything else must come back verbatim.
fn check_edit(wire: Wire, path: &PathBuf, edit: impl Fn(&mut Conversation) -> usize) {
    let (_, conv) = load(wire, path);
    let mut edited = conv.clone();
    let touched_entry = edit(&mut edited);
    let out = encode(&edited).unwrap();
    let value: serde_json::Value =
        serde_json::from_slice(&out).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(value.is_object());
    let (head, tail) = frame_parts(&conv);
    assert!(
        out.starts_with(&head),
        "{}: frame head changed",
        path.display()
    );
    assert!(
        out.ends_with(&tail),
        "{}: frame tail changed",
        path.display()
    );
    for i in 0..conv.entries.len() {
        if i != touched_entry {
            assert!(
                contains(&out, &entry_raw(&conv, i)),
                "{}: entry {i} not verbatim",
                path.display()
            );
        }
    }
}

/// The index of a unit whose entry has more than one unit, else any unit.
fn pick_unit(conv: &Conversation) -> usize {
    conv.messages
        .iter()
        .position(|m| conv.entries[m.entry].unit_count > 1 && m.kind != MessageKind::Opaque)
        .or_else(|| {
            conv.messages
                .iter()
                .position(|m| m.kind != MessageKind::Opaque)
        })
        .unwrap()
}

#[test]
fn removing_replacing_and_synthesizing_units_keep_the_rest_verbatim() {
    for (wire, path) in all_request_fixtures() {
        // Remove one unit.
        check_edit(wire, &path, |c| {
            let k = pick_unit(c);
            let e = c.messages[k].entry;
            c.messages.remove(k);
            e
        });
        // Replace one unit by a synthesized text.
        check_edit(wire, &path, |c| {
            let k = pick_unit(c);
            let m = &mut c.messages[k];
            m.kind = MessageKind::Text;
            m.text = "[folded: see b1]".into();
            m.raw = Bytes::new();
            m.modified = true;
            m.entry
        });
        // Insert a synthesized summary as a new entry before the last entry.
        check_edit(wire, &path, |c| {
            let new_entry = c.push_entry(Role::User);
            let at = c
                .messages
                .iter()
                .position(|m| m.entry + 1 == c.entries.len() - 1)
                .unwrap_or(0);
            c.messages.insert(
                at,
                Message::synthesized(
                    new_entry,
                    Role::User,
                    "Summary b1: earlier work".to_owned(),
                    Origin::Injected,
                    Bytes::new(),
                ),
            );
            new_entry
        });
    }
}

#[test]
fn a_removed_unit_is_gone_and_its_siblings_stay() {
    for (wire, path) in all_request_fixtures() {
        let (_, conv) = load(wire, &path);
        let Some(k) = conv
            .messages
            .iter()
            .position(|m| conv.entries[m.entry].unit_count > 1 && m.raw.len() > 40)
        else {
            continue;
        };
        let mut edited = conv.clone();
        let removed = edited.messages.remove(k);
        let out = encode(&edited).unwrap();
        serde_json::from_slice::<serde_json::Value>(&out).unwrap();
        if removed.slot != UnitSlot::ReasoningField {
            assert!(
                !contains(&out, &removed.raw),
                "{}: removed unit still present",
                path.display()
            );
        }
        for m in conv
            .messages
            .iter()
            .filter(|m| m.entry == removed.entry && m.id != removed.id)
        {
            assert!(
                contains(&out, &m.raw),
                "{}: sibling unit lost",
                path.display()
            );
        }
        // Decoding the output again gives one unit fewer.
        let again = decode(wire, out).unwrap();
        assert_eq!(
            again.messages.len(),
            conv.messages.len() - 1,
            "{}",
            path.display()
        );
    }
}

#[test]
fn synthesized_tool_results_render_for_each_wire() {
    for (wire, path) in all_request_fixtures() {
        let (_, conv) = load(wire, &path);
        let Some(call) = conv
            .messages
            .iter()
            .rev()
            .find(|m| m.kind == MessageKind::ToolCall)
        else {
            continue;
        };
        let tool = call.tool.clone().unwrap();
        let mut edited = conv.clone();
        // As pairing repair would: the real result is gone, a stub takes its place.
        edited.messages.retain(|m| {
            !(m.kind == MessageKind::ToolResult && m.tool.as_ref() == Some(&tool))
                && m.tool
                    .as_ref()
                    .is_none_or(|t| t.call_id != tool.call_id || m.kind == MessageKind::ToolCall)
        });
        let entry = edited.push_entry(
            if wire == Wire::OpenAiChat || wire == Wire::OpenAiResponses {
                Role::Tool
            } else {
                Role::User
            },
        );
        let mut stub = Message::synthesized(
            entry,
            Role::Tool,
            "no result was recorded".to_owned(),
            Origin::Stub,
            Bytes::new(),
        );
        stub.kind = MessageKind::ToolResult;
        stub.tool = Some(ToolLink {
            call_id: tool.call_id.clone(),
            name: tool.name.clone(),
        });
        edited.messages.push(stub);
        let out = encode(&edited).unwrap();
        let again = decode(wire, out).unwrap();
        let last = again.messages.last().unwrap();
        assert_eq!(last.kind, MessageKind::ToolResult, "{}", path.display());
        assert_eq!(
            last.tool.as_ref().unwrap().call_id,
            tool.call_id,
            "{}",
            path.display()
        );
        assert!(
            last.text.contains("no result was recorded"),
            "{}",
            path.display()
        );
    }
}

fn fixture(dir: &str, name: &str) -> Option<PathBuf> {
    fixtures::files(dir, name).into_iter().next()
}

/// Ids of the earlier turn's units that the later turn also holds in its prefix stay equal.
fn check_two_turns(wire: Wire, dir: &str, first: &str, second: &str, min_shared: usize) {
    let (Some(a), Some(b)) = (fixture(dir, first), fixture(dir, second)) else {
        return;
    };
    let (_, t1) = load(wire, &a);
    let (_, t2) = load(wire, &b);
    let mut shared = 0;
    for (x, y) in t1.messages.iter().zip(&t2.messages) {
        if x.raw == y.raw && x.role == y.role {
            assert_eq!(x.id, y.id, "{first} → {second}: same unit, different id");
            shared += 1;
        } else {
            break;
        }
    }
    assert!(
        shared >= min_shared,
        "{first} → {second}: only {shared} shared units"
    );
    // Ids are unique within a request.
    for conv in [&t1, &t2] {
        let mut ids: Vec<_> = conv.messages.iter().map(|m| m.id.clone()).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), conv.messages.len());
    }
}

#[test]
fn ids_are_stable_across_consecutive_turns() {
    check_two_turns(
        Wire::OpenAiChat,
        "openai-chat",
        "request-parallel-tool-calls-role-tool.json",
        "request-parallel-tool-calls-second-round.json",
        3,
    );
}

/// The next turn of a session: the client resends the same history bytes and appends one
/// message (what every agent does).
fn next_turn(conv: &Conversation, appended: &str) -> Bytes {
    let end = conv.messages_span.end - 1; // the closing bracket of the messages array
    let mut b = conv.source[..end].to_vec();
    b.push(b',');
    b.extend_from_slice(appended.as_bytes());
    b.extend_from_slice(&conv.source[end..]);
    Bytes::from(b)
}

#[test]
fn ids_survive_into_the_next_turn_on_every_wire() {
    let appended = [
        (
            Wire::Anthropic,
            "anthropic",
            r#"{"role":"user","content":"Continue."}"#,
        ),
        (
            Wire::OpenAiChat,
            "openai-chat",
            r#"{"role":"user","content":"Continue."}"#,
        ),
        (
            Wire::OpenAiResponses,
            "openai-responses",
            r#"{"role":"user","content":"Continue."}"#,
        ),
        (
            Wire::Gemini,
            "gemini",
            r#"{"role":"user","parts":[{"text":"Continue."}]}"#,
        ),
    ];
    for (wire, dir, msg) in appended {
        for f in fixtures::files(dir, "request-") {
            let (_, t1) = load(wire, &f);
            if t1.source[t1.messages_span.start] != b'[' {
                continue; // a string input has no array to append to
            }
            let t2 = decode(wire, next_turn(&t1, msg)).unwrap();
            assert_eq!(t2.messages.len(), t1.messages.len() + 1, "{}", f.display());
            for (a, b) in t1.messages.iter().zip(&t2.messages) {
                assert_eq!(a.id, b.id, "{}", f.display());
                assert_eq!(a.tool, b.tool, "{}", f.display());
            }
            // The appended unit is new.
            let last = t2.messages.last().unwrap();
            assert!(
                t1.messages.iter().all(|m| m.id != last.id),
                "{}",
                f.display()
            );
        }
    }
}

#[test]
fn duplicate_units_get_ordered_suffixes_and_ids_track_content() {
    let body = r#"{"messages":[{"role":"user","content":"Continue."},{"role":"assistant","content":"ok"},{"role":"user","content":"Continue."},{"role":"user","content":"Continue."}]}"#;
    let c = decode(Wire::Anthropic, Bytes::from(body)).unwrap();
    let ids: Vec<&str> = c.messages.iter().map(|m| m.id.0.as_str()).collect();
    assert_eq!(ids[0].len(), 16);
    assert!(ids[0].chars().all(|ch| ch.is_ascii_hexdigit()));
    assert_eq!(ids[2], format!("{}#2", ids[0]));
    assert_eq!(ids[3], format!("{}#3", ids[0]));
    assert_ne!(ids[1], ids[0]);
    // Same text from another role is another unit.
    let other = decode(
        Wire::Anthropic,
        Bytes::from(r#"{"messages":[{"role":"assistant","content":"Continue."}]}"#),
    )
    .unwrap();
    assert_ne!(other.messages[0].id.0, ids[0]);
    // A one-byte change in a unit changes its id, not its neighbours'.
    let changed = decode(
        Wire::Anthropic,
        Bytes::from(body.replacen("\"ok\"", "\"ok!\"", 1)),
    )
    .unwrap();
    assert_ne!(changed.messages[1].id, c.messages[1].id);
    assert_eq!(changed.messages[0].id, c.messages[0].id);
}

#[test]
fn every_request_fixture_decodes_the_same_after_each_shorter_history() {
    let mut resumed = 0;
    for (wire, path) in all_request_fixtures() {
        let (body, full) = load(wire, &path);
        for keep in 0..=full.entries.len() {
            let prior_body = resume_support::history_prefix(&full, keep);
            let prior = decode(wire, Bytes::from(prior_body)).unwrap();
            let reused = resume_support::check_resume(wire, &prior, &body);
            let resumable = full.source.get(full.messages_span.start) == Some(&b'[');
            assert_eq!(
                reused,
                if resumable { keep } else { 0 },
                "{}: history cut after {keep}",
                path.display()
            );
            resumed += usize::from(reused > 0);
        }
        // The next request changed the last message or broke the tail: still what a fresh
        // decode says (a conversation or the same error).
        for at in [
            body.len() / 2,
            body.len() * 3 / 4,
            body.len() - 2,
            body.len() - 1,
        ] {
            let mut other = body.to_vec();
            other[at] = b'x';
            resume_support::check_resume(wire, &full, &other);
            resume_support::check_resume(wire, &full, &body[..at]);
        }
    }
    if fixtures::dir().is_some() {
        assert!(resumed > 50, "only {resumed} decodes reused anything");
    } else {
        println!("shared fixtures not found; the resume check over fixtures did not run");
    }
}

/// Gemini pairs id-less calls and responses across contents, so a decode that resumes must
/// know which calls before it had an id of their own, including ids that look derived and
/// keys written with escapes.
#[test]
fn gemini_resumes_with_the_calls_left_unanswered() {
    let contents = [
        r#"{"role":"model","parts":[{"functionCall":{"name":"read","args":{}}},{"functionCall":{"id":"gemini:0:read:0","name":"read","args":{}}}]}"#,
        r#"{"role":"user","parts":[{"functionResponse":{"name":"read","response":{"id":"inside the output"}}}]}"#,
        r#"{"role":"model","parts":[{"functionCall":{"\u0069d":"gemini:2:grep:0","name":"grep","args":{}}},{"functionCall":{"name":"grep","args":{}}}]}"#,
        r#"{"role":"user","parts":[{"functionResponse":{"name":"read","response":{}}},{"functionResponse":{"name":"grep","response":{}}}]}"#,
        r#"{"role":"user","parts":[{"functionResponse":{"name":"grep","response":{}}}]}"#,
    ];
    let body = format!(r#"{{"contents":[{}]}}"#, contents.join(","));
    let full = decode(Wire::Gemini, Bytes::from(body.clone())).unwrap();
    for keep in 0..=contents.len() {
        let prior = resume_support::history_prefix(&full, keep);
        let prior = decode(Wire::Gemini, Bytes::from(prior)).unwrap();
        assert_eq!(
            resume_support::check_resume(Wire::Gemini, &prior, body.as_bytes()),
            keep
        );
    }
}
