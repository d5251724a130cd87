#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Agent sessions written for every wire, and the engine the plugin tests run them through:
//! the proxy's default order with `tool.trim` and the tool loop's `tools.inject`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use bytes::Bytes;
use foldwire_archive::Backends;
use foldwire_core::{
    Budget, CharEstimator, Clock, Conversation, Engine, MediaArchive, MessageId, Params, Pipeline,
    Ref, Registry, SessionId, SessionState, StageCx, TurnOutcome, TurnRequest, Wire,
};
use foldwire_stages::kernel::restore_with_archive;
use foldwire_wire::request;
use serde_json::{Value, json};

/// One entry of a session's history, independent of the wire it is written for.
#[derive(Debug, Clone)]
pub enum Item {
    User(String),
    Assistant(String),
    /// An assistant message: an optional text, then tool calls `(id, command)`.
    Calls(Option<String>, Vec<(String, String)>),
    /// The results `(id, output)` of earlier calls.
    Results(Vec<(String, String)>),
    /// A user message with an inline PNG and a line of text.
    Image(Vec<u8>, String),
}

/// The tool every call in these sessions names.
pub const TOOL: &str = "bash";

/// A text of about `chars` characters; `seed` makes texts of equal length differ.
pub fn text(tag: &str, seed: usize, chars: usize) -> String {
    let words = [
        "the",
        "build",
        "failed",
        "in",
        "src/lib.rs",
        "line",
        "error:",
        "expected",
        "value",
        "found",
        "{",
        "}",
        "\"quoted\"",
        "ok",
        "café",
        "→",
        "\\path",
    ];
    let mut s = format!("{tag} {seed}:");
    let mut i = seed;
    while s.chars().count() < chars {
        s.push(' ');
        s.push_str(words[i % words.len()]);
        i = i.wrapping_mul(31).wrapping_add(7);
    }
    s
}

/// A small PNG-looking image; `seed` changes its bytes.
pub fn png(seed: u8) -> Vec<u8> {
    let mut v = b"\x89PNG\r\n\x1a\n".to_vec();
    v.extend((0..=255u8).map(|b| b.wrapping_mul(seed | 1).wrapping_add(seed)));
    v
}

fn data_url(bytes: &[u8]) -> String {
    format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    )
}

/// The request body for `history` on `wire`; on Gemini, calls and responses carry ids only
/// when `gemini_ids` (older clients leave them out, and they pair by name and order).
pub fn body(wire: Wire, history: &[Item], gemini_ids: bool) -> Bytes {
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    let v = match wire {
        Wire::Anthropic => {
            let messages: Vec<Value> = history
                .iter()
                .map(|item| match item {
                    Item::User(t) => json!({"role": "user", "content": t}),
                    Item::Assistant(t) => json!({"role": "assistant", "content": t}),
                    Item::Calls(said, calls) => {
                        let mut content: Vec<Value> = said
                            .iter()
                            .map(|t| json!({"type": "text", "text": t}))
                            .collect();
                        content.extend(calls.iter().map(|(id, cmd)| {
                            json!({"type": "tool_use", "id": id, "name": TOOL, "input": {"command": cmd}})
                        }));
                        json!({"role": "assistant", "content": content})
                    }
                    Item::Results(results) => json!({"role": "user", "content": results
                        .iter()
                        .map(|(id, out)| json!({"type": "tool_result", "tool_use_id": id, "content": out}))
                        .collect::<Vec<_>>()}),
                    Item::Image(png, t) => json!({"role": "user", "content": [
                        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(png)}},
                        {"type": "text", "text": t}]}),
                })
                .collect();
            json!({"model": "m", "max_tokens": 256, "system": "You are a coding agent.",
                   "tools": [{"name": TOOL, "description": "runs a command",
                              "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}}],
                   "messages": messages})
        }
        Wire::OpenAiChat => {
            let mut messages =
                vec![json!({"role": "system", "content": "You are a coding agent."})];
            for item in history {
                match item {
                    Item::User(t) => messages.push(json!({"role": "user", "content": t})),
                    Item::Assistant(t) => messages.push(json!({"role": "assistant", "content": t})),
                    Item::Calls(said, calls) => messages.push(json!({
                        "role": "assistant", "content": said,
                        "tool_calls": calls.iter().map(|(id, cmd)| json!({"id": id, "type": "function",
                            "function": {"name": TOOL, "arguments": json!({"command": cmd}).to_string()}}))
                            .collect::<Vec<_>>()})),
                    Item::Results(results) => messages.extend(results.iter().map(
                        |(id, out)| json!({"role": "tool", "tool_call_id": id, "content": out}),
                    )),
                    Item::Image(png, t) => messages.push(json!({"role": "user", "content": [
                        {"type": "image_url", "image_url": {"url": data_url(png)}},
                        {"type": "text", "text": t}]})),
                }
            }
            json!({"model": "m", "messages": messages,
                   "tools": [{"type": "function", "function": {"name": TOOL, "parameters": {"type": "object"}}}]})
        }
        Wire::OpenAiResponses => {
            let mut input = Vec::new();
            for item in history {
                match item {
                    Item::User(t) => {
                        input.push(json!({"type": "message", "role": "user", "content": t}));
                    }
                    Item::Assistant(t) => input.push(json!({"type": "message", "role": "assistant",
                        "content": [{"type": "output_text", "text": t}]})),
                    Item::Calls(said, calls) => {
                        if let Some(t) = said {
                            input.push(json!({"type": "message", "role": "assistant",
                                "content": [{"type": "output_text", "text": t}]}));
                        }
                        input.extend(calls.iter().map(|(id, cmd)| json!({"type": "function_call",
                            "call_id": id, "name": TOOL, "arguments": json!({"command": cmd}).to_string()})));
                    }
                    Item::Results(results) => input.extend(results.iter().map(
                        |(id, out)| json!({"type": "function_call_output", "call_id": id, "output": out}),
                    )),
                    Item::Image(png, t) => input.push(json!({"type": "message", "role": "user", "content": [
                        {"type": "input_image", "image_url": data_url(png)},
                        {"type": "input_text", "text": t}]})),
                }
            }
            json!({"model": "m", "instructions": "You are a coding agent.", "input": input,
                   "tools": [{"type": "function", "name": TOOL, "parameters": {"type": "object"}}]})
        }
        Wire::Gemini => {
            let contents: Vec<Value> = history
                .iter()
                .map(|item| match item {
                    Item::User(t) => json!({"role": "user", "parts": [{"text": t}]}),
                    Item::Assistant(t) => json!({"role": "model", "parts": [{"text": t}]}),
                    Item::Calls(said, calls) => {
                        let mut parts: Vec<Value> =
                            said.iter().map(|t| json!({"text": t})).collect();
                        parts.extend(calls.iter().map(|(id, cmd)| {
                            let mut call = json!({"name": TOOL, "args": {"command": cmd}});
                            if gemini_ids {
                                call["id"] = json!(id);
                            }
                            json!({"functionCall": call})
                        }));
                        json!({"role": "model", "parts": parts})
                    }
                    Item::Results(results) => json!({"role": "user", "parts": results
                        .iter()
                        .map(|(id, out)| {
                            let mut response = json!({"name": TOOL, "response": {"output": out}});
                            if gemini_ids {
                                response["id"] = json!(id);
                            }
                            json!({"functionResponse": response})
                        })
                        .collect::<Vec<_>>()}),
                    Item::Image(png, t) => json!({"role": "user", "parts": [
                        {"inlineData": {"mimeType": "image/png", "data": b64(png)}},
                        {"text": t}]}),
                })
                .collect();
            json!({"systemInstruction": {"parts": [{"text": "You are a coding agent."}]},
                   "contents": contents,
                   "tools": [{"functionDeclarations": [{"name": TOOL, "parameters": {"type": "object"}}]}]})
        }
    };
    Bytes::from(serde_json::to_vec(&v).unwrap())
}

/// A clock that never moves, so the two engines cannot differ by when they ran.
#[derive(Debug)]
pub struct Stopped;

impl Clock for Stopped {
    fn now(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
    }
}

/// The proxy's default order with `tool.trim` after `fold` (trimming at small sizes, so
/// these sessions reach it) and the tool loop's `tools.inject` before `wire.encode`.
pub fn pipeline(registry: &Registry) -> Pipeline {
    let mut b = Pipeline::builder(registry);
    for name in foldwire_core::pipeline::DEFAULT_ORDER {
        if name == "wire.encode" {
            b = b.stage_named("tools.inject", Params::Null).unwrap();
        }
        b = b.stage_named(name, Params::Null).unwrap();
        if name == "fold" {
            b = b
                .stage_named(
                    "tool.trim",
                    json!({"min_chars": 900, "head_chars": 200, "tail_chars": 100}),
                )
                .unwrap();
        }
    }
    b.build().unwrap()
}

/// An engine over `backends` whose sessions keep their carry while it runs.
pub fn engine(registry: &Arc<Registry>, backends: &Backends) -> Engine {
    let mut cx = StageCx::new(registry.clone())
        .with_archive(backends.media.clone())
        .with_estimator(Arc::new(CharEstimator));
    cx.clock = Arc::new(Stopped);
    Engine::builder(pipeline(registry), backends.state.clone(), registry.clone())
        .context(cx)
        .workers(1)
        .forget_carry_after(None)
        .start()
        .unwrap()
}

/// Runs `body` as the session's next turn; the outcome and the state after it.
pub async fn turn(
    engine: &Engine,
    session: &SessionId,
    wire: Wire,
    body: &Bytes,
    window: u64,
) -> (TurnOutcome, SessionState) {
    let mut request = TurnRequest::new(wire, body.clone());
    request.budget = Budget {
        window,
        reserve: 0,
        calibration: 1.0,
    };
    let outcome = engine.run_turn(session, request).await.unwrap();
    assert_eq!(
        outcome.report.fail_open, None,
        "{wire}: {:?}",
        outcome.report
    );
    let state = engine.snapshot(session).await.unwrap();
    (outcome, state)
}

/// The ranges the turn's note offers the model (`start`, `end`), in its order.
pub fn offered(wire: Wire, output: &Bytes) -> Vec<(String, String)> {
    let Ok(sent) = request::decode(wire, output.clone()) else {
        return Vec::new();
    };
    let mut ranges = Vec::new();
    for unit in &sent.messages {
        let Some((_, listed)) = unit.text.split_once("Compressible ranges now:") else {
            continue;
        };
        for line in listed.lines() {
            let span = line.strip_prefix("- ").and_then(|l| l.split_once(':'));
            if let Some((start, end)) = span.and_then(|(span, _)| span.split_once("..")) {
                ranges.push((start.to_owned(), end.to_owned()));
            }
        }
    }
    ranges
}

/// Each unit of `conversation` (as decoded from what the client sent) by its fingerprint.
pub fn sent_units(conversation: &Conversation) -> HashMap<MessageId, Bytes> {
    conversation
        .messages
        .iter()
        .map(|u| (u.id.clone(), u.raw.clone()))
        .collect()
}

/// Every active block of `state` restores, from `archive`, each of its units byte-identical
/// to what the client sent for the fingerprint its ref was minted for (`sent`); the refs
/// restored.
pub async fn assert_blocks_restore_exactly(
    state: &SessionState,
    archive: &dyn MediaArchive,
    session: &SessionId,
    sent: &HashMap<MessageId, Bytes>,
) -> Vec<Ref> {
    let fingerprints: HashMap<_, _> = state.refs.iter().map(|e| (e.r#ref, &e.message)).collect();
    let mut restored = Vec::new();
    for block in state.active_blocks() {
        let back = restore_with_archive(state, archive, session, block.id, true)
            .await
            .unwrap_or_else(|e| panic!("block {} does not restore: {e}", block.id));
        for unit in back.units {
            let original = fingerprints.get(&unit.r#ref).and_then(|id| sent.get(*id));
            let original = original.unwrap_or_else(|| panic!("{} was never sent", unit.r#ref));
            assert_eq!(
                unit.raw,
                String::from_utf8_lossy(original),
                "{} of block {} does not restore as the client sent it",
                unit.r#ref,
                block.id
            );
            restored.push(unit.r#ref);
        }
    }
    restored
}

/// Every tool output `tool.trim` shortened in this session restores, from `archive`, whole
/// and byte-identical to what the client sent (`sent`, by fingerprint); how many did.
pub async fn assert_trims_restore_exactly(
    state: &SessionState,
    archive: &dyn MediaArchive,
    session: &SessionId,
    sent: &HashMap<MessageId, Bytes>,
) -> usize {
    let trims = foldwire_stages::tool_trim::TrimState::load(state).trims;
    for (id, record) in &trims {
        let whole =
            foldwire_stages::tool_trim::restore_trimmed(state, archive, session, record.r#ref)
                .await
                .unwrap_or_else(|e| panic!("trimmed {} does not restore: {e}", record.r#ref));
        let original = sent
            .get(&MessageId(id.clone()))
            .unwrap_or_else(|| panic!("trimmed {} was never sent", record.r#ref));
        assert_eq!(
            whole,
            String::from_utf8_lossy(original),
            "trimmed {} does not restore as the client sent it",
            record.r#ref
        );
    }
    trims.len()
}
