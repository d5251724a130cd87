#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The model's `compress` calls against what the turn's note offered, in a small window:
//! every range offered folds (the handler checks it with the protection the turn offered it
//! under, not the default one, which protects 5,000 recent tokens), and a tool output that
//! `tool.trim` shortened on the wire folds as the client sent it: the block restores the
//! whole output, byte-identical.

mod support;

use std::sync::Arc;

use foldwire_archive::Backends;
use foldwire_core::{Registry, SessionId, Wire};
use foldwire_stages::tool_loop::{CallCx, run_call};
use foldwire_wire::request;
use serde_json::json;
use support::{
    Item, assert_blocks_restore_exactly, assert_trims_restore_exactly, body, engine, offered,
    sent_units, text, turn,
};

/// A window small enough that the recent zone is capped below the default 5,000 tokens.
const WINDOW: u64 = 16_000;

/// A task, twelve tool calls whose outputs `tool.trim` shortens once they are old, and three
/// short exchanges (about 7,000 tokens: under the window's fold trigger, so the turn folds
/// nothing itself and offers the ranges to the model, which are worth folding even as they
/// are sent, outputs trimmed).
fn history() -> Vec<Item> {
    let mut history = vec![Item::User(text("task", 0, 200))];
    for i in 1..=12 {
        let id = format!("call_{i}");
        history.push(Item::Calls(
            None,
            vec![(id.clone(), format!("cat part_{i}.rs"))],
        ));
        history.push(Item::Results(vec![(id, text("output", i, 2_000))]));
    }
    for i in 13..=15 {
        history.push(Item::User(text("ask", i, 200)));
        history.push(Item::Assistant(text("reply", i, 400)));
    }
    history
}

#[tokio::test]
async fn every_range_offered_folds_and_a_trimmed_output_restores_as_the_client_sent_it() {
    foldwire_plugins::link();
    let registry = Arc::new(Registry::from_inventory().unwrap());
    for wire in Wire::ALL {
        let backends = Backends::memory();
        let engine = engine(&registry, &backends);
        let session = SessionId::new(format!("model-compress-{wire}")).unwrap();
        let body = body(wire, &history(), true);
        let (outcome, _) = turn(&engine, &session, wire, &body, WINDOW).await;
        assert!(
            outcome.report.counter("tool.trim.trimmed") > 0,
            "{wire}: {:?}",
            outcome.report
        );
        assert_eq!(outcome.report.counter("fold.blocks_created"), 0, "{wire}");
        let ranges = offered(wire, &outcome.output);
        assert!(
            !ranges.is_empty(),
            "{wire}: nothing offered: {:?}",
            outcome
                .report
                .counters
                .iter()
                .filter(|(k, _)| k.starts_with("ranges")
                    || k.starts_with("layout")
                    || k.starts_with("request"))
                .collect::<Vec<_>>()
        );

        // The model folds every range it was offered, in one call.
        let args = json!({"ranges": ranges.iter().enumerate().map(|(k, (start, end))| json!({
            "start": start, "end": end, "summary": text(&format!("summary {k}"), k, 600),
        })).collect::<Vec<_>>()});
        let cx = CallCx {
            engine: &engine,
            session: &session,
            view: outcome.conversation.as_ref(),
        };
        let result = run_call(&cx, "compress", &args.to_string()).await;
        assert_eq!(
            result.text.matches("folded into").count(),
            ranges.len(),
            "{wire}: {}",
            result.text
        );

        // Each block gives back exactly what the client sent, trimmed outputs whole.
        let state = engine.snapshot(&session).await.unwrap();
        let sent = sent_units(&request::decode(wire, body.clone()).unwrap());
        let restored =
            assert_blocks_restore_exactly(&state, backends.media.as_ref(), &session, &sent).await;
        let whole_outputs = restored
            .iter()
            .filter(|r| foldwire_stages::tool_trim::trimmed_key(&state, **r).is_some())
            .count();
        assert!(whole_outputs > 0, "{wire}: no trimmed output was folded");
        // And by its own ref, as the trim's marker line tells the model.
        let trims =
            assert_trims_restore_exactly(&state, backends.media.as_ref(), &session, &sent).await;
        assert_eq!(
            trims as u64,
            outcome.report.counter("tool.trim.trimmed"),
            "{wire}"
        );
    }
}
