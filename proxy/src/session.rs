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
    Conversation, Registry, SessionId, SessionState, StageCx, StateVersion, Turn, Wire,
};
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

    /// Saves the state if nobody else changed it since it was loaded.
    ///
    /// # Errors
    /// A concurrent writer (run the command again) or a store failure.
    pub async fn save(&mut self) -> Result<()> {
        let v = self
            .backends
            .state
            .save(&self.id, &self.state, self.version.as_ref())
            .await
            .context(
                "saving the session state (if another process changed it, run the command again)",
            )?;
        self.version = Some(v);
        Ok(())
    }
}

/// Where a session's last request is kept, beside its state: one object, overwritten every
/// turn, so a long session keeps one body and not one per turn.
fn last_request_path(session: &SessionId) -> ObjectPath {
    ObjectPath::from(format!("sessions/{}/{LAST_REQUEST}", session.as_str()))
}

/// Keeps a request `foldwire run` or `foldwire serve` processed as the session's last, so
/// `inspect` and `fold` see what the model saw whichever way the session was made. The
/// object is the wire's name, a newline, then the body exactly as received.
///
/// # Errors
/// The store refused the write.
pub async fn store_last_request(
    store: &dyn ObjectStore,
    session: &SessionId,
    wire: Wire,
    body: &Bytes,
) -> Result<()> {
    let mut payload = Vec::with_capacity(wire.as_str().len() + 1 + body.len());
    payload.extend_from_slice(wire.as_str().as_bytes());
    payload.push(b'\n');
    payload.extend_from_slice(body);
    store
        .put(&last_request_path(session), Bytes::from(payload).into())
        .await
        .with_context(|| format!("keeping the last request of session {session}"))?;
    Ok(())
}

/// The session's last request and its wire, when one was kept.
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
    let wire: Wire = std::str::from_utf8(&bytes[..newline])
        .ok()
        .and_then(|w| w.parse().ok())
        .ok_or_else(|| anyhow!("the last request of session {session} names no known wire"))?;
    Ok(Some((wire, bytes.slice(newline + 1..))))
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
