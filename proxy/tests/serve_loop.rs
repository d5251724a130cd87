#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The model-written compress loop through a real proxy: the model's `compress` call is
//! applied and hidden, the client sees one well-formed answer; client tool calls end the
//! loop; the round cap finishes gracefully; usage and overflow windows are learned.

mod support;

use foldwire_core::Wire;
use foldwire_stages::kernel::pairing_rules;
use foldwire_wire::stream::{StreamEvent, parse_response, parse_stream};
use serde_json::Value;
use support::*;

const WIRES: [Wire; 4] = [
    Wire::Anthropic,
    Wire::OpenAiChat,
    Wire::OpenAiResponses,
    Wire::Gemini,
];

/// The client-visible events of an answer.
fn events(wire: Wire, stream: bool, bytes: &[u8]) -> Vec<StreamEvent> {
    if stream {
        parse_stream(wire, bytes)
            .unwrap_or_else(|e| panic!("{wire}: the client stream does not parse: {e}"))
            .into_iter()
            .flat_map(|e| e.events)
            .collect()
    } else {
        parse_response(wire, bytes).unwrap()
    }
}

fn text_of(events: &[StreamEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::TextDelta { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

fn tool_names(events: &[StreamEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolCallStart { name, .. } => Some(name.clone()),
            _ => None,
        })
        .collect()
}

/// Checks the stitched stream's framing is one answer.
fn assert_one_answer(wire: Wire, bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    match wire {
        Wire::Anthropic => {
            assert_eq!(text.matches("event: message_start").count(), 1, "{text}");
            assert_eq!(text.matches("event: message_stop").count(), 1, "{text}");
            assert_eq!(text.matches("event: message_delta").count(), 1, "{text}");
            let starts: Vec<u64> = parse_stream(wire, bytes)
                .unwrap()
                .iter()
                .filter_map(|e| e.data.as_deref())
                .filter_map(|d| serde_json::from_str::<Value>(d).ok())
                .filter(|v| v["type"] == "content_block_start")
                .map(|v| v["index"].as_u64().unwrap())
                .collect();
            let expected: Vec<u64> = (0..starts.len() as u64).collect();
            assert_eq!(starts, expected, "block indices continue across rounds");
        }
        Wire::OpenAiChat => {
            assert_eq!(text.matches("data: [DONE]").count(), 1, "{text}");
            assert_eq!(text.matches("\"finish_reason\":\"").count(), 1, "{text}");
        }
        Wire::OpenAiResponses => {
            assert_eq!(text.matches("event: response.created").count(), 1, "{text}");
            assert_eq!(
                text.matches("event: response.completed").count(),
                1,
                "{text}"
            );
            let seqs: Vec<u64> = parse_stream(wire, bytes)
                .unwrap()
                .iter()
                .filter_map(|e| e.data.as_deref())
                .filter_map(|d| serde_json::from_str::<Value>(d).ok())
                .filter_map(|v| v["sequence_number"].as_u64())
                .collect();
            let expected: Vec<u64> = (0..seqs.len() as u64).collect();
            assert_eq!(seqs, expected, "sequence numbers continue across rounds");
        }
        Wire::Gemini => {
            assert_eq!(text.matches("\"finishReason\"").count(), 1, "{text}");
        }
    }
}

fn assert_forwarded_valid(wire: Wire, bodies: &[bytes::Bytes]) {
    for body in bodies {
        let conv = foldwire_wire::request::decode(wire, body.clone())
            .unwrap_or_else(|e| panic!("{wire}: a forwarded body does not decode: {e}"));
        let v = pairing_rules::violations(wire, &conv.messages);
        assert!(v.is_empty(), "{wire}: pairing violations {v:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_models_compress_call_is_applied_hidden_and_stitched_on_every_wire() {
    let (upstream, mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(upstream, dir.path(), |_| {}).await;
    for wire in WIRES {
        for stream in [true, false] {
            mock.received.lock().unwrap().clear();
            let session = format!("loop-{}-{stream}", wire.as_str());
            let body = history_body(wire, 16, 2400, stream);
            let (status, got) = post(proxy, wire, stream, &session, "compress", &body).await;
            assert_eq!(status, 200, "{wire} {}", String::from_utf8_lossy(&got));
            let shown = String::from_utf8_lossy(&got).to_string();
            assert!(
                !shown.contains("\"compress\""),
                "{wire} stream={stream}: {shown}"
            );
            assert!(
                !shown.contains("fwcall_"),
                "{wire} stream={stream}: {shown}"
            );
            let evs = events(wire, stream, &got);
            let text = text_of(&evs);
            assert!(
                text.contains("All done."),
                "{wire} stream={stream}: {text:?}"
            );
            if stream {
                assert!(text.contains("Let me tidy up."), "{wire}: {text:?}");
                assert_one_answer(wire, &got);
                // Gemini clients parse every SSE line as JSON: no comments on that wire.
                assert_eq!(
                    shown.contains(": keep-alive"),
                    wire != Wire::Gemini,
                    "{wire}: keep-alive during the loop where the wire takes comments"
                );
            }
            assert!(
                tool_names(&evs).is_empty(),
                "{wire}: {:?}",
                tool_names(&evs)
            );

            let bodies = mock.bodies();
            assert_eq!(
                bodies.len(),
                2,
                "{wire} stream={stream}: two rounds upstream"
            );
            let first = String::from_utf8_lossy(&bodies[0]).to_string();
            assert!(first.contains("search_context"), "{wire}: tools injected");
            assert!(
                first.contains("Compressible ranges now"),
                "{wire}: ranges listed"
            );
            assert!(
                first.contains("starts: \\\""),
                "{wire}: ranges come with previews"
            );
            assert_forwarded_valid(wire, &bodies);
            // The follow-up is the first request with the round spliced into its list: every
            // byte before the list's closing bracket, and after it, goes out as it did.
            let list = foldwire_wire::request::decode(wire, bodies[0].clone())
                .unwrap()
                .messages_span;
            let close = list.end - 1;
            assert_eq!(
                bodies[1][..close],
                bodies[0][..close],
                "{wire} stream={stream}: the prefix changed"
            );
            assert!(
                bodies[1].ends_with(&bodies[0][close..]),
                "{wire} stream={stream}: the bytes after the list changed"
            );
            assert!(
                bodies[1].len() > bodies[0].len(),
                "{wire}: a round was added"
            );

            let state = admin(proxy, &session).await;
            let blocks = state["state"]["blocks"].as_array().unwrap();
            assert_eq!(blocks.len(), 1, "{wire} stream={stream}: {state}");
            assert_eq!(blocks[0]["author"], "model", "{}", blocks[0]);
            // The admin API shows the state whole, not packed as it is stored.
            let ids = blocks[0]["message_ids"].as_array().unwrap();
            assert!(!ids.is_empty(), "{}", blocks[0]);
            assert!(blocks[0].get("derived").is_none(), "{}", blocks[0]);
            assert!(state["state"]["refs"][0]["ref"].is_string(), "{state}");
        }
    }
}

/// A model that reasons signs its reasoning, and its provider wants it back with the calls
/// it led to: Anthropic with thinking on refuses tool results after an assistant message
/// that does not start with its signed thinking, Gemini 3 a function call without its thought
/// signature (the mock refuses both as they do). The loop's next round sends the model's
/// reasoning back as it came, so the model's turn goes on to its answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_models_signed_reasoning_goes_back_with_its_compress_call() {
    let (upstream, mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(upstream, dir.path(), |_| {}).await;
    let client = reqwest::Client::new();
    for wire in WIRES {
        for stream in [true, false] {
            mock.received.lock().unwrap().clear();
            let mut body = history_body(wire, 16, 2400, stream);
            let path = match wire {
                Wire::Anthropic => {
                    body["thinking"] =
                        serde_json::json!({"type": "enabled", "budget_tokens": 1024});
                    path_of(wire, stream).to_owned()
                }
                Wire::OpenAiResponses => {
                    body["include"] = serde_json::json!(["reasoning.encrypted_content"]);
                    body["store"] = Value::Bool(false);
                    path_of(wire, stream).to_owned()
                }
                // OpenRouter's reasoning switch.
                Wire::OpenAiChat => {
                    body["reasoning"] = serde_json::json!({"enabled": true});
                    path_of(wire, stream).to_owned()
                }
                _ => path_of(wire, stream).replace("models/g:", "models/gemini-3-pro-preview:"),
            };
            let resp = client
                .post(format!("http://{proxy}{path}"))
                .header(
                    "x-foldwire-session",
                    format!("signed-{}-{stream}", wire.as_str()),
                )
                .header("x-mock-script", "compress")
                .header("content-type", "application/json")
                .body(body.to_string())
                .send()
                .await
                .unwrap();
            let status = resp.status();
            let got = resp.bytes().await.unwrap();
            assert_eq!(
                status,
                200,
                "{wire} stream={stream}: {}",
                String::from_utf8_lossy(&got)
            );
            let refused = mock.refused.lock().unwrap().clone();
            assert!(refused.is_empty(), "{wire} stream={stream}: {refused:?}");
            let text = text_of(&events(wire, stream, &got));
            assert!(
                text.contains("All done."),
                "{wire} stream={stream}: {text:?}"
            );
            if wire == Wire::OpenAiChat && stream {
                // The client puts OpenRouter's reasoning pieces together by index: every
                // round's thoughts stay apart, each whole with its own signature.
                let thoughts = client_reasoning_details(&got);
                assert_eq!(thoughts.len(), 3, "{thoughts:?}");
                for t in &thoughts {
                    let text = t["text"].as_str().unwrap();
                    assert_eq!(t["signature"], provider_rules::sign(text).as_str(), "{t}");
                }
            }

            let bodies = mock.bodies();
            assert_eq!(
                bodies.len(),
                2,
                "{wire} stream={stream}: two rounds upstream"
            );
            let follow_up: Value = serde_json::from_slice(&bodies[1]).unwrap();
            // The first round's answer (request n of this session's mock log): a thought,
            // text, a second thought, the compress call. It comes back in that order, each
            // thought with the signature the mock gave it, where the wire keeps it.
            let n = mock.received.lock().unwrap().len() - 1;
            let first = provider_rules::sign(&format!("Thinking about request {n}."));
            let second = provider_rules::sign(&format!("Choosing a call for request {n}."));
            let kind = |v: &Value| -> String {
                match wire {
                    Wire::Gemini if v["thought"] == true => "thought".into(),
                    Wire::Gemini if v.get("functionCall").is_some() => "call".into(),
                    Wire::Gemini => "text".into(),
                    _ => v["type"].as_str().unwrap_or_default().to_owned(),
                }
            };
            let turn: Vec<Value> = match wire {
                Wire::Anthropic => {
                    let list = follow_up["messages"].as_array().unwrap();
                    list[list.len() - 2]["content"].as_array().unwrap().clone()
                }
                Wire::OpenAiResponses => {
                    let list = follow_up["input"].as_array().unwrap();
                    list[list.len() - 5..list.len() - 1].to_vec()
                }
                Wire::OpenAiChat => {
                    let list = follow_up["messages"].as_array().unwrap();
                    let details = &list[list.len() - 2]["reasoning_details"];
                    details.as_array().unwrap().clone()
                }
                _ => {
                    let list = follow_up["contents"].as_array().unwrap();
                    list[list.len() - 2]["parts"].as_array().unwrap().clone()
                }
            };
            let (expected, signed): (&[&str], _) = match wire {
                Wire::Anthropic => (
                    &["thinking", "text", "thinking", "tool_use"],
                    vec![(0, "signature", &first), (2, "signature", &second)],
                ),
                Wire::OpenAiResponses => (
                    &["reasoning", "message", "reasoning", "function_call"],
                    vec![
                        (0, "encrypted_content", &first),
                        (2, "encrypted_content", &second),
                    ],
                ),
                // Each thought, its streamed pieces put together, with its signature.
                Wire::OpenAiChat => (
                    &["reasoning.text", "reasoning.text"],
                    vec![(0, "signature", &first), (1, "signature", &second)],
                ),
                // Gemini signs the call that follows the thought.
                _ => (
                    &["thought", "text", "thought", "call"],
                    vec![(3, "thoughtSignature", &second)],
                ),
            };
            let kinds: Vec<String> = turn.iter().map(kind).collect();
            assert_eq!(kinds, expected, "{wire} stream={stream}: {turn:?}");
            for (at, field, signature) in signed {
                assert_eq!(
                    turn[at][field],
                    Value::from(signature.as_str()),
                    "{wire} stream={stream}: {turn:?}"
                );
            }
        }
    }
}

/// OpenRouter `reasoning_details` of a Chat stream put together by index, as a client does.
fn client_reasoning_details(stream: &[u8]) -> Vec<Value> {
    let mut merged: Vec<Value> = Vec::new();
    let text = String::from_utf8_lossy(stream);
    let chunks = text
        .split("\n\n")
        .filter_map(|e| e.trim().strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok());
    for chunk in chunks {
        for piece in chunk["choices"][0]["delta"]["reasoning_details"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let at = piece["index"].as_u64().unwrap() as usize;
            if merged.len() <= at {
                merged.resize(at + 1, serde_json::json!({"text": ""}));
            }
            let entry = &mut merged[at];
            if let Some(more) = piece["text"].as_str() {
                let whole = format!("{}{more}", entry["text"].as_str().unwrap_or_default());
                entry["text"] = Value::from(whole);
            }
            if !piece["signature"].is_null() {
                entry["signature"] = piece["signature"].clone();
            }
        }
    }
    merged
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_refused_as_it_came_is_sent_again_in_its_minimal_form() {
    // A provider that does not take back the `caller` its own tool_use blocks carry.
    let (upstream, mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(upstream, dir.path(), |_| {}).await;
    let client = reqwest::Client::new();
    for stream in [true, false] {
        mock.received.lock().unwrap().clear();
        mock.refused.lock().unwrap().clear();
        let mut body = history_body(Wire::Anthropic, 16, 2400, stream);
        body["thinking"] = serde_json::json!({"type": "enabled", "budget_tokens": 1024});
        let resp = client
            .post(format!(
                "http://{proxy}{}",
                path_of(Wire::Anthropic, stream)
            ))
            .header("x-foldwire-session", format!("minimal-{stream}"))
            .header("x-mock-script", "compress")
            .header("x-mock-refuse", "caller")
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "stream={stream}");
        let got = resp.bytes().await.unwrap();
        let text = text_of(&events(Wire::Anthropic, stream, &got));
        assert!(text.contains("All done."), "stream={stream}: {text:?}");
        // The round as it came was refused once; the minimal one went through.
        let refused = mock.refused.lock().unwrap().clone();
        assert_eq!(refused.len(), 1, "stream={stream}: {refused:?}");
        let bodies = mock.bodies();
        assert_eq!(bodies.len(), 3, "stream={stream}");
        let minimal: Value = serde_json::from_slice(&bodies[2]).unwrap();
        let list = minimal["messages"].as_array().unwrap();
        let turn = list[list.len() - 2]["content"].as_array().unwrap();
        let kinds: Vec<&str> = turn.iter().map(|b| b["type"].as_str().unwrap()).collect();
        // The thinking still leads, signed, as the API requires with thinking on.
        assert_eq!(
            kinds,
            ["thinking", "thinking", "text", "tool_use"],
            "stream={stream}"
        );
        assert_eq!(turn[3].get("caller"), None);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_tool_call_ends_the_loop_and_reaches_the_client() {
    let (upstream, mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(upstream, dir.path(), |_| {}).await;
    for wire in WIRES {
        for stream in [true, false] {
            mock.received.lock().unwrap().clear();
            let session = format!("client-{}-{stream}", wire.as_str());
            let body = history_body(wire, 16, 2400, stream);
            let (status, got) = post(proxy, wire, stream, &session, "client-tool", &body).await;
            assert_eq!(status, 200);
            let evs = events(wire, stream, &got);
            assert_eq!(
                tool_names(&evs),
                vec!["bash".to_owned()],
                "{wire} stream={stream}"
            );
            assert!(!String::from_utf8_lossy(&got).contains("\"compress\""));
            assert_eq!(mock.bodies().len(), 1, "{wire}: no second round");
            // The compress call beside the client's still took effect.
            let state = admin(proxy, &session).await;
            assert_eq!(
                state["state"]["blocks"].as_array().unwrap().len(),
                1,
                "{wire}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_round_cap_finishes_gracefully() {
    let (upstream, mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(upstream, dir.path(), |c| c.max_rounds = 3).await;
    for wire in WIRES {
        for stream in [true, false] {
            mock.received.lock().unwrap().clear();
            let session = format!("cap-{}-{stream}", wire.as_str());
            let body = history_body(wire, 16, 2400, stream);
            let (status, got) = post(proxy, wire, stream, &session, "always", &body).await;
            assert_eq!(status, 200);
            let bodies = mock.bodies();
            assert_eq!(
                bodies.len(),
                3,
                "{wire}: exactly max_rounds upstream requests"
            );
            assert!(
                String::from_utf8_lossy(&bodies[2]).contains("Context tools are done"),
                "{wire}: the model is told before the last round"
            );
            let shown = String::from_utf8_lossy(&got);
            assert!(!shown.contains("\"compress\""), "{wire}: {shown}");
            assert!(
                !shown.contains("\"tool_use\""),
                "{wire}: stop reason fixed: {shown}"
            );
            assert!(!shown.contains("\"tool_calls\""), "{wire}: {shown}");
            let text = text_of(&events(wire, stream, &got));
            if stream {
                assert_one_answer(wire, &got);
                assert!(
                    text.contains("Round 1.") && text.contains("Round 3."),
                    "{wire}: {text}"
                );
            } else {
                // A JSON answer is the last round's body, its proxy call removed.
                assert!(text.contains("Round 3."), "{wire}: {text}");
            }
            assert_forwarded_valid(wire, &bodies);
        }
    }
    let metrics = metrics(proxy).await;
    // Two rounds of calls run per request (the third round's call is only hidden).
    assert!(
        metrics.contains("foldwire_proxy_tool_calls_total 16"),
        "{metrics}"
    );
    assert!(
        metrics.contains("foldwire_loop_rounds_total 24"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_is_recorded_and_overflow_teaches_the_window() {
    let (upstream, mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(upstream, dir.path(), |_| {}).await;
    let dir2 = tempfile::tempdir().unwrap();
    let plain = start_proxy_with(upstream, dir2.path(), |c| c.compress_tools = false).await;
    for wire in WIRES {
        for stream in [true, false] {
            let session = format!("usage-{}-{stream}", wire.as_str());
            let body = history_body(wire, 2, 200, stream);
            let (status, _) = post(proxy, wire, stream, &session, "plain", &body).await;
            assert_eq!(status, 200);
            let has_usage = |v: &Value| {
                v["state"]["usage"]
                    .as_array()
                    .is_some_and(|u| !u.is_empty())
            };
            let state = admin_when(proxy, &session, has_usage).await;
            let usage = state["state"]["usage"].as_array().unwrap();
            assert_eq!(usage.len(), 1, "{wire} stream={stream}: {state}");
            let forwarded = mock.bodies().last().unwrap().clone();
            assert_eq!(usage[0]["reported"], prompt_tokens(&forwarded));
            assert!(usage[0]["estimated"].as_u64().unwrap() > 0);
        }

        // Without the proxy tools the bytes are relayed untouched and usage is still read.
        for stream in [true, false] {
            let session = format!("tap-{}-{stream}", wire.as_str());
            let body = history_body(wire, 2, 200, stream);
            let (status, got) = post(plain, wire, stream, &session, "plain", &body).await;
            assert_eq!(status, 200);
            assert!(!String::from_utf8_lossy(&got).contains("keep-alive"));
            let has_usage = |v: &Value| {
                v["state"]["usage"]
                    .as_array()
                    .is_some_and(|u| !u.is_empty())
            };
            let state = admin_when(plain, &session, has_usage).await;
            let forwarded = mock.bodies().last().unwrap().clone();
            assert_eq!(
                state["state"]["usage"][0]["reported"],
                prompt_tokens(&forwarded),
                "{wire} {stream}"
            );
        }

        // Overflow: relayed verbatim, and the session learns its window.
        let session = format!("overflow-{}", wire.as_str());
        let body = history_body(wire, 16, 2400, false);
        let (status, got) = post(proxy, wire, false, &session, "overflow", &body).await;
        assert_eq!(status, 400);
        let text = String::from_utf8_lossy(&got);
        assert!(text.contains("12000"), "{text}");
        let before = admin(proxy, &session).await;
        assert_eq!(before["state"]["learned_window"], 12000, "{wire}: {before}");
        let first_tokens = before["reports"][0]["counters"]["request_tokens"]
            .as_u64()
            .unwrap();
        // The next request is laid out for the learned window: much smaller.
        let (status, _) = post(proxy, wire, false, &session, "plain", &body).await;
        assert_eq!(status, 200);
        let after = admin(proxy, &session).await;
        let second_tokens = after["reports"][1]["counters"]["request_tokens"]
            .as_u64()
            .unwrap();
        assert!(
            second_tokens < first_tokens / 2,
            "{wire}: {first_tokens} -> {second_tokens}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_and_search_calls_return_exact_originals_and_hits_to_the_model() {
    let (upstream, mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(upstream, dir.path(), |_| {}).await;
    let wire = Wire::Anthropic;
    let body = history_body(wire, 16, 2400, true);
    let client_text = body.to_string();
    let (status, _) = post(proxy, wire, true, "tools", "compress", &body).await;
    assert_eq!(status, 200);

    mock.received.lock().unwrap().clear();
    let (status, got) = post(proxy, wire, true, "tools", "restore", &body).await;
    assert_eq!(status, 200);
    assert!(!String::from_utf8_lossy(&got).contains("\"restore\""));
    assert!(text_of(&events(wire, true, &got)).contains("Looked it up."));
    let bodies = mock.bodies();
    assert_eq!(bodies.len(), 2);
    let second: Value = serde_json::from_slice(&bodies[1]).unwrap();
    let result = second["messages"].as_array().unwrap().last().unwrap()["content"][0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    let admin = admin(proxy, "tools").await;
    let state: foldwire_core::SessionState =
        serde_json::from_value(admin["state"].clone()).unwrap();
    let block = state.blocks.first().unwrap().id;
    let archive = foldwire_archive::open(dir.path().to_str().unwrap())
        .unwrap()
        .media;
    let restored = foldwire_stages::kernel::restore_with_archive(
        &state,
        archive.as_ref(),
        &foldwire_core::SessionId::new("tools").unwrap(),
        block,
        true,
    )
    .await
    .unwrap();
    assert!(!restored.units.is_empty());
    for unit in &restored.units {
        assert!(
            result.contains(&unit.raw),
            "restore result misses {}",
            unit.r#ref
        );
        assert!(
            client_text.contains(&unit.raw),
            "{} is not what the client sent",
            unit.r#ref
        );
    }

    mock.received.lock().unwrap().clear();
    let (status, _) = post(proxy, wire, true, "tools", "search", &body).await;
    assert_eq!(status, 200);
    let second: Value = serde_json::from_slice(&mock.bodies()[1]).unwrap();
    let hits = second["messages"].as_array().unwrap().last().unwrap()["content"][0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(hits.starts_with(&block.to_string()), "{hits}");
}

// acp §26 #61: the model's summary is far shorter than what its range replaces; the range
// is refused, the tool result tells the model the summary's length and the minimum so it can
// write a longer one, and nothing folds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_models_summary_below_the_minimum_is_refused_with_its_length_and_the_minimum() {
    let (upstream, mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(upstream, dir.path(), |_| {}).await;
    let wire = Wire::Anthropic;
    let body = history_body(wire, 16, 2400, true);
    let (status, got) = post(proxy, wire, true, "short", "compress-short", &body).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&got));
    assert!(text_of(&events(wire, true, &got)).contains("Understood."));
    let bodies = mock.bodies();
    assert_eq!(bodies.len(), 2, "the compress round and the answer");
    let second: Value = serde_json::from_slice(&bodies[1]).unwrap();
    let result = second["messages"].as_array().unwrap().last().unwrap()["content"][0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(result.contains("not folded"), "{result}");
    assert!(
        result.contains("summary too short (10 chars, min "),
        "the model reads its summary's length and the minimum: {result}"
    );
    let state = admin(proxy, "short").await;
    let blocks = state["state"]["blocks"].as_array().unwrap();
    assert!(blocks.is_empty(), "nothing folds: {state}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_due_for_a_fold_gets_a_trailing_nudge() {
    let (upstream, mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    // The request (~30,000 tokens) is past 0.8 of the growth the schedule waits for at this
    // window (0.8 × 34,000 from an empty start) but under that growth itself, so nothing
    // folds by itself and the model is asked.
    let proxy = start_proxy_with(upstream, dir.path(), |c| c.window = 60_000).await;
    for wire in WIRES {
        mock.received.lock().unwrap().clear();
        let session = format!("nudge-{}", wire.as_str());
        let body = history_body(wire, 27, 2400, false);
        let (status, _) = post(proxy, wire, false, &session, "plain", &body).await;
        assert_eq!(status, 200);
        let forwarded = String::from_utf8_lossy(&mock.bodies()[0]).to_string();
        let counters = admin(proxy, &session).await["reports"][0]["counters"].clone();
        let at = forwarded
            .find("[foldwire] Fold due")
            .unwrap_or_else(|| panic!("{wire}: no nudge: {counters}"));
        // Trailing: after the client's last user text, so the cached prefix is untouched.
        let last_user = forwarded.rfind("Now please finish the task.").unwrap();
        assert!(at > last_user, "{wire}: the nudge trails the conversation");
        // A small request gets none.
        mock.received.lock().unwrap().clear();
        let small = history_body(wire, 1, 100, false);
        let (status, _) = post(proxy, wire, false, &format!("{session}-s"), "plain", &small).await;
        assert_eq!(status, 200);
        assert!(!String::from_utf8_lossy(&mock.bodies()[0]).contains("[foldwire] Fold "));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_tools_injected_streams_without_proxy_calls_stay_byte_identical() {
    let (upstream, _mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(upstream, dir.path(), |_| {}).await;
    let client = reqwest::Client::new();
    let mut relayed = 0;
    for (wire, dir_name) in [
        (Wire::Anthropic, "anthropic"),
        (Wire::OpenAiChat, "openai-chat"),
        (Wire::OpenAiResponses, "openai-responses"),
        (Wire::Gemini, "gemini"),
    ] {
        for fixture in foldwire_core::fixtures::files(dir_name, "stream-") {
            let body = history_body(wire, 1, 50, true);
            let resp = client
                .post(format!("http://{proxy}{}", path_of(wire, true)))
                .header("x-foldwire-session", format!("fx-{relayed}"))
                .header("x-mock-fixture", fixture.display().to_string())
                .body(body.to_string())
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 200);
            let got = resp.bytes().await.unwrap();
            let want = std::fs::read(&fixture).unwrap();
            let calls_proxy_tool = String::from_utf8_lossy(&want).contains("\"compress\"");
            if !calls_proxy_tool {
                assert_eq!(got.as_ref(), want.as_slice(), "{}", fixture.display());
                relayed += 1;
            }
        }
    }
    if foldwire_core::fixtures::dir().is_some() {
        assert!(relayed >= 20, "only {relayed} stream fixtures relayed");
    }
}

/// A 1×1 PNG.
const PNG_B64: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

/// Puts an inline PNG into the user message of history turn `turn`.
fn with_image(wire: Wire, body: &mut Value, turn: usize) {
    let data_url = format!("data:image/png;base64,{PNG_B64}");
    let (list, at) = match wire {
        Wire::Anthropic => ("messages", 2 * turn),
        Wire::OpenAiChat => ("messages", 2 * turn + 1),
        Wire::OpenAiResponses => ("input", 2 * turn),
        Wire::Gemini => ("contents", 2 * turn),
    };
    let message = &mut body[list][at];
    match wire {
        Wire::Gemini => message["parts"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!({"inlineData": {"mimeType": "image/png", "data": PNG_B64}})),
        _ => {
            let text = message["content"].as_str().unwrap().to_owned();
            message["content"] = match wire {
                Wire::Anthropic => {
                    serde_json::json!([{"type": "text", "text": text}, {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}}])
                }
                Wire::OpenAiChat => {
                    serde_json::json!([{"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": data_url}}])
                }
                _ => {
                    serde_json::json!([{"type": "input_text", "text": text}, {"type": "input_image", "image_url": data_url}])
                }
            };
        }
    }
}

/// Where each wire carries a restored image back to the model, in the last item of the
/// follow-up request.
fn restored_image(wire: Wire, body: &Value) -> Option<String> {
    let data_url = |v: &Value| {
        v.as_str()
            .and_then(|u| u.strip_prefix("data:image/png;base64,"))
            .map(str::to_owned)
    };
    match wire {
        Wire::Anthropic => {
            let result = &body["messages"].as_array()?.last()?["content"][0];
            assert_eq!(result["type"], "tool_result");
            result["content"][1]["source"]["data"]
                .as_str()
                .map(str::to_owned)
        }
        Wire::OpenAiChat => {
            let last = body["messages"].as_array()?.last()?;
            assert_eq!(last["role"], "user");
            data_url(&last["content"][1]["image_url"]["url"])
        }
        Wire::OpenAiResponses => {
            let last = body["input"].as_array()?.last()?;
            assert_eq!(last["type"], "function_call_output");
            data_url(&last["output"][1]["image_url"])
        }
        Wire::Gemini => {
            let parts = &body["contents"].as_array()?.last()?["parts"];
            assert_eq!(parts[0]["functionResponse"]["name"], "restore");
            parts[1]["inlineData"]["data"].as_str().map(str::to_owned)
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_restores_a_folded_image_by_its_ref_on_every_wire() {
    let (upstream, mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(upstream, dir.path(), |_| {}).await;
    for wire in WIRES {
        let session = format!("image-{}", wire.as_str());
        let mut body = history_body(wire, 16, 2400, true);
        with_image(wire, &mut body, 8);
        // Round one: the model folds every listed range, the image's included.
        let (status, _) = post(proxy, wire, true, &session, "compress-all", &body).await;
        assert_eq!(status, 200, "{wire}");
        // Round two: the image is off the wire, a placeholder names its ref; the model asks
        // for it and gets the exact bytes back in the wire's own shape.
        mock.received.lock().unwrap().clear();
        let (status, got) = post(proxy, wire, true, &session, "restore-image", &body).await;
        assert_eq!(status, 200, "{wire}");
        assert!(
            text_of(&events(wire, true, &got)).contains("Looked it up."),
            "{wire}"
        );
        let bodies = mock.bodies();
        assert_eq!(bodies.len(), 2, "{wire}: restore call, then the answer");
        let first = String::from_utf8_lossy(&bodies[0]).to_string();
        assert!(
            first.contains("[image m"),
            "{wire}: no placeholder for the folded image"
        );
        assert!(
            !first.contains(PNG_B64),
            "{wire}: the folded image is still on the wire"
        );
        let second: Value = serde_json::from_slice(&bodies[1]).unwrap();
        assert_eq!(
            restored_image(wire, &second).as_deref(),
            Some(PNG_B64),
            "{wire}"
        );
        // The follow-up request is still a valid request of its wire.
        foldwire_wire::request::decode(wire, bodies[1].clone()).unwrap();
    }
}

// seed 001: the model's `restore` with `list` gives the session's archived media (ref,
// type, size); the call is the proxy's, so the client never sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_models_restore_list_names_the_archived_media_on_every_wire() {
    let (upstream, mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(upstream, dir.path(), |_| {}).await;
    let size = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, PNG_B64)
        .unwrap()
        .len();
    for wire in WIRES {
        let session = format!("list-{}", wire.as_str());
        let mut body = history_body(wire, 16, 2400, true);
        with_image(wire, &mut body, 8);
        // Round one archives the image (every request is spilled before anything folds).
        let (status, _) = post(proxy, wire, true, &session, "ok", &body).await;
        assert_eq!(status, 200, "{wire}");
        mock.received.lock().unwrap().clear();
        let (status, got) = post(proxy, wire, true, &session, "restore-list", &body).await;
        assert_eq!(status, 200, "{wire}");
        let evs = events(wire, true, &got);
        assert_eq!(text_of(&evs), "Listed.", "{wire}");
        assert!(
            tool_names(&evs).is_empty(),
            "{wire}: {:?}",
            tool_names(&evs)
        );
        let bodies = mock.bodies();
        assert_eq!(bodies.len(), 2, "{wire}: the list call, then the answer");
        let follow_up = String::from_utf8_lossy(&bodies[1]).to_string();
        // One line for the image: its ref (mNNNNN), type and size.
        let line = format!(": image/png, {size} bytes");
        let at = follow_up
            .find(&line)
            .unwrap_or_else(|| panic!("{wire}: no listing {line:?} in: {follow_up}"));
        let r = &follow_up[at - 6..at];
        assert!(
            r.starts_with('m') && r[1..].bytes().all(|b| b.is_ascii_digit()),
            "{wire}: {r:?} is not a ref"
        );
        assert!(
            follow_up.contains("1 archived media item(s) in this session"),
            "{wire}"
        );
        foldwire_wire::request::decode(wire, bodies[1].clone()).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gemini_json_array_stream_runs_the_loop_and_stays_a_json_array() {
    let (upstream, mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    // Keep-alives between rounds become whitespace in the array; the framer's unit test
    // covers them (this exchange is faster than one keep-alive period).
    let proxy = start_proxy_with(upstream, dir.path(), |_| {}).await;
    let body = history_body(Wire::Gemini, 16, 2400, true);
    let resp = reqwest::Client::new()
        .post(format!(
            "http://{proxy}/v1beta/models/g:streamGenerateContent"
        ))
        .header("x-foldwire-session", "gemini-array")
        .header("x-mock-script", "compress")
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json")
    );
    let got = resp.bytes().await.unwrap();
    // One JSON array of chunks, as Gemini frames it without alt=sse.
    let chunks: Vec<Value> = serde_json::from_slice(&got)
        .unwrap_or_else(|e| panic!("not a JSON array: {e}: {}", String::from_utf8_lossy(&got)));
    assert!(!chunks.is_empty());
    let evs = events(Wire::Gemini, true, &got);
    let text = text_of(&evs);
    assert!(
        text.contains("Let me tidy up.") && text.contains("All done."),
        "{text:?}"
    );
    assert!(tool_names(&evs).is_empty(), "{:?}", tool_names(&evs));
    // Upstream was asked for SSE, twice: the compress round and the answer.
    let received = mock.received.lock().unwrap().clone();
    assert_eq!(received.len(), 2);
    assert!(
        received
            .iter()
            .all(|r| r.path.ends_with(":streamGenerateContent?alt=sse"))
    );
    let state = admin(proxy, "gemini-array").await;
    assert_eq!(
        state["state"]["blocks"].as_array().unwrap().len(),
        1,
        "{state}"
    );
}

/// The id of a Responses answer as the client got it: from `response.completed` in a
/// stream, else the body's.
fn response_id(stream: bool, got: &[u8]) -> String {
    let text = String::from_utf8_lossy(got);
    let answer: Value = if stream {
        text.lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str::<Value>(d).ok())
            .find(|v| v["type"] == "response.completed")
            .map(|v| v["response"].clone())
            .unwrap()
    } else {
        serde_json::from_str(&text).unwrap()
    };
    answer["id"].as_str().unwrap().to_owned()
}

/// A Responses client that lets the provider store its responses may go on by naming the
/// id it was given (`previous_response_id`). After a compress round that id is the first
/// round's (a stream keeps one id), whose stored output ends in the proxy's call: continuing
/// it, the provider refused the request ("No tool output found"), and every later one of
/// the conversation. The proxy sends such a request on to the last round, whose stored input
/// holds every round; a JSON answer already carries the last round's id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_chaining_on_a_stitched_answer_continues_from_its_last_round() {
    let (upstream, mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(upstream, dir.path(), |_| {}).await;
    let wire = Wire::OpenAiResponses;
    for stream in [true, false] {
        let session = format!("chain-{stream}");
        let body = history_body(wire, 16, 2400, stream);
        let (status, got) = post(proxy, wire, stream, &session, "compress", &body).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&got));
        let shown = response_id(stream, &got);
        let rounds = mock.received.lock().unwrap().len();
        let last_round = format!("resp_{rounds}");
        assert!(
            mock.bodies()
                .last()
                .unwrap()
                .windows(7)
                .any(|w| w == b"fwcall_"),
            "stream={stream}: the answer took a compress round"
        );
        let next = serde_json::json!({
            "model": "m",
            "previous_response_id": shown,
            "input": [{"role": "user", "content": "And now?"}],
            "stream": stream,
        });
        let (status, got) = post(proxy, wire, stream, &session, "ok", &next).await;
        assert_eq!(
            status,
            200,
            "stream={stream}: {}",
            String::from_utf8_lossy(&got)
        );
        let sent: Value = serde_json::from_slice(mock.bodies().last().unwrap()).unwrap();
        assert_eq!(sent["previous_response_id"], last_round.as_str());
        assert_eq!(sent["input"], next["input"], "the rest goes as sent");
    }
    assert!(mock.refused.lock().unwrap().is_empty());
}
