//! Session state as a journal: each save creates the session's next entry, holding what the
//! turn changed ([`StateDelta`]) or, now and then, the whole state (a compaction). A steady
//! turn writes bytes in proportion to what it added, not to the session's size.
//!
//! Layout: `sessions/<id>/journal/<seq>.json`, `seq` zero-padded to 20 digits so names sort
//! by number. An entry is one header line (`{"format":1,"seq":N,"kind":"delta"}`; full
//! entries say format 3, merged ones 2) followed by the body: the state document for
//! `full`, the delta for `delta`.
//!
//! - **Concurrency**: a save that expects version `N` creates entry `N+1` with
//!   `PutMode::Create`, which S3 (`If-None-Match`), a directory (hard link) and memory all
//!   honour; the writer that loses gets [`StoreError::Conflict`], reloads and re-applies.
//! - **Load**: list the journal, read entries newest first until a full one, replay the
//!   deltas after it in order.
//! - **Merging**: every [`MERGE_FANOUT`]th entry after a full one holds the deltas of the
//!   last [`MERGE_FANOUT`] turns (kind `merged`, naming the entry it follows on from), every
//!   [`MERGE_FANOUT`]²th those of the last [`MERGE_FANOUT`]² turns, and so on for
//!   [`MERGE_LEVELS`] levels, so a load reads at most `(fanout - 1) × levels + 1` entries
//!   after the full one, and a turn's delta is written once per level: the amortized bytes
//!   per turn stay a small multiple of the delta however long the session runs between
//!   compactions. The writer keeps the bodies it will merge in memory (they are what a load
//!   reads), so a merge costs one request like any other entry.
//! - **Compaction**: when the entries a load would read since the last full entry weigh as
//!   much as that entry (so compaction costs at most as many bytes as they did), or number
//!   [`JournalConfig::max_entries`], the next entry is the full state. Entries older
//!   than a full one are then deleted once they are older than [`JournalConfig::grace`]:
//!   a writer holding a version cannot have its slot deleted and re-created under it,
//!   because a writer whose version is older than half the grace first checks the journal.
//! - **Migration**: a session with no journal but a `state.json` (earlier builds) loads from
//!   it; its first save writes a full entry, and the first compaction removes `state.json`.
//! - **Crash leftovers**: a directory store's half-written entries (an entry is staged as
//!   `<name>#<…>` and hard-linked into place, by object_store or by [`local_entry`]) and the
//!   temp files of earlier builds are removed at compaction once older than the grace.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt, PutMode, PutOptions};
use serde::{Deserialize, Serialize};
use tokio::task::spawn_blocking;

use foldwire_core::{PendingWrites, SessionId, SessionState, StateStore, StateVersion, StoreError};

use crate::delta::StateDelta;
use crate::media::backend_error;
use crate::{keys, local_entry, payload};

/// The newest entry format this build writes and reads (2 added merged entries, 3 full
/// entries of the compact state; delta entries are still written as format 1, which
/// earlier builds read).
pub const JOURNAL_FORMAT: u32 = 3;
/// The format of delta entries.
const BASE_FORMAT: u32 = 1;
/// The format of merged entries.
const MERGED_FORMAT: u32 = 2;
/// The format of full entries: their state packs the rows of its refs table and archive
/// index and leaves out block lists that follow from them ([`foldwire_core::STATE_VERSION`]
/// 2), which earlier builds would misread, so it names a format they refuse by name.
const FULL_FORMAT: u32 = 3;
/// Turns a merged entry of level 1 covers; level `l` covers `MERGE_FANOUT^l`.
pub const MERGE_FANOUT: u64 = 8;
/// Merge levels (level 4 merges 4,096 turns).
pub const MERGE_LEVELS: u32 = 4;

/// Tuning of a [`JournalStateStore`].
#[derive(Debug, Clone)]
pub struct JournalConfig {
    /// Entries a load would read after the full one, at which the next entry is a full
    /// state however small they were (merging keeps them far fewer than the turns).
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
/// compaction accounting, the entries a merge folds in, and when the version was known to
/// be the newest.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Position {
    /// The newest entry (0: none yet; the state came from `state.json` or is new).
    seq: u64,
    /// A `state.json` of an earlier build may exist (until a compaction removes it).
    legacy: bool,
    /// Bytes of the newest full entry (or of `state.json`).
    full_bytes: u64,
    /// Bytes of the entries a load reads after it.
    since_bytes: u64,
    /// Entries a load reads after it.
    since_count: u64,
    /// The newest full entry's number (0 for `state.json` or unknown).
    full_seq: u64,
    /// The entries a load reads after the full one, oldest first; `None` when not known
    /// here (the next entry is then a full one).
    chain: Option<Arc<Vec<Link>>>,
    /// When this position was known to be the newest.
    at: Instant,
}

/// One entry of the chain a load replays, as a merge needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Link {
    /// Its number.
    seq: u64,
    /// The entry it follows on from (`seq - 1` for a delta).
    from: u64,
    /// Its deltas as JSON array items (without the brackets).
    items: Bytes,
    /// Its size in bytes, header included.
    size: u64,
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
    /// For a merged entry: the entry its deltas follow on from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    from: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Kind {
    Full,
    Delta,
    /// The deltas of several turns, as a JSON array, following on from entry `from`.
    Merged,
}

/// One entry as read.
struct Entry {
    seq: u64,
    kind: Kind,
    from: Option<u64>,
    body: Bytes,
    size: u64,
}

impl Entry {
    /// The entry a load reads after this one (going back), `None` after a full one.
    fn previous(&self) -> Option<u64> {
        match self.kind {
            Kind::Full => None,
            Kind::Delta => Some(self.seq - 1),
            Kind::Merged => self.from,
        }
    }

    /// Its deltas as JSON array items: a delta's body, or a merged body without brackets.
    fn items(&self) -> Bytes {
        let body = trim_ascii(&self.body);
        let (start, end) = (body.start, body.end);
        match self.kind {
            Kind::Merged if end - start >= 2 => self.body.slice(start + 1..end - 1),
            _ => self.body.slice(start..end),
        }
    }
}

/// The writes of `ready` when any is under way.
fn under_way(ready: Option<PendingWrites>) -> Option<PendingWrites> {
    ready.filter(|r| !r.is_empty())
}

/// What `work` ends in, or done at once when there is none.
async fn done_or(
    work: Option<impl std::future::Future<Output = Result<(), StoreError>>>,
) -> Result<(), StoreError> {
    match work {
        Some(work) => work.await,
        None => Ok(()),
    }
}

/// The range of `bytes` without leading and trailing ASCII whitespace.
fn trim_ascii(bytes: &[u8]) -> std::ops::Range<usize> {
    let start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |i| i + 1);
    start..end
}

/// A generous guess at the size of `state` as JSON, from the sizes of its tables (an entry
/// of the refs table is about 60 bytes, an archive item about 270, a block 200 plus 60 a
/// covered ref); room the serializer does not use is never touched.
fn estimated_json_len(state: &SessionState) -> usize {
    let blocks: usize = state
        .blocks
        .iter()
        .map(|b| 200 + b.summary.len() + 60 * (b.direct.len() + b.effective.len()))
        .sum();
    let originals: usize = state.originals.values().map(|o| o.len() + 32).sum();
    4096 + 64 * state.refs.len() + 300 * state.archive.len() + blocks + originals
}

/// The merge level of the `since`th entry after a full one: the largest `l` with
/// `MERGE_FANOUT^l` dividing it (0: a plain delta).
fn merge_level(since: u64) -> u32 {
    let mut level = 0;
    let mut span = MERGE_FANOUT;
    while level < MERGE_LEVELS && since > 0 && since.is_multiple_of(span) {
        level += 1;
        span = span.saturating_mul(MERGE_FANOUT);
    }
    level
}

/// State versions this store issues: the prefix, then the newest entry's number.
const VERSION_PREFIX: &str = "journal:";
/// Times a load starts over when a concurrent compaction deleted an entry it listed.
const LOAD_ATTEMPTS: usize = 4;
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
        let seq = pos.seq;
        positions.insert(session.clone(), pos);
        StateVersion(format!("{VERSION_PREFIX}{seq}"))
    }

    fn recall(&self, session: &SessionId, seq: u64) -> Option<Position> {
        let positions = self.positions.lock().unwrap_or_else(|p| p.into_inner());
        positions.get(session).filter(|p| p.seq == seq).cloned()
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
        if header.kind == Kind::Merged && header.from.is_none_or(|f| f >= seq) {
            return Err(StoreError::Backend {
                backend: self.backend.to_owned(),
                operation: format!("read state entry {path}"),
                source: format!("the merged entry follows on from {:?}", header.from).into(),
            });
        }
        Ok(Some(Entry {
            seq,
            kind: header.kind,
            from: header.from,
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
        // Whether an earlier build's state is there is asked beside the listing, not after
        // it came back empty: a new session (nothing listed, nothing there) then costs one
        // round trip on S3, where it cost two; a session with a journal pays a HEAD whose
        // answer it does not need.
        let (listed, earlier_build) = futures::join!(
            self.list_entries(session),
            self.earlier_build_state(keys::state_path(session)?)
        );
        let listed = listed?;
        let Some(&(newest, _)) = listed.last() else {
            if !earlier_build? {
                return Ok(Some(None));
            }
            return self.load_legacy(session, at).await.map(Some);
        };
        // Newest first until a full entry, following merged entries back to what they
        // follow on from; every entry read is replayed.
        let mut chain: Vec<Entry> = Vec::new();
        let mut seq = newest;
        let base = loop {
            let Some(entry) = self.read_entry(session, seq).await? else {
                // Deleted by a compaction after the listing (or never there): start over.
                tracing::debug!(session = %session, seq, "state entry vanished while loading; listing again");
                return Ok(None);
            };
            match entry.previous() {
                None => break entry,
                Some(previous) if previous > 0 => {
                    seq = previous;
                    chain.push(entry);
                }
                Some(_) => {
                    return Err(StoreError::Backend {
                        backend: self.backend.to_owned(),
                        operation: format!("load state of {session}"),
                        source: "the state journal has no full entry to start from".into(),
                    });
                }
            }
        };
        let mut state = SessionState::from_json_of(&base.body, session)
            .map_err(|e| format_error(session, e))?;
        let full_bytes = base.size;
        let since_count = chain.len() as u64;
        let mut since_bytes = 0;
        let mut links = Vec::with_capacity(chain.len());
        for entry in chain.into_iter().rev() {
            since_bytes += entry.size;
            let deltas: Vec<StateDelta> = match entry.kind {
                Kind::Merged => serde_json::from_slice(&entry.body),
                _ => serde_json::from_slice(&entry.body).map(|d| vec![d]),
            }
            .map_err(|e| format_error(session, e.into()))?;
            for delta in deltas {
                delta.apply(&mut state).map_err(|e| StoreError::Backend {
                    backend: self.backend.to_owned(),
                    operation: format!("replay state journal of {session}"),
                    source: Box::new(e),
                })?;
            }
            links.push(Link {
                seq: entry.seq,
                from: entry.previous().unwrap_or(0),
                items: entry.items(),
                size: entry.size,
            });
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
            full_seq: base.seq,
            chain: Some(Arc::new(links)),
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
            full_seq: 0,
            chain: None,
            at,
        };
        Ok(Some((state, self.remember(session, pos))))
    }

    /// The first line of entry `seq`, in a buffer with room for `body_len` more bytes.
    fn header_line(
        session: &SessionId,
        seq: u64,
        kind: Kind,
        from: Option<u64>,
        body_len: usize,
    ) -> Result<Vec<u8>, StoreError> {
        let header = Header {
            // Earlier builds read delta entries; merged and full entries name the format
            // that introduced their form, so those builds refuse them by name rather than
            // misread them.
            format: match kind {
                Kind::Delta => BASE_FORMAT,
                Kind::Merged => MERGED_FORMAT,
                Kind::Full => FULL_FORMAT,
            },
            seq,
            kind,
            from,
        };
        let mut bytes = Vec::with_capacity(body_len + 96);
        serde_json::to_writer(&mut bytes, &header).map_err(|e| format_error(session, e.into()))?;
        bytes.push(b'\n');
        Ok(bytes)
    }

    /// Creates entry `seq` from `bytes` (its header line, then its body); `Ok(None)` when
    /// another writer created it first.
    async fn create(
        &self,
        session: &SessionId,
        seq: u64,
        bytes: Vec<u8>,
    ) -> Result<Option<u64>, StoreError> {
        let size = bytes.len() as u64;
        let opts = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        match self
            .store
            .put_opts(
                &Self::entry_path(session, seq)?,
                payload::bytes_in_pieces(bytes),
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

    /// [`Self::create`] once `before` (the writes the entry names, checks), when given, has
    /// succeeded. In a local directory the entry is written and synced meanwhile, and only
    /// linked into place after ([`local_entry`]); elsewhere it is created after.
    async fn create_after(
        &self,
        session: &SessionId,
        seq: u64,
        bytes: Vec<u8>,
        before: Option<impl std::future::Future<Output = Result<(), StoreError>>>,
    ) -> Result<Option<u64>, StoreError> {
        let Some(root) = &self.config.local_root else {
            done_or(before).await?;
            return self.create(session, seq, bytes).await;
        };
        let dest = root.join(Self::entry_path(session, seq)?.as_ref());
        let size = bytes.len() as u64;
        let staging = {
            let dest = dest.clone();
            spawn_blocking(move || local_entry::stage(&dest, [bytes]))
        };
        let linked = self.publish_after(dest, staging, before).await?;
        // `false`: another writer created it first.
        Ok(linked.then_some(size))
    }

    /// A session's full entry, `header` then `state`, created once `before` has succeeded
    /// (see [`Self::create_after`]). In a local directory the state is written to the staged
    /// file while it is serialized: each [`payload::WRITEBACK_PIECE`] the serializer fills
    /// goes to a blocking thread that writes it and starts it on its way to disk, so the
    /// entry (megabytes on a first turn) is synced moments after its last byte is made
    /// rather than written and synced after it.
    async fn create_full_after(
        &self,
        session: &SessionId,
        seq: u64,
        header: Vec<u8>,
        state: &SessionState,
        before: Option<impl std::future::Future<Output = Result<(), StoreError>>>,
    ) -> Result<Option<u64>, StoreError> {
        let Some(root) = &self.config.local_root else {
            let mut entry = header;
            serde_json::to_writer(&mut entry, state)
                .map_err(|e| format_error(session, e.into()))?;
            done_or(before).await?;
            return self.create(session, seq, entry).await;
        };
        let dest = root.join(Self::entry_path(session, seq)?.as_ref());
        let (to_stage, staged_pieces) = std::sync::mpsc::channel::<Vec<u8>>();
        let staging = {
            let dest = dest.clone();
            spawn_blocking(move || local_entry::stage(&dest, staged_pieces))
        };
        let mut pieces = PieceSender::new(header, to_stage);
        // A piece's hand-over fails only when the staging thread stopped.
        let written = match serde_json::to_writer(&mut pieces, state) {
            Ok(()) => pieces.finish().map_err(|e| self.staging_error(e.into())),
            Err(e) => {
                // Hung up, so the staging thread stops waiting for more and its answer
                // (below) can come.
                drop(pieces);
                Err(if e.is_io() {
                    self.staging_error(e.into())
                } else {
                    format_error(session, e.into())
                })
            }
        };
        let size = match written {
            Ok(size) => size,
            Err(failed) => {
                // Not published: the staged file is removed with the thread's answer.
                local_entry::finished(staging, self.backend, "stage state entry").await?;
                return Err(failed);
            }
        };
        let linked = self.publish_after(dest, staging, before).await?;
        // `false`: another writer created it first.
        Ok(linked.then_some(size))
    }

    /// Links the entry `staging` writes to `dest` once it and `before` have succeeded; `false`
    /// when another writer created `dest` first.
    async fn publish_after(
        &self,
        dest: PathBuf,
        staging: tokio::task::JoinHandle<std::io::Result<local_entry::Staged>>,
        before: Option<impl std::future::Future<Output = Result<(), StoreError>>>,
    ) -> Result<bool, StoreError> {
        let backend = self.backend;
        let staged = local_entry::finished(staging, backend, "stage state entry");
        let before = done_or(before);
        let (staged, before) = futures::join!(staged, before);
        // Dropped unpublished when what it names failed: the staged file goes with it.
        before?;
        let staged = staged?;
        let publish = spawn_blocking(move || staged.publish(&dest));
        local_entry::finished(publish, backend, "put state entry").await
    }

    /// The staging of an entry failed with `source`.
    fn staging_error(&self, source: Box<dyn std::error::Error + Send + Sync>) -> StoreError {
        StoreError::Backend {
            backend: self.backend.to_owned(),
            operation: "stage state entry".to_owned(),
            source,
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

    /// Removes staged puts (`<name>#<n>`) a killed writer left in the session's journal and
    /// packs folders and temp files of earlier builds' state writes, once older than the
    /// grace.
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
        let staged = (|name: &str| name.contains('#')) as fn(&str) -> bool;
        for (folder, is_leftover) in [
            (dir.join("journal"), staged),
            (dir.join("packs"), staged),
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
        mut ready: Option<PendingWrites>,
    ) -> Result<StateVersion, StoreError> {
        // A new session: refused if an earlier build's state is there (the caller did not
        // load it) — the journal slot alone would not show it. Asked while the first entry
        // is serialized and what it names is stored, not before (on S3 a round trip the
        // first turn then does not wait for on its own).
        let earlier_build = match expected {
            None => Some(self.refuse_earlier_build(session, keys::state_path(session)?)),
            Some(_) => None,
        };
        let pos = match expected {
            None => None,
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
        let seq = pos.as_ref().map_or(0, |p| p.seq) + 1;
        let at = Instant::now();
        if let (Some(before), Some(p)) = (before, pos.as_ref())
            && p.seq > 0
            && p.since_count + 1 < self.config.max_entries
            && let Some(chain) = &p.chain
        {
            let delta = StateDelta::between(before, state);
            let delta = serde_json::to_vec(&delta).map_err(|e| format_error(session, e.into()))?;
            let (kind, link, kept) = Self::next_link(p, chain, seq, delta);
            let body: Vec<u8> = match kind {
                Kind::Merged => [&b"["[..], &link.items, &b"]"[..]].concat(),
                _ => link.items.to_vec(),
            };
            let kept_bytes: u64 = kept.iter().map(|l| l.size).sum();
            // Compact once the entries a load reads weigh as much as the full entry they
            // replay onto: the full write then costs no more than they did.
            if kept_bytes + body.len() as u64 <= p.full_bytes {
                let from = (kind == Kind::Merged).then_some(link.from);
                let mut entry = Self::header_line(session, seq, kind, from, body.len())?;
                entry.extend_from_slice(&body);
                // The entry is ready; what it names must be stored before it is.
                let stored = under_way(ready.take()).map(PendingWrites::finish);
                let Some(size) = self.create_after(session, seq, entry, stored).await? else {
                    return Err(conflict(session, expected));
                };
                let mut links = kept;
                links.push(Link { size, ..link });
                return Ok(self.remember(
                    session,
                    Position {
                        seq,
                        since_bytes: kept_bytes + size,
                        since_count: links.len() as u64,
                        chain: Some(Arc::new(links)),
                        at,
                        ..p.clone()
                    },
                ));
            }
        }
        // Written straight after the header into a buffer sized for it: a long session's
        // full state is megabytes, which growing and copying again would touch twice.
        let room = pos
            .as_ref()
            .map_or(0, |p| p.full_bytes as usize)
            .max(estimated_json_len(state));
        let header = Self::header_line(session, seq, Kind::Full, None, room)?;
        let stored = under_way(ready.take()).map(PendingWrites::finish);
        let before = match (stored, earlier_build) {
            (None, None) => None,
            (stored, checked) => Some(async move {
                let (stored, checked) = futures::join!(done_or(stored), done_or(checked));
                stored.and(checked)
            }),
        };
        let Some(size) = self
            .create_full_after(session, seq, header, state, before)
            .await?
        else {
            return Err(conflict(session, expected));
        };
        let legacy = pos.as_ref().is_some_and(|p| p.legacy);
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
                full_seq: seq,
                chain: Some(Arc::new(Vec::new())),
                at,
            },
        ))
    }

    /// Whether `state_path` (a session's whole-document state, as earlier builds wrote it)
    /// exists.
    async fn earlier_build_state(&self, state_path: Path) -> Result<bool, StoreError> {
        match self.store.head(&state_path).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(self.err("head state", e)),
        }
    }

    /// `Err(Conflict)` when [`Self::earlier_build_state`] is there for a new session.
    async fn refuse_earlier_build(
        &self,
        session: &SessionId,
        state_path: Path,
    ) -> Result<(), StoreError> {
        match self.earlier_build_state(state_path).await? {
            true => Err(conflict(session, None)),
            false => Ok(()),
        }
    }

    /// The entry to write at `seq` for a turn whose delta is `delta`: a plain delta, or at
    /// a merge point the deltas of the chain's entries it covers followed by this one; with
    /// the chain entries a load still reads before it.
    fn next_link(
        p: &Position,
        chain: &[Link],
        seq: u64,
        delta: Vec<u8>,
    ) -> (Kind, Link, Vec<Link>) {
        let level = merge_level(seq - p.full_seq);
        let from = seq.saturating_sub(MERGE_FANOUT.saturating_pow(level));
        // The entries after `from` are merged; they must start right after it (they do
        // when the chain is this store's own, a merge point falling on a boundary of every
        // lower level).
        let split = chain.partition_point(|l| l.seq <= from);
        let covered = &chain[split..];
        let fits = level > 0
            && from >= p.full_seq
            && covered.first().map_or(from + 1 == seq, |l| l.from == from);
        if !fits {
            let link = Link {
                seq,
                from: seq - 1,
                items: Bytes::from(delta),
                size: 0,
            };
            return (Kind::Delta, link, chain.to_vec());
        }
        let mut items = Vec::with_capacity(
            covered.iter().map(|l| l.items.len() + 1).sum::<usize>() + delta.len(),
        );
        for l in covered {
            items.extend_from_slice(&l.items);
            items.push(b',');
        }
        items.extend_from_slice(&delta);
        let link = Link {
            seq,
            from,
            items: Bytes::from(items),
            size: 0,
        };
        (Kind::Merged, link, chain[..split].to_vec())
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
            full_seq: 0,
            chain: None,
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
        self.write(session, None, state, expected, None).await
    }

    async fn save_change(
        &self,
        session: &SessionId,
        before: &SessionState,
        state: &SessionState,
        expected: Option<&StateVersion>,
    ) -> Result<StateVersion, StoreError> {
        self.write(session, Some(before), state, expected, None)
            .await
    }

    async fn save_change_after(
        &self,
        session: &SessionId,
        before: &SessionState,
        state: &SessionState,
        expected: Option<&StateVersion>,
        ready: PendingWrites,
    ) -> Result<StateVersion, StoreError> {
        // Checked and serialized while the writes finish; created only after them.
        self.write(session, Some(before), state, expected, Some(ready))
            .await
    }
}

/// A writer that hands what is written to it on in pieces of [`payload::WRITEBACK_PIECE`],
/// for a thread writing them to a file as they come.
struct PieceSender {
    piece: Vec<u8>,
    sent: u64,
    to: std::sync::mpsc::Sender<Vec<u8>>,
}

impl PieceSender {
    /// A sender whose first piece starts with `start`.
    fn new(start: Vec<u8>, to: std::sync::mpsc::Sender<Vec<u8>>) -> Self {
        let mut piece = start;
        piece.reserve(payload::WRITEBACK_PIECE.saturating_sub(piece.len()));
        PieceSender { piece, sent: 0, to }
    }

    // Out of line and marked cold: the serializer's writes (hundreds of thousands of a few
    // bytes each on a first turn) then inline into an append and one comparison.
    #[cold]
    #[inline(never)]
    fn send(&mut self) -> std::io::Result<()> {
        let next = Vec::with_capacity(payload::WRITEBACK_PIECE);
        let piece = std::mem::replace(&mut self.piece, next);
        self.sent += piece.len() as u64;
        self.to
            .send(piece)
            .map_err(|_| std::io::Error::other("the thread writing the entry stopped"))
    }

    /// Hands on the last piece; the bytes written in all.
    fn finish(mut self) -> std::io::Result<u64> {
        if !self.piece.is_empty() {
            self.send()?;
        }
        Ok(self.sent)
    }
}

impl std::io::Write for PieceSender {
    #[inline]
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.write_all(buf)?;
        Ok(buf.len())
    }

    /// Taken whole in one append. `serde_json` writes through `write_all`, whose default
    /// loops over `write` and checks what each call took: on a first turn's megabytes of
    /// state, written a few bytes at a time, that loop was a fifth of serializing them.
    #[inline]
    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.piece.extend_from_slice(buf);
        if self.piece.len() >= payload::WRITEBACK_PIECE {
            self.send()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// What is written goes on in pieces of [`payload::WRITEBACK_PIECE`], in order, the
    /// start first, the rest with [`PieceSender::finish`], which counts every byte.
    #[test]
    fn a_piece_sender_hands_on_every_byte_in_pieces() {
        use std::io::Write as _;
        let (to, from) = std::sync::mpsc::channel();
        let mut sender = PieceSender::new(b"header\n".to_vec(), to);
        let body: Vec<u8> = (0..payload::WRITEBACK_PIECE * 3 + 10)
            .map(|i| (i % 251) as u8)
            .collect();
        for chunk in body.chunks(1000) {
            sender.write_all(chunk).unwrap();
        }
        let sent = sender.finish().unwrap();
        let pieces: Vec<Vec<u8>> = from.into_iter().collect();
        assert_eq!(pieces.len(), 3);
        assert!(
            pieces[..2]
                .iter()
                .all(|p| p.len() >= payload::WRITEBACK_PIECE)
        );
        let joined = pieces.concat();
        assert_eq!(&joined[..7], b"header\n");
        assert_eq!(&joined[7..], body.as_slice());
        assert_eq!(sent, joined.len() as u64);
    }

    /// Once the thread writing the pieces is gone, handing on the next one is an error
    /// that says so, not a silent loss.
    #[test]
    fn a_piece_sender_fails_once_its_writer_is_gone() {
        use std::io::Write as _;
        let (to, from) = std::sync::mpsc::channel();
        drop(from);
        let mut sender = PieceSender::new(Vec::new(), to);
        let failed = sender.write_all(&vec![0; payload::WRITEBACK_PIECE]);
        assert!(
            failed
                .unwrap_err()
                .to_string()
                .contains("the thread writing the entry stopped")
        );
    }
}
