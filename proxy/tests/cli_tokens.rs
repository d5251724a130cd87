#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `foldwire run` on the requests agents really send: screenshots are priced by pixel size,
//! system and developer messages are frame, the head holds from the first turn, and the
//! estimate matches what is forwarded.

mod support;

use base64::Engine as _;
use serde_json::{Value, json};
use support::cli::{foldwire, text};

fn run_ok(args: &[&str], stdin: &[u8]) -> Vec<u8> {
    let out = foldwire(args, stdin);
    assert!(
        out.status.success(),
        "{args:?}: exit {:?}: {}",
        out.status.code(),
        text(&out.stderr),
    );
    out.stdout
}

/// `foldwire run` on a session in `state`, with extra flags; returns stdout and the report.
fn run(state: &str, wire: &str, session: &str, extra: &[&str], body: &[u8]) -> (Value, Value) {
    let report = tempfile::NamedTempFile::new().unwrap();
    let mut args = vec![
        "run",
        "--wire",
        wire,
        "--session",
        session,
        "--state",
        state,
        "--report",
        report.path().to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let out = run_ok(&args, body);
    let report: Value = serde_json::from_slice(&std::fs::read(report.path()).unwrap()).unwrap();
    (serde_json::from_slice(&out).unwrap(), report)
}

fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = 0xFFFF_FFFFu32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&u32::try_from(data.len()).unwrap().to_be_bytes());
    let mut body = kind.to_vec();
    body.extend_from_slice(data);
    out.extend_from_slice(&body);
    out.extend_from_slice(&crc32(&body).to_be_bytes());
}

/// A 1200×800 RGB PNG of about 2.2 MB (2.9 MB of base64), like a screenshot: a real IHDR
/// and an IDAT of incompressible bytes.
fn screenshot_png() -> Vec<u8> {
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = 1200u32.to_be_bytes().to_vec();
    ihdr.extend_from_slice(&800u32.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
    chunk(&mut png, b"IHDR", &ihdr);
    let mut x = 0x2545_F491u32;
    let idat: Vec<u8> = (0..2_200_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 24) as u8
        })
        .collect();
    chunk(&mut png, b"IDAT", &idat);
    chunk(&mut png, b"IEND", &[]);
    png
}

/// A body of `wire` whose last user message carries the screenshot after some history.
fn screenshot_body(wire: &str, data: &str) -> String {
    match wire {
        "anthropic" => json!({
            "model": "claude-sonnet-4-5", "max_tokens": 1024,
            "messages": [
                {"role": "user", "content": "Open the settings page."},
                {"role": "assistant", "content": "Done. Send me a screenshot."},
                {"role": "user", "content": [
                    {"type": "text", "text": "Here it is. What is wrong?"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}
                ]}
            ]
        }),
        "openai-chat" => json!({
            "model": "gpt-4o",
            "messages": [
                {"role": "system", "content": "You are a UI reviewer."},
                {"role": "user", "content": [
                    {"type": "text", "text": "What is wrong?"},
                    {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{data}")}}
                ]}
            ]
        }),
        "openai-responses" => json!({
            "model": "gpt-4o",
            "input": [
                {"role": "user", "content": [
                    {"type": "input_text", "text": "What is wrong?"},
                    {"type": "input_image", "image_url": format!("data:image/png;base64,{data}")}
                ]}
            ]
        }),
        _ => json!({
            "contents": [
                {"role": "user", "parts": [
                    {"text": "What is wrong?"},
                    {"inlineData": {"mimeType": "image/png", "data": data}}
                ]}
            ]
        }),
    }
    .to_string()
}

#[test]
fn a_screenshot_in_the_last_user_message_is_priced_by_its_pixels_not_refused() {
    let data = base64::engine::general_purpose::STANDARD.encode(screenshot_png());
    assert!(data.len() > 2_800_000, "{}", data.len());
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().to_str().unwrap();
    // Each provider's price of a 1200×800 image: Anthropic 1,280 (1200·800/750), OpenAI
    // 1,105 (1152×768, six 512-px tiles), Gemini 1,032 (four 768-px tiles).
    for (wire, image) in [
        ("anthropic", 1_280u64),
        ("openai-chat", 1_105),
        ("openai-responses", 1_105),
        ("gemini", 1_032),
    ] {
        let body = screenshot_body(wire, &data);
        let (out, report) = run(st, wire, &format!("shot-{wire}"), &[], body.as_bytes());
        assert!(
            out.to_string().contains(&data),
            "{wire}: the image is forwarded"
        );
        let tokens = report["counters"]["request_tokens"].as_u64().unwrap();
        let text_part = (body.len() - data.len()) as u64 / 4;
        assert!(
            tokens >= image && tokens <= image + text_part + 50,
            "{wire}: {tokens} tokens estimated"
        );
    }
}

/// An OpenAI Chat conversation opening with a system message, `turns` exchanges of about
/// `chars` characters each, then a question.
fn chat_body(system: &str, turns: usize, chars: usize) -> String {
    let mut messages = vec![json!({"role": "system", "content": system})];
    for i in 0..turns {
        messages.push(
            json!({"role": "user", "content": format!("question {i}: {}", "q".repeat(chars))}),
        );
        messages.push(
            json!({"role": "assistant", "content": format!("answer {i}: {}", "a".repeat(chars))}),
        );
    }
    messages.push(json!({"role": "user", "content": "and now?"}));
    json!({"model": "gpt-4o", "messages": messages}).to_string()
}

const SYSTEM: &str = "You are a careful coding agent. Never delete files without asking.";

#[test]
fn fold_from_the_first_ref_leaves_the_chat_system_message_on_the_wire() {
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().to_str().unwrap();
    // Longer than the protected recent 5,000 tokens; no head window, so the opening is
    // foldable history.
    let body = chat_body(SYSTEM, 30, 400);
    let flags = ["--head-tokens", "0"];
    run(st, "openai-chat", "sys1", &flags, body.as_bytes());
    let inspected: Value = serde_json::from_slice(&run_ok(
        &["inspect", "--session", "sys1", "--state", st],
        b"",
    ))
    .unwrap();
    let first = &inspected["refs"][0];
    assert_eq!(first["ref"], "m00001");
    assert_ne!(
        first["role"], "system",
        "system messages get no ref: {first}"
    );
    let folded: Value = serde_json::from_slice(&run_ok(
        &[
            "fold",
            "--session",
            "sys1",
            "--state",
            st,
            "--from",
            "m00001",
            "--to",
            "m00004",
            "--summary",
            "Asked and answered the first two questions.",
        ],
        b"",
    ))
    .unwrap();
    assert_eq!(folded["blocks_created"][0], "b1", "{folded}");
    let (out, _) = run(st, "openai-chat", "sys1", &flags, body.as_bytes());
    let messages = out["messages"].as_array().unwrap();
    assert_eq!(messages[0], json!({"role": "system", "content": SYSTEM}));
    assert!(out.to_string().contains("[foldwire b1"), "{out}");
    assert!(!out.to_string().contains("question 0"));
}

#[test]
fn an_automatic_fold_at_a_small_window_keeps_the_chat_system_message() {
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().to_str().unwrap();
    let body = chat_body(SYSTEM, 30, 400);
    let (out, report) = run(
        st,
        "openai-chat",
        "sys2",
        &["--window", "8000"],
        body.as_bytes(),
    );
    assert!(
        report["counters"]["fold.blocks_created"].as_u64().unwrap() > 0,
        "{report}"
    );
    let messages = out["messages"].as_array().unwrap();
    assert_eq!(messages[0], json!({"role": "system", "content": SYSTEM}));
    assert_eq!(messages.iter().filter(|m| m["role"] == "system").count(), 1);
}

/// Codex CLI's shape: no `instructions`, two `developer` items, then the user's task and a
/// long tool loop.
fn codex_body(calls: usize) -> String {
    let mut input = vec![
        json!({"type": "message", "role": "developer", "content": [{"type": "input_text", "text": format!("You are Codex. {}", "Follow the rules. ".repeat(60))}]}),
        json!({"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "<permissions>workspace-write</permissions>"}]}),
        json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Fix the failing test in src/lib.rs."}]}),
    ];
    for i in 0..calls {
        input.push(json!({"type": "function_call", "call_id": format!("call_{i}"), "name": "shell", "arguments": format!("{{\"cmd\":\"cat part{i}.rs\"}}")}));
        input.push(json!({"type": "function_call_output", "call_id": format!("call_{i}"), "output": format!("part {i}: {}", "fn x() {} ".repeat(60))}));
    }
    json!({"model": "gpt-5-codex", "input": input, "stream": true}).to_string()
}

#[test]
fn codex_developer_items_stay_whatever_folds() {
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().to_str().unwrap();
    // Past the fold schedule's ceiling at this window (a window this small folds there).
    let body = codex_body(40);
    let request: Value = serde_json::from_str(&body).unwrap();
    let (out, report) = run(
        st,
        "openai-responses",
        "codex",
        &["--window", "8000"],
        body.as_bytes(),
    );
    assert!(
        report["counters"]["fold.blocks_created"].as_u64().unwrap() > 0,
        "{report}"
    );
    let input = out["input"].as_array().unwrap();
    assert_eq!(input[0], request["input"][0]);
    assert_eq!(input[1], request["input"][1]);
    // No range offered to the model can name them.
    let inspected: Value = serde_json::from_slice(&run_ok(
        &["inspect", "--session", "codex", "--state", st],
        b"",
    ))
    .unwrap();
    for r in inspected["refs"].as_array().unwrap() {
        assert_ne!(r["role"], "system", "{r}");
    }
}

/// A plain Chat conversation (no system message) of `turns` exchanges, then a question.
fn plain_chat(turns: usize, chars: usize) -> (String, Vec<Value>) {
    let body: Value = serde_json::from_str(&chat_body(SYSTEM, turns, chars)).unwrap();
    let messages: Vec<Value> = body["messages"].as_array().unwrap()[1..].to_vec();
    let body = json!({"model": "gpt-4o", "messages": messages}).to_string();
    (body, messages)
}

#[test]
fn the_head_window_holds_on_a_fresh_sessions_first_turn_and_follows_the_window() {
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().to_str().unwrap();
    let (body, sent) = plain_chat(30, 400);
    let (out, report) = run(
        st,
        "openai-chat",
        "fresh",
        &["--window", "8000"],
        body.as_bytes(),
    );
    assert!(
        report["counters"]["fold.blocks_created"].as_u64().unwrap() > 0,
        "the request was over its budget: {report}"
    );
    // The head is 5% of the 6,000 available tokens (300): the opening messages (about
    // 115 tokens each) go out verbatim and first, and the fold starts after them.
    let head = report["counters"]["layout.head_tokens"].as_u64().unwrap();
    assert!((200..=300).contains(&head), "{head}");
    let messages = out["messages"].as_array().unwrap();
    for i in 0..2 {
        assert_eq!(messages[i], sent[i], "message {i} of the head");
    }
    assert!(out.to_string().contains("[foldwire b1"), "{out}");
    // An explicit head size still applies.
    let (out, report) = run(
        st,
        "openai-chat",
        "fresh-no-head",
        &["--window", "8000", "--head-tokens", "0"],
        body.as_bytes(),
    );
    assert_eq!(report["counters"]["layout.head_tokens"], 0, "{report}");
    assert_ne!(
        out["messages"][0], sent[0],
        "without a head the opening folds"
    );
}

/// The estimate the layout checks against the budget is what is forwarded: over a long
/// session at a small window (folds, rendered summaries, envelopes, cache markers), the
/// reported `request_tokens` of every turn is within 3% of the same estimator (bytes / 4)
/// over the body `run` wrote.
#[test]
fn the_estimate_of_a_long_folded_session_matches_the_forwarded_body() {
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().to_str().unwrap();
    for wire in ["openai-chat", "anthropic"] {
        let mut folded_turns = 0;
        for turns in (4..=48).step_by(4) {
            let (body, _) = plain_chat(turns, 300);
            let body = match wire {
                "anthropic" => {
                    let mut v: Value = serde_json::from_str(&body).unwrap();
                    v["max_tokens"] = json!(1024);
                    v["system"] = json!(SYSTEM);
                    v.to_string()
                }
                _ => body,
            };
            let report = tempfile::NamedTempFile::new().unwrap();
            let out = foldwire(
                &[
                    "run",
                    "--wire",
                    wire,
                    "--session",
                    &format!("long-{wire}"),
                    "--state",
                    st,
                    "--window",
                    "8000",
                    "--report",
                    report.path().to_str().unwrap(),
                ],
                body.as_bytes(),
            );
            let report: Value =
                serde_json::from_slice(&std::fs::read(report.path()).unwrap()).unwrap();
            assert_eq!(out.status.code(), Some(0), "{wire} turn {turns}: {report}");
            let estimated = report["counters"]["request_tokens"].as_u64().unwrap();
            let forwarded = (out.stdout.len() as u64).div_ceil(4);
            let gap = estimated.abs_diff(forwarded) as f64 / forwarded as f64;
            assert!(
                gap <= 0.03,
                "{wire} turn {turns}: estimated {estimated}, forwarded {forwarded}"
            );
            if text(&out.stdout).contains("[foldwire b") {
                folded_turns += 1;
            }
        }
        assert!(folded_turns >= 5, "{wire}: the session folded");
    }
}

#[test]
fn a_fold_across_a_mid_conversation_developer_message_leaves_it_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().to_str().unwrap();
    let mut body: Value = serde_json::from_str(&chat_body(SYSTEM, 30, 400)).unwrap();
    let note = json!({"role": "developer", "content": "The user switched to read-only mode."});
    body["messages"]
        .as_array_mut()
        .unwrap()
        .insert(3, note.clone());
    let body = body.to_string();
    let flags = ["--head-tokens", "0"];
    run(st, "openai-chat", "mid", &flags, body.as_bytes());
    // m00001..m00006 are the first three exchanges; the developer message sits among them
    // without a ref of its own.
    let folded: Value = serde_json::from_slice(&run_ok(
        &[
            "fold",
            "--session",
            "mid",
            "--state",
            st,
            "--from",
            "m00001",
            "--to",
            "m00006",
            "--summary",
            "Three questions answered.",
        ],
        b"",
    ))
    .unwrap();
    assert_eq!(folded["blocks_created"][0], "b1", "{folded}");
    let (out, _) = run(st, "openai-chat", "mid", &flags, body.as_bytes());
    let messages = out["messages"].as_array().unwrap();
    assert_eq!(messages[0], json!({"role": "system", "content": SYSTEM}));
    assert!(messages.contains(&note), "{out}");
    assert!(!out.to_string().contains("question 2:"));
}
