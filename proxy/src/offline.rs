//! Offline access to one session for the CLI commands: its state, the last request it sent
//! (kept in the archive by `foldwire run` and `foldwire serve` alike), and that request's view
//! with refs minted — what the model saw, which fold and inspect check refs against.

use std::sync::Arc;

use anyhow::{Context as _, Result, anyhow, bail};
use bytes::Bytes;
use foldwire_archive::Backends;
use foldwire_archive::object_store::path::Path as ObjectPath;
use foldwire_archive::object_store::{ObjectStore, ObjectStoreExt as _};
use foldwire_core::{
    Conversation, Registry, SessionId, SessionState, StageCx, StateVersion, StoreError, Turn, Wire,
};
use foldwire_wire::shared_bytes::{common_prefix_len, common_suffix_len};
use futures::{StreamExt as _, TryStreamExt as _};
use serde::{Deserialize, Serialize};

use crate::setup;

/// Name of the last-request object beside a session's state, and the key of the record
/// earlier builds of `foldwire run` kept in `SessionState::extra` (still read).
const LAST_REQUEST: &str = "last_request";

/// Where an earlier build archived the session's last request body (read for sessions made
/// before the last request was kept beside the state).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LastRequest {
    /// The content key in the archive.
    pub key: String,
    /// Its wire.
    pub wire: Wire,
}

/// A session opened for an offline command.
pub struct OfflineSession {
    /// The session.
    pub id: SessionId,
    /// Its state and archive.
    pub backends: Backends,
    /// The registry.
    pub registry: Arc<Registry>,
    /// The state as loaded.
    pub state: SessionState,
    /// The stored version, for the conditional save.
    version: Option<StateVersion>,
}

impl OfflineSession {
    /// Opens a session at a `--state` location.
    ///
    /// # Errors
    /// A bad id or location, or a state that cannot be read.
    pub async fn open(id: &str, location: Option<&str>) -> Result<Self> {
        let id = SessionId::new(id).context("--session")?;
        let backends = setup::backends(location)?;
        let (state, version) = match backends.state.load(&id).await? {
            Some((s, v)) => (s, Some(v)),
            None => {
                bail!("session {id} has no state at this --state location: run a request first")
            }
        };
        Ok(OfflineSession {
            id,
            backends,
            registry: setup::registry()?,
            state,
            version,
        })
    }

    /// A stage context with this session's archive.
    pub fn cx(&self) -> StageCx {
        StageCx::new(self.registry.clone()).with_archive(self.backends.media.clone())
    }

    /// The last request the session sent, decoded, with media classified and archived and
    /// refs minted exactly as the pipeline does (on a copy of the state, so nothing changes).
    ///
    /// # Errors
    /// No request recorded yet, or its body is gone from the archive.
    pub async fn view(&self) -> Result<Conversation> {
        self.recorded_view().await?.ok_or_else(|| {
            anyhow!(
                "session {} has no recorded request (it was made by host code that records none): \
                 send one through `foldwire serve` or `foldwire run` first",
                self.id
            )
        })
    }

    /// The view of the last recorded request, or `None` when the session has none (a session
    /// made by host code through the library records none).
    ///
    /// # Errors
    /// An unreadable record, or a recorded body gone from the archive.
    pub async fn recorded_view(&self) -> Result<Option<Conversation>> {
        let (wire, body) = match load_last_request(self.backends.store.as_ref(), &self.id).await? {
            Some(kept) => kept,
            None => {
                let Some(last) = self
                    .state
                    .extra
                    .get(LAST_REQUEST)
                    .cloned()
                    .map(serde_json::from_value::<LastRequest>)
                    .transpose()
                    .context("reading the last-request record")?
                else {
                    return Ok(None);
                };
                let body = self
                    .backends
                    .media
                    .get_content(&self.id, &last.key)
                    .await
                    .context("reading the session's last request from the archive")?;
                (last.wire, body)
            }
        };
        let pipeline = setup::view_pipeline(&self.registry)?;
        let mut turn = Turn::new(self.id.clone(), wire, body, self.state.clone());
        pipeline
            .run(&mut turn, &self.cx())
            .await
            .map_err(|f| anyhow!("{}: {}", f.stage, f.error))?;
        turn.conversation
            .map(Some)
            .ok_or_else(|| anyhow!("the view pipeline produced no conversation"))
    }

    /// Applies `change` to the state and saves it. When another writer (a running
    /// `foldwire serve` recording a turn or the model's usage) stored a newer state in
    /// between, the state is loaded again and `change` runs again on it, so an offline
    /// command never fails only because the session was live. `change` returns its output
    /// and whether it changed anything (nothing is saved when it did not).
    ///
    /// # Errors
    /// An error of `change`, a store failure, or a session changed underneath
    /// [`SAVE_ATTEMPTS`] times in a row.
    pub async fn update<T>(
        &mut self,
        mut change: impl AsyncFnMut(&mut Self) -> Result<(T, bool)>,
    ) -> Result<T> {
        let mut attempt = 1;
        loop {
            let (out, changed) = change(self).await?;
            if !changed {
                return Ok(out);
            }
            match self
                .backends
                .state
                .save(&self.id, &self.state, self.version.as_ref())
                .await
            {
                Ok(v) => {
                    self.version = Some(v);
                    return Ok(out);
                }
                Err(StoreError::Conflict { .. }) if attempt < SAVE_ATTEMPTS => {
                    attempt += 1;
                    self.reload().await?;
                }
                Err(e) => {
                    return Err(e).with_context(|| {
                        format!(
                            "saving the state of session {} (attempt {attempt})",
                            self.id
                        )
                    });
                }
            }
        }
    }

    /// Loads the stored state again (after another writer changed it).
    async fn reload(&mut self) -> Result<()> {
        let (state, version) = self
            .backends
            .state
            .load(&self.id)
            .await?
            .ok_or_else(|| anyhow!("session {} has no state any more", self.id))?;
        self.state = state;
        self.version = Some(version);
        Ok(())
    }
}

/// How many times an offline command applies its change before it gives up on a session
/// that another writer keeps changing.
pub const SAVE_ATTEMPTS: usize = 8;

/// Where a session's last request is kept, beside its state: the base object, overwritten
/// when a new base is written.
fn last_request_path(session: &SessionId) -> ObjectPath {
    ObjectPath::from(format!("sessions/{}/{LAST_REQUEST}", session.as_str()))
}

/// The folder of the per-turn deltas over the base (see [`LastRequests`]).
fn deltas_prefix(session: &SessionId) -> ObjectPath {
    ObjectPath::from(format!("sessions/{}/{LAST_REQUEST}.d", session.as_str()))
}

fn delta_path(session: &SessionId, seq: u64) -> ObjectPath {
    ObjectPath::from(format!(
        "sessions/{}/{LAST_REQUEST}.d/{seq:020}",
        session.as_str()
    ))
}

/// Deltas over one base before the next request is written whole (bounds what a session
/// command reads).
const MAX_DELTAS: u64 = 256;
/// Request bodies kept in memory to diff the next one against, over all sessions; past it
/// the cache starts over (the next request of each session is written whole).
const MAX_CACHED_BYTES: u64 = 256 << 20;

/// The header line of a delta object.
#[derive(Debug, Serialize, Deserialize)]
struct DeltaHeader {
    /// The id of the base this delta chain starts from.
    base: String,
    /// Position in the chain, from 1.
    seq: u64,
    /// Length of the request the delta applies to.
    prev_len: u64,
    /// Bytes kept from the start of that request.
    prefix: u64,
    /// Bytes kept from its end.
    suffix: u64,
}

/// The request a session last recorded, as this process wrote it.
struct Chain {
    /// The base's id.
    id: String,
    wire: Wire,
    body: Bytes,
    /// Deltas written over the base.
    seq: u64,
    /// Bytes of those deltas.
    bytes: u64,
}

/// One session's slot: the newest ticket recorded and the chain in hand.
#[derive(Default)]
struct Kept {
    ticket: u64,
    chain: Option<Chain>,
}

/// Keeps each session's last request for the session commands (`inspect`, `fold`), writing
/// per turn only what changed: a client resends its whole history, so a request is the
/// previous one with a stretch replaced (the new messages, a moved cache marker). A turn
/// writes one delta object holding that stretch (created with create-if-absent, so two
/// replicas cannot both extend one chain); when the deltas weigh as much as the request (or
/// after [`MAX_DELTAS`]), the request is written whole as a new base and the old deltas go.
/// A reader applies the deltas that name the base, in order, and stops at the first that
/// does not fit, so a race or a half-done clean-up shows an older request, never a mix.
#[derive(Clone)]
pub struct LastRequests {
    store: Arc<dyn ObjectStore>,
    sessions: Arc<dashmap::DashMap<SessionId, Arc<tokio::sync::Mutex<Kept>>>>,
    tickets: Arc<std::sync::atomic::AtomicU64>,
    cached: Arc<std::sync::atomic::AtomicU64>,
}

impl std::fmt::Debug for LastRequests {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LastRequests")
            .field("sessions", &self.sessions.len())
            .finish()
    }
}

impl LastRequests {
    /// A recorder over the state location's object store.
    pub fn new(store: Arc<dyn ObjectStore>) -> Self {
        LastRequests {
            store,
            sessions: Arc::new(dashmap::DashMap::new()),
            tickets: Arc::new(std::sync::atomic::AtomicU64::new(0)),
            cached: Arc::new(std::sync::atomic::AtomicU64::new(0)),
        }
    }

    /// A ticket taken in request order, before the recording is handed to a task: a
    /// recording that runs after a newer one of its session is dropped.
    pub fn ticket(&self) -> u64 {
        self.tickets
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            + 1
    }

    /// Records `body` as the session's last request (see the type's docs).
    ///
    /// # Errors
    /// The store refused the write; the session commands then see an older request.
    pub async fn record(
        &self,
        ticket: u64,
        session: &SessionId,
        wire: Wire,
        body: &Bytes,
    ) -> Result<()> {
        use std::sync::atomic::Ordering;
        let slot = Arc::clone(self.sessions.entry(session.clone()).or_default().value());
        let mut kept = slot.lock().await;
        if ticket <= kept.ticket {
            return Ok(());
        }
        let old_len = kept.chain.as_ref().map_or(0, |c| c.body.len() as u64);
        let next = match kept.chain.take() {
            Some(chain) => self.extend(session, chain, wire, body).await?,
            None => None,
        };
        let next = match next {
            Some(chain) => chain,
            None => self.write_base(session, wire, body).await?,
        };
        kept.ticket = ticket;
        kept.chain = Some(next);
        drop(kept);
        let grown = body.len() as u64;
        let now = self.cached.fetch_add(grown, Ordering::SeqCst) + grown;
        let _ = self
            .cached
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |c| {
                Some(c.saturating_sub(old_len))
            });
        if now.saturating_sub(old_len) > MAX_CACHED_BYTES {
            // Start over: each session's next request is written whole.
            self.sessions.clear();
            self.cached.store(0, Ordering::SeqCst);
        }
        Ok(())
    }

    /// Writes the change from the chain's request to `body` as the next delta; `None` when
    /// the request should be written whole instead.
    async fn extend(
        &self,
        session: &SessionId,
        chain: Chain,
        wire: Wire,
        body: &Bytes,
    ) -> Result<Option<Chain>> {
        if chain.wire != wire || chain.seq + 1 >= MAX_DELTAS {
            return Ok(None);
        }
        let (prefix, suffix) = common_ends(&chain.body, body);
        let middle = &body[prefix..body.len() - suffix];
        let header = DeltaHeader {
            base: chain.id.clone(),
            seq: chain.seq + 1,
            prev_len: chain.body.len() as u64,
            prefix: prefix as u64,
            suffix: suffix as u64,
        };
        let mut payload = serde_json::to_vec(&header)?;
        payload.push(b'\n');
        payload.extend_from_slice(middle);
        // Deltas that weigh as much as the request: write it whole (that costs no more).
        if chain.bytes + payload.len() as u64 > body.len() as u64 {
            return Ok(None);
        }
        let size = payload.len() as u64;
        let opts = foldwire_archive::object_store::PutOptions {
            mode: foldwire_archive::object_store::PutMode::Create,
            ..Default::default()
        };
        match self
            .store
            .put_opts(&delta_path(session, header.seq), payload.into(), opts)
            .await
        {
            Ok(_) => Ok(Some(Chain {
                body: body.clone(),
                seq: header.seq,
                bytes: chain.bytes + size,
                ..chain
            })),
            // Another replica extended this chain: start a new one.
            Err(foldwire_archive::object_store::Error::AlreadyExists { .. }) => Ok(None),
            Err(e) => Err(anyhow::Error::new(e)
                .context(format!("keeping the last request of session {session}"))),
        }
    }

    /// Writes `body` whole as a new base and removes the old deltas.
    async fn write_base(&self, session: &SessionId, wire: Wire, body: &Bytes) -> Result<Chain> {
        let id = base_id();
        store_last_request_with_id(self.store.as_ref(), session, wire, body, Some(&id)).await?;
        let listed: Vec<_> = self
            .store
            .list(Some(&deltas_prefix(session)))
            .map_ok(|m| m.location)
            .collect::<Vec<_>>()
            .await;
        let doomed: Vec<_> = listed.into_iter().filter_map(Result::ok).map(Ok).collect();
        if !doomed.is_empty() {
            // Best effort: a delta left behind names another base and is never applied.
            let _ = self
                .store
                .delete_stream(futures::stream::iter(doomed).boxed())
                .collect::<Vec<_>>()
                .await;
        }
        Ok(Chain {
            id,
            wire,
            body: body.clone(),
            seq: 0,
            bytes: 0,
        })
    }
}

/// A base id no other writer picks: time, process and a counter.
fn base_id() -> String {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{nanos:x}-{:x}-{:x}",
        std::process::id(),
        COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )
}

/// Lengths of the longest common prefix and suffix of `a` and `b` that do not overlap in
/// either.
fn common_ends(a: &[u8], b: &[u8]) -> (usize, usize) {
    let prefix = common_prefix_len(a, b);
    let room = a.len().min(b.len()) - prefix;
    let suffix = common_suffix_len(&a[a.len() - room..], &b[b.len() - room..]);
    (prefix, suffix)
}

/// Keeps a request `foldwire run` or `foldwire serve` processed as the session's last, so
/// `inspect` and `fold` see what the model saw whichever way the session was made. The
/// object is the wire's name, a newline, then the body exactly as received. (`serve` goes
/// through [`LastRequests`], which writes per turn only what changed.)
///
/// # Errors
/// The store refused the write.
pub async fn store_last_request(
    store: &dyn ObjectStore,
    session: &SessionId,
    wire: Wire,
    body: &Bytes,
) -> Result<()> {
    store_last_request_with_id(store, session, wire, body, None).await
}

/// [`store_last_request`], naming the base a delta chain may extend (`<wire> <id>` on the
/// first line).
async fn store_last_request_with_id(
    store: &dyn ObjectStore,
    session: &SessionId,
    wire: Wire,
    body: &Bytes,
    id: Option<&str>,
) -> Result<()> {
    let mut head = Vec::with_capacity(wire.as_str().len() + 40);
    head.extend_from_slice(wire.as_str().as_bytes());
    if let Some(id) = id {
        head.push(b' ');
        head.extend_from_slice(id.as_bytes());
    }
    head.push(b'\n');
    // The body is shared, not copied behind its header line.
    let payload = foldwire_archive::payload::in_pieces([Bytes::from(head), body.clone()]);
    store
        .put(&last_request_path(session), payload)
        .await
        .with_context(|| format!("keeping the last request of session {session}"))?;
    Ok(())
}

/// The session's last request and its wire, when one was kept: the base, then the deltas
/// that extend it in order (up to the first that does not fit).
///
/// # Errors
/// The store failed, or the object is not one [`store_last_request`] wrote.
pub async fn load_last_request(
    store: &dyn ObjectStore,
    session: &SessionId,
) -> Result<Option<(Wire, Bytes)>> {
    let bytes = match store.get(&last_request_path(session)).await {
        Ok(r) => r.bytes().await?,
        Err(foldwire_archive::object_store::Error::NotFound { .. }) => return Ok(None),
        Err(e) => {
            return Err(anyhow::Error::new(e)
                .context(format!("reading the last request of session {session}")));
        }
    };
    let newline = bytes
        .iter()
        .position(|&b| b == b'\n')
        .ok_or_else(|| anyhow!("the last request of session {session} has no wire line"))?;
    let first = std::str::from_utf8(&bytes[..newline]).unwrap_or_default();
    let (wire_name, id) = match first.split_once(' ') {
        Some((w, id)) => (w, Some(id)),
        None => (first, None),
    };
    let wire: Wire = wire_name
        .parse()
        .ok()
        .ok_or_else(|| anyhow!("the last request of session {session} names no known wire"))?;
    let mut body = bytes.slice(newline + 1..);
    if let Some(id) = id {
        body = apply_deltas(store, session, id, body).await?;
    }
    Ok(Some((wire, body)))
}

/// Applies the deltas over base `id` in order, stopping at the first missing or misfit one.
async fn apply_deltas(
    store: &dyn ObjectStore,
    session: &SessionId,
    id: &str,
    mut body: Bytes,
) -> Result<Bytes> {
    let mut seqs: Vec<u64> = store
        .list(Some(&deltas_prefix(session)))
        .try_collect::<Vec<_>>()
        .await
        .with_context(|| format!("listing the last request of session {session}"))?
        .into_iter()
        .filter_map(|m| m.location.filename().and_then(|f| f.parse().ok()))
        .collect();
    seqs.sort_unstable();
    for (want, seq) in (1u64..).zip(seqs) {
        if seq != want {
            break;
        }
        let raw = match store.get(&delta_path(session, seq)).await {
            Ok(r) => r.bytes().await?,
            Err(foldwire_archive::object_store::Error::NotFound { .. }) => break,
            Err(e) => return Err(anyhow::Error::new(e)),
        };
        let Some(newline) = raw.iter().position(|&b| b == b'\n') else {
            break;
        };
        let Ok(header) = serde_json::from_slice::<DeltaHeader>(&raw[..newline]) else {
            break;
        };
        let len = body.len() as u64;
        if header.base != id
            || header.seq != seq
            || header.prev_len != len
            || header.prefix.saturating_add(header.suffix) > len
        {
            break;
        }
        let (prefix, suffix) = (header.prefix as usize, header.suffix as usize);
        let middle = &raw[newline + 1..];
        let mut next = Vec::with_capacity(prefix + middle.len() + suffix);
        next.extend_from_slice(&body[..prefix]);
        next.extend_from_slice(middle);
        next.extend_from_slice(&body[body.len() - suffix..]);
        body = Bytes::from(next);
    }
    Ok(body)
}

/// An empty view of a session's wire, for sessions with no recorded request: refs and
/// blocks come from the state alone.
pub fn empty_view(wire: Wire) -> Conversation {
    Conversation {
        wire,
        source: Bytes::new(),
        messages_span: 0..0,
        entries: Vec::new(),
        messages: Vec::new(),
        overrides: Vec::new(),
        model: None,
        stream: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use foldwire_wire::shared_bytes::BLOCK;

    /// The byte-by-byte answer [`common_ends`] must give.
    fn naive(a: &[u8], b: &[u8]) -> (usize, usize) {
        let prefix = a.iter().zip(b).take_while(|(x, y)| x == y).count();
        let room = a.len().min(b.len()) - prefix;
        let suffix = a
            .iter()
            .rev()
            .zip(b.iter().rev())
            .take(room)
            .take_while(|(x, y)| x == y)
            .count();
        (prefix, suffix)
    }

    #[test]
    fn common_ends_agree_with_a_byte_by_byte_compare() {
        let base: Vec<u8> = (0..3 * BLOCK + 123).map(|i| (i * 7 % 251) as u8).collect();
        let mut cases: Vec<(Vec<u8>, Vec<u8>)> = vec![
            (base.clone(), base.clone()),
            (Vec::new(), base.clone()),
            (base[..10].to_vec(), base.clone()),
        ];
        // A change at and around each block edge, from either end, and an insertion.
        for at in [
            0,
            1,
            BLOCK - 1,
            BLOCK,
            BLOCK + 1,
            2 * BLOCK,
            base.len() - BLOCK,
            base.len() - 1,
        ] {
            let mut changed = base.clone();
            changed[at] ^= 0xff;
            cases.push((base.clone(), changed));
            let mut grown = base.clone();
            grown.splice(at..at, b"new turn".iter().copied());
            cases.push((base.clone(), grown.clone()));
            cases.push((grown, base.clone()));
        }
        // Repetitive bytes, where the ends could overlap.
        cases.push((vec![b'a'; 2 * BLOCK + 5], vec![b'a'; 3 * BLOCK]));
        for (a, b) in &cases {
            assert_eq!(common_ends(a, b), naive(a, b), "{} vs {}", a.len(), b.len());
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn an_offline_change_is_applied_again_after_a_live_writer_saves() {
        let dir = tempfile::tempdir().unwrap();
        let location = dir.path().to_str().unwrap();
        let id = SessionId::new("live").unwrap();
        let backends = setup::backends(Some(location)).unwrap();
        let first = backends
            .state
            .save(&id, &SessionState::new(id.clone()), None)
            .await
            .unwrap();
        let mut s = OfflineSession::open("live", Some(location)).await.unwrap();
        // A running proxy stores a turn after the command loaded the state.
        let mut live = SessionState::new(id.clone());
        live.extra.insert("turn".into(), 2.into());
        backends.state.save(&id, &live, Some(&first)).await.unwrap();

        let mut runs = 0;
        let out = s
            .update(async |s| {
                runs += 1;
                s.state.extra.insert("folded".into(), true.into());
                Ok((runs, true))
            })
            .await
            .unwrap();
        assert_eq!(
            out, 2,
            "the change ran once on the stale state and once reloaded"
        );
        let (stored, _) = backends.state.load(&id).await.unwrap().unwrap();
        assert_eq!(
            stored.extra.get("turn"),
            Some(&2.into()),
            "the live turn kept"
        );
        assert_eq!(stored.extra.get("folded"), Some(&true.into()));

        // A change that changes nothing saves nothing.
        let (_, before) = backends.state.load(&id).await.unwrap().unwrap();
        s.update(async |_| Ok(((), false))).await.unwrap();
        let (_, after) = backends.state.load(&id).await.unwrap().unwrap();
        assert_eq!(before, after);
    }
}
