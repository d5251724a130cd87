#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The circuit breaker: an unreachable or frozen store is skipped after a few failures in a
//! row, probed after the cooldown, and used again once it answers.

use std::sync::Arc;
use std::time::Duration;

use foldwire_archive::faults::{Fault, FaultyStateStore};
use foldwire_archive::{Backends, BreakerConfig};
use foldwire_core::{MemoryStateStore, PendingWrites, SessionId, SessionState, StoreError};

fn config() -> BreakerConfig {
    BreakerConfig {
        failures: 3,
        cooldown: Duration::from_millis(300),
        call_timeout: Duration::from_millis(100),
    }
}

fn guarded(faulty: &Arc<FaultyStateStore>) -> (Backends, Arc<foldwire_archive::Breaker>) {
    let mut b = Backends::memory();
    b.state = faulty.clone();
    b.with_breaker(config())
}

#[tokio::test]
async fn an_outage_opens_the_circuit_and_a_probe_closes_it() {
    let faulty = Arc::new(FaultyStateStore::new(Arc::new(MemoryStateStore::new())));
    let (b, breaker) = guarded(&faulty);
    let s = SessionId::new("s").unwrap();
    b.state
        .save(&s, &SessionState::new(s.clone()), None)
        .await
        .unwrap();

    faulty.set(Fault::Down);
    for _ in 0..3 {
        assert!(b.state.load(&s).await.is_err());
    }
    assert_eq!(faulty.calls(), 4);
    assert!(breaker.stats().open);
    // Open: calls fail at once, with a message that says why, and never reach the store.
    for _ in 0..20 {
        let e = b.state.load(&s).await.unwrap_err();
        assert!(
            matches!(&e, StoreError::Backend { backend, .. } if backend == "breaker"),
            "{e}"
        );
        assert!(e.to_string().contains("failed 3 times in a row"), "{e}");
    }
    assert_eq!(faulty.calls(), 4, "an open circuit still called the store");
    assert_eq!(breaker.stats().skipped, 20);

    // After the cooldown one probe goes through; while the store is still down it opens again.
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert!(b.state.load(&s).await.is_err());
    assert_eq!(faulty.calls(), 5);
    assert!(b.state.load(&s).await.is_err());
    assert_eq!(faulty.calls(), 5, "only one probe per cooldown");
    assert_eq!(breaker.stats().trips, 2);

    // The store is back: the next probe succeeds and the circuit closes.
    faulty.set(Fault::Healthy);
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert!(b.state.load(&s).await.unwrap().is_some());
    assert!(!breaker.stats().open);
    for _ in 0..5 {
        b.state.load(&s).await.unwrap();
    }
    assert_eq!(faulty.calls(), 11);
}

#[tokio::test]
async fn a_frozen_store_costs_one_timeout_per_call_until_the_circuit_opens() {
    let faulty = Arc::new(FaultyStateStore::new(Arc::new(MemoryStateStore::new())));
    let (b, breaker) = guarded(&faulty);
    let s = SessionId::new("frozen").unwrap();
    faulty.set(Fault::Frozen);
    for _ in 0..3 {
        let e = b.state.load(&s).await.unwrap_err();
        assert!(e.to_string().contains("no answer within 100 ms"), "{e}");
    }
    assert!(breaker.stats().open);
    let e = b.state.load(&s).await.unwrap_err();
    assert!(e.to_string().contains("skipped"), "{e}");
    assert_eq!(faulty.calls(), 3);
}

#[tokio::test]
async fn answers_of_a_working_store_never_trip_it() {
    let faulty = Arc::new(FaultyStateStore::new(Arc::new(MemoryStateStore::new())));
    let (b, breaker) = guarded(&faulty);
    let s = SessionId::new("busy").unwrap();
    let state = SessionState::new(s.clone());
    b.state.save(&s, &state, None).await.unwrap();
    for _ in 0..10 {
        // A lost conditional write is an answer, not an outage.
        let e = b.state.save(&s, &state, None).await.unwrap_err();
        assert!(matches!(e, StoreError::Conflict { .. }), "{e}");
        // A missing archived object likewise.
        assert!(b.media.get_content(&s, &"0".repeat(64)).await.is_err());
    }
    assert_eq!(breaker.stats().trips, 0);
    assert!(!breaker.stats().open);
}

/// Writes that land after `after` (or fail then).
fn pending(after: Duration, fails: bool) -> PendingWrites {
    let mut ready = PendingWrites::default();
    ready.push(Box::pin(async move {
        tokio::time::sleep(after).await;
        if fails {
            return Err(StoreError::Backend {
                backend: "archive".into(),
                operation: "put pack".into(),
                source: "refused on purpose".into(),
            });
        }
        Ok(())
    }));
    ready
}

/// A save that waits for another backend's writes is timed from when they finished, and
/// their failures come back as they are without counting against the state store's circuit.
#[tokio::test]
async fn a_save_after_pending_writes_is_judged_on_its_own_part() {
    let faulty = Arc::new(FaultyStateStore::new(Arc::new(MemoryStateStore::new())));
    let (b, breaker) = guarded(&faulty);
    let s = SessionId::new("after").unwrap();
    let empty = SessionState::new(s.clone());
    let mut next = empty.clone();
    next.turns = 1;
    // Writes slower than the call timeout (100 ms): the save still succeeds.
    let v = b
        .state
        .save_change_after(
            &s,
            &empty,
            &next,
            None,
            pending(Duration::from_millis(250), false),
        )
        .await
        .unwrap();
    // Failing writes, more times than opens a circuit: each comes back, nothing is saved,
    // and the state store's circuit stays closed.
    let mut later = next.clone();
    later.turns = 2;
    for _ in 0..5 {
        let e = b
            .state
            .save_change_after(
                &s,
                &next,
                &later,
                Some(&v),
                pending(Duration::from_millis(5), true),
            )
            .await
            .unwrap_err();
        assert!(e.to_string().contains("refused on purpose"), "{e}");
    }
    assert!(!breaker.stats().open);
    assert_eq!(b.state.load(&s).await.unwrap().unwrap(), (next, v));
}

/// Planning a batch reaches no backend, so only the pack writes are judged: failing writes
/// open the circuit even with successful plans between them, and once it is open a plan
/// fails at once (the fold then keeps its originals) without a request to the store.
#[tokio::test]
async fn failing_pack_writes_open_the_circuit_and_then_plans_fail_at_once() {
    let failing = Arc::new(foldwire_archive::faults::FailingStore::new(Arc::new(
        foldwire_archive::object_store::memory::InMemory::new(),
    )));
    let (b, breaker) =
        Backends::from_object_store(failing.clone(), "memory").with_breaker(config());
    let s = SessionId::new("packs").unwrap();
    let batch = |n: u8| -> Vec<(String, bytes::Bytes)> {
        (0..3u8)
            .map(|i| ("x/y".to_owned(), bytes::Bytes::from(vec![n, i, 7])))
            .collect()
    };
    for n in 0..3 {
        let planned = b.media.plan_contents(&s, None, batch(n)).await.unwrap();
        assert!(planned.write.await.is_err());
    }
    assert_eq!(failing.refused(), 3);
    assert!(breaker.stats().open);
    let e = b.media.plan_contents(&s, None, batch(9)).await.unwrap_err();
    assert!(e.to_string().contains("failed 3 times in a row"), "{e}");
    assert_eq!(
        failing.refused(),
        3,
        "an open circuit still reached the store"
    );
}
