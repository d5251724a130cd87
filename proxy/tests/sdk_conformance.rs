#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The official Python SDKs (`anthropic`, `openai`, `google-genai`) through `foldwire serve`
//! against the scripted mock provider, on all four wires, streaming and not: long
//! conversations (whole history client-side) at small windows, with text answers, client
//! tool calls and calls to the proxy's tools. The Anthropic client asks with adaptive thinking
//! and the SDK's top-level cache marker, the Chat client with OpenRouter's reasoning switch,
//! the Responses client with encrypted reasoning and `store: false` (as Codex does), the
//! Gemini client a Gemini 3 model with its thoughts; each sends every answer back as the SDK
//! returned it (reasoning included), so the mock checks the model's reasoning every turn. The Python side (tests/sdk/clients.py) checks
//! every turn as the SDK sees it; this side checks every body the mock received: it decodes,
//! obeys the provider's pairing rules and fits the window.
//!
//! `scripts/test` installs the SDKs into a venv and sets `FOLDWIRE_SDK_PYTHON`. Without it
//! the suite is skipped with a note, except under CI (env `CI`), where that is a failure.
//! `FOLDWIRE_SDK_WINDOWS` (comma-separated, default `8000,16000,24000`) and
//! `FOLDWIRE_SDK_TURNS` (default 40) tune it; `FOLDWIRE_SDK_ONLY` runs one row
//! (e.g. `openai-responses-stream`).

mod support;

use std::fmt::Write as _;

use foldwire_core::{TokenEstimator as _, Wire};
use foldwire_stages::kernel::pairing_rules;
use foldwire_wire::tokens::TiktokenEstimator;
use serde_json::Value;
use support::*;

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/sdk/clients.py");

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name)
        .ok()
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| default.to_owned())
}

fn wire_named(name: &str) -> Wire {
    match name {
        "anthropic" => Wire::Anthropic,
        "openai-chat" => Wire::OpenAiChat,
        "openai-responses" => Wire::OpenAiResponses,
        _ => Wire::Gemini,
    }
}

/// What is wrong with the bodies the mock received for one session, and the most tokens
/// one of them held.
fn forwarded_problems(wire: Wire, window: u64, bodies: &[bytes::Bytes]) -> (Vec<String>, u64) {
    let mut problems = Vec::new();
    let mut most = 0;
    for (i, body) in bodies.iter().enumerate() {
        let conv = match foldwire_wire::request::decode(wire, body.clone()) {
            Ok(c) => c,
            Err(e) => {
                problems.push(format!("request {}: does not decode: {e}", i + 1));
                continue;
            }
        };
        let violations = pairing_rules::violations(wire, &conv.messages);
        if !violations.is_empty() {
            problems.push(format!(
                "request {}: pairing violations {violations:?}",
                i + 1
            ));
        }
        // Everything sent counts: the client's history, the proxy's tools and notes.
        let tokens = TiktokenEstimator.text_tokens(&String::from_utf8_lossy(body));
        most = most.max(tokens);
        if tokens > window {
            problems.push(format!(
                "request {}: {tokens} tokens forwarded, window {window}",
                i + 1
            ));
        }
    }
    (problems, most)
}

/// The python with the SDKs, or `None` (said on stderr) when the suite cannot run here;
/// under CI (env `CI`) that is a failure.
fn sdk_python() -> Option<std::ffi::OsString> {
    let python = std::env::var_os("FOLDWIRE_SDK_PYTHON");
    if python.is_none() {
        if std::env::var_os("CI").is_some() {
            panic!(
                "FOLDWIRE_SDK_PYTHON is not set: CI must run the SDK conformance suite \
                 (scripts/test creates the venv with anthropic, openai and google-genai and sets it)"
            );
        }
        eprintln!(
            "SDK conformance suite NOT RUN: set FOLDWIRE_SDK_PYTHON to a python with anthropic, \
             openai and google-genai installed (scripts/test does this)"
        );
    }
    python
}

/// Runs tests/sdk/clients.py against the proxy at `base` for `turns` turns of the rows
/// `only` (comma-separated; the default rows when empty), naming sessions after `prefix`;
/// its report.
async fn run_clients(
    python: std::ffi::OsString,
    base: String,
    turns: String,
    only: String,
    prefix: String,
) -> Value {
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(python)
            .arg(SCRIPT)
            .args([base, turns, only, prefix])
            .output()
    })
    .await
    .unwrap()
    .expect("running the SDK client script");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the SDK client script failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("the SDK script's report does not parse: {e}: {stdout}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_sdks_hold_long_conversations_through_the_proxy_on_every_wire() {
    let Some(python) = sdk_python() else {
        return;
    };
    let windows: Vec<u64> = env_or("FOLDWIRE_SDK_WINDOWS", "8000,16000,24000")
        .split(',')
        .map(|w| w.trim().parse().expect("FOLDWIRE_SDK_WINDOWS: numbers"))
        .collect();
    let turns = env_or("FOLDWIRE_SDK_TURNS", "40");
    let only = env_or("FOLDWIRE_SDK_ONLY", "");

    let mut matrix = String::from(
        "window  client        wire              streaming  turns passed  history  sent  loop  largest  problems\n",
    );
    let mut failures = Vec::new();
    for window in windows {
        let (upstream, mock) = start_mock().await;
        let dir = tempfile::tempdir().unwrap();
        let proxy = start_proxy_with(upstream, dir.path(), |c| c.window = window).await;
        let report = run_clients(
            python.clone(),
            format!("http://{proxy}"),
            turns.clone(),
            only.clone(),
            format!("w{window}"),
        )
        .await;
        for (client, listed) in report["listings"].as_object().unwrap() {
            if !listed.is_array() {
                failures.push(format!("window {window}: {client} models.list: {listed}"));
            }
        }
        let received = mock.received.lock().unwrap().clone();
        for row in report["rows"].as_array().unwrap() {
            let wire = wire_named(row["wire"].as_str().unwrap());
            let session = row["session"].as_str().unwrap();
            let bodies: Vec<bytes::Bytes> = received
                .iter()
                .filter(|r| r.headers.get("x-sdk-row").is_some_and(|v| v == session))
                .map(|r| r.body.clone())
                .collect();
            let (problems, most) = forwarded_problems(wire, window, &bodies);
            // Side requests reach the provider without the proxy's tools.
            let sides: Vec<&Received> = received
                .iter()
                .filter(|r| r.headers.get("x-sdk-row").is_some_and(|v| v == session))
                .filter(|r| r.headers.get("x-mock-script").is_some_and(|v| v == "side"))
                .collect();
            if sides.is_empty() && row["passed"].as_u64() >= Some(5) {
                failures.push(format!(
                    "window {window}: {session}: no side request was made"
                ));
            }
            for side in &sides {
                if String::from_utf8_lossy(&side.body).contains("search_context") {
                    failures.push(format!(
                        "window {window}: {session}: a side request got the proxy's tools"
                    ));
                }
            }
            // The compress loop ran: some round carried a proxy call's result back.
            let loop_rounds = bodies
                .iter()
                .filter(|b| {
                    let text = String::from_utf8_lossy(b);
                    match wire {
                        Wire::Gemini => ["compress", "search_context"].iter().any(|t| {
                            text.contains(&format!("\"functionResponse\":{{\"name\":\"{t}\""))
                        }),
                        _ => text.contains("fwcall_"),
                    }
                })
                .count();
            if loop_rounds == 0 && row["passed"].as_u64() >= Some(3) {
                failures.push(format!(
                    "window {window}: {session}: the compress loop never ran"
                ));
            }
            let (passed, total) = (
                row["passed"].as_u64().unwrap(),
                row["turns"].as_u64().unwrap(),
            );
            let _ = writeln!(
                matrix,
                "{window:<7} {:<13} {:<17} {:<10} {:>5}/{:<6}  {:>7} {:>4} {:>5} {:>8}   {}",
                row["client"].as_str().unwrap(),
                row["wire"].as_str().unwrap(),
                row["stream"].as_bool().unwrap(),
                passed,
                total,
                row["history_chars"].as_u64().unwrap_or(0) / 4,
                bodies.len(),
                loop_rounds,
                most,
                problems.len()
            );
            // The clients that counted their last request were told the size of the request
            // foldwire would send (the mock counts what it was sent, bytes / 4): one within
            // the window, while their own history outgrew it.
            if let Some(counted) = row["counted"].as_u64() {
                let count_sent = received
                    .iter()
                    .filter(|r| r.headers.get("x-sdk-row").is_some_and(|v| v == session))
                    .find(|r| {
                        ["count_tokens", "input_tokens", ":countTokens"]
                            .iter()
                            .any(|p| r.path.contains(p))
                    });
                let history = row["history_chars"].as_u64().unwrap_or(0) / 4;
                let fits = |body: &bytes::Bytes| {
                    TiktokenEstimator.text_tokens(&String::from_utf8_lossy(body)) <= window
                };
                match count_sent {
                    Some(r) if prompt_tokens(&r.body) == counted && fits(&r.body) => {}
                    Some(r) => failures.push(format!(
                        "window {window}: {session}: counted {counted} tokens; the provider was asked to count {} bytes, window {window}",
                        r.body.len()
                    )),
                    None => failures.push(format!(
                        "window {window}: {session}: the count request never reached the provider"
                    )),
                }
                if history <= window {
                    failures.push(format!(
                        "window {window}: {session}: the history ({history} tokens) never outgrew the window, so the count shows nothing"
                    ));
                }
            } else if wire != Wire::OpenAiChat && row["passed"] == row["turns"] {
                failures.push(format!("window {window}: {session}: no count was made"));
            }
            if let Some(f) = row["failure"].as_str() {
                failures.push(format!("window {window}: {session}: {f}"));
            }
            if passed < total && row["failure"].is_null() {
                failures.push(format!("window {window}: {session}: stopped at {passed}"));
            }
            failures.extend(
                problems
                    .into_iter()
                    .take(3)
                    .map(|p| format!("window {window}: {session}: {p}")),
            );
        }
    }
    println!("{matrix}");
    assert!(
        failures.is_empty(),
        "{matrix}\n{} problem(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// A Responses client whose conversation the provider keeps (`previous_response_id`, as the
/// openai SDK's guide chains it) sends only what is new. foldwire cannot fold a history it is
/// not sent: it forwards those requests as sent, with no session, no proxy tools, and the
/// output of the client's tool call kept (pairing repair once took it for an orphan, since
/// the call is in the stored response, and dropped it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_the_provider_keeps_is_forwarded_as_sent() {
    let Some(python) = sdk_python() else {
        return;
    };
    let (upstream, mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(upstream, dir.path(), |c| c.window = 8000).await;
    let turns = 12;
    let report = run_clients(
        python,
        format!("http://{proxy}"),
        turns.to_string(),
        "openai-responses-chained-json,openai-responses-chained-stream".into(),
        "held".into(),
    )
    .await;
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{report}");
    let received = mock.received.lock().unwrap().clone();
    let mut held = 0;
    for row in rows {
        let session = row["session"].as_str().unwrap();
        assert!(row["failure"].is_null(), "{session}: {}", row["failure"]);
        assert_eq!(row["passed"], turns, "{session}");
        let bodies: Vec<Value> = received
            .iter()
            .filter(|r| r.headers.get("x-sdk-row").is_some_and(|v| v == session))
            .map(|r| serde_json::from_slice(&r.body).unwrap())
            .collect();
        // The first request holds the whole (one-message) conversation and is processed.
        assert!(bodies[0].get("previous_response_id").is_none(), "{session}");
        for (i, body) in bodies.iter().enumerate().skip(1) {
            assert!(
                body["previous_response_id"].is_string(),
                "{session}: request {i} names no stored response"
            );
            let tools: Vec<&str> = body["tools"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|t| t["name"].as_str())
                .collect();
            assert_eq!(
                tools,
                ["bash"],
                "{session}: request {i} got the proxy's tools"
            );
            assert!(
                body["instructions"]
                    .as_str()
                    .unwrap()
                    .starts_with("You are")
                    && body["instructions"].as_str().unwrap().len() < 80,
                "{session}: request {i} got the proxy's note"
            );
        }
        let outputs = bodies
            .iter()
            .filter(|b| b.to_string().contains("function_call_output"))
            .count();
        assert!(
            outputs >= turns / 5,
            "{session}: {outputs} tool outputs reached the provider"
        );
        held += bodies.len() - 1;
    }
    assert_eq!(
        *mock.refused.lock().unwrap(),
        Vec::<String>::new(),
        "the provider refused a request"
    );
    let metrics = metrics(proxy).await;
    assert!(
        metrics.contains(&format!("foldwire_provider_held_total {held}\n")),
        "{held} requests continued a stored response:\n{metrics}"
    );
    // The two first requests made turns; nothing after them did.
    assert_eq!(turns_made(proxy).await, 2);
}
