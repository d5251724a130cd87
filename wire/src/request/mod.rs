//! Request bodies: decode each wire into a [`Conversation`] of foldable units and encode it
//! back, byte for byte where nothing changed.
//!
//! - [`decode`] scans the body once, keeps every span (the messages array, each wire message,
//!   each unit) as a zero-copy slice of the body, and cuts each wire message into units.
//! - [`encode`] re-emits every wire message whose units are untouched from its original bytes,
//!   rebuilds the others from their surviving units, and keeps everything outside the messages
//!   array verbatim except top-level overrides.
//! - [`detect`] tells the wire from the request path, or the body's shape as a fallback.

mod anthropic;
mod detect;
mod error;
pub mod extend;
mod gemini;
mod held;
mod identity;
mod openai_chat;
mod openai_responses;
mod rebuild;
pub(crate) mod scan;
mod tape;

#[cfg(test)]
mod split_tests;

use std::borrow::Cow;
use std::ops::Range;

use bytes::Bytes;
use foldwire_core::{
    Conversation, Entry, Message, MessageKind, Origin, Pin, Role, Text, ToolLink, UnitSlot, Wire,
    utf8_lossy,
};

pub use detect::detect;
pub use error::{DetectError, WireError};
pub use held::provider_held;
pub use identity::{content_digest, fingerprint};
pub use openai_responses::declares_tools_in_items;
pub use rebuild::{MessageSize, encode, frame, message_sizes};

use scan::{Field, Mode, Syntax};
use tape::{Cursor, Tape};

/// The key of the messages array on each wire.
pub fn messages_key(wire: Wire) -> &'static str {
    crate::dialect::dialect(wire).messages_key()
}

/// Decodes a request body of `wire` into a conversation whose spans all point into `body`.
pub fn decode(wire: Wire, body: Bytes) -> Result<Conversation, WireError> {
    decode_split_from(wire, body, foldwire_core::par::BYTES_WORTH_A_THREAD)
}

/// [`decode`], its messages array decoded in shares on the machine's cores when it holds
/// at least `split_from` bytes ([`decode_items`]).
fn decode_split_from(
    wire: Wire,
    body: Bytes,
    split_from: usize,
) -> Result<Conversation, WireError> {
    let src = match foldwire_core::checked_utf8(&body) {
        Ok(s) => s,
        Err(e) => {
            return Err(WireError::NotUtf8 {
                wire,
                at: e.valid_up_to(),
            });
        }
    };
    let root = Path::root();
    let start = scan::skip_ws(src.as_bytes(), 0);
    let (end, tape) =
        scan::value_end_indexed_split(src.as_bytes(), start, split_from).map_err(|e| {
            WireError::Syntax {
                wire,
                path: scan::path_at(src, e.at),
                at: e.at,
                expected: e.expected,
            }
        })?;
    let mut cx = Cx::new(wire, src, &body, &tape);
    let trailing = scan::skip_ws(src.as_bytes(), end);
    if trailing != src.len() {
        return Err(cx.syntax(
            &root,
            Syntax {
                at: trailing,
                expected: "the end of the body after the top-level object",
            },
        ));
    }
    let top = cx.fields(&root, &(start..end))?;
    if let Some(held) = held::held_field(wire, src, &top) {
        return Err(held);
    }
    let key = messages_key(wire);
    let Some(messages) = scan::field(&top, key) else {
        return Err(cx.shape_msg(&root, &format!("a `{key}` field"), "none"));
    };
    let messages_span = messages.value.clone();
    let (model, stream) = model_and_stream(src, &top);
    let path = root.key(key);
    let string_input = wire == Wire::OpenAiResponses
        && openai_responses::decode_string_input(&mut cx, &path, &messages_span)?;
    if !string_input {
        let items = cx.items(&path, &messages_span)?;
        let pending = gemini::Pending::default();
        decode_items(&mut cx, &path, &items, (0, pending), split_from)?;
    }
    Ok(finish(cx, body.clone(), messages_span, (model, stream), 0))
}

/// The conversation a decode made, the copies among its units numbered in their ids (all
/// but the first `kept_units`, which a resumed decode took over with theirs).
fn finish(
    cx: Cx<'_>,
    source: Bytes,
    messages_span: Range<usize>,
    (model, stream): (Option<String>, bool),
    kept_units: usize,
) -> Conversation {
    let Cx {
        wire,
        entries,
        mut messages,
        ..
    } = cx;
    identity::assign_ids_after(&mut messages, kept_units);
    Conversation {
        wire,
        source,
        messages_span,
        entries,
        messages,
        overrides: Vec::new(),
        model,
        stream,
    }
}

/// The `model` and `stream` fields of a body's top-level fields.
fn model_and_stream(src: &str, top: &[Field<'_>]) -> (Option<String>, bool) {
    let model = scan::field(top, "model")
        .and_then(|f| scan::string_value(src, &f.value))
        .map(Cow::into_owned);
    let stream =
        scan::field(top, "stream").is_some_and(|f| src.get(f.value.clone()) == Some("true"));
    (model, stream)
}

/// Decodes `body` like [`decode`], reusing what `prior` (the decode of an earlier body of
/// the same wire, as [`decode`] returned it) found in the bytes both bodies start with.
///
/// An agent resends its whole history and appends to it, so almost every wire message of a
/// request lies in bytes the last request already had: those are taken from `prior` (moved,
/// not copied, their spans pointed at `body`), and only the rest of the body is validated,
/// scanned and cut into units. The result is exactly `decode(wire, body)`; the second value
/// is how many wire messages were reused (0 when nothing could be, and the body was decoded
/// afresh).
pub fn decode_after(
    wire: Wire,
    body: Bytes,
    prior: Conversation,
) -> Result<(Conversation, usize), WireError> {
    match resume(wire, &body, prior) {
        Some(Ok(done)) => Ok(done),
        // A failed or impossible resume decodes afresh, so errors are exactly `decode`'s.
        Some(Err(_)) | None => decode(wire, body).map(|conv| (conv, 0)),
    }
}

/// The decode of `body` that starts after the wire messages it shares with `prior`, or
/// `None` when it shares none that can be reused.
fn resume(
    wire: Wire,
    body: &Bytes,
    mut prior: Conversation,
) -> Option<Result<(Conversation, usize), WireError>> {
    let old = prior.source.clone();
    if prior.wire != wire || old.get(prior.messages_span.start) != Some(&b'[') {
        return None;
    }
    let shared = crate::shared_bytes::common_prefix_len(&old, body);
    // The wire messages lying wholly in the shared bytes: `body` has them at the same
    // offsets, inside the same array, after the same bytes.
    let mut kept_entries = 0;
    let mut kept_units = 0;
    let mut resume_at = 0;
    for entry in &prior.entries {
        let Some(span) = entry.raw.as_ref().and_then(|raw| offset_in(&old, raw)) else {
            break;
        };
        if span.end > shared {
            break;
        }
        kept_entries += 1;
        kept_units += entry.unit_count;
        resume_at = span.end;
    }
    let kept = prior.messages.get(..kept_units)?;
    if kept_entries == 0 || kept.iter().any(|m| m.entry >= kept_entries) {
        return None;
    }
    // Gemini pairs id-less calls and responses across contents: the decode resumes with the
    // derived ids the kept units left unanswered.
    let pending = match wire {
        Wire::Gemini => gemini::pending_after(kept)?,
        _ => gemini::Pending::default(),
    };
    let src = foldwire_core::checked_utf8(body).ok()?;
    prior.entries.truncate(kept_entries);
    prior.messages.truncate(kept_units);
    for entry in &mut prior.entries {
        entry.raw = Some(rebase(entry.raw.as_ref()?, &old, body)?);
    }
    for unit in &mut prior.messages {
        unit.raw = rebase(&unit.raw, &old, body)?;
        if let Some(source) = unit.text.source() {
            let moved = rebase(source, &old, body)?;
            unit.text.replace_source(moved);
        }
    }
    Some(decode_rest(
        wire,
        src,
        body,
        prior.messages_span.start,
        resume_at,
        (prior.entries, prior.messages),
        pending,
    ))
}

/// Decodes the wire messages after `resume_at` (the end of the last one in `kept`) and the
/// rest of the body, with `kept` already decoded.
fn decode_rest(
    wire: Wire,
    src: &str,
    body: &Bytes,
    array_start: usize,
    resume_at: usize,
    kept: (Vec<Entry>, Vec<Message>),
    pending: gemini::Pending,
) -> Result<(Conversation, usize), WireError> {
    let bytes = src.as_bytes();
    let root = Path::root();
    let key = messages_key(wire);
    let path = root.key(key);
    let syntax = |e: Syntax| WireError::Syntax {
        wire,
        path: scan::path_at(src, e.at),
        at: e.at,
        expected: e.expected,
    };
    // Items sit at depth 2: the body is depth 0, its messages array depth 1.
    let (items, array_end, tape) = scan::array_rest_indexed(bytes, resume_at, 2).map_err(syntax)?;
    let end = scan::object_rest(bytes, array_end).map_err(syntax)?;
    let trailing = scan::skip_ws(bytes, end);
    if trailing != bytes.len() {
        return Err(syntax(Syntax {
            at: trailing,
            expected: "the end of the body after the top-level object",
        }));
    }
    let messages_span = array_start..array_end;
    let (top, _) =
        scan::frame_fields(bytes, scan::skip_ws(bytes, 0), &messages_span).map_err(syntax)?;
    if let Some(held) = held::held_field(wire, src, &top) {
        return Err(held);
    }
    let (model, stream) = model_and_stream(src, &top);
    let (kept_entries, kept_units) = (kept.0.len(), kept.1.len());
    let mut cx = Cx::new(wire, src, body, &tape);
    (cx.entries, cx.messages) = kept;
    let split_from = foldwire_core::par::BYTES_WORTH_A_THREAD;
    decode_items(&mut cx, &path, &items, (kept_entries, pending), split_from)?;
    let conv = finish(cx, body.clone(), messages_span, (model, stream), kept_units);
    Ok((conv, kept_entries))
}

/// Decodes the wire messages `items` of the messages array at `path`, the first being item
/// `first` of the array (a decode that reused the ones before it starts further in), with
/// the derived Gemini call ids the items before it left unanswered.
///
/// Items of `split_from` bytes or more (a session's first turn) are decoded in contiguous
/// shares on the machine's cores ([`foldwire_core::par`]): every wire but Gemini decodes an
/// item on its own, so the shares' entries and units, put end to end, are what one pass
/// makes. Gemini pairs id-less calls across contents and decodes in one pass.
fn decode_items(
    cx: &mut Cx<'_>,
    path: &Path<'_>,
    items: &[Range<usize>],
    (first, pending): (usize, gemini::Pending),
    split_from: usize,
) -> Result<(), WireError> {
    if cx.wire == Wire::Gemini {
        cx.reserve(items.len());
        return decode_share(cx, path, items, first, pending);
    }
    // A decode from the start lets the first share's lists become its own (sized for every
    // item), so only the later shares' units are moved.
    let fresh = cx.entries.is_empty() && cx.messages.is_empty();
    if !fresh {
        cx.reserve(items.len());
    }
    let (wire, src, body, tape) = (cx.wire, cx.src, cx.body, cx.tape.tape());
    let parts = foldwire_core::par::split(
        items,
        |item| item.len(),
        split_from,
        |start, share| {
            // Every unit holds slices of the body, and each slice counts itself on the
            // buffer it was cut from: shares cutting from one buffer on two cores fight
            // over that one count. A later share cuts from a handle of its own on the same
            // bytes (same addresses, so the units are what one pass makes).
            let own;
            let body = match start {
                0 => body,
                _ => {
                    own = Bytes::from_owner(body.clone());
                    &own
                }
            };
            let mut part = Cx::new(wire, src, body, tape);
            part.reserve(if start == 0 && fresh {
                items.len()
            } else {
                share.len()
            });
            decode_share(
                &mut part,
                path,
                share,
                first + start,
                gemini::Pending::default(),
            )?;
            Ok::<_, WireError>((part.entries, part.messages))
        },
    );
    for (start, part) in parts {
        let (entries, mut messages) = part?;
        if start == 0 && fresh {
            (cx.entries, cx.messages) = (entries, messages);
            continue;
        }
        // A share numbered its entries from its own first.
        let base = cx.entries.len();
        if base > 0 {
            for unit in &mut messages {
                unit.entry += base;
            }
        }
        cx.entries.extend(entries);
        cx.messages.extend(messages);
    }
    Ok(())
}

/// Decodes `items` one after another, the first being item `first` of the array.
fn decode_share(
    cx: &mut Cx<'_>,
    path: &Path<'_>,
    items: &[Range<usize>],
    first: usize,
    mut pending: gemini::Pending,
) -> Result<(), WireError> {
    for (i, item) in items.iter().enumerate() {
        let path = path.index(first + i);
        match cx.wire {
            Wire::Anthropic => anthropic::decode_message(cx, &path, item)?,
            Wire::OpenAiChat => openai_chat::decode_message(cx, &path, item)?,
            Wire::OpenAiResponses => openai_responses::decode_item(cx, &path, item)?,
            Wire::Gemini => gemini::decode_content(cx, &path, item, &mut pending)?,
        }
    }
    Ok(())
}

/// Where `part` (a slice of `whole`) sits in `whole`.
fn offset_in(whole: &Bytes, part: &Bytes) -> Option<Range<usize>> {
    let start = part.as_ptr().addr().checked_sub(whole.as_ptr().addr())?;
    let end = start.checked_add(part.len())?;
    (end <= whole.len()).then_some(start..end)
}

/// The slice of `new` at the offsets `part` has in `old`. An empty `part` (which holds no
/// bytes, whatever it points at) stays as it is; `None` when `part` is not in `old`.
fn rebase(part: &Bytes, old: &Bytes, new: &Bytes) -> Option<Bytes> {
    if part.is_empty() {
        return Some(Bytes::new());
    }
    let span = offset_in(old, part)?;
    (span.end <= new.len()).then(|| new.slice(span))
}

/// A JSON path, built on the stack while decoding and rendered only for errors.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Path<'p> {
    parent: Option<&'p Path<'p>>,
    seg: Seg,
}

#[derive(Debug, Clone, Copy)]
enum Seg {
    Root,
    Key(&'static str),
    Index(usize),
}

impl<'p> Path<'p> {
    /// The body itself.
    pub(crate) fn root() -> Path<'static> {
        Path {
            parent: None,
            seg: Seg::Root,
        }
    }

    /// A child key.
    pub(crate) fn key(&'p self, key: &'static str) -> Path<'p> {
        Path {
            parent: Some(self),
            seg: Seg::Key(key),
        }
    }

    /// A child index.
    pub(crate) fn index(&'p self, i: usize) -> Path<'p> {
        Path {
            parent: Some(self),
            seg: Seg::Index(i),
        }
    }

    /// `messages[3].content[1].type`, or `body` for the root.
    pub(crate) fn render(&self) -> String {
        let mut segs = Vec::new();
        let mut cur = Some(self);
        while let Some(p) = cur {
            segs.push(p.seg);
            cur = p.parent;
        }
        let mut out = String::new();
        for seg in segs.iter().rev() {
            match seg {
                Seg::Root => {}
                Seg::Key(k) => {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(k);
                }
                Seg::Index(i) => {
                    out.push('[');
                    out.push_str(&i.to_string());
                    out.push(']');
                }
            }
        }
        if out.is_empty() {
            out.push_str("body");
        }
        out
    }
}

/// One unit as a decoder describes it.
pub(crate) struct UnitSpec {
    /// Where it sits in its wire message.
    pub slot: UnitSlot,
    /// Its author.
    pub role: Role,
    /// Its kind.
    pub kind: MessageKind,
    /// Its plain text.
    pub text: Text,
    /// Tool identity.
    pub tool: Option<ToolLink>,
    /// Its bytes in the body.
    pub span: Range<usize>,
}

/// Decoding state: the body and the entries and units found so far.
pub(crate) struct Cx<'a> {
    /// The validated body's structural index, read front to back.
    tape: Cursor<'a>,
    /// The wire.
    pub wire: Wire,
    /// The body as text.
    pub src: &'a str,
    body: &'a Bytes,
    /// Wire messages found.
    pub entries: Vec<Entry>,
    /// Units found.
    pub messages: Vec<Message>,
}

impl<'a> Cx<'a> {
    fn new(wire: Wire, src: &'a str, body: &'a Bytes, tape: &'a Tape) -> Self {
        Cx {
            tape: tape.cursor(),
            wire,
            src,
            body,
            entries: Vec::new(),
            messages: Vec::new(),
        }
    }

    /// The body bytes.
    pub(crate) fn bytes(&self) -> &'a [u8] {
        self.src.as_bytes()
    }

    /// A syntax error at `path`.
    pub(crate) fn syntax(&self, path: &Path<'_>, e: Syntax) -> WireError {
        WireError::Syntax {
            wire: self.wire,
            path: path.render(),
            at: e.at,
            expected: e.expected,
        }
    }

    /// A shape error naming the JSON type found at `span`.
    pub(crate) fn shape(&self, path: &Path<'_>, expected: &str, span: &Range<usize>) -> WireError {
        self.shape_msg(path, expected, scan::kind_name(self.bytes(), span))
    }

    /// A shape error with a described finding.
    pub(crate) fn shape_msg(&self, path: &Path<'_>, expected: &str, found: &str) -> WireError {
        WireError::Shape {
            wire: self.wire,
            path: path.render(),
            expected: expected.to_owned(),
            found: found.to_owned(),
        }
    }

    /// The fields of the object at `span`, or an error naming `path`.
    pub(crate) fn fields(
        &self,
        path: &Path<'_>,
        span: &Range<usize>,
    ) -> Result<Vec<Field<'a>>, WireError> {
        if self.bytes().get(span.start) != Some(&b'{') {
            return Err(self.shape(path, "an object", span));
        }
        scan::indexed_object_fields(&self.tape, self.src, span)
            .unwrap_or_else(|| scan::object_fields_mode(self.src, span, Mode::Trusted))
            .map_err(|e| self.syntax(path, e))
    }

    /// The items of the array at `span`, or an error naming `path`.
    pub(crate) fn items(
        &self,
        path: &Path<'_>,
        span: &Range<usize>,
    ) -> Result<Vec<Range<usize>>, WireError> {
        if self.bytes().get(span.start) != Some(&b'[') {
            return Err(self.shape(path, "an array", span));
        }
        match self.tape.array_items(span) {
            Some(items) => Ok(items),
            None => scan::array_items_mode(self.bytes(), span, Mode::Trusted)
                .map_err(|e| self.syntax(path, e)),
        }
    }

    /// The string value of field `key`, erroring when present but not a string.
    pub(crate) fn opt_str(
        &self,
        path: &Path<'_>,
        fields: &[Field<'a>],
        key: &'static str,
    ) -> Result<Option<Cow<'a, str>>, WireError> {
        match scan::field(fields, key) {
            None => Ok(None),
            Some(f) => match scan::string_value(self.src, &f.value) {
                Some(s) => Ok(Some(s)),
                None => Err(self.shape(&path.key(key), "a string", &f.value)),
            },
        }
    }

    /// The string value of field `key`, which must be present.
    pub(crate) fn req_str(
        &self,
        path: &Path<'_>,
        fields: &[Field<'a>],
        key: &'static str,
    ) -> Result<Cow<'a, str>, WireError> {
        self.opt_str(path, fields, key)?
            .ok_or_else(|| self.shape_msg(&path.key(key), "a string", "no such field"))
    }

    /// The text of string field `key`, unescaped when first read; an error when present but
    /// not a string.
    pub(crate) fn opt_text(
        &self,
        path: &Path<'_>,
        fields: &[Field<'a>],
        key: &'static str,
    ) -> Result<Option<Text>, WireError> {
        match scan::field(fields, key) {
            None => Ok(None),
            Some(f) if self.bytes().get(f.value.start) == Some(&b'"') => {
                Ok(Some(self.string_text(&f.value)))
            }
            Some(f) => Err(self.shape(&path.key(key), "a string", &f.value)),
        }
    }

    /// The text of string field `key`, which must be present.
    pub(crate) fn req_text(
        &self,
        path: &Path<'_>,
        fields: &[Field<'a>],
        key: &'static str,
    ) -> Result<Text, WireError> {
        self.opt_text(path, fields, key)?
            .ok_or_else(|| self.shape_msg(&path.key(key), "a string", "no such field"))
    }

    /// The raw text of a span (JSON as written).
    pub(crate) fn text(&self, span: &Range<usize>) -> &'a str {
        self.src.get(span.clone()).unwrap_or_default()
    }

    /// The text of the string literal at `span`, unescaped when first read.
    pub(crate) fn string_text(&self, span: &Range<usize>) -> Text {
        Text::deferred(self.body.slice(span.clone()), |literal| {
            let literal = utf8_lossy(literal);
            scan::unescape(&literal, &(0..literal.len())).into_owned()
        })
    }

    /// The JSON at `span` as written (tool arguments, unknown blocks), as text when first
    /// read.
    pub(crate) fn json_text(&self, span: &Range<usize>) -> Text {
        Text::deferred(self.body.slice(span.clone()), |json| {
            utf8_lossy(json).into_owned()
        })
    }

    /// The text of a tool result's content at `span` (see [`text_of_content`]), when first
    /// read.
    pub(crate) fn content_text(&self, span: &Range<usize>) -> Text {
        Text::deferred(self.body.slice(span.clone()), |content| {
            let content = utf8_lossy(content);
            text_of_content(&content, &(0..content.len()))
        })
    }

    /// Makes room for `n` more wire messages (and about twice as many units).
    pub(crate) fn reserve(&mut self, n: usize) {
        self.entries.reserve(n);
        self.messages.reserve(n.saturating_mul(2));
    }

    /// Starts a wire message.
    pub(crate) fn begin_entry(&mut self, role: Role, span: &Range<usize>) -> usize {
        self.entries.push(Entry {
            role,
            raw: Some(self.body.slice(span.clone())),
            unit_count: 0,
        });
        self.entries.len() - 1
    }

    /// Adds a wire message's string content (its whole text) as one text unit.
    pub(crate) fn string_content(&mut self, entry: usize, role: Role, span: &Range<usize>) {
        let text = self.string_text(span);
        self.unit(
            entry,
            UnitSpec {
                slot: UnitSlot::StringContent,
                role,
                kind: MessageKind::Text,
                text,
                tool: None,
                span: span.clone(),
            },
        );
    }

    /// Adds a whole wire message (or item) as one unit: where the wire has no finer grain,
    /// or the message has nothing to cut and must still never be lost.
    pub(crate) fn whole(
        &mut self,
        entry: usize,
        role: Role,
        kind: MessageKind,
        text: Text,
        tool: Option<ToolLink>,
        span: &Range<usize>,
    ) {
        self.unit(
            entry,
            UnitSpec {
                slot: UnitSlot::Whole,
                role,
                kind,
                text,
                tool,
                span: span.clone(),
            },
        );
    }

    /// Pins the unit added last, for `why`: it reaches the provider as sent and never folds.
    pub(crate) fn pin_last(&mut self, why: String) {
        if let Some(last) = self.messages.last_mut() {
            last.pin = Some(Pin::Protected(why));
        }
    }

    /// Adds a unit to entry `entry`.
    pub(crate) fn unit(&mut self, entry: usize, spec: UnitSpec) {
        if let Some(e) = self.entries.get_mut(entry) {
            e.unit_count += 1;
        }
        let raw = self.body.slice(spec.span);
        // Fingerprinted here, while the unit's bytes are in cache and, on a first turn, in
        // the decode's shares on every core; copies of one unit are numbered once the whole
        // request is decoded ([`identity::assign_ids_after`]).
        let id = identity::fingerprint(spec.role, spec.slot, &raw);
        self.messages.push(Message {
            id,
            r#ref: None,
            entry,
            slot: spec.slot,
            role: spec.role,
            kind: spec.kind,
            text: spec.text,
            tool: spec.tool,
            media: Vec::new(),
            origin: Origin::Client,
            pin: None,
            raw,
            modified: false,
            client_raw: None,
        });
    }
}

/// Text of a tool result's content (a span of the validated body): the string itself, or the `text` of its text blocks
/// joined by newlines (images and other blocks contribute nothing).
pub(crate) fn text_of_content(src: &str, span: &Range<usize>) -> String {
    if let Some(s) = scan::string_value(src, span) {
        return s.into_owned();
    }
    let Ok(items) = scan::array_items_mode(src.as_bytes(), span, Mode::Trusted) else {
        return String::new();
    };
    let mut out = String::new();
    for item in items {
        let Ok(fields) = scan::object_fields_mode(src, &item, Mode::Trusted) else {
            continue;
        };
        if let Some(text) =
            scan::field(&fields, "text").and_then(|f| scan::string_value(src, &f.value))
        {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(&text);
        }
    }
    out
}
