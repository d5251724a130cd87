//! The persistent state of one session.

use std::collections::BTreeMap;
use std::ops::Deref;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::block::{Block, ExtraFields};
use crate::ids::{BlockId, Ref, SessionId};
use crate::message::MessageId;
pub use crate::rows::{ArchivedItem, RefEntry};
pub use crate::shared::Shared;

/// The state-file format version this build writes (2: rows of the refs table and the
/// archive index packed, block lists that follow from the tables left out; see
/// [`crate::rows`] and [`crate::derived`]).
pub const STATE_VERSION: u32 = 2;

/// The exact bytes of a folded unit, kept in the state until the archive holds them: UTF-8
/// text (the unit's JSON as received) held as shared bytes, so keeping a slice of the
/// request body costs a reference count rather than a copy (a first turn folds megabytes).
/// Serialized as a JSON string.
///
/// A slice keeps the whole body it came from alive; [`OriginalText::detach`] copies it out
/// when it is to stay in the state beyond the turn (the archive failed, or there is none).
#[derive(Clone, Default)]
pub struct OriginalText {
    bytes: bytes::Bytes,
    /// True when `bytes` may be a slice of a larger buffer (the request body).
    borrowed: bool,
}

impl OriginalText {
    /// The bytes, when they are UTF-8: a slice of a request body, say.
    ///
    /// # Errors
    /// Where the bytes stop being UTF-8.
    pub fn from_utf8(bytes: bytes::Bytes) -> Result<Self, std::str::Utf8Error> {
        crate::text::checked_utf8(&bytes)?;
        Ok(OriginalText {
            bytes,
            borrowed: true,
        })
    }

    /// The text (checked UTF-8 when made, so never empty by mistake).
    pub fn as_str(&self) -> &str {
        crate::text::checked_utf8(&self.bytes).unwrap_or_default()
    }

    /// The bytes, shared.
    pub fn bytes(&self) -> bytes::Bytes {
        self.bytes.clone()
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// True when it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Copies the bytes out of the buffer they are a slice of, so that buffer can be freed;
    /// nothing to do for a text that owns its bytes already.
    pub fn detach(&mut self) {
        if self.borrowed {
            self.bytes = bytes::Bytes::copy_from_slice(&self.bytes);
            self.borrowed = false;
        }
    }
}

impl PartialEq for OriginalText {
    fn eq(&self, other: &Self) -> bool {
        self.bytes == other.bytes
    }
}

impl Eq for OriginalText {}

impl std::fmt::Debug for OriginalText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl Deref for OriginalText {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl From<String> for OriginalText {
    fn from(text: String) -> Self {
        OriginalText {
            bytes: bytes::Bytes::from(text.into_bytes()),
            borrowed: false,
        }
    }
}

impl From<&str> for OriginalText {
    fn from(text: &str) -> Self {
        OriginalText {
            bytes: bytes::Bytes::copy_from_slice(text.as_bytes()),
            borrowed: false,
        }
    }
}

impl Serialize for OriginalText {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for OriginalText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(OriginalText::from)
    }
}

/// A provider-reported usage sample, used to calibrate token estimates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct UsageSample {
    /// Turn number.
    pub turn: u64,
    /// Tokens foldwire estimated for the request.
    pub estimated: u64,
    /// Input tokens the provider reported.
    pub reported: u64,
}

/// Everything foldwire remembers about one session between turns.
///
/// Serde, versioned and forward compatible: missing fields take their defaults and unknown
/// fields are kept and written back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, remote = "Self")]
pub struct SessionState {
    /// State-file format version.
    pub version: u32,
    /// The session.
    pub session: Option<SessionId>,
    /// Turns applied so far.
    pub turns: u64,
    /// The next ref number to mint.
    pub next_ref: u32,
    /// The refs table, in mint order.
    #[serde(
        serialize_with = "crate::rows::serialize_packed",
        deserialize_with = "crate::rows::deserialize_packed"
    )]
    pub refs: Shared<Vec<RefEntry>>,
    /// The next block number.
    pub next_block: u32,
    /// Every block ever made, active or not.
    pub blocks: Shared<Vec<Block>>,
    /// Originals of folded messages kept in the state until an archive holds them, by ref.
    pub originals: BTreeMap<Ref, OriginalText>,
    /// The archive index.
    #[serde(
        serialize_with = "crate::rows::serialize_packed",
        deserialize_with = "crate::rows::deserialize_packed"
    )]
    pub archive: Shared<Vec<ArchivedItem>>,
    /// Head-window and reset state, owned by the layout stage.
    pub head: serde_json::Value,
    /// Provider usage samples (newest last, bounded by the stage that writes them).
    pub usage: Vec<UsageSample>,
    /// Calibration factor real/estimated tokens (1.0 until measured).
    pub calibration: f64,
    /// Free counters stages keep across turns.
    pub counters: BTreeMap<String, u64>,
    /// Fields written by newer versions, kept verbatim.
    #[serde(flatten)]
    pub extra: ExtraFields,
}

impl Default for SessionState {
    fn default() -> Self {
        SessionState {
            version: STATE_VERSION,
            session: None,
            turns: 0,
            next_ref: 1,
            refs: Shared::default(),
            next_block: 1,
            blocks: Shared::default(),
            originals: BTreeMap::new(),
            archive: Shared::default(),
            head: serde_json::Value::Null,
            usage: Vec::new(),
            calibration: 1.0,
            counters: BTreeMap::new(),
            extra: ExtraFields::new(),
        }
    }
}

impl SessionState {
    /// A fresh state for a session.
    pub fn new(session: SessionId) -> Self {
        SessionState {
            session: Some(session),
            ..SessionState::default()
        }
    }

    /// Mints the next ref; refs are never reused.
    pub fn mint_ref(&mut self, message: MessageId) -> Ref {
        let r = Ref(self.next_ref.max(1));
        self.next_ref = r.0 + 1;
        self.refs.push(RefEntry {
            r#ref: r,
            message,
            minted_turn: self.turns,
            extra: ExtraFields::new(),
        });
        r
    }

    /// Allocates the next block id; block ids are never reused.
    pub fn next_block_id(&mut self) -> BlockId {
        let b = BlockId(self.next_block.max(1));
        self.next_block = b.0 + 1;
        b
    }

    /// The active blocks.
    pub fn active_blocks(&self) -> impl Iterator<Item = &Block> {
        self.blocks.iter().filter(|b| b.active)
    }
}

/// Errors reading a state file.
#[derive(Debug, thiserror::Error)]
pub enum StateFormatError {
    /// The bytes were not a state document.
    #[error("session state is not valid JSON for format version {STATE_VERSION}: {0}")]
    Json(#[from] serde_json::Error),
    /// Written by a newer format this build cannot read.
    #[error(
        "session state has format version {found}, newer than {STATE_VERSION} which this build reads; upgrade foldwire"
    )]
    TooNew {
        /// The version found.
        found: u32,
    },
    /// The document stored for one session names another: a misplaced or copied file.
    /// Using it would fold this session's conversation with another's refs and blocks, so
    /// it is refused and left as it is for a person to look at.
    #[error(
        "the state stored for session {expected} belongs to session {found} (a misplaced or copied file); it is left untouched"
    )]
    OtherSession {
        /// The session it was loaded for.
        expected: String,
        /// The session it names.
        found: String,
    },
}

impl SessionState {
    /// Parses a state document, accepting older versions and unknown fields.
    pub fn from_json(bytes: &[u8]) -> Result<Self, StateFormatError> {
        let state: SessionState = serde_json::from_slice(bytes)?;
        if state.version > STATE_VERSION {
            return Err(StateFormatError::TooNew {
                found: state.version,
            });
        }
        Ok(SessionState {
            version: STATE_VERSION,
            ..state
        })
    }

    /// [`SessionState::from_json`] for the document stored under `session`: refused when it
    /// names another session (acp §26 #128). A document naming none (older files) is
    /// accepted.
    pub fn from_json_of(bytes: &[u8], session: &SessionId) -> Result<Self, StateFormatError> {
        let state = Self::from_json(bytes)?;
        match &state.session {
            Some(found) if found != session => Err(StateFormatError::OtherSession {
                expected: session.to_string(),
                found: found.to_string(),
            }),
            _ => Ok(state),
        }
    }

    /// Serializes the state (pretty JSON, stable field order).
    pub fn to_json(&self) -> Result<Vec<u8>, StateFormatError> {
        Ok(serde_json::to_vec_pretty(self)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archive_items_read_and_write_the_field_names_of_earlier_builds() {
        // As earlier builds wrote them: the marks and places were untyped extra fields.
        let old = br#"{"version":1,"archive":[
            {"ref":"m00002","key":"k1","media_type":"t","size":3,"original":true,"pack":"p1","offset":7},
            {"key":"k2","media_type":"image/png","size":4,"message":"fp","pointer":"/source/data","later":1},
            {"ref":"m00003","key":"k3","media_type":"t","size":5,"trimmed":true}]}"#;
        let state = SessionState::from_json(old).unwrap();
        let [original, media, trimmed] = state.archive.as_slice() else {
            panic!("three items")
        };
        assert!(original.original && !original.trimmed);
        assert_eq!(original.pack.as_deref(), Some("p1"));
        assert_eq!(original.offset, Some(7));
        assert!(original.extra.is_empty());
        assert_eq!(media.message.as_deref(), Some("fp"));
        assert_eq!(media.pointer.as_deref(), Some("/source/data"));
        assert!(!media.original && media.pack.is_none());
        assert_eq!(media.extra.get("later"), Some(&serde_json::json!(1)));
        assert!(trimmed.trimmed);
        // Written back under the same names, and only the fields an item has.
        let saved: serde_json::Value = serde_json::from_slice(&state.to_json().unwrap()).unwrap();
        let items = saved["archive"].as_array().unwrap();
        assert_eq!(items[0]["original"], serde_json::json!(true));
        assert_eq!(items[0]["pack"], serde_json::json!("p1"));
        assert_eq!(items[0]["offset"], serde_json::json!(7));
        assert!(items[0].get("trimmed").is_none() && items[0].get("message").is_none());
        assert_eq!(items[1]["pointer"], serde_json::json!("/source/data"));
        assert_eq!(items[1]["later"], serde_json::json!(1));
        assert!(items[1].get("original").is_none());
        assert_eq!(items[2]["trimmed"], serde_json::json!(true));
    }

    #[test]
    fn originals_are_kept_as_shared_text_and_saved_as_strings() {
        let body =
            bytes::Bytes::from_static(br#"xx{"role":"user","content":"caf\u00e9 \u00e9"}yy"#);
        let unit = body.slice(2..body.len() - 2);
        let original = OriginalText::from_utf8(unit.clone()).unwrap();
        // The same bytes, not a copy of them.
        assert_eq!(original.bytes().as_ptr(), unit.as_ptr());
        assert_eq!(original.as_str(), std::str::from_utf8(&unit).unwrap());
        let mut state = SessionState::default();
        state.originals.insert(Ref(7), original.clone());
        let json = state.to_json().unwrap();
        let saved: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(
            saved["originals"]["m00007"].as_str(),
            Some(original.as_str())
        );
        let back = SessionState::from_json(&json).unwrap();
        assert_eq!(back.originals[&Ref(7)], original);
        let bad = OriginalText::from_utf8(bytes::Bytes::from_static(b"ok \xff"));
        assert!(bad.is_err());
        // Detached: the same text in bytes of its own, so the body can go.
        let mut kept = original.clone();
        kept.detach();
        assert_eq!(kept, original);
        assert_ne!(kept.bytes().as_ptr(), unit.as_ptr());
        let at = kept.bytes().as_ptr();
        kept.detach();
        assert_eq!(kept.bytes().as_ptr(), at, "copied twice");
    }

    #[test]
    fn older_files_load_and_unknown_fields_survive() {
        let old = br#"{"version":0,"turns":3,"future_field":{"x":[1,2]},
            "blocks":[{"id":"b1","summary":"s","span":["m00001","m00002"],"later":true}]}"#;
        let state = SessionState::from_json(old).unwrap();
        assert_eq!(state.turns, 3);
        assert_eq!(state.next_ref, 1);
        assert_eq!(state.calibration, 1.0);
        assert!(state.blocks[0].active);
        // Fields blocks gained later take their defaults (acp §26 #22).
        assert!(state.blocks[0].in_view);
        assert_eq!(state.blocks[0].survived, 0);
        assert_eq!(state.blocks[0].generation, crate::Generation::Young);
        let again = SessionState::from_json(&state.to_json().unwrap()).unwrap();
        assert_eq!(again.extra["future_field"], serde_json::json!({"x":[1,2]}));
        assert_eq!(again.blocks[0].extra["later"], serde_json::json!(true));
    }

    #[test]
    fn copies_share_tables_until_one_changes() {
        let mut a = SessionState::default();
        a.mint_ref(MessageId("x".into()));
        let mut b = a.clone();
        assert!(Shared::same(&a.refs, &b.refs));
        assert!(Shared::same(&a.blocks, &b.blocks));
        b.mint_ref(MessageId("y".into()));
        // The change copied the table: the earlier state is as it was.
        assert!(!Shared::same(&a.refs, &b.refs));
        assert_eq!((a.refs.len(), b.refs.len()), (1, 2));
        assert_ne!(a, b);
        // Serialized as the table itself (the second row packed: the next ref, same turn).
        let json: serde_json::Value = serde_json::from_slice(&b.to_json().unwrap()).unwrap();
        assert_eq!(json["refs"][0]["message"], "x");
        assert_eq!(json["refs"][1], "y");
        assert_eq!(SessionState::from_json(&b.to_json().unwrap()).unwrap(), b);
    }

    #[test]
    fn newer_versions_are_refused_by_name() {
        let err = SessionState::from_json(br#"{"version":99}"#).unwrap_err();
        assert!(err.to_string().contains("99"));
    }

    #[test]
    fn refs_and_blocks_are_monotonic() {
        let mut s = SessionState::default();
        let a = s.mint_ref(MessageId("x".into()));
        let b = s.mint_ref(MessageId("y".into()));
        assert_eq!((a, b), (Ref(1), Ref(2)));
        assert_eq!(s.next_block_id(), BlockId(1));
        assert_eq!(s.next_block_id(), BlockId(2));
    }
}
