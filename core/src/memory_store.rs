//! An in-memory [`StateStore`], for tests and hosts that keep nothing between runs.

use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use dashmap::DashMap;

use crate::archive::{StateStore, StateVersion, StoreError};
use crate::ids::SessionId;
use crate::state::SessionState;

/// Keeps serialized session states in a map; versions are a global generation counter.
#[derive(Debug, Default)]
pub struct MemoryStateStore {
    states: DashMap<SessionId, (Vec<u8>, StateVersion)>,
    generation: AtomicU64,
}

impl MemoryStateStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl StateStore for MemoryStateStore {
    async fn load(
        &self,
        session: &SessionId,
    ) -> Result<Option<(SessionState, StateVersion)>, StoreError> {
        let Some(entry) = self.states.get(session).map(|e| e.value().clone()) else {
            return Ok(None);
        };
        let state =
            SessionState::from_json_of(&entry.0, session).map_err(|source| StoreError::Format {
                session: session.to_string(),
                source,
            })?;
        Ok(Some((state, entry.1)))
    }

    async fn save(
        &self,
        session: &SessionId,
        state: &SessionState,
        expected: Option<&StateVersion>,
    ) -> Result<StateVersion, StoreError> {
        let bytes = state.to_json().map_err(|source| StoreError::Format {
            session: session.to_string(),
            source,
        })?;
        let version = StateVersion(self.generation.fetch_add(1, Ordering::Relaxed).to_string());
        // The entry guard makes compare-and-swap atomic for this key.
        let mut slot = self.states.entry(session.clone());
        let current = match &mut slot {
            dashmap::Entry::Occupied(o) => Some(o.get().1.clone()),
            dashmap::Entry::Vacant(_) => None,
        };
        if current.as_ref() != expected {
            return Err(StoreError::Conflict {
                session: session.to_string(),
                expected: expected.map(|v| v.0.clone()),
            });
        }
        match slot {
            dashmap::Entry::Occupied(mut o) => {
                o.insert((bytes, version.clone()));
            }
            dashmap::Entry::Vacant(v) => {
                v.insert((bytes, version.clone()));
            }
        }
        Ok(version)
    }
}
