//! Host code that composes its own pipeline: a stage the host defines itself, a strategy
//! registered at runtime, built-in stages by name, and one request run through it.
//!
//! `cargo run -p foldwire-examples --example compose`

use std::sync::Arc;

use anyhow::Result;
use bytes::Bytes;
use foldwire_core::{
    Component, ComponentKind, Engine, Fact, FoldDemand, FoldPolicy, MemoryStateStore, MessageKind,
    Params, Pipeline, RangeInfo, Registry, SessionId, Stage, StageCx, StageError, Turn,
    TurnRequest, Wire, async_trait,
};

/// A host stage: counts tool calls by name into the turn report, and warns about calls to a
/// tool the host considers risky.
struct AuditTools {
    risky: &'static str,
}

#[async_trait]
impl Stage for AuditTools {
    fn name(&self) -> &'static str {
        "host.audit_tools"
    }
    fn requires(&self) -> &'static [Fact] {
        &[Fact::Decoded]
    }
    async fn run(&self, turn: &mut Turn, _cx: &StageCx) -> Result<(), StageError> {
        let Some(conv) = &turn.conversation else {
            return Err(StageError::NotDecoded {
                stage: "host.audit_tools",
            });
        };
        let mut risky = 0;
        let calls: Vec<String> = conv
            .messages
            .iter()
            .filter(|m| m.kind == MessageKind::ToolCall)
            .filter_map(|m| m.tool.as_ref().and_then(|t| t.name.clone()))
            .collect();
        for name in &calls {
            turn.report.count(&format!("host.tool_calls.{name}"), 1);
            if name == self.risky {
                risky += 1;
            }
        }
        if risky > 0 {
            turn.report.warn(
                "host.audit_tools",
                "risky_tool",
                format!("{risky} call(s) to {}", self.risky),
            );
        }
        Ok(())
    }
}

/// A fold policy the host registers at runtime: fold the largest range first, but only
/// ranges above a floor.
#[derive(Debug)]
struct BigRangesOnly {
    floor: u64,
}

impl FoldPolicy for BigRangesOnly {
    fn name(&self) -> &'static str {
        "host.fold_big_ranges"
    }
    fn choose(&self, ranges: &[RangeInfo], demand: &FoldDemand) -> Vec<usize> {
        if demand.request_tokens <= demand.budget.available() {
            return Vec::new();
        }
        let mut picked: Vec<usize> = (0..ranges.len())
            .filter(|&i| ranges[i].tokens >= self.floor)
            .collect();
        picked.sort_by_key(|&i| std::cmp::Reverse(ranges[i].tokens));
        picked
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    foldwire_plugins::link();
    let registry = Arc::new(Registry::from_inventory()?);

    // Hot-add: a strategy registered at runtime is available to pipelines built afterwards.
    registry.register(
        ComponentKind::FoldPolicy,
        "host.fold_big_ranges",
        "compose-example",
        |params: &Params| {
            let floor = params
                .get("floor")
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(1_000);
            Ok(Component::FoldPolicy(Arc::new(BigRangesOnly { floor })))
        },
    )?;
    let policy =
        registry.fold_policy("host.fold_big_ranges", &serde_json::json!({ "floor": 500 }))?;
    println!("registered at runtime: {}", policy.name());

    // The host's own ordering: built-in stages by name around a stage of its own, with the
    // fold stage consulting the strategy registered above.
    let pipeline = Pipeline::builder(&registry)
        .name("compose-example")
        .stage_named("wire.decode", Params::Null)?
        .stage(AuditTools { risky: "bash" })
        .stage_named("media.classify", Params::Null)?
        .stage_named("archive.spill", Params::Null)?
        .stage_named("refs.mint", Params::Null)?
        .stage_named("ranges.build", Params::Null)?
        .stage_named(
            "fold",
            serde_json::json!({ "policy": "host.fold_big_ranges", "policy_params": { "floor": 300 } }),
        )?
        .stage_named("pairing.repair", Params::Null)?
        .stage_named("wire.encode", Params::Null)?
        .build()?;
    println!("pipeline: {}", pipeline.names().join(" -> "));

    let engine = Engine::builder(
        pipeline,
        Arc::new(MemoryStateStore::new()),
        registry.clone(),
    )
    .workers(1)
    .start()?;
    let body = Bytes::from(std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/requests/anthropic-tools.json"
    ))?);
    let session = SessionId::new("compose-demo")?;

    // A roomy window: nothing folds, the body goes out as it came in.
    let roomy = engine
        .run_turn(&session, TurnRequest::new(Wire::Anthropic, body.clone()))
        .await?;
    anyhow::ensure!(roomy.output == body, "under budget nothing changes");
    anyhow::ensure!(
        roomy.report.counter("host.tool_calls.bash") == 12,
        "the host stage ran"
    );

    // A tight window: the host's fold policy picks the ranges and the extractive summarizer
    // folds them.
    let mut tight = TurnRequest::new(Wire::Anthropic, body.clone());
    tight.budget.window = 6_000;
    tight.budget.reserve = 1_000;
    let folded = engine.run_turn(&session, tight).await?;
    println!("{}", serde_json::to_string_pretty(&folded.report)?);
    anyhow::ensure!(
        folded.report.counter("fold.blocks_created") >= 1,
        "the host policy folded"
    );
    println!("{} bytes in, {} bytes out", body.len(), folded.output.len());
    anyhow::ensure!(
        folded.output.len() < body.len(),
        "the folded request is smaller"
    );
    Ok(())
}
