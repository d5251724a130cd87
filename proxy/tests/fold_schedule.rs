#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The default fold schedule (issue 16) on a long agent session at a small window: the
//! summaries a fold leaves on the wire fold a tier up with the next fold once they hold more
//! than the fold stage's `tier_after_fold` share of the budget, so they never pile up in
//! front of every later request; switched off, the same session piles them up.

use std::sync::Arc;

use bytes::Bytes;
use foldwire_core::pipeline::DEFAULT_ORDER;
use foldwire_core::{
    Budget, Engine, MemoryStateStore, PipelineSpec, SessionId, StageSpec, TurnReport, TurnRequest,
    Wire,
};
use foldwire_proxy::setup;
use serde_json::{Value, json};

/// Turns of the session.
const TURNS: usize = 160;
/// The window it is replayed at.
const WINDOW: u64 = 30_000;

/// Every request body of an Anthropic agent session: a task, then tool turns whose outputs
/// run from a few hundred to several thousand characters, now and then a user remark.
fn session() -> Vec<String> {
    let mut history = vec![json!({"role": "user", "content": "Fix the failing tests."})];
    let mut bodies = Vec::new();
    for i in 0..TURNS {
        let id = format!("toolu_{i:04}");
        history.push(json!({"role": "assistant", "content": [
            {"type": "text", "text": format!("Step {i}: checking module {i}.")},
            {"type": "tool_use", "id": id, "name": "bash", "input": {"command": format!("cargo test -p module_{i}")}}]}));
        let lines = 6 + (i * 37) % 90;
        let output = (0..lines)
            .map(|l| format!("src/module_{i}/file_{l}.rs: ok, {} checks passed", i * l))
            .collect::<Vec<_>>()
            .join("\n");
        let mut content =
            vec![json!({"type": "tool_result", "tool_use_id": id, "content": output})];
        if i % 11 == 5 {
            content.push(json!({"type": "text", "text": format!("Module {i} is shared.")}));
        }
        history.push(json!({"role": "user", "content": content}));
        let body = json!({"model": "m", "max_tokens": 512, "system": "You are a coding agent.", "messages": history});
        bodies.push(body.to_string());
    }
    bodies
}

/// Replays the session through the default pipeline, its fold stage given `fold` params.
async fn replay(bodies: &[String], fold: Value) -> Vec<TurnReport> {
    let registry = setup::registry().unwrap();
    let spec = PipelineSpec {
        name: "schedule".to_owned(),
        stages: DEFAULT_ORDER
            .iter()
            .map(|name| {
                let mut stage = StageSpec::named(*name);
                if *name == "fold" {
                    stage.params = fold.clone();
                }
                stage
            })
            .collect(),
    };
    let pipeline = foldwire_core::Pipeline::from_spec(&spec, &registry).unwrap();
    let engine = Engine::builder(pipeline, Arc::new(MemoryStateStore::new()), registry)
        .workers(1)
        .start()
        .unwrap();
    let session = SessionId::new("schedule").unwrap();
    let mut reports = Vec::new();
    for body in bodies {
        let mut request = TurnRequest::new(Wire::Anthropic, Bytes::from(body.clone()));
        request.budget = Budget::default().with_window(WINDOW);
        let out = engine.run_turn(&session, request).await.unwrap();
        assert!(out.report.fail_open.is_none() && out.report.refusal.is_none());
        reports.push(out.report);
    }
    reports
}

/// Tokens of a turn's request that are neither frame nor the client's own units: the
/// rendered summaries (and the cache markers' few bytes).
fn summaries(r: &TurnReport) -> u64 {
    r.counter("request_tokens")
        .saturating_sub(r.counter("layout.frame_tokens") + r.counter("layout.verbatim_tokens"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn summaries_fold_a_tier_up_with_the_next_fold_instead_of_piling_up() {
    let bodies = session();
    // The growth's floor in tokens is off in both: at this window it leaves folding to the
    // ceiling, too rarely for summaries to pile up within the session either way.
    let unfloored = json!({"min_growth_tokens": 0});
    let default = replay(&bodies, json!({"policy_params": unfloored})).await;
    let off = replay(
        &bodies,
        json!({"tier_after_fold": 0.0, "policy_params": unfloored}),
    )
    .await;
    let folds = |rs: &[TurnReport]| {
        rs.iter()
            .filter(|r| r.counter("fold.blocks_created") > 0)
            .count()
    };
    assert!(folds(&default) >= 4, "the session folds several times");
    // With the default, a fold that leaves more than a twentieth of the budget (1,125 of
    // 22,500) in summaries folds them a tier up in the same turn.
    let tiered_with_a_fold = default
        .iter()
        .filter(|r| r.counter("fold.tier_blocks_created") > 0)
        .count();
    assert!(tiered_with_a_fold > 0);
    let most = |rs: &[TurnReport]| rs.iter().map(summaries).max().unwrap_or(0);
    let available = Budget::default().with_window(WINDOW).available();
    // A twentieth of the budget plus the summaries one fold adds (at most two of 800
    // characters with their headers).
    assert!(
        most(&default) <= available / 20 + 2 * (800 / 3 + 32),
        "summaries on the wire: at most {}",
        most(&default)
    );
    // Without it the same session piles them up past a tenth of the budget (more than the
    // bound above allows), and every request carries them.
    assert!(
        most(&off) > available / 10 && most(&off) > most(&default) * 3 / 2,
        "without tiering: {} against {}",
        most(&off),
        most(&default)
    );
}

/// The turn of the first automatic fold, if any.
fn first_fold(rs: &[TurnReport]) -> Option<usize> {
    rs.iter().position(|r| r.counter("fold.blocks_created") > 0)
}

/// `cost_aware`: the fold stage measures how much the request grows per turn and the
/// schedule folds once the reads a fold saves pay for its rewrite. With a fixed growth of the
/// whole budget the same session folds only at the ceiling; the cost-aware rule folds well
/// before it, so the rule (or the growth it is given) missing shows here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cost_aware_schedule_folds_before_the_ceiling_from_the_measured_growth() {
    let bodies = session();
    let fixed = replay(&bodies, json!({"policy_params": {"growth": 1.0}})).await;
    let aware = replay(
        &bodies,
        json!({"policy_params": {"growth": 1.0, "cost_aware": true}}),
    )
    .await;
    // The growth per turn is measured from the second turn on, and it is about what the
    // request gains a turn (each turn appends one tool call and its output).
    let per_turn: Vec<u64> = aware
        .iter()
        .map(|r| r.counter("fold.per_turn_tokens"))
        .collect();
    assert_eq!(per_turn[0], 0);
    let most_gained = aware
        .windows(2)
        .map(|w| {
            w[1].counter("request_tokens")
                .saturating_sub(w[0].counter("request_tokens"))
        })
        .max()
        .unwrap();
    assert!(
        per_turn[1..].iter().all(|&t| t > 0 && t <= most_gained),
        "{per_turn:?}"
    );
    let available = Budget::default().with_window(WINDOW).available();
    let (f, a) = (first_fold(&fixed).unwrap(), first_fold(&aware).unwrap());
    assert!(a < f, "cost-aware first folds at turn {a}, fixed at {f}");
    // The fixed rule waited for the ceiling; the cost-aware one folded well under it.
    let before = |rs: &[TurnReport], i: usize| rs[i - 1].counter("request_tokens");
    assert!(before(&fixed, f) as f64 > 0.8 * available as f64);
    assert!((before(&aware, a) as f64) < 0.7 * available as f64);
}
