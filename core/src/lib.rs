//! # foldwire-core
//!
//! The vocabulary and the pipeline machinery of foldwire. No network, no disk: I/O enters
//! through the [`MediaArchive`] and [`StateStore`] traits that `foldwire-archive` implements.
//!
//! - **Vocabulary**: [`Wire`], [`Message`] (one foldable unit, keeping the exact bytes it came
//!   from), [`Conversation`], [`Ref`], [`BlockId`], [`Block`], [`SessionState`], [`Turn`],
//!   [`TurnReport`], [`Budget`], [`TokenEstimator`].
//! - **Stages and strategies**: the [`Stage`] trait with `requires`/`provides` [`Fact`]s; the
//!   strategy kinds [`FoldPolicy`], [`Layout`], [`Summarizer`].
//! - **Registry**: [`register!`] registers at link time (through `inventory`, re-exported
//!   here); [`Registry::register`] adds factories at runtime.
//! - **Pipelines**: [`PipelineSpec`] (TOML/JSON) or [`Pipeline::builder`], validated at build.
//! - **Actors**: [`StageActor`], [`SessionActor`] and the [`Engine`] that runs them on their
//!   own actix system, reachable from any tokio runtime.
#![deny(missing_docs)]

pub mod actors;
pub mod archive;
pub mod block;
pub mod budget;
pub mod conversation;
#[cfg(feature = "testing")]
pub mod fixtures;
pub mod ids;
pub mod memory_store;
pub mod message;
pub mod pipeline;
pub mod registry;
pub mod report;
pub mod stage;
pub mod state;
pub mod strategy;
pub mod text;
pub mod think;
pub mod turn;
pub mod wire;

pub use inventory;

pub use actors::{
    Engine, EngineBuilder, HostError, SessionActor, StageActor, StateUpdate, TurnOutcome,
    TurnRequest,
};
pub use archive::{
    ArchivedObject, MediaArchive, PackLocation, StateStore, StateVersion, StoreError,
    StoredContent, StoredPart,
};
pub use block::Block;
pub use budget::{Budget, CharEstimator, TokenEstimator};
pub use conversation::{Conversation, Entry, FieldOverride};
pub use ids::{AnyRef, BlockId, IdParseError, Ref, SessionId, SessionIdError};
pub use memory_store::MemoryStateStore;
pub use message::{
    MediaClass, MediaRef, Message, MessageId, MessageKind, Origin, Pin, Role, ToolLink, UnitSlot,
};
pub use pipeline::{Pipeline, PipelineBuilder, PipelineError, PipelineSpec, SpecError, StageSpec};
pub use registry::{
    BuildError, Component, ComponentInfo, ComponentKind, Params, Registration, Registry,
    RegistryError,
};
pub use report::{Refusal, StageTiming, TurnReport, Warning};
pub use stage::{Clock, Stage, StageCx, StageError, StrategyUse, SystemClock};
pub use state::{STATE_VERSION, SessionState, StateFormatError};
pub use strategy::{
    FoldDemand, FoldPolicy, HeadZone, Layout, LayoutPlan, LayoutRequest, RangeInfo, StrategyError,
    Summarizer, Summary, SummaryRequest,
};
pub use text::{DecodeText, Text};
pub use think::{InlineReasoning, split_inline_reasoning};
pub use turn::{Fact, Turn, TurnOptions};
pub use wire::{UnknownWire, Wire};

/// `async_trait`, re-exported so stage and strategy crates use the same version.
pub use async_trait::async_trait;
