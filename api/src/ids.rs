//! Identifiers: sessions, message refs and block ids.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The longest session id foldwire accepts.
pub const MAX_SESSION_ID_LEN: usize = 200;

/// A validated session id: 1–200 characters of `[A-Za-z0-9._-]`, not starting with a dot.
///
/// The restriction is what lets every backend use the id as one path segment: no `/`, no
/// `..`, no NUL, nothing that could escape the session's prefix.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(String);

/// Why a session id was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionIdError {
    /// The id was empty.
    #[error("session id is empty")]
    Empty,
    /// The id was longer than [`MAX_SESSION_ID_LEN`].
    #[error("session id is {len} characters long; the limit is {MAX_SESSION_ID_LEN}")]
    TooLong {
        /// Its length.
        len: usize,
    },
    /// The id held a character outside `[A-Za-z0-9._-]` or started with a dot.
    #[error(
        "session id {id:?} has {bad:?} at byte {at}: use only letters, digits, '.', '_' and '-', not starting with '.'"
    )]
    BadChar {
        /// The id as given (escaped when printed).
        id: String,
        /// The offending character.
        bad: char,
        /// Its byte offset.
        at: usize,
    },
}

impl SessionId {
    /// Validates and wraps a session id.
    pub fn new(id: impl Into<String>) -> Result<Self, SessionIdError> {
        let id = id.into();
        if id.is_empty() {
            return Err(SessionIdError::Empty);
        }
        if id.len() > MAX_SESSION_ID_LEN {
            return Err(SessionIdError::TooLong { len: id.len() });
        }
        for (at, c) in id.char_indices() {
            let ok = c.is_ascii_alphanumeric() || c == '_' || c == '-' || (c == '.' && at > 0);
            if !ok {
                return Err(SessionIdError::BadChar { id, bad: c, at });
            }
        }
        Ok(SessionId(id))
    }

    /// The id as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for SessionId {
    type Err = SessionIdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SessionId::new(s)
    }
}

impl Serialize for SessionId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for SessionId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        SessionId::new(s).map_err(serde::de::Error::custom)
    }
}

/// Why a ref or block id failed to parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{given:?} is not a valid {what}: expected {expected}")]
pub struct IdParseError {
    /// What kind of id was expected.
    pub what: &'static str,
    /// The text given.
    pub given: String,
    /// The expected shape.
    pub expected: &'static str,
}

/// A message ref, `m00001`…: per session, monotonic, never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ref(pub u32);

/// A block id, `b1`…: per session, monotonic, never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockId(pub u32);

/// Longest text of a numbered id: a one-letter prefix and the ten digits of a `u32`.
const ID_TEXT_MAX: usize = 11;

/// `prefix` and `n` zero-padded to `width` digits, written into `buf`: what `Display`
/// writes, without the formatting machinery (a state file holds thousands of ids, and
/// writing them through `Display` was a sixth of saving one).
fn id_text<'a>(prefix: &str, width: usize, n: u32, buf: &'a mut [u8; ID_TEXT_MAX]) -> &'a str {
    let mut digits = [b'0'; 10];
    let mut len = 0;
    let mut rest = n;
    while rest > 0 || len == 0 {
        // Filled from the end: the last digit first.
        if let Some(d) = digits.get_mut(9 - len) {
            *d = b'0' + (rest % 10) as u8;
        }
        rest /= 10;
        len += 1;
    }
    let shown = len.max(width).min(10);
    let mut at = 0;
    for &b in prefix
        .as_bytes()
        .iter()
        .chain(digits.iter().skip(10 - shown))
    {
        if let Some(slot) = buf.get_mut(at) {
            *slot = b;
            at += 1;
        }
    }
    buf.get(..at)
        .and_then(|text| std::str::from_utf8(text).ok())
        .unwrap_or_default()
}

/// Reads a numbered id from a string, borrowed when the input allows it (no `String` per
/// id when a state file is loaded).
struct IdVisitor<T>(std::marker::PhantomData<T>);

impl<T: FromStr<Err = IdParseError>> serde::de::Visitor<'_> for IdVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an id string")
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<T, E> {
        v.parse().map_err(E::custom)
    }
}

macro_rules! numbered_id {
    ($ty:ident, $prefix:literal, $upper:literal, $width:literal, $bare:literal, $what:literal, $expected:literal) => {
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{:0", $width, "}"), self.0)
            }
        }

        impl FromStr for $ty {
            type Err = IdParseError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                let err = || IdParseError {
                    what: $what,
                    given: s.to_owned(),
                    expected: $expected,
                };
                // Refs arrive typed by people and written by models: surrounding space and
                // an upper-case prefix (`M00003`, ` b3`) name the same id.
                let trimmed = s.trim();
                let digits = match trimmed
                    .strip_prefix($prefix)
                    .or_else(|| trimmed.strip_prefix($upper))
                {
                    Some(d) => d,
                    // Where only this kind of id fits, a bare number names it (`5` is b5).
                    None if $bare => trimmed,
                    None => return Err(err()),
                };
                if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(err());
                }
                let n: u32 = digits.parse().map_err(|_| err())?;
                if n == 0 {
                    return Err(err());
                }
                Ok($ty(n))
            }
        }

        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut buf = [0u8; ID_TEXT_MAX];
                s.serialize_str(id_text($prefix, $width, self.0, &mut buf))
            }
        }

        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                d.deserialize_str(IdVisitor::<$ty>(std::marker::PhantomData))
            }
        }
    };
}

numbered_id!(
    Ref,
    "m",
    "M",
    5,
    false,
    "message ref",
    "'m' and a positive number, e.g. m00042"
);
numbered_id!(
    BlockId,
    "b",
    "B",
    1,
    true,
    "block id",
    "'b' and a positive number, e.g. b7, or the bare number"
);

/// Either a message ref or a block id, as the compress and restore operations accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum AnyRef {
    /// A message ref.
    Message(Ref),
    /// A block id.
    Block(BlockId),
}

impl FromStr for AnyRef {
    type Err = IdParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim_start();
        if t.starts_with(['b', 'B']) {
            s.parse().map(AnyRef::Block)
        } else if t.starts_with(['m', 'M']) {
            s.parse().map(AnyRef::Message)
        } else {
            Err(IdParseError {
                what: "ref",
                given: s.to_owned(),
                expected: "a message ref like m00042 or a block id like b7",
            })
        }
    }
}

impl fmt::Display for AnyRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AnyRef::Message(r) => r.fmt(f),
            AnyRef::Block(b) => b.fmt(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_serialize_as_they_display_and_read_back() {
        for n in [0, 1, 7, 42, 9_999, 99_999, 100_000, 1_234_567, u32::MAX] {
            let (r, b) = (Ref(n), BlockId(n));
            let json = serde_json::to_string(&(r, b)).unwrap_or_default();
            assert_eq!(json, format!("[\"{r}\",\"{b}\"]"));
            if n > 0 {
                let back: (Ref, BlockId) =
                    serde_json::from_str(&json).unwrap_or((Ref(0), BlockId(0)));
                assert_eq!(back, (r, b));
            }
        }
        // Read from a string with escapes too (not borrowable), and refused when malformed.
        let escaped: Result<Ref, _> = serde_json::from_str("\"\\u006d00003\"");
        assert_eq!(escaped.ok(), Some(Ref(3)));
        assert!(serde_json::from_str::<Ref>("\"x1\"").is_err());
        assert!(serde_json::from_str::<Ref>("5").is_err());
    }

    #[test]
    fn refs_format_and_parse() {
        assert_eq!(Ref(42).to_string(), "m00042");
        assert_eq!("m00042".parse::<Ref>(), Ok(Ref(42)));
        assert_eq!(Ref(123_456).to_string(), "m123456");
        assert_eq!(BlockId(7).to_string(), "b7");
        assert_eq!("b7".parse::<BlockId>(), Ok(BlockId(7)));
        assert!("m0".parse::<Ref>().is_err());
        assert!("m-1".parse::<Ref>().is_err());
        assert!("x1".parse::<AnyRef>().is_err());
        assert_eq!("b3".parse::<AnyRef>(), Ok(AnyRef::Block(BlockId(3))));
    }

    // acp §26 #133: a block id is accepted as `b5` or `5`. A bare number is read as a block
    // only where nothing but a block fits (`BlockId`): a message ref keeps its `m`, and
    // where either may come (`AnyRef`) a bare number stays ambiguous and is refused.
    #[test]
    fn a_bare_number_names_a_block_where_only_a_block_fits() {
        assert_eq!("5".parse::<BlockId>(), Ok(BlockId(5)));
        assert_eq!(" 12 ".parse::<BlockId>(), Ok(BlockId(12)));
        assert_eq!("b5".parse::<BlockId>(), Ok(BlockId(5)));
        assert!("0".parse::<BlockId>().is_err());
        assert!("5x".parse::<BlockId>().is_err());
        assert!("5".parse::<Ref>().is_err());
        assert!("5".parse::<AnyRef>().is_err());
    }

    #[test]
    fn refs_parse_trimmed_and_in_any_case() {
        for given in ["M00003", " m00003", "m00003 ", "\tM3\n"] {
            assert_eq!(given.parse::<Ref>(), Ok(Ref(3)), "{given:?}");
            assert_eq!(
                given.parse::<AnyRef>(),
                Ok(AnyRef::Message(Ref(3))),
                "{given:?}"
            );
        }
        for given in ["B3", " b3 ", "B03"] {
            assert_eq!(given.parse::<BlockId>(), Ok(BlockId(3)), "{given:?}");
            assert_eq!(
                given.parse::<AnyRef>(),
                Ok(AnyRef::Block(BlockId(3))),
                "{given:?}"
            );
        }
        let json: AnyRef = serde_json::from_str("\" M00007\"").unwrap();
        assert_eq!(json, AnyRef::Message(Ref(7)));
        for bad in ["", " ", "m", "m 3", "mm3", "M-3", "x3", "b3x"] {
            assert!(bad.parse::<AnyRef>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn session_ids_cannot_escape_a_prefix() {
        assert!(SessionId::new("agent-1.session_2").is_ok());
        for bad in ["", "../x", "/etc", "a/b", "a\0b", ".hidden", "a b", "é"] {
            assert!(SessionId::new(bad).is_err(), "{bad:?} accepted");
        }
        assert!(matches!(
            SessionId::new("a".repeat(MAX_SESSION_ID_LEN + 1)),
            Err(SessionIdError::TooLong { .. })
        ));
    }
}
