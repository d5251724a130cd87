//! The stage contract: one fixed step of the pipeline, runnable without any actor runtime.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;

use crate::archive::{MediaArchive, StoreError};
use crate::budget::{CharEstimator, TokenEstimator};
pub use crate::component::StrategyUse;
use crate::report::Refusal;
use crate::strategy::{BoxError, StrategySource};
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
/// where strategies come from (the registry).
#[derive(Debug, Clone)]
pub struct StageCx {
    /// The session media archive, when the host configured one.
    pub archive: Option<Arc<dyn MediaArchive>>,
    /// The token estimator.
    pub estimator: Arc<dyn TokenEstimator>,
    /// The clock.
    pub clock: Arc<dyn Clock>,
    /// Where stages that build strategies get them: the registry in a running pipeline.
    pub registry: Arc<dyn StrategySource>,
    /// How long an archive write may take before the payload is pinned instead.
    pub archive_timeout: Duration,
}

impl StageCx {
    /// A context with no archive, the char estimator, the system clock and this registry
    /// (any [`StrategySource`]; an `Arc<Registry>` coerces).
    pub fn new(registry: Arc<dyn StrategySource>) -> Self {
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
#[non_exhaustive]
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
    /// A step of the stage failed because of another error, kept whole as the source.
    #[error("{stage}: {context}: {source}")]
    Caused {
        /// The stage.
        stage: &'static str,
        /// What the stage was doing.
        context: String,
        /// The underlying error (a strategy's, the registry's, a codec's).
        #[source]
        source: BoxError,
    },
}

impl StageError {
    /// A failure of `stage` while doing `context`, keeping `source` reachable through
    /// [`std::error::Error::source`].
    pub fn caused(
        stage: &'static str,
        context: impl Into<String>,
        source: impl Into<BoxError>,
    ) -> Self {
        StageError::Caused {
            stage,
            context: context.into(),
            source: source.into(),
        }
    }
}

/// One fixed step of the pipeline.
///
/// A stage is a plain value: it can be unit-tested by calling [`Stage::run`] on a [`Turn`]
/// without any actor runtime. `requires` and `provides` let the pipeline builder check an
/// ordering before anything runs.
///
/// ```
/// use std::sync::Arc;
/// use foldwire_api::{
///     async_trait, Fact, Registry, SessionId, SessionState, Stage, StageCx, StageError, Turn,
///     Wire,
/// };
///
/// /// Counts the units of the decoded conversation.
/// struct CountUnits;
///
/// #[async_trait]
/// impl Stage for CountUnits {
///     fn name(&self) -> &'static str {
///         "doc.count_units"
///     }
///     fn requires(&self) -> &'static [Fact] {
///         &[Fact::Decoded]
///     }
///     async fn run(&self, turn: &mut Turn, _cx: &StageCx) -> Result<(), StageError> {
///         let conversation = turn
///             .conversation
///             .as_ref()
///             .ok_or(StageError::NotDecoded { stage: self.name() })?;
///         let units = conversation.messages.len() as u64;
///         turn.report.count("units", units);
///         Ok(())
///     }
/// }
///
/// // No engine needed: build a turn and run the stage on it.
/// let session = SessionId::new("doc-session").unwrap();
/// let mut turn = Turn::new(
///     session.clone(),
///     Wire::Anthropic,
///     bytes::Bytes::from_static(b"{}"),
///     SessionState::new(session),
/// );
/// let cx = StageCx::new(Arc::new(Registry::empty()));
/// let run = tokio::runtime::Builder::new_current_thread().build().unwrap();
/// // The body was never decoded, and the stage says so instead of guessing.
/// let err = run.block_on(CountUnits.run(&mut turn, &cx)).unwrap_err();
/// assert!(err.to_string().contains("wire.decode"), "{err}");
/// ```
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
