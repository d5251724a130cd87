//! Pipelines: validated orderings of stages, built from a spec or in host code.

mod spec;

pub use spec::{DEFAULT_ORDER, PASSTHROUGH_ORDER, PipelineSpec, SpecError, StageSpec};

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use crate::registry::{Params, Registry, RegistryError};
use crate::report::StageTiming;
use crate::stage::{Stage, StageCx, StageError};
use crate::turn::{Fact, Turn};

/// Why an ordering was refused at build time. Every message says how to fix the ordering.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// The pipeline has no stages.
    #[error("pipeline {pipeline:?} has no stages: list at least wire.decode and wire.encode")]
    Empty {
        /// The pipeline name.
        pipeline: String,
    },
    /// A stage name is not registered.
    #[error(
        "pipeline {pipeline:?}, stage #{position} {name:?}: not a registered stage{hint}; registered stages: {known}"
    )]
    UnknownStage {
        /// The pipeline name.
        pipeline: String,
        /// 1-based position.
        position: usize,
        /// The name given.
        name: String,
        /// A did-you-mean hint.
        hint: String,
        /// Registered stage names.
        known: String,
    },
    /// A stage appears twice.
    #[error(
        "pipeline {pipeline:?}: stage {name:?} appears at #{first} and #{second}; a stage runs once per pipeline, remove one"
    )]
    Duplicate {
        /// The pipeline name.
        pipeline: String,
        /// The stage.
        name: String,
        /// First position (1-based).
        first: usize,
        /// Second position (1-based).
        second: usize,
    },
    /// A stage's requirement is not met by an earlier stage.
    #[error("pipeline {pipeline:?}: {stage} requires {fact}: {fix}")]
    Unmet {
        /// The pipeline name.
        pipeline: String,
        /// The stage.
        stage: String,
        /// The missing fact.
        fact: Fact,
        /// How to fix it.
        fix: String,
    },
    /// A strategy a stage names (a fold policy, summarizer, layout) could not be built.
    #[error("pipeline {pipeline:?}, stage #{position} {stage}, param {param}: {error}")]
    Strategy {
        /// The pipeline name.
        pipeline: String,
        /// 1-based position of the stage.
        position: usize,
        /// The stage.
        stage: String,
        /// The param naming the strategy.
        param: &'static str,
        /// The registry error (unknown name with a did-you-mean, wrong kind, bad params); in
        /// the message, not a source, so chained error printing says it once.
        error: Box<RegistryError>,
    },
    /// A named component could not be built.
    #[error("pipeline {pipeline:?}, stage #{position}: {error}")]
    Build {
        /// The pipeline name.
        pipeline: String,
        /// 1-based position.
        position: usize,
        /// The registry error (in the message, so chained printing says it once).
        error: RegistryError,
    },
}

/// A validated ordering of stages, ready to run.
#[derive(Clone)]
pub struct Pipeline {
    name: String,
    stages: Vec<Arc<dyn Stage>>,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("name", &self.name)
            .field("stages", &self.names())
            .finish()
    }
}

/// A stage that failed, with the turn it failed on (nothing is lost: the turn still holds
/// the original body).
#[derive(Debug)]
pub struct StageFailure {
    /// The failing stage.
    pub stage: String,
    /// The error.
    pub error: StageError,
}

impl Pipeline {
    /// A builder for host code; named stages are looked up in `registry`.
    ///
    /// `build` checks the ordering before anything runs, and says how to fix it:
    ///
    /// ```
    /// use foldwire_core::{
    ///     async_trait, Fact, Pipeline, PipelineError, Registry, Stage, StageCx, StageError, Turn,
    /// };
    ///
    /// struct Decode;
    /// #[async_trait]
    /// impl Stage for Decode {
    ///     fn name(&self) -> &'static str { "doc.decode" }
    ///     fn provides(&self) -> &'static [Fact] { &[Fact::Decoded] }
    ///     async fn run(&self, _: &mut Turn, _: &StageCx) -> Result<(), StageError> { Ok(()) }
    /// }
    ///
    /// struct Count;
    /// #[async_trait]
    /// impl Stage for Count {
    ///     fn name(&self) -> &'static str { "doc.count" }
    ///     fn requires(&self) -> &'static [Fact] { &[Fact::Decoded] }
    ///     async fn run(&self, _: &mut Turn, _: &StageCx) -> Result<(), StageError> { Ok(()) }
    /// }
    ///
    /// let registry = Registry::empty();
    /// let pipeline = Pipeline::builder(&registry).name("doc").stage(Decode).stage(Count).build();
    /// assert_eq!(pipeline.unwrap().names(), ["doc.decode", "doc.count"]);
    ///
    /// let backwards = Pipeline::builder(&registry).stage(Count).stage(Decode).build();
    /// let err = backwards.unwrap_err();
    /// assert!(matches!(err, PipelineError::Unmet { fact: Fact::Decoded, .. }));
    /// assert!(err.to_string().contains("put doc.decode before doc.count"), "{err}");
    /// ```
    pub fn builder(registry: &Registry) -> PipelineBuilder<'_> {
        PipelineBuilder {
            registry,
            name: "custom".to_owned(),
            stages: Vec::new(),
        }
    }

    /// Builds and validates a spec.
    ///
    /// # Errors
    /// Unknown or mistyped names, duplicates, unmet requirements, bad params.
    pub fn from_spec(spec: &PipelineSpec, registry: &Registry) -> Result<Self, PipelineError> {
        let mut builder = Pipeline::builder(registry).name(&spec.name);
        for s in &spec.stages {
            builder = builder.stage_named(&s.name, s.params.clone())?;
        }
        builder.build()
    }

    /// The pipeline's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The stage names in run order.
    pub fn names(&self) -> Vec<&'static str> {
        self.stages.iter().map(|s| s.name()).collect()
    }

    /// The stages in run order.
    pub fn stages(&self) -> &[Arc<dyn Stage>] {
        &self.stages
    }

    /// Runs every stage in order on the current task, recording each stage's wall time.
    /// The actor runtime does the same across stage actors; this form serves tests and
    /// one-shot tools.
    ///
    /// # Errors
    /// The first stage that fails; the turn keeps everything done before it.
    pub async fn run(&self, turn: &mut Turn, cx: &StageCx) -> Result<(), StageFailure> {
        turn.report.pipeline = self.name.clone();
        for stage in &self.stages {
            run_stage(stage.as_ref(), turn, cx).await?;
        }
        Ok(())
    }
}

/// Runs one stage and records its wall time in the turn report.
///
/// # Errors
/// The stage's error, tagged with its name.
pub async fn run_stage<S: Stage + ?Sized>(
    stage: &S,
    turn: &mut Turn,
    cx: &StageCx,
) -> Result<(), StageFailure> {
    let started = Instant::now();
    let result = stage.run(turn, cx).await;
    turn.report.stages.push(StageTiming {
        stage: stage.name().to_owned(),
        micros: u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
    });
    result.map_err(|error| StageFailure {
        stage: stage.name().to_owned(),
        error,
    })
}

/// Builds a pipeline in host code, one stage at a time.
pub struct PipelineBuilder<'r> {
    registry: &'r Registry,
    name: String,
    stages: Vec<Arc<dyn Stage>>,
}

impl<'r> PipelineBuilder<'r> {
    /// Names the pipeline (for reports and errors).
    pub fn name(mut self, name: &str) -> Self {
        self.name = name.to_owned();
        self
    }

    /// Appends a stage value (host-defined or built-in).
    pub fn stage(mut self, stage: impl Stage) -> Self {
        self.stages.push(Arc::new(stage));
        self
    }

    /// Appends a shared stage value.
    pub fn stage_arc(mut self, stage: Arc<dyn Stage>) -> Self {
        self.stages.push(stage);
        self
    }

    /// Appends a registered stage by name.
    ///
    /// # Errors
    /// An unknown name (with a did-you-mean hint), a strategy name, or bad params.
    pub fn stage_named(mut self, name: &str, params: Params) -> Result<Self, PipelineError> {
        let position = self.stages.len() + 1;
        let stage = self.registry.stage(name, &params).map_err(|e| match e {
            RegistryError::Unknown { known, hint, .. } => PipelineError::UnknownStage {
                pipeline: self.name.clone(),
                position,
                name: name.to_owned(),
                hint,
                known,
            },
            other => PipelineError::Build {
                pipeline: self.name.clone(),
                position,
                error: other,
            },
        })?;
        self.stages.push(stage);
        Ok(self)
    }

    /// Validates the ordering and returns the pipeline.
    ///
    /// # Errors
    /// Empty, duplicate stages, or a stage whose `requires` no earlier stage `provides`.
    pub fn build(self) -> Result<Pipeline, PipelineError> {
        let PipelineBuilder {
            registry,
            name,
            stages,
        } = self;
        if stages.is_empty() {
            return Err(PipelineError::Empty { pipeline: name });
        }
        for (i, s) in stages.iter().enumerate() {
            if let Some(j) = stages[..i].iter().position(|e| e.name() == s.name()) {
                return Err(PipelineError::Duplicate {
                    pipeline: name,
                    name: s.name().to_owned(),
                    first: j + 1,
                    second: i + 1,
                });
            }
        }
        // Strategies are built once here so a misspelled name or bad params fail now, not
        // on every turn (where the stage could only fail open).
        for (i, s) in stages.iter().enumerate() {
            for used in s.strategies() {
                if let Err(error) = registry.build(used.kind, &used.name, &used.params) {
                    return Err(PipelineError::Strategy {
                        pipeline: name,
                        position: i + 1,
                        stage: s.name().to_owned(),
                        param: used.param,
                        error: Box::new(error),
                    });
                }
            }
        }
        let mut provided: BTreeSet<Fact> = BTreeSet::new();
        for (i, s) in stages.iter().enumerate() {
            for &fact in s.requires() {
                if provided.contains(&fact) {
                    continue;
                }
                let later = stages[i + 1..]
                    .iter()
                    .find(|l| l.provides().contains(&fact))
                    .map(|l| l.name());
                let fix = match later {
                    Some(l) => format!("put {l} before {}", s.name()),
                    None => {
                        let candidates = registry.providers_of(fact);
                        if candidates.is_empty() {
                            format!("no registered stage provides {fact}; remove {}", s.name())
                        } else {
                            format!("add {} before {}", candidates.join(" or "), s.name())
                        }
                    }
                };
                return Err(PipelineError::Unmet {
                    pipeline: name,
                    stage: s.name().to_owned(),
                    fact,
                    fix,
                });
            }
            provided.extend(s.provides().iter().copied());
        }
        Ok(Pipeline { name, stages })
    }
}
