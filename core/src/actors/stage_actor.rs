//! `StageActor<S>`: any stage as an actix actor; turns move through it by value.

use std::sync::Arc;

use actix::{Actor, Context, Handler, Message, ResponseFuture};

use crate::pipeline::{StageFailure, run_stage};
use crate::stage::{Stage, StageCx};
use crate::turn::Turn;

/// Runs one turn through one stage.
#[derive(Debug)]
pub struct Process {
    /// The turn, moved in.
    pub turn: Turn,
}

/// A turn a stage failed on, handed back whole.
#[derive(Debug)]
pub struct Failed {
    /// The turn as it stood when the stage failed.
    pub turn: Turn,
    /// The failure.
    pub failure: StageFailure,
}

impl Message for Process {
    type Result = Result<Turn, Box<Failed>>;
}

/// An actor that runs a stage on every turn it receives.
pub struct StageActor<S: Stage + ?Sized> {
    stage: Arc<S>,
    cx: StageCx,
}

impl<S: Stage + ?Sized> StageActor<S> {
    /// Wraps a stage.
    pub fn new(stage: Arc<S>, cx: StageCx) -> Self {
        StageActor { stage, cx }
    }
}

impl<S: Stage + ?Sized> Actor for StageActor<S> {
    type Context = Context<Self>;
}

impl<S: Stage + ?Sized> Handler<Process> for StageActor<S> {
    type Result = ResponseFuture<Result<Turn, Box<Failed>>>;

    fn handle(&mut self, msg: Process, _ctx: &mut Self::Context) -> Self::Result {
        let stage = Arc::clone(&self.stage);
        let cx = self.cx.clone();
        Box::pin(async move {
            let mut turn = msg.turn;
            match run_stage(stage.as_ref(), &mut turn, &cx).await {
                Ok(()) => Ok(turn),
                Err(failure) => Err(Box::new(Failed { turn, failure })),
            }
        })
    }
}
