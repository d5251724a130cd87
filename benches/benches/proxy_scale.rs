#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Added latency per turn of `foldwire serve` as a session grows: sessions of tool-use turns
//! (2,000 characters of tool output each) of 500, 2,000, 5,000 and 10,000 messages, each
//! request appending one turn, against a loopback mock provider. Side by side in one run,
//! interleaved request by request: the provider called directly, the proxy running the
//! `default` pipeline (compress tools injected), the proxy running `passthrough`, and a
//! `serde_json::Value` parse + serialize of the same body. Added = proxy minus direct.
//!
//! Reported per size: the first turn of a new session (what a client that resumes a long
//! session pays once) and the median of the steady turns after it, with the ratios the
//! targets name (default / passthrough, first / steady, default / Value round trip), and
//! passthrough's own first / steady beside them: what a new session costs the proxy before
//! any folding (its body received into new memory, decoded whole, a first state written).
//!
//! `cargo bench -p foldwire-benches --bench proxy_scale` (`FOLDWIRE_SCALE_SIZES=500,2000`
//! picks sizes; `FOLDWIRE_SCALE_TURNS` the steady turns per size, 7 by default;
//! `FOLDWIRE_SCALE_FIRSTS` the new sessions whose first turns give the first-turn median, 3
//! by default; `FOLDWIRE_SCALE_SETTLE_MS` an idle gap after every request, none by default)
//!
//! It allocates with mimalloc, as the `foldwire` binary does.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::DefaultBodyLimit;
use axum::response::Response;
use bytes::Bytes;
use foldwire_proxy::serve::{self, ServeConfig, config::Upstreams};
use futures::StreamExt as _;

/// Characters of tool output per turn.
const OUTPUT: usize = 2000;

/// Reads the request through as a provider must, each chunk dropped as it arrives, then
/// answers. Not collected into one buffer (axum's `Bytes` extractor copies every chunk
/// once more after the last): that copy, megabytes for the whole history the direct call
/// and passthrough send but a few kilobytes for a folded request, would be provider work
/// the default pipeline is credited with saving, not the proxy's own cost.
async fn mock(body: Body) -> Response {
    let mut chunks = body.into_data_stream();
    while let Some(Ok(_chunk)) = chunks.next().await {}
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from(
            r#"{"id":"m","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","usage":{"input_tokens":10,"output_tokens":2}}"#,
        ))
        .unwrap()
}

async fn start_mock() -> SocketAddr {
    let app = axum::Router::new()
        .fallback(axum::routing::post(mock))
        .layer(DefaultBodyLimit::disable());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

async fn start_proxy(upstream: SocketAddr, pipeline: &str, state: &std::path::Path) -> String {
    let base = format!("http://{upstream}");
    let config = ServeConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        state: Some(state.display().to_string()),
        pipeline: pipeline.to_owned(),
        upstreams: Upstreams {
            anthropic: base.clone(),
            openai: base.clone(),
            gemini: base,
        },
        identity_key: Some("bench".into()),
        max_body_bytes: 256 * 1024 * 1024,
        ..ServeConfig::default()
    };
    format!("http://{}", serve::start(config).await.unwrap().addr)
}

/// An Anthropic session body of `turns` tool-use turns (2 + 2 × turns messages), not
/// streamed.
fn body(turns: usize) -> Bytes {
    let text = String::from_utf8(foldwire_benches::anthropic_turns(turns, OUTPUT)).unwrap();
    Bytes::from(text.replace(r#","stream":true}"#, "}"))
}

/// One request; its full round trip.
async fn post(client: &reqwest::Client, base: &str, session: &str, body: &Bytes) -> Duration {
    let t = Instant::now();
    let resp = client
        .post(format!("{base}/v1/messages"))
        .header("x-foldwire-session", session)
        .header("content-type", "application/json")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "{}", resp.status());
    resp.bytes().await.unwrap();
    let took = t.elapsed();
    // An idle gap after each request (`FOLDWIRE_SCALE_SETTLE_MS`, none by default), as a
    // client that reads the answer before it sends again leaves: background writes finish
    // and freed memory goes back before the next request is timed.
    let settle: u64 = std::env::var("FOLDWIRE_SCALE_SETTLE_MS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    if settle > 0 {
        tokio::time::sleep(Duration::from_millis(settle)).await;
    }
    took
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let sizes: Vec<usize> = std::env::var("FOLDWIRE_SCALE_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![500, 2000, 5000, 10000]);
    let steady: usize = std::env::var("FOLDWIRE_SCALE_TURNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(7);
    let firsts: usize = std::env::var("FOLDWIRE_SCALE_FIRSTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3)
        .max(1);
    let upstream = start_mock().await;
    let dir = std::env::temp_dir().join(format!("foldwire-scale-{}", std::process::id()));
    let default = start_proxy(upstream, "default", &dir.join("default")).await;
    let passthrough = start_proxy(upstream, "passthrough", &dir.join("passthrough")).await;
    let direct = format!("http://{upstream}");
    let client = reqwest::Client::new();
    // Warm the connections and the state directories.
    let warm = body(4);
    for base in [&direct, &default, &passthrough] {
        post(&client, base, "warm", &warm).await;
    }

    println!(
        "added latency per turn (ms; median of {steady} steady turns, interleaved), Anthropic tool-use session:"
    );
    println!(
        "{:>8} {:>8} {:>8} {:>9} {:>9} {:>8} {:>9} {:>10} {:>10} {:>8} {:>9} {:>9}",
        "messages",
        "MB",
        "direct",
        "default",
        "passthru",
        "def/pass",
        "value_rt",
        "first_def",
        "first_pass",
        "1st/stdy",
        "def/value",
        "pass_1st"
    );
    for messages in sizes {
        let turns = messages.saturating_sub(2) / 2;
        let first_body = body(turns);
        // First turns of new sessions the proxy has never seen (the median of `firsts`; the
        // steady turns continue the last of them).
        let (mut first_def, mut first_pass) = (vec![], vec![]);
        let mut session = String::new();
        for i in 0..firsts {
            session = format!("scale-{messages}-{i}");
            let d0 = ms(post(&client, &direct, &session, &first_body).await);
            first_def.push(ms(post(&client, &default, &session, &first_body).await) - d0);
            first_pass.push(ms(post(&client, &passthrough, &session, &first_body).await) - d0);
        }
        let (f_def, f_pass) = (median(first_def), median(first_pass));
        let (mut direct_ms, mut def, mut pass, mut value) = (vec![], vec![], vec![], vec![]);
        for k in 1..=steady {
            let b = body(turns + k);
            let d = ms(post(&client, &direct, &session, &b).await);
            let p_def = ms(post(&client, &default, &session, &b).await);
            let p_pass = ms(post(&client, &passthrough, &session, &b).await);
            let t = Instant::now();
            std::hint::black_box(foldwire_benches::value_round_trip(&b));
            value.push(ms(t.elapsed()));
            direct_ms.push(d);
            def.push(p_def - d);
            pass.push(p_pass - d);
        }
        let (d, a_def, a_pass, v) = (median(direct_ms), median(def), median(pass), median(value));
        println!(
            "{messages:>8} {:>8.2} {d:>8.2} {a_def:>9.2} {a_pass:>9.2} {:>8.2} {v:>9.2} {f_def:>10.2} {f_pass:>10.2} {:>8.2} {:>9.2} {:>9.2}",
            first_body.len() as f64 / 1e6,
            a_def / a_pass.max(0.01),
            f_def / a_def.max(0.01),
            a_def / v.max(0.01),
            f_pass / a_pass.max(0.01),
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}
