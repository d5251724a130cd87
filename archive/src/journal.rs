//! Session state as a journal: each save creates the session's next entry, holding what the
//! turn changed ([`StateDelta`]) or, now and then, the whole state (a compaction). A steady
//! turn writes bytes in proportion to what it added, not to the session's size.
//!
//! Layout: `sessions/<id>/journal/<seq>.json`, `seq` zero-padded to 20 digits so names sort
//! by number. An entry is one header line (`{"format":1,"seq":N,"kind":"full"|"delta"}`)
//! followed by the body: the state document for `full`, the delta for `delta`.
//!
//! - **Concurrency**: a save that expects version `N` creates entry `N+1` with
//!   `PutMode::Create`, which S3 (`If-None-Match`), a directory (hard link) and memory all
//!   honour; the writer that loses gets [`StoreError::Conflict`], reloads and re-applies.
//! - **Load**: list the journal, read entries newest first until a full one, replay the
//!   deltas after it in order.
//! - **Compaction**: when the deltas since the last full entry weigh as much as that entry
//!   (so compaction costs at most as many bytes as the deltas did), or after
//!   [`JournalConfig::max_entries`] deltas, the next entry is the full state. Entries older
//!   than a full one are then deleted once they are older than [`JournalConfig::grace`]:
//!   a writer holding a version cannot have its slot deleted and re-created under it,
//!   because a writer whose version is older than half the grace first checks the journal.
//! - **Migration**: a session with no journal but a `state.json` (earlier builds) loads from
//!   it; its first save writes a full entry, and the first compaction removes `state.json`.
//! - **Crash leftovers**: a directory store's half-written entries (object_store stages a
//!   put as `<name>#<n>` and hard-links it into place) and the temp files of earlier builds
//!   are removed at compaction once older than the grace.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use serde::{Deserialize, Serialize};

use foldwire_core::{SessionId, SessionState, StateStore, StateVersion, StoreError};

use crate::delta::StateDelta;
use crate::keys;
use crate::media::backend_error;

/// The entry format this build writes and reads.
pub const JOURNAL_FORMAT: u32 = 1;

/// Tuning of a [`JournalStateStore`].
#[derive(Debug, Clone)]
pub struct JournalConfig {
    /// Deltas after which the next entry is a full state, however small they were (bounds
    /// the entries a load reads).
    pub max_entries: u64,
    /// How old an entry superseded by a full one must be before it is deleted (and how old
    /// a crash leftover must be). A writer whose version is older than half of this checks
    /// the journal before writing.
    pub grace: Duration,
    /// The directory under a local store, for removing crash leftovers object_store does
    /// not list.
    pub local_root: Option<PathBuf>,
}

impl Default for JournalConfig {
    fn default() -> Self {
        JournalConfig {
            max_entries: 512,
            grace: Duration::from_secs(600),
            local_root: None,
        }
    }
}

/// Session state as a journal of entries over any object store that honours
/// `PutMode::Create` (see the module docs).
#[derive(Debug, Clone)]
pub struct JournalStateStore {
    store: Arc<dyn ObjectStore>,
    backend: &'static str,
    config: JournalConfig,
    positions: Arc<Mutex<HashMap<SessionId, Position>>>,
}

/// What this store knows about a session's journal beyond the version it handed out: the
/// compaction accounting, and when the version was known to be the newest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Position {
    /// The newest entry (0: none yet; the state came from `state.json` or is new).
    seq: u64,
    /// A `state.json` of an earlier build may exist (until a compaction removes it).
    legacy: bool,
    /// Bytes of the newest full entry (or of `state.json`).
    full_bytes: u64,
    /// Bytes of the deltas written since it.
    since_bytes: u64,
    /// Deltas written since it.
    since_count: u64,
    /// When this position was known to be the newest.
    at: Instant,
}

/// Sessions whose positions are remembered before the table is cleared (a forgotten
/// position costs one listing at the session's next save, nothing more).
const MAX_POSITIONS: usize = 16_384;

/// The header line of an entry.
#[derive(Debug, Serialize, Deserialize)]
struct Header {
    format: u32,
    seq: u64,
    kind: Kind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Kind {
    Full,
    Delta,
}

/// One entry as read.
struct Entry {
    kind: Kind,
    body: Bytes,
    size: u64,
}

/// State versions this store issues: the prefix, then the newest entry's number.
const VERSION_PREFIX: &str = "journal:";
/// Times a load starts over when a concurrent compaction deleted an entry it listed.
const LOAD_ATTEMPTS: usize = 4;
/// Entries read at once while loading.
const READ_CONCURRENCY: usize = 16;
/// Width of the zero-padded sequence number in entry names.
const SEQ_WIDTH: usize = 20;

fn format_error(session: &SessionId, source: foldwire_core::StateFormatError) -> StoreError {
    StoreError::Format {
        session: session.to_string(),
        source,
    }
}

fn conflict(session: &SessionId, expected: Option<&StateVersion>) -> StoreError {
    StoreError::Conflict {
        session: session.to_string(),
        expected: expected.map(|v| v.0.clone()),
    }
}

/// The sequence number of an entry's key, or `None` for anything else in the folder.
pub fn entry_seq(location: &Path) -> Option<u64> {
    let name = location.filename()?;
    let digits = name.strip_suffix(".json")?;
    if digits.len() != SEQ_WIDTH || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The body of an entry (after its header line), for readers that only scan it.
pub fn entry_body(bytes: &[u8]) -> &[u8] {
    match bytes.iter().position(|&b| b == b'\n') {
        Some(i) => &bytes[i + 1..],
        None => &[],
    }
}

impl JournalStateStore {
    /// A journal store over `store`; `backend` names it in errors.
    pub fn new(store: Arc<dyn ObjectStore>, backend: &'static str) -> Self {
        Self::with_config(store, backend, JournalConfig::default())
    }

    /// A journal store with explicit tuning.
    pub fn with_config(
        store: Arc<dyn ObjectStore>,
        backend: &'static str,
        config: JournalConfig,
    ) -> Self {
        JournalStateStore {
            store,
            backend,
            config,
            positions: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    fn entry_path(session: &SessionId, seq: u64) -> Result<Path, StoreError> {
        let prefix = keys::journal_prefix(session)?;
        Ok(prefix.clone().join(format!("{seq:0SEQ_WIDTH$}.json")))
    }

    fn err(&self, operation: &str, e: object_store::Error) -> StoreError {
        backend_error(self.backend, operation, e)
    }

    /// Remembers `pos` and returns its version: the entry number, so a save and a load of
    /// the same state give equal versions.
    fn remember(&self, session: &SessionId, pos: Position) -> StateVersion {
        let mut positions = self.positions.lock().unwrap_or_else(|p| p.into_inner());
        if positions.len() >= MAX_POSITIONS && !positions.contains_key(session) {
            positions.clear();
        }
        positions.insert(session.clone(), pos);
        StateVersion(format!("{VERSION_PREFIX}{}", pos.seq))
    }

    fn recall(&self, session: &SessionId, seq: u64) -> Option<Position> {
        let positions = self.positions.lock().unwrap_or_else(|p| p.into_inner());
        positions.get(session).copied().filter(|p| p.seq == seq)
    }

    fn decode_version(given: &StateVersion) -> Result<u64, StoreError> {
        given
            .0
            .strip_prefix(VERSION_PREFIX)
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| StoreError::InvalidKey {
                given: given.0.clone(),
                why: format!("not a state version this store issued (those read {VERSION_PREFIX}<entry number>)"),
            })
    }

    /// Every entry of the session's journal, oldest first.
    async fn list_entries(
        &self,
        session: &SessionId,
    ) -> Result<Vec<(u64, ObjectMeta)>, StoreError> {
        let prefix = keys::journal_prefix(session)?;
        let metas: Vec<ObjectMeta> = self
            .store
            .list(Some(&prefix))
            .try_collect()
            .await
            .map_err(|e| self.err("list state journal", e))?;
        let mut entries: Vec<(u64, ObjectMeta)> = metas
            .into_iter()
            .filter_map(|m| entry_seq(&m.location).map(|s| (s, m)))
            .collect();
        entries.sort_by_key(|(s, _)| *s);
        Ok(entries)
    }

    async fn read_entry(&self, session: &SessionId, seq: u64) -> Result<Option<Entry>, StoreError> {
        let path = Self::entry_path(session, seq)?;
        let got = match self.store.get(&path).await {
            Ok(got) => got,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(self.err("get state entry", e)),
        };
        let bytes = got
            .bytes()
            .await
            .map_err(|e| self.err("read state entry", e))?;
        let newline = bytes
            .iter()
            .position(|&b| b == b'\n')
            .unwrap_or(bytes.len());
        let header: Header = serde_json::from_slice(&bytes[..newline])
            .map_err(|e| format_error(session, e.into()))?;
        if header.format > JOURNAL_FORMAT {
            return Err(format_error(
                session,
                foldwire_core::StateFormatError::TooNew {
                    found: header.format,
                },
            ));
        }
        if header.seq != seq {
            return Err(StoreError::Backend {
                backend: self.backend.to_owned(),
                operation: format!("read state entry {path}"),
                source: format!("the entry says it is number {}", header.seq).into(),
            });
        }
        Ok(Some(Entry {
            kind: header.kind,
            size: bytes.len() as u64,
            body: bytes.slice((newline + 1).min(bytes.len())..),
        }))
    }

    /// One attempt at loading; `Ok(None)` inside means an entry vanished under the reader.
    #[allow(clippy::type_complexity)]
    async fn try_load(
        &self,
        session: &SessionId,
    ) -> Result<Option<Option<(SessionState, StateVersion)>>, StoreError> {
        let at = Instant::now();
        let listed = self.list_entries(session).await?;
        let Some(&(newest, _)) = listed.last() else {
            return self.load_legacy(session, at).await.map(Some);
        };
        // Newest first until a full entry; every one of them is replayed.
        let reads = futures::stream::iter((1..=newest).rev())
            .map(|seq| async move { (seq, self.read_entry(session, seq).await) })
            .buffered(READ_CONCURRENCY);
        let mut reads = Box::pin(reads);
        let mut chain: Vec<Entry> = Vec::new();
        while let Some((seq, read)) = reads.next().await {
            let Some(entry) = read? else {
                // Deleted by a compaction after the listing (or never there): start over.
                tracing::debug!(session = %session, seq, "state entry vanished while loading; listing again");
                return Ok(None);
            };
            let full = entry.kind == Kind::Full;
            chain.push(entry);
            if full {
                break;
            }
        }
        // Reads still in flight past the full entry are not needed.
        drop(reads);
        let Some(base) = chain.pop().filter(|e| e.kind == Kind::Full) else {
            return Err(StoreError::Backend {
                backend: self.backend.to_owned(),
                operation: format!("load state of {session}"),
                source: "the state journal has no full entry to start from".into(),
            });
        };
        let mut state = SessionState::from_json_of(&base.body, session)
            .map_err(|e| format_error(session, e))?;
        let full_bytes = base.size;
        let since_count = chain.len() as u64;
        let mut since_bytes = 0;
        for entry in chain.into_iter().rev() {
            since_bytes += entry.size;
            let delta: StateDelta =
                serde_json::from_slice(&entry.body).map_err(|e| format_error(session, e.into()))?;
            delta.apply(&mut state).map_err(|e| StoreError::Backend {
                backend: self.backend.to_owned(),
                operation: format!("replay state journal of {session}"),
                source: Box::new(e),
            })?;
        }
        // The listing does not show `state.json`: a journal still holding its entry 1 was
        // never compacted and may sit beside one an earlier build wrote.
        let legacy = listed.first().is_some_and(|(s, _)| *s == 1);
        let pos = Position {
            seq: newest,
            legacy,
            full_bytes,
            since_bytes,
            since_count,
            at,
        };
        Ok(Some(Some((state, self.remember(session, pos)))))
    }

    async fn load_legacy(
        &self,
        session: &SessionId,
        at: Instant,
    ) -> Result<Option<(SessionState, StateVersion)>, StoreError> {
        let path = keys::state_path(session)?;
        let got = match self.store.get(&path).await {
            Ok(got) => got,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(self.err("get state", e)),
        };
        let bytes = got.bytes().await.map_err(|e| self.err("read state", e))?;
        let state =
            SessionState::from_json_of(&bytes, session).map_err(|e| format_error(session, e))?;
        let pos = Position {
            seq: 0,
            legacy: true,
            full_bytes: bytes.len() as u64,
            since_bytes: 0,
            since_count: 0,
            at,
        };
        Ok(Some((state, self.remember(session, pos))))
    }

    /// Creates entry `seq`; `Ok(false)` when another writer created it first.
    async fn create(
        &self,
        session: &SessionId,
        seq: u64,
        kind: Kind,
        body: &[u8],
    ) -> Result<Option<u64>, StoreError> {
        let header = Header {
            format: JOURNAL_FORMAT,
            seq,
            kind,
        };
        let mut bytes = serde_json::to_vec(&header).map_err(|e| format_error(session, e.into()))?;
        bytes.push(b'\n');
        bytes.extend_from_slice(body);
        let size = bytes.len() as u64;
        let opts = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        match self
            .store
            .put_opts(
                &Self::entry_path(session, seq)?,
                PutPayload::from(bytes),
                opts,
            )
            .await
        {
            Ok(_) => Ok(Some(size)),
            Err(
                object_store::Error::AlreadyExists { .. }
                | object_store::Error::Precondition { .. },
            ) => Ok(None),
            Err(e) => Err(self.err("put state entry", e)),
        }
    }

    /// After a full entry at `full_seq`: deletes the entries it supersedes that are older
    /// than the grace, `state.json` of an earlier build, and crash leftovers. Best effort:
    /// whatever is left is tried again at the next compaction.
    async fn clean_up(&self, session: &SessionId, full_seq: u64, legacy: bool) {
        let now = SystemTime::now();
        let old_enough = |m: &ObjectMeta| {
            let modified: SystemTime = m.last_modified.into();
            now.duration_since(modified)
                .is_ok_and(|d| d >= self.config.grace)
        };
        let mut doomed: Vec<Path> = match self.list_entries(session).await {
            Ok(listed) => listed
                .into_iter()
                .filter(|(s, m)| *s < full_seq && old_enough(m))
                .map(|(_, m)| m.location)
                .collect(),
            Err(e) => {
                tracing::debug!(session = %session, error = %e, "Listing the state journal for clean-up failed.");
                Vec::new()
            }
        };
        if legacy && let Ok(p) = keys::state_path(session) {
            doomed.push(p);
        }
        if !doomed.is_empty() {
            let results: Vec<_> = self
                .store
                .delete_stream(futures::stream::iter(doomed.into_iter().map(Ok)).boxed())
                .collect()
                .await;
            for r in results {
                if let Err(e) = r
                    && !matches!(e, object_store::Error::NotFound { .. })
                {
                    tracing::debug!(session = %session, error = %e, "Removing a superseded state entry failed.");
                }
            }
        }
        if let Some(root) = &self.config.local_root {
            self.sweep_local(root, session);
        }
    }

    /// Removes staged puts (`<name>#<n>`) a killed writer left in the session's journal
    /// folder and temp files of earlier builds' state writes, once older than the grace.
    fn sweep_local(&self, root: &std::path::Path, session: &SessionId) {
        let Ok(segment) = keys::session_segment(session.as_str()) else {
            return;
        };
        let dir = root.join("sessions").join(segment);
        let grace = self.config.grace;
        let stale = |entry: &std::fs::DirEntry| {
            entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age >= grace)
        };
        for (folder, is_leftover) in [
            (
                dir.join("journal"),
                (|name: &str| name.contains('#')) as fn(&str) -> bool,
            ),
            (dir.clone(), |name: &str| {
                name.starts_with(".state.json.") && name.ends_with(".tmp")
            }),
        ] {
            let Ok(entries) = std::fs::read_dir(&folder) else {
                continue;
            };
            for entry in entries.flatten() {
                let name = entry.file_name();
                if is_leftover(&name.to_string_lossy()) && stale(&entry) {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
    }

    /// The shared save: a delta from `before` when given and no compaction is due, else the
    /// full state.
    async fn write(
        &self,
        session: &SessionId,
        before: Option<&SessionState>,
        state: &SessionState,
        expected: Option<&StateVersion>,
    ) -> Result<StateVersion, StoreError> {
        let pos = match expected {
            None => {
                // A new session: refuse if an earlier build's state is there (the caller
                // did not load it) — the journal slot alone would not show it.
                match self.store.head(&keys::state_path(session)?).await {
                    Ok(_) => return Err(conflict(session, expected)),
                    Err(object_store::Error::NotFound { .. }) => {}
                    Err(e) => return Err(self.err("head state", e)),
                }
                None
            }
            Some(v) => {
                let seq = Self::decode_version(v)?;
                let known = self
                    .recall(session, seq)
                    .filter(|p| p.at.elapsed() < self.config.grace / 2);
                match known {
                    Some(p) => Some(p),
                    // Not known here (another handle's version) or old enough that entries
                    // after it may have been written and compacted away: make sure it is
                    // still the newest before creating the next one.
                    None => Some(self.check_newest(session, seq, expected).await?),
                }
            }
        };
        let seq = pos.map_or(0, |p| p.seq) + 1;
        let at = Instant::now();
        if let (Some(before), Some(p)) = (before, pos)
            && p.seq > 0
            && p.since_count + 1 < self.config.max_entries
        {
            let delta = StateDelta::between(before, state);
            let body = serde_json::to_vec(&delta).map_err(|e| format_error(session, e.into()))?;
            // Compact once the deltas weigh as much as the full entry they replay onto: the
            // full write then costs no more than the deltas did.
            if p.since_bytes + body.len() as u64 <= p.full_bytes {
                let Some(size) = self.create(session, seq, Kind::Delta, &body).await? else {
                    return Err(conflict(session, expected));
                };
                return Ok(self.remember(
                    session,
                    Position {
                        seq,
                        since_bytes: p.since_bytes + size,
                        since_count: p.since_count + 1,
                        at,
                        ..p
                    },
                ));
            }
        }
        let body = serde_json::to_vec(state).map_err(|e| format_error(session, e.into()))?;
        let Some(size) = self.create(session, seq, Kind::Full, &body).await? else {
            return Err(conflict(session, expected));
        };
        let legacy = pos.is_some_and(|p| p.legacy);
        if seq > 1 || legacy {
            self.clean_up(session, seq, legacy).await;
        }
        Ok(self.remember(
            session,
            Position {
                seq,
                // A compaction removed it (a failed removal is retried at the next).
                legacy: false,
                full_bytes: size,
                since_bytes: 0,
                since_count: 0,
                at,
            },
        ))
    }

    /// Lists the journal to check that entry `seq` is still the newest; returns a position
    /// that makes the next write a full entry when the accounting is unknown.
    async fn check_newest(
        &self,
        session: &SessionId,
        seq: u64,
        expected: Option<&StateVersion>,
    ) -> Result<Position, StoreError> {
        let listed = self.list_entries(session).await?;
        let newest = listed.last().map_or(0, |(s, _)| *s);
        if newest != seq {
            return Err(conflict(session, expected));
        }
        let since_bytes: u64 = listed.iter().map(|(_, m)| m.size).sum();
        Ok(Position {
            seq,
            legacy: seq == 0 || listed.first().is_some_and(|(s, _)| *s == 1),
            // Unknown where the last full entry is: count everything listed as deltas
            // over the largest entry, so a compaction comes soon rather than never.
            full_bytes: listed.iter().map(|(_, m)| m.size).max().unwrap_or(0),
            since_bytes,
            since_count: listed.len() as u64,
            at: Instant::now(),
        })
    }
}
#[async_trait]
impl StateStore for JournalStateStore {
    async fn load(
        &self,
        session: &SessionId,
    ) -> Result<Option<(SessionState, StateVersion)>, StoreError> {
        for _ in 0..LOAD_ATTEMPTS {
            if let Some(loaded) = self.try_load(session).await? {
                return Ok(loaded);
            }
        }
        Err(StoreError::Backend {
            backend: self.backend.to_owned(),
            operation: format!("load state of {session}"),
            source: format!(
                "entries kept vanishing while reading the journal ({LOAD_ATTEMPTS} attempts)"
            )
            .into(),
        })
    }

    async fn save(
        &self,
        session: &SessionId,
        state: &SessionState,
        expected: Option<&StateVersion>,
    ) -> Result<StateVersion, StoreError> {
        self.write(session, None, state, expected).await
    }

    async fn save_change(
        &self,
        session: &SessionId,
        before: &SessionState,
        state: &SessionState,
        expected: Option<&StateVersion>,
    ) -> Result<StateVersion, StoreError> {
        self.write(session, Some(before), state, expected).await
    }
}
