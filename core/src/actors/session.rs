//! `SessionActor`: owns one session's state and serializes its turns.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use actix::{Actor, ActorFutureExt, AtomicResponse, Context, Handler, Message, WrapFuture};
use bytes::Bytes;

use super::chain::{ChainError, StageChain};
use crate::archive::{PendingWrites, StateStore, StateVersion, StoreError};
use crate::budget::Budget;
use crate::conversation::Conversation;
use crate::extensions::Extensions;
use crate::ids::SessionId;
use crate::report::TurnReport;
use crate::stage::StageError;
use crate::state::SessionState;
use crate::turn::{Turn, TurnOptions};
use crate::wire::Wire;

/// How many times a turn is re-run after losing a conditional write to another writer.
pub const MAX_SAVE_ATTEMPTS: usize = 16;

/// One request for a session.
#[derive(Debug, Clone)]
pub struct TurnRequest {
    /// The wire.
    pub wire: Wire,
    /// The request body.
    pub body: Bytes,
    /// The budget.
    pub budget: Budget,
    /// Per-turn overrides.
    pub options: TurnOptions,
    /// The body already decoded for its wire, when the host had to decode it before the
    /// turn (the proxy does, to tell sessions apart by history): `wire.decode` starts from
    /// it instead of decoding the body again. It must be `body` decoded for `wire`.
    pub decoded: Option<Conversation>,
}

impl TurnRequest {
    /// A request with the default budget and no overrides.
    pub fn new(wire: Wire, body: Bytes) -> Self {
        TurnRequest {
            wire,
            body,
            budget: Budget::default(),
            options: TurnOptions::default(),
            decoded: None,
        }
    }
}

/// What a turn produced.
#[derive(Debug, Clone)]
pub struct TurnOutcome {
    /// The body to forward: the pipeline's output, or the original body unchanged when the
    /// pipeline failed (fail-open, see `report.fail_open`) or refused (`report.refusal`).
    pub output: Bytes,
    /// What happened.
    pub report: TurnReport,
    /// The conversation the pipeline produced (refs minted, folds and layout applied: what
    /// the model sees), when the turn ran to the end. Handlers of the model's tool calls
    /// check refs against it; it is moved out of the turn, never copied.
    pub conversation: Option<Arc<Conversation>>,
}

/// Errors of the actor host.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// The state store failed; the turn's state changes were not saved.
    #[error("session {session}: {source}")]
    Store {
        /// The session.
        session: String,
        /// The store error.
        #[source]
        source: StoreError,
    },
    /// Writers kept conflicting on this session.
    #[error(
        "session {session}: state changed underneath this writer {attempts} times in a row; giving up"
    )]
    Contention {
        /// The session.
        session: String,
        /// Attempts made.
        attempts: usize,
    },
    /// The actor system is shutting down.
    #[error("actor system unavailable: {0}")]
    Unavailable(String),
    /// A message to an actor was not delivered (the system is shutting down).
    #[error("actor system unavailable: {source}")]
    Mailbox {
        /// Why actix could not deliver it.
        #[source]
        source: actix::MailboxError,
    },
    /// The actor system did not start.
    #[error("actor system did not start: {source}")]
    Start {
        /// The thread spawn or start-up handshake error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// The pipeline chains currently in force, one per worker; swapped atomically.
pub type ChainSlot = Arc<RwLock<Arc<Vec<StageChain>>>>;

/// Runs one turn for the actor's session.
#[derive(Debug)]
pub struct RunTurn(pub TurnRequest);

impl Message for RunTurn {
    type Result = Result<TurnOutcome, HostError>;
}

/// Returns a copy of the session's state (loading it if needed).
#[derive(Debug)]
pub struct Snapshot;

impl Message for Snapshot {
    type Result = Result<SessionState, HostError>;
}

/// A change to a session's state outside a turn (commands such as fold or reset).
///
/// It is a `Fn`, not a `FnOnce`, because it may run more than once: when another writer
/// (a second replica) saved the session in between, the actor reloads the state and applies
/// the same change again, so a change a client or the model asked for is never dropped.
pub type StateUpdate = Box<dyn Fn(&mut SessionState) + Send>;

/// Applies a [`StateUpdate`] and saves the result, serialized with the session's turns.
pub struct Update(pub StateUpdate);

impl std::fmt::Debug for Update {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Update(..)")
    }
}

impl Message for Update {
    type Result = Result<(), HostError>;
}

type Loaded = Option<(SessionState, Option<StateVersion>)>;

/// Owns one session's state between turns and runs its turns one at a time.
pub struct SessionActor {
    session: SessionId,
    store: Arc<dyn StateStore>,
    chains: ChainSlot,
    worker: usize,
    loaded: Loaded,
    /// What the last turn's stages left for the next ([`Turn::carry`]).
    carry: Extensions,
}

impl SessionActor {
    /// An actor for a session; state loads on its first message.
    pub fn new(
        session: SessionId,
        store: Arc<dyn StateStore>,
        chains: ChainSlot,
        worker: usize,
    ) -> Self {
        SessionActor {
            session,
            store,
            chains,
            worker,
            loaded: None,
            carry: Extensions::new(),
        }
    }

    fn chain(&self) -> Option<StageChain> {
        let chains = self
            .chains
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        chains.get(self.worker % chains.len().max(1)).cloned()
    }
}

impl Actor for SessionActor {
    type Context = Context<Self>;
}

async fn load(
    store: &dyn StateStore,
    session: &SessionId,
) -> Result<(SessionState, Option<StateVersion>), HostError> {
    match store.load(session).await {
        Ok(Some((state, version))) => Ok((state, Some(version))),
        Ok(None) => Ok((SessionState::new(session.clone()), None)),
        Err(source) => Err(HostError::Store {
            session: session.to_string(),
            source,
        }),
    }
}

/// The state a session actor carries from one turn to the next.
struct Carried {
    loaded: Loaded,
    carry: Extensions,
}

/// Runs a turn, keeping what its stages left for the next ([`Turn::carry`]).
async fn execute_turn(
    store: Arc<dyn StateStore>,
    session: SessionId,
    chain: Option<StageChain>,
    carried: Carried,
    request: TurnRequest,
) -> (Carried, Result<TurnOutcome, HostError>) {
    let mut carry = carried.carry;
    let (loaded, result) =
        run_turn(store, session, chain, carried.loaded, request, &mut carry).await;
    (Carried { loaded, carry }, result)
}

async fn run_turn(
    store: Arc<dyn StateStore>,
    session: SessionId,
    chain: Option<StageChain>,
    loaded: Loaded,
    mut request: TurnRequest,
    carry: &mut Extensions,
) -> (Loaded, Result<TurnOutcome, HostError>) {
    let Some(chain) = chain else {
        return (
            loaded,
            Err(HostError::Unavailable("no pipeline installed".into())),
        );
    };
    let (mut state, mut version) = match loaded {
        Some(l) => l,
        None => match load(store.as_ref(), &session).await {
            Ok(l) => l,
            Err(e) => return (None, Err(e)),
        },
    };
    if request.options.dry_run {
        let outcome = dry_run(&session, &chain, &state, request).await;
        return (Some((state, version)), outcome);
    }
    // Writes the stages leave under way (the originals' pack) finish while the store
    // prepares the state's entry, and it is stored only after them. Should one fail, the
    // turn runs again with the stages waiting for their own writes: a failure then keeps
    // the originals in the state, as the fold reports.
    let mut defer_writes = true;
    for _ in 0..MAX_SAVE_ATTEMPTS {
        let before = state.clone();
        // The decoded conversation is used by the first attempt only: a turn run again after
        // a lost write decodes afresh (the stages changed the conversation they were given).
        let mut turn = turn_of(&session, &mut request, state);
        turn.defer_writes = defer_writes;
        turn.carry = std::mem::take(carry);
        let (mut next, report, output, conversation, pending) = match chain.run(turn).await {
            Ok(mut turn) => {
                *carry = std::mem::take(&mut turn.carry);
                let output = turn.outgoing();
                let conversation = turn.conversation.take().map(Arc::new);
                let pending = std::mem::take(&mut turn.pending_writes);
                (turn.state, turn.report, output, conversation, pending)
            }
            Err(ChainError::Stage(mut failed)) => {
                *carry = std::mem::take(&mut failed.turn.carry);
                // Nothing the client sent is lost: the original body goes on unchanged and
                // the half-applied state is discarded.
                let mut report = failed.turn.report;
                match failed.failure.error {
                    StageError::Refused(refusal) => report.refusal = Some(refusal),
                    other => {
                        tracing::warn!(session = %session, stage = %failed.failure.stage, error = %other, "Pipeline failed; forwarding the request unchanged.");
                        report.fail_open = Some(fail_open_reason(&failed.failure.stage, &other));
                    }
                }
                // A write the failed turn left under way is named by nothing stored.
                let pending = PendingWrites::default();
                (before.clone(), report, request.body.clone(), None, pending)
            }
            Err(ChainError::Unavailable { stage, reason }) => {
                return (
                    Some((before, version)),
                    Err(HostError::Unavailable(format!("{stage}: {reason}"))),
                );
            }
        };
        next.turns = before.turns + 1;
        let write_failed = Arc::new(AtomicBool::new(false));
        let ready = watched(pending, &write_failed);
        let saved = save_or_reload(
            store.as_ref(),
            &session,
            &before,
            &next,
            version.as_ref(),
            ready,
        )
        .await;
        match saved {
            Saved::Done(v) => {
                let outcome = TurnOutcome {
                    output,
                    report,
                    conversation,
                };
                return (Some((next, Some(v))), Ok(outcome));
            }
            Saved::Lost(fresh, v) => (state, version) = (*fresh, v),
            Saved::Failed(e) if write_failed.load(Ordering::Acquire) => {
                tracing::warn!(session = %session, error = %e, "A write the turn left under way failed; running the turn again with its writes in the stages.");
                defer_writes = false;
                state = before;
            }
            Saved::Failed(e) => return (Some((before, version)), Err(e)),
            Saved::Unloadable(e) => return (None, Err(e)),
        }
    }
    (None, Err(contention(&session)))
}

/// The turn `request` makes on `state`: its budget, with the session's calibration, its
/// options, and the conversation the host decoded already, if any (taken).
fn turn_of(session: &SessionId, request: &mut TurnRequest, state: SessionState) -> Turn {
    let mut turn = Turn::new(session.clone(), request.wire, request.body.clone(), state);
    turn.budget = request.budget;
    // The session's calibration (provider counts over foldwire's estimates) applies to
    // every stage of the turn, not only to the layout that updates it: a fold policy
    // budgeting at 1.0 leaves requests the layout must then refuse.
    if turn.state.calibration.is_finite() && turn.state.calibration > 0.0 {
        turn.budget.calibration = turn.state.calibration;
    }
    turn.options = request.options.clone();
    turn.conversation = request.decoded.take();
    turn.report.turn = turn.state.turns + 1;
    turn
}

/// A turn on a copy of `state` whose result is not saved, its stages' writes finished in
/// the turn and nothing carried to the next (`TurnOptions::dry_run`).
async fn dry_run(
    session: &SessionId,
    chain: &StageChain,
    state: &SessionState,
    mut request: TurnRequest,
) -> Result<TurnOutcome, HostError> {
    let mut turn = turn_of(session, &mut request, state.clone());
    turn.defer_writes = false;
    match chain.run(turn).await {
        Ok(mut turn) => Ok(TurnOutcome {
            output: turn.outgoing(),
            conversation: turn.conversation.take().map(Arc::new),
            report: turn.report,
        }),
        Err(ChainError::Stage(failed)) => {
            let mut report = failed.turn.report;
            match failed.failure.error {
                StageError::Refused(refusal) => report.refusal = Some(refusal),
                other => {
                    report.fail_open = Some(fail_open_reason(&failed.failure.stage, &other));
                }
            }
            Ok(TurnOutcome {
                output: request.body,
                report,
                conversation: None,
            })
        }
        Err(ChainError::Unavailable { stage, reason }) => {
            Err(HostError::Unavailable(format!("{stage}: {reason}")))
        }
    }
}

/// What one conditional save ended in.
enum Saved {
    /// Saved; the new version.
    Done(StateVersion),
    /// Another writer saved first: its state and version, to run the change again on.
    Lost(Box<SessionState>, Option<StateVersion>),
    /// The store failed; the state in hand is still the last one saved.
    Failed(HostError),
    /// Lost, and the winner's state could not be loaded.
    Unloadable(HostError),
}

/// Saves `next` (made from `before`, the state stored at `version`) if the stored version is
/// still `version`; on a conflict loads what the other writer saved, so the caller can apply
/// its change to that.
/// `pending` as one write that raises `failed` when it fails, so the caller can tell a
/// failed write from a failed save.
fn watched(pending: PendingWrites, failed: &Arc<AtomicBool>) -> PendingWrites {
    let mut ready = PendingWrites::default();
    if !pending.is_empty() {
        let failed = Arc::clone(failed);
        ready.push(Box::pin(async move {
            let finished = pending.finish().await;
            if finished.is_err() {
                failed.store(true, Ordering::Release);
            }
            finished
        }));
    }
    ready
}

async fn save_or_reload(
    store: &dyn StateStore,
    session: &SessionId,
    before: &SessionState,
    next: &SessionState,
    version: Option<&StateVersion>,
    ready: PendingWrites,
) -> Saved {
    let saved = store
        .save_change_after(session, before, next, version, ready)
        .await;
    match saved {
        Ok(v) => Saved::Done(v),
        Err(StoreError::Conflict { .. }) => match load(store, session).await {
            Ok((fresh, v)) => Saved::Lost(Box::new(fresh), v),
            Err(e) => Saved::Unloadable(e),
        },
        Err(source) => Saved::Failed(HostError::Store {
            session: session.to_string(),
            source,
        }),
    }
}

/// The error after [`MAX_SAVE_ATTEMPTS`] lost conditional writes in a row.
fn contention(session: &SessionId) -> HostError {
    HostError::Contention {
        session: session.to_string(),
        attempts: MAX_SAVE_ATTEMPTS,
    }
}

async fn execute_update(
    store: Arc<dyn StateStore>,
    session: SessionId,
    loaded: Loaded,
    update: StateUpdate,
) -> (Loaded, Result<(), HostError>) {
    let (mut state, mut version) = match loaded {
        Some(l) => l,
        None => match load(store.as_ref(), &session).await {
            Ok(l) => l,
            Err(e) => return (None, Err(e)),
        },
    };
    for _ in 0..MAX_SAVE_ATTEMPTS {
        let mut next = state.clone();
        update(&mut next);
        let saved = save_or_reload(
            store.as_ref(),
            &session,
            &state,
            &next,
            version.as_ref(),
            PendingWrites::default(),
        )
        .await;
        match saved {
            Saved::Done(v) => return (Some((next, Some(v))), Ok(())),
            // Another writer saved first: apply the same change to what it saved.
            Saved::Lost(fresh, v) => (state, version) = (*fresh, v),
            Saved::Failed(e) => return (Some((state, version)), Err(e)),
            Saved::Unloadable(e) => return (None, Err(e)),
        }
    }
    (None, Err(contention(&session)))
}

impl Handler<RunTurn> for SessionActor {
    type Result = AtomicResponse<Self, Result<TurnOutcome, HostError>>;

    fn handle(&mut self, msg: RunTurn, _ctx: &mut Self::Context) -> Self::Result {
        let carried = Carried {
            loaded: self.loaded.take(),
            carry: std::mem::take(&mut self.carry),
        };
        let fut = execute_turn(
            Arc::clone(&self.store),
            self.session.clone(),
            self.chain(),
            carried,
            msg.0,
        );
        AtomicResponse::new(Box::pin(fut.into_actor(self).map(
            |(carried, result), act, _| {
                act.loaded = carried.loaded;
                act.carry = carried.carry;
                result
            },
        )))
    }
}

impl Handler<Update> for SessionActor {
    type Result = AtomicResponse<Self, Result<(), HostError>>;

    fn handle(&mut self, msg: Update, _ctx: &mut Self::Context) -> Self::Result {
        let fut = execute_update(
            Arc::clone(&self.store),
            self.session.clone(),
            self.loaded.take(),
            msg.0,
        );
        AtomicResponse::new(Box::pin(fut.into_actor(self).map(
            |(loaded, result), act, _| {
                act.loaded = loaded;
                result
            },
        )))
    }
}

/// Drops what the session's last turn carried for the next ([`Turn::carry`]): the engine
/// sends it to sessions left idle, so their memory goes back before their actor retires.
#[derive(Debug)]
pub struct ForgetCarry;

impl Message for ForgetCarry {
    type Result = ();
}

impl Handler<ForgetCarry> for SessionActor {
    type Result = ();

    fn handle(&mut self, _msg: ForgetCarry, _ctx: &mut Self::Context) {
        self.carry = Extensions::new();
    }
}

impl Handler<Snapshot> for SessionActor {
    type Result = AtomicResponse<Self, Result<SessionState, HostError>>;

    fn handle(&mut self, _msg: Snapshot, _ctx: &mut Self::Context) -> Self::Result {
        let store = Arc::clone(&self.store);
        let session = self.session.clone();
        let loaded = self.loaded.take();
        let fut = async move {
            let l = match loaded {
                Some(l) => l,
                None => match load(store.as_ref(), &session).await {
                    Ok(l) => l,
                    Err(e) => return (None, Err(e)),
                },
            };
            let copy = l.0.clone();
            (Some(l), Ok(copy))
        };
        AtomicResponse::new(Box::pin(fut.into_actor(self).map(
            |(loaded, result), act, _| {
                act.loaded = loaded;
                result
            },
        )))
    }
}

/// Why a turn was forwarded unchanged: the failed stage and its error, named once (most
/// stage errors start with their stage already).
fn fail_open_reason(stage: &str, error: &StageError) -> String {
    let text = error.to_string();
    match text.strip_prefix(stage) {
        Some(rest) if rest.starts_with(": ") => text,
        _ => format!("{stage}: {text}"),
    }
}
