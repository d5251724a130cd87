//! Stage `media.classify`: finds every media payload in each unit and sorts it into
//! archivable (inline base64 / data URLs: foldwire can store the bytes, so the unit may fold
//! once `archive.spill` stored them) and unrecoverable (remote URLs, provider file
//! references, Gemini `fileData` / `videoMetadata`: foldwire never sees the bytes, so the unit
//! is pinned and never folds).
//!
//! Payloads are found wherever they are nested: images inside Anthropic `tool_result`
//! content or `document` content sources, inside Responses `function_call_output.output`,
//! inside Gemini `functionResponse.parts`. Tool-call arguments and Gemini function responses'
//! free-form `response` objects are the tool's data, not provider media, and are not searched.
//!
//! Inline payloads are read with [`crate::inline_payload`], which `archive.spill` shares.

use std::sync::{Arc, LazyLock};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use foldwire_core::{
    BuildCx, BuildError, Component, ComponentConfig, ComponentKind, Fact, MediaClass, MediaRef,
    Message, Origin, Pin, Stage, StageCx, StageError, Turn, Wire, async_trait,
};
use foldwire_wire::dialect::{MediaSink, WireDialect, WireMarkers};
use foldwire_wire::request::content_digest;

use crate::digest_memo::DigestMemo;
use crate::inline_payload::{InlinePayload, is_data_url};

/// The registered stage name.
pub const NAME: &str = MediaClassifyConfig::NAME;

/// Parameters of `media.classify` (none yet; unknown keys are refused).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MediaClassifyConfig {}

impl ComponentConfig for MediaClassifyConfig {
    const KIND: ComponentKind = ComponentKind::Stage;
    const NAME: &'static str = "media.classify";
    const DESCRIPTION: &'static str =
        "Sorts every media payload into archivable (inline bytes) or unrecoverable (pinned).";

    fn build(self, _cx: &BuildCx<'_>) -> Result<Component, BuildError> {
        Ok(Component::Stage(Arc::new(MediaClassify)))
    }
}

/// The `media.classify` stage.
#[derive(Debug, Clone, Copy, Default)]
pub struct MediaClassify;

foldwire_core::register_config!(MediaClassifyConfig);

#[async_trait]
impl Stage for MediaClassify {
    fn name(&self) -> &'static str {
        NAME
    }

    fn requires(&self) -> &'static [Fact] {
        &[Fact::Decoded]
    }

    fn provides(&self) -> &'static [Fact] {
        &[Fact::MediaClassified]
    }

    async fn run(&self, turn: &mut Turn, _cx: &StageCx) -> Result<(), StageError> {
        let Some(conversation) = turn.conversation.as_mut() else {
            return Err(StageError::NotDecoded { stage: NAME });
        };
        let wire = conversation.wire;
        let (mut archivable, mut unrecoverable, mut pinned) = (0u64, 0u64, 0u64);
        let mut memo = turn
            .carry
            .remove::<LastClassified>()
            .filter(|last| last.wire == wire)
            .unwrap_or(LastClassified {
                wire,
                media: DigestMemo::default(),
            });
        memo.media.begin_turn();
        let mut searched = 0u64;
        for (index, message) in conversation.messages.iter_mut().enumerate() {
            // A client unit's id is a fingerprint of its bytes: bytes an earlier turn
            // classified are not searched again.
            let digest = (message.origin == Origin::Client)
                .then(|| content_digest(&message.id))
                .flatten();
            let mut searched_now = None;
            let known = match digest {
                Some(d) => memo
                    .media
                    .get_or(d, || {
                        let result = classify_unit(wire, message);
                        let media = result.is_ok().then(|| message.media.clone());
                        searched_now = Some(result);
                        media
                    })
                    .cloned(),
                None => {
                    searched_now = Some(classify_unit(wire, message));
                    None
                }
            };
            let classified = match (searched_now, known) {
                (Some(result), _) => {
                    searched += 1;
                    result
                }
                (None, Some(media)) => {
                    message.media = media;
                    pin_unrecoverable(message);
                    Ok(())
                }
                (None, None) => Ok(()),
            };
            match classified {
                Ok(()) => {}
                Err(why) => {
                    turn.report.warn(
                        NAME,
                        "media_unparsed",
                        format!(
                            "unit #{index} (wire message {}) was not searched for media: {why}",
                            message.entry
                        ),
                    );
                    continue;
                }
            }
            for m in &message.media {
                match m.class {
                    MediaClass::Archivable => archivable += 1,
                    MediaClass::Unrecoverable { .. } => unrecoverable += 1,
                }
            }
            if matches!(message.pin, Some(Pin::UnrecoverableMedia(_))) {
                pinned += 1;
            }
        }
        turn.report.count("media.archivable", archivable);
        turn.report.count("media.unrecoverable", unrecoverable);
        turn.report.count("media.units_pinned", pinned);
        turn.report.count("media.units_searched", searched);
        memo.media.end_turn();
        turn.carry.insert(memo);
        Ok(())
    }
}

/// What `media.classify` found in the session's client units, by the digest of each unit's
/// bytes ([`content_digest`]), carried from turn to turn ([`Turn::carry`]): units a client
/// resends are not searched again (the search reads every byte of every unit).
#[derive(Debug)]
struct LastClassified {
    wire: Wire,
    media: DigestMemo<Vec<MediaRef>>,
}

/// Classifies one unit: fills `message.media` and pins it when any payload is unrecoverable.
pub fn classify_unit(wire: Wire, message: &mut Message) -> Result<(), String> {
    message.media.clear();
    if !may_carry_media(wire, &message.raw) {
        return Ok(());
    }
    let value: Value = serde_json::from_slice(&message.raw)
        .map_err(|e| format!("its raw bytes are not JSON: {e}"))?;
    message.media = find_media(wire, &value);
    pin_unrecoverable(message);
    Ok(())
}

/// Pins a unit whose media includes an unrecoverable payload.
fn pin_unrecoverable(message: &mut Message) {
    let reasons: Vec<&str> = message
        .media
        .iter()
        .filter_map(|m| match &m.class {
            MediaClass::Unrecoverable { reason } => Some(reason.as_str()),
            MediaClass::Archivable => None,
        })
        .collect();
    // An existing pin (a protected tool) stays; unrecoverable media adds its own reason.
    if !reasons.is_empty() && message.pin.is_none() {
        message.pin = Some(Pin::UnrecoverableMedia(reasons.join("; ")));
    }
}

/// A cheap scan that rules out units that cannot hold media, so most text units are never
/// parsed: each wire's media shapes contain one of its markers
/// ([`foldwire_wire::dialect::Dialect::media_markers`]: quoted part types on Anthropic and
/// OpenAI, so a text that mentions a file or a URL is not parsed either). Vectorized
/// substring searches, one per marker: a byte-window loop over large tool outputs cost as
/// much as decoding the whole request.
fn may_carry_media(wire: Wire, raw: &[u8]) -> bool {
    static MARKERS: LazyLock<WireMarkers> =
        LazyLock::new(|| WireMarkers::new(|d| d.media_markers()));
    MARKERS.any_in(wire, raw)
}

/// Every media payload inside one unit's JSON, in document order.
pub fn find_media(wire: Wire, unit: &Value) -> Vec<MediaRef> {
    let mut found = Vec::new();
    let mut pointer = String::new();
    walk(wire, unit, &mut pointer, &mut found);
    found
}

/// Appends a JSON-pointer segment, escaped per RFC 6901.
fn push_segment(pointer: &mut String, segment: &str) {
    pointer.push('/');
    for c in segment.chars() {
        match c {
            '~' => pointer.push_str("~0"),
            '/' => pointer.push_str("~1"),
            c => pointer.push(c),
        }
    }
}

fn walk(wire: Wire, value: &Value, pointer: &mut String, found: &mut Vec<MediaRef>) {
    match value {
        Value::Object(map) => {
            if inspect(wire, map, pointer, found) {
                return; // a media object: its children are the payload itself
            }
            for (key, child) in map {
                if is_tool_data(wire, map, key) {
                    continue;
                }
                let len = pointer.len();
                push_segment(pointer, key);
                walk(wire, child, pointer, found);
                pointer.truncate(len);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                let len = pointer.len();
                push_segment(pointer, &i.to_string());
                walk(wire, child, pointer, found);
                pointer.truncate(len);
            }
        }
        _ => {}
    }
}

/// Fields that hold a tool's own data (call arguments, Gemini function responses), which
/// the provider never reads as media.
fn is_tool_data(wire: Wire, map: &Map<String, Value>, key: &str) -> bool {
    wire.dialect().is_tool_data(map, key)
}

/// The kind of a payload from its media type.
fn kind_of(media_type: Option<&str>, fallback: &str) -> String {
    let Some(mt) = media_type else {
        return fallback.to_owned();
    };
    let mt = mt.to_ascii_lowercase();
    if mt.starts_with("image/") {
        "image".to_owned()
    } else if mt.starts_with("audio/") {
        "audio".to_owned()
    } else if mt.starts_with("video/") {
        "video".to_owned()
    } else if mt == "application/pdf" || mt.starts_with("text/") {
        "document".to_owned()
    } else {
        fallback.to_owned()
    }
}

struct Found<'a> {
    pointer: &'a str,
    found: &'a mut Vec<MediaRef>,
}

impl MediaSink for Found<'_> {
    /// An inline payload at `field` (a child pointer segment path like `/source/data`).
    fn inline(&mut self, kind: &str, field: &str, text: &str, declared: Option<&str>) {
        let payload = InlinePayload::parse(text, declared);
        let media_type = payload.media_type.clone();
        self.found.push(MediaRef {
            kind: kind_of(media_type.as_deref(), kind),
            media_type,
            class: MediaClass::Archivable,
            pointer: format!("{}{field}", self.pointer),
            size: Some(payload.decoded_len()),
        });
    }

    fn unrecoverable(&mut self, kind: &str, field: &str, media_type: Option<&str>, reason: String) {
        self.found.push(MediaRef {
            kind: kind_of(media_type, kind),
            media_type: media_type.map(str::to_owned),
            class: MediaClass::Unrecoverable { reason },
            pointer: format!("{}{field}", self.pointer),
            size: None,
        });
    }

    /// A URL that is either inline (`data:`) or remote.
    fn url(&mut self, kind: &str, field: &str, url: &str, declared: Option<&str>) {
        if is_data_url(url) {
            self.inline(kind, field, url, declared);
        } else {
            self.unrecoverable(
                kind,
                field,
                declared,
                format!("remote URL {}", shorten(url)),
            );
        }
    }
}

/// Recognizes a media object of the wire at this position; true when it was one.
fn inspect(wire: Wire, map: &Map<String, Value>, pointer: &str, found: &mut Vec<MediaRef>) -> bool {
    wire.dialect().media_at(map, &mut Found { pointer, found })
}

/// A URL cut to a readable length for reasons and warnings (signed URLs can be huge).
fn shorten(url: &str) -> String {
    const MAX: usize = 200;
    match url.char_indices().nth(MAX) {
        Some((at, _)) => format!("{}…", url.get(..at).unwrap_or(url)),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_urls_are_shortened_in_reasons() {
        let long = format!("https://example.com/{}", "x".repeat(500));
        let short = shorten(&long);
        assert!(short.len() < 210 && short.starts_with("https://example.com/xxx"));
        assert_eq!(shorten("https://a/b"), "https://a/b");
    }

    #[test]
    fn pointers_escape_segments() {
        let mut p = String::new();
        push_segment(&mut p, "a/b~c");
        assert_eq!(p, "/a~1b~0c");
    }
}
