//! The load behind `proxy_memory` and `proxy_memory_system`: requests/s with many concurrent
//! clients (each request a turn of one of 4,096 sessions, the 42 KB Anthropic tool-use
//! request), then the process's resident memory before the load, at its end, and after an
//! idle period long enough for every session to retire; each configuration in a child process
//! of its own. The two bench binaries differ only in their
//! global allocator, so running both in one command compares allocators side by side.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use foldwire_proxy::serve::{self, ServeConfig, config::Upstreams};

const BODY: &str = include_str!("../../../examples/requests/anthropic-tools.json");
const TURNS: usize = 2;

/// A size knob, overridable by environment to see what memory scales with.
fn knob(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn mock(_body: bytes::Bytes) -> &'static str {
    r#"{"id":"m","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","usage":{"input_tokens":10,"output_tokens":2}}"#
}

async fn start_mock() -> SocketAddr {
    let app = axum::Router::new().fallback(axum::routing::post(mock));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// A field of this process's `/proc/self/status` (Linux), as a number.
fn status(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .unwrap_or(0.0)
}

/// Resident set size of this process, in MiB.
fn rss_mib() -> f64 {
    status("VmRSS:") / 1024.0
}

async fn run(label: &str, reports_per_session: usize) {
    let slug: String = label
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let sessions = knob("FOLDWIRE_BENCH_SESSIONS", 4096);
    let clients = knob("FOLDWIRE_BENCH_CLIENTS", 256);
    let upstream = start_mock().await;
    let state = std::env::temp_dir().join(format!("foldwire-memory-{}-{slug}", std::process::id()));
    let base = format!("http://{upstream}");
    let config = ServeConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        state: Some(state.display().to_string()),
        upstreams: Upstreams {
            anthropic: base.clone(),
            openai: base.clone(),
            gemini: base,
        },
        identity_key: Some("bench".into()),
        idle_session_secs: 1,
        reports_per_session,
        ..ServeConfig::default()
    };
    let proxy = format!("http://{}", serve::start(config).await.unwrap().addr);
    let before = rss_mib();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(clients)
        .build()
        .unwrap();
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let client = client.clone();
            let proxy = proxy.clone();
            tokio::spawn(async move {
                for turn in 0..TURNS {
                    for s in (c..sessions).step_by(clients) {
                        let resp = client
                            .post(format!("{proxy}/v1/messages"))
                            .header("x-foldwire-session", format!("mem-{s}"))
                            .header("x-foldwire-turn", turn.to_string())
                            .body(BODY)
                            .send()
                            .await
                            .unwrap();
                        assert!(resp.status().is_success());
                        resp.bytes().await.unwrap();
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let elapsed = started.elapsed();
    let loaded = rss_mib();
    let threads = status("Threads:");
    // The clients leave: their keep-alive connections close, as after a real load test.
    drop(client);
    // Sessions retire after 1 s idle; give the sweep a few rounds.
    tokio::time::sleep(Duration::from_secs(
        knob("FOLDWIRE_BENCH_IDLE_SECS", 6) as u64
    ))
    .await;
    let idle = rss_mib();
    let idle_threads = status("Threads:");
    let requests = sessions * TURNS;
    println!(
        "{label:>34}: {:>7.0} req/s; RSS {:>6.1} MiB before, {:>6.1} after load, {:>6.1} after idle (+{:.1} MiB kept); threads {threads} after load, {idle_threads} after idle",
        requests as f64 / elapsed.as_secs_f64(),
        before,
        loaded,
        idle,
        idle - before
    );
    let _ = std::fs::remove_dir_all(state);
}

/// A configuration of the child process: its label, the reports kept per session, and the
/// environment it runs with (how an operator tunes the allocator).
pub type Config = (&'static str, usize, &'static [(&'static str, &'static str)]);

/// Runs each configuration in a child process of this binary, so one's memory does not carry
/// into the next (`allocator` names the global allocator the binary was built with).
pub fn main(allocator: &str, configs: &[Config]) {
    if let Ok(label) = std::env::var("FOLDWIRE_BENCH_CHILD") {
        let Some(&(label, reports, _)) = configs.iter().find(|(l, _, _)| *l == label) else {
            panic!("unknown configuration {label:?}");
        };
        serve::runtime(&ServeConfig::default())
            .unwrap()
            .block_on(run(&format!("{allocator}, {label}"), reports));
        return;
    }
    println!(
        "{allocator}: {} clients, {} sessions x {TURNS} turns of a 42 KB request; each configuration in its own process",
        knob("FOLDWIRE_BENCH_CLIENTS", 256),
        knob("FOLDWIRE_BENCH_SESSIONS", 4096)
    );
    let me = std::env::current_exe().unwrap();
    for &(label, _, env) in configs {
        let out = std::process::Command::new(&me)
            .env("FOLDWIRE_BENCH_CHILD", label)
            .envs(env.iter().copied())
            .output()
            .unwrap();
        print!("{}", String::from_utf8_lossy(&out.stdout));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
