//! The actor runtime: stage actors, session actors and the engine that hosts them.

mod chain;
mod engine;
mod session;
mod stage_actor;

pub use chain::{ChainError, StageChain};
pub use engine::{Engine, EngineBuilder};
pub use session::{
    ForgetCarry, HostError, MAX_SAVE_ATTEMPTS, RunTurn, SessionActor, Snapshot, StateUpdate,
    TurnOutcome, TurnRequest, Update,
};
pub use stage_actor::{Failed, Process, StageActor};
