//! # foldwire-api
//!
//! What a stage or strategy crate depends on, and nothing more: the vocabulary, the [`Stage`]
//! and strategy traits, and the [`Registry`] with its link-time [`register!`]. No actor
//! runtime, no async executor, no config parser: the engine that runs pipelines lives in
//! `foldwire-core`, which re-exports everything here, so `foldwire_core::Stage` and
//! `foldwire_api::Stage` are the same item.
//!
//! - **Vocabulary**: [`Wire`], [`Message`] (one foldable unit, keeping the exact bytes it came
//!   from), [`Conversation`], [`Ref`], [`BlockId`], [`Block`], [`SessionState`], [`Turn`],
//!   [`TurnReport`], [`Budget`], [`TokenEstimator`].
//! - **Stages and strategies**: the [`Stage`] trait with `requires`/`provides` [`Fact`]s; the
//!   strategy kinds [`FoldPolicy`], [`Layout`], [`Summarizer`].
//! - **I/O contracts**: [`MediaArchive`] and [`StateStore`], which `foldwire-archive`
//!   implements.
//! - **Registry**: [`register!`] registers at link time (through `inventory`, re-exported
//!   here); [`Registry::register`] adds factories at runtime.
//!
//! The layering has no cycles: [`component`] (kinds, params, errors) → [`strategy`] →
//! [`stage`] → [`registry`] → [`resolve`] (strategies a stage names, resolved at build time)
//! and [`config`] (typed configs, [`register_config!`]).
//!
//! A fold policy in its own crate:
//!
//! ```
//! use std::sync::Arc;
//! use foldwire_api::{BuildError, Component, FoldDemand, FoldPolicy, Params, RangeInfo};
//!
//! /// Folds the oldest range whenever the request is over budget.
//! #[derive(Debug)]
//! struct OldestFirst;
//!
//! impl FoldPolicy for OldestFirst {
//!     fn name(&self) -> &'static str {
//!         "doc.oldest_first"
//!     }
//!     fn choose(&self, ranges: &[RangeInfo], demand: &FoldDemand) -> Vec<usize> {
//!         let over = demand.request_tokens > demand.budget.available();
//!         if over && !ranges.is_empty() { vec![0] } else { Vec::new() }
//!     }
//! }
//!
//! fn build(_: &Params) -> Result<Component, BuildError> {
//!     Ok(Component::FoldPolicy(Arc::new(OldestFirst)))
//! }
//! foldwire_api::register!(FoldPolicy, "doc.oldest_first", build);
//!
//! let registry = foldwire_api::Registry::from_inventory().unwrap();
//! let policy = registry.fold_policy("doc.oldest_first", &Params::Null).unwrap();
//! assert_eq!(policy.name(), "doc.oldest_first");
//! ```
#![deny(missing_docs)]

pub mod archive;
pub mod block;
pub mod budget;
pub mod by_ref;
pub mod component;
pub mod config;
pub mod conversation;
pub mod derived;
pub mod extensions;
pub mod extra;
pub mod ids;
pub mod message;
pub mod par;
pub mod registry;
pub mod report;
pub mod resolve;
pub mod rows;
pub mod shared;
pub mod stage;
pub mod state;
pub mod strategy;
pub mod text;
pub mod think;
pub mod turn;
pub mod wire;

pub use inventory;

pub use archive::{
    ArchivedObject, KnownDigests, MediaArchive, PackLocation, PendingWrite, PendingWrites,
    PlannedContents, StateStore, StateVersion, StoreError, StoredContent, StoredPart,
};
pub use block::{Block, Generation};
pub use budget::{Budget, CharEstimator, TokenEstimator};
pub use by_ref::ByRef;
pub use component::{BuildError, ComponentKind, Params, RegistryError, StrategyUse};
pub use config::ComponentConfig;
pub use conversation::{Conversation, Entry, FieldOverride, LastDecode};
pub use extensions::{Extensions, SharedExtensions};
pub use ids::{AnyRef, BlockId, IdParseError, Ref, SessionId, SessionIdError};
pub use message::{
    MediaClass, MediaRef, Message, MessageId, MessageKind, Origin, Pin, Role, ToolLink, UnitSlot,
};
pub use registry::{About, BuildCx, Component, ComponentInfo, Registration, Registry};
pub use report::{Refusal, StageTiming, TurnReport, Warning};
pub use resolve::{Resolved, StrategyKind};
pub use stage::{Clock, Stage, StageCx, StageError, SystemClock};
pub use state::{OriginalText, STATE_VERSION, SessionState, StateFormatError};
pub use strategy::{
    BoxError, FoldDemand, FoldPolicy, HeadZone, Layout, LayoutPlan, LayoutRequest, RangeInfo,
    StrategyError, StrategySource, Summarizer, Summary, SummaryRequest,
};
pub use text::{DecodeText, Text, checked_utf8, utf8_lossy};
pub use think::{InlineReasoning, split_inline_reasoning};
pub use turn::{Fact, Turn, TurnOptions};
pub use wire::{UnknownWire, Wire};

/// `async_trait`, re-exported so stage and strategy crates use the same version.
pub use async_trait::async_trait;
