#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The state store goes away (an S3 endpoint nobody answers on): every request is still
//! forwarded unchanged, a few failures in a row open the store's circuit so later requests
//! stop waiting on it, and `/metrics` says so.

mod support;

use foldwire_core::Wire;
use support::*;

fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} missing from /metrics:\n{text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_store_opens_the_circuit_and_requests_still_go_through() {
    let (upstream, mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    // Port 1 on loopback: connection refused, the way an unreachable S3 endpoint behaves.
    let dead = "s3://bucket/prefix?endpoint=http://127.0.0.1:1&allow_http=true&region=us-east-1\
                &access_key_id=k&secret_access_key=s";
    let proxy = start_proxy_with(upstream, dir.path(), |c| {
        c.state = Some(dead.to_owned());
        c.store_timeout_ms = 400;
        c.store_breaker_failures = 3;
        c.store_breaker_cooldown_secs = 600;
    })
    .await;
    let client = reqwest::Client::new();
    let mut sent = Vec::new();
    for turn in 0..6 {
        let body = history_body(Wire::Anthropic, turn + 1, 200, false).to_string();
        let resp = client
            .post(format!("http://{proxy}/v1/messages"))
            .header("x-foldwire-session", "outage")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(
            resp.status(),
            200,
            "turn {turn}: {}",
            resp.text().await.unwrap()
        );
        sent.push(body);
    }
    // Nothing the client sent was lost: each request reached the provider as it was sent.
    let forwarded = mock.bodies();
    assert_eq!(forwarded.len(), sent.len());
    for (f, s) in forwarded.iter().zip(&sent) {
        assert_eq!(f.as_ref(), s.as_bytes());
    }
    let metrics = metrics(proxy).await;
    assert_eq!(metric(&metrics, "foldwire_store_circuit_open"), 1);
    assert_eq!(metric(&metrics, "foldwire_store_circuit_trips_total"), 1);
    assert!(metric(&metrics, "foldwire_store_calls_skipped_total") >= 3);
    assert_eq!(metric(&metrics, "foldwire_fail_open_total"), 6);
}
