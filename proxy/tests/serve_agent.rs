#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! A long agent loop through the proxy with a small window: every forwarded request fits
//! and is valid for its provider, the model's compress calls never reach the client, and
//! every folded message restores to the exact bytes the client sent.

mod support;

use foldwire_core::{SessionState, Wire};
use foldwire_stages::kernel::{pairing_rules, restore_with_archive};
use serde_json::{Value, json};
use support::*;

const WINDOW: u64 = 40_000;
/// Turns of the loop on the three wires that run it at the shorter length (Anthropic runs 300).
const TURNS: usize = 80;

/// The request body of a turn.
fn request(wire: Wire, history: &[Value]) -> Value {
    match wire {
        Wire::Anthropic => {
            json!({"model": "m", "max_tokens": 64, "system": "You are an agent.", "messages": history})
        }
        Wire::OpenAiChat => {
            let mut m = vec![json!({"role": "system", "content": "You are an agent."})];
            m.extend(history.iter().cloned());
            json!({"model": "m", "messages": m})
        }
        Wire::OpenAiResponses => {
            json!({"model": "m", "instructions": "You are an agent.", "input": history})
        }
        Wire::Gemini => {
            json!({"systemInstruction": {"parts": [{"text": "You are an agent."}]}, "contents": history})
        }
    }
}

/// The first user message.
fn opener(wire: Wire) -> Value {
    match wire {
        Wire::Gemini => json!({"role": "user", "parts": [{"text": "Start the task."}]}),
        _ => json!({"role": "user", "content": "Start the task."}),
    }
}

/// Appends the model's answer and the client's tool results; returns the tool names called.
fn answer_and_results(
    wire: Wire,
    history: &mut Vec<Value>,
    answer: &Value,
    turn: usize,
) -> Vec<String> {
    let output = |_: &str| {
        format!(
            "output of turn {turn}: {}",
            "file.rs changed; tests ok. ".repeat(110)
        )
    };
    let mut names = Vec::new();
    match wire {
        Wire::Anthropic => {
            let content = answer["content"].as_array().unwrap().clone();
            let mut results = Vec::new();
            for block in content.iter().filter(|b| b["type"] == "tool_use") {
                names.push(block["name"].as_str().unwrap().to_owned());
                results.push(json!({"type": "tool_result", "tool_use_id": block["id"], "content": output("")}));
            }
            history.push(json!({"role": "assistant", "content": content}));
            history.push(json!({"role": "user", "content": results}));
        }
        Wire::OpenAiChat => {
            let message = answer["choices"][0]["message"].clone();
            history.push(message.clone());
            for call in message["tool_calls"].as_array().into_iter().flatten() {
                names.push(call["function"]["name"].as_str().unwrap().to_owned());
                history.push(
                    json!({"role": "tool", "tool_call_id": call["id"], "content": output("")}),
                );
            }
        }
        Wire::OpenAiResponses => {
            let items = answer["output"].as_array().unwrap().clone();
            history.extend(items.iter().cloned());
            for item in items.iter().filter(|i| i["type"] == "function_call") {
                names.push(item["name"].as_str().unwrap().to_owned());
                history.push(json!({"type": "function_call_output", "call_id": item["call_id"], "output": output("")}));
            }
        }
        Wire::Gemini => {
            let content = answer["candidates"][0]["content"].clone();
            history.push(content.clone());
            let mut parts = Vec::new();
            for part in content["parts"].as_array().into_iter().flatten() {
                if let Some(name) = part["functionCall"]["name"].as_str() {
                    names.push(name.to_owned());
                    parts.push(json!({"functionResponse": {"name": name, "response": {"result": output("")}}}));
                }
            }
            history.push(json!({"role": "user", "parts": parts}));
        }
    }
    names
}

async fn agent_loop(wire: Wire, turns: usize) {
    let (upstream, mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(upstream, dir.path(), |c| c.window = WINDOW).await;
    let client = reqwest::Client::new();
    let session = format!("agent-{}", wire.as_str());
    let mut history = vec![opener(wire)];
    let mut sent = Vec::new();
    for turn in 0..turns {
        let body = request(wire, &history).to_string();
        sent.push(body.clone());
        let resp = client
            .post(format!("http://{proxy}{}", path_of(wire, false)))
            .header("x-foldwire-session", &session)
            .header("x-mock-script", "agent")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{wire} turn {turn}");
        let answer: Value = resp.json().await.unwrap();
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
    // Originals are read back the way a user would: state first, then the session's archive.
    let archive = foldwire_archive::open(dir.path().to_str().unwrap())
        .unwrap()
        .media;
    let session_id = foldwire_core::SessionId::new(session.clone()).unwrap();
    let last_sent = sent.last().unwrap();
    let mut restored = 0;
    for block in &state.blocks {
        let r = restore_with_archive(&state, archive.as_ref(), &session_id, block.id, true)
            .await
            .unwrap();
        for unit in r.units {
            assert!(
                // The client's history only grows, so its last body holds every unit it sent.
                last_sent.contains(&unit.raw),
                "{wire}: {} of {} is not what the client sent: {}",
                unit.r#ref,
                block.id,
                unit.raw
            );
            restored += 1;
        }
    }
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
