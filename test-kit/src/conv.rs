//! Hand-built conversations for the kernel tests, one helper per wire shape.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use foldwire_core::{
    Conversation, Entry, MediaClass, MediaRef, Message, MessageId, MessageKind, Origin, Pin,
    Registry, Role, SessionId, SessionState, StageCx, ToolLink, Turn, UnitSlot, Wire,
};
use foldwire_stages::refs_mint::mint_refs;

/// Builds a conversation entry by entry, with unit bytes shaped like the wire's blocks.
pub struct Conv {
    pub wire: Wire,
    entries: Vec<(Role, Vec<Message>)>,
    seen: HashMap<String, usize>,
}

fn json(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

impl Conv {
    pub fn new(wire: Wire) -> Self {
        Conv {
            wire,
            entries: Vec::new(),
            seen: HashMap::new(),
        }
    }

    fn unit(
        &mut self,
        role: Role,
        kind: MessageKind,
        text: &str,
        tool: Option<ToolLink>,
        raw: String,
    ) -> Message {
        let base = format!("{role:?}|{kind:?}|{raw}");
        let n = self.seen.entry(base.clone()).or_default();
        *n += 1;
        let id = if *n == 1 { base } else { format!("{base}#{n}") };
        Message {
            id: MessageId(id),
            r#ref: None,
            entry: 0,
            slot: UnitSlot::Content(0),
            role,
            kind,
            text: text.into(),
            tool,
            media: Vec::new(),
            origin: Origin::Client,
            pin: None,
            raw: Bytes::from(raw),
            modified: false,
            client_raw: None,
        }
    }

    fn push(&mut self, role: Role, units: Vec<Message>) -> &mut Self {
        self.entries.push((role, units));
        self
    }

    pub fn user(&mut self, text: &str) -> &mut Self {
        let raw = format!(r#"{{"type":"text","text":{}}}"#, json(text));
        let u = self.unit(Role::User, MessageKind::Text, text, None, raw);
        self.push(Role::User, vec![u])
    }

    pub fn assistant(&mut self, text: &str) -> &mut Self {
        let raw = format!(r#"{{"type":"text","text":{}}}"#, json(text));
        let u = self.unit(Role::Assistant, MessageKind::Text, text, None, raw);
        self.push(Role::Assistant, vec![u])
    }

    /// A user message carrying an image whose bytes cannot be stored (pinned).
    pub fn user_remote_image(&mut self, url: &str) -> &mut Self {
        let raw = format!(
            r#"{{"type":"image","source":{{"type":"url","url":{}}}}}"#,
            json(url)
        );
        let mut u = self.unit(Role::User, MessageKind::Media, "", None, raw);
        u.media.push(MediaRef {
            kind: "image".into(),
            media_type: None,
            class: MediaClass::Unrecoverable {
                reason: format!("remote URL {url}"),
            },
            pointer: "/source".into(),
            size: None,
        });
        self.push(Role::User, vec![u])
    }

    /// An assistant turn: optional reasoning, optional text, then tool calls (parallel when
    /// several). Responses gets one item per unit; the other wires one message.
    pub fn turn(
        &mut self,
        reasoning: Option<&str>,
        text: Option<&str>,
        calls: &[(&str, &str, &str)],
    ) -> &mut Self {
        let mut units = Vec::new();
        if let Some(r) = reasoning {
            let raw = format!(
                r#"{{"type":"thinking","thinking":{},"signature":"sig"}}"#,
                json(r)
            );
            units.push(self.unit(Role::Assistant, MessageKind::Reasoning, r, None, raw));
        }
        if let Some(t) = text {
            let raw = format!(r#"{{"type":"text","text":{}}}"#, json(t));
            units.push(self.unit(Role::Assistant, MessageKind::Text, t, None, raw));
        }
        for (id, name, args) in calls {
            let raw =
                format!(r#"{{"type":"tool_use","id":"{id}","name":"{name}","input":{args}}}"#);
            let tool = Some(ToolLink {
                call_id: (*id).to_owned(),
                name: Some((*name).to_owned()),
            });
            units.push(self.unit(Role::Assistant, MessageKind::ToolCall, args, tool, raw));
        }
        if self.wire == Wire::OpenAiResponses {
            for u in units {
                self.push(Role::Assistant, vec![u]);
            }
            self
        } else {
            self.push(Role::Assistant, units)
        }
    }

    /// Tool results: one user message on Anthropic/Gemini, one tool entry each on Chat and
    /// Responses.
    pub fn results(&mut self, results: &[(&str, &str)]) -> &mut Self {
        let role = match self.wire {
            Wire::Anthropic | Wire::Gemini => Role::User,
            Wire::OpenAiChat | Wire::OpenAiResponses => Role::Tool,
        };
        let units: Vec<Message> = results
            .iter()
            .map(|(id, out)| {
                let raw = format!(
                    r#"{{"type":"tool_result","tool_use_id":"{id}","content":{}}}"#,
                    json(out)
                );
                let tool = Some(ToolLink {
                    call_id: (*id).to_owned(),
                    name: None,
                });
                self.unit(role, MessageKind::ToolResult, out, tool, raw)
            })
            .collect();
        if role == Role::User {
            self.push(role, units)
        } else {
            for u in units {
                self.push(role, vec![u]);
            }
            self
        }
    }

    /// Pins the last unit built.
    pub fn pin_last(&mut self, why: &str) -> &mut Self {
        let last = self.entries.last_mut().unwrap().1.last_mut().unwrap();
        last.pin = Some(Pin::Protected(why.into()));
        self
    }

    pub fn build(&self) -> Conversation {
        let mut body = String::from(r#"{"model":"m","messages":["#);
        let start = body.len() - 1;
        let mut entries = Vec::new();
        let mut messages = Vec::new();
        for (e, (role, units)) in self.entries.iter().enumerate() {
            let content: Vec<String> = units
                .iter()
                .map(|u| String::from_utf8(u.raw.to_vec()).unwrap())
                .collect();
            let raw = format!(
                r#"{{"role":"{}","content":[{}]}}"#,
                format!("{role:?}").to_lowercase(),
                content.join(",")
            );
            if e > 0 {
                body.push(',');
            }
            body.push_str(&raw);
            entries.push(Entry {
                role: *role,
                raw: Some(Bytes::from(raw)),
                unit_count: units.len(),
            });
            for (k, u) in units.iter().enumerate() {
                let mut u = u.clone();
                u.entry = e;
                u.slot = UnitSlot::Content(k as u32);
                messages.push(u);
            }
        }
        body.push(']');
        let end = body.len();
        body.push('}');
        Conversation {
            wire: self.wire,
            source: Bytes::from(body),
            messages_span: start..end,
            entries,
            messages,
            overrides: Vec::new(),
            model: Some("m".into()),
            stream: false,
        }
    }
}

/// A text of roughly `tokens` tokens (4 bytes each) that mentions `tag`.
pub fn sized(tag: &str, tokens: usize) -> String {
    let mut s = format!("{tag} ");
    while s.len() < tokens * 4 {
        s.push_str("lorem ipsum ");
    }
    s
}

/// Mints refs for a built conversation in a state.
pub fn minted(conv: &Conv, state: &mut SessionState) -> Conversation {
    let mut c = conv.build();
    mint_refs(state, &mut c);
    c
}

/// The units' texts in order (summaries shown by their first line).
pub fn texts(c: &Conversation) -> Vec<String> {
    c.messages
        .iter()
        .map(|u| u.text.lines().next().unwrap_or_default().to_owned())
        .collect()
}

pub fn turn_for(c: Conversation, state: SessionState) -> Turn {
    let mut t = Turn::new(
        SessionId::new("s1").unwrap(),
        c.wire,
        c.source.clone(),
        state,
    );
    t.conversation = Some(c);
    t
}

pub fn cx() -> StageCx {
    StageCx::new(Arc::new(Registry::empty()))
}
