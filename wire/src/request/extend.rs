//! Additions to a decoded request besides folding: tools appended to the client's, a note in
//! the wire's system slot, and user text after the last message. Each is made as a
//! top-level override or a synthesized unit, so [`super::encode`] writes it in the same pass
//! as everything else and every byte the client sent stays as it was (no `Value` round trip).
//!
//! Units added here carry the id [`ADDED_UNIT_ID`], so a reader that wants the conversation
//! as the client sent it (with the pipeline's folds) can tell them apart
//! ([`without_added_units`]).

use std::borrow::Cow;
use std::ops::Range;

use bytes::Bytes;
use foldwire_core::{
    Conversation, FieldOverride, Message, MessageId, Origin, Role, UnitSlot, Wire,
};
use serde::Deserialize;
use serde_json::Value;

use super::{WireError, messages_key, scan};
use crate::dialect::{TrailingText, dialect};

/// The id of every unit this module adds.
pub const ADDED_UNIT_ID: &str = "foldwire.added";

/// One tool definition in wire-neutral form: name, description, JSON schema of its input.
#[derive(Debug, Clone, Copy)]
pub struct ToolSpec<'a> {
    /// The tool's name.
    pub name: &'a str,
    /// What it does, for the model.
    pub description: &'a str,
    /// Its input's JSON schema.
    pub schema: &'a Value,
}

/// The tool definitions as `wire` lists them in its `tools` field (Gemini: one entry holding
/// every declaration).
pub fn tool_entries(wire: Wire, tools: &[ToolSpec<'_>]) -> Vec<Value> {
    crate::dialect::dialect(wire).tool_entries(tools)
}

/// A top-level value of the request as it will be encoded: the override a stage set, else
/// the client's field.
struct Frame<'c> {
    conv: &'c Conversation,
    fields: Vec<(String, Range<usize>)>,
}

impl<'c> Frame<'c> {
    fn read(conv: &'c Conversation) -> Result<Self, WireError> {
        let bad = |at: usize| WireError::Encode {
            wire: conv.wire,
            path: "source".to_owned(),
            expected: "a JSON object body".to_owned(),
            found: format!("invalid JSON at byte {at}"),
        };
        let start = scan::skip_ws(&conv.source, 0);
        let (fields, _) =
            scan::frame_fields(&conv.source, start, &conv.messages_span).map_err(|e| bad(e.at))?;
        Ok(Frame {
            conv,
            fields: fields
                .into_iter()
                .map(|f| (f.key.into_owned(), f.value))
                .collect(),
        })
    }

    /// The value of `key` as it will be sent, if any.
    fn get(&self, key: &str) -> Option<Cow<'c, [u8]>> {
        if let Some(o) = self.conv.overrides.iter().find(|o| o.key == key) {
            return Some(Cow::Owned(o.value.to_vec()));
        }
        let (_, span) = self.fields.iter().find(|(k, _)| k == key)?;
        self.conv.source.get(span.clone()).map(Cow::Borrowed)
    }
}

/// Sets a top-level override, replacing an earlier one of the same key (two overrides of one
/// key would write the key twice).
fn set_override(conv: &mut Conversation, key: &str, value: Vec<u8>) {
    let value = Bytes::from(value);
    match conv.overrides.iter_mut().find(|o| o.key == key) {
        Some(o) => o.value = value,
        None => conv.overrides.push(FieldOverride {
            key: key.to_owned(),
            value,
        }),
    }
}

/// `[a..., b...]` from a JSON array's bytes and new elements (an empty array takes no comma).
pub(crate) fn array_with(array: &[u8], added: &[Vec<u8>]) -> Option<Vec<u8>> {
    let end = array.iter().rposition(|b| !b.is_ascii_whitespace())?;
    if array.first() != Some(&b'[') || array.get(end) != Some(&b']') {
        return None;
    }
    let inner = array.get(1..end)?;
    let mut out = Vec::with_capacity(array.len() + added.iter().map(Vec::len).sum::<usize>() + 8);
    out.push(b'[');
    out.extend_from_slice(inner);
    let mut empty = inner.iter().all(u8::is_ascii_whitespace);
    for item in added {
        if !empty {
            out.push(b',');
        }
        empty = false;
        out.extend_from_slice(item);
    }
    out.push(b']');
    Some(out)
}

pub(crate) fn to_json<T: serde::Serialize + ?Sized>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).unwrap_or_else(|_| b"null".to_vec())
}

/// A tool entry's name(s): `name`, `function.name`, or Gemini's declarations.
#[derive(Deserialize)]
struct DeclaredTool {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    function: Option<Named>,
    #[serde(default, rename = "functionDeclarations")]
    declarations: Option<Vec<Named>>,
    #[serde(default, rename = "function_declarations")]
    declarations_snake: Option<Vec<Named>>,
}

#[derive(Deserialize)]
struct Named {
    #[serde(default)]
    name: Option<String>,
}

/// The tool names the request declares, whatever the wire (only the `tools` field is read).
///
/// # Errors
/// A body whose top level cannot be read.
pub fn declared_tool_names(conv: &Conversation) -> Result<Vec<String>, WireError> {
    let frame = Frame::read(conv)?;
    Ok(names_in(conv.wire, frame.get("tools").as_deref()))
}

fn names_in(wire: Wire, tools: Option<&[u8]>) -> Vec<String> {
    let Some(list) = tools.and_then(|t| serde_json::from_slice::<Vec<DeclaredTool>>(t).ok()) else {
        return Vec::new();
    };
    let mut names = Vec::new();
    for t in list {
        if dialect(wire).nested_declarations() {
            for d in t
                .declarations
                .into_iter()
                .chain(t.declarations_snake)
                .flatten()
            {
                names.extend(d.name);
            }
        } else {
            names.extend(t.name.or_else(|| t.function.and_then(|f| f.name)));
        }
    }
    names
}

/// Why the additions were not made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExtendError {
    /// The client already declares a tool of one of the names to add.
    #[error("the client already declares a tool named {0:?}")]
    NameTaken(String),
    /// The body's top level could not be read.
    #[error("{0}")]
    Unreadable(String),
}

/// Appends `tools` (entries in the wire's shape, see [`tool_entries`]) to the request's tool
/// list and `note` to its system slot: after the client's system text (Anthropic `system`,
/// Responses `instructions`, Gemini `systemInstruction`), or as a system message after the
/// client's leading system messages on OpenAI Chat, so every cached prefix stays put.
///
/// # Errors
/// A client tool with one of the names in `reserved` (then nothing is changed and the
/// client's tools work as they always did), or a body whose top level cannot be read.
pub fn add_tools_and_note(
    conv: &mut Conversation,
    tools: &[Value],
    reserved: &[&str],
    note: &str,
) -> Result<(), ExtendError> {
    let frame = Frame::read(conv).map_err(|e| ExtendError::Unreadable(e.to_string()))?;
    let client_tools = frame.get("tools");
    if let Some(taken) = names_in(conv.wire, client_tools.as_deref())
        .into_iter()
        .find(|n| reserved.contains(&n.as_str()))
    {
        return Err(ExtendError::NameTaken(taken));
    }
    let added: Vec<Vec<u8>> = tools.iter().map(to_json).collect();
    let tools_value = client_tools
        .as_deref()
        .and_then(|t| array_with(t, &added))
        .unwrap_or_else(|| array_with(b"[]", &added).unwrap_or_default());
    let system = system_override(conv.wire, &frame, note);
    set_override(conv, "tools", tools_value);
    match system {
        Some((key, value)) => set_override(conv, key, value),
        None => insert_chat_system(conv, note),
    }
    Ok(())
}

/// The system slot's new value, or `None` where the note is a message of its own (OpenAI
/// Chat).
fn system_override(wire: Wire, frame: &Frame<'_>, note: &str) -> Option<(&'static str, Vec<u8>)> {
    dialect(wire).note_slot(&|key| frame.get(key).map(Cow::into_owned), note)
}

/// A unit this module adds: its id marks it, its bytes are one JSON value of the wire.
fn added_unit(entry: usize, role: Role, slot: UnitSlot, text: &str, raw: Vec<u8>) -> Message {
    let mut unit = Message::synthesized(
        entry,
        role,
        text.to_owned(),
        Origin::Injected,
        Bytes::from(raw),
    );
    unit.id = MessageId(ADDED_UNIT_ID.to_owned());
    unit.slot = slot;
    unit
}

/// OpenAI Chat: the note as a system message after the client's leading system messages.
fn insert_chat_system(conv: &mut Conversation, note: &str) {
    let at = conv
        .messages
        .iter()
        .take_while(|m| {
            conv.entries
                .get(m.entry)
                .is_some_and(|e| e.role == Role::System)
        })
        .count();
    let entry = conv.push_entry(Role::System);
    let unit = added_unit(
        entry,
        Role::System,
        UnitSlot::StringContent,
        note,
        to_json(note),
    );
    conv.messages.insert(at, unit);
}

/// Appends `text` as trailing user content, after the last message so every cached prefix
/// stays byte-identical: a text part of the last message when it is the user's (Anthropic,
/// Gemini), else a user message of its own.
pub fn append_user_text(conv: &mut Conversation, text: &str) {
    let wire = conv.wire;
    let last_user_entry = conv
        .messages
        .last()
        .map(|m| m.entry)
        .filter(|&e| conv.entries.get(e).is_some_and(|e| e.role == Role::User));
    let (joins_last, slot, raw) = match dialect(wire).trailing_text(text) {
        TrailingText::Part(raw) => (true, UnitSlot::Content(u32::MAX), raw),
        TrailingText::Message(raw) => (false, UnitSlot::StringContent, raw),
    };
    let entry = match last_user_entry {
        Some(e) if joins_last => e,
        _ => conv.push_entry(Role::User),
    };
    conv.messages
        .push(added_unit(entry, Role::User, slot, text, raw));
}

/// The conversation without the units this module added: what the client sent, with the
/// pipeline's folds.
pub fn without_added_units(conv: &Conversation) -> Conversation {
    let mut out = conv.clone();
    out.messages.retain(|m| m.id.0 != ADDED_UNIT_ID);
    out
}

/// The request's top-level fields other than its messages array, as JSON: the frame
/// (system, tools, output constraints, params). The messages array is passed over where
/// the decode found it rather than scanned again, so reading the frame costs what the
/// frame holds, not what the whole history does.
pub fn frame_value_of(conv: &Conversation) -> Option<Value> {
    let (wire, body) = (conv.wire, &conv.source);
    let start = scan::skip_ws(body, 0);
    let (fields, _) = scan::frame_fields(body, start, &conv.messages_span).ok()?;
    let key = messages_key(wire);
    let mut map = serde_json::Map::new();
    for f in fields {
        if f.key == key {
            continue;
        }
        let value = serde_json::from_slice(body.get(f.value.clone())?).ok()?;
        map.insert(f.key.into_owned(), value);
    }
    Some(Value::Object(map))
}
