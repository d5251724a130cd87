//! `Engine`: the actor system on its own thread, reached from any tokio runtime.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use actix::{Actor, Addr};
use actix_rt::{Arbiter, ArbiterHandle, System};
use dashmap::DashMap;

use super::chain::StageChain;
use super::session::{
    ChainSlot, ForgetCarry, HostError, RunTurn, SessionActor, Snapshot, StateUpdate, TurnOutcome,
    TurnRequest, Update,
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
    idle_after: Option<Duration>,
    carry_idle_after: Option<Duration>,
}

/// How long a session may sit idle before its actor (and the state it holds in memory) is
/// retired, by default. Its state is in the store; the next turn loads it again.
pub const DEFAULT_IDLE_AFTER: Duration = Duration::from_secs(15 * 60);

/// How long a session's actor keeps what its last turn carried for the next
/// ([`crate::Turn::carry`]: the last body's decode, per-unit facts) once no turn has come,
/// by default. An agent at work sends a request every few seconds to a minute; a session
/// left alone gives the memory back well before its actor retires.
pub const DEFAULT_CARRY_IDLE_AFTER: Duration = Duration::from_secs(120);

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

    /// Retires a session's actor once no turn, update or snapshot has touched it for
    /// `after` (`None`: never). Long-running hosts see endless new sessions; without this
    /// every one of them would stay in memory.
    pub fn retire_idle_sessions(mut self, after: Option<Duration>) -> Self {
        self.idle_after = after;
        self
    }

    /// Drops what a session's last turn carried for the next ([`crate::Turn::carry`]) once
    /// no turn has come for `after` (`None`: kept while the actor lives). The next turn then
    /// starts from nothing: the same result, computed in full.
    pub fn forget_carry_after(mut self, after: Option<Duration>) -> Self {
        self.carry_idle_after = after;
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
            .map_err(|e| HostError::Start { source: e.into() })?;
        let (system, arbiters) = rx
            .recv()
            .map_err(|e| HostError::Start { source: e.into() })?;
        let chains = start_chains(&self.pipeline, &self.cx, &arbiters);
        let sessions = Arc::new(DashMap::new());
        let idle = Idle {
            retire_after: self.idle_after,
            forget_carry_after: self.carry_idle_after,
        };
        if let (Some(period), Some(arbiter)) = (idle.sweep_period(), arbiters.first()) {
            arbiter.spawn(sweep_idle(Arc::downgrade(&sessions), idle, period));
        }
        Ok(Engine {
            inner: Arc::new(Inner {
                store: self.store,
                cx: self.cx,
                arbiters,
                system,
                thread: Mutex::new(Some(thread)),
                pipeline: RwLock::new(self.pipeline),
                chains: Arc::new(RwLock::new(Arc::new(chains))),
                sessions,
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
    sessions: Directory,
    hasher: std::collections::hash_map::RandomState,
}

/// Live sessions: each one's actor and its lease.
type Directory = Arc<DashMap<SessionId, Live>>;

/// A session with a running actor.
struct Live {
    addr: Addr<SessionActor>,
    lease: Arc<Lease>,
}

/// What the retirement sweep reads: requests in flight and the last time one began.
struct Lease {
    born: Instant,
    in_flight: AtomicUsize,
    /// Milliseconds after `born` of the latest request.
    last_used_ms: AtomicU64,
    /// Set once the actor was told to drop its carry; a request clears it.
    carry_forgotten: AtomicBool,
}

impl Lease {
    fn new() -> Self {
        Lease {
            born: Instant::now(),
            in_flight: AtomicUsize::new(0),
            last_used_ms: AtomicU64::new(0),
            carry_forgotten: AtomicBool::new(false),
        }
    }

    fn idle_for(&self) -> Duration {
        let last = Duration::from_millis(self.last_used_ms.load(Ordering::Acquire));
        self.born.elapsed().saturating_sub(last)
    }
}

/// Holds a session's lease for one request; dropping it (answer or cancellation) ends it.
struct InFlight(Arc<Lease>);

impl InFlight {
    fn begin(lease: &Arc<Lease>) -> Self {
        lease.in_flight.fetch_add(1, Ordering::AcqRel);
        let now = u64::try_from(lease.born.elapsed().as_millis()).unwrap_or(u64::MAX);
        lease.last_used_ms.fetch_max(now, Ordering::AcqRel);
        lease.carry_forgotten.store(false, Ordering::Release);
        InFlight(Arc::clone(lease))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let now = u64::try_from(self.0.born.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.0.last_used_ms.fetch_max(now, Ordering::AcqRel);
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What the idle sweep does to sessions no request has touched for a while.
#[derive(Debug, Clone, Copy)]
struct Idle {
    /// Retire the actor after this long.
    retire_after: Option<Duration>,
    /// Tell the actor to drop its carry after this long.
    forget_carry_after: Option<Duration>,
}

impl Idle {
    /// A quarter of the shorter wait, within 5 ms and 30 s; `None` when nothing is timed.
    fn sweep_period(self) -> Option<Duration> {
        let shorter = match (self.retire_after, self.forget_carry_after) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b)?,
        };
        Some((shorter / 4).clamp(Duration::from_millis(5), Duration::from_secs(30)))
    }
}

/// Every `period`, drops idle sessions from the directory and tells sessions idle for
/// `forget_carry_after` to drop their carry. An actor stops once the last address to it is
/// gone, so a request that took an address before the sweep still completes on it; leases
/// are taken under the directory's shard lock, which the sweep's `retain` also holds, so a
/// session is never dropped between lookup and lease. (A timer inside each actor would keep
/// retired actors alive, and one per turn would make every turn poll all of them.)
async fn sweep_idle(directory: Weak<DashMap<SessionId, Live>>, idle: Idle, period: Duration) {
    loop {
        actix_rt::time::sleep(period).await;
        let Some(sessions) = directory.upgrade() else {
            return;
        };
        sessions.retain(|_, live| {
            let lease = &live.lease;
            let busy = lease.in_flight.load(Ordering::Acquire) > 0;
            let idle_for = lease.idle_for();
            if !busy
                && idle
                    .forget_carry_after
                    .is_some_and(|after| idle_for >= after)
                && !lease.carry_forgotten.swap(true, Ordering::AcqRel)
            {
                live.addr.do_send(ForgetCarry);
            }
            live.addr.connected()
                && (busy || idle.retire_after.is_none_or(|after| idle_for < after))
        });
    }
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
///
/// ```
/// use std::sync::Arc;
/// use foldwire_core::{
///     async_trait, Engine, MemoryStateStore, Pipeline, Registry, SessionId, Stage, StageCx,
///     StageError, Turn, TurnRequest, Wire,
/// };
///
/// /// Counts the turns of each session in its persisted state.
/// struct CountTurns;
/// #[async_trait]
/// impl Stage for CountTurns {
///     fn name(&self) -> &'static str { "doc.count_turns" }
///     async fn run(&self, turn: &mut Turn, _: &StageCx) -> Result<(), StageError> {
///         *turn.state.counters.entry("turns".into()).or_default() += 1;
///         Ok(())
///     }
/// }
///
/// let registry = Arc::new(Registry::empty());
/// let pipeline = Pipeline::builder(&registry).stage(CountTurns).build().unwrap();
/// let engine = Engine::builder(pipeline, Arc::new(MemoryStateStore::new()), registry)
///     .workers(1)
///     .start()
///     .unwrap();
///
/// let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
/// runtime.block_on(async {
///     let session = SessionId::new("doc-session").unwrap();
///     let body = bytes::Bytes::from_static(br#"{"messages":[]}"#);
///     for _ in 0..2 {
///         let outcome = engine
///             .run_turn(&session, TurnRequest::new(Wire::Anthropic, body.clone()))
///             .await
///             .unwrap();
///         // No stage encoded a new body, so the original goes on unchanged.
///         assert_eq!(outcome.output, body);
///     }
///     // The session actor kept the state between turns and saved it.
///     let state = engine.snapshot(&session).await.unwrap();
///     assert_eq!(state.counters["turns"], 2);
/// });
/// // Dropping the last handle stops the actor system and joins its thread.
/// drop(engine);
/// ```
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
            idle_after: Some(DEFAULT_IDLE_AFTER),
            carry_idle_after: Some(DEFAULT_CARRY_IDLE_AFTER),
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
        let (addr, _lease) = self.session(session);
        addr.send(RunTurn(request))
            .await
            .map_err(|source| HostError::Mailbox { source })?
    }

    /// A copy of a session's state.
    ///
    /// # Errors
    /// A store failure or shutdown.
    pub async fn snapshot(&self, session: &SessionId) -> Result<SessionState, HostError> {
        let (addr, _lease) = self.session(session);
        addr.send(Snapshot)
            .await
            .map_err(|source| HostError::Mailbox { source })?
    }

    /// Applies a change to a session's state between its turns, saves it, and returns what
    /// the change returned (typed: the compress handler gets the fold's result, not JSON).
    /// The change may run more than once (another writer saved first: it is applied again
    /// to the fresh state); the answer is the one of the run that was saved.
    ///
    /// # Errors
    /// A store failure, a concurrent writer, or shutdown.
    pub async fn update<R: Send + 'static>(
        &self,
        session: &SessionId,
        update: impl Fn(&mut SessionState) -> R + Send + 'static,
    ) -> Result<R, HostError> {
        let answer: Arc<Mutex<Option<R>>> = Arc::new(Mutex::new(None));
        let slot = Arc::clone(&answer);
        // The session actor takes a type-erased change; the typed answer travels beside it (the
        // answer of the run that was saved: a change re-run after a lost write overwrites it).
        let erased: StateUpdate = Box::new(move |state: &mut SessionState| {
            let out = update(state);
            *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(out);
        });
        let (addr, _lease) = self.session(session);
        addr.send(Update(erased))
            .await
            .map_err(|source| HostError::Mailbox { source })??;
        let out = answer.lock().unwrap_or_else(|p| p.into_inner()).take();
        out.ok_or_else(|| HostError::Unavailable("the update was saved without running".into()))
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

    /// Sessions with a live actor (idle ones are retired, see
    /// [`EngineBuilder::retire_idle_sessions`]).
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

    /// The session's actor, started if needed, with a lease taken while the directory
    /// entry is held.
    /// How many sessions have a live actor.
    pub fn live_sessions(&self) -> usize {
        self.inner.sessions.len()
    }

    fn session(&self, session: &SessionId) -> (Addr<SessionActor>, InFlight) {
        if let Some(live) = self.inner.sessions.get(session)
            && live.addr.connected()
        {
            return (live.addr.clone(), InFlight::begin(&live.lease));
        }
        let worker =
            (self.inner.hasher.hash_one(session) as usize) % self.inner.arbiters.len().max(1);
        let inner = &self.inner;
        let mut live = inner
            .sessions
            .entry(session.clone())
            .or_insert_with(|| start_session(inner, session, worker));
        if !live.addr.connected() {
            *live = start_session(inner, session, worker);
        }
        (live.addr.clone(), InFlight::begin(&live.lease))
    }
}

fn start_session(inner: &Inner, session: &SessionId, worker: usize) -> Live {
    let actor = SessionActor::new(
        session.clone(),
        Arc::clone(&inner.store),
        Arc::clone(&inner.chains),
        worker,
    );
    // `worker` is always in range: the builder keeps at least one arbiter and the index is
    // taken modulo their count.
    let arbiter = &inner.arbiters[worker % inner.arbiters.len()];
    Live {
        addr: SessionActor::start_in_arbiter(arbiter, move |_| actor),
        lease: Arc::new(Lease::new()),
    }
}
