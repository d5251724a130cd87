#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! A client of an agent loop, per wire: the request it sends with its whole history, its
//! opening message, and what it appends after each answer (the answer and its tool results).

use std::time::{Duration, Instant};

use foldwire_core::{SessionId, SessionState, Wire};
use foldwire_stages::kernel::restore_with_archive;
use serde_json::{Value, json};

/// The request body of a turn.
pub fn request(wire: Wire, history: &[Value]) -> Value {
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
pub fn opener(wire: Wire) -> Value {
    match wire {
        Wire::Gemini => json!({"role": "user", "parts": [{"text": "Start the task."}]}),
        _ => json!({"role": "user", "content": "Start the task."}),
    }
}

/// Appends the model's answer and the client's tool results; returns the tool names called.
pub fn answer_and_results(
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

/// Restores every block of `state` from the session's archive at `location` (a directory or
/// URL), the way a user would, and checks each original unit is exactly what the client sent
/// (its history only grows, so its last body holds every unit). Returns how many units were
/// restored.
pub async fn assert_blocks_restore(
    state: &SessionState,
    location: &str,
    session: &str,
    last_sent: &str,
) -> usize {
    let archive = foldwire_archive::open(location).unwrap().media;
    let session_id = SessionId::new(session).unwrap();
    let mut restored = 0;
    for block in &state.blocks {
        let r = restore_with_archive(state, archive.as_ref(), &session_id, block.id, true)
            .await
            .unwrap();
        for unit in r.units {
            assert!(
                last_sent.contains(&unit.raw),
                "{session}: {} of {} is not what the client sent: {}",
                unit.r#ref,
                block.id,
                unit.raw
            );
            restored += 1;
        }
    }
    restored
}

/// What one client saw: its acknowledged turns and its last request body.
pub struct ClientRun {
    pub session: String,
    pub acked: usize,
    pub last_sent: String,
}

/// Sends one turn until it is answered (connection errors while the server is down are
/// retried with the same body, exactly as the client's history stands).
pub async fn send_until_answered(
    client: &reqwest::Client,
    base: &str,
    wire: Wire,
    session: &str,
    body: &str,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        assert!(Instant::now() < deadline, "{session}: no answer for 120 s");
        let sent = client
            .post(format!("{base}{}", crate::support::path_of(wire, false)))
            .header("x-foldwire-session", session)
            .header("x-mock-script", "agent")
            .body(body.to_owned())
            .send()
            .await;
        if let Ok(resp) = sent {
            let status = resp.status();
            if let Ok(answer) = resp.json::<Value>().await {
                assert_eq!(status, 200, "{session}: {answer}");
                return answer;
            }
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
}

pub async fn run_client(
    client: reqwest::Client,
    base: String,
    wire: Wire,
    session: String,
    turns: usize,
) -> ClientRun {
    let mut history = vec![opener(wire)];
    let mut last_sent = String::new();
    let mut acked = 0;
    for turn in 0..turns {
        last_sent = request(wire, &history).to_string();
        let answer = send_until_answered(&client, &base, wire, &session, &last_sent).await;
        answer_and_results(wire, &mut history, &answer, turn);
        acked += 1;
    }
    ClientRun {
        session,
        acked,
        last_sent,
    }
}
