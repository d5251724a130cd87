//! `Engine`: the actor system on its own thread, reached from any tokio runtime.

use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;

use actix::{Actor, Addr};
use actix_rt::{Arbiter, ArbiterHandle, System};
use dashmap::DashMap;

use super::chain::StageChain;
use super::session::{
    ChainSlot, HostError, RunTurn, SessionActor, Snapshot, StateUpdate, TurnOutcome, TurnRequest,
    Update,
};
use crate::archive::StateStore;
use crate::ids::SessionId;
use crate::pipeline::Pipeline;
use crate::registry::Registry;
use crate::stage::StageCx;
use crate::state::SessionState;

/// Builds an [`Engine`].
#[derive(Debug)]
pub struct EngineBuilder {
    pipeline: Pipeline,
    store: Arc<dyn StateStore>,
    cx: StageCx,
    workers: usize,
}

impl EngineBuilder {
    /// Sets the stage context (archive, estimator, clock, registry).
    pub fn context(mut self, cx: StageCx) -> Self {
        self.cx = cx;
        self
    }

    /// Sets the number of worker arbiters (threads); each runs a full chain of stage actors.
    pub fn workers(mut self, workers: usize) -> Self {
        self.workers = workers.max(1);
        self
    }

    /// Starts the actor system on its own thread.
    ///
    /// # Errors
    /// When the thread cannot be spawned or the system does not come up.
    pub fn start(self) -> Result<Engine, HostError> {
        let workers = self.workers;
        let (tx, rx) = std::sync::mpsc::channel::<(System, Vec<ArbiterHandle>)>();
        let thread = std::thread::Builder::new()
            .name("foldwire-actors".into())
            .spawn(move || {
                let system = System::new();
                let arbiters: Vec<Arbiter> = (0..workers).map(|_| Arbiter::new()).collect();
                let handles = arbiters.iter().map(Arbiter::handle).collect();
                if tx.send((System::current(), handles)).is_ok() {
                    // Blocks until `System::stop`.
                    let _ = system.run();
                }
                drop(arbiters);
            })
            .map_err(|e| HostError::Unavailable(format!("cannot spawn the actor thread: {e}")))?;
        let (system, arbiters) = rx
            .recv()
            .map_err(|e| HostError::Unavailable(format!("actor system did not start: {e}")))?;
        let chains = start_chains(&self.pipeline, &self.cx, &arbiters);
        Ok(Engine {
            inner: Arc::new(Inner {
                store: self.store,
                cx: self.cx,
                arbiters,
                system,
                thread: Mutex::new(Some(thread)),
                pipeline: RwLock::new(self.pipeline),
                chains: Arc::new(RwLock::new(Arc::new(chains))),
                sessions: DashMap::new(),
                hasher: std::collections::hash_map::RandomState::new(),
            }),
        })
    }
}

fn start_chains(pipeline: &Pipeline, cx: &StageCx, arbiters: &[ArbiterHandle]) -> Vec<StageChain> {
    arbiters
        .iter()
        .map(|a| StageChain::start(pipeline, cx, a))
        .collect()
}

struct Inner {
    store: Arc<dyn StateStore>,
    cx: StageCx,
    arbiters: Vec<ArbiterHandle>,
    system: System,
    thread: Mutex<Option<JoinHandle<()>>>,
    pipeline: RwLock<Pipeline>,
    chains: ChainSlot,
    sessions: DashMap<SessionId, Addr<SessionActor>>,
    hasher: std::collections::hash_map::RandomState,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.system.stop();
        let thread = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(t) = thread {
            let _ = t.join();
        }
    }
}

/// The running actor system: stage actors per worker, one session actor per live session,
/// a session directory, and the pipeline in force. Cheap to clone; every method can be
/// called from any thread or tokio runtime.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("workers", &self.inner.arbiters.len())
            .field("sessions", &self.inner.sessions.len())
            .finish()
    }
}

impl Engine {
    /// A builder for an engine running `pipeline` and keeping state in `store`.
    pub fn builder(
        pipeline: Pipeline,
        store: Arc<dyn StateStore>,
        registry: Arc<Registry>,
    ) -> EngineBuilder {
        let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
        EngineBuilder {
            pipeline,
            store,
            cx: StageCx::new(registry),
            workers,
        }
    }

    /// Runs one request through the session's actor.
    ///
    /// # Errors
    /// A store failure, persistent write contention, or shutdown. Pipeline failures are not
    /// errors: the outcome forwards the original body and says why.
    pub async fn run_turn(
        &self,
        session: &SessionId,
        request: TurnRequest,
    ) -> Result<TurnOutcome, HostError> {
        self.session(session)
            .send(RunTurn(request))
            .await
            .map_err(|e| HostError::Unavailable(e.to_string()))?
    }

    /// A copy of a session's state.
    ///
    /// # Errors
    /// A store failure or shutdown.
    pub async fn snapshot(&self, session: &SessionId) -> Result<SessionState, HostError> {
        self.session(session)
            .send(Snapshot)
            .await
            .map_err(|e| HostError::Unavailable(e.to_string()))?
    }

    /// Applies a change to a session's state between its turns and saves it.
    ///
    /// # Errors
    /// A store failure, a concurrent writer, or shutdown.
    pub async fn update(
        &self,
        session: &SessionId,
        update: StateUpdate,
    ) -> Result<serde_json::Value, HostError> {
        self.session(session)
            .send(Update(update))
            .await
            .map_err(|e| HostError::Unavailable(e.to_string()))?
    }

    /// Swaps in a new pipeline atomically: turns already running finish on the old one.
    pub fn swap_pipeline(&self, pipeline: Pipeline) {
        let chains = start_chains(&pipeline, &self.inner.cx, &self.inner.arbiters);
        *self.inner.chains.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(chains);
        *self
            .inner
            .pipeline
            .write()
            .unwrap_or_else(|p| p.into_inner()) = pipeline;
    }

    /// The pipeline in force.
    pub fn pipeline(&self) -> Pipeline {
        self.inner
            .pipeline
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The stage context stages run with.
    pub fn context(&self) -> &StageCx {
        &self.inner.cx
    }

    /// The state store.
    pub fn store(&self) -> &Arc<dyn StateStore> {
        &self.inner.store
    }

    /// Sessions with a live actor.
    pub fn sessions(&self) -> Vec<SessionId> {
        let mut all: Vec<SessionId> = self
            .inner
            .sessions
            .iter()
            .map(|e| e.key().clone())
            .collect();
        all.sort();
        all
    }

    fn session(&self, session: &SessionId) -> Addr<SessionActor> {
        if let Some(addr) = self.inner.sessions.get(session)
            && addr.connected()
        {
            return addr.clone();
        }
        let worker =
            (self.inner.hasher.hash_one(session) as usize) % self.inner.arbiters.len().max(1);
        let inner = &self.inner;
        let mut entry = inner
            .sessions
            .entry(session.clone())
            .or_insert_with(|| start_session(inner, session, worker));
        if !entry.connected() {
            *entry = start_session(inner, session, worker);
        }
        entry.clone()
    }
}

fn start_session(inner: &Inner, session: &SessionId, worker: usize) -> Addr<SessionActor> {
    let actor = SessionActor::new(
        session.clone(),
        Arc::clone(&inner.store),
        Arc::clone(&inner.chains),
        worker,
    );
    // `worker` is always in range: the builder keeps at least one arbiter and the index is
    // taken modulo their count.
    let arbiter = &inner.arbiters[worker % inner.arbiters.len()];
    SessionActor::start_in_arbiter(arbiter, move |_| actor)
}
