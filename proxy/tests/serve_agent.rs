#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! A long agent loop through the proxy with a small window: every forwarded request fits
//! and is valid for its provider, the model's compress calls never reach the client, and
//! every folded message restores to the exact bytes the client sent.

mod support;

use foldwire_core::{SessionState, Wire};
use foldwire_stages::kernel::{pairing_rules, restore};
use serde_json::{Value, json};
use support::*;

const WINDOW: u64 = 40_000;
const TURNS: usize = 80;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eighty_turn_agent_loop_stays_under_a_small_window() {
    let (upstream, mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(upstream, dir.path(), |c| c.window = WINDOW).await;
    let client = reqwest::Client::new();
    let mut messages = vec![json!({"role": "user", "content": "Start the task."})];
    let mut sent = Vec::new();
    for turn in 0..TURNS {
        let body = json!({"model": "m", "max_tokens": 64, "system": "You are an agent.", "messages": messages}).to_string();
        sent.push(body.clone());
        let resp = client
            .post(format!("http://{proxy}/v1/messages"))
            .header("x-foldwire-session", "agent")
            .header("x-mock-script", "agent")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "turn {turn}");
        let answer: Value = resp.json().await.unwrap();
        let content = answer["content"].as_array().unwrap().clone();
        let mut results = Vec::new();
        for block in &content {
            if block["type"] == "tool_use" {
                assert_eq!(
                    block["name"], "bash",
                    "turn {turn}: only client tools reach the client"
                );
                let output = format!(
                    "output of turn {turn}: {}",
                    "file.rs changed; tests ok. ".repeat(110)
                );
                results.push(
                    json!({"type": "tool_result", "tool_use_id": block["id"], "content": output}),
                );
            }
        }
        assert!(!results.is_empty(), "turn {turn}: {answer}");
        messages.push(json!({"role": "assistant", "content": content}));
        messages.push(json!({"role": "user", "content": results}));
    }

    let forwarded = mock.bodies();
    assert!(forwarded.len() > TURNS, "some turns took a compress round");
    for (i, body) in forwarded.iter().enumerate() {
        assert!(
            (body.len() as u64) / 4 <= WINDOW,
            "forwarded request {i} is {} bytes, over the window",
            body.len()
        );
        let conv = foldwire_wire::request::decode(Wire::Anthropic, body.clone()).unwrap();
        let v = pairing_rules::violations(Wire::Anthropic, &conv.messages);
        assert!(v.is_empty(), "forwarded request {i}: {v:?}");
    }
    let last_client = sent.last().unwrap();
    assert!(
        last_client.len() as u64 / 4 > WINDOW,
        "the client's history outgrew the window ({} bytes)",
        last_client.len()
    );

    let admin = admin(proxy, "agent").await;
    let state: SessionState = serde_json::from_value(admin["state"].clone()).unwrap();
    assert!(!state.blocks.is_empty(), "folding happened");
    assert!(
        state
            .blocks
            .iter()
            .any(|b| b.author.as_deref() == Some("model")),
        "the model's compress calls made blocks"
    );
    let mut restored = 0;
    for block in &state.blocks {
        let r = restore(&state, block.id, true).unwrap();
        for unit in r.units {
            assert!(
                sent.iter().any(|b| b.contains(&unit.raw)),
                "{} of {} is not what the client sent: {}",
                unit.r#ref,
                block.id,
                unit.raw
            );
            restored += 1;
        }
    }
    assert!(restored > 20, "only {restored} units restored");
}
