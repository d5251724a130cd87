#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The write budget of a turn through the real `default` pipeline (counts, not timings): a
//! first turn on a long session writes its folded originals as one archive object, and a
//! steady turn writes to the state store no more than twice the new messages' bytes plus
//! 4 KB, in at most 3 requests, however long the session.

use std::fmt::Write as _;
use std::sync::Arc;

use bytes::Bytes;
use foldwire_archive::Backends;
use foldwire_archive::counting::{CountingStore, Counts};
use foldwire_archive::object_store::memory::InMemory;
use foldwire_core::{Engine, SessionId, StageCx, TurnRequest, Wire};
use foldwire_proxy::setup;

/// An Anthropic tool-use session of `turns` exchanges with `output` characters of tool
/// output each (the shape of the bench body).
fn session_body(turns: usize, output: usize) -> Bytes {
    let mut s = String::from(
        r#"{"model":"m","max_tokens":1024,"messages":[{"role":"user","content":"Refactor the auth module."}"#,
    );
    for t in 0..turns {
        let _ = write!(
            s,
            r#",{{"role":"assistant","content":[{{"type":"text","text":"Step {t}: reading src/mod{t}.rs"}},{{"type":"tool_use","id":"toolu_{t:06}","name":"bash","input":{{"command":"cat src/mod{t}.rs"}}}}]}}"#
        );
        let line = format!("line {t} fn handler_{t}() {{ ok() }} ");
        let out: String = line.repeat(output / line.len() + 1)[..output].to_owned();
        let _ = write!(
            s,
            r#",{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"toolu_{t:06}","content":"{out}"}}]}}"#
        );
    }
    s.push_str(r#",{"role":"user","content":"Continue."}]}"#);
    Bytes::from(s)
}

fn state_bytes(by: &std::collections::BTreeMap<String, Counts>) -> u64 {
    by.get("journal").map_or(0, |c| c.put_bytes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steady_turn_through_the_default_pipeline_stays_within_its_write_budget() {
    let counting = Arc::new(CountingStore::new(Arc::new(InMemory::new())));
    let backends = Backends::from_object_store(counting.clone(), "memory");
    let registry = setup::registry().unwrap();
    let pipeline = setup::pipeline("default", &registry).unwrap();
    let cx = StageCx::new(registry.clone()).with_archive(backends.media);
    let engine = Engine::builder(pipeline, backends.state, registry)
        .context(cx)
        .workers(1)
        .start()
        .unwrap();
    let session = SessionId::new("budget").unwrap();
    // Over a small window, so the first turn folds most of the session.
    let window = 60_000;
    let run = |turns: usize| {
        let engine = engine.clone();
        let session = session.clone();
        async move {
            let mut request = TurnRequest::new(Wire::Anthropic, session_body(turns, 1500));
            request.budget = request.budget.with_window(window);
            let outcome = engine.run_turn(&session, request).await.unwrap();
            assert!(
                outcome.report.fail_open.is_none(),
                "{:?}",
                outcome.report.fail_open
            );
            assert!(
                outcome.report.refusal.is_none(),
                "{:?}",
                outcome.report.refusal
            );
            outcome
        }
    };
    let first_turns = 400;
    let outcome = run(first_turns).await;
    let folded = outcome.report.counter("fold.originals_archived");
    assert!(folded > 300, "the first turn folded {folded} units");
    let first = counting.puts_by_folder();
    let archive_objects: u64 = ["media", "packs"]
        .iter()
        .filter_map(|k| first.get(*k))
        .map(|c| c.puts)
        .sum();
    assert_eq!(archive_objects, 1, "{folded} originals: {first:?}");

    for k in 1..=12 {
        let new_bytes = (session_body(first_turns + k, 1500).len()
            - session_body(first_turns + k - 1, 1500).len()) as u64;
        let before_by = counting.puts_by_folder();
        let before = counting.counts();
        run(first_turns + k).await;
        let spent = counting.counts().since(&before);
        let state = state_bytes(&counting.puts_by_folder()) - state_bytes(&before_by);
        assert!(
            state <= 2 * new_bytes + 4096,
            "steady turn {k}: {state} state bytes for {new_bytes} new"
        );
        assert!(spent.requests() <= 3, "steady turn {k}: {spent:?}");
    }
}
