#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `foldwire serve` on what agents really send: a screenshot is forwarded, not refused, and
//! Codex CLI's developer items survive the model's own compress call.

mod support;

use base64::Engine as _;
use foldwire_core::Wire;
use serde_json::{Value, json};
use support::*;

/// A 1200×800 PNG header followed by 2.2 MB of pixel bytes: 2.9 MB of base64.
fn screenshot_base64() -> String {
    let mut png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR".to_vec();
    png.extend_from_slice(&1200u32.to_be_bytes());
    png.extend_from_slice(&800u32.to_be_bytes());
    png.extend_from_slice(&[8, 2, 0, 0, 0, 0, 0, 0, 0]);
    png.extend((0..2_200_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8));
    base64::engine::general_purpose::STANDARD.encode(png)
}

/// A provider that takes bodies of any size (the shared mock keeps axum's 2 MB default) and
/// answers every request with one short Anthropic message; returns what it received.
async fn start_large_body_provider() -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::Mutex<Vec<bytes::Bytes>>>,
) {
    let received = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = received.clone();
    let app = axum::Router::new()
        .fallback(axum::routing::any(move |body: bytes::Bytes| {
            let log = log.clone();
            async move {
                log.lock().unwrap().push(body);
                axum::Json(json!({
                    "id": "msg_1", "type": "message", "role": "assistant", "model": "m",
                    "content": [{"type": "text", "text": "The button is cut off."}],
                    "stop_reason": "end_turn", "stop_sequence": null,
                    "usage": {"input_tokens": 1300, "output_tokens": 8}
                }))
            }
        }))
        .layer(axum::extract::DefaultBodyLimit::disable());
    let addr = serve_upstream(app).await;
    (addr, received)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_screenshot_is_forwarded_not_refused() {
    let (upstream, received) = start_large_body_provider().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(upstream, dir.path(), |_| {}).await;
    let data = screenshot_base64();
    let body = json!({
        "model": "m", "max_tokens": 64,
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "What is wrong on this page?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}
        ]}]
    });
    let (status, got) = post(proxy, Wire::Anthropic, false, "shot", "text", &body).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&got));
    assert!(String::from_utf8_lossy(&got).contains("The button is cut off."));
    let forwarded = received.lock().unwrap().clone();
    assert_eq!(forwarded.len(), 1);
    assert!(String::from_utf8_lossy(&forwarded[0]).contains(&data));
    // The estimate the session calibrates with priced the image by its pixels.
    let state = admin_when(proxy, "shot", |v| {
        v["state"]["usage"][0]["estimated"].is_u64()
    })
    .await;
    let estimated = state["state"]["usage"][0]["estimated"].as_u64().unwrap();
    assert!((1_280..5_000).contains(&estimated), "{state}");
    // What the panel charts as the client's tokens is the pipeline's own measure of the
    // request as received (no second pass over the 2.9 MB), with the image priced the same.
    let counters = &state["reports"][0]["counters"];
    let raw = counters["raw_tokens"].as_u64().unwrap();
    assert_eq!(
        counters[foldwire_stages::ranges_build::CLIENT_TOKENS_COUNTER].as_u64(),
        Some(raw),
        "{counters}"
    );
    assert!((1_280..5_000).contains(&raw), "{counters}");

    // A pipeline without `ranges.build` has no such measure: the body is read once, and
    // the same count stands for what was sent (the body goes out unchanged).
    let dir = tempfile::tempdir().unwrap();
    let bare = start_proxy_with(upstream, dir.path(), |c| c.pipeline = "passthrough".into()).await;
    let (status, got) = post(bare, Wire::Anthropic, false, "shot", "text", &body).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&got));
    let state = admin_when(bare, "shot", |v| {
        v["state"]["usage"][0]["estimated"].is_u64()
    })
    .await;
    let counters = &state["reports"][0]["counters"];
    let raw = counters["raw_tokens"].as_u64().unwrap();
    assert!((1_280..5_000).contains(&raw), "{counters}");
    assert_eq!(
        state["state"]["usage"][0]["estimated"].as_u64(),
        Some(raw),
        "{state}"
    );
}

/// Codex CLI's request: no `instructions`, two `developer` items (the first as long as
/// Codex's real prompt, about 5,000 tokens: more than a whole head window), the task, a
/// tool loop.
fn codex_body(calls: usize) -> Value {
    let mut input = vec![
        json!({"type": "message", "role": "developer", "content": [{"type": "input_text", "text": format!("You are Codex. {}", "Follow the rules. ".repeat(1_100))}]}),
        json!({"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "<permissions>workspace-write</permissions>"}]}),
        json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Fix the failing test."}]}),
    ];
    for i in 0..calls {
        input.push(json!({"type": "function_call", "call_id": format!("call_{i}"), "name": "shell", "arguments": format!("{{\"cmd\":\"cat part{i}.rs\"}}")}));
        input.push(json!({"type": "function_call_output", "call_id": format!("call_{i}"), "output": format!("part {i}: {}", "fn x() {} ".repeat(80))}));
    }
    json!({"model": "gpt-5-codex", "input": input})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_keeps_its_developer_items_through_the_models_compress_call() {
    let (upstream, mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    // Large enough that nothing folds before the model is asked (the request stays under
    // the fold schedule's trigger); small enough that the trailing note offers ranges.
    let proxy = start_proxy_with(upstream, dir.path(), |c| c.window = 50_000).await;
    let body = codex_body(40);
    let (status, got) = post(
        proxy,
        Wire::OpenAiResponses,
        false,
        "codex",
        "compress",
        &body,
    )
    .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&got));
    let state = admin(proxy, "codex").await;
    let blocks = state["state"]["blocks"].as_array().unwrap();
    assert_eq!(
        blocks.len(),
        1,
        "the model's compress call applied: {state}"
    );
    assert_eq!(blocks[0]["author"], "model", "{state}");
    assert_eq!(
        mock.bodies().len(),
        2,
        "a second round after the compress call"
    );
    // The next turn is sent with the block applied: the developer items are still first.
    let (status, _) = post(proxy, Wire::OpenAiResponses, false, "codex", "text", &body).await;
    assert_eq!(status, 200);
    let sent: Value = serde_json::from_slice(mock.bodies().last().unwrap()).unwrap();
    assert!(
        sent.to_string().contains("[foldwire b1"),
        "the block is applied"
    );
    assert_eq!(sent["input"][0], body["input"][0]);
    assert_eq!(sent["input"][1], body["input"][1]);
    assert_eq!(sent["input"][2], body["input"][2], "the task, in the head");
}
