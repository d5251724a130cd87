#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! A long agent loop through the proxy with a small window: every forwarded request fits
//! and is valid for its provider, the model's compress calls never reach the client, and
//! every folded message restores to the exact bytes the client sent; also with the model's
//! signed reasoning on, on every wire.

mod support;

use foldwire_core::{SessionState, Wire};
use foldwire_stages::kernel::pairing_rules;
use serde_json::Value;
use support::agent::{answer_and_results, assert_blocks_restore, opener, request};
use support::*;

const WINDOW: u64 = 40_000;
/// Turns of the loop on the three wires that run it at the shorter length (Anthropic runs 300).
const TURNS: usize = 80;

/// Turns on the model's reasoning the way each wire's clients do: Anthropic adaptive
/// thinking, Responses encrypted reasoning without storage, a Gemini 3 model, OpenRouter's
/// reasoning switch on Chat. The mock then answers with signed reasoning and refuses what
/// the providers refuse of it.
fn with_reasoning(wire: Wire, body: &mut Value) {
    match wire {
        Wire::Anthropic => body["thinking"] = serde_json::json!({"type": "adaptive"}),
        Wire::OpenAiResponses => {
            body["include"] = serde_json::json!(["reasoning.encrypted_content"]);
            body["store"] = Value::Bool(false);
        }
        Wire::OpenAiChat => body["reasoning"] = serde_json::json!({"enabled": true}),
        Wire::Gemini => {}
    }
}

async fn agent_loop(wire: Wire, turns: usize) {
    agent_loop_with(wire, turns, false).await;
}

async fn agent_loop_with(wire: Wire, turns: usize, reasoning: bool) {
    let (upstream, mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(upstream, dir.path(), |c| c.window = WINDOW).await;
    let client = reqwest::Client::new();
    let session = format!("agent-{}", wire.as_str());
    let mut history = vec![opener(wire)];
    let mut sent = Vec::new();
    for turn in 0..turns {
        let mut body = request(wire, &history);
        if reasoning {
            with_reasoning(wire, &mut body);
        }
        let body = body.to_string();
        sent.push(body.clone());
        let path = match (wire, reasoning) {
            (Wire::Gemini, true) => {
                path_of(wire, false).replace("models/g:", "models/gemini-3-pro:")
            }
            _ => path_of(wire, false).to_owned(),
        };
        let resp = client
            .post(format!("http://{proxy}{path}"))
            .header("x-foldwire-session", &session)
            .header("x-mock-script", "agent")
            .body(body)
            .send()
            .await
            .unwrap();
        let status = resp.status();
        let answer: Value = resp.json().await.unwrap();
        assert_eq!(status, 200, "{wire} turn {turn}: {answer}");
        let refused = mock.refused.lock().unwrap().clone();
        assert!(refused.is_empty(), "{wire} turn {turn}: {refused:?}");
        let names = answer_and_results(wire, &mut history, &answer, turn);
        assert_eq!(
            names,
            vec!["bash".to_owned()],
            "{wire} turn {turn}: only client tools reach the client"
        );
    }

    let forwarded = mock.bodies();
    assert!(
        forwarded.len() > turns,
        "{wire}: some turns took a compress round"
    );
    for (i, body) in forwarded.iter().enumerate() {
        assert!(
            (body.len() as u64) / 4 <= WINDOW,
            "{wire}: forwarded request {i} is {} bytes, over the window",
            body.len()
        );
        let conv = foldwire_wire::request::decode(wire, body.clone()).unwrap();
        let v = pairing_rules::violations(wire, &conv.messages);
        assert!(v.is_empty(), "{wire}: forwarded request {i}: {v:?}");
    }
    let last_client = sent.last().unwrap();
    assert!(
        last_client.len() as u64 / 4 > WINDOW,
        "{wire}: the client's history outgrew the window ({} bytes)",
        last_client.len()
    );

    let admin = admin(proxy, &session).await;
    let state: SessionState = serde_json::from_value(admin["state"].clone()).unwrap();
    assert!(!state.blocks.is_empty(), "{wire}: folding happened");
    assert!(
        state
            .blocks
            .iter()
            .any(|b| b.author.as_deref() == Some("model")),
        "{wire}: the model's compress calls made blocks"
    );
    let restored = assert_blocks_restore(
        &state,
        dir.path().to_str().unwrap(),
        &session,
        sent.last().unwrap(),
    )
    .await;
    assert!(restored > 20, "{wire}: only {restored} units restored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_300_turn_agent_loop_stays_under_a_small_window_anthropic() {
    agent_loop(Wire::Anthropic, 300).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eighty_turn_agent_loop_stays_under_a_small_window_openai_chat() {
    agent_loop(Wire::OpenAiChat, TURNS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eighty_turn_agent_loop_stays_under_a_small_window_responses() {
    agent_loop(Wire::OpenAiResponses, TURNS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eighty_turn_agent_loop_stays_under_a_small_window_gemini() {
    agent_loop(Wire::Gemini, TURNS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reasoning_models_agent_loop_keeps_its_signed_reasoning_valid_on_every_wire() {
    for wire in [
        Wire::Anthropic,
        Wire::OpenAiChat,
        Wire::OpenAiResponses,
        Wire::Gemini,
    ] {
        agent_loop_with(wire, TURNS, true).await;
    }
}
