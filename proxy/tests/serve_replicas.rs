#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Two replicas on one `s3://` state (moto, started by `scripts/s3-server`) behind a loopback
//! round-robin balancer with no session affinity: consecutive turns of a session land on
//! different replicas, each holding its own cached copy of the state. Conditional writes make
//! the losing replica reload and run the turn again, so no turn is lost and no ref is minted
//! twice; every block restores byte-identical from the shared archive.

mod support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use foldwire_core::{SessionId, Wire};
use support::agent::{assert_blocks_restore, run_client};
use support::*;
use tokio::net::{TcpListener, TcpStream};

const TURNS: usize = 30;

/// The S3 URL of a fresh prefix on the test server, or `None` (said) when none runs.
fn s3_state() -> Option<String> {
    let Ok(endpoint) = std::env::var("FOLDWIRE_TEST_S3_ENDPOINT") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the replica test: FOLDWIRE_TEST_S3_ENDPOINT is unset (scripts/s3-server)"
        );
        eprintln!("FOLDWIRE_TEST_S3_ENDPOINT is unset: the replica test was NOT run");
        return None;
    };
    let bucket =
        std::env::var("FOLDWIRE_TEST_S3_BUCKET").unwrap_or_else(|_| "foldwire-test".into());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    Some(format!(
        "s3://{bucket}/replicas-{nanos}?endpoint={endpoint}&allow_http=true&region=us-east-1\
         &access_key_id=foldwire-test&secret_access_key=foldwire-test"
    ))
}

/// A TCP balancer that sends each new connection to the next backend in turn.
async fn round_robin(backends: Vec<SocketAddr>) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let next = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&next);
    tokio::spawn(async move {
        loop {
            let Ok((mut inbound, _)) = listener.accept().await else {
                return;
            };
            let target = backends[counter.fetch_add(1, Ordering::SeqCst) % backends.len()];
            tokio::spawn(async move {
                if let Ok(mut outbound) = TcpStream::connect(target).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    (addr, next)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_behind_round_robin_lose_no_turn_and_mint_no_ref_twice() {
    let Some(state_url) = s3_state() else {
        return;
    };
    let (upstream, _mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let mut replicas = Vec::new();
    for _ in 0..2 {
        let url = state_url.clone();
        replicas.push(
            start_proxy_with(upstream, dir.path(), move |c| {
                c.state = Some(url);
                c.window = 40_000;
            })
            .await,
        );
    }
    let (balancer, connections) = round_robin(replicas).await;
    // A new connection per request, so the balancer alternates replicas turn by turn.
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let wires = [
        Wire::Anthropic,
        Wire::OpenAiChat,
        Wire::OpenAiResponses,
        Wire::Gemini,
    ];
    let mut clients = Vec::new();
    for wire in wires {
        clients.push((
            wire,
            tokio::spawn(run_client(
                client.clone(),
                format!("http://{balancer}"),
                wire,
                format!("replicas-{}", wire.as_str()),
                TURNS,
            )),
        ));
    }
    let backends = foldwire_archive::open(&state_url).unwrap();
    let mut restored = 0;
    for (wire, handle) in clients {
        let run = handle.await.unwrap();
        let id = SessionId::new(run.session.clone()).unwrap();
        // Usage is recorded after the answer went out: the last round's may still be on its
        // way to the store.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let state = loop {
            let (state, _) = backends.state.load(&id).await.unwrap().unwrap();
            if state.usage.len() >= run.acked || std::time::Instant::now() > deadline {
                break state;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        };
        assert!(
            state.turns as usize >= run.acked,
            "{wire}: {} turns stored, {} acknowledged",
            state.turns,
            run.acked
        );
        // Usage is written after each round by whichever replica served it; a write that
        // lost a conditional race must be applied again, not dropped.
        assert!(
            state.usage.len() >= run.acked,
            "{wire}: {} usage samples for {} acknowledged turns: writes were dropped",
            state.usage.len(),
            run.acked
        );
        let mut by_message: BTreeMap<_, Vec<_>> = BTreeMap::new();
        for entry in &state.refs {
            by_message
                .entry(entry.message.clone())
                .or_default()
                .push(entry.r#ref);
        }
        let twice: Vec<_> = by_message.iter().filter(|(_, r)| r.len() > 1).collect();
        assert!(
            twice.is_empty(),
            "{wire}: messages with two refs: {twice:?}"
        );
        let mut refs: Vec<_> = state.refs.iter().map(|r| r.r#ref).collect();
        refs.sort();
        refs.dedup();
        assert_eq!(
            refs.len(),
            state.refs.len(),
            "{wire}: a ref was minted twice"
        );
        assert!(!state.blocks.is_empty(), "{wire}: nothing was folded");
        restored += assert_blocks_restore(&state, &state_url, &run.session, &run.last_sent).await;
    }
    assert!(restored > 0);
    assert!(
        connections.load(Ordering::SeqCst) >= 4 * TURNS,
        "the balancer saw too few connections to have alternated replicas"
    );
}

/// The admin view reads what is stored: a replica that served only the first turn still
/// shows every turn the other replica made since.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_view_of_a_replica_shows_what_the_other_stored() {
    let (upstream, _mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let first = start_proxy_with(upstream, dir.path(), |_| {}).await;
    let second = start_proxy_with(upstream, dir.path(), |_| {}).await;
    let client = reqwest::Client::new();
    for (turn, replica) in [first, second, second, second].into_iter().enumerate() {
        let resp = client
            .post(format!("http://{replica}/v1/messages"))
            .header("x-foldwire-session", "viewed")
            .body(history_body(Wire::Anthropic, turn + 1, 100, false).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
    }
    let seen = admin(first, "viewed").await;
    assert_eq!(seen["state"]["turns"], 4, "{}", seen["state"]["turns"]);
    assert_eq!(seen["source"], "stored");
}
