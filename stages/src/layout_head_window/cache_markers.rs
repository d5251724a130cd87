//! Anthropic prompt-cache markers: `cache_control` at the layout's stable boundaries, within
//! the API's rules (at most 4 per request counting the client's own; in tools → system →
//! messages order, every 1h marker before every 5m marker). A client's top-level
//! `cache_control` (automatic caching: the API puts it on the last cacheable block) keeps a
//! slot of its own and counts as the last marker.
//!
//! Markers inside messages are written by replacing the unit's raw block (re-serialized with
//! or without `cache_control`, other keys kept in order); markers the client put in `system`
//! or `tools` are only touched when one must be dropped, through a top-level override.

use std::sync::LazyLock;

use bytes::Bytes;
use foldwire_core::{Conversation, FieldOverride, Message, MessageKind, Origin, UnitSlot};
use memchr::memmem::Finder;
use serde_json::{Map, Value};

/// The most `cache_control` markers Anthropic accepts in one request.
pub const MAX_MARKERS: usize = 4;

/// A marker's time to live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ttl {
    /// `"ttl": "1h"`.
    Hour,
    /// The default five minutes (`"ttl": "5m"` or no ttl).
    FiveMinutes,
}

/// Where a marker sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerSite {
    /// The n-th tool definition.
    Tool(usize),
    /// The n-th system block.
    System(usize),
    /// The unit at this index of `messages` (as sent).
    Unit(usize),
    /// The request's top-level `cache_control`: the API puts it on the last cacheable
    /// block, so it counts as a marker after every other.
    Request,
}

/// One marker found in a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marker {
    /// Where.
    pub site: MarkerSite,
    /// Its TTL.
    pub ttl: Ttl,
}

/// What placing markers did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MarkerOutcome {
    /// Markers foldwire added.
    pub placed: u64,
    /// Client markers kept.
    pub kept: u64,
    /// Client markers removed because the rules left no room for them.
    pub dropped: u64,
}

/// A broken cache-marker rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MarkerRuleViolation {
    /// More than [`MAX_MARKERS`] markers.
    #[error("the request carries {0} cache_control markers; Anthropic accepts at most 4")]
    TooMany(usize),
    /// A 1h marker after a 5m marker.
    #[error("a 1h cache_control marker at {later:?} follows a 5m marker at {earlier:?}")]
    TtlOrder {
        /// The 5m marker.
        earlier: MarkerSite,
        /// The 1h marker after it.
        later: MarkerSite,
    },
    /// A block could not be read.
    #[error("cannot read {what}: {message}")]
    Unreadable {
        /// What.
        what: String,
        /// Why.
        message: String,
    },
}

fn ttl_of(cache_control: &Value) -> Ttl {
    match cache_control.get("ttl").and_then(Value::as_str) {
        Some("1h") => Ttl::Hour,
        _ => Ttl::FiveMinutes,
    }
}

/// Whether `cache_control` occurs in the bytes (a vectorized search: it runs over every
/// unit of every request).
fn has_marker_bytes(raw: &[u8]) -> bool {
    static MARKER: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"cache_control"));
    MARKER.find(raw).is_some()
}

/// The request without its messages (the array replaced by `[]`): `tools` and `system`
/// live there, and parsing only it keeps a long history out of this stage's cost.
fn frame_bytes(conv: &Conversation) -> Vec<u8> {
    let span = &conv.messages_span;
    if span.is_empty() {
        // Not decoded from a body (built in code): the source is all there is.
        return conv.source.to_vec();
    }
    let before = conv.source.get(..span.start).unwrap_or_default();
    let after = conv.source.get(span.end..).unwrap_or_default();
    let mut frame = Vec::with_capacity(before.len() + after.len() + 2);
    frame.extend_from_slice(before);
    frame.extend_from_slice(b"[]");
    frame.extend_from_slice(after);
    frame
}

/// The top-level `tools`, `system` and `cache_control` of the request as sent (overrides
/// first); a `null` `cache_control` is none.
fn frame_fields(conv: &Conversation) -> Result<FrameFields, MarkerRuleViolation> {
    #[derive(serde::Deserialize)]
    struct Frame<'a> {
        #[serde(borrow, default)]
        tools: Option<&'a serde_json::value::RawValue>,
        #[serde(borrow, default)]
        system: Option<&'a serde_json::value::RawValue>,
        #[serde(borrow, default)]
        cache_control: Option<&'a serde_json::value::RawValue>,
    }
    let unreadable = |what: &str, e: serde_json::Error| MarkerRuleViolation::Unreadable {
        what: what.to_owned(),
        message: e.to_string(),
    };
    let overridden = |key: &str| -> Result<Option<Option<Value>>, MarkerRuleViolation> {
        match conv.overrides.iter().rev().find(|o| o.key == key) {
            Some(o) => serde_json::from_slice(&o.value)
                .map(|v| Some(Some(v)))
                .map_err(|e| unreadable(key, e)),
            None => Ok(None),
        }
    };
    let (mut tools, mut system, mut auto) = (None, None, None);
    let frame_json = frame_bytes(conv);
    if !conv.source.is_empty() && has_marker_bytes(&frame_json) {
        let frame: Frame<'_> =
            serde_json::from_slice(&frame_json).map_err(|e| unreadable("request body", e))?;
        if let Some(t) = frame.tools {
            tools = Some(serde_json::from_str(t.get()).map_err(|e| unreadable("tools", e))?);
        }
        if let Some(s) = frame.system {
            system = Some(serde_json::from_str(s.get()).map_err(|e| unreadable("system", e))?);
        }
        if let Some(c) = frame.cache_control {
            auto = Some(serde_json::from_str(c.get()).map_err(|e| unreadable("cache_control", e))?);
        }
    }
    if let Some(t) = overridden("tools")? {
        tools = t;
    }
    if let Some(s) = overridden("system")? {
        system = s;
    }
    if let Some(c) = overridden(REQUEST_MARKER)? {
        auto = c;
    }
    let auto = auto.filter(|c: &Value| !c.is_null()).map(|c| ttl_of(&c));
    Ok(FrameFields {
        tools,
        system,
        auto,
    })
}

/// The key of the request's top-level marker.
const REQUEST_MARKER: &str = "cache_control";

/// What [`frame_fields`] reads.
struct FrameFields {
    tools: Option<Value>,
    system: Option<Value>,
    /// The top-level `cache_control`'s TTL.
    auto: Option<Ttl>,
}

fn array_markers(value: Option<&Value>, site: fn(usize) -> MarkerSite) -> Vec<Marker> {
    value
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .enumerate()
                .filter_map(|(i, item)| {
                    item.get("cache_control").map(|cc| Marker {
                        site: site(i),
                        ttl: ttl_of(cc),
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

fn unit_marker(raw: &[u8]) -> Option<Ttl> {
    if !has_marker_bytes(raw) {
        return None;
    }
    let v: Value = serde_json::from_slice(raw).ok()?;
    v.get("cache_control").map(ttl_of)
}

/// Every marker of the request, in tools → system → messages order.
///
/// # Errors
/// The body's `tools`/`system` or an override could not be parsed.
pub fn markers(conv: &Conversation) -> Result<Vec<Marker>, MarkerRuleViolation> {
    let frame = frame_fields(conv)?;
    let mut out = array_markers(frame.tools.as_ref(), MarkerSite::Tool);
    out.extend(array_markers(frame.system.as_ref(), MarkerSite::System));
    out.extend(conv.messages.iter().enumerate().filter_map(|(i, m)| {
        unit_marker(&m.raw).map(|ttl| Marker {
            site: MarkerSite::Unit(i),
            ttl,
        })
    }));
    out.extend(frame.auto.map(|ttl| Marker {
        site: MarkerSite::Request,
        ttl,
    }));
    Ok(out)
}

/// Checks the Anthropic rules on a request: at most 4 markers, no 1h marker after a 5m one.
///
/// # Errors
/// The first rule broken.
pub fn check_rules(conv: &Conversation) -> Result<usize, MarkerRuleViolation> {
    let all = markers(conv)?;
    if all.len() > MAX_MARKERS {
        return Err(MarkerRuleViolation::TooMany(all.len()));
    }
    let mut first_short: Option<MarkerSite> = None;
    for m in &all {
        match (m.ttl, first_short) {
            (Ttl::FiveMinutes, None) => first_short = Some(m.site),
            (Ttl::Hour, Some(earlier)) => {
                return Err(MarkerRuleViolation::TtlOrder {
                    earlier,
                    later: m.site,
                });
            }
            _ => {}
        }
    }
    Ok(all.len())
}

/// True when a unit can carry a marker: an object block that is not reasoning (Anthropic
/// refuses `cache_control` on thinking blocks), a message's plain-string content, which
/// takes one as the single text block the string stands for, or a fold's summary, which
/// takes one on the text block it is written as.
fn markable(conv: &Conversation, i: usize) -> bool {
    conv.messages.get(i).is_some_and(|m| {
        let first = m.raw.iter().find(|b| !b.is_ascii_whitespace());
        let shape = match m.slot {
            _ if is_summary_text(m) => true,
            UnitSlot::StringContent => first == Some(&b'"'),
            _ => first == Some(&b'{'),
        };
        m.kind != MessageKind::Reasoning && !is_opaque(m) && shape
    })
}

/// A fold's summary not yet written out: its text becomes one text block at encoding.
fn is_summary_text(m: &Message) -> bool {
    matches!(m.origin, Origin::Summary(_))
        && m.raw.is_empty()
        && m.kind == MessageKind::Text
        && m.tool.is_none()
}

/// An opaque unit reaches the provider byte for byte: no marker is placed on it or taken off.
fn is_opaque(m: &Message) -> bool {
    m.kind == MessageKind::Opaque
}

fn rewrite_unit(conv: &mut Conversation, i: usize, marker: Option<Ttl>) -> bool {
    let Some(unit) = conv.messages.get_mut(i) else {
        return false;
    };
    let mut block = if is_summary_text(unit) {
        // A summary's text block, as the encoder would write it (its text is a pure
        // function of the block, so the bytes stay put from turn to turn).
        if marker.is_none() {
            return false;
        }
        text_block(unit.text.as_str().to_owned())
    } else {
        match serde_json::from_slice::<Value>(&unit.raw) {
            Ok(Value::Object(block)) => block,
            // A message's string content is shorthand for one text block (Anthropic renders
            // both alike): the marker goes on that block, the text unchanged. The encoder
            // writes the message's content as the one-block list.
            Ok(Value::String(text)) if unit.slot == UnitSlot::StringContent && marker.is_some() => {
                text_block(text)
            }
            _ => return false,
        }
    };
    match marker {
        Some(ttl) => {
            block.insert("cache_control".into(), marker_value(ttl));
        }
        None => {
            block.shift_remove("cache_control");
        }
    }
    match serde_json::to_vec(&Value::Object(block)) {
        Ok(bytes) => {
            unit.replace_raw(Bytes::from(bytes));
            true
        }
        Err(_) => false,
    }
}

/// A text block holding `text`.
fn text_block(text: String) -> Map<String, Value> {
    let mut block = Map::new();
    block.insert("type".into(), Value::String("text".into()));
    block.insert("text".into(), Value::String(text));
    block
}

/// A `cache_control` value of `ttl`.
fn marker_value(ttl: Ttl) -> Value {
    let mut cc = Map::new();
    cc.insert("type".into(), Value::String("ephemeral".into()));
    if ttl == Ttl::Hour {
        cc.insert("ttl".into(), Value::String("1h".into()));
    }
    Value::Object(cc)
}

fn strip_frame_marker(conv: &mut Conversation, key: &str, value: &mut Option<Value>, index: usize) {
    let Some(Value::Array(items)) = value.as_mut() else {
        return;
    };
    if let Some(Value::Object(item)) = items.get_mut(index) {
        item.shift_remove("cache_control");
    }
    if let Some(v) = value.as_ref()
        && let Ok(bytes) = serde_json::to_vec(v)
    {
        conv.overrides.retain(|o| o.key != key);
        conv.overrides.push(FieldOverride {
            key: key.to_owned(),
            value: Bytes::from(bytes),
        });
    }
}

/// Places markers at `boundaries` (unit indices as sent, most important first: the end of
/// the request, the end of the head, the end of the folded history). A boundary on a unit
/// that cannot carry a marker moves back to the nearest one that can. Client markers in
/// `tools`/`system` are kept; client markers in the messages keep the room the layout's own
/// markers leave; any marker the rules cannot hold is removed and counted.
///
/// # Errors
/// The body's `tools`/`system` could not be parsed.
pub fn place(
    conv: &mut Conversation,
    boundaries: &[usize],
) -> Result<MarkerOutcome, MarkerRuleViolation> {
    let FrameFields {
        mut tools,
        mut system,
        auto,
    } = frame_fields(conv)?;
    let mut frame = array_markers(tools.as_ref(), MarkerSite::Tool);
    frame.extend(array_markers(system.as_ref(), MarkerSite::System));
    // The client's top-level marker takes a slot of its own (the API puts it on the last
    // cacheable block, wherever that is).
    let reserved = usize::from(auto.is_some());
    let client_units: Vec<(usize, Ttl)> = conv
        .messages
        .iter()
        .enumerate()
        .filter_map(|(i, m)| unit_marker(&m.raw).map(|t| (i, t)))
        .collect();
    let mut outcome = MarkerOutcome::default();

    // Client markers in tools/system beyond the limit (the client's own error) go first.
    while frame.len() + reserved > MAX_MARKERS {
        if let Some(m) = frame.pop() {
            match m.site {
                MarkerSite::Tool(i) => strip_frame_marker(conv, "tools", &mut tools, i),
                MarkerSite::System(i) => strip_frame_marker(conv, "system", &mut system, i),
                MarkerSite::Unit(_) | MarkerSite::Request => {}
            }
            outcome.dropped += 1;
        }
    }
    // A client marker on an opaque unit (a compaction block) cannot be taken off: the unit
    // reaches the provider as sent, so its marker keeps a slot of its own too.
    let fixed = |i: usize| conv.messages.get(i).is_some_and(is_opaque);
    let fixed_count = client_units.iter().filter(|(i, _)| fixed(*i)).count();
    let mut room = MAX_MARKERS.saturating_sub(frame.len() + reserved + fixed_count);

    // The layout's boundaries, moved back to markable units, deduplicated.
    let mut ours: Vec<usize> = Vec::new();
    for &b in boundaries {
        let mut i = b.min(conv.messages.len());
        let target = loop {
            if markable(conv, i) {
                break Some(i);
            }
            if i == 0 {
                break None;
            }
            i -= 1;
        };
        if let Some(t) = target
            && !ours.contains(&t)
            && room > 0
        {
            ours.push(t);
            room -= 1;
        }
    }
    // Client message markers keep what room is left, newest first.
    let mut kept_client: Vec<(usize, Ttl)> = Vec::new();
    for &(i, ttl) in client_units.iter().rev() {
        if ours.contains(&i) || fixed(i) {
            kept_client.push((i, ttl));
        } else if room > 0 {
            room -= 1;
            kept_client.push((i, ttl));
        }
    }
    // TTLs in send order: ours take 1h when a kept 1h marker follows them; a client 1h
    // marker after a 5m one is dropped.
    let mut chosen: Vec<(usize, Ttl, bool)> =
        kept_client.iter().map(|&(i, t)| (i, t, true)).collect();
    // The top-level marker, after every unit.
    let after_all = conv.messages.len();
    chosen.extend(auto.map(|t| (after_all, t, true)));
    for &i in &ours {
        if !kept_client.iter().any(|&(c, _)| c == i) {
            chosen.push((i, Ttl::FiveMinutes, false));
        }
    }
    chosen.sort_by_key(|c| c.0);
    let frame_short = frame.iter().any(|m| m.ttl == Ttl::FiveMinutes);
    for k in 0..chosen.len() {
        let later_hour = chosen.iter().skip(k + 1).any(|c| c.1 == Ttl::Hour && c.2);
        if let Some(c) = chosen.get_mut(k)
            && !c.2
            && later_hour
            && !frame_short
        {
            c.1 = Ttl::Hour;
        }
    }
    let mut seen_short = frame_short;
    let mut keep: Vec<(usize, Ttl, bool)> = Vec::new();
    for c in chosen {
        if c.1 == Ttl::Hour && seen_short && !fixed(c.0) {
            continue;
        }
        if c.1 == Ttl::FiveMinutes {
            seen_short = true;
        }
        keep.push(c);
    }
    // Rewrite the units whose marker changes.
    for &(i, _) in &client_units {
        if !keep.iter().any(|k| k.0 == i && k.2) {
            if keep.iter().any(|k| k.0 == i) {
                continue;
            }
            if rewrite_unit(conv, i, None) {
                outcome.dropped += 1;
            }
        } else {
            outcome.kept += 1;
        }
    }
    for &(i, ttl, client) in &keep {
        if !client && rewrite_unit(conv, i, Some(ttl)) {
            outcome.placed += 1;
        }
    }
    // A top-level 1h marker after a 5m one cannot stand either.
    if auto.is_some() && !keep.iter().any(|k| k.0 == after_all && k.2) {
        conv.overrides.retain(|o| o.key != REQUEST_MARKER);
        conv.overrides.push(FieldOverride {
            key: REQUEST_MARKER.to_owned(),
            value: Bytes::from_static(b"null"),
        });
        outcome.dropped += 1;
    } else if auto.is_some() {
        outcome.kept += 1;
    }
    Ok(outcome)
}
