#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The last request `serve` keeps for the session commands: a steady turn writes one object
//! of about what it added (not the whole body), reads give back the exact last body, the
//! single-object form of earlier builds still reads, and racing replicas leave a request
//! that was really sent, never a mix.

use std::sync::Arc;

use bytes::Bytes;
use foldwire_archive::counting::CountingStore;
use foldwire_archive::object_store::memory::InMemory;
use foldwire_archive::object_store::path::Path;
use foldwire_archive::object_store::{ObjectStore, ObjectStoreExt};
use foldwire_core::{SessionId, Wire};
use foldwire_proxy::offline::{LastRequests, load_last_request};

/// A body of `turns` exchanges the way a client sends it: the history, a cache marker on
/// the newest message, then the tools after the messages.
fn body(turns: usize) -> Bytes {
    let mut messages = Vec::new();
    for i in 0..turns {
        messages.push(format!(
            r#"{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"t{i}","content":"{}"}}]}}"#,
            format!("output line {i} ").repeat(60)
        ));
        messages.push(format!(
            r#"{{"role":"assistant","content":[{{"type":"tool_use","id":"t{}","name":"bash","input":{{"cmd":"ls {i}"}}}}]}}"#,
            i + 1
        ));
    }
    if let Some(last) = messages.last_mut() {
        last.insert_str(last.len() - 1, r#","cache_control":{"type":"ephemeral"}"#);
    }
    let tools = format!(
        r#"[{{"name":"bash","description":"{}"}}]"#,
        "d".repeat(4000)
    );
    Bytes::from(format!(
        r#"{{"model":"m","max_tokens":100,"messages":[{}],"tools":{tools}}}"#,
        messages.join(",")
    ))
}

#[tokio::test]
async fn a_steady_turn_writes_what_it_added_and_reads_back_exactly() {
    let counting = Arc::new(CountingStore::new(Arc::new(InMemory::new())));
    let recorder = LastRequests::new(counting.clone());
    let session = SessionId::new("steady").unwrap();
    let start = 200;
    let mut bases = 0;
    for t in start..start + 120 {
        let b = body(t);
        let added = b.len() - body(t - 1).len();
        let before = counting.counts();
        recorder
            .record(recorder.ticket(), &session, Wire::Anthropic, &b)
            .await
            .unwrap();
        let spent = counting.counts().since(&before);
        if spent.put_bytes as usize >= b.len() {
            bases += 1;
        } else {
            assert_eq!(spent.requests(), 1, "turn {t}: {spent:?}");
            assert!(
                spent.put_bytes as usize <= 2 * added + 4096,
                "turn {t}: {} bytes for {added} added",
                spent.put_bytes
            );
        }
        if t % 17 == 0 || t == start + 119 {
            let (wire, back) = load_last_request(counting.as_ref(), &session)
                .await
                .unwrap()
                .unwrap();
            assert_eq!(wire, Wire::Anthropic);
            assert!(back == b, "turn {t}: the body read back differs");
        }
    }
    // The first turn, and a compaction now and then: far fewer than the turns.
    assert!(bases <= 3, "{bases} whole writes in 120 turns");
}

#[tokio::test]
async fn the_single_object_of_earlier_builds_still_reads() {
    let store = InMemory::new();
    let session = SessionId::new("old").unwrap();
    let b = body(3);
    let mut payload = b"openai-chat\n".to_vec();
    payload.extend_from_slice(&b);
    store
        .put(&Path::from("sessions/old/last_request"), payload.into())
        .await
        .unwrap();
    let (wire, back) = load_last_request(&store, &session).await.unwrap().unwrap();
    assert_eq!((wire, back), (Wire::OpenAiChat, b));
}

#[tokio::test]
async fn racing_replicas_leave_a_request_that_was_sent() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let a = LastRequests::new(Arc::clone(&store));
    let b = LastRequests::new(Arc::clone(&store));
    let session = SessionId::new("raced").unwrap();
    let bodies: Vec<Bytes> = (50..90).map(body).collect();
    for (i, sent) in bodies.iter().enumerate() {
        // Two replicas behind a load balancer without sticky sessions, turn by turn.
        let recorder = if i % 3 == 0 { &b } else { &a };
        recorder
            .record(recorder.ticket(), &session, Wire::Anthropic, sent)
            .await
            .unwrap();
        let (_, back) = load_last_request(store.as_ref(), &session)
            .await
            .unwrap()
            .unwrap();
        assert!(
            bodies[..=i].contains(&back),
            "turn {i}: read a body that was never sent"
        );
    }
}

#[tokio::test]
async fn a_recording_that_runs_late_does_not_replace_a_newer_one() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let a = LastRequests::new(Arc::clone(&store));
    let session = SessionId::new("late").unwrap();
    let late = a.ticket();
    let newest = body(91);
    a.record(a.ticket(), &session, Wire::Anthropic, &newest)
        .await
        .unwrap();
    a.record(late, &session, Wire::Anthropic, &body(90))
        .await
        .unwrap();
    let (_, back) = load_last_request(store.as_ref(), &session)
        .await
        .unwrap()
        .unwrap();
    assert!(back == newest);
}
