//! Inline media payloads as clients write them (data URLs, bare base64 in any of its
//! alphabets): recognising, sizing and decoding them. `media.classify` reads them to sort media;
//! `archive.spill` decodes them to store the bytes.

use base64::Engine as _;
use bytes::Bytes;

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
}
