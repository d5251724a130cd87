#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! A long agent session at small windows (issue 11, item 4): replayed through the default
//! pipeline at windows 8,000 and 12,000 it is never refused, because the summaries on the
//! wire fold again into higher tiers; every tier-2+ block restores, through the blocks it
//! consumed, to the exact bytes the client sent.

use std::process::Command;
use std::sync::Arc;

use bytes::Bytes;
use foldwire_core::{
    BlockId, Budget, Engine, MemoryStateStore, SessionId, SessionState, TurnRequest, Wire,
};
use foldwire_proxy::setup;
use foldwire_stages::kernel::restore;
use serde_json::{Value, json};

/// Turns of the session.
const TURNS: usize = 120;

/// The tool output of turn `i`: a few hundred to a couple of thousand characters.
fn output(i: usize) -> String {
    let lines = 8 + (i * 7) % 40;
    (0..lines)
        .map(|l| format!("src/module_{i}/file_{l}.rs: ok, {} checks passed", i * l))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every request body of an Anthropic agent session: a task, then tool turns (an assistant
/// text and a `bash` call, the client's result), now and then a user remark.
fn session() -> Vec<String> {
    let mut history =
        vec![json!({"role": "user", "content": "Fix the failing tests in the workspace."})];
    let mut bodies = Vec::new();
    for i in 0..TURNS {
        let id = format!("toolu_{i:04}");
        history.push(json!({"role": "assistant", "content": [
            {"type": "text", "text": format!("Step {i}: checking module {i}.")},
            {"type": "tool_use", "id": id, "name": "bash", "input": {"command": format!("cargo test -p module_{i}")}}]}));
        let mut content =
            vec![json!({"type": "tool_result", "tool_use_id": id, "content": output(i)})];
        if i % 9 == 4 {
            content
                .push(json!({"type": "text", "text": format!("Remember module {i} is shared.")}));
        }
        history.push(json!({"role": "user", "content": content}));
        let body = json!({"model": "m", "max_tokens": 512, "system": "You are a coding agent.", "messages": history});
        bodies.push(body.to_string());
    }
    bodies
}

/// Replays the session through the default pipeline at `window`; returns the refusals and
/// the final state.
///
/// `provider_ratio` plays a provider whose own token counts run ahead of foldwire's
/// estimate by that factor: after each turn the usage it would report is recorded, the way
/// the proxy records it, so the session's calibration follows.
async fn replay(
    bodies: &[String],
    window: u64,
    provider_ratio: Option<f64>,
) -> (Vec<String>, SessionState) {
    let registry = setup::registry().unwrap();
    let pipeline = setup::pipeline("default", &registry).unwrap();
    let engine = Engine::builder(pipeline, Arc::new(MemoryStateStore::new()), registry)
        .workers(1)
        .start()
        .unwrap();
    let session = SessionId::new("tiers").unwrap();
    let mut refusals = Vec::new();
    for (i, body) in bodies.iter().enumerate() {
        let mut request = TurnRequest::new(Wire::Anthropic, Bytes::from(body.clone()));
        request.budget = Budget::default().with_window(window);
        // The default head follows the window (a share of the budget, capped).
        let out = engine.run_turn(&session, request).await.unwrap();
        assert!(
            out.report.fail_open.is_none(),
            "turn {i}: {:?}",
            out.report.fail_open
        );
        if let Some(r) = &out.report.refusal {
            refusals.push(format!("turn {i}: {r}"));
        } else {
            // What is forwarded, summaries included, fits the window (bytes / 4, the
            // estimator's own measure).
            let sent = (out.output.len() as u64).div_ceil(4);
            let counted = (sent as f64 * provider_ratio.unwrap_or(1.0)).ceil() as u64;
            assert!(
                counted <= window,
                "window {window}, turn {i}: {sent} tokens forwarded, {counted} as the provider counts"
            );
        }
        if let Some(ratio) = provider_ratio {
            let estimated = out.report.counter("request_tokens");
            let reported = (estimated as f64 * ratio).round() as u64;
            let turn = out.report.turn;
            engine
                .update(&session, move |state: &mut foldwire_core::SessionState| {
                    state.usage.push(foldwire_core::state::UsageSample {
                        turn,
                        estimated,
                        reported,
                    });
                })
                .await
                .unwrap();
        }
    }
    (refusals, engine.snapshot(&session).await.unwrap())
}

/// The originals under a block, gathered down through every block it consumed.
fn originals_down(state: &SessionState, id: BlockId) -> Vec<(u32, String)> {
    let r = restore(state, id, false).unwrap();
    let mut out: Vec<(u32, String)> = r.units.into_iter().map(|u| (u.r#ref.0, u.raw)).collect();
    for consumed in r.consumed {
        out.extend(originals_down(state, consumed));
    }
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_session_at_small_windows_is_never_refused_and_its_tiers_restore_exactly() {
    let bodies = session();
    let last = bodies.last().unwrap();
    for window in [8_000, 12_000] {
        let (refusals, state) = replay(&bodies, window, None).await;
        assert!(
            refusals.is_empty(),
            "window {window}: {} refusals, first: {}",
            refusals.len(),
            refusals[0]
        );
        let tiered: Vec<_> = state.blocks.iter().filter(|b| b.tier >= 2).collect();
        assert!(
            !tiered.is_empty(),
            "window {window}: no block of tier 2 or more"
        );
        for block in tiered {
            assert!(!block.consumed.is_empty(), "{}", block.id);
            let full = restore(&state, block.id, true).unwrap();
            let down = originals_down(&state, block.id);
            let full: Vec<(u32, String)> =
                full.units.into_iter().map(|u| (u.r#ref.0, u.raw)).collect();
            assert_eq!(
                full, down,
                "window {window}: {} restores its tree",
                block.id
            );
            for (r, raw) in &full {
                assert!(
                    last.contains(raw.as_str()),
                    "window {window}: m{r:05} under {} is not what the client sent",
                    block.id
                );
            }
        }
        // Nothing on the wire is a summary that no block accounts for: the active blocks
        // cover disjoint refs.
        let mut seen = std::collections::HashSet::new();
        for b in state.active_blocks() {
            for r in &b.effective {
                assert!(
                    seen.insert(*r),
                    "window {window}: {r} under two active blocks"
                );
            }
        }
    }
}

#[test]
fn foldwire_replay_of_the_session_reports_no_refusal() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("session.jsonl");
    std::fs::write(&file, session().join("\n")).unwrap();
    // The default head (4,000 tokens) leaves an 8,000 window too little beside the
    // protected recent messages; 12,000 is the smallest window it fits as it is.
    let window = "12000";
    let out = Command::new(env!("CARGO_BIN_EXE_foldwire"))
        .args([
            "replay",
            file.to_str().unwrap(),
            "--json",
            "--window",
            window,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows.len(), TURNS);
    let refused: Vec<&Value> = rows.iter().filter(|r| !r["refused"].is_null()).collect();
    assert!(refused.is_empty(), "window {window}: {refused:?}");
    assert!(rows.iter().all(|r| r["failed"].is_null()));
}

/// The provider's real counts run ahead of the estimate (×1.2): the session's calibration
/// follows, the fold stage budgets with it, and no turn is refused; what is forwarded fits
/// the window as the provider counts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_that_counts_more_than_the_estimate_is_never_refused() {
    let bodies = session();
    for window in [8_000, 12_000] {
        let (refusals, state) = replay(&bodies, window, Some(1.2)).await;
        assert!(
            refusals.is_empty(),
            "window {window}: {} refusals, first: {}",
            refusals.len(),
            refusals[0]
        );
        assert!(state.calibration > 1.1, "calibration {}", state.calibration);
    }
}
