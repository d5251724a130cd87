//! The stage contract: one fixed step of the pipeline, runnable without any actor runtime.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;

use crate::archive::{MediaArchive, StoreError};
use crate::budget::{CharEstimator, TokenEstimator};
use crate::registry::{ComponentKind, Params, Registry};
use crate::report::Refusal;
use crate::turn::{Fact, Turn};

/// A source of time, so stages stay testable.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Now.
    fn now(&self) -> SystemTime;
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// What a stage may use besides the turn: the archive, the token estimator, the clock and
/// the strategy registry.
#[derive(Debug, Clone)]
pub struct StageCx {
    /// The session media archive, when the host configured one.
    pub archive: Option<Arc<dyn MediaArchive>>,
    /// The token estimator.
    pub estimator: Arc<dyn TokenEstimator>,
    /// The clock.
    pub clock: Arc<dyn Clock>,
    /// The registry, for stages that build strategies.
    pub registry: Arc<Registry>,
    /// How long an archive write may take before the payload is pinned instead.
    pub archive_timeout: Duration,
}

impl StageCx {
    /// A context with no archive, the char estimator, the system clock and this registry.
    pub fn new(registry: Arc<Registry>) -> Self {
        StageCx {
            archive: None,
            estimator: Arc::new(CharEstimator),
            clock: Arc::new(SystemClock),
            registry,
            archive_timeout: Duration::from_secs(10),
        }
    }

    /// Sets the archive.
    pub fn with_archive(mut self, archive: Arc<dyn MediaArchive>) -> Self {
        self.archive = Some(archive);
        self
    }

    /// Sets the estimator.
    pub fn with_estimator(mut self, estimator: Arc<dyn TokenEstimator>) -> Self {
        self.estimator = estimator;
        self
    }
}

/// Why a stage failed.
#[derive(Debug, thiserror::Error)]
pub enum StageError {
    /// The request body could not be decoded.
    #[error("{stage}: {message}")]
    Malformed {
        /// The stage.
        stage: &'static str,
        /// What was wrong, naming the wire, the JSON path and what was expected.
        message: String,
    },
    /// The stage needs a decoded conversation and none is present.
    #[error("{stage}: the turn has no decoded conversation; put wire.decode before {stage}")]
    NotDecoded {
        /// The stage.
        stage: &'static str,
    },
    /// The request cannot be fit; nothing was dropped.
    #[error("request refused: {0}")]
    Refused(Refusal),
    /// An archive or state backend failed.
    #[error("{stage}: {source}")]
    Store {
        /// The stage.
        stage: &'static str,
        /// The backend error.
        #[source]
        source: StoreError,
    },
    /// A strategy or the stage itself failed.
    #[error("{stage}: {message}")]
    Failed {
        /// The stage.
        stage: &'static str,
        /// What failed.
        message: String,
    },
}

/// A strategy a stage builds from the registry when it runs, declared so a pipeline can
/// resolve it when it is built: a misspelled name then fails validation instead of failing
/// every turn open.
#[derive(Debug, Clone, PartialEq)]
pub struct StrategyUse {
    /// The stage param that names it (`policy`, `summarizer`, `layout`).
    pub param: &'static str,
    /// The kind of strategy.
    pub kind: ComponentKind,
    /// Its registered name.
    pub name: String,
    /// The params it is built with.
    pub params: Params,
}

/// One fixed step of the pipeline.
///
/// A stage is a plain value: it can be unit-tested by calling [`Stage::run`] on a [`Turn`]
/// without any actor runtime. `requires` and `provides` let the pipeline builder check an
/// ordering before anything runs.
#[async_trait]
pub trait Stage: Send + Sync + 'static {
    /// The registered name (`wire.decode`, `fold`, …).
    fn name(&self) -> &'static str;

    /// Facts an earlier stage must have provided.
    fn requires(&self) -> &'static [Fact] {
        &[]
    }

    /// Facts this stage establishes.
    fn provides(&self) -> &'static [Fact] {
        &[]
    }

    /// Strategies the stage builds from the registry when it runs; the pipeline builder
    /// builds each once to check it exists and takes its params.
    fn strategies(&self) -> Vec<StrategyUse> {
        Vec::new()
    }

    /// Runs the stage on a turn.
    async fn run(&self, turn: &mut Turn, cx: &StageCx) -> Result<(), StageError>;
}

#[async_trait]
impl<S: Stage + ?Sized> Stage for Arc<S> {
    fn name(&self) -> &'static str {
        (**self).name()
    }
    fn requires(&self) -> &'static [Fact] {
        (**self).requires()
    }
    fn provides(&self) -> &'static [Fact] {
        (**self).provides()
    }
    fn strategies(&self) -> Vec<StrategyUse> {
        (**self).strategies()
    }
    async fn run(&self, turn: &mut Turn, cx: &StageCx) -> Result<(), StageError> {
        (**self).run(turn, cx).await
    }
}
