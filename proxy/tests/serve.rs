#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `foldwire serve` end to end: a real proxy on loopback in front of a mock provider that
//! speaks the real wire formats, streaming included.

mod support;

use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use foldwire_proxy::serve::{self, ServeConfig, config::Upstreams};

/// What the mock provider received.
#[derive(Debug, Clone)]
struct Received {
    path: String,
    headers: HeaderMap,
    body: Bytes,
}

#[derive(Clone, Default)]
struct Mock {
    received: Arc<Mutex<Vec<Received>>>,
}

/// The mock provider: answers with the fixture named in `x-mock-fixture`, streamed in small
/// uneven chunks with real SSE framing (the fixture bytes themselves), or a small JSON body.
async fn mock_handler(
    axum::extract::State(mock): axum::extract::State<Mock>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    mock.received.lock().unwrap().push(Received {
        path: uri.to_string(),
        headers: headers.clone(),
        body,
    });
    if let Some(fixture) = headers.get("x-mock-fixture").and_then(|v| v.to_str().ok()) {
        let bytes = std::fs::read(fixture).unwrap();
        let sse = fixture.ends_with(".sse");
        // Uneven chunks (1..=97 bytes) that split lines, events and UTF-8 sequences.
        let mut chunks: Vec<Result<Bytes, std::io::Error>> = Vec::new();
        let (mut at, mut n) = (0, 1);
        while at < bytes.len() {
            let end = (at + n).min(bytes.len());
            chunks.push(Ok(Bytes::copy_from_slice(&bytes[at..end])));
            at = end;
            n = n * 7 % 97 + 1;
        }
        let stream = futures::stream::iter(chunks).then(|c| async move {
            tokio::task::yield_now().await;
            c
        });
        return Response::builder()
            .header(
                "content-type",
                if sse {
                    "text/event-stream"
                } else {
                    "application/json"
                },
            )
            .body(Body::from_stream(stream))
            .unwrap();
    }
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from(r#"{"ok":true}"#))
        .unwrap()
}

use futures::StreamExt as _;

async fn start_mock() -> (SocketAddr, Mock) {
    let mock = Mock::default();
    let app = axum::Router::new()
        .fallback(axum::routing::any(mock_handler))
        .with_state(mock.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, mock)
}

async fn start_proxy(upstream: SocketAddr, pipeline: &str, state: &std::path::Path) -> SocketAddr {
    start_proxy_with(upstream, state, |c| c.pipeline = pipeline.into()).await
}

async fn start_proxy_with(
    upstream: SocketAddr,
    state: &std::path::Path,
    edit: impl FnOnce(&mut ServeConfig),
) -> SocketAddr {
    let base = format!("http://{upstream}");
    let mut config = ServeConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        state: Some(state.display().to_string()),
        upstreams: Upstreams {
            anthropic: base.clone(),
            openai: base.clone(),
            gemini: base,
        },
        max_body_bytes: 1024 * 1024,
        workers: 2,
        identity_key: Some("test-key".into()),
        ..ServeConfig::default()
    };
    edit(&mut config);
    serve::start(config).await.unwrap().addr
}

/// Sends a one-line Anthropic request for `session`; the status.
async fn say_hi(proxy: SocketAddr, session: &str) -> u16 {
    reqwest::Client::new()
        .post(format!("http://{proxy}/v1/messages"))
        .header("x-foldwire-session", session)
        .body(r#"{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}"#)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// The admin view of a session.
async fn session_view(proxy: SocketAddr, session: &str) -> serde_json::Value {
    reqwest::get(format!("http://{proxy}/admin/sessions/{session}"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

fn wire_of(dir: &str) -> (&'static str, &'static str) {
    match dir {
        "anthropic" => (
            "/v1/messages",
            r#"{"model":"m","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"hi"}]}"#,
        ),
        "openai-chat" => (
            "/v1/chat/completions",
            r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#,
        ),
        "openai-responses" => (
            "/v1/responses",
            r#"{"model":"m","stream":true,"input":"hi"}"#,
        ),
        _ => (
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
            r#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}"#,
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_stream_fixture_reaches_the_client_byte_identical() {
    let (upstream, _mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy(upstream, "passthrough", dir.path()).await;
    let client = reqwest::Client::new();
    let mut relayed = 0;
    for wire_dir in ["anthropic", "openai-chat", "openai-responses", "gemini"] {
        for fixture in foldwire_core::fixtures::files(wire_dir, "stream-") {
            let (path, body) = wire_of(wire_dir);
            let resp = client
                .post(format!("http://{proxy}{path}"))
                .header("x-mock-fixture", fixture.display().to_string())
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 200, "{}", fixture.display());
            let got = resp.bytes().await.unwrap();
            assert_eq!(
                got.as_ref(),
                std::fs::read(&fixture).unwrap(),
                "{}",
                fixture.display()
            );
            relayed += 1;
        }
    }
    if foldwire_core::fixtures::dir().is_some() {
        assert!(relayed >= 20, "only {relayed} stream fixtures relayed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_pass_through_and_the_body_is_forwarded_unchanged() {
    let (upstream, mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy(upstream, "passthrough", dir.path()).await;
    let body =
        r#"{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hello there"}]}"#;
    let resp = reqwest::Client::new()
        .post(format!("http://{proxy}/v1/messages"))
        .header("x-api-key", "sk-secret")
        .header("anthropic-version", "2023-06-01")
        .header("x-foldwire-session", "explicit-1")
        .header("connection", "keep-alive, x-drop-me")
        .header("x-drop-me", "1")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.text().await.unwrap(), r#"{"ok":true}"#);
    let got = mock.received.lock().unwrap().pop().unwrap();
    assert_eq!(got.path, "/v1/messages");
    assert_eq!(got.body, body.as_bytes());
    assert_eq!(got.headers["x-api-key"], "sk-secret");
    assert_eq!(got.headers["anthropic-version"], "2023-06-01");
    assert!(
        got.headers.get("x-foldwire-session").is_none(),
        "foldwire's own header stays here"
    );
    assert!(
        got.headers.get("x-drop-me").is_none(),
        "connection-named headers are hop-by-hop"
    );

    // The admin API knows the session by its explicit id.
    let admin: serde_json::Value =
        reqwest::get(format!("http://{proxy}/admin/sessions/explicit-1"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    assert_eq!(admin["state"]["turns"], 1);
    assert_eq!(admin["reports"][0]["pipeline"], "passthrough");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_body_fails_open_and_is_counted() {
    let (upstream, mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy(upstream, "passthrough", dir.path()).await;
    // A wrong shape, and bodies that are not strict JSON, which readers would read apart.
    let bodies = [
        r#"{"model":"m","messages":"not a list"}"#,
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"a\nb\"}]}",
        r#"{"model":"m","max_tokens":0512,"messages":[{"role":"user","content":"a"}]}"#,
        r#"{"model":"m","messages":[{"role":"user","content":"a","content":"b"}]}"#,
    ];
    for body in bodies {
        let resp = reqwest::Client::new()
            .post(format!("http://{proxy}/v1/chat/completions"))
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(
            mock.received.lock().unwrap().pop().unwrap().body,
            body.as_bytes()
        );
    }
    let metrics = support::metrics(proxy).await;
    assert!(metrics.contains("foldwire_fail_open_total 4"), "{metrics}");
    assert!(
        metrics.contains("foldwire_requests_total{wire=\"openai-chat\"} 4"),
        "{metrics}"
    );
}

/// Requests that continue a conversation the provider keeps hold only what is new: a tool
/// result in them answers a call only the provider holds. They reach the provider as sent
/// (pairing repair once dropped those results as orphans), make no turn of any session,
/// named or not, and are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_on_a_conversation_the_provider_keeps_are_forwarded_as_sent() {
    let (upstream, mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(upstream, dir.path(), |_| {}).await;
    let output = r#"{"type":"function_call_output","call_id":"call_7","output":"42 files"}"#;
    let cases = [
        (
            "/v1/responses",
            format!(r#"{{"model":"m","previous_response_id":"resp_1","input":[{output}]}}"#),
        ),
        (
            "/v1/responses",
            format!(r#"{{"model":"m","input":[{output}],"conversation":"conv_1"}}"#),
        ),
        (
            "/v1/responses",
            format!(
                r#"{{"model":"m","input":[{{"type":"item_reference","id":"fc_7"}},{output}]}}"#
            ),
        ),
        (
            "/v1beta/models/g:generateContent",
            r#"{"cachedContent":"cachedContents/c1","contents":[{"role":"user","parts":[{"functionResponse":{"name":"ls","response":{"files":42}}}]}]}"#.to_owned(),
        ),
    ];
    for (i, (path, body)) in cases.iter().enumerate() {
        let mut request = reqwest::Client::new()
            .post(format!("http://{proxy}{path}"))
            .body(body.clone());
        if i % 2 == 0 {
            request = request.header("x-foldwire-session", "kept-by-provider");
        }
        assert_eq!(request.send().await.unwrap().status(), 200, "{body}");
        assert_eq!(
            mock.received.lock().unwrap().pop().unwrap().body,
            body.as_bytes(),
            "{body}"
        );
    }
    let metrics = support::metrics(proxy).await;
    assert!(
        metrics.contains("foldwire_provider_held_total 4\n")
            && metrics.contains("foldwire_fail_open_total 0\n"),
        "{metrics}"
    );
    let sessions = support::sessions(proxy).await;
    assert_eq!(sessions["sessions"], serde_json::json!([]), "{sessions}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gzip_bodies_are_decoded_and_oversized_bodies_get_413() {
    let (upstream, mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy(upstream, "passthrough", dir.path()).await;
    let body = r#"{"model":"m","input":"compressed hello"}"#;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(body.as_bytes()).unwrap();
    let resp = reqwest::Client::new()
        .post(format!("http://{proxy}/v1/responses"))
        .header("content-encoding", "gzip")
        .body(gz.finish().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let got = mock.received.lock().unwrap().pop().unwrap();
    assert_eq!(got.body, body.as_bytes());
    assert!(got.headers.get("content-encoding").is_none());

    let huge = format!(
        r#"{{"model":"m","input":"{}"}}"#,
        "x".repeat(2 * 1024 * 1024)
    );
    let resp = reqwest::Client::new()
        .post(format!("http://{proxy}/v1/responses"))
        .body(huge)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_is_loopback_only_and_swaps_pipelines() {
    let (upstream, _mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy(upstream, "passthrough", dir.path()).await;
    let client = reqwest::Client::new();
    let forbidden = client
        .get(format!("http://{proxy}/admin/sessions"))
        .header("host", "evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(forbidden.status(), StatusCode::FORBIDDEN);

    let bad = client
        .put(format!("http://{proxy}/admin/pipeline"))
        .body(r#"{"stages":["wire.encode"]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    assert!(
        bad.text()
            .await
            .unwrap()
            .contains("add wire.decode before wire.encode")
    );

    let ok: serde_json::Value = client
        .put(format!("http://{proxy}/admin/pipeline"))
        .body("name = \"swapped\"\nstages = [\"wire.decode\", \"wire.encode\"]\n")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ok["name"], "swapped");
    let now: serde_json::Value = client
        .get(format!("http://{proxy}/admin/pipeline"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(now["name"], "swapped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_sessions_in_parallel_all_arrive() {
    let (upstream, mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy(upstream, "passthrough", dir.path()).await;
    let client = reqwest::Client::new();
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let client = client.clone();
            tokio::spawn(async move {
                let body = format!(
                    r#"{{"model":"m","messages":[{{"role":"user","content":"session {i}"}}]}}"#
                );
                let resp = client
                    .post(format!("http://{proxy}/v1/chat/completions"))
                    .header("authorization", format!("Bearer user-{i}"))
                    .body(body)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(resp.status(), 200);
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(mock.received.lock().unwrap().len(), 200);
    let sessions = support::sessions(proxy).await;
    assert_eq!(sessions["sessions"].as_array().unwrap().len(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_paths_are_forwarded_untouched() {
    let (upstream, mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy(upstream, "passthrough", dir.path()).await;
    let resp = reqwest::Client::new()
        .post(format!("http://{proxy}/v2/whatever?x=1"))
        .header("x-custom", "kept")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.text().await.unwrap(), r#"{"ok":true}"#);
    let got = mock.received.lock().unwrap().clone();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].path, "/v2/whatever?x=1");
    assert_eq!(got[0].headers["x-custom"], "kept");
    assert_eq!(&got[0].body[..], b"{}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_sessions_keep_their_identity_across_restarts() {
    let (upstream, _mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let base = format!("http://{upstream}");
    let config = ServeConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        state: Some(dir.path().display().to_string()),
        pipeline: "passthrough".into(),
        upstreams: Upstreams {
            anthropic: base.clone(),
            openai: base.clone(),
            gemini: base,
        },
        workers: 1,
        identity_key: None,
        ..ServeConfig::default()
    };
    let body = r#"{"model":"m","messages":[{"role":"user","content":"same opener"}]}"#;
    let mut seen = Vec::new();
    // Two proxy instances on one state location, as after a restart or beside a replica.
    for _ in 0..2 {
        let proxy = serve::start(config.clone()).await.unwrap().addr;
        let resp = reqwest::Client::new()
            .post(format!("http://{proxy}/v1/chat/completions"))
            .header("authorization", "Bearer user-1")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let sessions = support::sessions(proxy).await;
        seen.push(sessions["sessions"][0].clone());
    }
    assert_eq!(
        seen[0]["session"], seen[1]["session"],
        "same anonymous id after a restart"
    );
    assert_eq!(
        seen[1]["turns"], 2,
        "the second instance continued the stored session"
    );
    assert!(dir.path().join("identity.key").is_file());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_requests_of_one_session_are_serialized() {
    let (upstream, mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy(upstream, "default", dir.path()).await;
    let client = reqwest::Client::new();
    let body = include_str!("../../examples/requests/anthropic-tools.json");
    // Eight requests of one session at once: each turn must see the state the previous one
    // saved (a race would give two turns the same number and lose one's state).
    let sends: Vec<_> = (0..8)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                let resp = client
                    .post(format!("http://{proxy}/v1/messages"))
                    .header("x-foldwire-session", "one-session")
                    .body(body)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(resp.status(), 200);
            })
        })
        .collect();
    for s in sends {
        s.await.unwrap();
    }
    assert_eq!(mock.received.lock().unwrap().len(), 8);
    let admin: serde_json::Value =
        reqwest::get(format!("http://{proxy}/admin/sessions/one-session"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    assert_eq!(admin["state"]["turns"], 8);
    let mut turns: Vec<u64> = admin["reports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["turn"].as_u64().unwrap())
        .collect();
    turns.sort_unstable();
    assert_eq!(
        turns,
        (1..=8).collect::<Vec<u64>>(),
        "every turn numbered once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_sessions_leave_memory_but_not_the_admin_list_and_come_back_on_their_next_turn() {
    let (upstream, _mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(upstream, dir.path(), |c| {
        c.pipeline = "passthrough".into();
        c.idle_session_secs = 1;
    })
    .await;
    let send = || say_hi(proxy, "sleepy");
    let live = || async {
        let text = reqwest::get(format!("http://{proxy}/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix("foldwire_sessions_live "))
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    assert_eq!(send().await, 200);
    assert_eq!(live().await, 1);
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while live().await > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the idle session stayed in memory"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let listed = support::sessions(proxy).await;
    assert_eq!(listed["sessions"][0]["session"], "sleepy");
    assert_eq!(listed["sessions"][0]["turns"], 1);
    assert_eq!(send().await, 200);
    assert_eq!(session_view(proxy, "sleepy").await["state"]["turns"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_are_kept_for_the_most_recent_sessions_only() {
    let (upstream, _mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(upstream, dir.path(), |c| {
        c.pipeline = "passthrough".into();
        c.report_sessions = 2;
    })
    .await;
    for session in ["first", "second", "third"] {
        assert_eq!(say_hi(proxy, session).await, 200);
    }
    // The oldest session's reports made room; its state is still there.
    let first = session_view(proxy, "first").await;
    assert_eq!(first["reports"].as_array().unwrap().len(), 0, "{first}");
    assert_eq!(first["state"]["turns"], 1);
    for session in ["second", "third"] {
        assert_eq!(
            session_view(proxy, session).await["reports"]
                .as_array()
                .unwrap()
                .len(),
            1,
            "{session}"
        );
    }
}
