//! A pipeline materialized as stage actors on one arbiter.

use actix::{Actor, Recipient};
use actix_rt::ArbiterHandle;

use super::stage_actor::{Failed, Process, StageActor};
use crate::pipeline::Pipeline;
use crate::stage::StageCx;
use crate::turn::Turn;

/// Why a turn did not make it through the chain.
#[derive(Debug)]
pub enum ChainError {
    /// A stage failed; the turn comes back as it stood.
    Stage(Box<Failed>),
    /// A stage actor was gone (the system is shutting down); the turn went with it, but the
    /// caller still holds the original body.
    Unavailable {
        /// The stage.
        stage: &'static str,
        /// The mailbox error.
        reason: String,
    },
}

/// The stage actors of one pipeline, in order.
#[derive(Clone)]
pub struct StageChain {
    name: String,
    stages: Vec<(&'static str, Recipient<Process>)>,
}

impl std::fmt::Debug for StageChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<_> = self.stages.iter().map(|(n, _)| *n).collect();
        f.debug_struct("StageChain")
            .field("name", &self.name)
            .field("stages", &names)
            .finish()
    }
}

impl StageChain {
    /// Starts one actor per stage on the given arbiter.
    pub fn start(pipeline: &Pipeline, cx: &StageCx, arbiter: &ArbiterHandle) -> Self {
        let stages = pipeline
            .stages()
            .iter()
            .map(|stage| {
                let name = stage.name();
                let stage = stage.clone();
                let cx = cx.clone();
                let addr =
                    StageActor::start_in_arbiter(arbiter, move |_| StageActor::new(stage, cx));
                (name, addr.recipient())
            })
            .collect();
        StageChain {
            name: pipeline.name().to_owned(),
            stages,
        }
    }

    /// The pipeline's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sends the turn through every stage actor in order with `send().await`, so a full
    /// mailbox holds the sender back.
    ///
    /// # Errors
    /// The first failing stage, with the turn as it stood.
    pub async fn run(&self, mut turn: Turn) -> Result<Turn, ChainError> {
        turn.report.pipeline = self.name.clone();
        for (name, stage) in &self.stages {
            turn = match stage.send(Process { turn }).await {
                Ok(result) => result.map_err(ChainError::Stage)?,
                Err(mailbox) => {
                    return Err(ChainError::Unavailable {
                        stage: name,
                        reason: mailbox.to_string(),
                    });
                }
            };
        }
        Ok(turn)
    }
}
