//! Offline access to one session for the CLI commands: its state, the last request it sent
//! (kept in the archive by `foldwire run` and `foldwire serve` alike), and that request's view
//! with refs minted — what the model saw, which fold and inspect check refs against.

use std::sync::Arc;

use anyhow::{Context as _, Result, anyhow, bail};
use bytes::Bytes;
use foldwire_archive::Backends;
use foldwire_core::{
    Conversation, Engine, MediaArchive, Registry, SessionId, SessionState, StageCx, StateVersion,
    Turn, Wire,
};
use serde::{Deserialize, Serialize};

use crate::setup;

/// Key of the last-request record in `SessionState::extra`.
const LAST_REQUEST: &str = "last_request";

/// Where the session's last request body is archived.
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
        let pipeline = setup::view_pipeline(&self.registry)?;
        let mut turn = Turn::new(self.id.clone(), last.wire, body, self.state.clone());
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

/// Archives a request body and returns the record `view` finds it by.
///
/// # Errors
/// The archive refused the write.
pub async fn archive_request(
    media: &dyn MediaArchive,
    session: &SessionId,
    wire: Wire,
    body: Bytes,
) -> Result<LastRequest> {
    let stored = media
        .put_content(session, "application/json", body)
        .await
        .context("archiving the request body")?;
    Ok(LastRequest {
        key: stored.key,
        wire,
    })
}

/// Records the last request in a state.
pub fn record_last_request(state: &mut SessionState, last: &LastRequest) {
    if let Ok(v) = serde_json::to_value(last) {
        state.extra.insert(LAST_REQUEST.to_owned(), v);
    }
}

/// Records a request `foldwire serve` processed as the session's last, as `foldwire run`
/// does, so `inspect` and `fold` see what the model saw whichever way the session was made.
/// Does nothing when the engine has no archive.
///
/// # Errors
/// The archive or the state store refused the write.
pub async fn record_served_request(
    engine: &Engine,
    session: &SessionId,
    wire: Wire,
    body: Bytes,
) -> Result<()> {
    let Some(media) = engine.context().archive.clone() else {
        return Ok(());
    };
    let last = archive_request(media.as_ref(), session, wire, body).await?;
    engine
        .update(
            session,
            Box::new(move |state| {
                record_last_request(state, &last);
                serde_json::Value::Null
            }),
        )
        .await
        .context("recording the session's last request")?;
    Ok(())
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
