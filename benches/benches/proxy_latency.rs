#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Added latency of `foldwire serve` against calling the (mock) provider directly, measured
//! side by side in one run: p50/p99 at 1, 64 and 256 concurrent clients (each client its own
//! session, a 42 KB Anthropic tool-use request, the default pipeline with the compress tools
//! injected), and time to first byte on streamed responses.
//!
//! `cargo bench -p foldwire-benches --bench proxy_latency`

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::HeaderMap;
use axum::response::Response;
use bytes::Bytes;
use foldwire_proxy::serve::{self, ServeConfig, config::Upstreams};
use futures::StreamExt as _;

const BODY: &str = include_str!("../../examples/requests/anthropic-tools.json");

/// A mock Anthropic endpoint: a short JSON answer, or an SSE stream whose first event goes
/// out at once and the rest 2 ms later (so time to first byte is visible).
async fn mock(headers: HeaderMap, _body: Bytes) -> Response {
    if headers.contains_key("x-bench-stream") {
        let first = Bytes::from_static(b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"m\",\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n");
        let rest = Bytes::from_static(b"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"ok\"}}\n\nevent: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":2}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
        let stream = futures::stream::iter([first, rest])
            .enumerate()
            .then(|(i, b)| async move {
                if i > 0 {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                Ok::<_, std::io::Error>(b)
            });
        return Response::builder()
            .header("content-type", "text/event-stream")
            .body(Body::from_stream(stream))
            .unwrap();
    }
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from(
            r#"{"id":"m","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","usage":{"input_tokens":10,"output_tokens":2}}"#,
        ))
        .unwrap()
}

async fn start_mock() -> SocketAddr {
    let app = axum::Router::new().fallback(axum::routing::post(mock));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Runs `total` requests with `concurrency` clients; returns sorted latencies (full response,
/// or time to first byte when `ttfb`).
async fn load(
    base: &str,
    concurrency: usize,
    total: usize,
    stream: bool,
    ttfb: bool,
) -> Vec<Duration> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency)
        .build()
        .unwrap();
    let per_client = total.div_ceil(concurrency);
    let base = Arc::new(base.to_owned());
    let tasks: Vec<_> = (0..concurrency)
        .map(|c| {
            let client = client.clone();
            let base = base.clone();
            tokio::spawn(async move {
                let mut out = Vec::with_capacity(per_client);
                for _ in 0..per_client {
                    let mut req = client
                        .post(format!("{base}/v1/messages"))
                        .header("x-foldwire-session", format!("bench-{c}"))
                        .header("content-type", "application/json")
                        .body(BODY);
                    if stream {
                        req = req.header("x-bench-stream", "1");
                    }
                    let t = Instant::now();
                    let resp = req.send().await.unwrap();
                    assert!(resp.status().is_success(), "{}", resp.status());
                    let mut body = resp.bytes_stream();
                    let first = body.next().await;
                    let at_first = t.elapsed();
                    assert!(first.is_some());
                    while body.next().await.is_some() {}
                    out.push(if ttfb { at_first } else { t.elapsed() });
                }
                out
            })
        })
        .collect();
    let mut all = Vec::with_capacity(total);
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all.sort();
    all
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let upstream = start_mock().await;
    let state = std::env::temp_dir().join(format!("foldwire-latency-{}", std::process::id()));
    let base = format!("http://{upstream}");
    let config = ServeConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        state: Some(state.display().to_string()),
        upstreams: Upstreams {
            anthropic: base.clone(),
            openai: base.clone(),
            gemini: base.clone(),
        },
        identity_key: Some("bench".into()),
        ..ServeConfig::default()
    };
    let proxy = format!("http://{}", serve::start(config).await.unwrap().addr);
    // Warm both paths (sessions, connections, the archive directory).
    load(&base, 4, 16, false, false).await;
    load(&proxy, 4, 16, false, false).await;

    println!("full response latency (ms), 42 KB Anthropic request, default pipeline:");
    println!(
        "{:>6} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10}",
        "conc", "direct50", "direct99", "proxy50", "proxy99", "added50", "added99"
    );
    for (concurrency, total) in [(1usize, 200usize), (64, 640), (256, 1024)] {
        let direct = load(&base, concurrency, total, false, false).await;
        let via = load(&proxy, concurrency, total, false, false).await;
        let (d50, d99) = (percentile(&direct, 0.5), percentile(&direct, 0.99));
        let (p50, p99) = (percentile(&via, 0.5), percentile(&via, 0.99));
        println!(
            "{concurrency:>6} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>10.2} {:>10.2}",
            ms(d50),
            ms(d99),
            ms(p50),
            ms(p99),
            ms(p50) - ms(d50),
            ms(p99) - ms(d99)
        );
    }
    let direct = load(&base, 1, 200, true, true).await;
    let via = load(&proxy, 1, 200, true, true).await;
    println!(
        "stream time to first byte (ms), 1 client: direct p50 {:.2} p99 {:.2}; proxy p50 {:.2} p99 {:.2}",
        ms(percentile(&direct, 0.5)),
        ms(percentile(&direct, 0.99)),
        ms(percentile(&via, 0.5)),
        ms(percentile(&via, 0.99)),
    );
    let _ = std::fs::remove_dir_all(state);
}
