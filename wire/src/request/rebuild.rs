//! Encoding: re-emit untouched wire messages from their original bytes, rebuild the others
//! from their surviving units, keep the frame verbatim except top-level overrides.

use std::borrow::Cow;
use std::ops::Range;

use bytes::Bytes;
use foldwire_core::{Conversation, Entry, Message, MessageKind, Role, UnitSlot, Wire, utf8_lossy};

use super::{WireError, anthropic, gemini, messages_key, openai_chat, openai_responses, scan};

/// Encodes a conversation back to its wire's request body.
///
/// Consecutive units with the same `entry` form one wire message. A group that is exactly its
/// entry's original units (same count, none modified, in decode order, all slices of the
/// entry's bytes) is copied from the entry's raw bytes; any other group is rebuilt. With no
/// change at all the body comes back byte-identical (without copying).
pub fn encode(conv: &Conversation) -> Result<Bytes, WireError> {
    let groups = groups(conv)?;
    let unchanged = groups.len() == conv.entries.len()
        && groups.iter().enumerate().all(|(i, (e, _, units))| {
            *e == i
                && conv
                    .entries
                    .get(i)
                    .is_some_and(|entry| verbatim(entry, units))
        });
    if unchanged && conv.overrides.is_empty() {
        return Ok(conv.source.clone());
    }
    let array: Cow<'_, [u8]> = if unchanged {
        Cow::Borrowed(
            conv.source
                .get(conv.messages_span.clone())
                .unwrap_or_default(),
        )
    } else {
        Cow::Owned(build_array(conv, &groups)?)
    };
    assemble(conv, &array)
}

/// A run of units of one entry: the entry, the index of its first unit, the units.
type Group<'c> = (usize, usize, &'c [Message]);

fn encode_err(wire: Wire, path: String, expected: &str, found: String) -> WireError {
    WireError::Encode {
        wire,
        path,
        expected: expected.to_owned(),
        found,
    }
}

/// Runs of consecutive units sharing an entry.
fn groups(conv: &Conversation) -> Result<Vec<Group<'_>>, WireError> {
    let mut out: Vec<Group<'_>> = Vec::new();
    let mut start = 0;
    for (i, m) in conv.messages.iter().enumerate() {
        if m.entry >= conv.entries.len() {
            return Err(encode_err(
                conv.wire,
                format!("messages[{i}].entry"),
                &format!("an entry index below {}", conv.entries.len()),
                m.entry.to_string(),
            ));
        }
        let next_differs = conv.messages.get(i + 1).is_none_or(|n| n.entry != m.entry);
        if next_differs {
            out.push((
                m.entry,
                start,
                conv.messages.get(start..=i).unwrap_or_default(),
            ));
            start = i + 1;
        }
    }
    Ok(out)
}

/// Decode order of slots within one wire message.
fn rank(slot: UnitSlot) -> u64 {
    match slot {
        UnitSlot::ReasoningField => 0,
        UnitSlot::StringContent => 1,
        UnitSlot::Content(i) => 2 + u64::from(i),
        UnitSlot::ToolCalls(i) => (1 << 33) + u64::from(i),
        UnitSlot::Whole => 1 << 34,
    }
}

/// True when `inner` is a sub-slice of `outer`'s memory (a unit cut from this entry).
fn within(outer: &[u8], inner: &[u8]) -> bool {
    let o = outer.as_ptr() as usize;
    let i = inner.as_ptr() as usize;
    i >= o && i + inner.len() <= o + outer.len()
}

/// True when a group is exactly its entry's original units, so the entry's raw bytes stand.
fn verbatim(entry: &Entry, units: &[Message]) -> bool {
    let Some(raw) = &entry.raw else {
        return false;
    };
    units.len() == entry.unit_count
        && units.iter().all(|m| !m.modified && within(raw, &m.raw))
        && units.windows(2).all(|w| match w {
            [a, b] => rank(a.slot) < rank(b.slot),
            _ => true,
        })
}

/// What one unit contributes to its wire message.
enum Piece<'m> {
    /// A whole wire message of its own.
    Item(Cow<'m, [u8]>),
    /// A JSON string that is the message's whole content when alone.
    Str(Cow<'m, [u8]>),
    /// A content block / part.
    Part(Cow<'m, [u8]>),
    /// An OpenAI Chat `tool_calls` element.
    ToolCall(&'m [u8]),
    /// An OpenAI Chat `reasoning_content` string.
    Reasoning(&'m [u8]),
}

fn json_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| String::from("\"\""))
}

/// The piece of a unit foldwire synthesized (modified, empty raw), rendered for the wire.
fn synthesized_piece(wire: Wire, unit: &Message, entry_role: Role) -> Piece<'static> {
    let text = json_string(&unit.text);
    let result_for = match (&unit.kind, &unit.tool) {
        (MessageKind::ToolResult, Some(tool)) => Some(tool),
        _ => None,
    };
    let bytes = |s: String| Cow::Owned(s.into_bytes());
    match (wire, result_for) {
        (Wire::Anthropic, None) => {
            Piece::Part(bytes(format!(r#"{{"type":"text","text":{text}}}"#)))
        }
        (Wire::Anthropic, Some(t)) => Piece::Part(bytes(format!(
            r#"{{"type":"tool_result","tool_use_id":{},"content":{text}}}"#,
            json_string(&t.call_id)
        ))),
        (Wire::OpenAiChat, None) => Piece::Str(bytes(text)),
        (Wire::OpenAiChat, Some(t)) => Piece::Item(bytes(format!(
            r#"{{"role":"tool","tool_call_id":{},"content":{text}}}"#,
            json_string(&t.call_id)
        ))),
        (Wire::OpenAiResponses, None) => Piece::Part(bytes(format!(
            r#"{{"type":"{}","text":{text}}}"#,
            openai_responses::text_part_type(entry_role)
        ))),
        (Wire::OpenAiResponses, Some(t)) => Piece::Item(bytes(format!(
            r#"{{"type":"function_call_output","call_id":{},"output":{text}}}"#,
            json_string(&t.call_id)
        ))),
        (Wire::Gemini, None) => Piece::Part(bytes(format!(r#"{{"text":{text}}}"#))),
        (Wire::Gemini, Some(t)) => {
            let name = json_string(t.name.as_deref().unwrap_or("tool"));
            let id = if t.call_id.starts_with(gemini::DERIVED_ID_PREFIX) {
                String::new()
            } else {
                format!(r#""id":{},"#, json_string(&t.call_id))
            };
            Piece::Part(bytes(format!(
                r#"{{"functionResponse":{{{id}"name":{name},"response":{{"content":{text}}}}}}}"#
            )))
        }
    }
}

fn piece<'m>(
    conv: &Conversation,
    index: usize,
    unit: &'m Message,
    entry_role: Role,
) -> Result<Piece<'m>, WireError> {
    if unit.modified && unit.kind == MessageKind::Opaque {
        // Opaque items (Responses compaction) are only meaningful to the provider as sent.
        return Err(encode_err(
            conv.wire,
            format!("messages[{index}]"),
            "an opaque item (e.g. a compaction item) unchanged",
            "a modified one".to_owned(),
        ));
    }
    if unit.modified && unit.raw.is_empty() {
        return Ok(synthesized_piece(conv.wire, unit, entry_role));
    }
    if unit.modified {
        // Bytes a stage supplied: they must be one JSON value, or the body would be corrupt.
        let raw: &[u8] = &unit.raw;
        let start = scan::skip_ws(raw, 0);
        let ok = scan::value_end(raw, start).is_ok_and(|end| scan::skip_ws(raw, end) == raw.len());
        if !ok {
            return Err(encode_err(
                conv.wire,
                format!("messages[{index}].raw"),
                "one JSON value",
                format!("{} bytes that do not parse", raw.len()),
            ));
        }
    }
    let raw = Cow::Borrowed(&unit.raw[..]);
    Ok(match (unit.slot, conv.wire) {
        (UnitSlot::Whole, _) => Piece::Item(raw),
        // A string content a stage turned into its block (to carry a cache marker).
        (UnitSlot::StringContent, _) if unit.modified && raw.first() == Some(&b'{') => {
            Piece::Part(raw)
        }
        (UnitSlot::StringContent, _) => Piece::Str(raw),
        (UnitSlot::ToolCalls(_), Wire::OpenAiChat) => Piece::ToolCall(&unit.raw),
        (UnitSlot::ReasoningField, Wire::OpenAiChat) => Piece::Reasoning(&unit.raw),
        (UnitSlot::ReasoningField, _) => Piece::Str(raw),
        (UnitSlot::Content(_) | UnitSlot::ToolCalls(_), _) => Piece::Part(raw),
    })
}

/// Appends items to a JSON array body, separating them with commas.
struct ArrayOut {
    buf: Vec<u8>,
    empty: bool,
}

impl ArrayOut {
    fn push(&mut self, item: &[u8]) {
        if !self.empty {
            self.buf.push(b',');
        }
        self.empty = false;
        self.buf.extend_from_slice(item);
    }
}

fn build_array(conv: &Conversation, groups: &[Group<'_>]) -> Result<Vec<u8>, WireError> {
    let mut out = ArrayOut {
        buf: Vec::with_capacity(conv.messages_span.len() + 256),
        empty: true,
    };
    out.buf.push(b'[');
    for group in groups {
        emit_group(conv, group, &mut out)?;
    }
    out.buf.push(b']');
    Ok(out.buf)
}

/// Appends the wire message(s) one group encodes to.
fn emit_group(
    conv: &Conversation,
    (entry_index, base, units): &Group<'_>,
    out: &mut ArrayOut,
) -> Result<(), WireError> {
    let Some(entry) = conv.entries.get(*entry_index) else {
        return Ok(());
    };
    if let Some(raw) = &entry.raw
        && raw.first() == Some(&b'{')
        && verbatim(entry, units)
    {
        out.push(raw);
        return Ok(());
    }
    let template = entry.raw.as_deref().filter(|r| r.first() == Some(&b'{'));
    let mut run: Vec<Piece<'_>> = Vec::new();
    for (k, unit) in units.iter().enumerate() {
        match piece(conv, base + k, unit, entry.role)? {
            Piece::Item(bytes) => {
                flush(conv, *entry_index, entry, template, &mut run, out)?;
                out.push(&bytes);
            }
            p => run.push(p),
        }
    }
    flush(conv, *entry_index, entry, template, &mut run, out)
}

/// The size of one wire message of the encoded body: the units it holds and its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageSize {
    /// The units of [`Conversation::messages`] it encodes.
    pub units: Range<usize>,
    /// Its bytes in the encoded messages array, the separating comma included.
    pub bytes: usize,
}

/// The encoded size of every wire message, in order: what [`encode`] would write for each
/// run of units sharing an entry. Untouched wire messages are measured without copying;
/// only rebuilt ones are rendered.
///
/// # Errors
/// The same as [`encode`].
pub fn message_sizes(conv: &Conversation) -> Result<Vec<MessageSize>, WireError> {
    let groups = groups(conv)?;
    let mut out = Vec::with_capacity(groups.len());
    let mut scratch = ArrayOut {
        buf: Vec::new(),
        empty: true,
    };
    for group in &groups {
        let (entry_index, base, units) = group;
        let range = *base..base + units.len();
        let verbatim_len = conv.entries.get(*entry_index).and_then(|entry| {
            let raw = entry.raw.as_ref()?;
            (raw.first() == Some(&b'{') && verbatim(entry, units)).then_some(raw.len())
        });
        let bytes = match verbatim_len {
            Some(len) => len + 1,
            None => {
                scratch.buf.clear();
                // Not empty: every message pays its comma, as the verbatim ones do.
                scratch.empty = false;
                emit_group(conv, group, &mut scratch)?;
                scratch.buf.len()
            }
        };
        out.push(MessageSize {
            units: range,
            bytes,
        });
    }
    Ok(out)
}

/// The body [`encode`] would write with an empty messages array: the frame (system, tools,
/// params) with every top-level override applied.
///
/// # Errors
/// The same as [`encode`].
pub fn frame(conv: &Conversation) -> Result<Bytes, WireError> {
    assemble(conv, b"[]")
}

/// Wraps a run of content pieces into one wire message and appends it.
fn flush(
    conv: &Conversation,
    entry_index: usize,
    entry: &Entry,
    template: Option<&[u8]>,
    run: &mut Vec<Piece<'_>>,
    out: &mut ArrayOut,
) -> Result<(), WireError> {
    if run.is_empty() {
        return Ok(());
    }
    let pieces = std::mem::take(run);
    let wire = conv.wire;
    let role = entry.role;
    // Renders a string piece as a text block where an array is needed.
    let text_block = |s: &[u8]| -> Vec<u8> {
        let s = utf8_lossy(s);
        match wire {
            Wire::Anthropic | Wire::OpenAiChat => format!(r#"{{"type":"text","text":{s}}}"#),
            Wire::OpenAiResponses => {
                format!(
                    r#"{{"type":"{}","text":{s}}}"#,
                    openai_responses::text_part_type(role)
                )
            }
            Wire::Gemini => format!(r#"{{"text":{s}}}"#),
        }
        .into_bytes()
    };
    let content_value = |parts: &[&Piece<'_>]| -> Option<Vec<u8>> {
        match parts {
            [] => None,
            [Piece::Str(s)] if wire != Wire::Gemini => Some(s.to_vec()),
            many => {
                let mut v = vec![b'['];
                for (i, p) in many.iter().enumerate() {
                    if i > 0 {
                        v.push(b',');
                    }
                    match p {
                        Piece::Str(s) => v.extend_from_slice(&text_block(s)),
                        Piece::Reasoning(s) => v.extend_from_slice(&text_block(s)),
                        Piece::Part(b) | Piece::Item(b) => v.extend_from_slice(b),
                        Piece::ToolCall(b) => v.extend_from_slice(b),
                    }
                }
                v.push(b']');
                Some(v)
            }
        }
    };
    let message = match wire {
        Wire::OpenAiChat => {
            let content: Vec<&Piece<'_>> = pieces
                .iter()
                .filter(|p| matches!(p, Piece::Str(_) | Piece::Part(_)))
                .collect();
            let calls: Vec<&[u8]> = pieces
                .iter()
                .filter_map(|p| match p {
                    Piece::ToolCall(b) => Some(*b),
                    _ => None,
                })
                .collect();
            let reasoning = chat_reasoning(&pieces);
            let mut content = content_value(&content);
            if content.is_none() {
                // A message needs some content; beside tool calls, keep an explicit null if
                // the client wrote one.
                if calls.is_empty() {
                    content = Some(b"\"\"".to_vec());
                } else if template.is_some_and(|t| has_field(t, "content")) {
                    content = Some(b"null".to_vec());
                }
            }
            let calls = (!calls.is_empty()).then(|| {
                let mut v = vec![b'['];
                v.extend_from_slice(&calls.join(&b','));
                v.push(b']');
                v
            });
            let repl = [
                ("reasoning_content", reasoning),
                ("content", content),
                ("tool_calls", calls),
            ];
            object_with(
                conv,
                entry_index,
                template,
                &[("role", openai_chat::role_name(role))],
                &repl,
            )?
        }
        Wire::Anthropic => {
            let all: Vec<&Piece<'_>> = pieces.iter().collect();
            let repl = [("content", content_value(&all))];
            object_with(
                conv,
                entry_index,
                template,
                &[("role", anthropic::role_name(role))],
                &repl,
            )?
        }
        Wire::OpenAiResponses => {
            let all: Vec<&Piece<'_>> = pieces.iter().collect();
            let repl = [("content", content_value(&all))];
            // Only a message item can take content parts; any other item gets a new message.
            let template = template.filter(|t| has_field(t, "content"));
            object_with(
                conv,
                entry_index,
                template,
                &[
                    ("type", "message"),
                    ("role", openai_responses::role_name(role)),
                ],
                &repl,
            )?
        }
        Wire::Gemini => {
            let all: Vec<&Piece<'_>> = pieces.iter().collect();
            let parts = content_value(&all);
            let repl = [("parts", parts)];
            object_with(
                conv,
                entry_index,
                template,
                &[("role", gemini::role_name(role))],
                &repl,
            )?
        }
    };
    out.push(&message);
    Ok(())
}

/// The `reasoning_content` value from the run's reasoning pieces (joined if several).
fn chat_reasoning(pieces: &[Piece<'_>]) -> Option<Vec<u8>> {
    let parts: Vec<&[u8]> = pieces
        .iter()
        .filter_map(|p| match p {
            Piece::Reasoning(b) => Some(*b),
            _ => None,
        })
        .collect();
    match parts.as_slice() {
        [] => None,
        [one] => Some(one.to_vec()),
        many => {
            let joined: Vec<String> = many
                .iter()
                .map(|b| {
                    let s = utf8_lossy(b);
                    scan::unescape(&s, &(0..s.len())).into_owned()
                })
                .collect();
            Some(json_string(&joined.join("\n")).into_bytes())
        }
    }
}

fn has_field(template: &[u8], key: &str) -> bool {
    std::str::from_utf8(template)
        .ok()
        .and_then(|s| scan::object_fields(s, &(0..s.len())).ok())
        .is_some_and(|f| scan::field(&f, key).is_some())
}

/// Rebuilds an object: the template's fields in order and verbatim, with each replacement key
/// written in place (or dropped when its value is `None`), and replacements the template
/// lacks appended. Without a template, `fresh` fields (JSON strings) come first.
fn object_with(
    conv: &Conversation,
    entry_index: usize,
    template: Option<&[u8]>,
    fresh: &[(&str, &str)],
    replacements: &[(&str, Option<Vec<u8>>)],
) -> Result<Vec<u8>, WireError> {
    let mut out = Vec::with_capacity(template.map_or(64, <[u8]>::len));
    out.push(b'{');
    let mut first = true;
    let mut put = |out: &mut Vec<u8>, bytes: &[u8]| {
        if !first {
            out.push(b',');
        }
        first = false;
        out.extend_from_slice(bytes);
    };
    let field_bytes = |key: &str, value: &[u8]| {
        let mut f = json_string(key).into_bytes();
        f.push(b':');
        f.extend_from_slice(value);
        f
    };
    let mut used = vec![false; replacements.len()];
    match template {
        Some(t) => {
            let bad = |found: String| {
                encode_err(
                    conv.wire,
                    format!("entries[{entry_index}].raw"),
                    "a JSON object",
                    found,
                )
            };
            let src =
                std::str::from_utf8(t).map_err(|_| bad("bytes that are not UTF-8".to_owned()))?;
            let fields = scan::object_fields(src, &(0..src.len())).map_err(|e| {
                bad(format!(
                    "invalid JSON at byte {}: expected {}",
                    e.at, e.expected
                ))
            })?;
            for f in &fields {
                match replacements.iter().position(|(k, _)| f.key == *k) {
                    Some(i) => {
                        if let (Some(flag), Some((k, Some(v)))) =
                            (used.get_mut(i), replacements.get(i))
                        {
                            if !*flag {
                                *flag = true;
                                put(&mut out, &field_bytes(k, v));
                            }
                        } else if let Some(flag) = used.get_mut(i) {
                            *flag = true;
                        }
                    }
                    None => put(
                        &mut out,
                        t.get(f.key_start..f.value.end).unwrap_or_default(),
                    ),
                }
            }
        }
        None => {
            for (k, v) in fresh {
                put(&mut out, &field_bytes(k, json_string(v).as_bytes()));
            }
        }
    }
    for ((k, v), done) in replacements.iter().zip(used) {
        if let (Some(v), false) = (v, done) {
            put(&mut out, &field_bytes(k, v));
        }
    }
    out.push(b'}');
    Ok(out)
}

/// The body: the frame verbatim around the new messages array, with top-level overrides.
fn assemble(conv: &Conversation, array: &[u8]) -> Result<Bytes, WireError> {
    let src = &conv.source;
    let span = conv.messages_span.clone();
    let mut edits: Vec<(Range<usize>, Cow<'_, [u8]>)> = vec![(span.clone(), Cow::Borrowed(array))];
    if !conv.overrides.is_empty() {
        let bad_source =
            |found: String| encode_err(conv.wire, "source".to_owned(), "a JSON object body", found);
        let start = scan::skip_ws(src, 0);
        // The source was validated when it was decoded; the messages array is not scanned
        // again, nor checked as UTF-8 again.
        let (fields, end) = scan::frame_fields(src, start, &span)
            .map_err(|e| bad_source(format!("invalid JSON at byte {}", e.at)))?;
        let mut appended = Vec::new();
        let mut any_field = !fields.is_empty();
        for (i, o) in conv.overrides.iter().enumerate() {
            let path = format!("overrides[{i}]");
            if o.key == messages_key(conv.wire) {
                return Err(encode_err(
                    conv.wire,
                    path,
                    "a top-level key other than the messages array",
                    format!("{:?}", o.key),
                ));
            }
            let v: &[u8] = &o.value;
            let vs = scan::skip_ws(v, 0);
            if !scan::value_end(v, vs).is_ok_and(|e| scan::skip_ws(v, e) == v.len()) {
                return Err(encode_err(
                    conv.wire,
                    path,
                    "one JSON value",
                    format!("{} bytes that do not parse", v.len()),
                ));
            }
            match fields.iter().find(|f| f.key == o.key.as_str()) {
                Some(f) => edits.push((f.value.clone(), Cow::Borrowed(v))),
                None => {
                    if any_field {
                        appended.push(b',');
                    }
                    any_field = true;
                    appended.extend_from_slice(json_string(&o.key).as_bytes());
                    appended.push(b':');
                    appended.extend_from_slice(v);
                }
            }
        }
        if !appended.is_empty() {
            // Just before the closing brace of the top-level object.
            let close = end.saturating_sub(1);
            edits.push((close..close, Cow::Owned(appended)));
        }
    }
    edits.sort_by_key(|(r, _)| r.start);
    let mut out = Vec::with_capacity(src.len() + array.len());
    let mut pos = 0;
    for (range, bytes) in &edits {
        if range.start < pos {
            continue; // two overrides of one key: the first wins
        }
        out.extend_from_slice(src.get(pos..range.start).unwrap_or_default());
        out.extend_from_slice(bytes);
        pos = range.end;
    }
    out.extend_from_slice(src.get(pos..).unwrap_or_default());
    Ok(Bytes::from(out))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use foldwire_core::{FieldOverride, Origin};

    /// The sizes add up to the encoded body, untouched, rebuilt and synthesized messages
    /// and overrides alike (the first message pays no comma).
    #[test]
    fn message_sizes_and_frame_add_up_to_the_encoded_body() {
        for wire in Wire::ALL {
            let body = match wire {
                Wire::Anthropic => {
                    r#"{"model":"m","system":"be brief","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},{"role":"assistant","content":"ok"}]}"#
                }
                Wire::OpenAiChat => {
                    r#"{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},{"role":"assistant","content":"ok"}]}"#
                }
                Wire::OpenAiResponses => {
                    r#"{"model":"m","input":[{"role":"developer","content":"be brief"},{"role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_text","text":"b"}]}]}"#
                }
                Wire::Gemini => {
                    r#"{"contents":[{"role":"user","parts":[{"text":"a"},{"text":"b"}]},{"role":"model","parts":[{"text":"ok"}]}]}"#
                }
            };
            let mut conv = crate::request::decode(wire, Bytes::from(body)).unwrap();
            let check = |conv: &Conversation| {
                let sizes = message_sizes(conv).unwrap();
                let total: usize = sizes.iter().map(|s| s.bytes).sum();
                let encoded = encode(conv).unwrap();
                assert_eq!(
                    frame(conv).unwrap().len() + total - 1,
                    encoded.len(),
                    "{wire}: {}",
                    String::from_utf8_lossy(&encoded)
                );
                let units: usize = sizes.iter().map(|s| s.units.len()).sum();
                assert_eq!(units, conv.messages.len());
            };
            check(&conv);
            // Drop a unit (its message is rebuilt), add a summary and an override.
            let gone = conv.messages.iter().position(|m| m.text == "b").unwrap();
            conv.messages.remove(gone);
            let entry = conv.push_entry(Role::User);
            conv.messages.insert(
                0,
                Message::synthesized(
                    entry,
                    Role::User,
                    "[foldwire b1]\nsaid \"hi\"",
                    Origin::Summary(foldwire_core::BlockId(1)),
                    Bytes::new(),
                ),
            );
            conv.overrides.push(FieldOverride {
                key: "tools".into(),
                value: Bytes::from_static(br#"[{"name":"compress"}]"#),
            });
            check(&conv);
        }
    }
}
