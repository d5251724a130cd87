#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! What the official clients rely on, through a real proxy in front of the scripted mock:
//! Gemini streams without SSE comments, one response identity across compress rounds, JSON
//! answers that keep every round's text, unknown routes forwarded untouched, and side
//! requests (constrained output, forced or forbidden tools) left without the proxy's tools.

mod support;

use foldwire_core::Wire;
use foldwire_proxy::serve::tools::SYSTEM_NOTE;
use foldwire_wire::stream::{StreamEvent, parse_response, parse_stream};
use serde_json::{Value, json};
use support::*;

const WIRES: [Wire; 4] = [
    Wire::Anthropic,
    Wire::OpenAiChat,
    Wire::OpenAiResponses,
    Wire::Gemini,
];

fn text_of(wire: Wire, stream: bool, bytes: &[u8]) -> String {
    let events: Vec<StreamEvent> = if stream {
        parse_stream(wire, bytes)
            .unwrap()
            .into_iter()
            .flat_map(|e| e.events)
            .collect()
    } else {
        parse_response(wire, bytes).unwrap()
    };
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::TextDelta { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// The JSON payloads of an SSE answer.
fn payloads(wire: Wire, bytes: &[u8]) -> Vec<Value> {
    parse_stream(wire, bytes)
        .unwrap()
        .iter()
        .filter_map(|e| e.data.as_deref())
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_streams_carry_no_sse_comment_lines_while_the_loop_works() {
    let (upstream, mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(upstream, dir.path(), |_| {}).await;
    let body = history_body(Wire::Gemini, 16, 2400, true);
    let (status, got) = post(proxy, Wire::Gemini, true, "gem-sse", "compress", &body).await;
    assert_eq!(status, 200);
    assert_eq!(mock.bodies().len(), 2, "the loop ran a second round");
    let text = String::from_utf8(got.to_vec()).unwrap();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        assert!(
            line.starts_with("data: "),
            "not a data line: {line:?} in {text}"
        );
    }
    assert_eq!(
        text_of(Wire::Gemini, true, &got),
        "Let me tidy up.All done."
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stitched_stream_keeps_the_first_rounds_response_identity() {
    let (upstream, _mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(upstream, dir.path(), |_| {}).await;
    for wire in [Wire::OpenAiResponses, Wire::OpenAiChat, Wire::Gemini] {
        let session = format!("identity-{wire}");
        let body = history_body(wire, 16, 2400, true);
        let (status, got) = post(proxy, wire, true, &session, "compress", &body).await;
        assert_eq!(status, 200);
        let events = payloads(wire, &got);
        let ids: Vec<&str> = events
            .iter()
            .filter_map(|v| match wire {
                Wire::OpenAiResponses => v["response"]["id"].as_str(),
                Wire::OpenAiChat => v["id"].as_str(),
                _ => v["responseId"].as_str(),
            })
            .collect();
        assert!(ids.len() >= 2, "{wire}: {ids:?}");
        assert!(ids.iter().all(|id| *id == ids[0]), "{wire}: {ids:?}");
        if wire == Wire::OpenAiResponses {
            // The completed snapshot lists the items of both rounds, as the stream showed them.
            let done: Vec<Value> = events
                .iter()
                .filter(|v| v["type"] == "response.output_item.done")
                .map(|v| v["item"].clone())
                .collect();
            let completed = events
                .iter()
                .find(|v| v["type"] == "response.completed")
                .unwrap();
            assert_eq!(completed["response"]["output"], Value::from(done.clone()));
            let item_ids: Vec<&str> = done.iter().filter_map(|i| i["id"].as_str()).collect();
            assert_eq!(item_ids.len(), 2, "{item_ids:?}");
            assert_ne!(item_ids[0], item_ids[1]);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_answers_carry_the_text_of_every_round() {
    let (upstream, mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(upstream, dir.path(), |_| {}).await;
    for wire in WIRES {
        mock.received.lock().unwrap().clear();
        let session = format!("json-{wire}");
        let body = history_body(wire, 16, 2400, false);
        let (status, got) = post(proxy, wire, false, &session, "compress", &body).await;
        assert_eq!(status, 200, "{wire}");
        assert_eq!(mock.bodies().len(), 2, "{wire}: two rounds");
        assert_eq!(
            text_of(wire, false, &got),
            "Let me tidy up.All done.",
            "{wire}: {}",
            String::from_utf8_lossy(&got)
        );
        assert!(!String::from_utf8_lossy(&got).contains("fwcall_"), "{wire}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_routes_reach_the_upstream_their_path_and_headers_name() {
    let (anthropic, a) = start_mock().await;
    let (openai, o) = start_mock().await;
    let (gemini, g) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(openai, dir.path(), |c| {
        c.upstreams.anthropic = format!("http://{anthropic}");
        c.upstreams.gemini = format!("http://{gemini}");
    })
    .await;
    let client = reqwest::Client::new();
    let get = |path: &str| client.get(format!("http://{proxy}{path}"));
    let cases = [
        (
            get("/v1/models").header("authorization", "Bearer k"),
            &o,
            "GET /v1/models",
        ),
        (
            get("/v1/models?limit=5")
                .header("x-api-key", "k")
                .header("anthropic-version", "2023-06-01"),
            &a,
            "GET /v1/models?limit=5",
        ),
        (
            get("/v1beta/models?pageSize=2"),
            &g,
            "GET /v1beta/models?pageSize=2",
        ),
        (
            client
                .delete(format!("http://{proxy}/v1/files/f1"))
                .header("authorization", "Bearer k"),
            &o,
            "DELETE /v1/files/f1",
        ),
        (
            get(&format!("/u/http://{anthropic}/v1/models")),
            &a,
            "GET /v1/models",
        ),
    ];
    for (request, mock, asked) in cases {
        let before = mock.received.lock().unwrap().len();
        let resp = request.header("x-extra", "kept").send().await.unwrap();
        assert_eq!(resp.status(), 200, "{asked}");
        assert_eq!(resp.headers()["x-mock-answered"], "listing", "{asked}");
        let answer: Value = resp.json().await.unwrap();
        assert_eq!(answer["asked"], asked);
        let received = mock.received.lock().unwrap().clone();
        assert_eq!(received.len(), before + 1, "{asked}");
        let last = received.last().unwrap();
        assert_eq!(last.headers["x-extra"], "kept");
    }
    // A POST to an unknown path goes through with its body, untouched.
    let body = r#"{"purpose": "batch", "x": [1, 2]}"#;
    let resp = client
        .post(format!("http://{proxy}/v1/batches?beta=1"))
        .header("authorization", "Bearer k")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let last = o.received.lock().unwrap().last().unwrap().clone();
    assert_eq!(
        (last.method.as_str(), last.path.as_str()),
        ("POST", "/v1/batches?beta=1")
    );
    assert_eq!(&last.body[..], body.as_bytes());
}

/// `body` with the constraint of a side request added.
fn constrained(wire: Wire, kind: usize, mut body: Value) -> Value {
    let edits: [Value; 3] = match wire {
        Wire::Anthropic => [
            json!({"output_format": {"type": "json_schema", "schema": {"type": "object"}}}),
            json!({"tool_choice": {"type": "tool", "name": "route"}, "tools": [{"name": "route", "input_schema": {"type": "object"}}]}),
            json!({"tool_choice": {"type": "none"}}),
        ],
        Wire::OpenAiChat => [
            json!({"response_format": {"type": "json_object"}}),
            json!({"tool_choice": "required", "tools": [{"type": "function", "function": {"name": "route", "parameters": {"type": "object"}}}]}),
            json!({"tool_choice": "none"}),
        ],
        Wire::OpenAiResponses => [
            json!({"text": {"format": {"type": "json_schema", "name": "r", "schema": {"type": "object"}}}}),
            json!({"tool_choice": {"type": "function", "name": "route"}, "tools": [{"type": "function", "name": "route", "parameters": {"type": "object"}}]}),
            json!({"tool_choice": "none"}),
        ],
        Wire::Gemini => [
            json!({"generationConfig": {"responseMimeType": "application/json", "responseJsonSchema": {"type": "object"}}}),
            json!({"toolConfig": {"functionCallingConfig": {"mode": "ANY"}}, "tools": [{"functionDeclarations": [{"name": "route"}]}]}),
            json!({"toolConfig": {"functionCallingConfig": {"mode": "NONE"}}}),
        ],
    };
    for (k, v) in edits[kind].as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn side_requests_are_folded_but_get_no_proxy_tools_on_any_wire() {
    let (upstream, mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(upstream, dir.path(), |c| c.window = 16_000).await;
    for wire in WIRES {
        for stream in [false, true] {
            let plain = history_body(wire, 16, 2400, stream);
            // The same request unconstrained gets the tools: the check below can fail.
            mock.received.lock().unwrap().clear();
            let session = format!("main-{wire}-{stream}");
            let (status, _) = post(proxy, wire, stream, &session, "ok", &plain).await;
            assert_eq!(status, 200, "{wire}");
            let forwarded = String::from_utf8_lossy(&mock.bodies()[0]).to_string();
            assert!(forwarded.contains("search_context"), "{wire}");
            for kind in 0..3 {
                mock.received.lock().unwrap().clear();
                let body = constrained(wire, kind, plain.clone());
                let session = format!("side-{wire}-{stream}-{kind}");
                let (status, got) = post(proxy, wire, stream, &session, "ok", &body).await;
                assert_eq!(
                    status,
                    200,
                    "{wire} {kind}: {}",
                    String::from_utf8_lossy(&got)
                );
                let bodies = mock.bodies();
                assert_eq!(bodies.len(), 1, "{wire} {kind}");
                let forwarded = String::from_utf8_lossy(&bodies[0]).to_string();
                for marker in ["search_context", "\"compress\"", &SYSTEM_NOTE[..40]] {
                    assert!(
                        !forwarded.contains(marker),
                        "{wire} {kind}: {marker} in {forwarded}"
                    );
                }
                // Still folded by the pipeline to fit the window.
                assert!(
                    bodies[0].len() < body.to_string().len() * 3 / 4,
                    "{wire} {kind}: {} of {} bytes forwarded",
                    bodies[0].len(),
                    body.to_string().len()
                );
                let sent: Value = serde_json::from_slice(&bodies[0]).unwrap();
                for (k, v) in constrained(wire, kind, json!({})).as_object().unwrap() {
                    assert_eq!(
                        &sent[k], v,
                        "{wire} {kind}: the constraint is forwarded as sent"
                    );
                }
            }
        }
    }
}
