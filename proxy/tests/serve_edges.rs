#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The proxy's edges against a hostile or odd upstream: redirects are relayed to the client,
//! never followed with the client's credentials.

mod support;

use std::sync::{Arc, Mutex};

use axum::http::{HeaderMap, StatusCode};
use support::*;

/// A listener that records the headers of every request it gets.
async fn recording_host() -> (std::net::SocketAddr, Arc<Mutex<Vec<HeaderMap>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let store = Arc::clone(&seen);
    let app = axum::Router::new().fallback(move |headers: HeaderMap| {
        let store = Arc::clone(&store);
        async move {
            store.lock().unwrap().push(headers);
            "stolen"
        }
    });
    let addr = serve_upstream(app).await;
    (addr, seen)
}

/// An upstream that answers every request with a 307 to `target`.
async fn redirecting_upstream(target: String) -> std::net::SocketAddr {
    let app = axum::Router::new().fallback(move || {
        let target = target.clone();
        async move { (StatusCode::TEMPORARY_REDIRECT, [("location", target)], "") }
    });
    serve_upstream(app).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirects_are_relayed_and_credentials_never_follow_them() {
    let (elsewhere, seen) = recording_host().await;
    let target = format!("http://{elsewhere}/v1/messages");
    let upstream = redirecting_upstream(target.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(upstream, dir.path(), |_| {}).await;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let cases = [
        ("/v1/messages", "x-api-key", "sk-ant-secret"),
        (
            "/v1beta/models/g:generateContent",
            "x-goog-api-key",
            "goog-secret",
        ),
        ("/v1/chat/completions", "authorization", "Bearer sk-secret"),
    ];
    for (path, header, secret) in cases {
        let body = match path {
            p if p.contains("v1beta") => history_body(foldwire_core::Wire::Gemini, 1, 50, false),
            p if p.contains("chat") => history_body(foldwire_core::Wire::OpenAiChat, 1, 50, false),
            _ => history_body(foldwire_core::Wire::Anthropic, 1, 50, false),
        };
        let resp = client
            .post(format!("http://{proxy}{path}"))
            .header(header, secret)
            .header("x-foldwire-session", "redirected")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(
            resp.status(),
            307,
            "{path}: the redirect reaches the client"
        );
        assert_eq!(
            resp.headers().get("location").unwrap().to_str().unwrap(),
            target,
            "{path}"
        );
    }
    assert!(
        seen.lock().unwrap().is_empty(),
        "the redirect target received requests (with the client's credentials)"
    );
}

/// Reads until the server closes the connection (or `limit` passes); true when it closed.
async fn closed_by_server(stream: &mut tokio::net::TcpStream, limit: std::time::Duration) -> bool {
    use tokio::io::AsyncReadExt as _;
    let mut buf = [0u8; 256];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_headers_are_cut_off_and_the_connection_cap_holds() {
    use std::time::Duration;
    use tokio::io::AsyncWriteExt as _;
    let (upstream, _mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(upstream, dir.path(), |c| {
        c.header_timeout_secs = 1;
        c.max_connections = 4;
    })
    .await;
    // Four clients that start a request and never finish its headers fill the cap.
    let mut slow = Vec::new();
    for _ in 0..4 {
        let mut s = tokio::net::TcpStream::connect(proxy).await.unwrap();
        s.write_all(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\n")
            .await
            .unwrap();
        slow.push(s);
    }
    // A fifth, well-behaved client waits for a free slot, then is served.
    let served = tokio::spawn(async move {
        reqwest::Client::new()
            .get(format!("http://{proxy}/metrics"))
            .send()
            .await
            .map(|r| r.status())
    });
    for (i, s) in slow.iter_mut().enumerate() {
        assert!(
            closed_by_server(s, Duration::from_secs(10)).await,
            "slow client {i} was still connected after 10 s"
        );
    }
    let status = tokio::time::timeout(Duration::from_secs(10), served)
        .await
        .expect("the waiting client was never served")
        .unwrap()
        .unwrap();
    assert_eq!(status, 200);
    // An idle keep-alive connection is closed the same way once its request is answered.
    let mut idle = tokio::net::TcpStream::connect(proxy).await.unwrap();
    idle.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    assert!(closed_by_server(&mut idle, Duration::from_secs(10)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_content_encoding_is_refused_with_the_accepted_ones_named() {
    let (upstream, mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(upstream, dir.path(), |_| {}).await;
    let resp = reqwest::Client::new()
        .post(format!("http://{proxy}/v1/messages"))
        .header("content-encoding", "lzma")
        .body("not really lzma")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 415);
    let body: serde_json::Value = resp.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("\"lzma\""), "{message}");
    assert!(message.contains("gzip"), "{message}");
    assert!(mock.bodies().is_empty());
}

/// Gemini users who authenticate with `?key=` and open alike are different callers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_query_keys_keep_callers_apart() {
    let (upstream, _mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(upstream, dir.path(), |_| {}).await;
    let body = history_body(foldwire_core::Wire::Gemini, 1, 50, false).to_string();
    for key in ["AIza-alice", "AIza-bob"] {
        let resp = reqwest::Client::new()
            .post(format!(
                "http://{proxy}/v1beta/models/g:generateContent?key={key}"
            ))
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
    }
    let listed: serde_json::Value = reqwest::get(format!("http://{proxy}/admin/sessions"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let sessions = listed["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 2, "{listed}");
    assert!(!listed.to_string().contains("AIza"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_pipeline_spec_is_refused_and_the_pipeline_stays() {
    let (upstream, _mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(upstream, dir.path(), |_| {}).await;
    let client = reqwest::Client::new();
    let spec = format!(
        "name = \"{}\"\nstages = [\"wire.decode\", \"wire.encode\"]",
        "n".repeat(10 * 1024 * 1024)
    );
    let resp = client
        .put(format!("http://{proxy}/admin/pipeline"))
        .body(spec)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("a spec may have at most"),
        "{body}"
    );
    let current: serde_json::Value = client
        .get(format!("http://{proxy}/admin/pipeline"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(current["name"], "default", "{current}");
}
