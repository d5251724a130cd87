//! A unit's plain text, decoded from the request bytes only when something reads it.
//!
//! Most units of a turn are never previewed, searched or summarized: they are counted from
//! their raw bytes and re-emitted verbatim. Decoding every tool output into a `String` on
//! every request was a fifth of the codec's time, so a codec hands over the bytes and how to
//! decode them, and the text is produced once, on first read.

use std::borrow::{Borrow, Cow};
use std::fmt;
use std::ops::Deref;
use std::sync::OnceLock;

use bytes::Bytes;

/// `bytes` as text, invalid UTF-8 replaced by U+FFFD, borrowed when it is valid.
///
/// The same result as `String::from_utf8_lossy`, which checks byte by byte even when the
/// bytes are valid: [`checked_utf8`] checks them in blocks, and on a session's tool outputs
/// the lossy check was a quarter of a first turn's fold.
pub fn utf8_lossy(bytes: &[u8]) -> Cow<'_, str> {
    match checked_utf8(bytes) {
        Ok(text) => Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

/// `bytes` as text, when they are UTF-8: `std::str::from_utf8` with a SIMD check first.
///
/// A first turn checks the whole request body and then every folded original again (11 MB
/// each at 10,000 messages); the SIMD check reads valid text several times faster than
/// std's, and only invalid bytes go through std's check for its error (where they stop
/// being UTF-8).
///
/// # Errors
/// Where the bytes stop being UTF-8.
pub fn checked_utf8(bytes: &[u8]) -> Result<&str, std::str::Utf8Error> {
    match simdutf8::basic::from_utf8(bytes) {
        Ok(text) => Ok(text),
        Err(_) => std::str::from_utf8(bytes),
    }
}

/// Turns a unit's source bytes into its text.
pub type DecodeText = fn(&[u8]) -> String;

/// A unit's plain text: either held, or decoded from source bytes on first read.
///
/// It reads like a `&str` (through `Deref`), compares by content, and clones keep whatever
/// was already decoded.
#[derive(Clone, Default)]
pub struct Text(Repr);

#[derive(Clone)]
enum Repr {
    Held(String),
    Deferred {
        source: Bytes,
        decode: DecodeText,
        decoded: OnceLock<String>,
    },
}

impl Default for Repr {
    fn default() -> Self {
        Repr::Held(String::new())
    }
}

impl Text {
    /// Text decoded from `source` by `decode` the first time it is read.
    pub fn deferred(source: Bytes, decode: DecodeText) -> Self {
        Text(Repr::Deferred {
            source,
            decode,
            decoded: OnceLock::new(),
        })
    }

    /// The text, decoding it now if nobody has read it yet.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Repr::Held(s) => s,
            Repr::Deferred {
                source,
                decode,
                decoded,
            } => decoded.get_or_init(|| decode(source)),
        }
    }

    /// True once the text exists as a string (held, or decoded by an earlier read).
    pub fn is_decoded(&self) -> bool {
        match &self.0 {
            Repr::Held(_) => true,
            Repr::Deferred { decoded, .. } => decoded.get().is_some(),
        }
    }

    /// Bytes a search for plain words may scan without decoding: the text once it exists,
    /// else the source it decodes from. A codec's source is the text as JSON escapes it, so
    /// a word these bytes lack, the text lacks too, unless an escape sits inside the word
    /// (`err\u006fr`); a pre-filter may skip such text, and read the text itself to be sure
    /// of a match.
    pub fn searchable(&self) -> &[u8] {
        match &self.0 {
            Repr::Held(s) => s.as_bytes(),
            Repr::Deferred {
                source, decoded, ..
            } => decoded.get().map_or(source.as_ref(), |s| s.as_bytes()),
        }
    }

    /// The bytes a deferred text decodes from (`None` for held text).
    pub fn source(&self) -> Option<&Bytes> {
        match &self.0 {
            Repr::Held(_) => None,
            Repr::Deferred { source, .. } => Some(source),
        }
    }

    /// Reads a deferred text from `source` instead, which holds the same bytes as
    /// [`Self::source`] (the next request resent them): a decoder reusing an earlier decode
    /// points its texts at the new body, so no earlier body stays in memory through them.
    /// Held text has no source and stays as it is.
    pub fn replace_source(&mut self, source: Bytes) {
        if let Repr::Deferred { source: old, .. } = &mut self.0 {
            *old = source;
        }
    }

    /// The text as an owned string.
    pub fn into_string(self) -> String {
        match self.0 {
            Repr::Held(s) => s,
            Repr::Deferred {
                source,
                decode,
                decoded,
            } => decoded.into_inner().unwrap_or_else(|| decode(&source)),
        }
    }
}

impl Deref for Text {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Text {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for Text {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl From<String> for Text {
    fn from(s: String) -> Self {
        Text(Repr::Held(s))
    }
}

impl From<&str> for Text {
    fn from(s: &str) -> Self {
        Text(Repr::Held(s.to_owned()))
    }
}

impl fmt::Debug for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq for Text {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Text {}

impl PartialEq<str> for Text {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Text {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for Text {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other.as_str()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upper(b: &[u8]) -> String {
        String::from_utf8_lossy(b).to_uppercase()
    }

    #[test]
    fn deferred_text_decodes_once_on_first_read() {
        let t = Text::deferred(Bytes::from_static(b"abc"), upper);
        assert!(!t.is_decoded());
        let copy = t.clone();
        assert_eq!(t, "ABC");
        assert!(t.is_decoded());
        // A clone made before the read decodes on its own; one made after keeps the result.
        assert!(!copy.is_decoded());
        assert!(t.clone().is_decoded());
        assert_eq!(copy.len(), 3);
        // Searchable bytes: the source until decoded, then the text.
        let fresh = Text::deferred(Bytes::from_static(b"abc"), upper);
        assert_eq!(fresh.searchable(), b"abc");
        assert!(!fresh.is_decoded());
        assert_eq!(t.searchable(), b"ABC");
        assert_eq!(Text::from("held").searchable(), b"held");
        assert_eq!(copy.into_string(), "ABC");
        assert_eq!(
            Text::from("x"),
            Text::deferred(Bytes::from_static(b"X"), |b| {
                String::from_utf8_lossy(b).to_lowercase()
            })
        );
        assert_eq!(format!("{t} {t:?}"), "ABC \"ABC\"");
    }

    #[test]
    fn lossy_text_borrows_valid_bytes_and_replaces_invalid_ones() {
        assert!(matches!(
            utf8_lossy("héllo".as_bytes()),
            Cow::Borrowed("héllo")
        ));
        let bad = b"ab\xffc\xe2\x82";
        assert_eq!(utf8_lossy(bad), String::from_utf8_lossy(bad));
        assert_eq!(utf8_lossy(bad), "ab\u{FFFD}c\u{FFFD}");
    }

    #[test]
    fn checked_utf8_agrees_with_std_and_says_where_bytes_stop_being_text() {
        // Long enough for the vectorized path, with multi-byte characters across its blocks.
        let text = "tool output é ✓ 🦀 ".repeat(200);
        assert_eq!(checked_utf8(text.as_bytes()), Ok(text.as_str()));
        for near in [0, 1, 63, 64, 1000, 2999] {
            let cut = (near..).find(|&i| text.is_char_boundary(i)).unwrap();
            let mut bad = text.as_bytes().to_vec();
            bad.insert(cut, 0xff);
            let ours = checked_utf8(&bad).unwrap_err();
            let std = std::str::from_utf8(&bad).unwrap_err();
            assert_eq!(ours, std);
            assert_eq!(ours.valid_up_to(), cut);
        }
        // A character cut short at the end.
        let short = &text.as_bytes()[..text.len() - 2];
        assert_eq!(checked_utf8(short), std::str::from_utf8(short));
    }
}
