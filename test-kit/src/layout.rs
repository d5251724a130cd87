//! Helpers shared by the layout tests: conversations built by hand (the codecs are not
//! needed) and turns to run them in.

use foldwire_core::{
    Conversation, Entry, Message, MessageId, MessageKind, Origin, Role, SessionId, SessionState,
    ToolLink, Turn, UnitSlot, Wire,
};

/// One block of a wire message.
#[derive(Debug, Clone)]
pub enum B {
    /// A text block: label (its fingerprint) and total length in characters.
    Text(String, usize),
    /// A tool call with this id.
    Call(String),
    /// A tool result for this call id, with this many characters.
    Result(String, usize),
    /// A short text block with a client cache marker (ttl "1h" or "5m").
    Marked(String, &'static str),
}

/// A text block of `chars` characters whose fingerprint is `label`.
pub fn text(label: &str, chars: usize) -> B {
    B::Text(label.to_owned(), chars)
}

/// `label` padded with filler to `chars` characters.
pub fn padded(label: &str, chars: usize) -> String {
    let pad = chars.saturating_sub(label.len() + 1);
    format!("{label} {}", "w".repeat(pad))
}

fn unit(entry: usize, role: Role, block: &B, wire: Wire) -> Message {
    let (kind, id, raw, tool, txt) = match block {
        B::Text(label, chars) => {
            let t = padded(label, *chars);
            let raw = match wire {
                Wire::Gemini => serde_json::json!({"text": t}),
                _ => serde_json::json!({"type": "text", "text": t}),
            };
            (MessageKind::Text, label.clone(), raw, None, t)
        }
        B::Marked(label, ttl) => {
            let t = padded(label, 40);
            let cc = if *ttl == "1h" {
                serde_json::json!({"type": "ephemeral", "ttl": "1h"})
            } else {
                serde_json::json!({"type": "ephemeral"})
            };
            let raw = serde_json::json!({"type": "text", "text": t, "cache_control": cc});
            (MessageKind::Text, label.clone(), raw, None, t)
        }
        B::Call(id) => {
            let raw = serde_json::json!({"type": "tool_use", "id": id, "name": "read", "input": {"path": "a.rs"}});
            (
                MessageKind::ToolCall,
                format!("call-{id}"),
                raw,
                Some(ToolLink {
                    call_id: id.clone(),
                    name: Some("read".into()),
                }),
                String::new(),
            )
        }
        B::Result(id, chars) => {
            let t = padded(&format!("result-{id}"), *chars);
            let raw = serde_json::json!({"type": "tool_result", "tool_use_id": id, "content": t});
            (
                MessageKind::ToolResult,
                format!("result-{id}"),
                raw,
                Some(ToolLink {
                    call_id: id.clone(),
                    name: None,
                }),
                t,
            )
        }
    };
    Message {
        id: MessageId(id),
        r#ref: None,
        entry,
        slot: UnitSlot::Content(0),
        role,
        kind,
        text: txt.into(),
        tool,
        media: Vec::new(),
        origin: Origin::Client,
        pin: None,
        raw: raw.to_string().into(),
        modified: false,
        client_raw: None,
    }
}

/// A conversation of wire messages (role, blocks) on `wire`, with a small frame.
pub fn conversation(wire: Wire, messages: &[(Role, Vec<B>)]) -> Conversation {
    conversation_with_frame(
        wire,
        messages,
        r#"{"model":"m","max_tokens":10,"messages":[]}"#,
    )
}

/// Same, with a given body whose first `[]` is the messages array.
pub fn conversation_with_frame(
    wire: Wire,
    messages: &[(Role, Vec<B>)],
    body: &str,
) -> Conversation {
    let start = body.find("[]").unwrap();
    let mut units = Vec::new();
    let mut entries = Vec::new();
    for (e, (role, blocks)) in messages.iter().enumerate() {
        for (k, b) in blocks.iter().enumerate() {
            let mut u = unit(e, *role, b, wire);
            u.slot = UnitSlot::Content(k as u32);
            units.push(u);
        }
        entries.push(Entry {
            role: *role,
            raw: None,
            unit_count: blocks.len(),
        });
    }
    Conversation {
        wire,
        source: body.to_owned().into(),
        messages_span: start..start + 2,
        entries,
        messages: units,
        overrides: Vec::new(),
        model: Some("m".into()),
        stream: false,
    }
}

/// `count` messages of `chars` characters alternating user/assistant, labelled
/// `{prefix}{i}`, starting with a user message.
pub fn history(prefix: &str, count: usize, chars: usize) -> Vec<(Role, Vec<B>)> {
    (0..count)
        .map(|i| {
            let role = if i % 2 == 0 {
                Role::User
            } else {
                Role::Assistant
            };
            (role, vec![text(&format!("{prefix}{i}"), chars)])
        })
        .collect()
}

/// The fingerprints of the units in their current order; the transition shows as `TT`.
pub fn labels(conv: &Conversation) -> Vec<String> {
    conv.messages
        .iter()
        .map(|m| {
            if m.origin == Origin::Injected {
                "TT".to_owned()
            } else {
                m.id.0.clone()
            }
        })
        .collect()
}

/// A turn for a conversation with a budget of `window` tokens (no reserve).
pub fn turn(conv: Conversation, state: SessionState, window: u64) -> Turn {
    let mut t = Turn::new(
        SessionId::new("s1").unwrap(),
        conv.wire,
        conv.source.clone(),
        state,
    );
    t.conversation = Some(conv);
    t.budget = foldwire_core::Budget {
        window,
        reserve: 0,
        calibration: 1.0,
    };
    t
}
