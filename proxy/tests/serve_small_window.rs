#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The notes the proxy adds at a small window (issue 11, items 6 and 14): the ranges the
//! model is offered are built for the session's window, a nudge never asks for a fold it
//! does not offer, and the system note describes refs as they are minted.

mod support;

use foldwire_core::Wire;
use support::*;

const WINDOW: u64 = 12_000;
const RANGES_NOTE: &str = "[foldwire] Compressible ranges now:";
const NUDGE: &str = "[foldwire] Fold ";

/// A plain (non-streamed) turn through the proxy; it must be answered.
async fn post_ok(proxy: std::net::SocketAddr, wire: Wire, session: &str, body: &serde_json::Value) {
    let (status, _) = post(proxy, wire, false, session, "plain", body).await;
    assert_eq!(status, 200, "{wire} {session}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_a_small_window_ranges_are_offered_and_no_nudge_asks_for_what_is_not_offered() {
    let (upstream, mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(upstream, dir.path(), |c| c.window = WINDOW).await;
    for wire in [
        Wire::Anthropic,
        Wire::OpenAiChat,
        Wire::OpenAiResponses,
        Wire::Gemini,
    ] {
        mock.received.lock().unwrap().clear();
        let session = format!("small-{}", wire.as_str());
        // A conversation that grows by an exchange of ~600 tokens a turn, well past the window.
        for turns in 1..=30 {
            post_ok(
                proxy,
                wire,
                &session,
                &history_body(wire, turns, 1200, false),
            )
            .await;
        }
        let forwarded: Vec<String> = mock
            .bodies()
            .iter()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .collect();
        assert_eq!(forwarded.len(), 30, "{wire}");
        let offered = forwarded.iter().filter(|b| b.contains(RANGES_NOTE)).count();
        assert!(
            offered >= 10,
            "{wire}: only {offered} of 30 requests at window {WINDOW} offered a range"
        );
        for (i, body) in forwarded.iter().enumerate() {
            if body.contains(NUDGE) {
                assert!(
                    body.contains(RANGES_NOTE),
                    "{wire}: request {i} nudges to compress but offers no range"
                );
            }
            // Every range offered fits the share of this window a range may hold (a tenth of
            // the available budget), which a range built for the default window would not.
            if let Some(at) = body.find(RANGES_NOTE) {
                let note = &body[at..];
                for tokens in note
                    .split("tokens")
                    .filter_map(|s| s.rsplit('~').next())
                    .filter_map(|s| s.trim().parse::<u64>().ok())
                {
                    assert!(
                        tokens <= WINDOW,
                        "{wire}: request {i} offers a {tokens}-token range"
                    );
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pressed_request_with_nothing_to_fold_gets_no_compress_nudge() {
    let (upstream, mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(upstream, dir.path(), |c| c.window = WINDOW).await;
    for wire in [
        Wire::Anthropic,
        Wire::OpenAiChat,
        Wire::OpenAiResponses,
        Wire::Gemini,
    ] {
        mock.received.lock().unwrap().clear();
        // One old exchange (the head) and a last question: past 50% of the window, nothing
        // foldable.
        let body = history_body(wire, 1, 16_000, false);
        post_ok(proxy, wire, &format!("pressed-{}", wire.as_str()), &body).await;
        let forwarded = String::from_utf8_lossy(&mock.bodies()[0]).into_owned();
        assert!(!forwarded.contains(RANGES_NOTE), "{wire}: {forwarded}");
        assert!(
            !forwarded.contains(NUDGE),
            "{wire}: a nudge asks to compress with no range offered"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_system_note_describes_refs_as_they_are_minted() {
    let (upstream, mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(upstream, dir.path(), |_| {}).await;
    post_ok(
        proxy,
        Wire::Anthropic,
        "note",
        &history_body(Wire::Anthropic, 2, 200, false),
    )
    .await;
    let body: serde_json::Value = serde_json::from_slice(&mock.bodies()[0]).unwrap();
    let note = body["system"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["text"].as_str())
        .find(|t| t.contains("foldwire"))
        .unwrap()
        .to_owned();
    // Refs are per content part, not per message, and not every part has one.
    assert!(note.contains("one per content part"), "{note}");
    assert!(note.contains("one message can hold several refs"), "{note}");
    assert!(
        note.contains("get no ref, so the numbers skip them"),
        "{note}"
    );
    assert!(note.contains("pinned"), "{note}");
    assert!(!note.contains("every earlier message has a ref"), "{note}");
    // Only what is listed can fold.
    assert!(note.contains("only the ranges listed can fold"), "{note}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ranges_offered_are_built_for_the_sessions_window() {
    let (upstream, mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    // Folding late (at 80 % of the budget, `fold.oldest_first`) leaves requests unfolded
    // while their history is past the recent window of a 12,000 window; the default
    // schedule would already have folded it.
    let spec = dir.path().join("late.toml");
    std::fs::write(
        &spec,
        r#"name = "late"
stages = ["wire.decode", "media.classify", "archive.spill", "refs.mint", "ranges.build",
  { name = "fold", params = { policy = "fold.oldest_first" } }, "pairing.repair",
  "layout.head_window", "wire.encode"]"#,
    )
    .unwrap();
    let spec = spec.to_str().unwrap().to_owned();
    let proxy = start_proxy_with(upstream, dir.path(), move |c| {
        c.window = WINDOW;
        c.pipeline = spec.clone();
    })
    .await;
    for wire in [
        Wire::Anthropic,
        Wire::OpenAiChat,
        Wire::OpenAiResponses,
        Wire::Gemini,
    ] {
        // Requests under the fold threshold, whose history past the head lies within the
        // recent tokens a default (200,000) window protects but not within the share of a
        // 12,000 window that is protected: only a note built for the session's window offers
        // the oldest of it.
        let mut offered = 0;
        for turns in 30..=36 {
            mock.received.lock().unwrap().clear();
            let session = format!("window-{}-{turns}", wire.as_str());
            post_ok(
                proxy,
                wire,
                &session,
                &history_body(wire, turns, 400, false),
            )
            .await;
            let body = String::from_utf8_lossy(&mock.bodies()[0]).into_owned();
            let counters = admin(proxy, &session).await["reports"][0]["counters"].clone();
            if counters["fold.blocks_created"].as_u64().unwrap_or(0) > 0 {
                continue;
            }
            if let Some(at) = body.find(RANGES_NOTE) {
                assert!(body[at..].contains("- m0"), "{wire}: {}", &body[at..]);
                offered += 1;
            }
        }
        assert!(offered > 0, "{wire}: no range offered at window {WINDOW}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_folds_an_offered_run_of_summaries_into_a_higher_tier() {
    let (upstream, mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(upstream, dir.path(), |c| c.window = WINDOW).await;
    for wire in [
        Wire::Anthropic,
        Wire::OpenAiChat,
        Wire::OpenAiResponses,
        Wire::Gemini,
    ] {
        let session = format!("tiers-{}", wire.as_str());
        // Long enough for several folds: at this window they come at the ceiling.
        for turns in 1..=60 {
            post_ok(
                proxy,
                wire,
                &session,
                &history_body(wire, turns, 1200, false),
            )
            .await;
        }
        let body = history_body(wire, 61, 1200, false);
        let (status, answer) =
            post(proxy, wire, false, &session, "compress-summaries", &body).await;
        assert_eq!(status, 200);
        let answer = String::from_utf8_lossy(&answer).into_owned();
        assert!(answer.contains("All done."), "{wire}: {answer}");
        let admin = admin(proxy, &session).await;
        let state: foldwire_core::SessionState =
            serde_json::from_value(admin["state"].clone()).unwrap();
        let tiered = state
            .blocks
            .iter()
            .find(|b| b.author.as_deref() == Some("model"))
            .unwrap_or_else(|| panic!("{wire}: the model's fold made no block: {admin}"));
        assert!(tiered.tier >= 2, "{wire}: tier {}", tiered.tier);
        assert!(tiered.consumed.len() >= 2, "{wire}: {:?}", tiered.consumed);
        // Restored in full (state first, then the archive), it gives back what the client
        // sent, byte for byte.
        let archive = foldwire_archive::open(dir.path().to_str().unwrap())
            .unwrap()
            .media;
        let restored = foldwire_stages::kernel::restore_with_archive(
            &state,
            archive.as_ref(),
            &foldwire_core::SessionId::new(session.clone()).unwrap(),
            tiered.id,
            true,
        )
        .await
        .unwrap();
        assert_eq!(restored.units.len(), tiered.effective.len());
        let sent = body.to_string();
        for unit in &restored.units {
            assert!(
                sent.contains(&unit.raw),
                "{wire}: {} is not what was sent",
                unit.r#ref
            );
        }
        // The next request shows the folded history as one summary of the new block.
        mock.received.lock().unwrap().clear();
        post_ok(proxy, wire, &session, &history_body(wire, 22, 1200, false)).await;
        let next = String::from_utf8_lossy(&mock.bodies()[0]).into_owned();
        let header = format!("[foldwire {}", tiered.id);
        assert!(next.contains(&header), "{wire}: {header} not on the wire");
        for consumed in &tiered.consumed {
            for shape in [
                format!("[foldwire {consumed}]"),
                format!("[foldwire {consumed} ·"),
            ] {
                assert!(
                    !next.contains(&shape),
                    "{wire}: consumed {consumed} still rendered"
                );
            }
        }
    }
}

/// An Anthropic body the way agent harnesses send it: content as blocks, and four
/// prompt-cache markers, the most the API takes (the tools and the system prompt for an
/// hour, the newest two messages for five minutes; or, `automatic`, the SDK's top-level
/// marker in place of the message ones).
fn marked_body(turns: usize, automatic: bool) -> serde_json::Value {
    let mut body = history_body(Wire::Anthropic, turns, 1200, false);
    let hour = serde_json::json!({"type": "ephemeral", "ttl": "1h"});
    let five = serde_json::json!({"type": "ephemeral"});
    body["tools"] = serde_json::json!([{"name": "bash", "description": "Runs a command.", "input_schema": {"type": "object"}, "cache_control": hour}]);
    body["system"] = serde_json::json!([
        {"type": "text", "text": "You are a coding agent."},
        {"type": "text", "text": "Work carefully.", "cache_control": hour}
    ]);
    let messages = body["messages"].as_array_mut().unwrap();
    let n = messages.len();
    for (i, m) in messages.iter_mut().enumerate() {
        let text = m["content"].as_str().unwrap().to_owned();
        let mut block = serde_json::json!({"type": "text", "text": text});
        if i + 2 >= n && !automatic {
            block["cache_control"] = five.clone();
        }
        m["content"] = serde_json::json!([block]);
    }
    if automatic {
        // The SDK's top-level marker, which the API puts on the last cacheable block.
        body["cache_control"] = five;
    }
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_using_all_four_cache_markers_is_never_refused_while_folds_place_theirs() {
    let (upstream, mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(upstream, dir.path(), |c| c.window = WINDOW).await;
    let count = |b: &str| b.matches("\"cache_control\"").count();
    let mut moved = 0;
    for turns in 1..=30 {
        let body = marked_body(turns, false);
        post_ok(proxy, Wire::Anthropic, "marked", &body).await;
        let refused = mock.refused.lock().unwrap().clone();
        assert!(refused.is_empty(), "turn {turns}: {refused:?}");
        let sent = mock.bodies().pop().unwrap();
        let sent: serde_json::Value = serde_json::from_slice(&sent).unwrap();
        // Markers foldwire put where the client had none (the client's own were dropped to
        // make room), so the mock's limit was met by foldwire's choice, not by luck.
        let ours = sent["messages"]
            .as_array()
            .unwrap()
            .iter()
            .rev()
            .skip(2)
            .filter(|m| count(&m.to_string()) > 0)
            .count();
        moved += usize::from(ours > 0);
        assert!(count(&sent.to_string()) <= 4, "turn {turns}");
    }
    assert!(moved > 0, "foldwire never placed a marker of its own");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_top_level_cache_marker_keeps_its_slot_across_folds() {
    let (upstream, mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(upstream, dir.path(), |c| c.window = WINDOW).await;
    for turns in 1..=30 {
        post_ok(
            proxy,
            Wire::Anthropic,
            "automatic",
            &marked_body(turns, true),
        )
        .await;
        let refused = mock.refused.lock().unwrap().clone();
        assert!(refused.is_empty(), "turn {turns}: {refused:?}");
        let sent: serde_json::Value =
            serde_json::from_slice(&mock.bodies().pop().unwrap()).unwrap();
        assert_eq!(
            sent["cache_control"]["type"], "ephemeral",
            "turn {turns}: the client's marker stands"
        );
    }
}
