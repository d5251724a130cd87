#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! What a turn writes to the state location, in bytes and requests (counts, not timings):
//! sessions of about 2,000 and 5,000 messages (the bench body: tool-use turns with 2,000
//! characters of output) through the actor engine with the `default` pipeline, a first turn
//! and then steady turns that each append one exchange. Side by side in one run:
//!
//! - `whole`: the layout of earlier builds — the whole state document rewritten every turn
//!   (`ObjectStateStore`), one archive object per payload, the last request written whole;
//! - `journal`: the state journal (a turn's delta, compacted now and then), a turn's
//!   originals and media as one pack, the last request as per-turn deltas.
//!
//! Requests are counted by a [`CountingStore`] around the store: moto S3 when
//! `FOLDWIRE_TEST_S3_ENDPOINT` is set (`eval "$(scripts/s3-server env)"`), else memory.
//! Targets (issue 12): per steady turn, state-store bytes ≤ 2 × new message bytes + 4 KB and
//! ≤ 3 requests in all.
//!
//! `cargo bench -p foldwire-benches --bench state_io` (`FOLDWIRE_BENCH_STEADY=N` turns,
//! `FOLDWIRE_BENCH_SIZES=1000,2500` exchanges; `FOLDWIRE_BENCH_EXPLAIN=1` prints which parts
//! of the state the last steady turn changed, by size).

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use foldwire_archive::counting::{CountingStore, Counts};
use foldwire_archive::object_store::ObjectStore;
use foldwire_archive::object_store::memory::InMemory;
use foldwire_archive::{JournalStateStore, ObjectMediaArchive, ObjectStateStore};
use foldwire_core::{
    ArchivedObject, Engine, MediaArchive, Ref, SessionId, StageCx, StateStore, StoreError,
    StoredContent, TurnRequest, Wire,
};
use foldwire_proxy::offline::{LastRequests, store_last_request};
use foldwire_proxy::setup;

const OUTPUT: usize = 2000;

/// The archive of earlier builds: every payload an object of its own (the trait's default
/// batch writes each payload with `put_content`).
#[derive(Debug)]
struct PerUnit(ObjectMediaArchive);

#[async_trait]
impl MediaArchive for PerUnit {
    async fn put(
        &self,
        session: &SessionId,
        r: Ref,
        media_type: &str,
        bytes: Bytes,
    ) -> Result<ArchivedObject, StoreError> {
        self.0.put(session, r, media_type, bytes).await
    }
    async fn get(
        &self,
        session: &SessionId,
        r: Ref,
    ) -> Result<(ArchivedObject, Bytes), StoreError> {
        self.0.get(session, r).await
    }
    async fn list(&self, session: &SessionId) -> Result<Vec<ArchivedObject>, StoreError> {
        self.0.list(session).await
    }
    async fn put_content(
        &self,
        session: &SessionId,
        media_type: &str,
        bytes: Bytes,
    ) -> Result<StoredContent, StoreError> {
        self.0.put_content(session, media_type, bytes).await
    }
    async fn get_content(&self, session: &SessionId, key: &str) -> Result<Bytes, StoreError> {
        self.0.get_content(session, key).await
    }
}

fn knob(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

/// The store counted: moto S3 under a fresh prefix, or memory.
fn base_store(label: &str) -> (Arc<dyn ObjectStore>, &'static str) {
    match std::env::var("FOLDWIRE_TEST_S3_ENDPOINT") {
        Ok(endpoint) => {
            let bucket =
                std::env::var("FOLDWIRE_TEST_S3_BUCKET").unwrap_or_else(|_| "foldwire-test".into());
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos();
            let url = format!(
                "s3://{bucket}/state-io-{label}-{nanos}?endpoint={endpoint}&allow_http=true\
                 &region=us-east-1&access_key_id=foldwire-test&secret_access_key=foldwire-test"
            );
            (foldwire_archive::open(&url).unwrap().store, "s3 (moto)")
        }
        Err(_) => (Arc::new(InMemory::new()), "memory"),
    }
}

struct Layout {
    engine: Engine,
    counting: Arc<CountingStore>,
    requests: Option<LastRequests>,
}

fn layout(journal: bool, label: &str) -> (Layout, &'static str) {
    let (store, backend) = base_store(label);
    let counting = Arc::new(CountingStore::new(store));
    let as_store: Arc<dyn ObjectStore> = counting.clone();
    let state: Arc<dyn StateStore> = if journal {
        Arc::new(JournalStateStore::new(Arc::clone(&as_store), "bench"))
    } else {
        Arc::new(ObjectStateStore::new(Arc::clone(&as_store), "bench"))
    };
    let media: Arc<dyn MediaArchive> = if journal {
        Arc::new(ObjectMediaArchive::new(Arc::clone(&as_store), "bench"))
    } else {
        Arc::new(PerUnit(ObjectMediaArchive::new(
            Arc::clone(&as_store),
            "bench",
        )))
    };
    let registry = setup::registry().unwrap();
    let pipeline = setup::pipeline("default", &registry).unwrap();
    let cx = StageCx::new(registry.clone()).with_archive(media);
    let engine = Engine::builder(pipeline, state, registry)
        .context(cx)
        .workers(1)
        .start()
        .unwrap();
    let requests = journal.then(|| LastRequests::new(Arc::clone(&as_store)));
    (
        Layout {
            engine,
            counting,
            requests,
        },
        backend,
    )
}

/// State-store bytes (journal entries or state.json) in a counts-by-folder map.
fn state_bytes(by: &std::collections::BTreeMap<String, Counts>) -> u64 {
    ["journal", "state.json"]
        .iter()
        .filter_map(|k| by.get(*k))
        .map(|c| c.put_bytes)
        .sum()
}

fn archive_objects(by: &std::collections::BTreeMap<String, Counts>) -> u64 {
    ["media", "packs", "refs"]
        .iter()
        .filter_map(|k| by.get(*k))
        .map(|c| c.puts)
        .sum()
}

fn last_request_bytes(by: &std::collections::BTreeMap<String, Counts>) -> u64 {
    ["last_request", "last_request.d"]
        .iter()
        .filter_map(|k| by.get(*k))
        .map(|c| c.put_bytes)
        .sum()
}

#[derive(Default)]
struct Steady {
    state: Vec<u64>,
    requests: Vec<u64>,
    last_request: Vec<u64>,
    new_bytes: Vec<u64>,
}

fn median(v: &[u64]) -> u64 {
    let mut v = v.to_vec();
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

fn mean(v: &[u64]) -> u64 {
    v.iter().sum::<u64>() / (v.len().max(1) as u64)
}

async fn record(l: &Layout, session: &SessionId, body: &Bytes) {
    match &l.requests {
        Some(r) => r
            .record(r.ticket(), session, Wire::Anthropic, body)
            .await
            .unwrap(),
        None => store_last_request(l.counting.as_ref(), session, Wire::Anthropic, body)
            .await
            .unwrap(),
    }
}

async fn run(turns: usize, steady: usize) {
    let session = SessionId::new(format!("bench-{turns}")).unwrap();
    let mut rows = Vec::new();
    for journal in [false, true] {
        let label = if journal { "journal" } else { "whole" };
        let (l, backend) = layout(journal, &format!("{label}-{turns}"));
        let body = Bytes::from(foldwire_benches::anthropic_turns(turns, OUTPUT));
        let messages = 2 * turns + 2;
        let outcome = l
            .engine
            .run_turn(&session, TurnRequest::new(Wire::Anthropic, body.clone()))
            .await
            .unwrap();
        assert!(
            outcome.report.fail_open.is_none(),
            "{:?}",
            outcome.report.fail_open
        );
        record(&l, &session, &body).await;
        let first = l.counting.puts_by_folder();
        let first_counts = l.counting.counts();
        let mut s = Steady::default();
        let mut prev_len = body.len();
        for k in 1..=steady {
            let body = Bytes::from(foldwire_benches::anthropic_turns(turns + k, OUTPUT));
            let before_by = l.counting.puts_by_folder();
            let before = l.counting.counts();
            let explain = (k == steady && std::env::var_os("FOLDWIRE_BENCH_EXPLAIN").is_some())
                .then(|| futures::executor::block_on(l.engine.snapshot(&session)).unwrap());
            let outcome = l
                .engine
                .run_turn(&session, TurnRequest::new(Wire::Anthropic, body.clone()))
                .await
                .unwrap();
            assert!(outcome.report.fail_open.is_none());
            if let Some(was) = explain {
                // Which parts of the state the turn changed, by size (FOLDWIRE_BENCH_EXPLAIN).
                let now = l.engine.snapshot(&session).await.unwrap();
                let delta = foldwire_archive::delta::StateDelta::between(&was, &now);
                let fields = serde_json::to_value(&delta).unwrap();
                for (name, v) in fields.as_object().unwrap() {
                    println!("  {label} delta.{name}: {} B", v.to_string().len());
                }
            }
            record(&l, &session, &body).await;
            let after_by = l.counting.puts_by_folder();
            let spent = l.counting.counts().since(&before);
            s.state
                .push(state_bytes(&after_by) - state_bytes(&before_by));
            s.last_request
                .push(last_request_bytes(&after_by) - last_request_bytes(&before_by));
            s.requests.push(spent.requests());
            s.new_bytes.push((body.len() - prev_len) as u64);
            prev_len = body.len();
        }
        rows.push(format!(
            "{messages:>6} msgs | {label:<8} | {backend:<10} | first turn: {:>5} archive objects, {:>6} requests, state {:>9} B | steady (median/mean/max): state {:>8}/{:>8}/{:>8} B, last_request {:>8}/{:>8} B, requests {}/{}/{}, new messages {} B (budget {} B)",
            archive_objects(&first),
            first_counts.requests(),
            state_bytes(&first),
            median(&s.state),
            mean(&s.state),
            s.state.iter().max().copied().unwrap_or(0),
            median(&s.last_request),
            mean(&s.last_request),
            median(&s.requests),
            mean(&s.requests),
            s.requests.iter().max().copied().unwrap_or(0),
            median(&s.new_bytes),
            2 * median(&s.new_bytes) + 4096,
        ));
    }
    for row in rows {
        println!("{row}");
    }
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is accepted and ignored.
    let steady: usize = knob("FOLDWIRE_BENCH_STEADY", "20").parse().unwrap();
    let sizes: Vec<usize> = knob("FOLDWIRE_BENCH_SIZES", "1000,2500")
        .split(',')
        .map(|s| s.trim().parse().unwrap())
        .collect();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        for turns in sizes {
            run(turns, steady).await;
        }
    });
}
