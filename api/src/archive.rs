//! The I/O traits stages use for archived payloads and session state. `foldwire-api` defines
//! them; `foldwire-archive` implements them over object_store.

use async_trait::async_trait;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::ids::{Ref, SessionId};
use crate::state::SessionState;

/// Errors from an archive or state backend.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// No object under that key for this session.
    #[error("{what} not found for session {session}")]
    NotFound {
        /// The session.
        session: String,
        /// What was looked up.
        what: String,
    },
    /// A key, ref or session id was refused (traversal, bad characters).
    #[error("refused key {given:?}: {why}")]
    InvalidKey {
        /// What was given.
        given: String,
        /// Why it was refused.
        why: String,
    },
    /// A conditional write lost against a concurrent writer; the caller reloads and retries.
    #[error(
        "state of session {session} changed underneath this writer (expected version {expected:?})"
    )]
    Conflict {
        /// The session.
        session: String,
        /// The version the writer expected.
        expected: Option<String>,
    },
    /// The stored state could not be read.
    #[error("state of session {session} is unreadable: {source}")]
    Format {
        /// The session.
        session: String,
        /// The parse error.
        #[source]
        source: crate::state::StateFormatError,
    },
    /// The backend failed or timed out.
    #[error("{backend} backend failed on {operation}: {source}")]
    Backend {
        /// Backend name (`memory`, `file`, `s3`).
        backend: String,
        /// The operation (`put`, `get`, …).
        operation: String,
        /// The underlying error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// One archived object's description.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchivedObject {
    /// The content-addressed key (SHA-256 of the bytes, hex).
    pub key: String,
    /// The ref it was stored under.
    pub r#ref: Ref,
    /// MIME type.
    pub media_type: String,
    /// Size in bytes.
    pub size: u64,
}

/// A payload stored by content alone, before any ref names its unit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredContent {
    /// The content-addressed key (SHA-256 of the bytes, lowercase hex).
    pub key: String,
    /// MIME type.
    pub media_type: String,
    /// Size in bytes.
    pub size: u64,
}

/// Where a payload written in a batch sits: one object (a pack, named by the SHA-256 of its
/// bytes) holds the payloads of one batch back to back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PackLocation {
    /// The pack's content key.
    pub pack: String,
    /// Where the payload starts in the pack.
    pub offset: u64,
    /// Its length.
    pub size: u64,
}

/// One payload of a batch write: what was stored and, when it went into a pack, where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredPart {
    /// The payload's own content key, type and size.
    pub content: StoredContent,
    /// Its place in a pack; `None` when it was stored as an object of its own.
    pub location: Option<PackLocation>,
}

/// Content keys already computed for payloads about to be archived, each held with the
/// payload it was computed from.
///
/// A session's first fold archives megabytes of originals, and hashing them is most of
/// planning their pack. A stage that runs earlier, while a core is idle, can hash the units
/// a fold is about to archive ([`MediaArchive::plan_contents_known`] then only looks the
/// keys up). A key is found for a payload only when it is the very buffer the key was
/// computed from (same address and length, kept alive here), never by equal contents, so a
/// key can never stand for other bytes.
#[derive(Debug, Default)]
pub struct KnownDigests {
    /// Each hashed payload (a cheap clone that keeps its buffer alive) and its key.
    entries: Vec<(Bytes, String)>,
    /// Index into `entries` by the payload's address and length.
    by_span: foldhash::HashMap<(usize, usize), usize>,
}

impl KnownDigests {
    /// No keys known.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records `key` as the content key of `payload`.
    pub fn insert(&mut self, payload: Bytes, key: String) {
        let span = (payload.as_ptr() as usize, payload.len());
        self.by_span.insert(span, self.entries.len());
        self.entries.push((payload, key));
    }

    /// The key recorded for `payload`, when it is the buffer the key was computed from.
    pub fn get(&self, payload: &Bytes) -> Option<&str> {
        if payload.is_empty() {
            // An empty slice has no buffer of its own to be identified by.
            return None;
        }
        let at = *self
            .by_span
            .get(&(payload.as_ptr() as usize, payload.len()))?;
        self.entries.get(at).map(|(_, key)| key.as_str())
    }

    /// How many payloads have a key.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no key is known.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// A write under way (or yet to start) that something about to be stored names.
pub type PendingWrite =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), StoreError>> + Send>>;

/// A batch [`MediaArchive::plan_contents`] planned: what each payload became, and the write
/// that stores them.
pub struct PlannedContents {
    /// Per payload, in the order given: its content and its place in a pack.
    pub parts: Vec<StoredPart>,
    /// The write; the parts exist once it has succeeded.
    pub write: PendingWrite,
}

impl std::fmt::Debug for PlannedContents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlannedContents")
            .field("parts", &self.parts)
            .finish_non_exhaustive()
    }
}

/// The writes a turn started that its new state names (the originals' pack), still under
/// way: the session stores the state only once every one has succeeded
/// ([`StateStore::save_change_after`]).
#[derive(Default)]
pub struct PendingWrites(Vec<PendingWrite>);

impl PendingWrites {
    /// Adds a write.
    pub fn push(&mut self, write: PendingWrite) {
        self.0.push(write);
    }

    /// True when no write is pending.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Waits for every write, in order; the first failure ends it.
    ///
    /// # Errors
    /// The first write that failed.
    pub async fn finish(self) -> Result<(), StoreError> {
        for write in self.0 {
            write.await?;
        }
        Ok(())
    }
}

impl std::fmt::Debug for PendingWrites {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PendingWrites({})", self.0.len())
    }
}

/// Where archived payloads go before anything folds them off the wire.
///
/// Contract: `put` is create-if-absent and content-addressed, so a retried or duplicate
/// write is harmless; every operation is scoped to one session and no input can reach
/// another session's objects.
#[async_trait]
pub trait MediaArchive: Send + Sync + std::fmt::Debug {
    /// Stores bytes under a session and ref; returns the object description.
    async fn put(
        &self,
        session: &SessionId,
        r#ref: Ref,
        media_type: &str,
        bytes: Bytes,
    ) -> Result<ArchivedObject, StoreError>;

    /// Reads back the bytes stored under a ref (the newest if several).
    async fn get(
        &self,
        session: &SessionId,
        r#ref: Ref,
    ) -> Result<(ArchivedObject, Bytes), StoreError>;

    /// Lists the session's archived objects.
    async fn list(&self, session: &SessionId) -> Result<Vec<ArchivedObject>, StoreError>;

    /// Stores bytes by content alone (create-if-absent), for payloads whose unit has no ref
    /// yet: `archive.spill` runs before `refs.mint`, and nothing may fold before it is stored.
    async fn put_content(
        &self,
        session: &SessionId,
        media_type: &str,
        bytes: Bytes,
    ) -> Result<StoredContent, StoreError>;

    /// Reads bytes stored by [`MediaArchive::put_content`] (or `put`) by their content key.
    /// Required like `put_content`: an archive without it would compile, then pin every
    /// payload `archive.spill` meets.
    async fn get_content(&self, session: &SessionId, key: &str) -> Result<Bytes, StoreError>;

    /// Stores several payloads by content in as few objects as the archive can (one pack
    /// per batch), for the originals and media of one turn. The default stores each with
    /// [`MediaArchive::put_content`].
    async fn put_contents(
        &self,
        session: &SessionId,
        items: Vec<(String, Bytes)>,
    ) -> Result<Vec<StoredPart>, StoreError> {
        let mut out = Vec::with_capacity(items.len());
        for (media_type, bytes) in items {
            out.push(StoredPart {
                content: self.put_content(session, &media_type, bytes).await?,
                location: None,
            });
        }
        Ok(out)
    }

    /// [`MediaArchive::put_contents`] in two steps: what it would answer, now, and the write
    /// itself as a future the caller runs (and must see succeed before anything names the
    /// parts). A turn's fold records its originals from the answer while the pack is still
    /// being written, and the session stores the state only once it is
    /// ([`StateStore::save_change_after`]). It is [`MediaArchive::plan_contents_known`]
    /// with no key known; an archive implements that one.
    ///
    /// `source` is the request body the payloads were cut from, when they were: an archive
    /// that packs may write each run of them as the stretch of `source` it lies in instead of
    /// copying every payload.
    async fn plan_contents(
        &self,
        session: &SessionId,
        source: Option<&Bytes>,
        items: Vec<(String, Bytes)>,
    ) -> Result<PlannedContents, StoreError> {
        self.plan_contents_known(session, source, items, &KnownDigests::new())
            .await
    }

    /// [`MediaArchive::plan_contents`], taking the content key of each payload `known`
    /// holds instead of hashing it again. The default ignores `source` and `known` and
    /// writes the batch with [`MediaArchive::put_contents`] before answering (its write is
    /// already done).
    async fn plan_contents_known(
        &self,
        session: &SessionId,
        source: Option<&Bytes>,
        items: Vec<(String, Bytes)>,
        known: &KnownDigests,
    ) -> Result<PlannedContents, StoreError> {
        let _ = (source, known);
        let parts = self.put_contents(session, items).await?;
        Ok(PlannedContents {
            parts,
            write: Box::pin(std::future::ready(Ok(()))),
        })
    }

    /// Reads a payload [`MediaArchive::put_contents`] put in a pack (the caller checks its
    /// bytes against `key`). The default reads it by content key.
    async fn get_packed(
        &self,
        session: &SessionId,
        key: &str,
        location: &PackLocation,
    ) -> Result<Bytes, StoreError> {
        let _ = location;
        self.get_content(session, key).await
    }
}

/// An opaque version tag of a stored state (an ETag, a generation number).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StateVersion(pub String);

/// Where session state lives between turns.
///
/// Contract: `save` is atomic (a reader sees the old or the new state, never a mix) and
/// conditional: with `expected = Some(v)` it fails with [`StoreError::Conflict`] unless the
/// stored version is still `v`; with `None` it fails if any state exists.
#[async_trait]
pub trait StateStore: Send + Sync + std::fmt::Debug {
    /// Loads a session's state and its version, or `None` for a new session.
    async fn load(
        &self,
        session: &SessionId,
    ) -> Result<Option<(SessionState, StateVersion)>, StoreError>;

    /// Saves a session's state if its stored version is still `expected`.
    async fn save(
        &self,
        session: &SessionId,
        state: &SessionState,
        expected: Option<&StateVersion>,
    ) -> Result<StateVersion, StoreError>;

    /// Saves `state`, which a turn made from `before` (the state stored at `expected`), so a
    /// store that keeps a journal writes only what changed; same contract as
    /// [`StateStore::save`], which the default calls.
    async fn save_change(
        &self,
        session: &SessionId,
        before: &SessionState,
        state: &SessionState,
        expected: Option<&StateVersion>,
    ) -> Result<StateVersion, StoreError> {
        let _ = before;
        self.save(session, state, expected).await
    }

    /// [`StateStore::save_change`] once `ready` has succeeded: `state` names objects still
    /// being written (a turn's originals' pack), so nothing may be stored before them. A store
    /// may prepare its write meanwhile (the journal serializes its entry); the default waits,
    /// then saves. When `ready` fails, nothing is saved and its error is returned.
    async fn save_change_after(
        &self,
        session: &SessionId,
        before: &SessionState,
        state: &SessionState,
        expected: Option<&StateVersion>,
        ready: PendingWrites,
    ) -> Result<StateVersion, StoreError> {
        ready.finish().await?;
        self.save_change(session, before, state, expected).await
    }
}
