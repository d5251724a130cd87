//! A stage gets its strategies through `StageCx::registry`, a `StrategySource`: in a pipeline
//! that is the registry, in a unit test it can be exactly the strategies the test wants.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use foldwire_api::{
    Budget, FoldDemand, FoldPolicy, Layout, Params, RangeInfo, RegistryError, SessionId,
    SessionState, Stage, StageCx, StageError, StrategySource, Summarizer, Turn, Wire, async_trait,
};

#[derive(Debug)]
struct AlwaysFirst;
impl FoldPolicy for AlwaysFirst {
    fn name(&self) -> &'static str {
        "test.always_first"
    }
    fn choose(&self, _: &[RangeInfo], _: &FoldDemand) -> Vec<usize> {
        vec![0]
    }
}

/// Serves one fold policy under any name, and nothing else.
#[derive(Debug)]
struct OnePolicy;
impl StrategySource for OnePolicy {
    fn fold_policy(&self, _: &str, _: &Params) -> Result<Arc<dyn FoldPolicy>, RegistryError> {
        Ok(Arc::new(AlwaysFirst))
    }
    fn layout(&self, name: &str, _: &Params) -> Result<Arc<dyn Layout>, RegistryError> {
        Err(RegistryError::Build(foldwire_api::BuildError::new(
            name,
            "no layouts here",
        )))
    }
    fn summarizer(&self, name: &str, _: &Params) -> Result<Arc<dyn Summarizer>, RegistryError> {
        Err(RegistryError::Build(foldwire_api::BuildError::new(
            name,
            "no summarizers here",
        )))
    }
}

/// Records which policy it was given and what it chose.
struct AskPolicy;
#[async_trait]
impl Stage for AskPolicy {
    fn name(&self) -> &'static str {
        "test.ask_policy"
    }
    async fn run(&self, turn: &mut Turn, cx: &StageCx) -> Result<(), StageError> {
        let policy = cx
            .registry
            .fold_policy("whatever", &Params::Null)
            .map_err(|e| StageError::caused("test.ask_policy", "no policy", e))?;
        let demand = FoldDemand::new(1, Budget::default());
        let chosen = policy.choose(&[], &demand);
        turn.report.count(policy.name(), chosen.len() as u64);
        Ok(())
    }
}

#[tokio::test]
async fn a_stage_runs_against_a_hand_made_strategy_source() {
    let session = SessionId::new("s").unwrap();
    let mut turn = Turn::new(
        session.clone(),
        Wire::OpenAiChat,
        bytes::Bytes::from_static(b"{}"),
        SessionState::new(session),
    );
    let cx = StageCx::new(Arc::new(OnePolicy));
    AskPolicy.run(&mut turn, &cx).await.unwrap();
    assert_eq!(turn.report.counter("test.always_first"), 1);
    assert!(cx.registry.layout("x", &Params::Null).is_err());
}
