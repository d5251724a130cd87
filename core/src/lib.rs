//! # foldwire-core
//!
//! The pipeline machinery of foldwire, over the plugin API of `foldwire-api` (re-exported
//! whole, so every `foldwire_core::…` path a stage or strategy used keeps working). No
//! network, no disk: I/O enters through the [`MediaArchive`] and [`StateStore`] traits that
//! `foldwire-archive` implements.
//!
//! - **From `foldwire-api`**: the vocabulary ([`Wire`], [`Message`], [`Conversation`],
//!   [`Turn`], [`SessionState`], …), the [`Stage`] trait and the strategy kinds
//!   [`FoldPolicy`], [`Layout`], [`Summarizer`], the [`Registry`] and [`register!`]. A crate
//!   that only provides stages or strategies can depend on `foldwire-api` alone.
//! - **Pipelines**: [`PipelineSpec`] (TOML/JSON) or [`Pipeline::builder`], validated at build.
//! - **Actors**: [`StageActor`], [`SessionActor`] and the [`Engine`] that runs them on their
//!   own actix system, reachable from any tokio runtime.
//! - **State**: [`MemoryStateStore`], the in-memory [`StateStore`].
#![deny(missing_docs)]

pub mod actors;
pub mod cost;
#[cfg(feature = "testing")]
pub mod fixtures;
pub mod memory_store;
pub mod pipeline;

// The plugin API, module by module and item by item, so `foldwire_core::stage::Stage`,
// `foldwire_core::Stage` and `foldwire_core::register!` all keep resolving.
pub use foldwire_api::*;
pub use foldwire_api::{
    archive, block, budget, component, config, conversation, extensions, ids, message, registry,
    report, resolve, stage, state, strategy, text, think, turn, wire,
};

pub use actors::{
    Engine, EngineBuilder, HostError, SessionActor, StageActor, StateUpdate, TurnOutcome,
    TurnRequest,
};
pub use cost::{CacheUse, PriceTable, Prices};
pub use memory_store::MemoryStateStore;
pub use pipeline::{Pipeline, PipelineBuilder, PipelineError, PipelineSpec, SpecError, StageSpec};
