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
//! The payload helpers ([`InlinePayload`]) are public: `archive.spill` decodes with them.

use std::sync::{Arc, LazyLock};

use memchr::memmem::Finder;

use base64::Engine as _;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use foldwire_core::{
    BuildCx, BuildError, Component, ComponentConfig, ComponentKind, Fact, MediaClass, MediaRef,
    Message, Pin, Stage, StageCx, StageError, Turn, Wire, async_trait,
};
use foldwire_wire::dialect::{MediaSink, WireDialect};

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
        for (index, message) in conversation.messages.iter_mut().enumerate() {
            match classify_unit(wire, message) {
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
        Ok(())
    }
}

/// Classifies one unit: fills `message.media` and pins it when any payload is unrecoverable.
pub fn classify_unit(wire: Wire, message: &mut Message) -> Result<(), String> {
    message.media.clear();
    if !may_carry_media(&message.raw) {
        return Ok(());
    }
    let value: Value = serde_json::from_slice(&message.raw)
        .map_err(|e| format!("its raw bytes are not JSON: {e}"))?;
    message.media = find_media(wire, &value);
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
    Ok(())
}

/// A cheap scan that rules out units that cannot hold media, so most text units are never
/// parsed: every media shape has a key or value containing `data`, `Data`, `url` or `file`.
/// Vectorized substring searches, one per marker: a byte-window loop over large tool
/// outputs cost as much as decoding the whole request.
fn may_carry_media(raw: &[u8]) -> bool {
    static MARKERS: LazyLock<Vec<Finder<'static>>> = LazyLock::new(|| {
        ["data", "Data", "file", "File", "url"]
            .iter()
            .map(|m| Finder::new(m.as_bytes()))
            .collect()
    });
    MARKERS.iter().any(|m| m.find(raw).is_some())
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

/// True for a `data:` URL (case-insensitive scheme) with a comma before its payload.
pub fn is_data_url(s: &str) -> bool {
    s.get(..5).is_some_and(|p| p.eq_ignore_ascii_case("data:")) && s.contains(',')
}

/// An inline payload as the client wrote it: a data URL or bare base64 text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InlinePayload<'a> {
    /// The media type from the data URL, or the one the wire declared beside it.
    pub media_type: Option<String>,
    /// Whether the text is base64 (otherwise a percent-encoded data URL body).
    pub base64: bool,
    /// The encoded text.
    pub text: &'a str,
}

/// Why an inline payload could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("inline payload is not valid {what}: {detail}")]
pub struct PayloadError {
    /// What encoding was expected.
    pub what: &'static str,
    /// The decoder's message.
    pub detail: String,
}

impl<'a> InlinePayload<'a> {
    /// Parses a data URL (`data:image/png;base64,…`) or takes `text` as bare base64 with the
    /// declared media type.
    pub fn parse(text: &'a str, declared: Option<&str>) -> Self {
        if is_data_url(text) {
            let rest = text.get(5..).unwrap_or_default();
            let (meta, body) = rest.split_once(',').unwrap_or((rest, ""));
            let mut params = meta.split(';');
            let mt = params.next().unwrap_or_default().trim();
            let base64 = params.any(|p| p.trim().eq_ignore_ascii_case("base64"));
            let media_type = if mt.is_empty() {
                declared
                    .map(str::to_owned)
                    .or_else(|| Some("text/plain".to_owned()))
            } else {
                Some(mt.to_ascii_lowercase())
            };
            InlinePayload {
                media_type,
                base64,
                text: body,
            }
        } else {
            InlinePayload {
                media_type: declared.map(str::to_owned),
                base64: true,
                text,
            }
        }
    }

    /// The decoded size, computed from the encoded length without decoding.
    pub fn decoded_len(&self) -> u64 {
        if !self.base64 {
            let escapes = self.text.bytes().filter(|&b| b == b'%').count();
            return self.text.len().saturating_sub(2 * escapes) as u64;
        }
        let significant = self
            .text
            .bytes()
            .filter(|b| !b.is_ascii_whitespace() && *b != b'=')
            .count();
        (significant * 3 / 4) as u64
    }

    /// The bytes the client sent: base64-decoded (standard or URL-safe alphabet, padded or
    /// not, line breaks ignored) or percent-decoded.
    pub fn decode(&self) -> Result<Bytes, PayloadError> {
        if !self.base64 {
            return percent_decode(self.text).map(Bytes::from);
        }
        let compact: String;
        let text = if self.text.bytes().any(|b| b.is_ascii_whitespace()) {
            compact = self
                .text
                .chars()
                .filter(|c| !c.is_ascii_whitespace())
                .collect();
            compact.as_str()
        } else {
            self.text
        };
        let engines = [
            &base64::engine::general_purpose::STANDARD,
            &base64::engine::general_purpose::STANDARD_NO_PAD,
            &base64::engine::general_purpose::URL_SAFE,
            &base64::engine::general_purpose::URL_SAFE_NO_PAD,
        ];
        let mut first_error = None;
        for engine in engines {
            match engine.decode(text) {
                Ok(bytes) => return Ok(Bytes::from(bytes)),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        Err(PayloadError {
            what: "base64",
            detail: first_error.map(|e| e.to_string()).unwrap_or_default(),
        })
    }
}

fn percent_decode(text: &str) -> Result<Vec<u8>, PayloadError> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| PayloadError {
                    what: "percent-encoding",
                    detail: format!("bad escape at byte {i}"),
                })?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b);
            i += 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_urls_and_bare_base64_decode() {
        let p = InlinePayload::parse("data:image/png;base64,iVBORw0K", None);
        assert_eq!(p.media_type.as_deref(), Some("image/png"));
        assert_eq!(p.decode().unwrap().as_ref(), b"\x89PNG\r\n");
        assert_eq!(p.decoded_len(), 6);
        let p = InlinePayload::parse("aGVsbG8=", Some("text/plain"));
        assert_eq!(p.decode().unwrap().as_ref(), b"hello");
        assert_eq!(p.decoded_len(), 5);
        let p = InlinePayload::parse("data:,a%20b", None);
        assert_eq!(p.decode().unwrap().as_ref(), b"a b");
        assert_eq!(p.decoded_len(), 3);
        assert!(InlinePayload::parse("not base64!!", None).decode().is_err());
        assert!(InlinePayload::parse("data:,bad%zz", None).decode().is_err());
    }

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
