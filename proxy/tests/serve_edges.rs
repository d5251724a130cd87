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
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, seen)
}

/// An upstream that answers every request with a 307 to `target`.
async fn redirecting_upstream(target: String) -> std::net::SocketAddr {
    let app = axum::Router::new().fallback(move || {
        let target = target.clone();
        async move { (StatusCode::TEMPORARY_REDIRECT, [("location", target)], "") }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
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
