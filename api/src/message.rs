//! One foldable unit of a conversation and what the stages know about it.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::ids::{BlockId, Ref};
use crate::text::Text;
use crate::think::{InlineReasoning, split_inline_reasoning};

/// The author of a message, normalized across wires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// System or developer instructions that sit among the messages (client ones are frame,
    /// see [`Message::is_frame`]).
    System,
    /// The user (and, on Anthropic and Gemini, tool results).
    User,
    /// The model.
    Assistant,
    /// OpenAI Chat's `role: tool` messages and Responses' `function_call_output` items.
    Tool,
}

/// What a unit is, as far as folding is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageKind {
    /// Plain text.
    Text,
    /// A tool call made by the model.
    ToolCall,
    /// The result of a tool call.
    ToolResult,
    /// Model reasoning (thinking, reasoning items, thought parts).
    Reasoning,
    /// An image, document, audio or video part.
    Media,
    /// A block foldable but of no kind above (server tool blocks, unknown parts).
    Other,
    /// An item that must reach the provider unchanged and is never folded (e.g. Responses
    /// compaction items).
    Opaque,
}

/// Where a unit sits inside its wire message, so the codec can rebuild the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnitSlot {
    /// The unit is the whole wire message / item.
    Whole,
    /// The wire message's content is a plain string and this unit is it.
    StringContent,
    /// Index into the message's content / parts array.
    Content(u32),
    /// Index into OpenAI Chat's `tool_calls` array.
    ToolCalls(u32),
    /// A sibling field of the content (OpenAI Chat's `reasoning_content`).
    ReasoningField,
}

/// Where a unit came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "origin", content = "block")]
pub enum Origin {
    /// Sent by the client in this request.
    Client,
    /// A rendered block summary produced by the fold stage.
    Summary(BlockId),
    /// A stub result inserted by pairing repair because no real result exists.
    Stub,
    /// Inserted by foldwire for another reason (nudges, notes).
    Injected,
}

/// Whether a media payload can be archived and restored, or not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "class")]
pub enum MediaClass {
    /// Inline bytes (base64 / data URL): storable, so it may fold once stored.
    Archivable,
    /// Bytes foldwire never sees (remote URL, provider file reference, Gemini `fileData`).
    Unrecoverable {
        /// Why, in words ("remote URL https://…", "Gemini fileData").
        reason: String,
    },
}

/// One media payload inside a unit (a unit may carry several, e.g. a tool result with images).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MediaRef {
    /// Image, document, audio, video, file.
    pub kind: String,
    /// The MIME type when known.
    pub media_type: Option<String>,
    /// Archivable or not.
    pub class: MediaClass,
    /// JSON pointer of the payload inside the unit's raw bytes.
    pub pointer: String,
    /// Decoded payload size in bytes, when inline.
    pub size: Option<u64>,
}

/// The tool identity of a call or result unit.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ToolLink {
    /// The call id shared by the call and its result (`tool_use_id`, `call_id`, Gemini's
    /// function id or a positional id the codec derived).
    pub call_id: String,
    /// The tool name, when the unit names it.
    pub name: Option<String>,
}

/// Why a unit is held back from folding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "pin", content = "detail")]
pub enum Pin {
    /// It carries media whose bytes cannot be stored.
    UnrecoverableMedia(String),
    /// Its media failed to reach the archive this turn.
    ArchiveFailed(String),
    /// A protected tool, an opaque item, or a host rule.
    Protected(String),
}

/// A content fingerprint that identifies a unit across turns.
///
/// Clients resend the whole history every turn; the same unit hashes to the same id, and
/// duplicates within one request get deterministic `#2`, `#3` suffixes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, Default)]
#[serde(transparent)]
pub struct MessageId(pub String);

impl std::fmt::Display for MessageId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// One foldable unit in store order: a content block of a wire message (a text, a tool call,
/// a tool result, a reasoning block, a media part), or a whole item where the wire has no
/// finer grain.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// Content fingerprint, stable across turns.
    pub id: MessageId,
    /// The session ref, once `refs.mint` assigned one.
    pub r#ref: Option<Ref>,
    /// Index into [`crate::Conversation::entries`]: the wire message this unit belongs to.
    pub entry: usize,
    /// Where inside that wire message it sits.
    pub slot: UnitSlot,
    /// The author.
    pub role: Role,
    /// What it is.
    pub kind: MessageKind,
    /// Its plain text, for previews, search and summaries (tool arguments and results
    /// included as text); decoded from the body on first read.
    pub text: Text,
    /// Tool identity for calls and results.
    pub tool: Option<ToolLink>,
    /// Media payloads it carries.
    pub media: Vec<MediaRef>,
    /// Where it came from.
    pub origin: Origin,
    /// Why it may not fold this turn, if so.
    pub pin: Option<Pin>,
    /// The exact bytes it came from (a slice of the request body) or the bytes a stage gave
    /// it. Untouched units are re-emitted from here byte for byte.
    pub raw: Bytes,
    /// True once a stage replaced `raw`; the codec then rebuilds its wire message.
    pub modified: bool,
    /// The bytes the client sent, kept when a stage replaced them for the wire (a tool
    /// output `tool.trim` shortened, a cache marker the layout placed or took off): what a
    /// fold of the unit archives, so it restores exactly as the client sent it.
    pub client_raw: Option<Bytes>,
}

impl Message {
    /// A unit of plain text created by foldwire itself (summaries, notes).
    pub fn synthesized(
        entry: usize,
        role: Role,
        text: impl Into<Text>,
        origin: Origin,
        raw: Bytes,
    ) -> Self {
        Message {
            id: MessageId(String::new()),
            r#ref: None,
            entry,
            slot: UnitSlot::Content(0),
            role,
            kind: MessageKind::Text,
            text: text.into(),
            tool: None,
            media: Vec::new(),
            origin,
            pin: None,
            raw,
            modified: true,
            client_raw: None,
        }
    }

    /// Replaces the unit's bytes and marks it modified; the first time, a client unit's own
    /// bytes are kept as [`Message::client_raw`].
    pub fn replace_raw(&mut self, raw: Bytes) {
        let before = std::mem::replace(&mut self.raw, raw);
        if !self.modified && self.client_raw.is_none() && self.origin == Origin::Client {
            self.client_raw = Some(before);
        }
        self.modified = true;
    }

    /// The bytes the client sent for this unit: [`Message::client_raw`] when a stage
    /// rewrote it, else `raw`.
    pub fn client_bytes(&self) -> &Bytes {
        self.client_raw.as_ref().unwrap_or(&self.raw)
    }

    /// True for the client's system and developer messages that sit among the messages
    /// (OpenAI Chat `system`/`developer`, Responses `system`/`developer` items): they are
    /// the request's frame, like a top-level system prompt, so they never fold, never join
    /// a range, get no ref and are not counted as history, wherever they sit.
    pub fn is_frame(&self) -> bool {
        self.role == Role::System && self.origin == Origin::Client
    }

    /// The reasoning an assistant wrote inline at the start of this text unit
    /// (`<think>…</think>` and its kin, see [`crate::think`]) split from its answer; `None`
    /// for every other unit (user text is never reasoning).
    pub fn inline_reasoning(&self) -> Option<InlineReasoning<'_>> {
        if self.role != Role::Assistant || self.kind != MessageKind::Text {
            return None;
        }
        split_inline_reasoning(&self.text)
    }

    /// The text a summary or a preview may draw on: the unit's text without the reasoning
    /// written inline at its start, and nothing for a reasoning unit.
    pub fn answer_text(&self) -> &str {
        if self.kind == MessageKind::Reasoning {
            return "";
        }
        match self.inline_reasoning() {
            Some(split) => split.answer,
            None => &self.text,
        }
    }

    /// True when the unit carries media whose bytes foldwire cannot store.
    pub fn has_unrecoverable_media(&self) -> bool {
        self.media
            .iter()
            .any(|m| matches!(m.class, MediaClass::Unrecoverable { .. }))
    }
}
